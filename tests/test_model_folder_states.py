"""A model folder a pull did not finish, and one whose config.json is damaged, said as what they are: the run said
the first had no config.json (point to a transformers folder) and blamed the second's tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.config import ModelSpec
from engine.errors import ModelLoadError
from engine.models import DOWNLOAD_MARKER, kv_shape_of, load_model, model_config
from engine.synthetic import synthetic_tokenizer

UNFINISHED = "is not whole: the download did not finish. Pull it again to resume it, or remove it."


def mark(folder: Path, complete: bool | None) -> Path:
    """The marker app/model_pull.py writes (its MARKER: the engine does not import the app)."""
    folder.mkdir(parents=True, exist_ok=True)
    marker = {"repo": "someone/model", "commit": "abc", "done": []}
    if complete is not None:
        marker["complete"] = complete
    (folder / DOWNLOAD_MARKER).write_text(json.dumps(marker), encoding="utf-8")
    return folder


def message(call) -> str:
    with pytest.raises(ModelLoadError) as raised:
        call()
    return raised.value.user_message()


def test_the_marker_name_is_the_apps():
    from app.models_folder import MARKER

    assert DOWNLOAD_MARKER == MARKER


def test_a_stopped_pull_before_its_config_says_so_to_run_and_plan(tmp_path):
    folder = mark(tmp_path / "someone--model", complete=False)
    for call in (lambda: load_model(ModelSpec(str(folder))), lambda: model_config(str(folder)),
                 lambda: kv_shape_of(str(folder))):
        assert message(call) == f"model folder {folder} {UNFINISHED}"


@pytest.mark.parametrize("complete", [True, None])
def test_a_finished_or_unmarked_pull_without_config_says_what_it_did(tmp_path, complete):
    folder = mark(tmp_path / "model", complete)
    assert f"model folder {folder} has no config.json." in message(lambda: load_model(ModelSpec(str(folder))))


def test_a_damaged_marker_is_no_reason(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / DOWNLOAD_MARKER).write_text("{not json", encoding="utf-8")
    assert "has no config.json" in message(lambda: load_model(ModelSpec(str(folder))))


@pytest.fixture
def whole(tmp_path: Path, tiny) -> Path:
    """synthetic:tiny-llama saved whole: config, weights and tokenizer."""
    folder = tmp_path / "someone--tiny"
    tiny.model.save_pretrained(folder)
    synthetic_tokenizer(tiny.model.config.vocab_size).save_pretrained(folder)
    return folder


def test_a_run_on_a_stopped_pull_with_its_config_says_so(whole):
    mark(whole, complete=False)
    assert message(lambda: load_model(ModelSpec(str(whole)))) == f"model folder {whole} {UNFINISHED}"
    mark(whole, complete=True)
    assert load_model(ModelSpec(str(whole))).name == whole.name


def test_a_stopped_pull_of_one_gguf_says_so(tmp_path):
    folder = mark(tmp_path / "someone--model-GGUF", complete=False)
    assert message(lambda: load_model(ModelSpec(str(folder / "model.Q4_K_M.gguf")))) == \
        f"model folder {folder} {UNFINISHED}"


def test_a_damaged_config_is_said_as_the_config_not_the_tokenizer(whole):
    (whole / "config.json").write_text('{"model_type": "llama",', encoding="utf-8")
    said = message(lambda: load_model(ModelSpec(str(whole))))
    assert said.startswith(f"could not load the model config at {whole}: ") and "not a valid JSON file" in said
    assert "tokenizer" not in said
    assert said.split(":")[0] == message(lambda: model_config(str(whole))).split(":")[0]  # as a plan says it
