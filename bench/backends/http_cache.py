"""A request-hash cache of HTTP answers: a request already answered is never sent (or paid) again.

Key: the sha256 of the request's canonical JSON (sorted keys, no spaces), as the caller builds it
(`bench.backends.openai` puts each image's sha256 there in place of its bytes and never the API
key). Value: the answer's JSON, one file per key, `FOLDER/ab/abcdef....json`, written atomically
(a temporary file and a rename), so a run killed mid-write leaves either the whole answer or
none; any number of threads and processes (shards) may share a folder. Only answers the caller
could read are stored; a file that is no longer readable JSON is a miss and is overwritten.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from evprobe.core.files import atomic_write_bytes


def request_key(request: Any) -> str:
    """The sha256 (hex) of `request`'s canonical JSON."""
    text = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class RequestCache:
    """Answers by request key, in `folder` (made on the first write)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str) -> Any | None:
        """The stored answer, or None (never stored, or unreadable)."""
        try:
            return json.loads(self.path(key).read_bytes())
        except (OSError, ValueError):
            return None

    def put(self, key: str, answer: Any) -> None:
        atomic_write_bytes(self.path(key), json.dumps(answer, ensure_ascii=False).encode("utf-8"))
