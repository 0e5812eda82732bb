"""The plan says what a run of the same settings does: the policy auto picks, a refusal, the bytes a step moves."""

from __future__ import annotations

import json

import pytest

from app import planner
from app.planner import EQ45_SOURCE, HEADWISE_SOURCE, DeviceInfo, plan
from engine.config import CacheConfig, ModelSpec, SearchConfig
from engine.errors import NotAPRM
from engine.kv.split import VerifierShape
from engine.search import run

TINY = ModelSpec("synthetic:tiny-llama")
EMULATED = DeviceInfo("cpu (emulated GPU)", True, 16_000_000_000)
QUESTION = "What is 2+3?"
LONG = "Explain step by step: " + " ".join(["apples cost 3 dollars each and pears 5 dollars each;"] * 12) + " 7 and 4?"


@pytest.fixture(autouse=True)
def patient_plans(monkeypatch):
    """A busy machine must not stop the plan-only run and turn its exact bytes into the Eq. 4-5 estimate."""
    monkeypatch.setattr(planner, "PLAN_SECONDS", 120.0)


def _run(loaded, search: SearchConfig, cache: CacheConfig, question: str = QUESTION) -> list:
    return list(run(question, loaded, search, cache))


def _started(events: list):
    return next(e for e in events if e.type == "run_started")


def test_auto_picks_headwise_as_the_run_does_when_one_candidate_does_not_fit(tiny):
    """The plan said lbs, and planned lbs's traffic (or refused it), where the run picks head-wise."""
    search, cache = SearchConfig(beams=2, width=2, max_steps=2, step_tokens=8), CacheConfig(kv_budget_bytes=150_000)
    p = plan(TINY, search, cache, question=QUESTION, device=EMULATED)
    events = _run(tiny, search, cache)
    assert p.policy == _started(events).policy == "headwise"
    assert p.state == "amber" and not any(e.type == "run_failed" for e in events)


def test_a_budget_under_one_head_of_the_prompt_is_red_as_the_run_refuses_it(tiny):
    """Head-wise was planned as lbs under a budget the run refuses at its prefill: the plan said amber."""
    search, cache = SearchConfig(beams=4, width=2, max_steps=4, step_tokens=16), CacheConfig(kv_budget_bytes=20_000)
    p = plan(TINY, search, cache, question=QUESTION, device=EMULATED)
    failed = next(e for e in _run(tiny, search, cache) if e.type == "run_failed")
    assert p.state == "red" and p.policy == "headwise" and "one KV head of the prompt" in p.sentence
    assert "one KV head of the prompt" in failed.message


def test_in_device_under_a_budget_too_small_is_red_as_the_run_refuses_it(tiny):
    """in_device was never planned: a budget it cannot run under was green, 'Everything fits'."""
    search = SearchConfig(beams=4, width=2, max_steps=2, step_tokens=4)
    cache = CacheConfig(policy="in_device", kv_budget_bytes=200_000, speculative=True)
    p = plan(TINY, search, cache, question=QUESTION, device=EMULATED)
    failed = next(e for e in _run(tiny, search, cache) if e.type == "run_failed")
    assert p.state == "red" and "too small for keeping the whole search on the device" in p.sentence
    assert "too small for keeping the whole search on the device" in failed.message


def test_self_judge_takes_its_share_of_the_budget_in_the_plan_as_in_the_run(tiny):
    """Self-judge keeps the generator's KV of its paths: the run gives it a share, the plan gave it none."""
    search = SearchConfig(beams=2, width=2, max_steps=2, step_tokens=8, verifier="self-judge")
    cache = CacheConfig(kv_budget_bytes=2_000_000, prefix_cache=False)
    p = plan(TINY, search, cache, question=QUESTION, device=EMULATED)
    started = _started(_run(tiny, search, cache))
    assert p.verifier_kv_bytes == started.verifier_kv_budget_bytes > 0  # its format counted as the run counts it
    assert dict(p.rows())["verifier KV"].endswith("(its share of the KV budget)")  # it said "-"


