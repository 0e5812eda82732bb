"""A PRM whose tokenizer its family's format cannot use is red in `plan` in the run's words, and refused by eval
before the model loads: Math-Shepherd's step tag ` ки` that is no single token (plan said green for
`math-shepherd:FOLDER` where `run` refused it), and a chat family (RLHFlow, Qwen2.5-Math-PRM) on a tokenizer without a
chat template (the run failed with transformers' bare ValueError, said as a fault in Beamwise; plan said green)."""

from __future__ import annotations

import pytest

import engine.models
from app import planner
from app.cli import main
from app.planner import DeviceInfo, plan
from engine.config import CacheConfig, ModelSpec, SearchConfig
from engine.errors import NotAPRM
from engine.verifiers import verifier_layout
from engine.verifiers.qwen_prm import QwenPRMLayout
from engine.verifiers.synthetic_prm import family_tokenizer, save_synthetic_prm
from tests.test_eval_cli import TINY, three_problems

FLAGS = ["--model", "synthetic:tiny-qwen2", "--device", "cpu", "--beams", "2", "--width", "2", "--max-steps", "2",
         "--step-tokens", "8"]
EMULATED = DeviceInfo("cpu (emulated GPU)", True, 16_000_000_000)


@pytest.fixture(autouse=True)
def patient_plans(monkeypatch):
    monkeypatch.setattr(planner, "PLAN_SECONDS", 120.0)


@pytest.fixture
def misnamed(tmp_path) -> dict[str, str]:
    """PRM folders named for a family whose format their tokenizer cannot write."""
    qwen = save_synthetic_prm("tiny-qwen-prm", tmp_path / "qwen")  # ChatML, no ` ки` token
    shepherd = save_synthetic_prm("tiny-math-shepherd", tmp_path / "shepherd")  # no chat template
    return {"no step tag": f"math-shepherd:{qwen}", "no chat template": f"rlhflow-prm:{shepherd}"}


def _run_refusal(capsys, verifier_model: str) -> str:
    """What `beamwise run` says (exit 2: the user's settings, not a fault)."""
    status = main(["run", "What is 2+2?", *FLAGS, "--verifier", "prm", "--verifier-model", verifier_model, "--no-save"])
    err = capsys.readouterr().err
    assert status == 2, err
    return err.strip().splitlines()[-1].removeprefix("beamwise: error: ")


@pytest.mark.parametrize("kind", ["no step tag", "no chat template"])
def test_plan_is_red_in_the_runs_words(misnamed, capsys, kind):
    refusal = _run_refusal(capsys, misnamed[kind])
    assert ("step tag 'ки'" if kind == "no step tag" else "no chat template") in refusal
    assert "fault" not in refusal
    status = main(["plan", "What is 2+2?", *FLAGS, "--verifier", "prm", "--verifier-model", misnamed[kind]])
    assert status == 3
    assert f"[red] It cannot run with this model: {refusal}" in capsys.readouterr().out


@pytest.mark.parametrize("kind", ["no step tag", "no chat template"])
def test_the_layout_plan_and_eval_read_refuses_as_the_run(misnamed, kind):
    with pytest.raises(NotAPRM, match="step tag" if kind == "no step tag" else "no chat template"):
        verifier_layout("prm", None, misnamed[kind])


def test_eval_refuses_a_prm_without_its_chat_template_before_the_model_loads(misnamed, tmp_path, capsys,
                                                                           monkeypatch):
    loads = []
    real = engine.models.load_model
    monkeypatch.setattr(engine.models, "load_model", lambda *a, **k: loads.append(a) or real(*a, **k))
    argv = ["eval", str(three_problems(tmp_path)), *TINY, "--verifier", "prm", "--verifier-model",
            misnamed["no chat template"], "--no-save"]
    assert main(argv) == 2
    assert "no chat template" in capsys.readouterr().err and loads == []


def test_a_qwen_prm_tokenizer_without_its_chat_template_is_refused():
    tokenizer = family_tokenizer("qwen-prm")
    tokenizer.chat_template = None
    with pytest.raises(NotAPRM, match=r"no chat template; the Qwen2\.5-Math-PRM format is written with one"):
        QwenPRMLayout(tokenizer)


@pytest.mark.parametrize("name", ["tiny-qwen-prm", "tiny-skywork-prm", "tiny-math-shepherd", "tiny-rlhflow-prm"])
def test_every_family_on_its_own_tokenizer_is_still_planned(tmp_path, name):
    folder = save_synthetic_prm(name, tmp_path / name)
    search = SearchConfig(beams=2, width=2, max_steps=2, step_tokens=8, verifier="prm", verifier_model=str(folder))
    p = plan(ModelSpec("synthetic:tiny-qwen2"), search, CacheConfig(), question="What is 2+2?", device=EMULATED)
    assert p.state == "green", p.sentence


def test_the_window_plan_bar_is_red_for_it(qtbot, misnamed):
    from app.gui.plan_bar import PlanBar

    search = SearchConfig(beams=2, width=2, max_steps=2, step_tokens=8, verifier="prm",
                          verifier_model=misnamed["no step tag"])
    configs = (ModelSpec("synthetic:tiny-qwen2"), search, CacheConfig(device="cpu"))
    bar = PlanBar(lambda: configs, lambda: ("What is 2+2?", ()))
    qtbot.addWidget(bar)
    with qtbot.waitSignal(bar.planned, timeout=10_000) as blocker:
        bar.refresh_now()
    assert blocker.args[0].state == "red"
    assert "no single token for the step tag" in bar.sentence.text()


def test_a_tokenizer_broken_after_a_green_plan_is_refused_by_the_next_plan(tmp_path):
    """The plan kept a PRM's layout per source for the process: a tokenizer replaced by one the run refuses kept
    planning green (the window's plan bar too) until a restart."""
    import json

    from app.plan_roles import _layout_refusal
    from engine.verifiers.synthetic_prm import save_synthetic_prm

    folder = tmp_path / "prm"
    save_synthetic_prm("tiny-qwen-prm", folder)
    source = f"qwen-prm:{folder}"
    assert _layout_refusal(source) is None
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    assert _layout_refusal(source) is not None
