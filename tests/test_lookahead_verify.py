"""LookAhead verification: a speculated whole next step verified in its parent's pass gives the same search,
its remembered score and KV are taken by the child without running it, and what it saves and costs is counted."""

from __future__ import annotations

import dataclasses

import pytest

from app.cli import build_parser, main
from app.options import configs_from_args
from engine import events as ev
from engine.config import CacheConfig, SearchConfig
from engine.search import run
from engine.verifiers import StepToScore, make_verifier
from engine.verifiers.entropy_exit import ExitRule
from tests.test_equivalence import footprint_budget
from tests.test_speculation import events_of, of_type, tree

# "c" and " " are single tokens the random tiny generator samples often, so steps end early and rows
# speculate whole next steps (tests/test_speculation.py)
SEARCH = SearchConfig(beams=2, width=3, step_tokens=10, max_steps=4, step_delimiter="c", seed=0, verifier="prm",
                      verifier_model="synthetic:tiny-math-shepherd")


def verifier_totals(events) -> dict[str, int]:
    selected = of_type(events, "step_selected")
    fields = ("verifier_tokens", "verifier_tokens_full", "verifier_rows", "verifier_forwards", "lookahead_verified",
              "lookahead_used", "lookahead_discarded")
    return {name: sum(getattr(e, name) for e in selected) for name in fields}


def all_scores(events) -> list[float]:
    pairs = [(e.score, e.aggregate) for e in of_type(events, "candidate_scored")]
    return [x for pair in pairs for x in pair] + [events[-1].score]


@pytest.mark.parametrize(
    ("prm", "seed", "delimiter", "method", "beams", "width", "policy"),
    [
        ("tiny-math-shepherd", 0, "c", "beam", 2, 3, "in_device"),
        ("tiny-math-shepherd", 2, " ", "beam", 2, 3, "in_device"),
        ("tiny-qwen-prm", 0, "c", "beam", 2, 3, "in_device"),
        ("tiny-qwen-prm", 3, "c", "beam", 4, 2, "in_device"),
        ("tiny-qwen-prm", 2, "c", "beam", 2, 3, "lbs"),  # groups under a budget, the verifier's KV in its share
        ("tiny-math-shepherd", 4, "c", "best-of-n", 3, 1, "in_device"),  # one child a path: whole groups go
    ],
)
def test_the_same_search_with_lookahead_verification_on_and_off(tiny, prm, seed, delimiter, method, beams, width,
                                                                 policy):
    search = dataclasses.replace(SEARCH, verifier_model=f"synthetic:{prm}", seed=seed, step_delimiter=delimiter,
                                 method=method, beams=beams, width=width, max_steps=5 if width == 1 else 4)
    budget = footprint_budget(tiny, search, 2.5) if policy == "lbs" else None
    cache = CacheConfig(policy=policy, kv_budget_bytes=budget, speculative=True)
    on = events_of(tiny, search, cache)
    off = events_of(tiny, search, dataclasses.replace(cache, lookahead_verify=False))
    assert tree(on) == tree(off)
    assert all_scores(on) == pytest.approx(all_scores(off), rel=0, abs=1e-5)
    a, b = verifier_totals(on), verifier_totals(off)
    assert b["lookahead_verified"] == off[-1].lookahead_verified == 0
    assert a["lookahead_verified"] > 0 and a["lookahead_used"] > 0, "pick seeds whose rows speculate whole steps"
    assert (on[-1].lookahead_verified, on[-1].lookahead_used, on[-1].lookahead_discarded) == (
        a["lookahead_verified"], a["lookahead_used"], a["lookahead_discarded"])
    assert a["lookahead_verified"] == a["lookahead_used"] + a["lookahead_discarded"]  # nothing left waiting
    # what it saves: one row per used look-ahead; what it costs: the tokens of the discarded ones
    assert a["verifier_rows"] == b["verifier_rows"] - a["lookahead_used"]
    assert a["verifier_forwards"] <= b["verifier_forwards"]
    assert a["verifier_tokens_full"] == b["verifier_tokens_full"]
    assert (a["verifier_tokens"] > b["verifier_tokens"]) == (a["lookahead_discarded"] > 0)
    assert a["verifier_tokens"] >= b["verifier_tokens"]
    if width == 1:  # a used look-ahead was its parent's only child: its group, a forward call, is gone
        assert a["verifier_forwards"] < b["verifier_forwards"]
    if policy == "lbs":
        snapshots = of_type(on, "memory_snapshot")
        assert all(e.peak_device_bytes <= e.budget_bytes for e in snapshots)


def test_no_look_ahead_without_speculation_or_a_prm(tiny):
    plain = events_of(tiny, SEARCH, CacheConfig(policy="in_device"))
    logprob = events_of(tiny, dataclasses.replace(SEARCH, verifier="logprob", verifier_model=None),
                        CacheConfig(policy="in_device", speculative=True))
    assert plain[-1].lookahead_verified == logprob[-1].lookahead_verified == 0
    assert logprob[-1].speculative_runs_used > 0  # the speculation was there; the verifier cannot look ahead