def test_the_plans_bytes_a_step_are_the_runs_with_its_lookahead(tiny):
    """The plan counted the question's own offload as step traffic and planned no roll-outs: layer-wise, whose
    traffic no selection changes, moves exactly the planned bytes in every step of a real run."""
    search = SearchConfig(beams=2, width=2, max_steps=2, step_tokens=8, lookahead=1, step_delimiter=None)
    cache = CacheConfig(policy="layerwise", kv_budget_bytes=600_000, prefix_cache=False)
    p = plan(TINY, search, cache, question=QUESTION, device=EMULATED)
    steps = [e for e in _run(tiny, search, cache) if e.type == "transfer_stats"]
    moved = [s.step_h2d_bytes + s.step_d2h_bytes for s in steps]
    assert len(moved) == 2 and p.step_pcie_bytes == sum(moved) // 2 > 0
    assert p.traffic_source == "the engine's plan-only run"


def test_an_lbs_plan_only_run_past_its_time_falls_back_to_eq_4_5_and_says_how_far_to_trust_it(monkeypatch):
    monkeypatch.setattr(planner, "PLAN_SECONDS", 0.0)
    search = SearchConfig(beams=4, width=2, max_steps=2, step_tokens=8)
    p = plan(TINY, search, CacheConfig(policy="lbs", kv_budget_bytes=400_000), question=QUESTION, device=EMULATED)
    assert p.traffic_source == EQ45_SOURCE and p.step_pcie_bytes > 0 and p.state == "amber"


def test_a_plan_only_run_stops_at_a_count_of_work_not_a_time(monkeypatch):
    """A plan-only run was stopped after one second: the README's own example printed 226.1 MB on an idle machine
    and the Eq. 4-5 bound of 666.5 MB on a busy one. Its limit is now a count of its work (each forward call's rows
    and layers), whatever the clock says; a plan stopped by it says the figure is at most that."""
    from app import plan_run

    search = SearchConfig(beams=4, width=2, max_steps=2, step_tokens=8)
    cache = CacheConfig(policy="lbs", kv_budget_bytes=400_000)
    whole = plan(TINY, search, cache, question=QUESTION, device=EMULATED)
    assert whole.traffic_source.startswith("the engine's plan-only run") and whole.step_pcie_bytes > 0
    monkeypatch.setattr(plan_run, "PLAN_WORK", 30)  # 8 rows and 3 layers a call: stopped within the first step
    stopped = plan(TINY, search, cache, question=QUESTION, device=EMULATED)
    assert stopped.traffic_source == EQ45_SOURCE and stopped.step_pcie_bytes > whole.step_pcie_bytes
    assert " will move up to " in stopped.sentence and "PCIe: up to about " in stopped.sentence
    assert " up to " not in whole.sentence


def test_a_red_plan_that_was_not_planned_shows_no_pcie_figure(capsys):
    """A question longer than the context is red before any plan-only run: the row said "0 B, about 0 s (the
    engine's plan-only run)" and the JSON 0, as if a run had counted nothing."""
    from app.cli import main

    flags = ["--model", "synthetic:tiny-llama", "--device", "cpu"]
    assert main(["plan", "What is 2+2? " * 400, *flags]) == 3
    assert "PCIe per step           - (not planned: these settings cannot run)" in capsys.readouterr().out
    assert main(["plan", "What is 2+2? " * 400, *flags, "--json"]) == 3
    figures = json.loads(capsys.readouterr().out)
    assert figures["state"] == "red" and figures["step_pcie_bytes"] is None and figures["step_pcie_seconds"] is None


