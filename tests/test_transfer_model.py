"""Byte counters follow the LBS paper's analytic model (Eq. 1-5) exactly for fixed-length steps."""

from __future__ import annotations

from itertools import pairwise

import pytest

from engine.config import CacheConfig, SearchConfig
from engine.kv.layer_budget import resident_layers
from engine.kv.store import KVStore
from engine.search import SYSTEM_PROMPT, run

QUESTION = "What is 2+3?"
FIXED = SearchConfig(beams=2, width=3, step_tokens=6, max_steps=3, step_delimiter=None, seed=3)  # no EOS in its runs


def run_events(loaded, cache: CacheConfig, search: SearchConfig = FIXED):
    events = list(run(QUESTION, loaded, search, cache))
    assert events[-1].type == "run_finished", events[-1]
    assert not any(e.type == "candidate_text" and e.finished for e in events), "pick a seed without EOS"
    return events


def h2d_total(events) -> int:
    return [e for e in events if e.type == "transfer_stats"][-1].h2d_bytes


def prompt_kv_tokens(loaded) -> int:
    return len(loaded.encode_chat(QUESTION, system=SYSTEM_PROMPT)) - 1  # the last prompt token is fed at step 1


def streamed_layers(loaded, budget: int, search: SearchConfig) -> list[tuple[int, int]]:
    """Per generated token: (N_layer - L_inGPU(s), KV_layer(s)), Eq. 1-2."""
    shape, beams = loaded.kv_shape, search.candidates_per_step
    result = []
    for i in range(search.max_steps * search.step_tokens):
        s = prompt_kv_tokens(loaded) + i
        kv_layer = beams * s * shape.layer_token_bytes()
        result.append((shape.num_layers - resident_layers(budget, kv_layer, shape.num_layers), kv_layer))
    return result


def eq3_layerwise(loaded, budget: int, search: SearchConfig) -> int:
    """Eq. 1-3: sum over generated tokens of (N_layer - L_inGPU(s)) * KV_layer(s)."""
    return sum(streamed * kv_layer for streamed, kv_layer in streamed_layers(loaded, budget, search))


def eq5_lbs(loaded, search: SearchConfig) -> int:
    """Eq. 4-5: every candidate's whole KV crosses once per step."""
    return sum(
        search.candidates_per_step
        * (prompt_kv_tokens(loaded) + step * search.step_tokens)
        * loaded.kv_shape.token_bytes()
        for step in range(search.max_steps)
    )


@pytest.mark.parametrize("layers_worth", [2.5, 4.5, 5.5])
def test_layerwise_h2d_follows_eq_1_to_3(tiny_qwen2, layers_worth):
    shape = tiny_qwen2.kv_shape
    longest = prompt_kv_tokens(tiny_qwen2) + FIXED.max_steps * FIXED.step_tokens
    budget = int(layers_worth * FIXED.candidates_per_step * longest * shape.layer_token_bytes())
    events = run_events(tiny_qwen2, CacheConfig(policy="layerwise", kv_budget_bytes=budget))
    expected = eq3_layerwise(tiny_qwen2, budget, FIXED)
    assert expected > 0
    assert h2d_total(events) == expected


@pytest.mark.parametrize("layers_worth", [2.5, 4.5])
def test_layerwise_streams_each_layer_in_one_copy_per_token(tiny_qwen2, layers_worth, monkeypatch):
    """A streamed layer crosses PCIe as one contiguous copy per token (keys and values of every row
    together), and its new token goes back as one; the only other copies evict layers that no longer
    fit. (A strided copy across PCIe goes through temporary, unpinned buffers and blocks.)"""
    copy = KVStore.copy

    def contiguous_copy(store, dst, src, direction, owners=()):
        if direction in ("h2d", "d2h"):
            assert dst.is_contiguous() and src.is_contiguous(), (direction, dst.shape, dst.stride())
        copy(store, dst, src, direction, owners)

    monkeypatch.setattr(KVStore, "copy", contiguous_copy)
    shape = tiny_qwen2.kv_shape
    longest = prompt_kv_tokens(tiny_qwen2) + FIXED.max_steps * FIXED.step_tokens
    budget = int(layers_worth * FIXED.candidates_per_step * longest * shape.layer_token_bytes())
    last = [e for e in run_events(tiny_qwen2, CacheConfig(policy="layerwise", kv_budget_bytes=budget))
            if e.type == "transfer_stats"][-1]  # fmt: skip
    streamed = [n for n, _ in streamed_layers(tiny_qwen2, budget, FIXED)]
    assert sum(streamed) > 0
    assert last.h2d_calls == sum(streamed)
    assert last.d2h_calls == sum(streamed) + streamed[-1]  # write-backs, then each evicted layer once


def test_lbs_inter_token_only_follows_eq_4_and_5(tiny):
    budget = 3 * (prompt_kv_tokens(tiny) + (FIXED.max_steps + 1) * FIXED.step_tokens) * tiny.kv_shape.token_bytes()
    cache = CacheConfig(policy="lbs", kv_budget_bytes=budget, inter_beam=False, balanced_prefetch=False)
    assert h2d_total(run_events(tiny, cache)) == eq5_lbs(tiny, FIXED)


