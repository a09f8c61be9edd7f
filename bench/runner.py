"""`evprobe run`: run a model or a scripted policy on benchmark items and append records.

Resumable: RUN/run.json pins what the run is (model and its file hashes, protocol, regime, dtype,
seed, the prompt template's and the benchmark's items and images hashes; once a model is loaded,
its revision, dtype and chat-template hash); a rerun with the same settings skips finished item ids
and continues; different settings are refused, naming the setting and both values.
Records are appended as whole lines with an fsync after each batch (see `bench.records`), so a
run killed at any moment loses no finished record and never duplicates one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from evprobe.bench.clips import check_clips_as_video, check_video_path
from evprobe.bench.items import Item, item_units
from evprobe.bench.model_config import ModelConfig, as_model_config, model_from_record
from evprobe.bench.manifest import check_item_images, read_families, read_items, read_meta, resolve_image
from evprobe.core.errors import InputError
from evprobe.core.files import atomic_write_json
from evprobe.bench.backends.base import Backend, BackendOptions, ModelPrompt, Reply, Sampling, add_resources
from evprobe.bench.backends.registry import (DEFAULT_BACKEND, BackendSpec, backend_spec, backend_specs, foreign,
                                             options_for, recorded_config, reserve_flags, split_settings)
from evprobe.bench.budgets import CUT_OFF_ROUTE, Budget, reply_budget, thinking_budget
from evprobe.bench.parse import RUBRICS, Parsed, Rubric, parse_reply, reading_of
from evprobe.bench.policies import POLICIES, make_policy
from evprobe.bench.protocols import build_prompt, check_regime, get_protocol, is_json_regime, prompt_template_sha256
from evprobe.bench.records import RECORDS_FILE, RUN_META_FILE, Record, load_records, record_problem
from evprobe.bench.reference import Prices
# what a run selects (bench.selection), importable from here as before
from evprobe.bench.selection import INJECTION_DEFAULT, check_injection, select_items, selection_name  # noqa: F401
from evprobe.core.jobs import Job, JsonlRows, Unit, run_job
from evprobe.core.job_summary import Session
from evprobe.core.json_types import JsonObject
from evprobe.core.lock import folder_lock
from evprobe.core.flags import HELP, setting

# A loaded model is an `evprobe.hooks.handle.Handle`, annotated `Handle` here by name only: bench
# imports hooks inside functions alone (tests/test_architecture.py).
Handle = Any
Replier = Callable[[list[Item], Any], list[Reply]]  # (items, prepared inputs or None) -> replies
POLICY_PREFIX = "policy:"
VideoInput = Literal["frames", "native"]  # how clips reach the model (bench.clips, core.video)
HELP_INJECTION = ("comma-separated information-injection levels to select: 0-3, and -1 for the target-exclusive "
                  "baseline (write --injection=-1,0: a value opening with '-' reads as a flag); level L != 0 needs a "
                  "benchmark generated with --injection L (te for -1)")


@dataclass(frozen=True)
class RunConfig:
    """`evprobe run`: every field is a flag (`--batch-size` for batch_size), with this help, except
    backend_options, whose own fields are the flags of its backend (`RunConfig.of` takes them flat)."""

    model: ModelConfig = setting(help="policy:<name>, tiny:<arch>, a model config (a name in configs/models or a "
                                      "YAML), a hub id or a local folder; the model flags below override its keys")
    bench: str = setting(help="benchmark folder (evprobe generate)")
    out: str = setting(help="run folder (records.jsonl, run.json)")
    protocol: str = setting("direct", HELP["protocol"])
    regime: str = setting("standard", HELP["regime"])
    requests: tuple[str, ...] | None = setting(None, "comma-separated request types and variant names (default: all)")
    injection: tuple[int, ...] | None = setting(None, HELP_INJECTION + "; default: every level in the benchmark")
    limit: int | None = setting(None, "only the first N selected items")
    batch_size: int = setting(8, "items per model call")
    seed: int = setting(0, "seed of the random policy and of sampling (--temperature above 0)")
    shard: str | None = setting(None, HELP["shard"])
    sort_by_length: bool = setting(False, "batch items of similar prompt length together (longest first): less padding")
    # Backends (README: "Backends"; bench.backends.registry): where the replies come from; every
    # record has one format. Each backend's own settings (hf: --prefetch, --decode-cache, ...; openai:
    # --base-url, ...) are its options, flags of `evprobe run` too.
    backend: str = setting(DEFAULT_BACKEND, "where replies come from: hf (transformers, in this process), vllm (a vLLM "
                                            "engine, in this process), openai (an OpenAI-compatible server at "
                                            "--base-url) or a plugin's backend")
    backend_options: BackendOptions | None = setting(
        None, "the backend's own settings (its BackendOptions; None: its defaults); flags of their own")
    temperature: float = setting(0.0, "sampling temperature; 0 = greedy")
    top_p: float = setting(1.0, "nucleus sampling's top-p (with --temperature above 0)")
    runs: int = setting(1, "repeated runs (sampled: --temperature above 0), written as OUT/run-1 ... OUT/run-R, run r "
                           "with seed --seed + r - 1; scores report the mean and spread across runs")
    option_logprobs: bool = setting(False, "also record each option letter's log-probability at the first reply "
                                           "token (protocol direct; records say when a server returns none)")
    video_input: VideoInput = setting("frames", "how a clip benchmark's clips reach the model: frames (one image a "
                                                "frame, any model) or native (one video through the model's video "
                                                "processor; hf backend, a model with a video path)")
    # Budgets (bench.budgets): the reply's new tokens, and a reasoning block's own.
    max_new_tokens: int | None = setting(None, "the reply's token budget (default: the model config's "
                                               "max_new_tokens_<protocol>; json regime: at least max_new_tokens_json)")
    budget: str | None = setting(None, "a seed's published reply budget instead: seed000, seed002-api, "
                                       "seed002-qwen8b or seed002-local (docs: reference/running)")
    thinking_budget: int | None = setting(None, "a reasoning block's own token budget, on top of the reply's: the "
                                                "block is closed when it runs out (hf backend; default: the model "
                                                "config's max_thinking_tokens, else none)")
    rubric: Rubric | None = setting(None, "how the free protocol's replies are read: seed002 (its default: a hedged "
                                          "commitment is its answer, 'neither' abstains) or strict (both invalid)")

    def __post_init__(self) -> None:
        object.__setattr__(self, "model", as_model_config(self.model))  # a bare model string: its defaults
        # the chosen backend's options (its defaults for None); another backend's setting: one line
        object.__setattr__(self, "backend_options", options_for(self.backend, self.backend_options))

    @classmethod
    def of(cls, **settings: Any) -> RunConfig:
        """A RunConfig from flat settings, as the flags and run.json's config spell them: the backend's
        own (`RunConfig.of(..., backend="openai", base_url=URL)`, `prefetch=2`) become its
        backend_options; another backend's setting is refused in one line (`registry.split_settings`)."""
        run_settings, options = split_settings(settings.get("backend", DEFAULT_BACKEND), settings)
        return cls(**run_settings, backend_options=options)

    @property
    def budget_tokens(self) -> Budget:
        """The run's reply and thinking budgets (bench.budgets); a bad setting is one line."""
        return Budget(reply_budget(self.model, self.protocol, self.regime, max_new_tokens=self.max_new_tokens,
                                   preset=self.budget),
                      thinking_budget(self.model, self.thinking_budget))

    @property
    def free_rubric(self) -> Rubric:
        """How the free protocol's replies are read (`bench.parse`): --rubric, else seed 002's."""
        return reading_of(False, self.rubric)

    @property
    def spec(self) -> BackendSpec:
        """The registered backend `backend` names (bench.backends.registry)."""
        return backend_spec(self.backend)

    @property
    def source(self) -> str:
        """What the records and run.json name: the model as loaded (a pinned revision: its local
        snapshot, `model_source`); a policy, or the name a server serves, as given."""
        m = self.model
        return m.model if m.model.startswith(POLICY_PREFIX) or self.spec.served else m.source


