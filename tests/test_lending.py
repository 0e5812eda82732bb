"""Rows lent to other beams' children (FlashTTS's idle slots to the best beams' continuations): the copies and
slots of one lend, exact bytes, and the same search, with fewer idle slots, also when memory runs out mid-step."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import engine.search
from engine.config import CacheConfig
from engine.kv.attention import ParentHistory
from engine.kv.blocks import BlockManager
from engine.kv.lending import Lending, columns
from engine.kv.pool import PoolExhausted
from engine.kv.store import KVStore
from engine.rng import child_stream
from engine.runner import decode_step, prefill
from tests.test_decode_loop import PROMPTS, group, rules_for
from tests.test_equivalence import footprint_budget
from tests.test_speculation import SEARCH, assert_same_search, assert_tally_adds_up, events_of, of_type

L, H, D, BLOCK = 2, 2, 3, 4
WIDTH, STEP = 4, 6  # the arena: W columns of the rows' own KV, then a step's
OWN = [2, 3, 1]  # each row's own tokens, in the columns just before W
OWNERS = [10, 11, 12]


def lending_setup(slots: list[int], parent_width: int, pool_slots: int = 64):
    """A store, an arena `[L, 2, 3, H, W + k, D]` of distinct values, and a `Lending` over it whose parent level
    puts rows in query slots `slots` of families `parent_width` slots wide."""
    store = KVStore(BlockManager(block_size=BLOCK), num_layers=L, num_kv_heads=H, head_dim=D, dtype=torch.float32,
                    device="cpu", budget_bytes=pool_slots * BLOCK * 2 * L * H * D * 4)  # fmt: skip
    (arena,), _ = store.working([(L, 2, 3, H, WIDTH + STEP, D)])
    arena.copy_(torch.arange(arena.numel(), dtype=torch.float32).view(arena.shape))
    parents = ParentHistory((), None, torch.tensor(slots), parent_width)
    saved, runs = {}, []
    placed = {100 + row: (arena[:, :, row], WIDTH - OWN[row]) for row in range(3)}  # each row's one loaded block
    return store, arena, Lending(store, arena, WIDTH, OWN, OWNERS, parents, saved, runs, placed), saved, runs


def test_a_lent_row_keeps_what_it_decoded_and_takes_the_lenders_columns_and_family():
    store, arena, lend, saved, runs = lending_setup(slots=[0, 1, 2], parent_width=2)  # families {0, 1} and {2}
    before = arena.clone()
    tokens, forward = 2, 5  # the lender (row 2) ended its step after 2 tokens; row 1 is lent before forward 5
    assert lend(1, 2, tokens, forward)
    start, end = WIDTH - OWN[2], WIDTH + tokens
    torch.testing.assert_close(arena[:, :, 1, :, start:end], before[:, :, 2, :, start:end], rtol=0, atol=0)
    assert torch.equal(arena[:, :, 1, :, end:], before[:, :, 1, :, end:])  # later columns: the row's to decode
    assert torch.equal(arena[:, :, 0], before[:, :, 0]) and torch.equal(arena[:, :, 2], before[:, :, 2])
    # what row 1 decoded at forwards 0..4 was saved first, and the write-back reads it from there
    ((kept_forwards, kept),) = saved[1]
    assert kept_forwards == forward and len(runs) == 1
    assert torch.equal(kept, before[:, :, 1, :, WIDTH : WIDTH + forward])
    assert torch.equal(columns(arena, WIDTH, saved, 1, 0, forward), before[:, :, 1, :, WIDTH : WIDTH + forward])
    assert torch.equal(columns(arena, WIDTH, saved, 1, forward, 1), arena[:, :, 1, :, WIDTH + forward :][..., :1, :])
    assert columns(arena, WIDTH, saved, 0, 0, 2).data_ptr() == arena[:, :, 0, :, WIDTH:].data_ptr()
    # row 1 now reads the lender's family: a free query slot of family 1 (slots 2 and 3)
    assert lend.parents.slots.tolist() == [0, 3, 2]
    # row 1's loaded block is overwritten: a group loaded after this is not to carry it from there
    assert sorted(lend.placed) == [100, 102]
    # exact bytes: the saved columns and the lender's own and step columns, all on the device
    token_bytes = 2 * L * H * D * 4
    assert store.counters.total["d2d"] == (forward + OWN[2] + tokens) * token_bytes
    assert store.counters.total["h2d"] == store.counters.total["d2h"] == 0
    assert store.counters.per_candidate()[OWNERS[1]]["d2d"] == forward * token_bytes  # its own, saved
    assert store.counters.per_candidate()[OWNERS[2]]["d2d"] == (OWN[2] + tokens) * token_bytes  # the lender's


def test_a_row_is_not_lent_without_a_free_slot_in_the_lenders_family_or_room_to_save_it():
    store, arena, lend, saved, runs = lending_setup(slots=[0, 1, 2], parent_width=2)
    before = arena.clone()
    assert not lend(2, 0, 2, 5)  # family 0's two slots are rows 0 and 1
    assert torch.equal(arena, before) and not saved and not runs and store.counters.total["d2d"] == 0
    assert sorted(lend.placed) == [100, 101, 102]  # nothing lent: every loaded block where it was
    assert lend.parents.slots.tolist() == [0, 1, 2]

    store, arena, lend, saved, runs = lending_setup(slots=[0, 1, 2], parent_width=2, pool_slots=9)
    before = arena.clone()
    with pytest.raises(PoolExhausted):
        store.working([(L, 2, H, 5 * BLOCK, D)])  # the arena took most of the pool: no room to save 5 forwards
    assert not lend(1, 2, 2, 5 * BLOCK)
    assert torch.equal(arena, before) and not saved and not runs and store.counters.total["d2d"] == 0
    assert lend.parents.slots.tolist() == [0, 1, 2]

    store, arena, lend, saved, runs = lending_setup(slots=[0, 1, 2], parent_width=2)
    lend.parents = ParentHistory((), None, torch.empty(3, dtype=torch.long, device="meta"), 2)  # a plan-only run
    assert not lend(1, 2, 2, 5) and not saved and store.counters.total["d2d"] == 0


def without_lending(monkeypatch) -> None:
    """Rows decode only their own candidate's children (the search's decode drops the KV layer's `lend`)."""
    monkeypatch.setattr(engine.search, "decode_step", lambda *args, lend=None, **kw: decode_step(*args, **kw))


