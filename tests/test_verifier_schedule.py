"""The verifier's step scheduled like the generator's LBS (engine/verifiers/schedule.py): the same scores as the
earlier schedule and as full rescoring, never more bytes or copy calls in any direction, fewer when groups share;
and the auto share's formula (engine/kv/split.py) against the measured need of a search."""

from __future__ import annotations

import math
import time

import pytest
import torch

from engine.config import CacheConfig, SearchConfig
from engine.kv.blocks import Tier
from engine.kv.split import split_budget, verifier_group_bytes
from engine.models import kv_shape_from_config
from engine.search import run
from engine.verifiers import StepToScore, make_verifier, prm_verifier
from engine.verifiers.kv_pools import VerifierKV
from engine.verifiers.path_kv import KVNode, PathVerifier
from engine.verifiers.schedule import GroupScheduler, VerifyGroup, prefix_order
from engine.verifiers.synthetic_prm import synthetic_prm
from tests.test_verifier_reuse import full_rescore

CPU = torch.device("cpu")
QUESTION = "Tom has 3 apples and buys 4 more. How many?"
TEXTS = ("He buys 4 more apples today.\n\n", "Three plus four is seven.\n\n", "Add them: 3 + 4 = 7.\n\n",
         "So the answer is 7 apples.\n\n")
PRMS = ("tiny-qwen-prm", "tiny-skywork-prm", "tiny-math-shepherd", "tiny-rlhflow-prm")
TOKEN = 2 * 2 * 2 * 4 * 4  # K and V, 2 layers, 2 KV heads, head dim 4, float32: bytes per token


def beam_tree(verifier, steps: int = 4, beams: int = 2, width: int = 4) -> tuple[list, list[float]]:
    """A beam search's scoring: 8 children of the question, then 2 kept parents x 4 children a step."""
    parents, seen, scores = [()], [], []
    for step in range(steps):
        count = width if step else beams * width
        items = [StepToScore(QUESTION, p, f"{TEXTS[(i + step) % 4]}{step}{i}", ()) for p in parents
                 for i in range(count)]
        got = verifier.score(items)
        seen.append(items)
        scores += got
        kept = [items[i] for i in sorted(sorted(range(len(items)), key=lambda i: -got[i])[:beams])]
        verifier.settle([k.key for k in kept])
        parents = [k.key[1:] for k in kept]
    return seen, scores


def tight(name: str, times: float | None, grouped: bool) -> PathVerifier:
    """A PRM whose device share holds `times` one 4-row group at the tree's last step (None: no budget)."""
    verifier = prm_verifier(synthetic_prm(name, CPU, torch.float32))
    verifier.grouped = grouped
    if times is not None:
        path = len(verifier.path_ids(StepToScore(QUESTION, (TEXTS[0],) * 3, TEXTS[1], ())))
        verifier.use_budget(int(verifier.kv.arena_slots(4, path) * verifier.kv.block_bytes * times), block_size=4)
    return verifier


@pytest.mark.parametrize("times", [1.0, 1.3, None])
@pytest.mark.parametrize("name", PRMS)
def test_grouped_verification_gives_the_same_scores_and_never_more_bytes_or_calls(name, times):
    today, grouped = tight(name, times, False), tight(name, times, True)
    assert beam_tree(grouped)[1] == beam_tree(today)[1]  # the same batches: the same floats, exactly
    for direction in ("h2d", "d2h", "d2d"):
        assert grouped.kv.counters.total[direction] <= today.kv.counters.total[direction], direction
        assert grouped.kv.counters.calls[direction] <= today.kv.counters.calls[direction], direction
    # consecutive groups share the question at least
    assert grouped.kv.counters.total["d2d"] < today.kv.counters.total["d2d"]


@pytest.mark.parametrize("times", [1.0, 1.3])
def test_a_tight_share_moves_fewer_bytes_over_pcie_when_groups_share(times):
    today, grouped = tight("tiny-qwen-prm", times, False), tight("tiny-qwen-prm", times, True)
    beam_tree(today), beam_tree(grouped)
    assert grouped.kv.counters.total["h2d"] < today.kv.counters.total["h2d"]
    assert grouped.kv.counters.calls["h2d"] < today.kv.counters.calls["h2d"]
    assert grouped.kv.counters.total["d2h"] == today.kv.counters.total["d2h"]
    assert grouped.memory().peak_device_bytes <= grouped.kv.budget_bytes


