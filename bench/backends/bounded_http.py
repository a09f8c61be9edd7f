"""HTTP with bounds: a total deadline per request and a cap on the body read (the `openai` extra).

httpx's timeouts are per operation (one socket read, one write): a server that drips a byte every
few seconds never trips them. `deadline_client` gives the client's connection pools a network
backend whose every connect, write and read waits at most what is left of the calling thread's
deadline (`deadline`), so connecting, sending, the headers and the body end within it together,
and past it the next operation raises httpx's own timeout. `post_capped` streams the body and
stops at a cap: the connection is closed, not drained (an endless body costs the cap, no more).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx

WRITE_PIECE = 2**16  # a request body is sent in pieces, the deadline checked before each
_local = threading.local()


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Every network operation of this thread inside the block ends `seconds` from now."""
    _local.deadline = time.monotonic() + seconds
    try:
        yield
    finally:
        _local.deadline = None


def _left(timeout: float | None, error: type[Exception]) -> float | None:
    """The wait one operation may take: its own timeout, cut to what is left of the deadline."""
    end = getattr(_local, "deadline", None)
    if end is None:
        return timeout
    left = end - time.monotonic()
    if left <= 0:
        raise error("the request's deadline (--request-timeout-s) passed")
    return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        for start in range(0, len(buffer), WRITE_PIECE) or (0,):
            self._stream.write(buffer[start : start + WRITE_PIECE], _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _Stream(self._stream.start_tls(ssl_context, server_hostname, _left(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self, backend: httpcore.NetworkBackend) -> None:
        self._backend = backend

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> httpcore.NetworkStream:
        return _Stream(self._backend.connect_tcp(host, port, _left(timeout, httpcore.ConnectTimeout), local_address,
                                                 socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Any = None) -> httpcore.NetworkStream:
        return _Stream(self._backend.connect_unix_socket(path, _left(timeout, httpcore.ConnectTimeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def deadline_client(**kwargs: Any) -> httpx.Client:
    """An httpx.Client (`kwargs` as httpx's) whose requests honour `deadline`.

    httpx takes no network backend of its own, so each transport's httpcore pool (the default
    one and any proxy mounts) gets ours in place of its `_network_backend`; an httpx whose
    transports are built otherwise fails here, not with requests left unbounded
    (tests/bench/test_backend_openai_bounds.py drips a body through it)."""
    client = httpx.Client(**kwargs)
    transports = [client._transport, *(t for t in client._mounts.values() if t is not None)]
    pools = [getattr(t, "_pool", None) for t in transports]
    if not all(isinstance(p, httpcore.ConnectionPool) and hasattr(p, "_network_backend") for p in pools):
        client.close()
        raise RuntimeError("this httpx builds its transports otherwise: the request deadline cannot be installed "
                           "(evprobe supports httpx 0.27-0.28)")
    for pool in pools:
        pool._network_backend = _Backend(pool._network_backend)
    return client


@dataclass(frozen=True)
class Body:
    """An HTTP answer read up to a cap: `over` when the body was longer (`content` is then cut)."""

    status: int
    reason: str
    headers: httpx.Headers
    content: bytes
    over: bool

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


def read_capped(r: httpx.Response, cap: int) -> Body:
    """A streamed response's body, stopping once it passes `cap` bytes (its Content-Length says so
    before a byte is read)."""
    declared = r.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        return Body(r.status_code, r.reason_phrase, r.headers, b"", True)
    buf = bytearray()
    for chunk in r.iter_bytes():
        buf += chunk
        if len(buf) > cap:
            return Body(r.status_code, r.reason_phrase, r.headers, bytes(buf[:cap]), True)
    return Body(r.status_code, r.reason_phrase, r.headers, bytes(buf), False)


def get_capped(client: httpx.Client, url: str, seconds: float, cap: int) -> Body:
    """GET `url` within `seconds`, reading at most `cap` bytes."""
    with deadline(seconds), client.stream("GET", url) as r:
        return read_capped(r, cap)


def post_capped(client: httpx.Client, url: str, content: bytes, headers: dict[str, str], seconds: float,
                cap: int, error_cap: int) -> Body:
    """POST within `seconds`, reading at most `cap` bytes of a 2xx body and `error_cap` of another."""
    with deadline(seconds), client.stream("POST", url, content=content, headers=headers) as r:
        return read_capped(r, cap if r.is_success else min(cap, error_cap))


__all__ = ["Body", "deadline", "deadline_client", "get_capped", "post_capped", "read_capped"]