QUESTION = "What is 2+3?"


def prm(tiny, name: str = "synthetic:tiny-qwen-prm", exit_rule: ExitRule | None = None):
    return make_verifier("prm", tiny, name, exit_rule=exit_rule)


def pool_bytes(verifier) -> int:
    held = verifier.kv.memory()
    return held.device_bytes + held.host_bytes


def test_the_child_takes_its_remembered_score_and_the_pruned_look_aheads_are_freed(tiny):
    """Step 1: two candidates, each with its first child's next step ahead; one is kept. Step 2: the kept
    one's child is not run (its score and KV wait), its sibling is; then both verifiers hold the same bytes."""
    looking, plain = prm(tiny), prm(tiny)
    first = [StepToScore(QUESTION, (), "Add 2 and 3.", (), ahead="That is 5."),
             StepToScore(QUESTION, (), "Take 3 from 2.", (), ahead="That is -1.")]
    assert looking.score(first) == pytest.approx(plain.score([dataclasses.replace(i, ahead=None) for i in first]),
                                                 abs=1e-5)
    assert len(looking.looked.waiting) == 2
    kept = [first[0].key]
    cost, cost_plain = looking.settle(kept), plain.settle(kept)
    assert (cost.ahead_verified, cost.ahead_used, cost.ahead_discarded) == (2, 0, 1)
    assert cost.rows == cost_plain.rows == 3 and cost.tokens > cost_plain.tokens  # the question, then 2 steps
    assert list(looking.looked.waiting) == [(*first[0].key, "That is 5.")]  # the pruned one's is freed
    second = [StepToScore(QUESTION, ("Add 2 and 3.",), "That is 5.", ()),
              StepToScore(QUESTION, ("Add 2 and 3.",), "So 5.", ())]
    assert looking.score(second) == pytest.approx(plain.score(second), abs=1e-5)
    assert not looking.looked.waiting
    kept = [second[0].key]
    cost, cost_plain = looking.settle(kept), plain.settle(kept)
    assert (cost.ahead_verified, cost.ahead_used, cost.ahead_discarded) == (0, 1, 0)
    assert (cost.rows, cost_plain.rows) == (1, 2) and cost.forwards == cost_plain.forwards == 1
    assert cost.tokens_full == cost_plain.tokens_full and cost.tokens < cost_plain.tokens
    assert pool_bytes(looking) == pool_bytes(plain) > 0 and len(looking._stored) == len(plain._stored)
    looking.close()
    plain.close()


def test_a_step_ranked_without_the_verifier_keeps_its_look_ahead_as_its_kv(tiny):
    """RKSC's verify-skip ranks a step by confidence (no score asked): a kept child's look-ahead becomes its node."""
    looking = prm(tiny)
    looking.score([StepToScore(QUESTION, (), "Add 2 and 3.", (), ahead="That is 5.")])
    looking.settle([(QUESTION, "Add 2 and 3.")])
    child = (QUESTION, "Add 2 and 3.", "That is 5.")
    stored = len(looking._stored)
    cost = looking.settle([child])  # the step was skipped: score() was not called
    assert (cost.ahead_used, cost.ahead_discarded) == (1, 0) and child in looking.nodes
    assert len(looking._stored) == stored  # the question, the parent's step and the child's: nothing freed
    looking.close()


def test_only_a_verifier_that_reads_each_step_at_its_end_and_runs_every_layer_looks_ahead(tiny):
    for name in ("synthetic:tiny-qwen-prm", "synthetic:tiny-math-shepherd", "synthetic:tiny-rlhflow-prm",
                 "synthetic:tiny-skywork-prm"):
        assert prm(tiny, name).looks_ahead, name  # their probe is empty
    assert not prm(tiny, "synthetic:tiny-math-shepherd", ExitRule()).looks_ahead  # a pass may stop early
    assert not make_verifier("self-judge", tiny).looks_ahead  # its score is read after a probe
    assert not make_verifier("logprob", tiny).looks_ahead
    ungrouped = prm(tiny)
    ungrouped.grouped = False
    assert not ungrouped.looks_ahead
    item = StepToScore(QUESTION, (), "Add 2 and 3.", (), ahead="That is 5.")
    judge = make_verifier("self-judge", tiny)
    judge.score([item])  # the look-ahead is ignored
    assert not judge.looked.waiting and judge.settle([item.key]).ahead_verified == 0


