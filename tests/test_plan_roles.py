"""A model in a part it cannot play is red in the plan with the run's own words: a PRM folder as the generator, a
folder that is no PRM as the verifier (`plan` said green for both, where `run` refuses them)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from app import planner
from app.cli import main
from app.planner import DeviceInfo, plan
from engine.config import CacheConfig, ModelSpec, SearchConfig
from engine.verifiers.synthetic_prm import save_synthetic_prm

FLAGS = ["--device", "cpu", "--beams", "2", "--width", "2", "--max-steps", "2", "--step-tokens", "8"]
EMULATED = DeviceInfo("cpu (emulated GPU)", True, 16_000_000_000)
SEARCH = SearchConfig(beams=2, width=2, max_steps=2, step_tokens=8)
TINY_QWEN = ModelSpec("synthetic:tiny-qwen2")


@pytest.fixture(autouse=True)
def patient_plans(monkeypatch):
    monkeypatch.setattr(planner, "PLAN_SECONDS", 120.0)


@pytest.fixture
def generator_folder(tiny, tmp_path) -> Path:
    """synthetic:tiny-llama as a model folder: a causal LM with its tokenizer and no reward head."""
    folder = tmp_path / "tiny-llama"
    tiny.model.save_pretrained(folder)
    tiny.tokenizer.save_pretrained(folder)
    return folder


def _run_refusal(capsys, args: list[str]) -> str:
    assert main(["run", "What is 2+2?", *args, *FLAGS, "--no-save"]) == 2
    return capsys.readouterr().err.strip().splitlines()[-1].removeprefix("beamwise: error: ")


def test_a_prm_folder_as_the_generator_is_red_in_the_runs_words(tmp_path, capsys):
    folder = save_synthetic_prm("tiny-qwen-prm", tmp_path / "prm")
    refusal = _run_refusal(capsys, ["--model", str(folder)])
    assert refusal.startswith(f"{folder} is a process reward model") and "pick a generator model" in refusal
    assert main(["plan", "What is 2+2?", "--model", str(folder), *FLAGS]) == 3
    assert f"[red] It cannot run with this model: {refusal}" in capsys.readouterr().out


def test_a_causal_lm_folder_as_the_verifier_is_red_in_the_runs_words(generator_folder, capsys):
    as_prm = ["--model", "synthetic:tiny-qwen2", "--verifier", "prm", "--verifier-model", str(generator_folder)]
    refusal = _run_refusal(capsys, as_prm)
    assert refusal.startswith(f"{generator_folder} holds a causal LM") and "no reward head" in refusal
    assert main(["plan", "What is 2+2?", *as_prm, *FLAGS]) == 3
    assert f"[red] It cannot run with this model: {refusal}" in capsys.readouterr().out


def test_a_family_named_before_a_folder_without_its_head_is_red_in_the_runs_words(generator_folder, capsys):
    """`qwen-prm:FOLDER` is taken at its word: the run checks the family's head before loading, and the plan too."""
    as_prm = ["--model", "synthetic:tiny-qwen2", "--verifier", "prm", "--verifier-model",
              f"qwen-prm:{generator_folder}"]
    refusal = _run_refusal(capsys, as_prm)
    assert refusal.startswith(f"{generator_folder} has no Qwen2.5-Math-PRM reward head"), refusal
    assert main(["plan", "What is 2+2?", *as_prm, *FLAGS]) == 3
    assert f"[red] It cannot run with this model: {refusal}" in capsys.readouterr().out


def test_the_same_folders_in_their_own_parts_are_not_refused(generator_folder, tmp_path):
    prm = save_synthetic_prm("tiny-qwen-prm", tmp_path / "prm")
    search = SearchConfig(beams=2, width=2, max_steps=2, step_tokens=8, verifier="prm", verifier_model=str(prm))
    p = plan(ModelSpec(str(generator_folder)), search, CacheConfig(), question="What is 2+2?", device=EMULATED)
    assert p.state == "green", p.sentence
    named = SearchConfig(beams=2, width=2, max_steps=2, step_tokens=8, verifier="prm",
                         verifier_model=f"rlhflow-prm:{generator_folder}")  # the family named: the run takes it
    # (not math-shepherd: its tokenizer has no ` ки` token, which the run refuses: tests/test_plan_prm_tokenizer.py)
    assert plan(TINY_QWEN, named, CacheConfig(), question="What is 2+2?", device=EMULATED).state == "green"


