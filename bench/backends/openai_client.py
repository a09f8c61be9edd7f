"""`--backend openai`'s client (its settings and registration: `bench.backends.openai`): any
OpenAI-compatible chat-completions server over HTTP (vLLM's `vllm serve`, SGLang, `transformers
serve`, a hosted API) at `--base-url`.

One request per item: `POST {base_url}/chat/completions` with one user turn, the item's images
first (as `data:` URLs of the files' bytes) and then its text, as the hf backend renders it
(`hooks.inputs.user_message`); `max_tokens` is the run's reply budget (`bench.budgets`: an answer
whose finish_reason is "length" is recorded as cut off), temperature and top-p are the run's, and a
sampled run sends each request the
seed `Sampling.call_seed([item id])` (a greedy one sends neither top-p nor a seed). The server
renders its own chat template and decodes its own text: replies agree with the hf backend's on the
same weights where its template, preprocessing and detokenizer do (tests/bench/
test_backend_openai.py: `transformers serve` on a tiny LLaVA, images included, gives the same text
and token counts; vLLM's server gives the same tokens, but its incremental detokenizer leaves out
byte tokens that form no UTF-8, where transformers writes U+FFFD). A run's `--thinking on|off` goes
as the request's `chat_template_kwargs` ({"enable_thinking": ...}), which vLLM's server and
`transformers serve` pass to the template (tested on `transformers serve`: each setting gets the hf
backend's token counts for that setting); a server that ignores the key answers as its default.

- Startup (before any record is written): `GET {base_url}/models` must answer and list the served
  model (`--served-model`, default `--model`); an unreachable URL, a model it does not serve, a key
  it refuses or an `--api-key-env` variable that is not set is one line naming the URL and the fix.
- Requests: `--concurrency` in flight at once; a connection error, a timeout, HTTP 429 or 5xx is
  retried up to `--max-retries` times with exponential backoff and jitter, or after the server's
  Retry-After; a body cut off before its Content-Length is a connection error too. Past that the
  run stops with one line naming the URL; the records already appended stay, and the same command
  resumes. A 2xx answer that is not a readable chat completion (malformed or truncated JSON, no
  choices, no text) or a 4xx refusal of one request is kept as an invalid record (route
  `invalid:backend`) whose `error` holds the server's words (truncated to ERROR_CHARS), never a
  guess; 401/403 (the key) and 404 (the model went away) stop the run in one line, and so does a
  first batch (of two or more) whose every request is refused in the same words (a setting the
  server rejects, not an item).
- Bounds (`bench.backends.bounded_http`, `bench.backends.openai_answer`): each try of a request
  (connect, send, headers and body together) ends within `--request-timeout-s`, however slowly the
  server drips its bytes (a timeout: retried as above). The body is streamed and read up to
  `--max-response-mb` (plus 1 KB per log-probability alternative asked, max_tokens x (top + 1)); a
  longer one is not read further and is an invalid record saying so, as is a reply longer than
  max_tokens can hold (CHARS_PER_TOKEN a token) or a usage count beyond what was asked. Neither is
  retried or cached: the server gave that answer.
- Cache (`--http-cache`, default RUN/http-cache, `bench.backends.http_cache`): key = sha256 of the
  canonical request (served model, messages with each image's sha256 instead of its bytes,
  sampling, max_tokens, log-prob settings; never the URL or the key); only readable answers are
  stored. A rerun, or another run folder sharing the cache, sends no request already answered. An
  entry is untrusted input: one that is not a regular file, names another key, fails its sha256 or
  the bounds above is a miss with a warning (asked again); a cache that cannot be written (a full
  disk) warns once and the run goes on without it, its answers recorded.
- Option log-probabilities (`--option-logprobs`): the request asks `logprobs` with the top
  `--top-logprobs` alternatives (default 20); each option letter's log p is read from the first generated token's
  alternatives (the token that is the letter itself; failing that, one that is the letter after a
  word-start marker or space). A letter outside them is left out and `logprobs_missing` names it;
  a server that returns no log-probabilities (transformers serve ignores the field) gives
  `option_logprobs` None and `logprobs_missing` saying so, the record holding the generated reply
  only; a server that refuses the field is asked again without it, and the record says that. 20 is
  the OpenAI API's maximum (and vLLM's default `--max-logprobs`, which `vllm serve --max-logprobs N`
  raises): a model whose letters are less likely than its 20 likeliest first tokens (a tiny random
  one) records them missing. A value that is no log-probability (not a number, NaN, infinite, above
  0) is left out too, and `logprobs_missing` quotes it; never read as 0.0.
- Accounting: run.json's `resources` count the requests sent, retries (with their reasons), cache
  hits, the tokens of the server's `usage`, and `usd` from `--usd-per-mtok IN,OUT` (None without
  prices). Cached answers cost nothing and count only as hits.
- Pinned (run.json; a rerun must agree): `served_model`, the name the server answers for, not the
  URL or port (a server restarted elsewhere resumes the run).
- Keys: only from the environment variable `--api-key-env` names, read once at startup and sent as
  `Authorization: Bearer`. The key and the credentials of `--base-url` (`user:password@`, credential
  query values) are never written to run.json, records, the cache or any message: every URL shown
  has them as ***, and whatever the server says has them replaced by *** in each encoding it might
  echo them in (raw, JSON-escaped, URL-encoded, base64; `bench.backends.redact`).

Why httpx and a small retry loop rather than the `openai` SDK: the run needs the raw answer (the
cache stores it; the record keeps a malformed one's own words, which the SDK's typed models turn
into validation errors), and counts every retry and its reason (the SDK retries out of sight); the
loop is forty lines, and httpx is one dependency where the SDK's releases move its HTTP stack
(openai 3.x needs httpx2) and would tie this extra to the vLLM environment's own pin.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import random
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

try:
    import httpx  # the `openai` extra

    from evprobe.bench.backends.bounded_http import Body, deadline_client, get_capped, post_capped
except ModuleNotFoundError:  # open_backend says so in one line
    httpx = None  # type: ignore[assignment]

from evprobe.bench.backends.base import ModelPrompt, Reply, Resources, Sampling
from evprobe.bench.backends.http_cache import RequestCache, request_key, untrusted_json
from evprobe.bench.backends.openai_answer import ERROR_CHARS, AnswerBounds, read_answer
from evprobe.bench.backends.redact import key_env_name, redactor, shown_url
from evprobe.core.errors import InputError
from evprobe.core.json_types import JsonObject, JsonValue

if TYPE_CHECKING:
    from evprobe.bench.backends.openai import OpenAIOptions
    from evprobe.bench.runner import RunConfig

BACKOFF_S = 0.5  # first retry's wait; doubled each retry, capped, times a jitter in [0.5, 1)
BACKOFF_CAP_S = 30.0
RETRY_AFTER_CAP_S = 120.0  # a server's Retry-After is honoured up to this
ERROR_BODY_BYTES = 2**16  # of a refusal or an error answer: its words are ERROR_CHARS at most
MODELS_BYTES = 2**22  # of the /models list
LOGPROB_BYTES = 1024  # allowed per log-probability alternative asked (token, value, its bytes)
MODELS_SHOWN = 10  # served models named when --served-model is not among them
MIME = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".webp": "image/webp", ".gif": "image/gif"}
REFUSED = "HTTP "  # how a record's error begins when the server refused its request (4xx), and only then
START_SERVER = "start it (e.g. `vllm serve MODEL --port 8000` or `transformers serve MODEL --port 8000`)"


def _images(paths: tuple[Path, ...]) -> list[tuple[bytes, str]]:
    """(bytes, MIME type) of each image sent; a clip (`bench.clips`) is sent as its frames, one
    still PNG each, in order, as the hf backend feeds them."""
    from evprobe.bench.clips import frame_pngs

    out = []
    for path in paths:
        data = path.read_bytes()
        frames = frame_pngs(data, str(path)) if path.suffix.lower() == ".png" else None
        out += [(data, MIME.get(path.suffix.lower(), "image/png"))] if frames is None else [(f, "image/png") for f in frames]
    return out


class _Stopped(Exception):
    """Another request of the batch gave up: this one stops instead of retrying."""


class OpenAIBackend:
    """Replies from an OpenAI-compatible server; see the module docstring."""

    name = "openai"
    takes_images = True  # the server refuses images itself if its model takes none

    def __init__(self, config: RunConfig) -> None:
        o: OpenAIOptions = config.backend_options  # type: ignore[assignment]
        if not o.base_url:
            raise InputError("--backend openai needs --base-url (e.g. http://127.0.0.1:8000/v1)")
        self._base = o.base_url.rstrip("/")  # what requests go to; messages show `url`
        self.url = shown_url(self._base)
        self.model = o.served_model or config.source
        self.top_logprobs = o.top_logprobs
        from evprobe.hooks.inputs import template_kwargs

        # the thinking switch, sent as the request's chat_template_kwargs: the server renders the turn
        self.template_kwargs = template_kwargs(config.model.thinking)
        self.key_env = o.api_key_env
        self.secret = _api_key(o.api_key_env, self.url)
        self.redact = redactor(self.secret, self._base)
        self.limit = config.budget_tokens.reply
        self.sampling = Sampling(config.temperature, config.top_p, config.seed)
        self.timeout_s, self.max_retries = float(o.request_timeout_s), o.max_retries
        self.prices = None if o.usd_per_mtok is None else tuple(float(x) for x in o.usd_per_mtok)
        self.max_bytes = int(o.max_response_mb * 1e6)
        self.logprob_bytes = self.limit * (self.top_logprobs + 1) * LOGPROB_BYTES  # when a request asks them
        self.cache = RequestCache(Path(o.http_cache) if o.http_cache else Path(config.out) / "http-cache",
                                  max_bytes=2 * (self.max_bytes + self.logprob_bytes) + 4096)
        self.resources = Resources()
        self.resources.extra = {"requests": 0, "retries": 0, "retry_reasons": {}, "cache_hits": 0,
                                "cache_refused": 0, "usd": None if self.prices is None else 0.0}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._readable = False  # some request of this session got a readable answer
        # identity: a compressed body would be inflated past the cap before it could be counted
        headers = {"Accept-Encoding": "identity", **({"Authorization": f"Bearer {self.secret}"} if self.secret else {})}
        self.client = deadline_client(headers=headers, timeout=httpx.Timeout(self.timeout_s),
                                      limits=httpx.Limits(max_connections=o.concurrency,
                                                          max_keepalive_connections=o.concurrency))
        try:
            self._check_model()
        except BaseException:
            self.client.close()
            raise
        self.pool = ThreadPoolExecutor(o.concurrency, thread_name_prefix="evprobe-openai")

    # --- startup ---------------------------------------------------------------------------------

    def _check_model(self) -> None:
        """The server answers at URL/models and lists the served model, else one line."""
        url = f"{self.url}/models"
        try:
            r = get_capped(self.client, f"{self._base}/models", self.timeout_s, MODELS_BYTES)
        except httpx.HTTPError as err:
            raise self._error(f"cannot reach the server at {self.url} ({self._why(err)}); {START_SERVER}, "
                              "or fix --base-url") from None
        if r.status in (401, 403):
            raise self._error(f"the server at {self.url} refused {self._key_said()} (HTTP {r.status}: "
                              f"{self._words(r)}); {self._key_fix()}")
        if r.status == 404:
            raise self._error(f"{url} answered HTTP 404 ({self._words(r)}); --base-url is the API root that "
                              "/models and /chat/completions hang from, e.g. http://127.0.0.1:8000/v1")
        if not r.ok:
            raise self._error(f"{url} answered HTTP {r.status} ({self._words(r)}); check the server, or fix "
                              "--base-url")
        try:
            ids = [self.redact(str(m["id"])) for m in json.loads(r.content)["data"]] if not r.over else None
        except (ValueError, KeyError, TypeError, RecursionError):
            ids = None
        if ids is None:
            raise self._error(f"{url} did not answer with an OpenAI models list ({self._words(r)}); is --base-url an "
                              "OpenAI-compatible API root (e.g. http://127.0.0.1:8000/v1)?")
        if self.model not in ids:
            shown = ", ".join(repr(x[:200]) for x in ids[:MODELS_SHOWN]) + (" ..." if len(ids) > MODELS_SHOWN else "")
            raise self._error(f"the server at {self.url} does not serve {self.model!r}; it serves "
                              f"{shown or 'no model'}: pass --served-model with one of those names")

    def _key_said(self) -> str:
        return f"the key in ${self.key_env}" if self.key_env else "a request without a key"

    def _key_fix(self) -> str:
        return (f"set {self.key_env} to a key this server accepts" if self.key_env else
                "pass --api-key-env NAME, NAME being the environment variable that holds the key")

    # --- replies ---------------------------------------------------------------------------------

    def __call__(self, prompts: list[ModelPrompt], prepared: Any = None) -> list[Reply]:
        t = time.perf_counter()
        futures = [self.pool.submit(self._reply, p) for p in prompts]
        try:
            wait(futures, return_when=FIRST_EXCEPTION)
        except BaseException:  # Ctrl-C: the requests in flight stop at their next step
            self._stop.set()
            for f in futures:
                f.cancel()
            raise
        failed = [f for f in futures if f.done() and not f.cancelled() and f.exception() is not None]
        if failed:
            self._stop.set()  # the others stop retrying; their readable answers are cached already
            for f in futures:
                f.cancel()
            wait(futures)
            errors = [f.exception() for f in futures if not f.cancelled() and f.exception() is not None]
            raise next((e for e in errors if not isinstance(e, _Stopped)), errors[0])
        outs = [f.result() for f in futures]
        refusals = {reply.error for reply, _ in outs if reply.error and reply.error.startswith(REFUSED)}
        if (not self._readable and len(outs) > 1 and len(refusals) == 1
                and all(reply.error in refusals for reply, _ in outs)):
            # Every request so far refused in the same words: the run's settings, not an item (a
            # field the server rejects, a prompt template too long for its context): stop before
            # a whole run of invalid records is written.
            raise InputError(f"{self.url}/chat/completions refused every request of the first batch alike "
                             f"({refusals.pop()}); change what the server refuses (e.g. --served-model, "
                             "--option-logprobs, the server's context length), then rerun the same command")
        self._readable = self._readable or any(reply.error is None for reply, _ in outs)
        sent = [reply for reply, fresh in outs if fresh]
        self.resources.add(sent, time.perf_counter() - t, calls=len(sent))
        self.resources.extra["cache_refused"] = self.cache.rejected
        if self.prices is not None:
            (usd_in, usd_out), res = self.prices, self.resources
            res.extra["usd"] = round((res.prompt_tokens * usd_in + res.generated_tokens * usd_out) / 1e6, 6)
        return [reply for reply, _ in outs]

    def _reply(self, prompt: ModelPrompt) -> tuple[Reply, bool]:
        """The prompt's reply and whether a request was sent for it (False: from the cache)."""
        images = _images(prompt.images)
        logprobs = prompt.letters is not None
        reply = self._ask(prompt, images, logprobs)
        if isinstance(reply, _Refused) and logprobs and "logprob" in reply.words.lower():
            # A server that refuses the field itself: the generated reply, and the record says why.
            again = self._ask(prompt, images, False)
            if not isinstance(again, _Refused):
                why = f"the server refused logprobs ({reply.words}); the record holds the generated reply only"
                return Reply(again[0].text, again[0].n_prompt_tokens, again[0].n_new_tokens,
                             logprobs_missing=why, cut_off=again[0].cut_off), again[1]
            reply = again
        if isinstance(reply, _Refused):
            return Reply("", error=f"{REFUSED}{reply.status}: {reply.words}"), True
        return reply

    def _ask(self, prompt: ModelPrompt, images: list[tuple[bytes, str]],
             logprobs: bool) -> tuple[Reply, bool] | _Refused:
        """One request (from the cache, else sent with retries) read into a Reply."""
        body, keyed = self._request(prompt, images, logprobs)
        key = request_key(keyed)
        letters = prompt.letters if logprobs else None
        bounds = AnswerBounds.of(self.limit, len(prompt.text), len(images))
        cached = self.cache.get(key)
        if cached is not None:
            reply = read_answer(self.redact.tree(cached), letters, bounds)
            if reply.error is None:
                with self._lock:
                    self.resources.extra["cache_hits"] += 1
                return reply, False
            self.cache.reject(key, reply.error[:200])
        cap = self.max_bytes + (self.logprob_bytes if logprobs else 0)
        r = self._post(body, prompt.key, cap)
        if not r.ok:
            return _Refused(r.status, self._words(r))
        if r.over:  # the rest is never read: a server may send without end
            return Reply("", error=f"the answer is larger than {cap / 1e6:g} MB (--max-response-mb, plus "
                                   f"{LOGPROB_BYTES} bytes per log-probability asked); not read further"
                                   + (f": {self._snippet(r.text, 200)}" if r.content else "")), True
        try:
            # secrets out before anything is kept; NaN and Infinity stay text, which no count or log p is
            answer = self.redact.tree(untrusted_json(self.redact(r.content.decode("utf-8"))))
        except (ValueError, RecursionError) as err:
            why = "nested too deep" if isinstance(err, RecursionError) else self._snippet(str(err), 120)
            return Reply("", error=f"the answer is not JSON ({why}; HTTP {r.status}): "
                                   f"{self._snippet(r.text) or '(an empty body)'}"), True
        reply = read_answer(answer, letters, bounds, self._snippet)
        if reply.error is None:  # only readable answers are kept: a rerun asks a malformed one again
            self.cache.put(key, answer)
        return reply, True

    def _request(self, prompt: ModelPrompt, images: list[tuple[bytes, str]],
                 logprobs: bool) -> tuple[JsonObject, JsonObject]:
        """The request body and the same body keyed for the cache (image hashes for their bytes)."""
        def message(urls: list[str]) -> list[JsonValue]:
            content = [{"type": "image_url", "image_url": {"url": u}} for u in urls]
            return [{"role": "user", "content": [*content, {"type": "text", "text": prompt.text}]}]

        s = self.sampling
        common: JsonObject = {"model": self.model, "max_tokens": self.limit, "temperature": float(s.temperature)}
        if not s.greedy:
            common.update(top_p=float(s.top_p), seed=s.call_seed([prompt.key]))
        if logprobs:
            common.update(logprobs=True, top_logprobs=self.top_logprobs)
        if self.template_kwargs:  # the server's chat template takes the switch (vLLM, transformers serve)
            common["chat_template_kwargs"] = self.template_kwargs
        body = {**common, "messages": message([f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
                                               for data, mime in images])}
        keyed = {**common, "messages": message([f"{mime};sha256:{hashlib.sha256(data).hexdigest()}"
                                                for data, mime in images])}
        return {**body, "stream": False}, keyed

    def _post(self, body: JsonObject, item: str, cap: int) -> Body:
        """POST the body, retrying connection errors, timeouts, 429 and 5xx; the answer otherwise,
        each try within the deadline and read up to `cap` bytes."""
        url = f"{self.url}/chat/completions"
        payload = json.dumps(body).encode("utf-8")
        why, delay = "", 0.0
        for attempt in range(self.max_retries + 1):
            if attempt:
                self._count_retry(why)
                if self._stop.wait(delay):
                    raise _Stopped()
            if self._stop.is_set():
                raise _Stopped()
            try:
                with self._lock:
                    self.resources.extra["requests"] += 1
                r = post_capped(self.client, f"{self._base}/chat/completions", payload,
                                {"Content-Type": "application/json"}, self.timeout_s, cap, ERROR_BODY_BYTES)
            except httpx.TimeoutException:
                why, delay = "timeout", _backoff(attempt)
                continue
            except httpx.TransportError as err:
                why, delay = f"connection ({self._why(err)})", _backoff(attempt)
                continue
            if r.status == 429 or r.status >= 500:
                why = f"HTTP {r.status} ({self._words(r, 120)})"
                delay = _retry_after(r.headers.get("retry-after"))
                delay = _backoff(attempt) if delay is None else delay
                continue
            if r.status in (401, 403):  # every later request would be refused too
                raise self._error(f"{url} refused {self._key_said()} (HTTP {r.status}: {self._words(r)}); "
                                  f"{self._key_fix()}, then rerun the same command to resume")
            if r.status == 404:  # the model or the route went away: no request can succeed
                raise self._error(f"{url} answered HTTP 404 for model {self.model!r} ({self._words(r)}); check that "
                                  "the server still serves it, then rerun the same command to resume")
            return r
        timing = (f"no whole answer within --request-timeout-s {self.timeout_s:g}" if why == "timeout" else why)
        raise self._error(f"{url}: gave up on item {item} after {self.max_retries} retries (last: {timing}); the "
                          "records already written are kept: check the server (or raise --max-retries or "
                          "--request-timeout-s), then rerun the same command to resume")

    def _count_retry(self, why: str) -> None:
        kind = why.split(" (")[0]
        with self._lock:
            extra = self.resources.extra
            extra["retries"] += 1
            extra["retry_reasons"][kind] = extra["retry_reasons"].get(kind, 0) + 1

    # --- the server's words, never the key ---------------------------------------------------------

    def _snippet(self, text: str, limit: int = ERROR_CHARS) -> str:
        return self.redact.snippet(str(text), limit)

    def _error(self, message: str) -> InputError:
        """A one-line error with every secret redacted (a model list, a URL, an exception may hold one)."""
        return InputError(self.redact(message))

    def _words(self, r: Body, limit: int = ERROR_CHARS) -> str:
        """What an HTTP answer says: its error message where it has one, else its body."""
        try:
            data = untrusted_json(self.redact(r.content.decode("utf-8")))
        except (ValueError, RecursionError):
            data = None
        if isinstance(data, dict):
            err = data.get("error", data.get("detail", data.get("message")))
            if isinstance(err, dict):
                err = err.get("message", err)
            if err is not None:
                return self._snippet(err if isinstance(err, str) else json.dumps(err), limit)
        return self._snippet(r.text, limit) or f"an empty body ({r.reason})"

    def _why(self, err: Exception) -> str:
        return self._snippet(f"{type(err).__name__}: {err}" if str(err) else type(err).__name__, 200)

    # --- the Backend protocol ---------------------------------------------------------------------

    def pins(self) -> JsonObject:
        return {"served_model": self.model}

    def close(self) -> None:
        self._stop.set()
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.client.close()


class _Refused:
    """A 4xx answer to one request (not 401, 403, 404, 429): the server's words."""

    def __init__(self, status: int, words: str) -> None:
        self.status, self.words = status, words


def _api_key(env: str | None, url: str) -> str | None:
    if env is None:
        return None
    value = os.environ.get(key_env_name(env), "").strip()
    if not value:
        raise InputError(f"--api-key-env {env}: the environment variable {env} is not set (or empty); export {env} "
                         f"with the key for {url}, or drop --api-key-env for a server that needs no key")
    return value


def _backoff(attempt: int) -> float:
    return min(BACKOFF_CAP_S, BACKOFF_S * 2 ** attempt) * random.uniform(0.5, 1.0)


def _retry_after(value: str | None) -> float | None:
    """Seconds a Retry-After header asks for (a number or an HTTP date), capped; None without one."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
    if not math.isfinite(seconds):
        return None
    return min(RETRY_AFTER_CAP_S, max(0.0, seconds))


__all__ = ["OpenAIBackend"]
