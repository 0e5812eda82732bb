"""The generator/verifier memory split: the verifier's KV in budgeted pools of its own shape, exact byte
counters, the same scores whatever share of the budget it gets, and a clear refusal when a batch cannot fit."""

from __future__ import annotations

import math

import pytest
import torch

from app.cli import main
from engine.config import CacheConfig, SearchConfig
from engine.errors import KVBudgetTooSmall
from engine.kv.blocks import Tier
from engine.kv.split import VerifierShape, emulated_budget, split_budget
from engine.search import run
from engine.verifiers import StepToScore, make_verifier, prm_verifier
from engine.verifiers.kv_pools import VerifierKV
from engine.verifiers.synthetic_prm import synthetic_prm

CPU = torch.device("cpu")
QUESTION = "Tom has 3 apples and buys 4 more. How many?"
CHILDREN = ("He buys 4.\n\n", "Three plus four.\n\n", "Add them: 3 + 4 = 7.\n\n")
PRMS = ("tiny-qwen-prm", "tiny-skywork-prm", "tiny-math-shepherd", "tiny-rlhflow-prm")
TOKEN = 2 * 2 * 2 * 4 * 4  # K and V, 2 layers, 2 KV heads, head dim 4, float32: bytes per token
BLOCK = 4 * TOKEN  # 4 tokens a block


def pools(blocks: int) -> VerifierKV:
    return VerifierKV(2, 2, 4, torch.float32, CPU, budget_bytes=blocks * BLOCK, block_size=4)


def segment(tokens: int, seed: int) -> torch.Tensor:
    return torch.randn(2, 2, 2, tokens, 4, generator=torch.Generator().manual_seed(seed))  # [L, 2, H, T, D]


def test_every_copy_is_counted_exactly_and_offloading_keeps_the_values():
    kv = pools(4)
    first, second, third = segment(6, 1), segment(5, 2), segment(3, 3)
    a, b = kv.put(first), kv.put(second)  # 2 + 2 blocks: the device share is full
    c = kv.put(third)
    assert (kv.tier(a), kv.tier(b), kv.tier(c)) == (Tier.DEVICE, Tier.DEVICE, Tier.HOST)
    assert kv.counters.step["d2d"] == 11 * TOKEN and kv.counters.step["d2h"] == 3 * TOKEN
    assert (kv.memory().device_bytes, kv.memory().host_bytes) == (4 * BLOCK, 1 * BLOCK)

    arena, run = kv.arena(2, 4, keep=[a])  # 2 blocks: the least recently used segment outside `keep` moves out
    assert arena.shape == (2, 2, 2, 2, 4, 4)  # [L, 2, B, H, W, D]
    assert kv.tier(b) is Tier.HOST and kv.tier(a) is Tier.DEVICE
    assert kv.counters.step["d2h"] == (3 + 5) * TOKEN
    kv.release(run)

    arena, run = kv.arena(1, 5, keep=[b])
    kv.load(b, arena[:, :, 0, :, :5])  # the host copy crosses back: its 5 tokens, exactly
    assert torch.equal(arena[:, :, 0, :, :5], second)
    assert kv.counters.step["h2d"] == 5 * TOKEN
    kv.release(run)
    assert kv.memory().peak_device_bytes == 4 * BLOCK  # never past the share


def test_a_batch_row_copies_the_shared_prefix_once_per_other_row():
    kv = pools(8)
    handle = kv.put(segment(3, 4))
    arena, run = kv.arena(3, 4)
    kv.load(handle, arena[:, :, 0, :, :3])
    kv.repeat_row(arena, 3)
    assert torch.equal(arena[:, :, 2, :, :3], arena[:, :, 0, :, :3])
    assert kv.counters.step["d2d"] == 3 * TOKEN + 3 * TOKEN + 2 * 3 * TOKEN  # put, load, two more rows
    kv.release(run)


def test_a_batch_that_cannot_fit_the_share_is_refused_with_the_budget_it_needs():
    kv = pools(4)
    with pytest.raises(KVBudgetTooSmall) as refused:
        kv.arena(3, 8)  # 24 tokens: 6 blocks
    assert refused.value.needed_bytes == 6 * BLOCK
    assert "--verifier-kv-share" in refused.value.user_message()


def test_the_split_gives_the_verifier_one_batch_by_default_and_the_share_when_set():
    assert (split_budget(1000, None, 300).generator_bytes, split_budget(1000, None, 300).verifier_bytes) == (700, 300)
    assert split_budget(1000, None, 800).verifier_bytes == 500  # never more than half by default
    assert split_budget(1000, 0.25, 300).verifier_bytes == 250
    assert split_budget(1000, 0.25, 0).verifier_bytes == 0  # a verifier with no KV takes nothing