def test_a_prm_whose_head_is_missing_is_red_but_one_not_yet_downloaded_is_planned(tmp_path):
    """A config and tokenizer with no weights plans a PRM before its download (as before); weights there without
    the head the config names are what the run refuses."""
    headless = save_synthetic_prm("tiny-qwen-prm", tmp_path / "headless", drop_head=True)
    search = SearchConfig(beams=2, width=2, max_steps=2, step_tokens=8, verifier="prm", verifier_model=str(headless))
    p = plan(TINY_QWEN, search, CacheConfig(), question="What is 2+2?", device=EMULATED)
    assert p.state == "red" and "score.0.weight" in p.sentence and "is missing" in p.sentence, p.sentence
    (headless / "model.safetensors").unlink()  # the config and tokenizer only: not downloaded yet
    p = plan(TINY_QWEN, search, CacheConfig(), question="What is 2+2?", device=EMULATED)
    assert p.state == "green", p.sentence


def test_a_prm_with_its_lm_head_too_is_a_generator_the_run_loads(tmp_path, generator_folder):
    """The run refuses a reward head only where the LM head is missing: a folder with both loads as a generator."""
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "both"
    shutil.copytree(generator_folder, folder)
    weights = load_file(str(folder / "model.safetensors"))
    hidden = weights["lm_head.weight"].shape[1]
    weights["v_head.summary.weight"] = weights["lm_head.weight"][:1].clone().reshape(1, hidden)
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    p = plan(ModelSpec(str(folder)), SEARCH, CacheConfig(), question="What is 2+2?", device=EMULATED)
    assert p.state == "green", p.sentence


def test_the_window_plan_bar_is_red_for_a_prm_as_the_generator(qtbot, tmp_path):
    from app.gui.plan_bar import PlanBar

    folder = save_synthetic_prm("tiny-qwen-prm", tmp_path / "prm")
    configs = (ModelSpec(str(folder)), SEARCH, CacheConfig(device="cpu"))
    bar = PlanBar(lambda: configs, lambda: ("What is 2+2?", ()))
    qtbot.addWidget(bar)
    with qtbot.waitSignal(bar.planned, timeout=10_000) as blocker:
        bar.refresh_now()
    assert blocker.args[0].state == "red"
    assert "is a process reward model" in bar.sentence.text() and "pick a generator model" in bar.sentence.text()


def test_the_entropy_exit_on_a_self_judge_that_cannot_run_layer_by_layer_is_red_in_the_runs_words(capsys, tmp_path,
                                                                                                 monkeypatch):
    """plan said green, and run and eval refused it once the model had loaded (OPT has no Llama-style body)."""
    flags = ["--verifier", "self-judge", "--entropy-exit", "--beams", "2", "--width", "2", "--max-steps", "1"]
    assert main(["plan", "What is 2+3?", "--model", "synthetic:tiny-opt", *flags]) == 3
    said = capsys.readouterr().out
    assert "[red] It cannot run with this model: the self-judge verifier's model (OPTModel) cannot run layer by" in said
    assert "the exit needs a Llama-, Mistral- or Qwen2-shaped generator" in said
    assert main(["plan", "What is 2+3?", "--model", "synthetic:tiny-llama", *flags]) == 0
    capsys.readouterr()
    problems = tmp_path / "p.jsonl"
    problems.write_text('{"question": "What is 2+3?", "answer": "5"}\n')
    monkeypatch.setattr("engine.models.load_model", None)  # refused before any model loads
    assert main(["eval", str(problems), *flags, "--model", "synthetic:tiny-opt", "--no-save"]) == 2
    assert "(OPTModel) cannot run layer by layer" in capsys.readouterr().err
