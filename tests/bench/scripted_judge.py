"""A scripted OpenAI-compatible judge served over real HTTP from the test process (a thread).

`ScriptedJudge(model, reply)` listens on 127.0.0.1 (an unused port) and answers `GET /v1/models`
(listing `model`) and `POST /v1/chat/completions` with `reply(prompt_text)`'s text, so every
decision is known; it keeps every request body it got (`bodies`), so a test reads what was sent
(temperature, max_tokens, response_format). Use as a context manager; `url` is its base URL.
`free_run` writes the free-form run such judges read; `judge_with` runs `evprobe judge` with them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class ScriptedJudge:
    def __init__(self, model: str, reply: Callable[[str], str]) -> None:
        self.model, self.reply = model, reply
        self.bodies: list[dict[str, Any]] = []
        lock = threading.Lock()
        judge = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    return self._send(200, {"object": "list", "data": [{"id": judge.model, "object": "model"}]})
                self._send(404, {"detail": "Not Found"})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                if self.path != "/v1/chat/completions":
                    return self._send(404, {"detail": "Not Found"})
                with lock:
                    judge.bodies.append(body)
                text = [c["text"] for c in body["messages"][-1]["content"] if c["type"] == "text"][-1]
                self._send(200, {"id": "x", "object": "chat.completion", "model": judge.model,
                                 "choices": [{"index": 0, "finish_reason": "stop",
                                              "message": {"role": "assistant", "content": judge.reply(text)}}],
                                 "usage": {"prompt_tokens": 10, "completion_tokens": 5}})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> ScriptedJudge:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def judge_with(folder: Path, scripts: list[Callable[[str], str]], name: str, *extra: str) -> tuple[int, list[ScriptedJudge]]:
    """`evprobe judge FOLDER --n-boot 200 ...extra` with one scripted judge per script (named `name-k`: the request
    cache keys on the served model); the exit code and the judges (their `bodies`)."""
    from evprobe.experiments.cli import main

    judges = [ScriptedJudge(f"{name}-{k}", s) for k, s in enumerate(scripts)]
    for j in judges:
        j.__enter__()
    try:
        flags = [x for j in judges for x in ("--judge", f"{j.model}@{j.url}")]
        return main(["judge", str(folder), "--n-boot", "200", *flags, *extra]), judges
    finally:
        for j in judges:
            j.__exit__()


def free_run(root: Path, policy: str, families_per_system: int = 1) -> Path:
    """A benchmark in root/bench and a scripted policy's free-form run of its answer requests in root/run."""
    from evprobe.bench.generate import GenerateConfig, generate
    from evprobe.experiments.cli import main

    generate(root / "bench", GenerateConfig(families_per_system=families_per_system, subset_per_cell=0), progress=False)
    assert main(["run", "--model", f"policy:{policy}", "--bench", str(root / "bench"), "--out", str(root / "run"),
                 "--protocol", "free", "--requests", "answer_initial,answer_after_test", "--quiet"]) == 0
    return root / "run"
