"""The CLI's line between the user's errors and Beamwise's faults, the one refusal of a database that is not there,
and the words `write_atomically` uses for what it writes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import main
from app.export.files import ExportError, write_atomically
from app.journal_import import CHECK_DB, open_session_store
from app.json_out import write_json
from app.options import UsageError
from app.store import SessionStore
from app.store_errors import StoreError

TINY = ["--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2", "--step-tokens", "4", "--max-steps", "2"]
ROOT = Path(__file__).resolve().parents[1]


def _deep_fault(*_args, **_kwargs):
    raise ValueError("a fault deep inside Beamwise")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "s.db"
    SessionStore(path).close()
    return path


def test_a_value_error_from_deep_inside_a_command_is_a_fault_not_the_users(db: Path, monkeypatch, capsys) -> None:
    """Before, main took every ValueError for the user's: a fault in the store printed as a one-line
    "beamwise: error:" with exit 2 and no traceback, as if the user had typed something wrong."""
    monkeypatch.setattr(SessionStore, "list_sessions", _deep_fault)
    with pytest.raises(ValueError, match="a fault deep inside Beamwise"):
        main(["sessions", "list", "--db", str(db)])
    assert "beamwise: error:" not in capsys.readouterr().err


def test_a_value_error_from_the_model_load_is_a_fault_too(monkeypatch, capsys) -> None:
    monkeypatch.setattr("engine.models.load_model", _deep_fault)
    with pytest.raises(ValueError, match="a fault deep inside Beamwise"):
        main(["run", "What is 2+3?", *TINY, "--no-save"])
    assert "beamwise: error:" not in capsys.readouterr().err


def test_the_console_script_shows_a_fault_with_its_traceback_and_exit_1(db: Path) -> None:
    """What a user sees of the fault above: Python's traceback (what a report needs), status 1, not status 2."""
    script = ("import sys; from app.store import SessionStore\n"
              "def fault(*a, **k): raise ValueError('a fault deep inside Beamwise')\n"
              "SessionStore.list_sessions = fault\n"
              f"sys.argv = ['beamwise', 'sessions', 'list', '--db', {str(db)!r}]\n"
              "from app.cli import console; console()\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "Traceback" in done.stderr and "ValueError: a fault deep inside Beamwise" in done.stderr
    assert "beamwise: error:" not in done.stderr


@pytest.mark.parametrize(("option", "said"), [
    (["--beams", "0"], "beams must be at least 1 (got 0)."),
    (["--temperature", "-1"], "temperature must be 0 (greedy) or more (got -1.0)."),
    (["--threads", "0"], "--threads must be 1 or more (got 0)."),
])  # fmt: skip
def test_a_bad_option_value_stays_a_one_line_user_error(capsys, option: list[str], said: str) -> None:
    assert main(["run", "What is 2+3?", *TINY, *option, "--no-save"]) == 2
    assert capsys.readouterr().err == f"beamwise: error: {said}\n"


@pytest.mark.parametrize("argv", [
    ["sessions", "list", "--limit", "0"],
    ["sessions", "rename", "1", "   "],
])  # fmt: skip
def test_the_sessions_commands_refusals_stay_one_line_user_errors(db: Path, capsys, argv: list[str]) -> None:
    assert main([*argv, "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("beamwise: error: ") and err.count("\n") == 1 and "Traceback" not in err


def test_a_bad_beamwise_threads_is_the_users(monkeypatch, capsys) -> None:
    monkeypatch.setenv("BEAMWISE_THREADS", "many")
    assert main(["run", "What is 2+3?", *TINY, "--no-save"]) == 2
    assert capsys.readouterr().err == ("beamwise: error: BEAMWISE_THREADS must be a whole number of threads, 1 or "
                                       "more (got 'many').\n")


def test_open_session_store_refuses_a_missing_database_only_when_asked(tmp_path: Path) -> None:
    path = tmp_path / "none.db"
    with pytest.raises(StoreError) as refused:
        open_session_store(path, missing="there is nothing to read")
    said = f"there is no session database at {path}, so there is nothing to read."
    assert refused.value.user_message() == f"{said} {CHECK_DB}"
    assert not path.exists()
    with pytest.raises(StoreError) as refused:
        open_session_store(path, missing="there is nothing to read", missing_hint="Ask first.")
    assert refused.value.user_message() == f"{said} Ask first."
    with open_session_store(path):  # without `missing`: a new database, as a first run makes it
        pass
    assert path.exists()


def test_the_default_database_missing_for_a_follow_up_says_to_ask_first(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    assert main(["run", "--session", "4", "x?", *TINY]) == 2
    err = capsys.readouterr().err
    assert err == (f"beamwise: error: there is no session database at {tmp_path / 'data' / 'sessions.db'}, so there "
                   "is no session 4 to follow up. Ask a question without --session first.\n")
    assert not (tmp_path / "data" / "sessions.db").exists()


def test_write_atomically_names_what_it_writes(tmp_path: Path) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    with pytest.raises(ExportError, match=r"^cannot export to .*out: it is a folder\.$"):
        write_atomically(folder, "text")
    with pytest.raises(ExportError, match=r"^cannot write .*out: it is a folder\.$"):
        write_atomically(folder, "text", what="the JSON")


def test_a_json_path_that_holds_the_words_of_an_export_is_said_as_given(tmp_path: Path) -> None:
    """Before, the JSON's wording was made by replacing "the export" in the export's message: a --json path with
    those words in it was printed with "the JSON" in their place, naming a path that is not there."""
    folder = tmp_path / "the export"
    folder.mkdir()
    with pytest.raises(UsageError) as refused:
        write_json(str(folder), {"a": 1}, announce=False)
    assert str(refused.value).startswith(f"cannot write {folder}: it is a folder.")
