"""The analysis layer: what a researcher calls on their own data, below the CLI and above the model
side and the probes (experiments -> analysis -> probes, hooks -> core). It imports no benchmark
module (tests/test_architecture.py): the benchmark's experiments are its clients.

- `analysis.label_null`: the label-free null directions of a steering claim (directions the data
  produce once the label carries nothing), from arrays;
- `analysis.specificity`: the rank test of a cross-fitted steering effect against null directions
  given the same choice, and its printed verdict.
"""
