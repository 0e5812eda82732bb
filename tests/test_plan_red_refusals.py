"""A red plan says whether the run refuses its settings or may refuse them at a later step, and a verifier share the
plan does not call red is never refused: it holds one path at its longest, each step read in as many of the
verifier's tokens as the step can be (the PRM re-reads the decoded text with its own tokenizer and format)."""

from __future__ import annotations

import re

import pytest

from app import planner
from app.cli import main
from app.model_facts import facts_of
from app.planner import DeviceInfo, plan
from engine.config import CacheConfig, ModelSpec, SearchConfig
from engine.search import run

TINY = ModelSpec("synthetic:tiny-llama")
EMULATED = DeviceInfo("cpu (emulated GPU)", True, 16_000_000_000)
QUESTION = "What is 17 * 23?"
SHARE_RUN = ["--model", "synthetic:tiny-qwen2", "--device", "cpu", "--verifier", "prm", "--verifier-model",
             "synthetic:tiny-qwen-prm", "--beams", "2", "--width", "2", "--max-steps", "2", "--step-tokens", "16",
             "--kv-budget", "500kB"]


@pytest.fixture(autouse=True)
def patient_plans(monkeypatch, tmp_path):
    """A busy machine must not stop the plan-only run; runs save nothing outside the test's folder."""
    monkeypatch.setattr(planner, "PLAN_SECONDS", 120.0)
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))


def _last_error(err: str) -> str:
    return err.strip().splitlines()[-1].removeprefix("beamwise: error: ")


def test_the_share_a_red_plan_recommends_runs_to_the_end_and_the_one_it_said_before_is_red(capsys):
    """`plan --verifier-kv-share 0.01` recommended 0.15 (one path counted in 16 PRM tokens a 16-token step) and was
    amber at 0.15, where the run refused step 2 (its PRM read 148 columns for the 133 planned). The plan now counts
    each step in k x f tokens: 0.15 is red, as the run refuses it, and the share it names runs every step."""
    assert main(["plan", QUESTION, *SHARE_RUN, "--verifier-kv-share", "0.01"]) == 3
    out = capsys.readouterr().out
    recommended = re.search(r"With --verifier-kv-share ([0-9.]+) or", out).group(1)
    assert float(recommended) > 0.15, out

    assert main(["run", QUESTION, *SHARE_RUN, "--verifier-kv-share", "0.15", "--no-save"]) == 2
    refused = _last_error(capsys.readouterr().err)
    assert "the verifier's KV share 75.0 kB is too small" in refused, refused
    assert main(["plan", QUESTION, *SHARE_RUN, "--verifier-kv-share", "0.15"]) == 3
    out = capsys.readouterr().out
    assert "[red] It may be refused at step 1, where its steps run to their full length" in out, out

    assert main(["plan", QUESTION, *SHARE_RUN, "--verifier-kv-share", recommended]) == 0
    assert "[red]" not in capsys.readouterr().out
    assert main(["run", QUESTION, *SHARE_RUN, "--verifier-kv-share", recommended, "--no-save"]) == 0
    out = capsys.readouterr().out
    assert "== step 2" in out and "answer:" in out


def test_a_share_under_the_question_alone_cannot_run():
    """The question's own arena does not depend on the paths: the run refuses it in step 1 whatever they do."""
    search = SearchConfig(beams=2, width=2, max_steps=2, step_tokens=16, verifier="prm",
                          verifier_model="synthetic:tiny-qwen-prm")
    cache = CacheConfig(kv_budget_bytes=500_000, verifier_kv_share=0.01, prefix_cache=False)
    p = plan(ModelSpec("synthetic:tiny-qwen2"), search, cache, question=QUESTION, device=EMULATED)
    assert p.state == "red" and p.sentence.startswith("It cannot run with these settings: the verifier's KV share")


def test_rlhflows_later_steps_are_counted_at_their_longest():
    """RLHFlow's later step closes the turn before it: its format adds more tokens around it than around the first
    (tiny-rlhflow-prm: 23 to 13), and the plan's shape, as the run's share (engine.verifiers.path_kv.format_tokens),
    counts the later one."""
    from app.prompt_size import _COUNTING, _prm_layout

    search = SearchConfig(beams=1, width=1, max_steps=3, step_tokens=8, verifier="prm",
                          verifier_model="synthetic:tiny-rlhflow-prm")
    facts = facts_of("synthetic:tiny-rlhflow-prm", "float32")
    shape = planner._verifier_shape(TINY.source, search, facts, QUESTION, 60)
    layout = _prm_layout(TINY.source, search.verifier_model)
    with _COUNTING:
        first, later = (len(layout.body(QUESTION, done, "1")) for done in ((), ("1",)))
    assert later > first and shape.per_step >= later


def test_a_refusal_at_a_later_step_is_red_and_says_the_run_may_be_refused_there(tiny, capsys):
    """`plan` said "It cannot run" (red, exit 3) for a budget its plan-only run refused at step 2, where a run whose
    paths ended at EOS in step 1 ran to the end. Red still (no step of a green or amber plan is refused), but the
    sentence says the run may be refused at step 2, where its paths run to their full length, as they do here."""
    search = SearchConfig(beams=4, width=2, max_steps=3, step_tokens=16)
    cache = CacheConfig(policy="lbs", kv_budget_bytes=140_000, prefix_cache=False)
    p = plan(TINY, search, cache, question=QUESTION, device=EMULATED)
    events = list(run(QUESTION, tiny, search, cache))
    failed = next(e for e in events if e.type == "run_failed")
    assert [e.step for e in events if e.type == "step_started"] == [1, 2]
    assert p.state == "red"
    assert p.sentence == f"It may be refused at step 2, where its paths run to their full length: {failed.message}"
    flags = ["--model", "synthetic:tiny-llama", "--device", "cpu", "--beams", "4", "--width", "2", "--max-steps", "3",
             "--step-tokens", "16", "--policy", "lbs", "--kv-budget", "140000", "--no-prefix-cache"]
    assert main(["plan", QUESTION, *flags]) == 3
    assert "[red] It may be refused at step 2, where its paths run to their full length" in capsys.readouterr().out


def test_a_refusal_in_step_1_cannot_run(tiny):
    """Step 1 starts from the question alone: its refusal does not depend on the paths (and the run says it before
    the model reads the question: no prefill, no step started)."""
    search = SearchConfig(beams=4, width=2, max_steps=3, step_tokens=16)
    cache = CacheConfig(policy="lbs", kv_budget_bytes=120_000, prefix_cache=False)
    p = plan(TINY, search, cache, question=QUESTION, device=EMULATED)
    events = list(run(QUESTION, tiny, search, cache))
    failed = next(e for e in events if e.type == "run_failed")
    assert [e.type for e in events] == ["run_started", "run_failed"]
    assert p.state == "red" and p.sentence == f"It cannot run with these settings: {failed.message}"


def test_the_refusal_sentence_names_the_step():
    assert planner.refusal_sentence("why", 0) == "It cannot run with these settings: why"
    assert planner.refusal_sentence("why", 1) == "It cannot run with these settings: why"
    assert planner.refusal_sentence("why", 3) == "It may be refused at step 3, where its paths run to their full " \
                                                 "length: why"
