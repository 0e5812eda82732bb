"""A file written over (export --force, the window's "Replace it?", a --json report, the saved lists) keeps its
mode, as a shell's `>` keeps it: a private file stays private; a new file is 644."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from app.cli import main
from app.file_replace import replace_text
from app.json_out import write_json
from app.recorder import SessionRecorder
from app.store import SessionStore
from benchmarks.fake_search import fake_run
from engine.config import SearchConfig

pytestmark = pytest.mark.skipif(os.name == "nt", reason="Windows has no POSIX modes")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def private(path: Path, text: str = "secret") -> Path:
    path.write_text(text, encoding="utf-8")
    path.chmod(0o600)
    return path


@pytest.mark.parametrize("old", [0o600, 0o640, 0o664, 0o4755])
def test_a_replaced_file_keeps_its_mode_and_a_new_one_is_644(tmp_path: Path, old: int) -> None:
    target = tmp_path / "notes.md"
    target.write_text("old", encoding="utf-8")
    target.chmod(old)
    replace_text(target, "new")
    assert target.read_text(encoding="utf-8") == "new" and mode(target) == old & 0o777  # never set-user-ID
    replace_text(tmp_path / "fresh.md", "new")
    assert mode(tmp_path / "fresh.md") == 0o644


def test_a_link_is_followed_to_its_files_mode(tmp_path: Path) -> None:
    target = private(tmp_path / "real.md")
    link = tmp_path / "link.md"
    link.symlink_to(target)
    replace_text(Path(os.path.realpath(link)), "new")
    assert link.is_symlink() and mode(target) == 0o600 and target.read_text(encoding="utf-8") == "new"


def test_export_force_keeps_a_private_file_private(tmp_path: Path, monkeypatch, capsys) -> None:
    """`sessions export 1 -o priv.md --force` over a 600 file left it 644: readable by everyone."""
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    db = tmp_path / "s.db"
    with SessionStore(db) as store, SessionRecorder(store) as recorder:
        for event in fake_run("What is 2+3?", SearchConfig(beams=2, width=2, max_steps=2)):
            recorder.write(event)
    out = private(tmp_path / "priv.md")
    assert main(["sessions", "export", "1", "-o", str(out), "--force", "--db", str(db)]) == 0
    assert out.read_text(encoding="utf-8").startswith("# ") and mode(out) == 0o600


def test_a_json_report_written_over_a_private_file_stays_private(tmp_path: Path, capsys) -> None:
    out = private(tmp_path / "results.json", "{}")
    write_json(str(out), {"rows": [1]}, announce=False)
    assert json.loads(out.read_text(encoding="utf-8")) == {"rows": [1]} and mode(out) == 0o600
