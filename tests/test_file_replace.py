"""app/file_replace.py: a file written whole, through a temporary file no other writer shares."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.file_replace import NoTemporaryFile, replace_text


def test_two_writers_at_once_use_two_temporary_files(tmp_path: Path, monkeypatch) -> None:
    """The models list, the download marker and the thresholds each had one fixed temporary name: the window and a
    command writing at once wrote into one file, and the second rename found it gone."""
    target = tmp_path / "added-models.json"
    seen = []
    replace = os.replace

    def note(source, dest):
        seen.append(Path(source).name)
        if len(seen) == 1:  # a second writer runs while the first is between writing and renaming
            replace_text(target, "second")
        replace(source, dest)

    monkeypatch.setattr("app.file_replace.os.replace", note)
    replace_text(target, "first")
    assert len(set(seen)) == 2 and all(name.startswith(".added-models.json.") for name in seen)
    assert target.read_text(encoding="utf-8") == "first" and list(tmp_path.iterdir()) == [target]


def test_a_failed_rename_removes_the_temporary_file_and_keeps_the_old_one(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "early_exit.json"
    target.write_text("old", encoding="utf-8")

    def refuse(source, dest):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("app.file_replace.os.replace", refuse)
    with pytest.raises(OSError, match="No space left"):
        replace_text(target, "new")
    assert target.read_text(encoding="utf-8") == "old" and list(tmp_path.iterdir()) == [target]


def test_a_folder_that_takes_no_file_says_which_folder(tmp_path: Path) -> None:
    with pytest.raises(NoTemporaryFile) as info:
        replace_text(tmp_path / "missing" / "x.json", "{}")
    assert info.value.filename == str(tmp_path / "missing") and info.value.strerror
