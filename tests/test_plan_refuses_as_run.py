"""`beamwise plan` is red (exit 3) in the run's own words where the run refuses the device or the model by name
(`--device cuda` without CUDA, a synthetic PRM as `--model`), and its empty-question message names `plan`."""

from __future__ import annotations

import pytest
import torch

from app import planner
from app.cli import main
from app.planner import DeviceInfo, plan
from engine.config import CacheConfig, ModelSpec, SearchConfig
from engine.prm_names import SYNTHETIC_PRM_FAMILIES

FLAGS = ["--beams", "2", "--width", "2", "--max-steps", "2", "--step-tokens", "8"]
EMULATED = DeviceInfo("cpu (emulated GPU)", True, 16_000_000_000)
SEARCH = SearchConfig(beams=2, width=2, max_steps=2, step_tokens=8)


@pytest.fixture(autouse=True)
def patient_plans(monkeypatch):
    monkeypatch.setattr(planner, "PLAN_SECONDS", 120.0)


def _run_refusal(capsys, args: list[str]) -> str:
    assert main(["run", "What is 2+2?", *args, *FLAGS, "--no-save"]) == 2
    return capsys.readouterr().err.strip().splitlines()[-1].removeprefix("beamwise: error: ")


def test_cuda_without_a_cuda_device_is_red_in_the_runs_words(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    args = ["--device", "cuda", "--model", "synthetic:tiny-llama"]
    refusal = _run_refusal(capsys, args)
    assert refusal == "CUDA was asked for but no CUDA device is available. Use --device cpu."
    assert main(["plan", "What is 2+2?", *args, *FLAGS]) == 3
    out = capsys.readouterr().out
    assert f"[red] It cannot run with these settings: {refusal}" in out
    assert "Everything fits" not in out


def test_the_plan_bar_shares_the_cuda_refusal(monkeypatch):
    """The window plans with plan() too: its bar turns red for --device cuda where no CUDA device is."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cuda = plan(ModelSpec("synthetic:tiny-llama"), SEARCH, CacheConfig(device="cuda"), device=EMULATED)
    assert cuda.state == "red" and "no CUDA device is available" in cuda.sentence
    cpu = plan(ModelSpec("synthetic:tiny-llama"), SEARCH, CacheConfig(device="cpu"), device=EMULATED)
    assert cpu.state != "red"


@pytest.mark.parametrize("name", sorted(SYNTHETIC_PRM_FAMILIES))
def test_a_synthetic_prm_as_the_generator_is_red_in_the_runs_words(name, capsys):
    args = ["--device", "cpu", "--model", f"synthetic:{name}"]
    refusal = _run_refusal(capsys, args)
    assert refusal.startswith(f"synthetic:{name} is a process reward model") and "pick a generator model" in refusal
    assert main(["plan", "What is 2+2?", *args, *FLAGS]) == 3
    assert f"[red] It cannot run with this model: {refusal}" in capsys.readouterr().out


def test_a_synthetic_generator_is_not_refused_by_name():
    planned = plan(ModelSpec("synthetic:tiny-llama"), SEARCH, CacheConfig(device="cpu"), device=EMULATED)
    assert "It cannot run with this model" not in planned.sentence


def test_an_empty_question_names_plan(tmp_path, capsys):
    assert main(["plan", ""]) == 2
    assert 'e.g. beamwise plan "What is 12*7?"' in capsys.readouterr().err
    empty = tmp_path / "q.txt"
    empty.write_text("  \n", encoding="utf-8")
    assert main(["plan", "--question-file", str(empty)]) == 2
    err = capsys.readouterr().err
    assert f"the question file {empty} is empty" in err and 'e.g. beamwise plan "What is 12*7?"' in err


def test_run_still_names_run(capsys):
    assert main(["run", "", "--no-save"]) == 2
    assert 'e.g. beamwise run "What is 12*7?"' in capsys.readouterr().err