def test_inter_beam_moves_less_by_the_shared_blocks(tiny):
    budget = 3 * (prompt_kv_tokens(tiny) + (FIXED.max_steps + 1) * FIXED.step_tokens) * tiny.kv_shape.token_bytes()
    plain = run_events(tiny, CacheConfig(policy="lbs", kv_budget_bytes=budget, inter_beam=False))
    shared = run_events(tiny, CacheConfig(policy="lbs", kv_budget_bytes=budget, inter_beam=True))
    assert h2d_total(shared) < h2d_total(plain) == eq5_lbs(tiny, FIXED)
    # the prompt is shared by every candidate: with groups of 3 it crosses at most once per group
    groups = [e.groups for e in shared if e.type == "transfer_stats"]
    prompt_bytes = prompt_kv_tokens(tiny) * tiny.kv_shape.token_bytes()
    first_step = next(e for e in shared if e.type == "transfer_stats").step_h2d_bytes
    assert first_step == groups[0] * prompt_bytes


def test_per_candidate_bytes_sum_to_the_step_totals(tiny):
    budget = 2 * (prompt_kv_tokens(tiny) + (FIXED.max_steps + 1) * FIXED.step_tokens) * tiny.kv_shape.token_bytes()
    events = run_events(tiny, CacheConfig(policy="lbs", kv_budget_bytes=budget))
    snapshots = [e for e in events if e.type == "memory_snapshot"]
    stats = [e for e in events if e.type == "transfer_stats"]
    for snap, stat in zip(snapshots, stats, strict=True):
        assert sum(c.h2d_bytes for c in snap.candidates if c.group is not None) == stat.step_h2d_bytes
        assert sum(c.d2h_bytes for c in snap.candidates if c.group is not None) == stat.step_d2h_bytes


def test_in_device_moves_nothing_over_pcie(tiny):
    events = run_events(tiny, CacheConfig(policy="in_device"))
    last = [e for e in events if e.type == "transfer_stats"][-1]
    assert last.h2d_bytes == last.d2h_bytes == 0 and last.d2d_bytes > 0


def test_in_device_reads_the_prompt_in_place(tiny):
    """Step 1 copies on the device only each child's copy-on-write prompt tail and its new tokens:
    the prompt's blocks are read in place by every candidate, never duplicated per row."""
    events = run_events(tiny, CacheConfig(policy="in_device"))
    first = next(e for e in events if e.type == "transfer_stats")
    tail = prompt_kv_tokens(tiny) % CacheConfig().block_size
    assert tail > 0, "pick a question whose prompt ends in a partial block"
    n = FIXED.candidates_per_step
    tokens = n * FIXED.step_tokens + (n - 1) * tail  # the last child to write owns the tail alone: no copy
    assert first.step_d2d_bytes == tokens * tiny.kv_shape.token_bytes()


def test_prefix_order_keeps_the_shared_prompt_across_groups(tiny):
    """FlashTTS's prefix-aware order: consecutive groups share the prompt, so it stays on the device across the
    group boundary instead of crossing again; no step moves more than without the switch."""
    longest = prompt_kv_tokens(tiny) + (FIXED.max_steps + 1) * FIXED.step_tokens
    budget = int(1.2 * longest * tiny.kv_shape.token_bytes())
    stats = lambda events: [e for e in events if e.type == "transfer_stats"]  # noqa: E731
    plain = stats(run_events(tiny, CacheConfig(policy="lbs", kv_budget_bytes=budget, prefix_order=False)))
    ordered = stats(run_events(tiny, CacheConfig(policy="lbs", kv_budget_bytes=budget, prefix_order=True)))
    assert [e.groups for e in plain] == [e.groups for e in ordered] and max(e.groups for e in plain) >= 2
    assert all(o.step_h2d_bytes <= p.step_h2d_bytes for p, o in zip(plain, ordered, strict=True))
    block = CacheConfig().block_size
    full_prompt_blocks = prompt_kv_tokens(tiny) // block * block * tiny.kv_shape.token_bytes()
    saved = sum(p.step_h2d_bytes - o.step_h2d_bytes for p, o in zip(plain, ordered, strict=True))
    multi_group_steps = sum(e.groups - 1 for e in plain)
    assert saved >= multi_group_steps * full_prompt_blocks > 0


def common_ancestor_tokens(loaded, parents: set[int], parent_of: dict, step_of: dict, search: SearchConfig) -> int:
    """KV tokens every one of `parents` shares by block: the full blocks of their lowest common ancestor's
    KV when it was forked (the prompt: step 0). A partial tail is copied on write by all but one child."""
    paths = [[*path_to(parent_of, p)] for p in parents]
    common = None
    for nodes in zip(*paths, strict=False):
        if len(set(nodes)) > 1:
            break
        common = nodes[0]
    tokens = prompt_kv_tokens(loaded) + (step_of[common] if common is not None else 0) * search.step_tokens
    return tokens // CacheConfig().block_size * CacheConfig().block_size