@pytest.mark.parametrize("whole, batch, share", [(1000, 0, None), (1000, 300, None), (300, 1000, None),
                                                 (1000, 300, 0.05), (1000, 300, 0.9), (7, 3, 0.5), (0, 5, None)])
def test_the_emulated_devices_automatic_budget_holds_both_parts_in_their_shares(whole, batch, share):
    total = emulated_budget(whole, batch, share)
    split = split_budget(total, share, batch)
    assert split.generator_bytes >= whole and split.verifier_bytes >= batch


def test_a_share_outside_0_1_is_refused():
    with pytest.raises(ValueError, match="fraction between 0 and 1"):
        CacheConfig(verifier_kv_share=1.0)


def three_steps(verifier):
    first = [StepToScore(QUESTION, (), c, ()) for c in CHILDREN]
    scores = verifier.score(first)
    verifier.settle([first[0].key, first[2].key])
    second = [StepToScore(QUESTION, (p,), c, ()) for p in (CHILDREN[0], CHILDREN[2]) for c in CHILDREN]
    scores += verifier.score(second)
    verifier.settle([second[4].key])
    return scores


@pytest.mark.parametrize("name", PRMS)
def test_a_tight_share_gives_the_same_scores_and_exact_bytes_at_rest(name):
    free = prm_verifier(synthetic_prm(name, CPU, torch.float32))
    tight = prm_verifier(synthetic_prm(name, CPU, torch.float32))
    path_tokens = len(tight.path_ids(StepToScore(QUESTION, (CHILDREN[2],), CHILDREN[1], ())))
    tight.use_budget(tight.kv.arena_slots(3, path_tokens) * tight.kv.block_bytes, block_size=4)
    assert three_steps(tight) == pytest.approx(three_steps(free), abs=1e-6)
    memory = tight.memory()
    assert memory.h2d_bytes == 0  # settled: traffic counts from here
    assert memory.host_bytes > 0  # the tight share did move segments to the host
    layout, size = tight.layout, tight.kv.block_bytes
    kept = [
        layout.prefix(QUESTION),
        layout.body(QUESTION, (), CHILDREN[2]),
        layout.body(QUESTION, (CHILDREN[2],), CHILDREN[1]),
    ]
    assert memory.device_bytes + memory.host_bytes == sum(math.ceil(len(ids) / 4) * size for ids in kept)


def search(tiny, verifier: str, share: float | None, model: str | None = None):
    config = SearchConfig(
        beams=2,
        width=2,
        step_tokens=8,
        step_delimiter=None,
        max_steps=3,
        seed=0,
        verifier=verifier,
        verifier_model=model,
    )
    return list(run(QUESTION, tiny, config, CacheConfig(kv_budget_bytes=4_000_000, verifier_kv_share=share)))


@pytest.mark.parametrize(
    ("verifier", "model", "share"),
    [  # self-judge reads the generator: larger KV per token
        ("prm", "synthetic:tiny-qwen-prm", 0.03),
        ("prm", "synthetic:tiny-rlhflow-prm", 0.03),
        ("self-judge", None, 0.06),
    ],
)
def test_scores_are_the_same_with_and_without_the_budget_split(tiny, verifier, model, share):
    roomy, tight = search(tiny, verifier, 0.5, model), search(tiny, verifier, share, model)
    for events in (roomy, tight):
        assert events[-1].type == "run_finished", events[-1]
    scored = [[(e.id, e.text) for e in events if e.type == "candidate_scored"] for events in (roomy, tight)]
    assert scored[0] == scored[1]
    scores = [[e.score for e in events if e.type == "candidate_scored"] for events in (roomy, tight)]
    assert scores[1] == pytest.approx(scores[0], abs=1e-6)
    moved = [sum(e.verifier_h2d_bytes for e in events if e.type == "memory_snapshot") for events in (roomy, tight)]
    assert moved[0] == 0 < moved[1]  # the tight share did offload, and it changed no score


def test_the_budget_is_split_exactly_and_the_verifier_keeps_within_its_share(tiny):
    events = search(tiny, "prm", 0.03, "synthetic:tiny-skywork-prm")
    started = events[0]
    assert started.kv_budget_bytes + started.verifier_kv_budget_bytes == 4_000_000
    assert started.verifier_kv_budget_bytes == 120_000
    snapshots = [e for e in events if e.type == "memory_snapshot"]
    assert snapshots and all(s.verifier_budget_bytes == 120_000 for s in snapshots)
    assert all(0 < s.verifier_peak_device_bytes <= 120_000 for s in snapshots)
    assert all(s.verifier_device_bytes <= 120_000 for s in snapshots)
    for s in snapshots:  # each candidate's own step, apart; the question and older steps are ancestors' bytes
        assert 0 < sum(c.verifier_device_bytes for c in s.candidates) <= s.verifier_device_bytes
        assert sum(c.verifier_host_bytes for c in s.candidates) <= s.verifier_host_bytes
    assert any(c.verifier_host_bytes for s in snapshots for c in s.candidates)  # the tight share offloaded some


