"""A file name longer than the file system allows, as --db or as `sessions export -o`, is refused in one line that
says so and what to do: Python 3.11's Path.exists/is_file/is_dir raised OSError (ENAMETOOLONG) on it, and every
sessions command, `run --db` and the window's store ended in "beamwise: internal error" with a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.cli import main
from app.db_path import db_file
from app.journal_import import open_session_store
from app.path_names import too_long
from app.store import SessionStore
from app.store_errors import StoreError
from tests.test_sessions_cli import recorded

LONG = "y" * 300  # bytes in one name: ext4, NTFS and APFS allow 255


@pytest.fixture(autouse=True)
def data_folder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))


def refused(capsys, *argv: str) -> str:
    """Run a command that must be refused in words (exit 2, no traceback); its stderr."""
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert "internal error" not in err and "Traceback" not in err
    return err


@pytest.mark.parametrize("command", [["sessions", "list"], ["sessions", "show", "1"], ["sessions", "export", "1"],
                                     ["sessions", "import", "x.json"], ["sessions", "move-aside"],
                                     ["sessions", "rename", "1", "t"], ["sessions", "delete", "1", "--yes"]])
def test_a_db_name_too_long_is_said_by_every_sessions_command(tmp_path: Path, capsys, command: list[str]) -> None:
    err = refused(capsys, *command, "--db", str(tmp_path / f"{LONG}.db"))
    assert "its file name is 303 bytes long" in err and "Choose a shorter file name" in err
    assert len(err.strip().splitlines()) == 1 and LONG not in err  # one line; the name cut to be read
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"] or not (tmp_path / "data").exists()


def test_a_folder_name_too_long_in_db_is_said(tmp_path: Path, capsys) -> None:
    err = refused(capsys, "sessions", "list", "--db", str(tmp_path / LONG / "s.db"))
    assert "the folder name" in err and "300 bytes long" in err


def test_an_export_file_name_too_long_is_said_and_nothing_written(tmp_path: Path, capsys) -> None:
    db = recorded(tmp_path / "a.db")
    err = refused(capsys, "sessions", "export", "1", "--db", str(db), "-o", str(tmp_path / f"{LONG}.md"))
    assert "cannot export to" in err and "its file name is 303 bytes long" in err and "for -o" in err
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".md") == []


def test_the_store_the_window_opens_raises_its_own_error(tmp_path: Path) -> None:
    """The window opens the store through `open_session_store` (its worker through `SessionStore`): a StoreError,
    which it shows as "Sessions will not be saved", not an OSError."""
    for opening in (lambda p: open_session_store(p), SessionStore):
        with pytest.raises(StoreError, match="its file name is 303 bytes long"):
            opening(tmp_path / f"{LONG}.db")


def test_a_name_the_file_system_holds_is_taken_as_it_is(tmp_path: Path) -> None:
    fits = tmp_path / f"{'y' * 244}.db"  # 247 bytes: NAME-journal beside it is 255
    assert db_file(fits) == fits and too_long(fits) is None and too_long(tmp_path / "missing" / "s.db") is None
    with SessionStore(fits) as store:
        store.create_session({"question": "Does it fit?", "status": "finished"})
        assert len(store.list_sessions()) == 1


def test_a_name_whose_side_files_do_not_fit_is_said_before_sqlite_makes_it(tmp_path: Path, capsys) -> None:
    """250 bytes fit, but not NAME-journal beside it (258): SQLite made the file, then said "unable to open
    database file"."""
    err = refused(capsys, "sessions", "import", "x.json", "--db", str(tmp_path / f"{'y' * 247}.db"))
    assert "its file name is 250 bytes long, and with the '-journal' SQLite adds" in err
    assert not list(tmp_path.glob("y*"))
