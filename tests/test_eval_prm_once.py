"""`beamwise eval` loads a PRM's weights once and passes them to every run, as it does the generator's; each run's
verifier is still new, so a run scores exactly as one that loaded the PRM itself."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

import engine.verifiers
from app import eval_runs
from app.cli import main
from engine.config import CacheConfig, SearchConfig
from engine.errors import ModelLoadError
from engine.search import run
from engine.verifiers import load_verifier_prm

SEARCH = SearchConfig(beams=2, width=2, step_tokens=4, max_steps=3, seed=3, verifier="prm",
                      verifier_model="synthetic:tiny-qwen-prm")
QUESTIONS = ("What is 2+3?", "Tom has 3 apples and buys 4 more. How many?")
TINY = ["--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2", "--step-tokens", "3", "--max-steps", "2"]


def outline(events: list) -> list:
    """What a run decided and scored, without its times: every candidate's text and score, each step's selection
    and the verifier's work in it (its tokens, forwards, exit layers), the answer."""
    kept = []
    for e in events:
        if e.type in ("candidate_text", "candidate_scored", "step_selected"):
            kept.append((e.type, dataclasses.asdict(e)))
        elif e.type == "run_started":
            kept.append((e.type, e.verifier, e.verifier_kv_budget_bytes))
        elif e.type == "run_finished":
            kept.append((e.type, e.answer, e.path, e.score, e.steps, e.candidate_tokens))
    assert events[-1].type == "run_finished", events[-1]
    return kept


@pytest.mark.parametrize(("prm", "changes"), [
    ("tiny-qwen-prm", {}),
    ("tiny-rlhflow-prm", {"entropy_exit": True, "audit_early_exit": True}),  # the exit's per-run tally in play
])
def test_runs_sharing_one_loaded_prm_score_as_runs_that_each_load_it(tiny, prm, changes):
    search = dataclasses.replace(SEARCH, verifier_model=f"synthetic:{prm}", **changes)
    cache = CacheConfig(prefix_cache=False)
    fresh = [outline(list(run(q, tiny, search, cache))) for q in (*QUESTIONS, QUESTIONS[0])]
    parts = load_verifier_prm(tiny, search.verifier_model)  # float32 on the CPU, as the generator
    shared = [outline(list(run(q, tiny, search, cache, prm=parts))) for q in (*QUESTIONS, QUESTIONS[0])]
    assert shared == fresh
    assert shared[0] == shared[2]  # the third run, after two on the same weights, starts as fresh as the first
    if changes:  # each step's exit account is that step's alone, in every run
        tallies = [e[1]["verifier_layer_tokens"] for e in shared[2] if e[0] == "step_selected"]
        assert tallies and all(t > 0 for t in tallies) and tallies == [
            e[1]["verifier_layer_tokens"] for e in fresh[0] if e[0] == "step_selected"]


def test_a_prm_loaded_for_another_device_is_refused(tiny):
    parts = load_verifier_prm(tiny, "synthetic:tiny-qwen-prm")
    parts = dataclasses.replace(parts, device=torch.device("meta"))
    events = list(run(QUESTIONS[0], tiny, SEARCH, CacheConfig(prefix_cache=False), prm=parts))
    assert [e.type for e in events] == ["run_failed"] and "places it on cpu" in events[0].message


def test_an_eval_loads_its_prm_once_before_any_methods_time(tmp_path, monkeypatch):
    """The PRM loaded again for every problem and method, inside the method's wall seconds but outside each run's
    seconds: wall 9.4 s against runs summing to 6.3 s on three problems."""
    said: list[str] = []
    load = engine.verifiers.load_prm

    def counted(*args, **kwargs):
        said.append("load")
        return load(*args, **kwargs)

    clock = eval_runs.SearchClock

    def timed():
        said.append("clock")
        return clock()

    monkeypatch.setattr(engine.verifiers, "load_prm", counted)
    monkeypatch.setattr(eval_runs, "SearchClock", timed)
    problems = tmp_path / "p3.jsonl"
    problems.write_text("".join(json.dumps({"question": f"What is {n}+{n}?", "answer": str(2 * n)}) + "\n"
                                for n in (1, 2, 3)))
    out = tmp_path / "r.json"
    assert main(["eval", str(problems), *TINY, "--compare", "beam,best-of-n", "--verifier", "prm",
                 "--verifier-model", "synthetic:tiny-qwen-prm", "--no-save", "--json", str(out)]) == 0
    assert said == ["load"] + ["clock"] * 6, said  # 3 problems x 2 methods, the one load before the first clock
    runs = json.loads(out.read_text())["runs"]
    assert len(runs) == 6 and all(r["status"] == "finished" for r in runs), runs


def test_a_prm_that_does_not_load_fails_each_run_in_its_own_words(tmp_path, capsys, monkeypatch):
    """Loading it once must not turn its error into the eval's: each run fails with it, as before (a damaged
    weights file passes the options' checks and fails as the weights load)."""
    def damaged(*args, **kwargs):
        raise ModelLoadError("the PRM's weights file is damaged.")

    monkeypatch.setattr(engine.verifiers, "load_prm", damaged)
    problems = tmp_path / "p.jsonl"
    problems.write_text('{"question": "What is 2+3?", "answer": "5"}\n{"question": "What is 1+1?", "answer": "2"}\n')
    main(["eval", str(problems), *TINY, "--verifier", "prm", "--verifier-model", "synthetic:tiny-qwen-prm",
          "--no-save"])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[eval]")]
    assert len(lines) == 2 and all(": failed: the PRM's weights file is damaged." in line for line in lines), \
        lines
