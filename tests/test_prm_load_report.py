"""Loading a Qwen2.5-Math-PRM or Skywork folder printed transformers' LOAD REPORT on stderr, listing the head
tensors Beamwise reads itself (`score.*`; `v_head.*` and `lm_head`) as UNEXPECTED, "not ok if you expect identical
arch", on every run. Those are left out now, and a body weight the checkpoint lacks (which transformers fills with
random numbers) refuses the load in words, as the generator's load does."""

from __future__ import annotations

import logging

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.errors import ModelLoadError
from engine.verifiers.families import load_prm
from engine.verifiers.synthetic_prm import save_synthetic_prm

CPU = torch.device("cpu")


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def reports():
    """What transformers logs from its model loading (its LOAD REPORT is a warning there)."""
    kept, logger = Kept(), logging.getLogger("transformers.modeling_utils")
    level = logger.level
    logger.addHandler(kept)
    logger.setLevel(logging.WARNING)
    yield kept.messages
    logger.removeHandler(kept)
    logger.setLevel(level)


@pytest.mark.parametrize("name", ["tiny-qwen-prm", "tiny-skywork-prm", "tiny-math-shepherd", "tiny-rlhflow-prm"])
def test_a_prm_folder_loads_without_a_report_of_its_heads(tmp_path, reports, name):
    parts = load_prm(str(save_synthetic_prm(name, tmp_path / name)), CPU, torch.float32)
    assert parts.head is not None
    assert not [m for m in reports if "LOAD REPORT" in m], reports


def test_a_missing_body_weight_is_refused_and_still_reported(tmp_path, reports):
    folder = save_synthetic_prm("tiny-qwen-prm", tmp_path / "qwen")
    weights = folder / "model.safetensors"
    tensors = load_file(str(weights))
    del tensors["model.norm.weight"]
    save_file(tensors, str(weights), metadata={"format": "pt"})
    with pytest.raises(ModelLoadError) as raised:
        load_prm(str(folder), CPU, torch.float32)
    message = raised.value.user_message()
    assert f"{folder} lacks Qwen2.5-Math-PRM weights its config.json names (norm.weight)" in message
    assert "download the PRM again" in message
    report = [m for m in reports if "LOAD REPORT" in m]
    assert report and "norm.weight" in report[0] and "MISSING" in report[0] and "score" not in report[0]
