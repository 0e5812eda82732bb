"""A family that reads its labels through the LM head (RLHFlow, Math-Shepherd) named before a reward-head PRM folder,
which has no LM head: transformers filled `lm_head.weight` with random numbers, logged a table and the run scored
steps at random. The run now refuses the weights it lacks, and `plan` and eval's pre-check say so in its words."""

from __future__ import annotations

import pytest
import torch

import engine.models
from app import planner
from app.cli import main
from engine.errors import ModelLoadError
from engine.verifiers.families import load_prm
from engine.verifiers.synthetic_prm import save_synthetic_prm
from tests.test_eval_cli import TINY, three_problems

FLAGS = ["--model", "synthetic:tiny-qwen2", "--device", "cpu", "--beams", "2", "--width", "2", "--max-steps", "2",
         "--step-tokens", "8"]


@pytest.fixture(autouse=True)
def patient_plans(monkeypatch):
    monkeypatch.setattr(planner, "PLAN_SECONDS", 120.0)


@pytest.fixture
def headless_lm(tmp_path) -> str:
    """A Qwen2.5-Math-PRM folder (a two-class head, no LM head; a ChatML template) named an RLHFlow PRM."""
    return f"rlhflow-prm:{save_synthetic_prm('tiny-qwen-prm', tmp_path / 'qwen')}"


def test_the_run_refuses_the_missing_lm_head(headless_lm):
    with pytest.raises(ModelLoadError) as raised:
        load_prm(headless_lm, torch.device("cpu"), torch.float32)
    message = raised.value.user_message()
    assert "lacks RLHFlow PRM weights its config.json names (lm_head.weight)" in message
    assert "Check the family named before the path (rlhflow-prm:)" in message


def test_plan_and_eval_say_it_in_the_runs_words(headless_lm, tmp_path, capsys, monkeypatch):
    argv = ["--verifier", "prm", "--verifier-model", headless_lm]
    assert main(["run", "What is 2+2?", *FLAGS, *argv, "--no-save"]) == 2
    refusal = capsys.readouterr().err.strip().splitlines()[-1].removeprefix("beamwise: error: ")
    assert "(lm_head.weight)" in refusal
    assert main(["plan", "What is 2+2?", *FLAGS, *argv]) == 3
    assert f"[red] It cannot run with this model: {refusal}" in capsys.readouterr().out
    loads = []
    real = engine.models.load_model
    monkeypatch.setattr(engine.models, "load_model", lambda *a, **k: loads.append(a) or real(*a, **k))
    assert main(["eval", str(three_problems(tmp_path)), *TINY, *argv, "--no-save"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"beamwise: error: {refusal}"] and loads == []