@pytest.mark.parametrize("name", ["tiny-qwen-prm", "tiny-rlhflow-prm", "self-judge"])
def test_grouped_scores_equal_full_rescoring(tiny, name):
    if name == "self-judge":
        verifier = make_verifier("self-judge", tiny)
        verifier.use_budget(200_000, block_size=4)
    else:
        verifier = tight(name, 1.0, True)
    seen, scores = beam_tree(verifier, steps=3)
    expected = [full_rescore(verifier, item) for items in seen for item in items]
    assert scores == pytest.approx(expected, abs=1e-4)
    assert verifier.kv.counters.total["h2d"] > 0 or name == "self-judge"  # the PRMs' tight share did offload


# -- the scheduler on segments of known values ---------------------------------------------------------
def pools(blocks: int | None, gbps: float = 25.0) -> VerifierKV:
    budget = None if blocks is None else blocks * 4 * TOKEN
    return VerifierKV(2, 2, 4, torch.float32, CPU, budget_bytes=budget, block_size=4, pcie_gbps=gbps)


def chain_of(kv: VerifierKV, lengths: list[int], parent: KVNode | None = None, seed: int = 0):
    """Nodes of `lengths` tokens each under `parent`, with random KV; and the chain's KV `[L, 2, H, T, D]`."""
    node, parts = parent, []
    for i, tokens in enumerate(lengths):
        kv_part = torch.randn(2, 2, 2, tokens, 4, generator=torch.Generator().manual_seed(seed + i))
        node = KVNode(node, kv.put(kv_part), (node.length if node else 0) + tokens)
        parts.append(kv_part)
    return node, torch.cat(parts, dim=3)


def group(parent: KVNode, rows: int, new: int, first: int = 0) -> VerifyGroup:
    return VerifyGroup(parent, tuple(range(first, first + rows)), ((1,) * new,) * rows, (new,) * rows)


def checking(expected: dict[int, torch.Tensor], seen: list, sleep: float = 0.0):
    """A compute step that checks every row holds its chain, then writes its new columns (as a pass would)."""
    def compute(g: VerifyGroup, arena: torch.Tensor) -> None:
        assert arena.shape[2] == len(g.rows) and arena.shape[4] == g.width
        for row in range(len(g.rows)):
            assert torch.equal(arena[:, :, row, :, : g.start], expected[g.parent.handle])
        arena[:, :, :, :, g.start :] = float("nan")  # the new tokens' KV: must never be read as a chain
        seen.append(g.rows[0])
        time.sleep(sleep)
    return compute


def test_groups_in_prefix_order_keep_the_shared_chain_in_place_and_copy_only_what_differs():
    kv = pools(None)
    root, root_kv = chain_of(kv, [6])
    a, a_tail = chain_of(kv, [5], root, seed=10)
    b, b_tail = chain_of(kv, [3], root, seed=20)
    expected = {a.handle: torch.cat([root_kv, a_tail], 3), b.handle: torch.cat([root_kv, b_tail], 3)}
    groups = [group(a, 3, 4, 0), group(b, 3, 2, 3), group(a, 2, 4, 6)]
    ordered = prefix_order(groups)
    assert [g.rows[0] for g in ordered] == [0, 6, 3]  # a's two groups together, then b's
    kv.start_step()
    seen = []
    GroupScheduler(kv).run(ordered, checking(expected, seen))
    assert seen == [0, 6, 3]
    # a's chain (11 tokens) into row 0, then rows 1-2; a's second group: nothing; b: its 3 tokens, then rows 1-2
    assert kv.counters.step["d2d"] == (11 + 2 * 11 + 3 + 2 * 3) * TOKEN
    assert kv.counters.step_calls["d2d"] == 2 + 1 + 1 + 1
    assert kv.pools[Tier.DEVICE].allocator.used == sum(s.run.length for s in kv.segments.values())  # released


def test_host_segments_cross_pcie_once_for_consecutive_groups():
    kv = pools(12)
    root, root_kv = chain_of(kv, [8])  # 2 blocks
    a, a_tail = chain_of(kv, [4], root, seed=10)
    kv._offload_one([])  # root and a rest on the host, as a tight share leaves them
    kv._offload_one([])
    assert kv.tier(root.handle) is Tier.HOST and kv.tier(a.handle) is Tier.HOST
    kv.start_step()
    expected = {a.handle: torch.cat([root_kv, a_tail], 3)}
    GroupScheduler(kv).run([group(a, 2, 4, 0), group(a, 2, 4, 2), group(a, 2, 4, 4)], checking(expected, []))
    # once for three groups (today: three times)
    assert kv.counters.step["h2d"] == 12 * TOKEN and kv.counters.step_calls["h2d"] == 2


