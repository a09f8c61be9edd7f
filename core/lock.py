"""One writer per output folder: an advisory lock held for a job's whole life.

    with folder_lock(out, "evprobe run"):   # before the first read of OUT's rows, before the model loads
        ...

- The lock is an exclusive `flock` on `OUT/.evprobe.lock` (LOCK_FILE), taken without waiting. The
  file holds its holder: pid, host, command and start time. A second writer is refused at once,
  in one InputError line naming the holder and the fix ("wait for it to finish, or use another
  --out"), before it has read or written anything in OUT.
- A clean release removes the file (and OUT itself when the lock made it and it is still empty, so
  a refused or failed job leaves no empty folder behind); a finished folder holds what it held before.
- kill -9: the kernel drops a dead process's flock, so the next writer gets the lock at once. The
  file it finds still names the dead holder: one `FolderLockWarning` line names it, then the new
  writer takes over (and a job resumes what the dead one left).
- Nesting: the lock is re-entrant within a process, threads included (`run` holds OUT while the
  job runner inside it takes OUT again; the outermost `with` releases it). Locks of different folders are different files, so a job holding OUT (the
  quickstart, a layer sweep, gating) and its steps holding OUT/run, OUT/acts ... never wait on each
  other: every lock is taken without waiting, so nothing can deadlock. A nested lock names its
  outermost command ("evprobe quickstart (evprobe run)").
- A file system without flock (an NFS mount without lockd: ENOLCK; some FUSE and SMB mounts:
  EOPNOTSUPP, ENOSYS, EINVAL): the lock file alone marks the folder, with one warning line per file
  system and process. A file naming a live process on this host, or a process on another host
  (whose liveness cannot be checked from here), refuses the writer, naming the file to delete if
  that process is gone; a file naming a dead process on this host is taken over. Two writers
  starting at the same instant can both pass this check; flock has no such window. We fall back
  rather than refuse: refusing would leave such a mount with no way to run at all.
- Windows (no fcntl): as without flock.

Why fcntl.flock and not the `filelock` package (4.3, installed with huggingface_hub): its flock
lock leaves the lock file in place after release (so every finished folder would carry one, and
every listing of a folder would have to know it), records no holder (only its soft fallback writes
a pid: no host, command or start time for the refusal line), has no notion of a dead holder to
warn about, and falls back only on ENOSYS (ENOLCK, NFS without lockd, is an error there). What is
needed here is ~150 lines over the standard library, the same `fcntl.flock` that bench.generate
already uses for its temporary folders, so no dependency is added.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import socket
import stat
import sys
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from evprobe.core.errors import InputError, OneLineWarning, printable
from evprobe.core.files import ensure_folder
from evprobe.core.json_files import MAX_NESTING, nesting
from evprobe.core.json_types import JsonObject

try:
    import fcntl
except ImportError:  # Windows: no flock; the lock file alone marks the folder (as without flock below)
    fcntl = None  # type: ignore[assignment]

LOCK_FILE = ".evprobe.lock"  # in every output folder while a job writes it; listings of a folder's files skip it
# flock's errors on a file system that cannot lock (rather than "someone holds it")
NO_FLOCK = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EINVAL})
FIX = "wait for it to finish, or use another --out"
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # a link planted as the lock file is refused, never followed
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a FIFO planted as the lock file must not block the open


class FolderLockWarning(OneLineWarning):
    """A lock taken over from a writer that died holding it, or a folder that cannot be locked."""


@dataclass(frozen=True)
class LockInfo:
    """The record this process writes into a folder's lock file while it holds the folder: who holds
    it (`pid`, `host`, `command`, `started`, `argv`) and a `token` by which a soft lock knows its own file.
    What a lock file says when read back (`holder`) is JSON anyone could have written, so it stays JSON."""

    pid: int
    host: str
    command: str
    started: str
    argv: tuple[str, ...]
    token: str

    @classmethod
    def new(cls, command: str) -> LockInfo:
        return cls(os.getpid(), socket.gethostname(), command,
                   datetime.now().astimezone().isoformat(timespec="seconds"), tuple(sys.argv), secrets.token_hex(8))

    def to_json(self) -> JsonObject:
        return {"pid": self.pid, "host": self.host, "command": self.command, "started": self.started,
                "argv": list(self.argv), "token": self.token}


@dataclass
class _Held:
    folder: Path
    path: Path
    fd: int | None  # None: a soft lock (no flock on this file system)
    info: LockInfo
    made: tuple[int, int] | None  # (st_dev, st_ino) of the folder when this lock made it
    pid: int  # the process that took it (a forked child inherits the table, not the lock)


_HELD: dict[str, _Held] = {}  # realpath of the folder -> this process's lock on it (oldest first)
_GUARD = threading.Lock()
_SOFT_WARNED: set[int | None] = set()  # file systems (st_dev) already said to have no flock


@contextmanager
def folder_lock(folder: str | Path, what: str, *, fix: str = FIX) -> Iterator[Path]:
    """Hold the one-writer lock of `folder` (made if missing) while the block runs; `what` names the
    command ("evprobe run") for a refused writer's line, `fix` what that line tells it to do."""
    folder = Path(folder)
    made = ensure_folder(folder)
    key = os.path.realpath(folder)
    with _GUARD:
        mine = [h for h in _HELD.values() if h.pid == os.getpid()]
        held = _HELD.get(key)
    if held is not None and held.pid == os.getpid():  # already ours: the outermost `with` releases it
        yield folder
        return
    command = what if not mine else f"{mine[0].info.command} ({what})"
    lock = _acquire(folder, command, made, fix)
    with _GUARD:
        _HELD[key] = lock
    try:
        yield folder
    finally:
        with _GUARD:
            _HELD.pop(key, None)
        _release(lock)


