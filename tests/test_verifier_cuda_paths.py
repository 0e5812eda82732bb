"""The verifier's CUDA-only KV branches (engine/verifiers/kv_pools.py: loads and the next group's prefetch on the
copy stream, the events compute waits for, pinned host pools, asynchronous copies) run on the CPU through the fake
CUDA streams (tests/fake_cuda.py), which run copy-stream copies as late as CUDA may and raise on a race. A PRM
gives the emulated run's scores and byte counters, and a prefetched group loads while the one before computes."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from transformers import MistralConfig

from engine.kv.blocks import Tier
from engine.verifiers import ExitRule, StepToScore, make_verifier, prm_verifier
from engine.verifiers import kv_pools as pools_module
from engine.verifiers.entropy_exit import with_exit
from engine.verifiers.path_kv import PathVerifier
from engine.verifiers.schedule import GroupScheduler
from engine.verifiers.synthetic_prm import _TINY, SYNTHETIC_PRMS, synthetic_prm
from tests.fake_cuda import FakeCuda, Fakes
from tests.test_verifier_schedule import CPU, PRMS, QUESTION, TOKEN, beam_tree, chain_of, checking, group, pools, tight


@pytest.fixture
def fakes(monkeypatch, watch_kernels) -> Fakes:
    made = Fakes()
    monkeypatch.setattr(pools_module, "streams_for", made.streams_for)
    return made


def emulated_and_cuda(fakes: Fakes, build, drive):
    """`drive(build())` on the CPU's emulated path, then through the CUDA branches (the fake): both
    verifiers and what each drive returned."""
    emulated = build()
    first = drive(emulated)
    fakes.on = True
    try:
        cuda = build()
        second = drive(cuda)
    finally:
        fakes.on = False
    assert isinstance(cuda.kv.streams, FakeCuda) and emulated.kv.streams is None
    return (emulated, first), (cuda, second)


def assert_same_kv_work(emulated: PathVerifier, cuda: PathVerifier) -> None:
    """The same bytes and copy calls in every direction, over the run and in the last step, and the same
    memory at rest; every PCIe copy's host side pinned and crossing in contiguous pieces (never through
    PyTorch's pageable temporaries: the host pool is token-major); no copy left queued on the copy stream."""
    assert cuda.kv.counters.total == emulated.kv.counters.total and cuda.kv.counters.calls == emulated.kv.counters.calls
    assert cuda.memory() == emulated.memory()
    fake = cuda.kv.streams
    assert fake.unpinned == [] and fake.staged == []
    assert not any(op.accesses for op in fake.copy_stream.queue), "every load was waited for"
    fake.synchronize()  # the held copies to the host run now: none races


@pytest.mark.parametrize("grouped", [True, False])
@pytest.mark.parametrize("times", [1.0, 1.3, None])
@pytest.mark.parametrize("name", PRMS)
def test_a_prm_gives_the_emulated_scores_and_bytes_through_the_cuda_branches(fakes, name, times, grouped):
    """A beam tree scored by a PRM at a tight share (segments offloaded to the host and loaded back) and
    with no budget: compute reads each arena only after its loads ran (else the scores would differ)."""
    (emulated, (_, want)), (cuda, (_, got)) = emulated_and_cuda(fakes, lambda: tight(name, times, grouped), beam_tree)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-5, atol=1e-6)
    assert_same_kv_work(emulated, cuda)
    if times == 1.0:
        total = cuda.kv.counters.total
        assert total["h2d"] > 0 and total["d2h"] > 0, "the tight share moved KV both ways"
    if grouped:
        assert cuda.kv.streams.copies["copy"] > 0, "the scheduled loads ran on the copy stream"


def test_self_judge_gives_the_emulated_scores_and_bytes_through_the_cuda_branches(fakes, tiny):
    """Self-judge (the generator's model asked a probe after each step, no look-ahead) at a share that offloads."""

    def build():
        verifier = make_verifier("self-judge", tiny)
        verifier.use_budget(200_000, block_size=4)
        return verifier

    (emulated, (_, want)), (cuda, (_, got)) = emulated_and_cuda(fakes, build, lambda v: beam_tree(v, steps=3))
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-5, atol=1e-6)
    assert_same_kv_work(emulated, cuda)
    assert cuda.kv.counters.total["h2d"] > 0 and cuda.kv.streams.copies["copy"] > 0


