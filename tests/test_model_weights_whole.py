"""A folder whose safetensors weights are cut short (or whose index names a shard that is not there) is refused by
`models add` and shown as a problem by `models list`, from the headers alone: it was added and listed as fine, and
only `run` said "incomplete metadata, file not fully covered"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from app import model_library as lib
from app.cli import main
from app.model_weights import check_weights
from engine.errors import ModelLoadError

pytestmark = pytest.mark.usefixtures("scratch_models")


@pytest.fixture
def model_folder(tmp_path: Path, tiny) -> Path:
    folder = tmp_path / "tiny"
    tiny.model.save_pretrained(folder)
    tiny.tokenizer.save_pretrained(folder)
    return folder


def cut(file: Path) -> None:
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])


def test_weights_cut_short_are_refused_by_add_and_shown_by_list(model_folder, capsys):
    cut(model_folder / "model.safetensors")
    assert main(["models", "add", str(model_folder)]) == 2
    assert f"the weight file {model_folder / 'model.safetensors'} is cut short" in capsys.readouterr().err
    assert lib.added_folders() == []
    downloaded = lib.models_dir() / "tiny--cut"
    downloaded.parent.mkdir(parents=True)
    model_folder.rename(downloaded)
    entry = lib.find("tiny--cut")
    assert "is cut short" in entry.problem and entry.facts is not None  # a model, damaged
    assert main(["models", "list"]) == 0 and "problem: the weight file" in capsys.readouterr().out


def test_sharded_weights_are_checked_shard_by_shard(model_folder):
    weights = load_file(model_folder / "model.safetensors")
    (model_folder / "model.safetensors").unlink()
    names = sorted(weights)
    half = len(names) // 2
    shards = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
    for file, keys in shards.items():
        save_file({k: weights[k] for k in keys}, str(model_folder / file))
    index = {"metadata": {}, "weight_map": {k: file for file, keys in shards.items() for k in keys}}
    (model_folder / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    check_weights(model_folder)  # whole: no word
    assert lib.add_folder(model_folder) == model_folder.resolve()
    second = model_folder / "model-00002-of-00002.safetensors"
    cut(second)
    with pytest.raises(ModelLoadError, match=r"model-00002-of-00002\.safetensors is cut short"):
        check_weights(model_folder)
    second.unlink()
    with pytest.raises(ModelLoadError, match="lacks weight files its index names"):
        check_weights(model_folder)
    assert "lacks weight files its index names" in lib.find("tiny").problem


def test_bytes_past_the_tensors_are_refused_as_safetensors_refuses_them(model_folder):
    weights = model_folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes() + b"\0" * 16)
    with pytest.raises(ModelLoadError, match="holds bytes its header does not name"):
        check_weights(model_folder)


def test_a_file_cut_within_its_header_is_cut_short_and_names_the_header_s_bytes(model_folder):
    """The one header reader (engine/prm_folders.safetensors_header) says how long the header wanted the file."""
    from engine.prm_folders import safetensors_header

    weights = model_folder / "model.safetensors"
    header, start = safetensors_header(weights)
    assert start > 8 and all("data_offsets" in value for key, value in header.items() if key != "__metadata__")
    weights.write_bytes(weights.read_bytes()[:20])
    with pytest.raises(ModelLoadError, match=rf"is cut short: its header names {start:,} bytes, the file has 20\."):
        check_weights(model_folder)