def holder(folder: str | Path) -> JsonObject | None:
    """What `folder`'s lock file says of its holder (pid, host, command, started), or None: the file's
    JSON object as read (anyone can write the file: a `LockInfo`'s fields, or fewer, or others)."""
    try:
        fd = os.open(Path(folder) / LOCK_FILE, os.O_RDONLY | _CLOEXEC | _NOFOLLOW | _NONBLOCK)
    except OSError:
        return None
    try:
        return _read_info(fd) if _regular(fd) else None
    finally:
        os.close(fd)


def being_written(folder: str | Path) -> bool:
    """Whether a writer holds `folder`, judged from its lock file alone: the file is there and names
    a live process on this host, a process on another host, or no one yet (a writer starting).
    Read only: no flock is taken, so a writer starting at this instant is never refused for it."""
    if not os.path.lexists(Path(folder) / LOCK_FILE):
        return False
    info = holder(folder)
    return not info or info.get("host") != socket.gethostname() or _alive(info.get("pid"))


def describe(info: JsonObject | None) -> str:
    """`evprobe run (pid 123 on host, started 2026-01-01T12:00:00+00:00)`."""
    if not info:
        return "another process (that is just starting: no pid written yet)"
    # read from a file anyone could write: shown with control characters escaped (no raw ANSI escapes)
    command, pid, host, started = (printable(str(info.get(k, "?"))) for k in ("command", "pid", "host", "started"))
    return f"{command} (pid {pid} on {host}, started {started})"


# ---------------------------------------------------------------- taking and giving back


def _acquire(folder: Path, command: str, made: bool, fix: str) -> _Held:
    path = folder / LOCK_FILE
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | _CLOEXEC | _NOFOLLOW | _NONBLOCK, 0o644)
        except FileNotFoundError:  # the folder went meanwhile (its last holder made it and removed it, empty)
            made = ensure_folder(folder) or made
            continue
        except OSError as err:
            raise InputError(f"{folder}: cannot create its lock file {LOCK_FILE} ({err.strerror}); "
                             "use an --out you can write to") from None
        if not _regular(fd):  # a FIFO or device there: reading it was "[Errno 29] Illegal seek"
            os.close(fd)
            raise InputError(f"{path}: the lock file is not a regular file ({_kind(path)}); remove it if no "
                             "evprobe command is running on this folder, or use another --out")
        if fcntl is None:
            return _acquire_soft(folder, fd, command, made, fix, "this system has no flock")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            info = _read_info(fd)
            os.close(fd)
            raise InputError(f"{folder} is being written by {describe(info)}; {fix}") from None
        except OSError as err:
            if err.errno not in NO_FLOCK:
                os.close(fd)
                raise
            return _acquire_soft(folder, fd, command, made, fix, f"flock: {err.strerror}")
        if not same_file(fd, path):  # its holder released and removed it between our open and our flock
            os.close(fd)
            continue
        stale = _read_info(fd)
        if stale:
            warnings.warn(f"{folder}: {describe(stale)} ended without releasing its lock {path} (killed?); "
                          "taking it over", FolderLockWarning, stacklevel=2)
        info = LockInfo.new(command)
        _write_info(fd, info)
        return _Held(folder, path, fd, info, _identity(folder) if made else None, os.getpid())


