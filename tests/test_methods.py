"""Search methods over the one step loop: beam, DVTS, best-of-N, greedy, lookahead, and RKSC verify-skip."""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import pytest
import torch

from engine.candidate import Candidate
from engine.config import METHODS, CacheConfig, SearchConfig
from engine.methods import method_for
from engine.search import run

BASE = SearchConfig(beams=2, width=2, step_tokens=4, max_steps=3, step_delimiter=None, seed=5)


def events_of(loaded, **changes):
    return list(run("What is 2+3?", loaded, dataclasses.replace(BASE, **changes), CacheConfig()))


def of(evs, kind):
    return [e for e in evs if e.type == kind]


def parents(evs):
    return {e.id: e.parent for e in of(evs, "candidate_scored")}


def root_of(pid, parent):
    while parent[pid] is not None:
        pid = parent[pid]
    return pid


def test_every_method_streams_the_same_event_kinds(tiny):
    kinds = {m: [e.type for e in events_of(tiny, method=m)] for m in ("beam", "dvts", "best-of-n", "greedy")}
    for method, types in kinds.items():
        assert types[0] == "run_started" and types[-1] == "run_finished", method
        assert set(types) == set(kinds["beam"]), method


@pytest.mark.parametrize("method", METHODS)
def test_each_methods_policy_has_the_shape_its_settings_give(method):
    """What sizes the search ahead of its policy (in_device's whole-search bound, engine/kv/sizing.py) reads the
    method's shape from the settings: the policy must decode, expand and keep exactly that."""
    config = SearchConfig(method=method, beams=3, width=2)
    policy = method_for(config)
    assert policy.roots() == config.rows_per_step
    assert policy.children() == config.children_per_path
    roots = [Candidate(i, None, 1, aggregate=i / 10, lane=policy.lane(i)) for i in range(policy.roots())]
    kept = policy.keep(roots)
    assert len(kept) == config.kept_per_step
    children = [Candidate(100 + 10 * p.id + k, p.id, 2, aggregate=-k, lane=p.lane) for p in kept
                for k in range(policy.children())]  # fmt: skip
    assert len(children) <= config.rows_per_step and len(policy.keep(children)) == config.kept_per_step


def test_dvts_keeps_one_path_per_subtree_and_subtrees_never_mix(tiny):
    evs = events_of(tiny, method="dvts", beams=3, width=2)
    parent = parents(evs)
    roots = sorted(e.id for e in of(evs, "candidate_scored") if e.step == 1)
    lane = {r: i // 2 for i, r in enumerate(roots)}  # the prompt's N*M children, M per subtree
    for sel in of(evs, "step_selected"):
        assert len(sel.kept) == 3
        assert sorted(lane[root_of(c, parent)] for c in sel.kept) == [0, 1, 2]
        scored = [e for e in of(evs, "candidate_scored") if e.step == sel.step]
        assert len(scored) == 6 or any(e.finished for e in of(evs, "candidate_scored"))


def test_best_of_n_keeps_every_sample_and_prunes_none(tiny):
    evs = events_of(tiny, method="best-of-n", beams=2, width=3)
    parent = parents(evs)
    selected = of(evs, "step_selected")
    assert len(selected[0].kept) == 6
    for sel in selected:
        assert sel.pruned == tuple(c for c in sel.pruned if parent.get(c) is None or c in parent)
        assert len({root_of(c, parent) for c in sel.kept}) == 6  # six separate samples all the way
    later = [e for e in of(evs, "candidate_scored") if e.step > 1]
    assert all(sum(1 for x in later if x.parent == e.parent) == 1 for e in later)  # one child each


def test_greedy_is_one_deterministic_path_whatever_the_seed(tiny):
    first, other = events_of(tiny, method="greedy"), events_of(tiny, method="greedy", seed=99)
    assert all(len(s.kept) == 1 for s in of(first, "step_selected"))
    text = lambda evs: [e.text for e in of(evs, "candidate_scored")]  # noqa: E731
    assert text(first) == text(other)


def test_lookahead_scores_a_roll_out_but_keeps_only_the_sampled_step(tiny):
    plain, ahead = events_of(tiny), events_of(tiny, lookahead=2)
    texts = lambda evs: [(e.id, e.text) for e in of(evs, "candidate_scored")][:4]  # noqa: E731
    assert texts(plain) == texts(ahead)  # same sampled first steps (ids and seeds line up in step 1)
    assert [e.score for e in of(plain, "candidate_scored")][:4] != [e.score for e in of(ahead, "candidate_scored")][:4]
    assert ahead[-1].candidate_tokens > plain[-1].candidate_tokens  # roll-out tokens are generated tokens
    nodes = {e.id for e in of(ahead, "candidate_scored")}
    for snap in of(ahead, "memory_snapshot"):
        assert {m.id for m in snap.candidates} <= nodes  # roll-outs released before the step ends


def test_lookahead_needs_beam():
    with pytest.raises(ValueError, match="lookahead works with the beam method only"):
        SearchConfig(method="dvts", lookahead=1)
    with pytest.raises(ValueError, match="method must be one of"):
        SearchConfig(method="mcts")
    with pytest.raises(ValueError, match="select must be one of"):
        SearchConfig(select="vote")


def test_verify_skip_ranks_by_confidence_when_decisive(tiny):
    always = events_of(tiny, verifier="self-judge", verify_skip=True, tau_conf=1e-6, r_gap=0.0)
    steps = of(always, "step_selected")
    assert all(s.verify_skipped and s.verifier_agrees is None for s in steps)
    assert all(s.verifier_tokens == 0 for s in steps)
    never = events_of(tiny, verifier="self-judge", verify_skip=True, tau_conf=1.0, r_gap=0.5)
    assert not any(s.verify_skipped for s in of(never, "step_selected"))
    assert all(s.verifier_tokens > 0 and s.verifier_agrees is not None for s in of(never, "step_selected"))


@pytest.mark.parametrize("method", ["beam", "dvts"])
def test_the_gate_reads_each_childs_mean_top1_probability(tiny, method):
    """RKSC's confidence: a child's mean over its step's tokens of max softmax(logits), not of p(sampled token)."""
    observed = defaultdict(list)
    search = dataclasses.replace(BASE, method=method, temperature=1.0, verify_skip=True, tau_conf=0.99, r_gap=0.5)
    evs = list(run("What is 2+3?", tiny, search, CacheConfig(),
                   observe_logits=lambda cid, logits, token: observed[cid].append(torch.softmax(logits, -1).max())))
    for sel in of(evs, "step_selected"):
        children = [e.id for e in of(evs, "candidate_scored") if e.step == sel.step and e.id in observed]
        mean = sorted((sum(observed[c]) / len(observed[c])).item() for c in children)
        assert sel.confidence == pytest.approx(mean[-1], abs=1e-5)
        assert sel.confidence_gap == pytest.approx(mean[-1] - mean[-2], abs=1e-5)


def test_audit_runs_the_verifier_on_skipped_steps_too(tiny):
    evs = events_of(tiny, verifier="self-judge", verify_skip=True, tau_conf=1e-6, r_gap=0.0, audit_early_exit=True)
    steps = of(evs, "step_selected")
    assert all(s.verify_skipped and s.verifier_agrees is not None and s.verifier_tokens > 0 for s in steps)


@pytest.mark.parametrize("select", ["majority", "weighted"])
def test_votes_pick_a_kept_path(tiny, select):
    evs = events_of(tiny, method="best-of-n", select=select)
    assert evs[-1].type == "run_finished"
    assert evs[-1].path[-1] in of(evs, "step_selected")[-1].kept
