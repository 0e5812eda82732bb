"""A model's name from `models list` as every command takes it: a GGUF pulled with `--file` (a folder of one .gguf)
is that .gguf by its folder's name, and a name two models share is refused wherever a name is looked up, listing
the paths to give instead (taking the first could run, inspect or delete the wrong one)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from app import model_library
from app.cli import main
from app.models_folder import source_of
from app.options import UsageError
from tests.hub_server import CONFIG, WEIGHTS, Hub

pytestmark = pytest.mark.usefixtures("scratch_models")


def small_gguf(path: Path) -> bytes:
    """A GGUF with a model's header and no tensors: what `models list` reads of one."""
    from gguf import GGUFWriter

    writer = GGUFWriter(path, "llama")
    writer.add_block_count(2)
    writer.add_embedding_length(64)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_context_length(2048)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()


@pytest.fixture
def pulled_gguf(tmp_path, capsys) -> tuple[Path, str]:
    """`models pull gg/smol-GGUF --file smol.Q4_1.gguf`: the .gguf in the folder the pull made, and what it printed."""
    repos = {"gg/smol-GGUF": {"smol.Q4_1.gguf": small_gguf(tmp_path / "smol.gguf"), "README.md": b"hi"}}
    with Hub(repos) as hub:
        assert main(["models", "pull", "gg/smol-GGUF", "--file", "smol.Q4_1.gguf", "--endpoint", hub.endpoint]) == 0
    return model_library.models_dir() / "gg--smol-GGUF" / "smol.Q4_1.gguf", capsys.readouterr().out


def test_a_gguf_pulled_alone_is_listed_as_its_gguf_under_its_folders_name(pulled_gguf):
    """It was a problem row ("has no config.json"), Use greyed, and the hint's path was refused."""
    gguf, said = pulled_gguf
    entry = model_library.find("gg--smol-GGUF")
    assert entry.source == str(gguf) and entry.problem == "" and entry.downloaded and entry.facts is not None
    assert entry.size_bytes >= gguf.stat().st_size
    assert said.rstrip().endswith(f"use it with --model {gguf} (or --model gg--smol-GGUF)")
    assert source_of("gg--smol-GGUF") == str(gguf)  # what --model makes of the name
    assert model_library.source_of_name("smol.Q4_1") == str(gguf)  # the name a run records for a GGUF


def test_a_gguf_pulled_alone_can_be_used_in_the_window_and_removed_whole(pulled_gguf, qtbot, capsys):
    from app.gui.models_page import ModelsPage, usable

    gguf, _ = pulled_gguf
    page = ModelsPage(confirm=lambda title, text: True)
    qtbot.addWidget(page)
    qtbot.waitUntil(lambda: not page.listing, timeout=30000)  # the list is read off the GUI thread
    page.select_name("gg--smol-GGUF")
    assert usable(page.selected()) and page.use_button.isEnabled()
    with qtbot.waitSignal(page.use_requested) as used:
        page.use_selected()
    assert used.args == [str(gguf), False]
    assert main(["models", "remove", "gg--smol-GGUF", "--yes"]) == 0
    assert not gguf.parent.exists()


def model_folder(path: Path, config: bytes = CONFIG) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_bytes(config)
    (path / "tokenizer.json").write_text("{}", encoding="utf-8")
    (path / "model.safetensors").write_bytes(WEIGHTS)
    return path


@pytest.fixture
def two_named_same(tmp_path) -> tuple[Path, Path]:
    first, second = model_folder(tmp_path / "a" / "same"), model_folder(tmp_path / "b" / "same")
    return model_library.add_folder(first), model_library.add_folder(second)


def test_a_shared_name_is_refused_by_info_and_remove_listing_both_paths(two_named_same, capsys):
    first, second = two_named_same
    for command in (["models", "info", "same"], ["models", "remove", "same", "--yes"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert "more than one model here is named 'same'" in err and str(first) in err and str(second) in err
    assert model_library.added_folders() == [first, second]  # nothing was taken off the list
    assert main(["models", "info", str(second)]) == 0
    assert main(["models", "remove", str(second)]) == 0  # the path names one
    assert model_library.added_folders() == [first]
    assert model_library.find("same").source == str(first)  # one left: the name is its alone again


def test_a_shared_name_is_refused_by_model_and_verifier_model(two_named_same, capsys):
    first, second = two_named_same
    with pytest.raises(argparse.ArgumentTypeError, match="more than one model here is named 'same'"):
        source_of("same")
    for option in ("--model", "--verifier-model"):
        with pytest.raises(SystemExit) as parsed:
            main(["plan", "hi", option, "same"])
        assert parsed.value.code == 2
        err = capsys.readouterr().err
        assert f"argument {option}: more than one model here is named 'same'" in err and str(second) in err
    assert source_of(str(first)) == str(first)


def test_remove_yes_never_deletes_a_download_that_shares_an_added_folders_name(tmp_path, capsys):
    """`models remove same --yes` took the first of the two: the download, deleted."""
    with Hub({"tiny/llama": {"config.json": CONFIG, "model.safetensors": WEIGHTS}}) as hub:
        assert main(["models", "pull", "tiny/llama", "--endpoint", hub.endpoint]) == 0
    model_library.add_folder(model_folder(tmp_path / "mine" / "tiny--llama"))
    assert main(["models", "remove", "tiny--llama", "--yes"]) == 2
    assert "more than one model here is named 'tiny--llama'" in capsys.readouterr().err
    assert (model_library.models_dir() / "tiny--llama" / "model.safetensors").is_file()
    with pytest.raises(UsageError, match="give the path"):
        model_library.find("tiny--llama")


def test_adding_a_folder_whose_name_is_taken_says_so_with_its_path(tmp_path, capsys):
    first = model_folder(tmp_path / "a" / "same")
    assert main(["models", "add", str(first)]) == 0
    assert "`beamwise models remove same` takes it off the list" in capsys.readouterr().out
    second = model_folder(tmp_path / "b" / "same")
    assert main(["models", "add", str(second)]) == 0
    said = capsys.readouterr().out
    assert f"another model here is named same too ({first.resolve()})" in said
    assert f"`beamwise models remove {second.resolve()}` takes it off the list" in said
    assert "remove same`" not in said
    assert main(["models", "list"]) == 0
    listed = capsys.readouterr().out
    assert f"give this one as {first.resolve()}" in listed and f"give this one as {second.resolve()}" in listed


def test_the_window_selects_the_folder_it_added_and_says_its_name_is_taken(tmp_path, qtbot):
    from app.gui.models_page import ModelsPage

    first = model_library.add_folder(model_folder(tmp_path / "a" / "same"))
    page = ModelsPage(confirm=lambda title, text: False)
    qtbot.addWidget(page)
    assert page.add_folder(model_folder(tmp_path / "b" / "same"))
    qtbot.waitUntil(lambda: not page.listing, timeout=30000)  # selected once the list is read again
    assert page.selected().source == str((tmp_path / "b" / "same").resolve())
    assert f"Another model here is named same too ({first})" in page.folder_status.text()
