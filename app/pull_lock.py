"""One pull of a repository at a time, across processes: a lock file in the model's folder, made with
O_CREAT | O_EXCL (which Windows has too) and holding the process id; a lock whose process is gone is stale and taken
over. Without it, a second pull wrote into the same .part files and the first then blamed the hub."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime
from itertools import takewhile
from pathlib import Path

from app.processes import alive_since
from app.pull_failures import PullError, PullWords

LOCK = ".beamwise-pull.lock"  # in the model's folder while a pull writes there
FRESH_S = 10.0  # an unreadable lock younger than this is being written by the pull that has just made it


@contextmanager
def pull_lock(target: Path, repo_id: str, words: PullWords) -> Iterator[None]:
    """Held while a pull of `repo_id` writes into `target`, which is made here if missing and removed again (with
    the folders made for it) if the pull leaves it empty: a pull that got no list of files leaves no folder. A
    second pull is refused at once with a PullError naming the process that holds the lock. OSError where the
    folder cannot be made or written."""
    made = list(takewhile(lambda folder: not folder.exists(), (target, *target.parents)))  # deepest first
    target.mkdir(parents=True, exist_ok=True)
    try:
        token = _take(target / LOCK, repo_id, words)
        try:
            yield
        finally:
            _release(target / LOCK, token)
    finally:
        for folder in made:
            with suppress(OSError):  # not empty: something was downloaded, or another pull holds it now
                folder.rmdir()


def holder(target: Path) -> str | None:
    """Who holds the pull lock of `target` ("process 1234"), or None when no live pull does."""
    lock = target / LOCK
    try:
        held = json.loads(lock.read_text(encoding="utf-8"))
        pid, since = int(held["pid"]), str(held["since"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):  # being written this instant, or left half-written by a crash
        return "a process that is starting" if _age(lock) < FRESH_S else None
    return f"process {pid}" if alive_since(pid, since) else None


def _take(lock: Path, repo_id: str, words: PullWords) -> str:
    """Make the lock; its token, so that only this pull removes it. A stale lock is removed and made afresh once."""
    token = uuid.uuid4().hex
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            who = holder(lock.parent)
            if who is not None:
                raise PullError(f"{repo_id} is being downloaded by another Beamwise ({who}); wait for it, or stop "
                                f"it, then {words.again}.") from None
            lock.unlink(missing_ok=True)  # its process is gone: a crash, a kill, a power cut
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            json.dump({"pid": os.getpid(), "since": datetime.now().isoformat(), "token": token}, file)
        return token
    raise PullError(f"{repo_id} is being downloaded by another Beamwise that has just started; wait for it, or "
                    f"stop it, then {words.again}.")


def _release(lock: Path, token: str) -> None:
    with suppress(OSError, ValueError, AttributeError):
        if json.loads(lock.read_text(encoding="utf-8")).get("token") == token:
            lock.unlink()


def _age(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return FRESH_S
