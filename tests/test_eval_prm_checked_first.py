"""A PRM the run refuses whatever the question (a folder that is not there, a family named for a folder of another
kind) failed each of the eval's problem x method runs in turn, each after the model had loaded; `beamwise run` stops
at once. The eval now refuses it before the generator loads, in the run's words, with exit 2."""

from __future__ import annotations

import pytest

import engine.models
from app.cli import main
from engine.verifiers.synthetic_prm import save_synthetic_prm
from tests.test_eval_cli import TINY, three_problems


def run_refusal(capsys, verifier_model: str) -> str:
    """What `beamwise run` says for this PRM (its last line on stderr)."""
    assert main(["run", "What is 2+3?", *TINY, "--verifier", "prm", "--verifier-model", verifier_model,
                 "--no-save"]) == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize("kind", ["missing", "head of another family", "tag of another family", "no synthetic PRM"])
def test_a_prm_the_run_refuses_is_refused_before_the_model_loads(tmp_path, capsys, monkeypatch, kind):
    verifier_model = {
        "missing": str(tmp_path / "no" / "such" / "folder"),
        "head of another family": f"qwen-prm:{save_synthetic_prm('tiny-math-shepherd', tmp_path / 'shepherd')}",
        "tag of another family": f"math-shepherd:{save_synthetic_prm('tiny-qwen-prm', tmp_path / 'qwen')}",
        "no synthetic PRM": "synthetic:tiny-llama",
    }[kind]
    said = run_refusal(capsys, verifier_model)
    loads = []
    real = engine.models.load_model
    monkeypatch.setattr(engine.models, "load_model", lambda *a, **k: loads.append(a) or real(*a, **k))
    argv = ["eval", str(three_problems(tmp_path)), *TINY, "--compare", "beam,dvts", "--verifier", "prm",
            "--verifier-model", verifier_model, "--no-save"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == [said], captured.err
    assert loads == [] and "[eval]" not in captured.err and "problems" not in captured.out


def test_a_prm_the_run_takes_still_runs(tmp_path, capsys):
    folder = save_synthetic_prm("tiny-math-shepherd", tmp_path / "shepherd")
    argv = ["eval", str(three_problems(tmp_path)), *TINY, "--limit", "1", "--verifier", "prm", "--verifier-model",
            str(folder), "--no-save"]
    assert main(argv) == 0
    assert "1 of 1 problems" in capsys.readouterr().out
