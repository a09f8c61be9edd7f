"""A request-hash cache of HTTP answers: a request already answered is never sent (or paid) again.

Key: the sha256 of the request's canonical JSON (sorted keys, no spaces), as the caller builds it
(`bench.backends.openai` puts each image's sha256 there in place of its bytes and never the API
key). Entry: one file per key, `FOLDER/ab/abcdef....json`, holding `{"key", "answer_sha256",
"answer"}`, written atomically (a temporary file and a rename), so a run killed mid-write leaves
either the whole entry or none; any number of threads and processes (shards) may share a folder.
Only answers the caller could read are stored, with secrets already redacted.

The folder is untrusted input (it may be shared, copied, edited, or sit on a full disk):
- an entry is read only if it is a regular file (lstat, then opened O_NONBLOCK | O_NOFOLLOW: a
  FIFO, a device or a link never blocks or redirects the read) no larger than `max_bytes`, whose
  `key` is the key asked for (an entry copied under another key's name) and whose `answer_sha256`
  matches its answer (an edited answer); the caller then checks the answer's schema and bounds
  (`reject` when they fail);
- anything else is a miss with one warning line naming the file and why (the first
  WARNINGS_SHOWN of them; `rejected` counts all): the request is sent again and its answer
  replaces the entry;
- a write that fails (a full disk, a folder that cannot be made) warns once and the session goes
  on without caching: the answer is still recorded by the caller, only a later rerun into another
  folder pays for it again.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import stat
import threading
import warnings
from pathlib import Path
from typing import Any

from evprobe.core.errors import InputError, OneLineWarning
from evprobe.core.files import atomic_write_bytes

WARNINGS_SHOWN = 5  # rejected entries named one by one; the rest only counted


def request_key(request: Any) -> str:
    """The sha256 (hex) of `request`'s canonical JSON."""
    text = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def answer_sha256(answer: Any) -> str:
    return request_key(answer)  # the same canonical JSON


def untrusted_json(data: bytes | str) -> Any:
    """JSON from a server or a cache file, with no number that is not finite: NaN, Infinity and an
    overflowing 1e999 stay text (no count or log-probability), so what is stored reads back the
    same. ValueError (UnicodeDecodeError included) or RecursionError when it is no JSON."""
    def number(text: str) -> float | str:
        value = float(text)
        return value if math.isfinite(value) else text

    return json.loads(data, parse_constant=str, parse_float=number)


class RequestCache:
    """Answers by request key, in `folder` (made on the first write); entries larger than
    `max_bytes` are refused unread."""

    def __init__(self, folder: Path, max_bytes: int = 64 * 2**20) -> None:
        self.folder, self.max_bytes = Path(folder), max_bytes
        self.rejected = 0
        self.writable = True
        self._lock = threading.Lock()

    def path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str) -> Any | None:
        """The stored answer, or None (never stored, or refused: see the module docstring)."""
        path = self.path(key)
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return None
        except OSError as err:
            return self._refuse(path, f"cannot be read ({err.strerror})")
        if not stat.S_ISREG(info.st_mode):
            return self._refuse(path, f"is {_kind(info.st_mode)}, not a regular file")
        if info.st_size > self.max_bytes:
            return self._refuse(path, f"holds {info.st_size:,} bytes, more than the {self.max_bytes:,} an answer may")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
        except OSError as err:
            return self._refuse(path, f"cannot be read ({err.strerror})")
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):  # swapped since the lstat
                return self._refuse(path, "is not a regular file")
            data = fh.read(self.max_bytes + 1)
        try:
            entry = untrusted_json(data)
        except (ValueError, RecursionError):
            return self._refuse(path, "is not readable JSON")
        if not isinstance(entry, dict) or set(entry) != {"key", "answer_sha256", "answer"}:
            return self._refuse(path, 'is not an entry of this cache ({"key", "answer_sha256", "answer"})')
        if entry["key"] != key:
            return self._refuse(path, "names another request's key (copied or renamed)")
        if entry["answer_sha256"] != answer_sha256(entry["answer"]):
            return self._refuse(path, "holds an answer whose sha256 is not the one stored with it (edited)")
        return entry["answer"]

    def reject(self, key: str, why: str) -> None:
        """The caller found the entry's answer unreadable or out of bounds: a miss, said once."""
        self._refuse(self.path(key), f"holds an answer this request cannot have ({why})")

    def put(self, key: str, answer: Any) -> None:
        """Store the answer; a failure warns once and turns the cache off for this session."""
        if not self.writable:
            return
        entry = {"key": key, "answer_sha256": answer_sha256(answer), "answer": answer}
        path = self.path(key)
        try:
            if path.is_symlink():  # a refused link is replaced, never written through
                path.unlink()
            atomic_write_bytes(path, json.dumps(entry, ensure_ascii=False).encode("utf-8"))
        except (OSError, InputError) as err:
            with self._lock:
                if not self.writable:
                    return
                self.writable = False
            why = os.strerror(err.errno) if isinstance(err, OSError) and err.errno else str(err)
            if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
                why = f"the disk is full: {why}"
            warnings.warn(f"cannot write the http cache at {self.folder} ({why}); this run goes on without it: "
                          "every answer is still recorded in records.jsonl, but another folder sharing the cache "
                          "would ask them again (free the disk or pass another --http-cache)", OneLineWarning,
                          stacklevel=2)

    def _refuse(self, path: Path, why: str) -> None:
        with self._lock:
            self.rejected += 1
            n = self.rejected
        if n <= WARNINGS_SHOWN:
            more = "" if n < WARNINGS_SHOWN else " (further refused entries are counted in run.json, not named)"
            warnings.warn(f"http cache entry {path} {why}; treated as a miss: the request is sent again and its "
                          f"answer replaces the entry{more}", OneLineWarning, stacklevel=3)
        return None


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"