def test_the_switch_on_the_command_line_and_older_records():
    parser = build_parser()
    run = parser.parse_args(["run", "--question", "q", "--speculative", "--no-lookahead-verify", "--verifier", "prm",
                             "--verifier-model", "synthetic:tiny-qwen-prm"])  # a PRM: logprob never looks ahead
    assert not configs_from_args(run)[2].lookahead_verify
    assert configs_from_args(parser.parse_args(["run", "--question", "q"]))[2].lookahead_verify  # on by default
    older = CacheConfig().to_dict()
    del older["lookahead_verify"]  # a session stored before the switch
    assert CacheConfig(**older).lookahead_verify
    step = ev.to_dict(ev.StepSelected(2, (3,), (4,)))
    finished = ev.to_dict(ev.RunFinished("5", (3,), 0.5, 2, 10, 1.0, 10.0))
    for data in (step, finished):
        for name in ("lookahead_verified", "lookahead_used", "lookahead_discarded", "verifier_rows"):
            data.pop(name, None)
    assert ev.from_dict(step).lookahead_used == 0 and ev.from_dict(finished).lookahead_verified == 0


def test_bench_shows_the_verifier_columns_with_a_prm(capsys):
    args = ["bench", "--model", "synthetic:tiny-llama", "--beams", "2", "--width", "3", "--step-tokens", "10",
            "--gen-tokens", "40", "--prompt-tokens", "30", "--step-delimiter", "c", "--policies",
            "in_device:+speculative", "--prm", "synthetic:tiny-qwen-prm"]
    assert main(args) == 0
    table = capsys.readouterr().out
    header = next(line for line in table.splitlines() if line.startswith("policy"))
    assert "v.rows" in header and "ahead" in header and "verifier synthetic:tiny-qwen-prm" in table
    assert main([*args, "--no-lookahead-verify"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("in_device"))
    assert row.split()[-2:] == ["0", "-"]  # none verified ahead, so no share used
    assert main([*args, "--backend", "openai", "--endpoint", "http://127.0.0.1:9"]) == 2
    assert "--prm" in capsys.readouterr().err


def test_a_recorded_run_keeps_the_look_ahead_counts(tiny):
    """Events are stored as JSON (no new column, no migration): the counts replay as they were made."""
    from app.recorder import SessionRecorder
    from app.store import SessionStore

    store = SessionStore(memory=True)
    recorder = SessionRecorder(store)
    stream = events_of(tiny, SEARCH, CacheConfig(policy="in_device", speculative=True))
    for event in stream:
        recorder.write(event)
    replayed = store.events(recorder.session_id)
    assert replayed == stream and replayed[-1].lookahead_verified > 0
    assert sum(e.lookahead_used for e in of_type(replayed, "step_selected")) == replayed[-1].lookahead_used
    assert store.get_session(recorder.session_id)["cache"]["lookahead_verify"] is True


def test_look_aheads_wait_for_a_kept_parent_and_every_one_is_counted_once():
    from engine.verifiers.look_ahead import LookAheads
    from engine.verifiers.schedule import KVNode

    looked, parent = LookAheads(), KVNode(None, 1, 4)
    looked.remember(("q", "a", "b"), KVNode(parent, 2, 8), 0.5)
    looked.remember(("q", "a", "b"), KVNode(parent, 3, 8), 0.5)  # a second candidate whose path reads the same
    looked.remember(("q", "c", "d"), KVNode(parent, 4, 8), 0.25)
    assert looked.settle([("q", "a")]) == {}  # a's child waits; c was pruned
    assert [n.handle for n in looked.nodes()] == [3] and looked.counts() == (3, 0, 2)
    assert looked.take(("q", "a", "x")) is None and looked.take(("q", "a", "b")).score == 0.5
    assert looked.counts() == (0, 1, 0) and not looked.waiting


def test_a_step_verified_ahead_is_the_text_its_child_gets(tiny, monkeypatch):
    """The child's step text is decoded after its path's tokens (engine/step_text.py); the one verified ahead was
    decoded alone, so where the parent's step ended inside a character the verifier scored another text."""
    from engine import search as engine_search

    verified: dict[int, str] = {}
    ahead_text = engine_search._Search._ahead_text

    def spy(self, c, step):
        text = ahead_text(self, c, step)
        if text is not None:
            verified[c.id] = text
        return text

    monkeypatch.setattr(engine_search._Search, "_ahead_text", spy)
    search = dataclasses.replace(SEARCH, verifier_model="synthetic:tiny-qwen-prm", step_delimiter=" ")
    events = list(run("What is 2 + 3?", tiny, search, CacheConfig(speculative=True)))
    first_child = {}
    for e in of_type(events, "candidate_text"):
        first_child.setdefault(e.parent, e.text)
    pairs = [(text, first_child[parent]) for parent, text in verified.items() if parent in first_child]
    assert pairs and any("\ufffd" in child for _, child in pairs), "pick a seed that splits a character"
    assert [ahead for ahead, _ in pairs] == [child for _, child in pairs]
