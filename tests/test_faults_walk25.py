"""Rows of the README's faults table that a walkthrough found broken (session 25)."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import main
from app.journal_import import open_session_store

NOT_UTF8 = "ab\udcffcd"  # how Python hands over an argument holding the byte 0xff
TINY = ["--model", "synthetic:tiny-llama"]


@pytest.mark.parametrize("command", [["gui", "--question", NOT_UTF8, "--screenshot", "shot.png"],
                                     ["bench", "--question", NOT_UTF8, "--plan-only"],
                                     ["bench", "--question", NOT_UTF8]])
def test_a_question_that_is_not_utf8_is_refused_by_gui_and_bench_as_by_run(command, tmp_path, monkeypatch,
                                                                           capsys) -> None:
    """`gui` recorded "abcd" (Qt dropped the byte) and `bench` ran, both exit 0."""
    monkeypatch.chdir(tmp_path)
    assert main([*command, *TINY]) == 2
    err = capsys.readouterr().err
    assert "the question has bytes that are not UTF-8 text (at character 2); write it as UTF-8." in err, err
    assert "--question-file" not in err  # neither command takes one
    assert not (tmp_path / "shot.png").exists()


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_exporting_over_the_database_is_refused_as_such_first(tmp_path, capsys, force) -> None:
    """Without --force it said "already exists ... Add --force to replace it", which --force then refused."""
    db = tmp_path / "s.db"
    assert main(["run", "hi", *TINY, "--max-steps", "1", "--step-tokens", "2", "--db", str(db)]) == 0
    capsys.readouterr()
    before = db.read_bytes()
    assert main(["sessions", "export", "1", "--db", str(db), "-o", str(db), *force]) == 2
    err = capsys.readouterr().err
    assert "it is the session database itself; nothing was written" in err and "--force" not in err, err
    assert db.read_bytes() == before


# ---------------------------------------------------------------- a disk too full to open the database for writing

RUN = [*TINY, "--max-steps", "1", "--step-tokens", "2"]


class NoRoomForTheWalIndex(sqlite3.Connection):
    """A connection as SQLite opens one on a full disk: a WAL database's first read must make (or grow) its -shm
    file, and cannot, so every statement fails with "disk I/O error" (SQLITE_IOERR_SHMSIZE)."""

    def execute(self, *args, **kwargs):
        raise sqlite3.OperationalError("disk I/O error")


def disk_fails(monkeypatch, db: Path, *, free: int) -> list[bool]:
    """Every connection opened to write `db` fails as `NoRoomForTheWalIndex` does, and its disk has `free` bytes;
    the list returned holds True while that lasts (a test sets it False to free the disk)."""
    failing = [True]
    connect, disk_usage = sqlite3.connect, shutil.disk_usage

    def connect_to(database, *args, **kwargs):
        if failing[0] and not kwargs.get("uri") and str(database) == str(db):  # read-only opens are URIs
            kwargs["factory"] = NoRoomForTheWalIndex
        return connect(database, *args, **kwargs)

    def usage(path):
        real = disk_usage(path)
        return real._replace(free=free) if failing[0] and Path(path) == db.parent else real

    monkeypatch.setattr(sqlite3, "connect", connect_to)
    monkeypatch.setattr(shutil, "disk_usage", usage)
    return failing


@pytest.fixture
def recorded(tmp_path, monkeypatch, capsys) -> Path:
    """A session database with one session, "before"."""
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    db = tmp_path / "db" / "s.db"
    db.parent.mkdir()
    assert main(["run", "before", *RUN, "--db", str(db)]) == 0
    capsys.readouterr()
    return db


def titles(db: Path) -> list[str]:
    with open_session_store(db) as store:
        return [session["title"] for session in store.list_sessions()]


def test_a_run_on_a_disk_too_full_to_open_the_database_goes_to_a_journal(recorded, monkeypatch, capsys) -> None:
    """It was refused at once: "cannot use the session database ...: disk I/O error", exit 2, nothing run."""
    failing = disk_fails(monkeypatch, recorded, free=0)
    assert main(["run", "full", *RUN, "--db", str(recorded)]) == 0
    out, err = capsys.readouterr()
    assert "answer:" in out and "disk I/O error" not in err, err
    assert f"the disk holding the session database {recorded} is full" in err and "journal" in err, err
    (journal,) = [*recorded.parent.glob("*.journal.jsonl"), *(recorded.parent.parent / "data").rglob("*.jsonl")]
    assert str(journal) in err
    failing[0] = False  # room again: the next open saves the run
    assert titles(recorded) == ["full", "before"] and not journal.exists()


def test_sessions_list_reads_a_database_whose_disk_is_too_full_to_open_it_for_writing(recorded, monkeypatch,
                                                                                     capsys) -> None:
    disk_fails(monkeypatch, recorded, free=4096)
    assert main(["sessions", "list", "--db", str(recorded)]) == 0
    out, err = capsys.readouterr()
    assert "before" in out and "error" not in err, err
    assert sorted(p.name for p in recorded.parent.iterdir()) == ["s.db"]  # no -wal or -shm left by the failed open


def test_a_disk_io_error_on_a_disk_with_room_is_still_said_as_an_error(recorded, monkeypatch, capsys) -> None:
    disk_fails(monkeypatch, recorded, free=10 << 30)
    assert main(["run", "full", *RUN, "--db", str(recorded)]) == 2
    err = capsys.readouterr().err
    assert "disk I/O error" in err and "is full" not in err, err


@pytest.fixture
def small_disk(tmp_path):
    """A 400 KiB tmpfs (root only); skipped where it cannot be mounted."""
    folder = tmp_path / "small"
    folder.mkdir()
    if not shutil.which("mount") or os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root and mount(8)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(folder)], capture_output=True,
                          text=True, check=False)
    if done.returncode:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


def fill(folder: Path) -> None:
    with (folder / "filler").open("wb", buffering=0) as file:
        with contextlib.suppress(OSError):  # ENOSPC: full
            while True:
                file.write(b"\0" * 1024)


def test_a_real_full_disk_under_the_database_keeps_runs_in_journals_and_lists_sessions(small_disk, tmp_path,
                                                                                      monkeypatch, capsys) -> None:
    """With under 32 KiB free SQLite cannot make the -shm file, and every command failed."""
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    db = small_disk / "s.db"
    assert main(["run", "before", *RUN, "--db", str(db)]) == 0
    assert sorted(p.name for p in small_disk.iterdir()) == ["s.db"]  # the last connection took its side files
    fill(small_disk)
    assert main(["run", "full", *RUN, "--db", str(db)]) == 0
    assert main(["sessions", "list", "--db", str(db)]) == 0
    out, err = capsys.readouterr()
    assert "answer:" in out and "before" in out and "disk I/O error" not in err, err
    assert f"the disk holding the session database {db} is full" in err, err
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "s.db"]
    assert len(list((tmp_path / "data" / "journals").glob("*.journal.jsonl"))) == 1
    (small_disk / "filler").unlink()
    assert titles(db) == ["full", "before"]


def test_a_store_opened_on_a_full_disk_sees_the_sessions_written_once_the_disk_has_room(recorded, monkeypatch):
    """Read as it stood (immutable), the window's store never saw a session written after the disk was freed."""
    failing = disk_fails(monkeypatch, recorded, free=0)
    with open_session_store(recorded) as window:
        assert window.disk_full and [s["title"] for s in window.list_sessions()] == ["before"]
        failing[0] = False
        assert main(["run", "later", *RUN, "--db", str(recorded)]) == 0
        assert [s["title"] for s in window.list_sessions()] == ["later", "before"] and not window.disk_full
        window.rename(1, "renamed")  # and it writes again
    assert titles(recorded) == ["later", "renamed"]


# ---------------------------------------------------------------- Ctrl+C in the command's very first imports

CTRL_C_IN_ARGPARSE = """
import runpy, sys
class CtrlC:  # a Ctrl+C that lands while `import argparse` runs, the command's first import
    def find_spec(self, name, path=None, target=None):
        if name == "argparse":
            raise KeyboardInterrupt
sys.meta_path.insert(0, CtrlC())
sys.argv = ["beamwise", "run", "hi", "--model", "synthetic:tiny-llama"]
runpy.run_module("app.cli", run_name="__main__", alter_sys=True)
"""


def test_ctrl_c_in_the_first_import_says_nothing_was_recorded_without_a_traceback() -> None:
    """Under load `tests/test_interrupt.py`'s 0.05 s Ctrl+C landed in cli.py's `import argparse`, above the
    `try` that says so: a traceback, exit 1."""
    done = subprocess.run([sys.executable, "-c", CTRL_C_IN_ARGPARSE], cwd=Path(__file__).parent.parent,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip() == "beamwise: interrupted while starting: nothing was recorded", done.stderr