def idle(events) -> int:
    return sum(e.idle_row_slots for e in of_type(events, "transfer_stats"))


# beams 4 x width 4: M_i = 4, 3, 2, 1 runs for the children of the beams ranked 1..4
WIDE = dataclasses.replace(SEARCH, beams=4, width=4)


@pytest.mark.parametrize(("policy", "seed", "candidates"),
                         [("in_device", 1, None), ("in_device", 2, None), ("lbs", 1, 3)])  # fmt: skip
def test_rows_done_with_their_beam_decode_other_beams_children_and_the_search_is_the_same(
    tiny, monkeypatch, policy, seed, candidates
):
    search = dataclasses.replace(WIDE, seed=seed)
    budget = footprint_budget(tiny, search, candidates) if candidates else None
    cache = CacheConfig(policy=policy, kv_budget_bytes=budget, speculative=True)
    lent = events_of(tiny, search, cache)
    off = events_of(tiny, search, dataclasses.replace(cache, speculative=False))
    assert_same_search(lent, off)
    assert_tally_adds_up(lent)
    runs = lent[-1].speculative_lent_runs
    assert runs > 0 and runs == sum(e.speculative_lent_runs for e in of_type(lent, "transfer_stats"))
    if policy == "lbs":
        assert max(e.groups for e in of_type(lent, "transfer_stats")) > 1, "pick a budget that splits a step"
    snapshots = of_type(lent, "memory_snapshot")  # saving a lent row's KV stays inside the budget
    assert all(e.peak_device_bytes <= e.budget_bytes for e in snapshots)
    without_lending(monkeypatch)
    own_rows = events_of(tiny, search, cache)
    assert_same_search(own_rows, off)
    assert own_rows[-1].speculative_lent_runs == 0
    assert idle(lent) < idle(own_rows)  # the slots rows were done with went to the best beams' next children