# the run's own settings are no backend's flags (bench.backends.registry refuses an options field of these names)
reserve_flags((f.name for f in fields(RunConfig)), "a setting of every run")


class RunJob(Job):
    """`evprobe run` as a job: one record per selected item (unit = item, one condition).

    handle: a model already in memory to run instead of loading `config.model` (which then only
    names it in the records); its weights are not hashed (run.json says `model_source: in_memory`).
    """

    kind = "run"
    meta_file = RUN_META_FILE

    def __init__(self, config: RunConfig, handle: Handle | None = None) -> None:
        super().__init__(config.out, config.shard)
        self.config, self.bench, self.handle = config, Path(config.bench), handle
        get_protocol(config.protocol)
        check_regime(config.regime)
        if config.batch_size <= 0:
            raise InputError(f"--batch-size must be a positive integer, got {config.batch_size}")
        if handle is not None and config.model.model.startswith(POLICY_PREFIX):
            raise InputError(f"--model {config.model.model} is a policy; a handle runs a model, so name it otherwise")
        check_backend_settings(config, handle)
        if config.runs != 1:  # bench.repeats imports this module: its file name, spelled here
            raise InputError(f"--runs {config.runs}: a run folder holds one run; repeated runs are written by "
                             "bench.repeats.run_repeated (evprobe run --runs), OUT/run-1 ... each a run of its own")
        if (Path(config.out) / "runs.json").is_file():
            raise InputError(f"{config.out} is a folder of runs (runs.json); continue them with --runs R")
        self.bench_meta = read_meta(self.bench)  # validated; a missing or bad bench.json is one line
        self.all_items = read_items(self.bench)
        self.items = select_items(self.all_items, config.requests, config.limit, config.injection)
        if config.protocol == "free":  # answer requests only (bench.protocols): refused before any work
            from evprobe.bench.protocols import ANSWER_REQUESTS

            other = next((it for it in self.items if it.request not in ANSWER_REQUESTS), None)
            if other is not None:
                raise InputError(f"--protocol free asks answer requests only, and {other.item_id} is a "
                                 f"{other.variant or other.request} item; select them with --requests "
                                 f"{','.join(ANSWER_REQUESTS)}")
        if config.model.model.startswith(POLICY_PREFIX):
            name = config.model.model[len(POLICY_PREFIX):]
            if name not in POLICIES:
                raise InputError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")
        self.reply_batch: Replier | None = None
        self.backend: Backend | None = None

    def units(self) -> list[Unit]:
        units = item_units(self.items)
        if self.config.sort_by_length:
            # Prompt characters: a proxy for tokens known before the model loads (the images of a
            # batch are alike: units of one image count are batched together). Longest first, so
            # a batch that does not fit in memory fails at the start. A stable sort: ties keep
            # manifest order, and a rerun or a merge plans the same batches.
            c = self.config
            units.sort(key=lambda u: -len(build_prompt(u.value, c.protocol, c.regime)))
        return units

    @property
    def prefetch(self) -> int:  # type: ignore[override]
        """Batches the backend prepares ahead (read after open(): a backend's own setting, hf's --prefetch)."""
        return int(getattr(self.backend, "prefetch", 0))

    def config_free(self) -> Sequence[str]:
        return (*super().config_free(), "sort_by_length", "prefetch")  # the same records either way

    def all_families(self) -> list[str]:
        return [it.family_id for it in self.all_items]

    @property
    def batch_size(self) -> int:
        return self.config.batch_size

    def pinned(self) -> JsonObject:
        c = self.config
        # Everything that changes a record: a rerun into the same folder must agree on all of it.
        m = c.model
        out = {"model": c.source, "protocol": c.protocol, "regime": c.regime,
               "items_sha256": self.bench_meta["items_sha256"], "dtype": m.dtype, "seed": c.seed,
               "attn_implementation": m.attn_implementation, "trust_remote_code": m.trust_remote_code,
               "max_new_tokens": c.budget_tokens.reply, **self.input_pins,
               # what the backend's settings pin (hf: decode_cache, vision_attention)
               **c.backend_options.pins(),  # type: ignore[union-attr]
               # the backend and its decoding; None at the defaults (hf, greedy, no log-probs), so
               # a run.json written before backends resumes
               "backend": None if c.backend == DEFAULT_BACKEND else c.backend,
               "temperature": None if c.temperature == 0 else float(c.temperature),
               "top_p": None if c.temperature == 0 or c.top_p == 1 else float(c.top_p),
               "option_logprobs": True if c.option_logprobs else None,
               "video_input": None if c.video_input == "frames" else c.video_input,
               "thinking": m.thinking,  # None when unset (the template's default), likewise
               # a reasoning block's own budget: absent when none, so a run.json written before resumes
               **({"thinking_budget": c.budget_tokens.thinking} if c.budget_tokens.thinking is not None else {}),
               **({"rubric": c.free_rubric} if c.protocol == "free" else {})}  # how free replies are read (bench.parse)
        if self.backend is not None:  # after open(): what only the loaded model or the server tells
            out.update(self.backend.pins())
        return out

    @cached_property
    def input_pins(self) -> JsonObject:
        """The pins hashed once (pinned() is asked before and after open()): the prompt template text
        (`prompt_template_sha256`), every image of the benchmark (a rerun may select more of them)
        and the model's files (hooks.fingerprint; none for a policy)."""
        from evprobe.hooks.fingerprint import files_sha256, model_fingerprint

        c = self.config
        images = {rel for it in self.all_items for rel in it.images}
        return {"prompt_template_sha256": prompt_template_sha256(c.protocol, c.regime),
                "images_sha256": files_sha256((rel, resolve_image(self.bench, rel)) for rel in images),
                **({} if c.model.model.startswith(POLICY_PREFIX) else
                   {"model_source": "in_memory"} if self.handle is not None else
                   {"model_source": "served"} if c.spec.served else model_fingerprint(c.source))}

    def meta(self) -> JsonObject:
        return {**self.pinned(), "bench": str(self.bench.resolve()),
                "max_new_tokens": self.config.budget_tokens.reply, "config": recorded_config(self.config)}

    def store_at(self, folder: Path) -> JsonlRows:
        return JsonlRows(folder / RECORDS_FILE, lambda row: (row["item_id"], ""), what="record", check=record_problem)

    @classmethod
    def from_meta(cls, meta: JsonObject, out: Path) -> RunJob:
        config = model_from_record(meta["config"])
        # JSON's lists back to the tuples of the config (a key absent from a run.json written
        # before its flag takes the default: every injection level, no prices, ...)
        for name in ("requests", "injection"):
            if config.get(name) is not None:
                config[name] = tuple(config[name])
        return cls(RunConfig.of(**{**config, "out": str(out), "shard": None}))


    def merged_meta(self, metas: Sequence[JsonObject]) -> JsonObject:
        meta = super().merged_meta(metas)
        session = meta.pop("last_session", None)  # run.json's order: ..., n_selected, n_records, last_session
        meta.pop("resources", None)
        spent = [m["resources"] for m in metas if isinstance(m.get("resources"), dict)]
        if spent:  # every shard's spend, summed (peak memory: the largest; seconds: summed over processes)
            total = spent[0]
            for more in spent[1:]:
                total = add_resources(total, more)
            meta["resources"] = total
        return {**meta, "n_selected": len(self.items), "n_records": len(self.items), "last_session": session}

    def open(self) -> None:
        c = self.config
        check_item_images(self.bench, self.items, self.bench_meta)  # before a policy reads or a model loads
        if c.model.model.startswith(POLICY_PREFIX):
            families = {f.family_id: f for f in read_families(self.bench)}
            policy = make_policy(c.model.model[len(POLICY_PREFIX):], self.bench, families,
                                 Prices(**self.bench_meta["prices"]), c.seed)
            if c.protocol == "free":  # a letter means nothing where none was shown: the policy says its answer
                self.reply_batch = lambda batch, prepared=None: [Reply(_in_words(it, policy(it))) for it in batch]
            else:
                self.reply_batch = lambda batch, prepared=None: [Reply(policy(it)) for it in batch]
            return
        from evprobe.bench.backends import open_backend

        if c.video_input == "native":  # before the model loads: what the flags alone refuse
            if not c.spec.native_video:
                native = " or ".join(s.name for s in backend_specs() if s.native_video)
                raise InputError(f"--video-input native is built for the {native} backend; use --video-input frames "
                                 f"with --backend {c.backend}")
            check_clips_as_video(self.bench, self.bench_meta)
        self.backend = open_backend(c, self.handle)
        backend = self.backend
        with_images = [it for it in self.items if it.images]
        if with_images and not backend.takes_images:
            backend.close()
            raise InputError(f"--model {c.source} is a text-only model and {len(with_images)} selected items have images "
                             f"(first: {with_images[0].item_id}); select text-only items (--requests both_given) "
                             "or run a vision-language model")
        if c.video_input == "native":
            try:
                check_video_path(backend.processor, c.source)
            except InputError:
                backend.close()
                raise
        check_context = getattr(backend, "check_context", None)
        if check_context is not None and self.items:
            # The item with the most images (a clip counts its frames), then the longest prompt.
            longest = max(self.items, key=lambda it: (len(it.images), len(it.prompt)))
            try:
                check_context(self.model_prompts([longest])[0])
            except InputError:
                backend.close()
                raise

        def reply_batch(batch: list[Item], prepared: Any = None) -> list[Reply]:
            return backend(self.model_prompts(batch), prepared)

        self.reply_batch = reply_batch

    def close(self) -> None:
        if self.backend is not None:
            self.backend.close()

    def resources(self) -> JsonObject | None:
        """What the backend spent in this session (run.json's `resources`), or None for a policy."""
        return None if self.backend is None else {"backend": self.config.backend, **self.backend.resources.to_json()}

    def model_prompts(self, batch: list[Item]) -> list[ModelPrompt]:
        """The backend's view of the items: rendered text, resolved image paths, option letters."""
        c = self.config
        return [ModelPrompt(it.item_id, build_prompt(it, c.protocol, c.regime),
                            tuple(resolve_image(self.bench, rel) for rel in it.images),
                            tuple(it.options) if c.option_logprobs and it.options else None)
                for it in batch]

    def prepare(self, batch: list[Unit], condition: str) -> Any:
        """A model's inputs for the batch, on the CPU (None for a policy or a backend that
        prepares nothing)."""
        prepare = getattr(self.backend, "prepare", None)
        return None if prepare is None else prepare(self.model_prompts([u.value for u in batch]))

    def compute(self, batch: list[Unit], condition: str, prepared: Any = None) -> list[JsonObject]:
        items = [u.value for u in batch]
        t = time.perf_counter()
        replies = self.reply_batch(items, prepared)  # type: ignore[misc]
        if len(replies) != len(items):
            raise RuntimeError(f"backend {self.config.backend}: {len(replies)} replies for {len(items)} prompts")
        # A record's seconds: its share of the model call. Inputs prepared ahead on a thread are
        # not in it (with --prefetch 0 they are: prepare runs just before).
        per_item = (time.perf_counter() - t) / len(items)
        return [_record(self.config, it, reply, per_item).to_json() for it, reply in zip(items, replies)]


