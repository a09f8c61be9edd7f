"""Files that survive a kill: atomic whole-file writes and append-only JSONL logs.

Writers are atomic: a file appears whole under its final name or not at all. An append-only log
gets whole lines with one write and an fsync, so a kill leaves at most one torn last line. Every
writer here refuses, in one line, a symbolic link where its file belongs (a dangling
`OUT/records.jsonl` link was written through, creating a file outside OUT) and a FIFO or device
(opened without blocking, checked with fstat).
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import tempfile
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from evprobe.core.errors import IncompleteLineWarning, InputError
from evprobe.core.json_types import JsonObject

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


def ensure_folder(folder: Path) -> bool:
    """Make `folder` and its parents; True if this call made `folder`. A dangling symbolic link or a
    file where a folder belongs is one InputError line naming that path and the fix (not mkdir's
    bare `[Errno 17] File exists`)."""
    folder = Path(folder)
    if folder.is_dir():
        return False
    try:
        folder.mkdir(parents=True)
        return True
    except FileExistsError:
        if folder.is_dir():  # made by another process meanwhile
            return False
    except NotADirectoryError:
        pass
    raise InputError(_not_a_folder(folder)) from None


def _not_a_folder(folder: Path) -> str:
    """Why `folder` cannot be made: the first path on the way to it that is no folder, and the fix."""
    blocker = next((p for p in (*reversed(folder.parents), folder) if os.path.lexists(p) and not p.is_dir()), folder)
    where = "" if blocker == folder else f", so the folder {folder} cannot be made"
    if blocker.is_symlink():
        target = os.readlink(blocker)
        what = "which does not exist" if not blocker.exists() else "which is not a folder"
        return (f"{blocker} is a symbolic link to {target}, {what}{where}; create the folder it points to, "
                "remove the link, or use another --out")
    return f"{blocker} is a file, not a folder{where}; move it aside or use another --out"


def refuse_link(path: Path) -> None:
    """One InputError line if `path` is a symbolic link (dangling or not): evprobe writes regular
    files in its output folders, never through a link to a file elsewhere (lstat, not stat)."""
    if os.path.islink(path):
        raise InputError(f"{path} is a symbolic link to {os.readlink(path)}; evprobe writes only regular files in "
                         "its output folders: remove the link, or use another --out")


def open_for_writing(path: Path, flags: int) -> int:
    """os.open of a file evprobe writes: a link is refused (O_NOFOLLOW), and a FIFO or device too,
    without blocking (O_NONBLOCK: a FIFO without a reader would hold the open for good)."""
    refuse_link(path)
    try:
        fd = os.open(path, flags | _NOFOLLOW | _NONBLOCK, 0o644)
    except OSError as err:
        if err.errno == errno.ELOOP:  # a link planted between the check and the open
            refuse_link(path)
        if err.errno != errno.ENXIO:  # ENXIO: a FIFO with no reader, refused below
            raise
        fd = None
    if fd is None or not stat.S_ISREG(os.fstat(fd).st_mode):
        if fd is not None:
            os.close(fd)
        raise InputError(f"{path} is not a regular file; evprobe writes only regular files in its output folders: "
                         "move it aside, or use another --out")
    return fd


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in the same folder and a rename (a link at
    `path` is refused, not replaced: it was put there by someone)."""
    ensure_folder(path.parent)
    refuse_link(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes 0600; results are for sharing, like the appended logs
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_jsonl(path: Path, rows: Iterable[JsonObject]) -> None:
    text = "".join(json.dumps(row, sort_keys=False) + "\n" for row in rows)
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2) + "\n").encode("utf-8"))


def key_line(text: str, key: Any) -> int:
    """The line of a JSON object's text on which top-level `key` is written (1 when not found)."""
    if isinstance(key, str) and key:
        found = re.search(rf'^\s*{re.escape(json.dumps(key))}\s*:', text, flags=re.MULTILINE)
        if found:
            return text.count("\n", 0, found.start()) + 1
    return 1


def read_complete_lines(path: Path, *, warn: bool = True) -> list[tuple[int, str]]:
    """(line number, text) of every complete, non-blank line of an append-only JSONL log.

    Read only: an unterminated last line (a writer killed mid-append, or one still appending) is
    left out, not cut, and, with `warn`, said so (`warn_incomplete_line`); the writer that resumes
    reads with `warn=False`, since it cuts that line itself (`cut_torn_tail`) and redoes its row.
    A missing file has no lines.
    """
    if not path.is_file():
        return []
    data = path.read_bytes()
    complete = data[: data.rfind(b"\n") + 1]
    if warn and len(complete) < len(data):
        warn_incomplete_line(path)
    try:
        text = complete.decode("utf-8")
    except UnicodeDecodeError as err:
        number = complete[: err.start].count(b"\n") + 1
        raise InputError(f"{path}:{number}: not UTF-8 text (byte {err.start}); move the file aside") from None
    return [(number, line) for number, line in enumerate(text.splitlines(), start=1) if line.strip()]


# The registry of `warn_incomplete_line`: under Python's default filter a file's warning is shown once
# per process, however many readers (and re-reads) of one command leave its last line out.
_INCOMPLETE_WARNED: dict[Any, Any] = {}


def warn_incomplete_line(path: Path) -> None:
    """One `IncompleteLineWarning` line naming `path`: its last line is incomplete and was left out."""
    warnings.warn_explicit(
        f"{path}: its last line is incomplete and was left out (a run may still be writing it, or was "
        "killed: rerun that command to finish it); the file was not changed",
        IncompleteLineWarning, __file__, 0, module=__name__, registry=_INCOMPLETE_WARNED)


def cut_torn_tail(path: Path) -> None:
    """Cut an unterminated last line off an append-only log (with an fsync), so the next append
    starts on a clean line. Only the writer that is about to append calls this; a link or FIFO
    there is refused (`refuse_link`, `open_for_writing`) before anything is computed."""
    refuse_link(path)
    if not path.exists():
        return
    fd = open_for_writing(path, os.O_RDWR)
    with os.fdopen(fd, "r+b") as fh:
        size = os.fstat(fd).st_size
        if size == 0:
            return
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return
        fh.seek(0)
        data = fh.read()
        fh.truncate(data.rfind(b"\n") + 1)
        fh.flush()
        os.fsync(fh.fileno())


def append_log_lines(path: Path, rows: Iterable[JsonObject]) -> None:
    """Append whole JSON lines with one write and an fsync: a kill leaves at most one torn last
    line, which the writer that resumes cuts (`cut_torn_tail`)."""
    data = "".join(json.dumps(row) + "\n" for row in rows).encode("utf-8")
    if not data:
        return
    fd = open_for_writing(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        view = memoryview(data)
        while view:  # os.write may write less than asked
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


