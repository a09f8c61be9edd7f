"""Interventions inside a vLLM engine: per-request steering (and capture) in one batched call.

- batch_map: which flattened token of a forward is whose, at which position (vLLM internals, pinned).
- edits: EngineEdit, one request's residual edit as it travels in SamplingParams.extra_args.
- extension: EvprobeExtension, the worker extension class (EXTENSION names it for vllm.LLM).
- steering: start_engine, check_engine, option_logprobs, generate (imports vllm when called).

Nothing here imports vllm at import time: the package installs in environments without it.
"""
