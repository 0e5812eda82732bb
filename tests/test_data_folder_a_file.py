"""A data folder that is a file is said as that: `models list` said the list of added folders (a file that was
never there) could not be read ("Not a directory") and told the user to fix or delete it."""

from __future__ import annotations

import pytest

from app import model_library as lib
from app.cli import main


@pytest.mark.parametrize("below", [False, True])
def test_a_data_folder_that_is_a_file_is_named_with_beamwise_data_dir(tmp_path, monkeypatch, capsys, tiny, below):
    file = tmp_path / "data"
    file.write_text("x", encoding="utf-8")
    data = file / "sub" if below else file  # a folder above it is the file
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(data))
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert f"the data folder {data} is not a folder" in out and "added-models.json" not in out
    assert f"Set BEAMWISE_DATA_DIR to a folder (it is {data} now)" in out
    folder = tmp_path / "tiny"
    tiny.model.save_pretrained(folder)
    tiny.tokenizer.save_pretrained(folder)
    assert main(["models", "add", str(folder)]) == 2
    assert f"the data folder {data} is not a folder" in capsys.readouterr().err
    assert file.read_text(encoding="utf-8") == "x"
    assert [e.where for e in lib.list_models()][-1] == "data folder"


def test_without_beamwise_data_dir_the_file_in_the_way_is_named(tmp_path, monkeypatch):
    import app.models_folder as models_folder

    file = tmp_path / "beamwise"
    file.write_text("x", encoding="utf-8")
    monkeypatch.delenv("BEAMWISE_DATA_DIR", raising=False)
    monkeypatch.setattr(models_folder.platformdirs, "user_data_dir", lambda *a, **k: str(file))
    with pytest.raises(models_folder.DataFolderNotAFolder, match="is not a folder") as refused:
        models_folder.added_folders()
    assert f"Move the file {file} away" in refused.value.user_message()