@pytest.fixture
def deeper_prms(monkeypatch):
    """The synthetic Math-Shepherd PRM with 4 layers instead of 2, so an exit has layers to skip."""
    entry = SYNTHETIC_PRMS["tiny-math-shepherd"]
    monkeypatch.setitem(
        SYNTHETIC_PRMS,
        "tiny-math-shepherd",
        dataclasses.replace(entry, config=lambda: MistralConfig(**{**_TINY, "num_hidden_layers": 4})),
    )


@pytest.mark.parametrize("times", [1.0, None])
def test_an_exited_pass_completes_its_kept_segments_through_the_cuda_branches(fakes, deeper_prms, times):
    """RKSC's exit at the first chance: kept segments get their skipped layers later (`write` from a layer on,
    to the host at a tight share), the same scores and bytes as emulated."""

    def build():
        parts = synthetic_prm("tiny-math-shepherd", CPU, torch.float32)
        verifier = with_exit(prm_verifier(parts), parts.head, ExitRule(theta=1e3, delta=1e3))
        if times is not None:
            verifier.use_budget(verifier.kv.arena_slots(4, 64) * verifier.kv.block_bytes, block_size=4)
        return verifier

    (emulated, (_, want)), (cuda, (_, got)) = emulated_and_cuda(fakes, build, beam_tree)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-5, atol=1e-6)
    assert_same_kv_work(emulated, cuda)


# -- the schedule's prefetch: queued on the copy stream while the group before computes ----------------
SHORT = "So 7.\n\n"
LONG = "He had three apples, then bought four more at the shop, which makes seven apples in all.\n\n"


def uneven_tree(verifier) -> list[float]:
    """Two steps of unequal length, every segment then at rest on the host (as a tight share leaves them), then
    four children of the short one and one long child of the long one: two groups too unlike to share an arena,
    the long one's prefetched beside the other when the share has room for both."""
    first = [StepToScore(QUESTION, (), text, ()) for text in (SHORT, LONG)]
    scores = verifier.score(first)
    verifier.settle([item.key for item in first])
    while verifier.kv._on_device:
        verifier.kv._offload_one([])
    second = [StepToScore(QUESTION, (SHORT,), f"{SHORT}{i}", ()) for i in range(4)]
    return scores + verifier.score([*second, StepToScore(QUESTION, (LONG,), LONG + "x", ())])


def spy_schedule(monkeypatch) -> list[tuple]:
    """Through the fake, log each prefetch made before the group before computes ("prefetch", its arena) and
    each compute ("compute", whether all it reads is ready, whether the prefetch just before it is still queued)."""
    log = []
    hand_off, score_group = GroupScheduler._hand_off, PathVerifier._score_group

    def prefetching(scheduler, source, g, *, reserve, early):
        batch = hand_off(scheduler, source, g, reserve=reserve, early=early)
        if batch is not None and early and scheduler.kv.streams is not None:
            log.append(("prefetch", batch.arena))
        return batch

    def computing(verifier, g, arena, items, scores):
        fake = verifier.kv.streams
        if fake is not None:
            ahead = log[-1][1] if log and log[-1][0] == "prefetch" else None
            log.append(("compute", fake.ready(arena), ahead is not None and not fake.ready(ahead)))
        return score_group(verifier, g, arena, items, scores)

    monkeypatch.setattr(GroupScheduler, "_hand_off", prefetching)
    monkeypatch.setattr(PathVerifier, "_score_group", computing)
    return log


@pytest.mark.parametrize(("name", "blocks"), [("tiny-qwen-prm", 250), ("tiny-rlhflow-prm", 200)])
def test_a_prefetched_group_loads_while_the_group_before_computes(fakes, monkeypatch, name, blocks):
    """Where the schedule prefetches the next group before this one computes, that group's copies (from the
    host and from this group's arena) are still queued on the copy stream while this one computes; every group
    computes on an arena whose loads ran; the scores and bytes are the emulated run's."""
    log = spy_schedule(monkeypatch)

    def build():
        verifier = prm_verifier(synthetic_prm(name, CPU, torch.float32))
        verifier.use_budget(blocks * 4 * verifier.kv.token_bytes, block_size=4)
        return verifier

    (emulated, want), (cuda, got) = emulated_and_cuda(fakes, build, uneven_tree)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-5, atol=1e-6)
    assert_same_kv_work(emulated, cuda)
    assert cuda.kv.counters.step["h2d"] > 0, "the second step loaded its chains from the host"
    computes = [entry for entry in log if entry[0] == "compute"]
    assert computes and all(ready for _, ready, _ in computes)
    prefetches = [at for at, entry in enumerate(log) if entry[0] == "prefetch"]
    assert prefetches, "the schedule prefetched a group before the one before it computed"
    assert all(log[at + 1][0] == "compute" and log[at + 1][2] for at in prefetches), "its copies were still queued"


