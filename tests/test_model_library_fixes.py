"""Naming a model the list of models cannot vouch for: a damaged list of added folders is named (not a guess at
another model), a model a pull is writing now is said to be downloading (not to be pulled again), and adding a
folder that is listed already changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app import model_library as lib
from app.cli import main
from tests.hub_server import CONFIG
from tests.lock_holder import held_elsewhere

pytestmark = pytest.mark.usefixtures("scratch_models")
RUN = ["--beams", "1", "--width", "1", "--max-steps", "1", "--step-tokens", "2", "--no-save"]
DAMAGED = '["/tmp/x",'  # a list cut short


def unfinished_download(name: str) -> Path:
    """A folder in the models folder as a pull leaves it halfway: its config, and a marker saying it is not whole."""
    folder = lib.models_dir() / name
    folder.mkdir(parents=True)
    (folder / "config.json").write_bytes(CONFIG)
    marker = {"repo": name.replace("--", "/"), "endpoint": "https://huggingface.co", "revision": "main",
              "file": None, "complete": False}
    (folder / lib.MARKER).write_text(json.dumps(marker), encoding="utf-8")
    return folder


def test_a_name_on_a_damaged_list_names_the_list_not_another_model(tinyllama_folder, capsys):
    """`run --model tinyllama` said "did you mean me--tinyllama?" and `models remove tinyllama` said "no model named
    'tinyllama' here", where `models add` and `models list` say the list cannot be read."""
    assert main(["models", "add", str(tinyllama_folder)]) == 0
    unfinished_download("me--tinyllama")  # a name close to the added one
    listed = lib.added_list_path()
    listed.write_text(DAMAGED, encoding="utf-8")
    capsys.readouterr()
    for command in (["run", "hi", "--model", "tinyllama", *RUN], ["models", "remove", "tinyllama", "--yes"],
                    ["models", "info", "tinyllama"]):
        assert main(command) == 2, command
        said = capsys.readouterr().err
        assert f"the list of added model folders {listed} cannot be read" in said, command
        assert "delete it and add the folders again with `beamwise models add PATH`" in said, command
        assert "did you mean" not in said and "me--tinyllama" not in said, command
    assert listed.read_text(encoding="utf-8") == DAMAGED and tinyllama_folder.is_dir()


def test_a_name_no_list_has_is_still_said_unknown_when_the_list_is_whole(capsys):
    unfinished_download("me--tinyllama")
    assert main(["run", "hi", "--model", "tinyllama", *RUN]) == 2
    assert "did you mean me--tinyllama?" in capsys.readouterr().err


def test_running_a_model_another_beamwise_is_downloading_says_to_wait_for_it(capsys):
    """It said "is not whole: the download did not finish. Pull it again to resume it", and a pull or a remove then
    met the other pull's lock."""
    folder = unfinished_download("tiny--llama")
    with held_elsewhere(folder) as other:
        assert main(["run", "hi", "--model", "tiny--llama", *RUN]) == 2
        said = capsys.readouterr().err
        assert f"is being downloaded (process {other.pid}); use it once the pull has finished." in said
        assert "not whole" not in said and "Pull it again" not in said
        assert lib.find("tiny--llama").problem == (f"it is being downloaded (process {other.pid}); use it once the "
                                                   "pull has finished.")  # the words of `models list` and `info`
    assert main(["run", "hi", "--model", "tiny--llama", *RUN]) == 2  # the pull stopped: pulling again resumes it
    assert "is not whole: the download did not finish. Pull it again to resume it" in capsys.readouterr().err


def test_adding_a_listed_folder_again_changes_nothing(tmp_path, tinyllama_folder, tiny, capsys):
    """It said "added ..." again and moved the folder to the end of the list."""
    other = tmp_path / "other"
    tiny.model.save_pretrained(other)
    tiny.tokenizer.save_pretrained(other)
    link = tmp_path / "link"
    link.symlink_to(tinyllama_folder, target_is_directory=True)
    assert main(["models", "add", str(tinyllama_folder)]) == 0 and main(["models", "add", str(other)]) == 0
    listed = lib.added_list_path().read_text(encoding="utf-8")
    capsys.readouterr()
    for again in (tinyllama_folder, link):
        assert main(["models", "add", str(again)]) == 0
        said = capsys.readouterr().out
        assert said == (f"{tinyllama_folder.resolve()} is listed already (as tinyllama); use it with --model "
                        "tinyllama.\n"), again
        assert lib.added_list_path().read_text(encoding="utf-8") == listed
    lib.add_folder(link)  # the window's Add folder… keeps the list as it is too
    assert lib.added_folders() == [tinyllama_folder.resolve(), other.resolve()]
