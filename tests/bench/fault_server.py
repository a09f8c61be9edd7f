"""A small OpenAI-compatible chat server (standard library only) that fails on purpose.

Run as a process: `python fault_server.py PLAN.json LOG.jsonl`; it listens on 127.0.0.1 (an unused
port), prints `PORT <n>` once ready and serves until terminated. It speaks just enough of the API
for `bench.backends.openai`: `GET /v1/models`, `GET /health`, `POST /v1/chat/completions`.

PLAN.json:
  reply: the text every good answer holds (default "A")
  replies: {digest: text} the text of the good answers to chosen requests (others: `reply`)
  models: the model ids /v1/models lists (default ["fault-model"])
  key_env: an environment variable of this process holding the only key accepted (none: no key)
  delay_s: how long a "delay" answer waits before answering (default 2)
  retry_after: the Retry-After header of a 429 (default "1"; a 503 says "0")
  top: [[token, logprob], ...] the first token's alternatives when a request asks logprobs
  faults: {digest: [fault of attempt 1, of attempt 2, ...]}, `digest` naming a request by its
    prompt text and images; attempts past the list, and requests not in it, are answered "ok"
  all: [fault of attempt 1, ...] of every request `faults` does not name
Faults: ok, drop (the connection closed without an answer), delay, 429, 503, 500, malformed
(200, not JSON), truncated (200, JSON cut short, a consistent Content-Length), cut (200, the
connection closed half-way through the body), no_choices, 400, echo_key (400 whose message repeats
the Authorization header), nologprobs (ok without logprobs), refuse_logprobs (400 when logprobs
are asked, ok otherwise).
Hostile answers (bounds): drip (200, then the body one byte every `drip_s`, default 1), drip_headers
(the status line and headers one byte every `drip_s`), huge (200, a readable answer of `huge_mb`
MB, default 300, with its Content-Length), endless (200, a chunked body that never ends), long_reply
(ok, its text `long_chars` characters long, default 40,000,000, usage saying 1 token).
Echoes (secrets): echo, echo_error, echo_text, echo_503: an ok answer's text, a 400's JSON message,
a 400's plain-text body, a 503's message holding every secret the server knows (the Authorization
header it got, a Basic header's user:password and password, and the plan's `echo` strings) in every
encoding: raw, JSON-escaped, URL-encoded (quote, quote_plus), base64 (standard, URL-safe, unpadded).
LOG.jsonl gets one line per request: time, path, digest, attempt, fault, whether the key was right.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def digest(text: str, images: list[bytes]) -> str:
    """A request's name: its prompt text and its images' bytes (items may share a text)."""
    parts = [text, *(hashlib.sha256(b).hexdigest() for b in images)]
    return hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()[:16]


class Handler(BaseHTTPRequestHandler):
    plan: dict[str, Any] = {}
    log_path = ""
    attempts: dict[str, int] = {}
    lock = threading.Lock()

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _log(self, **row: Any) -> None:
        with self.lock, open(self.log_path, "a") as fh:
            fh.write(json.dumps({"t": time.time(), "path": self.path, **row}) + "\n")

    def _key_ok(self) -> bool:
        env = self.plan.get("key_env")
        return env is None or self.headers.get("Authorization") == f"Bearer {os.environ[env]}"

    def _send(self, status: int, body: bytes | str | dict, headers: dict[str, str] | None = None,
              length: int | None = None) -> None:
        data = body if isinstance(body, bytes) else (body if isinstance(body, str) else json.dumps(body)).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data) if length is None else length))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout)
            pass

    def do_GET(self) -> None:
        if self.path == "/health":
            return self._send(200, {"status": "ok"})
        ok = self._key_ok()
        self._log(method="GET", key_ok=ok)
        if not ok:
            return self._send(401, {"error": {"message": "Incorrect API key provided"}})
        if self.path == "/v1/models":
            models = self.plan.get("models", ["fault-model"])
            return self._send(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in models]})
        self._send(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        if self.path != "/v1/chat/completions":
            return self._send(404, {"detail": "Not Found"})
        content = body["messages"][-1]["content"]
        text = [c["text"] for c in content if c["type"] == "text"][-1]
        images = [base64.b64decode(c["image_url"]["url"].split(",", 1)[1]) for c in content if c["type"] == "image_url"]
        key = digest(text, images)
        with self.lock:
            attempt = self.attempts[key] = self.attempts.get(key, 0) + 1
        faults = self.plan.get("faults", {}).get(key, self.plan.get("all", []))
        fault = faults[attempt - 1] if attempt <= len(faults) else "ok"
        ok = self._key_ok()
        self._log(method="POST", digest=key, attempt=attempt, fault=fault, key_ok=ok,
                  n_images=sum(c["type"] == "image_url" for c in body["messages"][-1]["content"]),
                  seed=body.get("seed"), logprobs=body.get("logprobs"))
        if not ok:
            return self._send(401, {"error": {"message": "Incorrect API key provided"}})
        good = self._answer(body, fault, key)
        if fault in ("ok", "nologprobs") or fault == "refuse_logprobs" and not body.get("logprobs"):
            return self._send(200, good)
        if fault == "refuse_logprobs":
            return self._send(400, {"error": {"message": "logprobs are not supported by this server"}})
        if fault == "drop":
            self.close_connection = True
            return
        if fault == "delay":
            time.sleep(float(self.plan.get("delay_s", 2.0)))
            return self._send(200, good)
        if fault == "429":
            return self._send(429, {"error": {"message": "rate limited"}},
                              {"Retry-After": str(self.plan.get("retry_after", "1"))})
        if fault == "503":
            return self._send(503, {"error": {"message": "overloaded, try again"}}, {"Retry-After": "0"})
        if fault == "500":
            return self._send(500, "Internal Server Error")
        if fault == "malformed":
            return self._send(200, '{"id": "x", "choices": [oops')
        if fault == "truncated":
            return self._send(200, json.dumps(good)[:40])
        if fault == "cut":
            data = json.dumps(good).encode()
            self._send(200, data[: len(data) // 2], length=len(data))
            self.close_connection = True
            return
        if fault == "no_choices":
            return self._send(200, {"id": "x", "object": "chat.completion", "choices": []})
        if fault == "400":
            return self._send(400, {"error": {"message": "this prompt is too long for the model"}})
        if fault == "echo_key":
            return self._send(400, {"error": {"message": f"bad request from {self.headers.get('Authorization')}"}})
        if fault in ("drip", "drip_headers", "huge", "endless", "long_reply"):
            return self._hostile(fault, good)
        if fault.startswith("echo"):
            words = self._echoes()
            if fault == "echo":
                good["choices"][0]["message"]["content"] = f"ANSWER: A {words}"
                return self._send(200, good)
            if fault == "echo_text":
                return self._send(400, f"bad request: {words}".encode())
            return self._send(400 if fault == "echo_error" else 503, {"error": {"message": f"bad request: {words}"}})
        raise ValueError(f"unknown fault {fault!r}")

    def _hostile(self, fault: str, good: dict[str, Any]) -> None:
        """Answers that never end, end too slowly or are too big; the client hanging up ends them."""
        pause = float(self.plan.get("drip_s", 1.0))
        try:
            if fault == "long_reply":
                good["choices"][0]["message"]["content"] = "A" * int(self.plan.get("long_chars", 40_000_000))
                return self._send(200, good)
            if fault == "drip_headers":
                head = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nX-Slow: " + b"x" * 100_000
                for i in range(len(head)):
                    self.wfile.write(head[i : i + 1])
                    self.wfile.flush()
                    time.sleep(pause)
            if fault == "drip":
                data = json.dumps(good).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                for i in range(len(data)):
                    self.wfile.write(data[i : i + 1])
                    self.wfile.flush()
                    time.sleep(pause)
            if fault == "huge":
                head, tail = b'{"choices": [{"message": {"content": "', b'"}}]}'
                size = int(float(self.plan.get("huge_mb", 300)) * 1e6)
                self.send_response(200)
                self.send_header("Content-Length", str(size))
                self.end_headers()
                self.wfile.write(head)
                chunk, left = b"x" * 2**20, size - len(head) - len(tail)
                while left > 0:
                    self.wfile.write(chunk[:left])
                    left -= len(chunk)
                self.wfile.write(tail)
            if fault == "endless":
                self.protocol_version = "HTTP/1.1"  # chunked transfer encoding
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                chunk = b"x" * 2**16
                head = b'{"choices": [{"message": {"content": "'
                self.wfile.write(b"%x\r\n%s\r\n" % (len(head), head))
                while True:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        except (BrokenPipeError, ConnectionResetError):  # the client hung up: what the test wants
            pass
        self.close_connection = True

    def _echoes(self) -> str:
        """Every secret this server knows, in every encoding a careless server might echo it in."""
        auth = self.headers.get("Authorization") or ""
        secrets = [auth, auth.removeprefix("Bearer "), *self.plan.get("echo", [])]
        if auth.startswith("Basic "):
            pair = base64.b64decode(auth[6:]).decode()
            secrets += [pair, pair.split(":", 1)[1]]
        forms = []
        for s in filter(None, secrets):
            raw = s.encode()
            forms += [s, json.dumps(s)[1:-1], urllib.parse.quote(s, safe=""), urllib.parse.quote(s),
                      urllib.parse.quote_plus(s), base64.b64encode(raw).decode(),
                      base64.urlsafe_b64encode(raw).decode(), base64.b64encode(raw).decode().rstrip("=")]
        return " | ".join(forms)

    def _answer(self, body: dict[str, Any], fault: str, key: str) -> dict[str, Any]:
        reply = self.plan.get("replies", {}).get(key, self.plan.get("reply", "A"))
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": reply},
                                  "finish_reason": "stop"}
        if body.get("logprobs") and fault != "nologprobs":
            top = [{"token": t, "logprob": v} for t, v in self.plan.get("top", [["A", -0.5], ["B", -1.5]])]
            choice["logprobs"] = {"content": [{"token": top[0]["token"], "logprob": top[0]["logprob"],
                                               "top_logprobs": top[: body.get("top_logprobs", 0)]}]}
        return {"id": "chatcmpl-fault", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [choice], "usage": {"prompt_tokens": len(json.dumps(body["messages"])) // 10,
                                               "completion_tokens": 1, "total_tokens": 0}}


def main(plan_path: str, log_path: str) -> None:
    with open(plan_path) as fh:
        Handler.plan = json.load(fh)
    Handler.log_path = log_path
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