@dataclass(frozen=True)
class RunSummary:
    """What `run` returns: the records of the run's selection and this session's work.

    record: RUN/run.json as written (what the run is: config, pins, n_selected, n_records,
    last_session, resources). resources: the model calls' spend summed over the sessions that
    made one (None for a run that called no model, e.g. a scripted policy)."""

    out: Path
    n_selected: int
    n_records: int
    last_session: Session
    resources: JsonObject | None
    record: JsonObject


def run(config: RunConfig, *, progress: bool = True, handle: Handle | None = None) -> RunSummary:
    """Run `config`; returns its summary (RunSummary), whose `record` is also stored in RUN/run.json.

    handle: a model already in memory (e.g. `evprobe.wrap(model, processor)`) to run instead of
    loading `config.model`, which then names it in the records (see RunJob)."""
    job = RunJob(config, handle)
    with folder_lock(job.out, "evprobe run"):  # run.json below too, not only the job runner's rows
        result = run_job(job, progress=progress)
        session = result.last_session
        assert session is not None  # run_job always times its session
        # run.json: the meta (less the session it recorded before), the counts, this session
        record = {**{k: v for k, v in result.meta.items() if k != "last_session"}, "n_selected": result.n_units,
                  "n_records": len(load_records(job.out / RECORDS_FILE)), "last_session": session.to_json()}
        resources = job.resources()
        if resources is not None:  # this session's spend, added to the earlier sessions' (a resumed run)
            record["resources"] = add_resources(result.meta.get("resources"), resources)
        if job.meta_path().is_file():
            atomic_write_json(job.meta_path(), record)
    return RunSummary(out=job.out, n_selected=record["n_selected"], n_records=record["n_records"],
                      last_session=session, resources=record.get("resources"), record=record)