def test_the_next_group_is_prefetched_beside_and_loads_during_this_compute(fakes):
    """The scheduler on segments of known values (tests/test_verifier_schedule.py): the narrow group's load,
    one host token and the shared root from the wide group's arena, waits on the copy stream until the
    wide group has computed, then gives the narrow group its chain."""
    fakes.on = True
    kv = pools(64)
    fake = kv.streams
    root, root_kv = chain_of(kv, [4])
    a, a_tail = chain_of(kv, [4], root, seed=10)
    b, b_tail = chain_of(kv, [1], root, seed=20)
    kv._offload_one([root.handle, a.handle])  # b rests on the host
    assert kv.tier(b.handle) is Tier.HOST
    kv.start_step()
    expected = {a.handle: torch.cat([root_kv, a_tail], 3), b.handle: torch.cat([root_kv, b_tail], 3)}
    seen, queued = [], []
    check = checking(expected, seen)

    def compute(g, arena):
        queued.append(sum(bool(op.accesses) for op in fake.copy_stream.queue))
        check(g, arena)

    GroupScheduler(kv).run([group(a, 4, 2), group(b, 1, 60, 4)], compute)
    assert seen == [0, 4]
    assert queued[0] > 0 and queued[1] == 0, "the narrow group's copies waited while the wide group computed"
    assert kv.counters.step["h2d"] == 1 * TOKEN and kv.counters.step["d2h"] == 0
    assert fake.unpinned == []


def test_a_segment_offloaded_and_loaded_straight_back_is_read_after_its_copy_to_the_host(fakes):
    """A segment of whole blocks goes to the host in one asynchronous copy (both sides contiguous); loaded
    straight back into an arena row (strided on the device side only, so its pinned host side still crosses as
    one asynchronous copy, no pageable temporary), it reads what the offload wrote. The load also waits for the
    offload's copy first (`syncs`): not needed while the host side is contiguous, a safety if it ever is not."""
    fakes.on = True
    kv = pools(8)
    node, want = chain_of(kv, [8])  # two whole blocks
    kv._offload_one([])
    assert kv.tier(node.handle) is Tier.HOST
    arena, _ = kv.arena(2, 8)  # [L, 2, B, H, W, D]
    kv.load(node.handle, arena[:, :, 0])
    assert torch.equal(arena[:, :, 0], want)
    assert kv.streams.staged == [] and kv.streams.syncs == 1


def test_closing_waits_for_copies_still_queued_before_giving_the_pools_back(fakes):
    """A run that ends (failed or cancelled too) with a segment's copy to the host still queued: closing runs it
    before the pools go, so memory torch hands out next is never written by it."""
    fakes.on = True
    kv = pools(8)
    chain_of(kv, [8])
    kv._offload_one([])
    fake = kv.streams
    assert any(op.accesses for op in (*fake.compute.queue, *fake.copy_stream.queue)), "the copy to the host is queued"
    kv.close()
    assert not fake.compute.queue and not fake.copy_stream.queue and fake.syncs == 1


def test_a_load_that_fails_part_way_gives_its_arena_back_only_after_its_queued_copies(fakes, monkeypatch):
    """Out of device memory in the middle of a group's load (a piece's staging buffer): the arena's run goes back
    to the pool once compute has waited for the copies already queued into it, never while they may write it."""
    fakes.on = True
    kv = pools(64)
    fake = kv.streams
    root, _ = chain_of(kv, [4])
    a, _ = chain_of(kv, [4], root, seed=10)
    kv._offload_one([root.handle, a.handle])
    kv.start_step()
    load, loads = kv.load, []

    def failing(handle, target):
        loads.append(handle)
        load(handle, target)
        if len(loads) == 2:
            raise torch.OutOfMemoryError("injected: a staging buffer does not fit")

    monkeypatch.setattr(kv, "load", failing)
    release, released = kv.release, []

    def noting(run):
        released.append(any(op.accesses for op in fake.copy_stream.queue))  # a copy still queued when it goes back
        release(run)

    monkeypatch.setattr(kv, "release", noting)
    with pytest.raises(torch.OutOfMemoryError):
        GroupScheduler(kv).run([group(a, 4, 2)], lambda g, arena: None)
    assert len(loads) == 2 and released == [False], "no copy was queued into the run when it went back"
