"""Standard output that refuses a write for want of room (`> /dev/full`, a full disk): one line on stderr that says
so and what to do, exit status 2, and a `run` recorded as failed with that reason. It was an internal error with a
traceback, and the run was left `interrupted` with no reason, so its follow-up was refused."""

from __future__ import annotations

import errno
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import main
from app.run_cli import _drive, _open_recorder
from app.store import SessionStore
from tests.test_faults import TINY, fake

ROOT = Path(__file__).resolve().parent.parent
REFUSED = "beamwise: error: cannot write standard output (No space left on device)"


@pytest.fixture
def db(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "s.db"


class FullDisk(io.StringIO):
    """Standard output on a full disk: it takes `lines` lines, then every write fails as `> /dev/full` does."""

    def __init__(self, lines: int = 0) -> None:
        super().__init__()
        self.left = lines

    def write(self, text: str) -> int:
        if self.left <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.left -= text.count("\n")
        return super().write(text)


def args_for(db: Path, json_lines: bool = False):
    return type("Args", (), {"no_save": False, "db": str(db), "json": json_lines})()


def recorded(db: Path, session_id: int) -> dict:
    with SessionStore(db) as store:
        return store.get_session(session_id)


def one_session(db: Path) -> None:
    args = args_for(db)
    assert _drive(args, _open_recorder(args), lambda should_stop: fake(2)) == 0


@pytest.mark.parametrize("lines", [0, 3])
@pytest.mark.parametrize("json_lines", [False, True])
def test_a_run_whose_output_is_full_stops_recorded_failed_with_the_reason(db, monkeypatch, capsys, lines,
                                                                           json_lines) -> None:
    args = args_for(db, json_lines)
    monkeypatch.setattr(sys, "stdout", FullDisk(lines))
    assert _drive(args, _open_recorder(args), lambda should_stop: fake(4)) == 2
    err = capsys.readouterr().err
    assert REFUSED in err
    assert "Free space on the disk it goes to, or send it elsewhere" in err
    assert err.rstrip().splitlines()[-1].startswith("beamwise: recorded as session 1 (failed ")
    session = recorded(db, 1)
    assert session["status"] == "failed"
    assert "cannot write standard output (No space left on device)" in session["error"]


def test_sessions_show_says_why_a_run_with_a_full_output_failed(db, monkeypatch, capsys) -> None:
    args, captured = args_for(db), sys.stdout
    monkeypatch.setattr(sys, "stdout", FullDisk())
    _drive(args, _open_recorder(args), lambda should_stop: fake(2))
    monkeypatch.setattr(sys, "stdout", captured)
    capsys.readouterr()
    assert main(["sessions", "show", "1", "--db", str(db)]) == 0
    assert "failed (cannot write standard output (No space left on device)" in capsys.readouterr().out


def test_the_run_command_with_a_full_output_exits_2_recorded_failed(db, monkeypatch, capsys) -> None:
    monkeypatch.setattr(sys, "stdout", FullDisk())
    assert main(["run", "What is 2+3?", *TINY, "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert REFUSED in err and "Traceback" not in err
    assert recorded(db, 1)["status"] == "failed"


@pytest.mark.parametrize("command", [["sessions", "list"], ["sessions", "show", "1"], ["sessions", "export", "1"],
                                     ["models", "list"]])
def test_a_command_whose_output_is_full_says_it_in_one_line(db, monkeypatch, capsys, command) -> None:
    one_session(db)
    capsys.readouterr()
    monkeypatch.setattr(sys, "stdout", FullDisk())
    given = [*command, "--db", str(db)] if command[0] == "sessions" else command
    assert main(given) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [err.splitlines()[0]] and err.startswith(REFUSED)
    assert "the command did not finish" in err


def test_other_os_errors_stay_faults(monkeypatch) -> None:
    """Only a refused write of the output is said as the user's: a missing file's error (it names its file) is
    still a fault in Beamwise, raised on for `console` to show with its traceback."""
    def missing(args):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", "/nowhere")

    monkeypatch.setattr("app.sessions_cli.cmd_list", missing)
    with pytest.raises(FileNotFoundError):
        main(["sessions", "list"])


@pytest.mark.parametrize("buffered", [False, True])
def test_real_dev_full_says_one_line_and_exits_2(db, tmp_path, buffered) -> None:
    """The real device, buffered too: a short output was only written by the exit's flush, which Python reports as
    "Exception ignored" and exit status 120."""
    if not Path("/dev/full").exists():
        pytest.skip("/dev/full is Linux's")
    one_session(db)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "app.cli", "sessions", "list", "--db", str(db)], cwd=ROOT,
                              env=env, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith(REFUSED) and len(done.stderr.splitlines()) == 1


def test_a_full_output_after_the_end_was_recorded_keeps_the_run_finished(db, monkeypatch, capsys) -> None:
    events = list(fake(2))
    args = args_for(db, json_lines=True)
    monkeypatch.setattr(sys, "stdout", FullDisk(len(events) - 1))  # the last line, run_finished, is refused
    assert _drive(args, _open_recorder(args), lambda should_stop: iter(events)) == 2
    err = capsys.readouterr().err
    assert REFUSED in err
    assert err.rstrip().splitlines()[-1].startswith("beamwise: recorded as session 1; ask a follow-up")
    assert recorded(db, 1)["status"] == "finished"