def test_the_next_group_is_prefetched_beside_and_its_load_hides_behind_this_compute():
    kv = pools(64, gbps=1e-6)  # 1 kB/s: a token's 128 bytes take 0.128 s of modelled PCIe
    root, root_kv = chain_of(kv, [4])
    a, a_tail = chain_of(kv, [4], root, seed=10)
    b, b_tail = chain_of(kv, [1], root, seed=20)
    kv._offload_one([root.handle, a.handle])  # b rests on the host
    kv.start_step()
    expected = {a.handle: torch.cat([root_kv, a_tail], 3), b.handle: torch.cat([root_kv, b_tail], 3)}
    wide, narrow = group(a, 4, 2), group(b, 1, 60, 4)  # together they would not fit one arena
    assert not kv.fits(4, narrow.width) and kv.fits(1, narrow.width)
    seen = []
    GroupScheduler(kv).run([wide, narrow], checking(expected, seen, sleep=0.3))
    assert seen == [0, 4]
    assert kv.counters.step["h2d"] == 1 * TOKEN  # b's own token; the root came from the first arena, on the device
    assert kv.counters.step["d2d"] == (8 + 3 * 8 + 4) * TOKEN
    assert kv.stall_seconds == 0.0  # loaded before the first group computed: hidden behind its 0.3 s
    assert kv.memory().peak_device_bytes <= kv.budget_bytes


def test_without_room_to_prefetch_the_load_stalls_by_its_modelled_time():
    kv = pools(20, gbps=1e-6)
    root, root_kv = chain_of(kv, [4])
    b, b_tail = chain_of(kv, [1], root, seed=20)
    kv._offload_one([root.handle])
    kv.start_step()
    expected = {root.handle: root_kv, b.handle: torch.cat([root_kv, b_tail], 3)}
    GroupScheduler(kv).run([group(root, 4, 2), group(b, 1, 60, 4)], checking(expected, []))
    assert kv.counters.step["h2d"] == 1 * TOKEN
    assert kv.stall_seconds == pytest.approx(TOKEN / 1e3)  # loaded after the first group, nothing hid it


# -- the auto share --------------------------------------------------------------------------------------
def test_the_auto_share_formula_by_hand():
    # r = min(16, 8) = 8 rows; W = 30 + 4 x (32 + 3) + 5 = 175; ceil(8 x 175 / 16) = 88 slots of arena;
    # each row's step and separator, 35 tokens: 3 blocks, 24 slots; 112 slots of 16 tokens of 1 kB
    need = verifier_group_bytes(block_size=16, token_bytes=1024, rows=16, batch_size=8, prefix=30, per_step=3,
                                probe=5, step_tokens=32, steps=4)
    assert need == 112 * 16 * 1024
    assert split_budget(10 * need, None, need).verifier_bytes == need
    assert split_budget(need, None, need).verifier_bytes == need // 2  # never more than half by default


def test_a_prm_states_its_need_from_its_own_kv_shape():
    verifier = prm_verifier(synthetic_prm("tiny-qwen-prm", CPU, torch.float32))
    shape = kv_shape_from_config(verifier.body.config, 1)
    token = 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * 4
    layout = verifier.layout
    prefix, probe = len(layout.prefix(QUESTION)), len(layout.probe(QUESTION))
    per_step = len(layout.body(QUESTION, (), "1"))
    width = prefix + 3 * (8 + per_step) + probe
    slots = math.ceil(4 * width / 16) + 4 * math.ceil((8 + per_step) / 16)
    assert verifier.batch_bytes(QUESTION, 4, 8, 3) == slots * 16 * token


def test_a_search_at_the_auto_share_never_needs_more_than_the_formula(tiny, monkeypatch):
    measured = []
    fill = GroupScheduler._fill

    def record(self, batch, g, source, early):
        measured.append((len(g.rows), self.kv.arena_slots(len(g.rows), g.width) + g.new_slots(self.kv.block_size)))
        return fill(self, batch, g, source, early)

    monkeypatch.setattr(GroupScheduler, "_fill", record)
    config = SearchConfig(beams=2, width=2, step_tokens=8, step_delimiter=None, max_steps=3, seed=3, verifier="prm",
                          verifier_model="synthetic:tiny-qwen-prm")
    events = list(run(QUESTION, tiny, config, CacheConfig(kv_budget_bytes=4_000_000, block_size=16)))
    assert events[-1].type == "run_finished", events[-1]
    share = events[0].verifier_kv_budget_bytes
    verifier = prm_verifier(synthetic_prm("tiny-qwen-prm", CPU, torch.float32))
    block_bytes = verifier.kv.block_bytes
    assert share == verifier.batch_bytes(QUESTION, 4, 8, 3)  # the formula, for 2 x 2 candidates over 3 steps
    assert measured and max(slots for _, slots in measured) * block_bytes <= share
    assert [rows for rows, _ in measured] == [4, 2, 2, 2, 2]  # no group was split to fit
    snapshots = [e for e in events if e.type == "memory_snapshot"]
    assert all(s.verifier_peak_device_bytes <= share for s in snapshots)