def path_to(parent_of: dict, cid) -> list[int]:
    path = []
    while cid is not None:
        path.append(cid)
        cid = parent_of[cid]
    return path[::-1]


def test_in_device_gathers_each_parents_history_once_per_step(tiny):
    """The per-parent cascade level: siblings read their parent's history after the shared prefix
    from one copy per parent, so a step's device copies are, in tokens,
    sum over parents (T - P) + new tokens + copy-on-write of each parent's partial tail by all but
    one child, where T is a parent's KV length and P what every parent shares."""
    events = run_events(tiny, CacheConfig(policy="in_device"))
    texts = [e for e in events if e.type == "candidate_text"]
    parent_of = {e.id: e.parent for e in texts}
    step_of = {e.id: e.step for e in texts}
    stats = [e for e in events if e.type == "transfer_stats"]
    block, k = CacheConfig().block_size, FIXED.step_tokens
    for stat in stats:
        rows = [e for e in texts if e.step == stat.step]
        parents = {e.parent for e in rows}
        length = prompt_kv_tokens(tiny) + (stat.step - 1) * k  # every parent's KV at the step's start
        shared = length if len(parents) == 1 else common_ancestor_tokens(tiny, parents, parent_of, step_of, FIXED)
        children = [sum(1 for e in rows if e.parent == p) for p in parents]
        tokens = len(parents) * (length - shared) + len(rows) * k + sum(m - 1 for m in children) * (length % block)
        assert stat.step_d2d_bytes == tokens * tiny.kv_shape.token_bytes(), stat.step
    assert len(stats) == FIXED.max_steps and max(len({e.parent for e in texts if e.step == s}) for s in (2, 3)) > 1


def test_lbs_inter_token_copies_each_run_of_blocks_in_one_call(tiny, monkeypatch):
    """A row's blocks that sit in consecutive slots of one run (the prompt, a step's new blocks) cross
    PCIe in one copy: the same bytes as block by block, in fewer calls. Step 1 loads every row's prompt:
    one call per row instead of one per block."""
    budget = 3 * (prompt_kv_tokens(tiny) + (FIXED.max_steps + 1) * FIXED.step_tokens) * tiny.kv_shape.token_bytes()
    cache = CacheConfig(policy="lbs", kv_budget_bytes=budget, inter_beam=False, balanced_prefetch=False)
    stats = lambda events: [e for e in events if e.type == "transfer_stats"]  # noqa: E731
    runs = stats(run_events(tiny, cache))
    monkeypatch.setattr(KVStore, "follows", lambda store, block_id, previous, tier: False)  # block by block
    blocks = stats(run_events(tiny, cache))
    fields = ("step_h2d_bytes", "step_d2h_bytes", "step_d2d_bytes", "d2h_calls")
    assert [[getattr(s, f) for f in fields] for s in runs] == [[getattr(s, f) for f in fields] for s in blocks]
    rows, size = FIXED.candidates_per_step, CacheConfig().block_size
    assert blocks[0].h2d_calls == rows * -(-prompt_kv_tokens(tiny) // size) > rows == runs[0].h2d_calls
    calls = lambda stats: [b.h2d_calls - a.h2d_calls for a, b in pairwise(stats)]  # noqa: E731
    for step, (coalesced, per_block) in enumerate(zip(calls(runs), calls(blocks), strict=True), start=2):
        assert coalesced <= rows * step < per_block  # a run for the prompt and one per earlier step, at most


@pytest.mark.parametrize(("policy", "budget"), [("in_device", None), ("lbs", 200_000), ("layerwise", 600_000),
                                                ("headwise", 150_000)])
def test_a_steps_bytes_hold_its_look_ahead_roll_outs(tiny, policy, budget):
    """Each roll-out's decode started the step's counters again, so a step with lookahead reported only its last
    roll-out's bytes: the steps did not add up to the totals, and the plan read the same short figure."""
    search = SearchConfig(beams=2, width=2, step_tokens=6, max_steps=3, step_delimiter=None, lookahead=2, seed=3)
    cache = CacheConfig(policy=policy, kv_budget_bytes=budget, prefix_cache=False)
    events = list(run(QUESTION, tiny, search, cache))
    assert events[-1].type == "run_finished", events[-1]
    stats = [e for e in events if e.type == "transfer_stats"]
    for direction in ("h2d", "d2h", "d2d"):
        step = [getattr(s, f"step_{direction}_bytes") for s in stats]
        total = [getattr(s, f"{direction}_bytes") for s in stats]
        assert [b - a for a, b in pairwise(total)] == step[1:], direction  # nothing moves between steps
    assert sum(s.step_h2d_bytes + s.step_d2h_bytes + s.step_d2d_bytes for s in stats) > 0