def test_out_of_memory_after_a_row_was_lent_retries_the_group_and_the_search_is_the_same(tiny, monkeypatch):
    """The tables change only at the write-back, so a group that runs out of memory after lending rows is
    decoded again, in two, from the same state; the runs saved for the write-back go back to the pool."""
    search = dataclasses.replace(WIDE, seed=1)
    cache = CacheConfig(policy="in_device", speculative=True)
    reference = events_of(tiny, search, cache)
    lend, failed = Lending.__call__, []

    def lend_then_fail(self, row, lender, tokens, forward):
        done = lend(self, row, lender, tokens, forward)
        if done and not failed:
            failed.append((row, lender))
            raise torch.OutOfMemoryError("injected after lending a row")
        return done

    save, release, saved, released = Lending._save, KVStore.release, [], []

    def save_and_note(self, row, forward):
        done = save(self, row, forward)
        saved.extend(self.runs[-1:] if done else [])
        return done

    monkeypatch.setattr(Lending, "__call__", lend_then_fail)
    monkeypatch.setattr(Lending, "_save", save_and_note)
    monkeypatch.setattr(KVStore, "release", lambda self, run: (released.append(run), release(self, run)))
    events = events_of(tiny, search, cache)
    assert failed
    retried = of_type(events, "group_retried")
    assert retried and "injected after lending" in retried[0].reason
    assert_same_search(events, reference)
    assert saved and all(any(run is r for r in released) for run in saved)  # the failed group's too


def test_a_lent_rows_run_is_what_the_lenders_child_decodes(tiny):
    """The runner alone, over a group whose rows hold their whole history in an arena: a row whose own
    candidate has no child left to start decodes another row's next child over a copy of its columns,
    and decoding that child from scratch with its own stream gives the run's tokens and log-probs."""
    candidates = [3, 8, 11, 13, 14, 15, 16]
    rules = rules_for(tiny, delimiter="c", max_tokens=10, speculate=3, temperature=1.0, top_p=1.0)
    cache, mask, rows = group(tiny, candidates, seed=2)
    rows = [dataclasses.replace(row, continuations=4 if i < 2 else 1) for i, row in enumerate(rows)]
    width = mask.shape[1]
    lends = []

    def lend(row: int, lender: int, tokens: int, forward: int) -> bool:
        lends.append((row, lender, forward))
        for layer in cache.layers:  # the lender's columns up to its step's end; nothing is written back here
            layer.arena_keys[row, :, : width + tokens] = layer.arena_keys[lender, :, : width + tokens]
            layer.arena_values[row, :, : width + tokens] = layer.arena_values[lender, :, : width + tokens]
        return True

    results, _ = decode_step(tiny.model, cache, mask, rows, rules, lend=lend)
    checked = 0
    for i, (row, result) in enumerate(zip(rows, results, strict=True)):
        context = PROMPTS[row.candidate_id][:-1] + result.fed
        for k, run in enumerate(result.aheads):
            if run.row < 0:
                continue
            assert i < 2 and run.row >= 2 and (run.row, i, run.start) in lends  # best-ranked rows lend to the rest
            child_cache = prefill(tiny.model, context, tiny.device)[0]
            child = dataclasses.replace(row, pending=result.sampled[-1], position=len(context),
                                        generator=child_stream(row.generator, k), continuations=1)  # fmt: skip
            (want,), _ = decode_step(tiny.model, child_cache, None, [child], dataclasses.replace(rules, speculate=0))
            assert run.fed[0] == result.sampled[-1] and want.sampled[: len(run.sampled)] == run.sampled
            assert want.logprobs[: len(run.logprobs)] == pytest.approx(run.logprobs, abs=1e-4)
            checked += 1
    assert checked >= 2, "pick a seed where rows are lent"
    longest = max(len(r.fed) for r in results)
    assert all(run.start + len(run.fed) <= longest for r in results for run in r.aheads)