@pytest.mark.parametrize(("search", "budget", "inter_beam"), [
    (SearchConfig(beams=2, width=2, step_tokens=8, max_steps=4, step_delimiter=None), 150_000, True),
    (SearchConfig(beams=4, width=2, step_tokens=8, max_steps=3, step_delimiter=None), 100_000, True),  # 2 groups
    (SearchConfig(beams=4, width=2, step_tokens=8, max_steps=3, step_delimiter=None), 100_000, False),
])
def test_a_headwise_plan_moves_a_runs_bytes_a_step_however_long_its_plan_only_run(tiny, monkeypatch, search, budget,
                                                                                inter_beam):
    """Head-wise fell back to Eq. 4-5 after a second (most of its plan-only runs take longer): 0.13x to 0.5x
    of these runs' bytes. Its closed form is each run's average, the plan-only run stopped at once."""
    monkeypatch.setattr(planner, "PLAN_SECONDS", 0.0)
    monkeypatch.setattr(tiny, "eos_token_ids", ())  # the plan's steps run to their full length
    cache = CacheConfig(policy="headwise", kv_budget_bytes=budget, inter_beam=inter_beam, prefix_cache=False)
    p = plan(TINY, search, cache, question=QUESTION, device=EMULATED)
    moved = [s.step_h2d_bytes + s.step_d2h_bytes for s in _run(tiny, search, cache) if s.type == "transfer_stats"]
    assert p.step_pcie_bytes == sum(moved) // len(moved) and p.traffic_source == HEADWISE_SOURCE


def test_a_headwise_step_past_the_plan_only_runs_time_that_the_run_refuses_is_red(tiny, monkeypatch):
    """A candidate outgrows one KV head at step 3: the plan-only run, stopped before it, said amber."""
    monkeypatch.setattr(planner, "PLAN_SECONDS", 0.0)
    search = SearchConfig(beams=2, width=2, step_tokens=64, max_steps=6, step_delimiter=None)
    cache = CacheConfig(policy="headwise", kv_budget_bytes=100_000)
    p = plan(TINY, search, cache, question=QUESTION, device=EMULATED)
    events = _run(tiny, search, cache)
    failed = next(e for e in events if e.type == "run_failed")
    assert [e.step for e in events if e.type == "transfer_stats"] == [1, 2]
    assert p.state == "red" and "one KV head of one candidate" in failed.message and failed.message in p.sentence


def test_the_plans_verifier_share_holds_a_path_read_in_more_tokens_as_the_runs_does(tiny):
    """One candidate a step and a PRM that reads the generator's lone bytes in three tokens each: the run's
    automatic share holds that path; the plan gave its share k tokens a step (155.6 kB against the run's
    204.8 kB) and was green for a budget the run refuses before its first step."""
    search = SearchConfig(beams=1, width=1, max_steps=4, step_tokens=24, method="best-of-n", verifier="prm",
                          verifier_model="synthetic:tiny-math-shepherd")
    cache = CacheConfig(policy="lbs", kv_budget_bytes=1_000_000, prefix_cache=False)
    p = plan(TINY, search, cache, question=QUESTION, device=EMULATED)
    started = _started(_run(tiny, search, cache))
    share = started.verifier_kv_budget_bytes
    assert p.verifier_kv_bytes == share
    tight = CacheConfig(policy="lbs", kv_budget_bytes=2 * p.verifier_kv_bytes - 1, prefix_cache=False)
    p = plan(TINY, search, tight, question=QUESTION, device=EMULATED)
    assert p.state == "red" and "too small for the verifier's longest path" in p.sentence
    refused = _run(tiny, search, CacheConfig(policy="lbs", kv_budget_bytes=2 * share - 1, prefix_cache=False))
    assert [e.type for e in refused] == ["run_failed"]
    assert "too small for the verifier's longest path" in refused[0].message


@pytest.mark.parametrize("prm", ["tiny-rlhflow-prm", "tiny-math-shepherd", "tiny-qwen-prm", "tiny-skywork-prm"])
def test_the_plans_automatic_verifier_share_is_the_runs_for_every_prm_family(tiny, prm):
    """The plan took the generator's whole prompt (its system prompt and chat template) for the PRM's question
    and a guessed 4 tokens around a step; it counts what the PRM's own layout reads, as the run does."""
    search = SearchConfig(beams=2, width=2, max_steps=2, step_tokens=8, verifier="prm",
                          verifier_model=f"synthetic:{prm}")
    cache = CacheConfig(kv_budget_bytes=8_000_000, prefix_cache=False)
    p = plan(TINY, search, cache, question=QUESTION, device=EMULATED)
    assert p.verifier_kv_bytes == _started(_run(tiny, search, cache)).verifier_kv_budget_bytes > 0


