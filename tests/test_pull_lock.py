"""One pull of a repository at a time: a second pull (this process's, or another Beamwise's) is refused at once
naming the process, instead of both writing one .part file and the first blaming the hub; a lock whose process is
gone is taken over; a pull that got no list of files leaves no folder behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from datetime import datetime

import pytest

from app import model_pull
from app.model_pull import PullError, pull
from app.pull_failures import WINDOW_WORDS
from app.pull_lock import LOCK, holder
from tests.hub_server import CONFIG, REPO, WEIGHTS, Hub

pytestmark = pytest.mark.usefixtures("scratch_models")


def lock_by(pid: int) -> None:
    """The lock a pull of tiny/llama in process `pid` leaves, written as that pull writes it."""
    target = model_pull.destination("tiny/llama")
    target.mkdir(parents=True, exist_ok=True)
    record = {"pid": pid, "since": datetime.now().isoformat(), "token": "theirs"}
    (target / LOCK).write_text(json.dumps(record), encoding="utf-8")


def test_a_second_pull_of_the_same_repository_is_refused_at_once_and_the_first_finishes():
    hold, halfway, failures = threading.Event(), threading.Event(), []

    def first_pull() -> None:
        try:
            pull("tiny/llama", endpoint=hub.endpoint,
                 report=lambda p: halfway.set() if p.done > len(CONFIG) else None)
        except Exception as error:  # seen by the test below
            failures.append(error)

    with Hub(REPO, hold=("model.safetensors", hold)) as hub:
        first = threading.Thread(target=first_pull)
        first.start()
        try:
            assert halfway.wait(20)
            asked = len(hub.revisions)
            started = time.monotonic()
            with pytest.raises(PullError, match=rf"^tiny/llama is being downloaded by another Beamwise \(process "
                                                rf"{os.getpid()}\); wait for it, or stop it, then pull again\.$"):
                pull("tiny/llama", endpoint=hub.endpoint)
            assert time.monotonic() - started < 2 and len(hub.revisions) == asked  # the hub was not asked
        finally:
            hold.set()
            first.join(30)
    assert failures == []
    target = model_pull.destination("tiny/llama")
    assert (target / "model.safetensors").read_bytes() == WEIGHTS and not (target / LOCK).exists()


def test_a_lock_of_another_live_process_refuses_in_the_words_asked_for():
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.05)  # its start time must be before the lock's
        lock_by(other.pid)
        assert holder(model_pull.destination("tiny/llama")) == f"process {other.pid}"
        with Hub(REPO) as hub, pytest.raises(PullError, match=rf"\(process {other.pid}\).* press Pull again\.$"):
            pull("tiny/llama", endpoint=hub.endpoint, words=WINDOW_WORDS)
    finally:
        other.kill()
        other.wait()


def test_a_lock_whose_process_is_gone_is_taken_over():
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    lock_by(gone.pid)
    assert holder(model_pull.destination("tiny/llama")) is None
    with Hub(REPO) as hub:
        folder = pull("tiny/llama", endpoint=hub.endpoint)
    assert (folder / "model.safetensors").read_bytes() == WEIGHTS and not (folder / LOCK).exists()


def test_a_pull_that_gets_no_list_of_files_leaves_no_folder():
    with Hub(REPO) as hub, pytest.raises(PullError, match="not found"):
        pull("tiny/other", endpoint=hub.endpoint)
    assert not model_pull.destination("tiny/other").exists()
    assert not model_pull.models_dir().exists()  # nor the models folder it was to go in


def test_a_hub_file_named_as_the_lock_is_refused():
    with Hub({"tiny/evil": {LOCK: b"{}"}}) as hub, pytest.raises(PullError, match="no plain path"):
        pull("tiny/evil", endpoint=hub.endpoint)