def check_backend_settings(config: RunConfig, handle: Handle | None) -> None:
    """The backend and its settings, checked before anything loads: sampling values, a model key
    of another backend changed from its default (its options were checked by RunConfig), log-probs
    on a protocol that answers later, then the backend's own checks (`BackendOptions.check`)."""
    c = config
    try:
        Sampling(c.temperature, c.top_p, c.seed)
    except ValueError as err:
        raise InputError(str(err)) from None
    defaults = {f.name: f.default for f in fields(ModelConfig)}
    for spec in backend_specs():
        for name in spec.model_keys if spec.name != c.backend else ():
            if getattr(c.model, name) != defaults[name]:
                raise InputError(foreign(name, spec.name, c.backend))
    if c.model.model.startswith(POLICY_PREFIX) and c.backend != DEFAULT_BACKEND:
        raise InputError(f"--model {c.model.model} is a scripted policy; it needs no --backend {c.backend}")
    if handle is not None and not c.spec.takes_handle:
        holders = " or ".join(s.name for s in backend_specs() if s.takes_handle)
        raise InputError(f"a model in memory runs on the {holders} backend, not {c.backend}")
    if c.rubric is not None and (c.protocol != "free" or c.rubric not in RUBRICS):
        raise InputError(f"--rubric {c.rubric}: choose from {', '.join(RUBRICS)}" if c.rubric not in RUBRICS else
                         f"--rubric reads the free protocol's replies; protocol {c.protocol}'s are read strictly "
                         "(bench.parse); drop --rubric")
    budget = c.budget_tokens  # a bad budget setting: one line, before any work
    if budget.thinking is not None:
        if c.model.model.startswith(POLICY_PREFIX):
            raise InputError(f"--model {c.model.model} is a scripted policy; it writes no reasoning: drop the thinking budget")
        if not c.spec.thinking_budget:
            able = " or ".join(s.name for s in backend_specs() if s.thinking_budget)
            raise InputError(f"a thinking budget ({budget.thinking}) is honoured by the {able} backend, not {c.backend}, "
                             "which cannot close a reasoning block mid-reply; drop it (the reply budget then covers "
                             "the reasoning)")
    if c.option_logprobs and (c.protocol != "direct" or is_json_regime(c.regime)):
        raise InputError(f"--option-logprobs reads the first reply token, which holds the letter only in protocol "
                         f"direct without the json regime (this run: {c.protocol}, {c.regime}); drop the flag")
    c.backend_options.check(c)  # type: ignore[union-attr]