def test_a_prm_near_the_budgets_edge_is_not_red_where_the_run_runs(tiny):
    """RLHFlow, 2 x 3 candidates, a roll-out, 200 kB: the plan's longest path (the generator's prompt as the
    question) asked for 213 kB and said red; the run's holds in its half and it ran (plan_vs_run, seed 7)."""
    search = SearchConfig(beams=2, width=3, max_steps=1, step_tokens=4, lookahead=1, verifier="prm",
                          verifier_model="synthetic:tiny-rlhflow-prm")
    cache = CacheConfig(kv_budget_bytes=200_000, prefill_chunk=64, prefix_cache=False)
    p = plan(TINY, search, cache, question=QUESTION, device=EMULATED)
    events = _run(tiny, search, cache)
    assert p.state != "red" and not any(e.type == "run_failed" for e in events)


def test_a_share_set_that_cannot_hold_one_path_is_red_in_the_runs_words_with_what_would(tiny):
    """Self-judge under --verifier-kv-share 0.25 of 500 kB: its question alone does not fit the share, and the run
    refuses it at step 1; the plan checked no path against a share the user set and said amber."""
    search = SearchConfig(beams=3, width=1, max_steps=1, step_tokens=24, verifier="self-judge")
    cache = CacheConfig(policy="headwise", kv_budget_bytes=500_000, verifier_kv_share=0.25, prefix_cache=False)
    p = plan(TINY, search, cache, question=LONG, device=EMULATED)
    failed = next(e for e in _run(tiny, search, cache, LONG) if e.type == "run_failed")
    assert p.state == "red" and failed.message in p.sentence
    assert "the smallest share that holds it is" in failed.message  # a share: before, 'the smallest budget'
    assert "With a KV budget of" in p.sentence and "at this share, the verifier's part holds one path." in p.sentence
    roomy = CacheConfig(policy="headwise", kv_budget_bytes=4_000_000, verifier_kv_share=0.25, prefix_cache=False)
    assert "verifier's KV share" not in plan(TINY, search, roomy, question=LONG, device=EMULATED).sentence


def test_a_refused_share_is_told_only_a_share_the_options_take():
    """A path that needs 99.6% of the budget asked for `--verifier-kv-share 1`, which the options refuse (a
    share is below 1): the sentence names the budget that holds it at this share instead."""
    shape = VerifierShape(token_bytes=1000, prefix=100, per_step=2, probe=2)  # one path at step 1: 112,000 bytes
    search = SearchConfig(beams=1, width=1, max_steps=1, step_tokens=8)
    nearly_all = planner._share_refusal(shape, search, 1_000, 112_500, 0.01)
    assert "With a KV budget of 11.2 MB at this share, the verifier's part holds one path." in nearly_all, nearly_all
    roomy = planner._share_refusal(shape, search, 1_000, 200_000, 0.01)
    assert "With --verifier-kv-share 0.56 or a KV budget of 11.2 MB at this share" in roomy, roomy


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-prm"])
def test_a_synthetic_model_that_is_no_prm_is_refused_as_the_run_refuses_it(name):
    """The plan took `--verifier-model synthetic:tiny-llama` (a generator) for a PRM and said green, and answered
    `synthetic:tiny-prm` with the generators' names to pick from; the run refuses both as no synthetic PRM."""
    search = SearchConfig(verifier="prm", verifier_model=f"synthetic:{name}")
    with pytest.raises(NotAPRM, match=f"synthetic:{name} is not a synthetic PRM"):
        plan(TINY, search, CacheConfig(), question=QUESTION, device=EMULATED)
