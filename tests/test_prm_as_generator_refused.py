"""A reward model (PRM folder) given as --model is refused from its weight names before any weight loads: it was
loaded as a causal LM, and transformers printed its LOAD REPORT (the reward head UNEXPECTED, lm_head MISSING) above
the refusal."""

from __future__ import annotations

import pytest
from transformers import AutoModelForCausalLM

from app.cli import main
from engine.config import ModelSpec
from engine.errors import ModelLoadError
from engine.models import load_model
from engine.verifiers.synthetic_prm import save_synthetic_prm

RUN = ["--beams", "1", "--width", "1", "--max-steps", "1", "--step-tokens", "2", "--no-save"]


@pytest.fixture
def no_weights_loaded(monkeypatch):
    def refused(*args, **kwargs):
        raise AssertionError("weights were loaded")

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", refused)


@pytest.mark.usefixtures("no_weights_loaded", "scratch_models")
def test_a_prm_given_as_the_generator_is_refused_before_its_weights_load(tmp_path, capsys):
    folder = save_synthetic_prm("tiny-qwen-prm", tmp_path / "prm")
    with pytest.raises(ModelLoadError) as refused:
        load_model(ModelSpec(str(folder)))
    message = refused.value.user_message()
    assert "is a process reward model" in message and "--verifier prm --verifier-model" in message
    assert main(["run", "2+2?", "--model", str(folder), *RUN]) == 2
    err = capsys.readouterr().err
    assert "is a process reward model" in err and "LOAD REPORT" not in err and "\x1b[" not in err