def test_a_verifier_without_kv_leaves_the_whole_budget_to_the_generator(tiny):
    events = search(tiny, "logprob", 0.5)
    assert (events[0].kv_budget_bytes, events[0].verifier_kv_budget_bytes) == (4_000_000, 0)
    assert make_verifier("logprob", tiny).memory().budget_bytes == 0


def run_args(prm: str, budget: str, share: str) -> list[str]:
    """`beamwise run` on the tiny model with `prm` as the verifier, `budget` split by `share`."""
    search = ["--beams", "2", "--width", "2", "--step-tokens", "8", "--max-steps", "2", "--step-delimiter", "none"]
    return ["run", QUESTION, "--model", "synthetic:tiny-llama", *search, "--no-save", "--verifier", "prm",
            "--verifier-model", prm, "--kv-budget", budget, "--verifier-kv-share", share]  # fmt: skip


def test_a_share_too_small_for_one_row_fails_the_run_saying_what_to_raise(capsys):
    args = run_args("synthetic:tiny-qwen-prm", "1MB", "0.001")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "the verifier's KV share 1.0 kB is too small for the verifier's batch" in err
    assert "--verifier-kv-share" in err
    assert err.count("error:") == 1


def test_the_cli_prints_the_verifier_share_and_its_kv_per_step(capsys):
    args = run_args("synthetic:tiny-math-shepherd", "4MB", "0.25")
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "verifier KV budget 1,000,000 B" in out
    assert out.count("verifier KV: ") == 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_a_tight_share_offloads_to_pinned_host_memory_and_keeps_the_scores():
    cuda = torch.device("cuda")
    free = prm_verifier(synthetic_prm("tiny-qwen-prm", cuda, torch.float32))
    tight = prm_verifier(synthetic_prm("tiny-qwen-prm", cuda, torch.float32))
    path_tokens = len(tight.path_ids(StepToScore(QUESTION, (CHILDREN[2],), CHILDREN[1], ())))
    tight.use_budget(tight.kv.arena_slots(3, path_tokens) * tight.kv.block_bytes, block_size=4)
    assert three_steps(tight) == pytest.approx(three_steps(free), abs=1e-5)
    assert tight.kv.pools[Tier.HOST].pin and tight.memory().host_bytes > 0
    assert tight.kv.pools[Tier.DEVICE]._chunks[0].is_cuda


@pytest.mark.parametrize(("reads", "larger"), [(1, "group"), (20, "row")])
def test_the_automatic_share_is_the_larger_of_one_group_and_one_path_read_at_its_longest(reads, larger):
    """max(group, row) is taken in one place (engine/kv/split.py), which the run's verifier and the plan call."""
    shape = VerifierShape(token_bytes=100, prefix=40, per_step=3, probe=2, reads_per_token=reads)
    group, row = shape.group_bytes(4, 8, 3), shape.row_bytes(8, 3)
    assert row == shape.group_bytes(1, 8 * reads, 3) and shape.share_bytes(4, 8, 3) == max(group, row)
    assert (group > row) == (larger == "group")


def test_a_verifiers_share_is_its_shapes(tiny):
    """PathVerifier sizes its share from its layout's tokens through VerifierShape, as the plan does."""
    judge = make_verifier("self-judge", tiny)
    shape = judge.shape("What is 2+3?")
    assert shape.prefix == len(judge.layout.prefix("What is 2+3?")) and shape.token_bytes == judge.kv.token_bytes
    assert judge.batch_bytes("What is 2+3?", 4, 8, 3) == shape.share_bytes(4, 8, 3)
    assert judge.row_bytes("What is 2+3?", 8, 3) == shape.row_bytes(8, 3)


def test_the_shape_a_plan_sizes_with_has_the_verifiers_own_block_and_batch():
    """The plan sizes a verifier's share with VerifierShape's defaults: they are the run's block and batch sizes."""
    import inspect

    from engine.kv.split import VerifierShape
    from engine.verifiers.kv_pools import VerifierKV
    from engine.verifiers.path_kv import PathVerifier

    shape = VerifierShape(token_bytes=1, prefix=0, per_step=0, probe=0)
    assert shape.block_size == inspect.signature(VerifierKV).parameters["block_size"].default
    assert shape.batch_size == inspect.signature(PathVerifier).parameters["batch_size"].default
