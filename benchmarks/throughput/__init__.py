"""The measurement code of benchmarks/gpu_throughput.py (the entry point: arguments and `main`).

One concept per module:
  shapes           the seeds' published model shapes, anchors, model lists, shaped configs and processors
  results          the typed result records (the JSON is their dataclasses.asdict), section names, the goal
  availability     why a section does not run for a model (it does not apply)
  timing           device clocks, interleaved rounds, peak memory, SDPA counting, freeing memory, the budget
  models           building a tiny model or a random-weight model of a shape
  items            the benchmark rows the sections read
  protocol_timing  the throughput section
  hook_costs       the capture, steering and dose_response sections
  settings         the speed-setting sections (decode_cache, vision_attention, sort_by_length, prefetch)
  invariance       the batch_invariance section
  ratios           the ratios section (Table 50 and the hardware roofline)
  model_run        one model through every section, each guarded
  output           the stdout table and the JSON file
"""
