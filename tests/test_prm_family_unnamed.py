"""The one PRM-folder refusal the window answers by asking for a family: a causal LM whose folder and config name
no PRM family raises PRMFamilyUnnamed (still a NotAPRM, its words unchanged); every other refusal does not, so the
window says those and asks nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.errors import NotAPRM, PRMFamilyUnnamed, PRMHeadMissing
from engine.prm_folders import detect_family


def folder_with(tmp_path: Path, config: object, name: str = "my-lm") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


def test_a_causal_lm_that_names_no_family_is_refused_as_unnamed_in_the_same_words(tmp_path):
    folder = folder_with(tmp_path, {"architectures": ["LlamaForCausalLM"], "_name_or_path": "someone/my-lm"})
    with pytest.raises(PRMFamilyUnnamed) as raised:
        detect_family(folder)
    assert isinstance(raised.value, NotAPRM)  # the CLI and the run catch it as before
    assert raised.value.user_message() == (
        f"{folder} holds a causal LM (LlamaForCausalLM) with no reward head and no name of a PRM family "
        "(Math-Shepherd, RLHFlow). If it is one, name the family before the path: math-shepherd:PATH or "
        "rlhflow-prm:PATH.")


@pytest.mark.parametrize("config", [
    {"architectures": ["BertForSequenceClassification"]},  # no causal LM
    {"architectures": "LlamaForCausalLM"},  # not a list: not a transformers config
    {"architectures": None},  # no architecture
    ["LlamaForCausalLM"],  # not an object
])
def test_a_folder_that_is_no_causal_lm_is_not_refused_as_unnamed(tmp_path, config):
    with pytest.raises(NotAPRM) as raised:
        detect_family(folder_with(tmp_path, config))
    assert not isinstance(raised.value, PRMFamilyUnnamed)


def test_a_folder_without_a_config_or_with_a_missing_head_is_not_refused_as_unnamed(tmp_path):
    for folder in (tmp_path / "gone", tmp_path):  # missing; no config.json
        with pytest.raises(NotAPRM) as raised:
            detect_family(folder)
        assert not isinstance(raised.value, PRMFamilyUnnamed)
    skywork = folder_with(tmp_path, {"architectures": ["Qwen2ForCausalLM"]}, name="skywork-prm")
    with pytest.raises(PRMHeadMissing) as raised:  # Skywork's name, no v_head: incomplete, no family to ask
        detect_family(skywork)
    assert not isinstance(raised.value, PRMFamilyUnnamed)
