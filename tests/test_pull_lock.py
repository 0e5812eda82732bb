"""One pull of a repository at a time: a second pull (this process's, or another Beamwise's) is refused at once
naming the process and the lock file, instead of both writing one .part file and the first blaming the hub; the
lock is the OS's, so one left by a process that is gone (whatever its pid: a later Beamwise may have the same one)
is taken again, and two pulls never hold it together; a pull that got no list of files leaves no folder behind."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from datetime import datetime

import pytest

from app import model_library as lib
from app import model_pull
from app.cli import main
from app.model_pull import PullError, pull
from app.pull_failures import CLI_WORDS, WINDOW_WORDS
from app.pull_lock import LOCK, holder, pull_lock
from tests.hub_server import CONFIG, REPO, WEIGHTS, Hub
from tests.lock_holder import held_elsewhere

pytestmark = pytest.mark.usefixtures("scratch_models")


def lock_by(pid: int) -> None:
    """The lock a pull of tiny/llama in process `pid` leaves, written as that pull writes it."""
    target = model_pull.destination("tiny/llama")
    target.mkdir(parents=True, exist_ok=True)
    record = {"pid": pid, "since": datetime.now().isoformat(), "token": "theirs"}  # as the release before wrote it
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
            asked, target = len(hub.revisions), model_pull.destination("tiny/llama")
            assert holder(target) == f"process {os.getpid()}"  # the window's list asks while its own pull runs
            refusal = (f"tiny/llama is being downloaded by another Beamwise (process {os.getpid()}, which holds "
                       f"{target / LOCK}); wait for it, or stop it, then pull again.")
            with pytest.raises(PullError, match=f"^{re.escape(refusal)}$"):
                pull("tiny/llama", endpoint=hub.endpoint)
            assert len(hub.revisions) == asked  # refused before the hub was asked
        finally:
            hold.set()
            first.join(30)
    assert failures == []
    target = model_pull.destination("tiny/llama")
    assert (target / "model.safetensors").read_bytes() == WEIGHTS and not (target / LOCK).exists()


def test_a_lock_of_another_live_process_refuses_in_the_words_asked_for():
    target = model_pull.destination("tiny/llama")
    with held_elsewhere(target) as other:
        assert holder(target) == f"process {other.pid}"
        with Hub(REPO) as hub, pytest.raises(PullError, match=rf"\(process {other.pid}, which holds "
                                                             rf"{re.escape(str(target / LOCK))}\).* press Pull "
                                                             rf"again\.$"):
            pull("tiny/llama", endpoint=hub.endpoint, words=WINDOW_WORDS)
        assert len(hub.revisions) == 0


def test_the_lock_of_a_killed_pull_is_taken_again():
    target = model_pull.destination("tiny/llama")
    with held_elsewhere(target) as other:
        other.kill()  # kill -9: its lock file stays, the OS lets go of the lock
        other.wait(30)
        assert (target / LOCK).is_file() and holder(target) is None
    with Hub(REPO) as hub:
        folder = pull("tiny/llama", endpoint=hub.endpoint)
    assert (folder / "model.safetensors").read_bytes() == WEIGHTS and not (folder / LOCK).exists()


@pytest.mark.parametrize("pid", ["gone", "mine"])
def test_a_lock_file_left_by_a_process_that_is_gone_is_taken_whatever_its_pid(pid):
    """Its own pid was "alive" for ever: a container's Beamwise is PID 1 each time, and Windows reuses pids."""
    if pid == "gone":
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
    lock_by(gone.pid if pid == "gone" else os.getpid())
    assert holder(model_pull.destination("tiny/llama")) is None
    with Hub(REPO) as hub:
        folder = pull("tiny/llama", endpoint=hub.endpoint)
    assert (folder / "model.safetensors").read_bytes() == WEIGHTS and not (folder / LOCK).exists()


def test_two_takers_of_a_left_lock_never_both_hold_it(monkeypatch):
    """The second opens the lock file just before the first lets go of it and removes it: it must not hold the
    removed file while a third takes the new one (two takers of a stale lock both held it)."""
    lock_by(os.getpid())
    target = model_pull.destination("tiny/llama")
    first = pull_lock(target, "tiny/llama", CLI_WORDS)
    first.__enter__()
    real_open, opened = os.open, []

    def open_as_the_first_lets_go(*args, **kwargs):
        fd = real_open(*args, **kwargs)
        if not opened:
            opened.append(fd)
            first.__exit__(None, None, None)
        return fd

    with monkeypatch.context() as patched:
        patched.setattr(os, "open", open_as_the_first_lets_go)
        second = pull_lock(target, "tiny/llama", CLI_WORDS)
        second.__enter__()
    try:
        assert opened and (target / LOCK).is_file() and holder(target) == f"process {os.getpid()}"
        with pytest.raises(PullError, match="is being downloaded by another Beamwise"), \
                pull_lock(target, "tiny/llama", CLI_WORDS):
            pass
    finally:
        second.__exit__(None, None, None)
    assert holder(target) is None and not (target / LOCK).exists()


def test_remove_on_the_command_line_is_refused_while_the_model_downloads(capsys):
    with Hub(REPO) as hub:
        folder = pull("tiny/llama", endpoint=hub.endpoint)
    with held_elsewhere(folder) as other:
        assert main(["models", "remove", "tiny--llama", "--yes"]) == 2
        said = capsys.readouterr().err
        assert f"tiny--llama is being downloaded (process {other.pid}, which holds {folder / LOCK}); stop" in said
        assert (folder / "model.safetensors").read_bytes() == WEIGHTS
        with pytest.raises(ValueError, match="is being downloaded"):
            lib.remove(lib.find("tiny--llama"))
    assert main(["models", "remove", "tiny--llama", "--yes"]) == 0 and not folder.exists()


def test_a_pull_that_gets_no_list_of_files_leaves_no_folder():
    with Hub(REPO) as hub, pytest.raises(PullError, match="not found"):
        pull("tiny/other", endpoint=hub.endpoint)
    assert not model_pull.destination("tiny/other").exists()
    assert not model_pull.models_dir().exists()  # nor the models folder it was to go in


def test_a_hub_file_named_as_the_lock_is_refused():
    with Hub({"tiny/evil": {LOCK: b"{}"}}) as hub, pytest.raises(PullError, match="no plain path"):
        pull("tiny/evil", endpoint=hub.endpoint)


def test_a_folder_copied_in_by_hand_is_never_taken_over_by_a_pull(tmp_path, monkeypatch):
    """A pull wrote into a folder of the same name the user had copied in, and added its marker: `models remove`
    then deleted the user's own files with it."""
    from app.model_pull import PullError, destination, pull
    from tests.hub_server import REPO, Hub

    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    mine = destination("tiny/llama")
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("mine", encoding="utf-8")
    with Hub(REPO) as hub, pytest.raises(PullError, match="holds files Beamwise did not download"):
        pull("tiny/llama", endpoint=hub.endpoint)
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]  # no marker: remove will not delete it
