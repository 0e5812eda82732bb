"""One pull of a repository at a time, across processes and within one: an OS advisory lock (flock on POSIX,
msvcrt.locking on Windows) on a lock file in the model's folder, held through an open handle for the pull's whole
length. The OS lets go when the process ends however it ends (a kill -9, a power cut), so a lock file left behind
is simply taken again: no guess from process ids, which are reused (a container's PID 1, Windows). The file also
records the holder's process id and start, for the message only."""

from __future__ import annotations

import errno
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime
from itertools import takewhile
from pathlib import Path

from app.pull_failures import PullError, PullWords

LOCK = ".beamwise-pull.lock"  # in the model's folder while a pull writes there
RECORD_BYTES = 256  # the record, padded with spaces (JSON allows them) to cover any record written before
LOCKED_BYTE = 1 << 20  # msvcrt locks this byte, past the record: a locked range cannot be read on Windows
TRIES = 20  # a lock is asked again this many times: a look by `holder` takes it for an instant
TRY_EVERY_S = 0.005
BINARY = getattr(os, "O_BINARY", 0)  # Windows: bytes as written
HELD = {errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES, errno.EDEADLK}  # what a lock held elsewhere raises


@contextmanager
def pull_lock(target: Path, repo_id: str, words: PullWords) -> Iterator[None]:
    """Held while a pull of `repo_id` writes into `target`, which is made here if missing and removed again (with
    the folders made for it) if the pull leaves it empty: a pull that got no list of files leaves no folder. A
    second pull (this process's or another's) is refused at once with a PullError naming the process that holds
    the lock and the lock file. OSError where the folder cannot be made or written."""
    made = list(takewhile(lambda folder: not folder.exists(), (target, *target.parents)))  # deepest first
    target.mkdir(parents=True, exist_ok=True)
    try:
        fd = _take(target / LOCK, repo_id, words)
        try:
            yield
        finally:
            _release(target / LOCK, fd)
    finally:
        for folder in made:
            with suppress(OSError):  # not empty: something was downloaded, or another pull holds it now
                folder.rmdir()


def holder(target: Path) -> str | None:
    """Who holds the pull lock of `target` ("process 1234"), or None when no pull does. It asks the OS for the lock
    (never blocking: see `_lock`) and lets go at once; a pull in this very process counts as holding it too (the
    lock belongs to the pull's own open file, not to the process)."""
    lock = target / LOCK
    while True:
        try:
            fd = os.open(lock, os.O_RDONLY | BINARY)
        except OSError:  # no lock file: no pull
            return None
        try:
            if not _lock(fd, shared=True):
                return _recorded(lock)
            _unlock(fd)
            if _same_file(fd, lock):  # else its pull removed it meanwhile: look at the one there now
                return None
        finally:
            os.close(fd)


def being_pulled(target: Path) -> str | None:
    """What `models list`, `models info` and a run say of a model a pull (another process's or this one's) is
    writing into now: "being downloaded (process 1234); use it once the pull has finished." Pulling it again or
    removing it would only meet that pull's lock. None where no pull holds `target`."""
    pulling = holder(target)
    return None if pulling is None else f"being downloaded ({pulling}); use it once the pull has finished."


def _take(lock: Path, repo_id: str, words: PullWords) -> int:
    """The open, locked lock file (its descriptor), with this process recorded in it. On POSIX a lock taken on a
    file its last holder has just removed is let go and taken afresh on the file now at that path."""
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | BINARY, 0o644)
        if not _lock(fd, shared=False):
            os.close(fd)
            raise PullError(f"{repo_id} is being downloaded by another Beamwise ({_recorded(lock)}, which holds "
                            f"{lock}); wait for it, or stop it, then {words.again}.")
        if _same_file(fd, lock):
            break
        _unlock(fd)
        os.close(fd)
    record = json.dumps({"pid": os.getpid(), "since": datetime.now().isoformat()}).ljust(RECORD_BYTES)
    try:  # over the last holder's record: no truncation under the range msvcrt holds locked
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, record.encode("utf-8"))
    except OSError:
        _release(lock, fd)
        raise
    return fd


def _release(lock: Path, fd: int) -> None:
    """Remove the lock file and let go. On POSIX it is removed while still locked, so that a pull that opened this
    file meanwhile finds it gone once it has the lock (`_same_file`); Windows removes no file that is open, so
    there it goes after the close (and stays where another pull has opened it meanwhile)."""
    if os.name != "nt":
        with suppress(OSError):
            lock.unlink()
    _unlock(fd)
    os.close(fd)
    if os.name == "nt":
        with suppress(OSError):
            lock.unlink()


def _lock(fd: int, shared: bool) -> bool:
    """Whether the OS lock on `fd` was taken; asked TRIES times (a look by `holder` holds it for an instant)."""
    for attempt in range(TRIES):
        try:
            _try_lock(fd, shared)
            return True
        except OSError as error:
            if error.errno not in HELD:
                raise
        if attempt + 1 < TRIES:
            time.sleep(TRY_EVERY_S)
    return False


def _try_lock(fd: int, shared: bool) -> None:
    if os.name == "nt":
        import msvcrt

        os.lseek(fd, LOCKED_BYTE, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)  # exclusive only: two looks at once wait TRIES for each other
    else:
        import fcntl

        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)


def _unlock(fd: int) -> None:
    with suppress(OSError):
        if os.name == "nt":
            import msvcrt

            os.lseek(fd, LOCKED_BYTE, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
        else:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_UN)


def _same_file(fd: int, lock: Path) -> bool:
    try:
        now, held = os.stat(lock), os.fstat(fd)
    except OSError:
        return False
    return (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)


def _recorded(lock: Path) -> str:
    """The holder as its lock file records it: "process 1234"; a pull that has just taken it may not have written
    it yet."""
    try:
        return f"process {int(json.loads(lock.read_text(encoding='utf-8'))['pid'])}"
    except (OSError, ValueError, KeyError, TypeError):
        return "a process that is starting"