def _acquire_soft(folder: Path, fd: int, command: str, made: bool, fix: str, why: str) -> _Held:
    """No flock here: the lock file's content alone marks the folder (see the module docstring)."""
    path = folder / LOCK_FILE
    device = (_identity(folder) or (None, None))[0]
    if device not in _SOFT_WARNED:  # once per file system and process, not once per step folder
        _SOFT_WARNED.add(device)
        warnings.warn(f"{folder}: its file system cannot lock files ({why}); evprobe marks its folders with "
                      f"{LOCK_FILE} alone, which a second writer starting at the same instant could miss",
                      FolderLockWarning, stacklevel=2)
    try:
        other = _read_info(fd)
        if other:
            here = other.get("host") == socket.gethostname()
            if not here or _alive(other.get("pid")):
                gone = "" if here else f" (if it no longer runs, delete {path})"
                raise InputError(f"{folder} is being written by {describe(other)}{gone}; {fix}")
            warnings.warn(f"{folder}: {describe(other)} ended without releasing its lock {path} (killed?); "
                          "taking it over", FolderLockWarning, stacklevel=2)
        info = LockInfo.new(command)
        _write_info(fd, info)
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return _Held(folder, path, None, info, _identity(folder) if made else None, os.getpid())


def _release(lock: _Held) -> None:
    """Remove the lock file, then drop the flock: a writer that opened the old file before the removal
    gets it only once it is gone, sees that, and retries on a new file (`same_file`)."""
    if lock.fd is not None:
        try:
            if same_file(lock.fd, lock.path):  # not if the folder was swapped away meanwhile (generate --force)
                lock.path.unlink()
        finally:
            os.close(lock.fd)
    else:
        try:
            fd = os.open(lock.path, os.O_RDONLY | _CLOEXEC | _NOFOLLOW | _NONBLOCK)
        except OSError:  # gone, or replaced by a link: not ours to remove
            fd = None
        if fd is not None:
            try:
                ours = (_read_info(fd) or {}).get("token") == lock.info.token
            finally:
                os.close(fd)
            if ours:
                lock.path.unlink(missing_ok=True)
    if lock.made is not None:
        _remove_if_empty(lock.folder, lock.made)


def _remove_if_empty(folder: Path, identity: tuple[int, int] | None) -> None:
    try:
        if identity is not None and _identity(folder) == identity:
            folder.rmdir()  # only when empty: the job wrote nothing
    except OSError:
        pass


# ---------------------------------------------------------------- the holder's record


def _write_info(fd: int, info: LockInfo) -> None:
    # Written first, cut after: a reader never sees an empty file from a holder that had written one.
    data = (json.dumps(info.to_json()) + "\n").encode("utf-8")
    os.lseek(fd, 0, os.SEEK_SET)
    view = memoryview(data)
    while view:  # os.write may write less than asked
        view = view[os.write(fd, view):]
    os.ftruncate(fd, len(data))
    os.fsync(fd)


def _read_info(fd: int) -> JsonObject | None:
    """The first JSON object in the file (a longer, older record may trail a new one for an instant)."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        text = os.read(fd, 65536).decode("utf-8", "replace")
        if nesting(text) > MAX_NESTING:  # JSON's parser recurses per level: deep brackets were a RecursionError
            return None
        info, _ = json.JSONDecoder().raw_decode(text.lstrip())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def _regular(fd: int) -> bool:
    return stat.S_ISREG(os.fstat(fd).st_mode)


def _kind(path: Path) -> str:
    """'a FIFO', 'a socket', 'a device', 'a folder': what stands at `path` instead of a file."""
    mode = os.stat(path, follow_symlinks=False).st_mode
    return ("a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else
            "a folder" if stat.S_ISDIR(mode) else "a device")


def same_file(fd: int, path: Path) -> bool:
    """Whether the file or folder open as `fd` is still the one at `path` (not removed or swapped)."""
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path, follow_symlinks=False))
    except FileNotFoundError:
        return False


def _identity(folder: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(folder)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0 or os.name != "posix":
        return True  # unreadable, or no signal 0 to ask with (Windows): assume it runs (refusing is safe)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


__all__ = ["LOCK_FILE", "FolderLockWarning", "being_written", "describe", "folder_lock", "holder", "same_file"]
