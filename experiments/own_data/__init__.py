"""The pipeline's experiments on a user's own prompts, images, labels and families: the same
statistics as on the benchmark, as library calls that return tidy pandas DataFrames and the same
plots.

    evprobe.steering_dose_response(handle, prompts, images, direction=d, candidates=["A", "B"], target="A",
                                   families=families, alphas=(-1, 0, 1))   -> DoseResponseResult
    evprobe.pair_patching(handle, pairs, families=..., candidates=..., answers=...)  -> PairPatchingResult
    evprobe.paired_effects(frame, baseline="unsteered", measures=["log_odds"])  -> DataFrame

Each resamples whole families (core.bootstrap), and each but paired_effects reads a model through
hooks (the intervention core); the benchmark's `evprobe patching` computes its rows and tables with the same
functions (experiments/patching/job.py), and `evprobe dose-response` builds its curves with the same
estimator (experiments.own_data.effects, which `evprobe.paired_effects` offers for readouts from
anywhere) and shares the null statistics, the label-free null and the cross-fitted rank test
(analysis.label_null, analysis.specificity).
"""