FREE_WORDS = {"yes": "Yes.", "no": "No.", "undetermined": "The evidence does not settle the answer."}


def _in_words(item: Item, reply: str) -> str:
    """A scripted policy's option letter as the sentence it stands for (the free protocol)."""
    return FREE_WORDS[item.options[reply]] if item.options and reply in item.options else reply


def _record(config: RunConfig, item: Item, reply: Reply, seconds: float) -> Record:
    text, n_prompt, n_new = reply.text, reply.n_prompt_tokens, reply.n_new_tokens
    # A backend that returned no readable reply: kept, invalid, with its words (never parsed).
    parsed = (Parsed(False, "invalid:backend") if reply.error is not None
              else parse_reply(item, text, config.regime, letters=config.protocol != "free",
                               rubric=config.free_rubric if config.protocol == "free" else None))
    if reply.cut_off and not parsed.valid and reply.error is None:
        parsed = Parsed(False, CUT_OFF_ROUTE)  # its own route (bench.budgets), whatever else the text lacks
    return Record(
        item_id=item.item_id,
        model=config.source,
        protocol=config.protocol,
        regime=config.regime,
        request=item.request,
        variant=item.variant,
        family_id=item.family_id,
        reply=text,
        valid=parsed.valid,
        route=parsed.route,
        choice=parsed.choice,
        action=parsed.action,
        answer=parsed.answer,
        value=parsed.value,
        n_prompt_tokens=n_prompt,
        n_new_tokens=n_new,
        seconds=round(seconds, 6),
        option_logprobs=reply.option_logprobs,
        logprobs_missing=reply.logprobs_missing,
        error=reply.error,
        cut_off=True if reply.cut_off else None,
        thinking_closed=True if reply.thinking_closed else None,
    )
