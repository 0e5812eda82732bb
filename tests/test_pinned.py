"""Pinned host memory: what torch's caching host allocator would hold for the KV engine, and what bench reports."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import engine.bench as bench
from app.bench_table import format_report
from engine import idle
from engine.idle import Released, release_cached_memory
from engine.kv.pool import SlotPool
from engine.kv.streams import host_allocator_stats, pinned_block_bytes
from tests.fake_pinned import PinnedModel, block_bytes
from tests.test_bench import SMALL


def test_the_model_pins_powers_of_two_reuses_freed_blocks_of_a_size_and_gives_them_back_on_release():
    model = PinnedModel()
    first = model.take(torch.empty(300, dtype=torch.uint8))  # pins 512
    assert (model.held, model.new_blocks, model.asked) == (512, 1, 300)
    del first
    second = model.take(torch.empty(400, dtype=torch.uint8))  # the freed 512 block again
    assert (model.held, model.new_blocks) == (512, 1)
    third = model.take(torch.empty(100, dtype=torch.float32))  # 400 bytes, in use beside it: another block
    assert (model.held, model.new_blocks, model.peak_in_use) == (1024, 2, 1024)
    del second, third
    assert model.in_use == 0 and model.held == 1024
    model.release()
    assert model.held == 0 and model.peak == 1024


@pytest.mark.parametrize("nbytes", [1, 2, 3, 255, 256, 257, 268_435_456, 1_086_259_200])
def test_the_engine_sizes_requests_by_the_same_rule_as_the_model(nbytes):
    assert pinned_block_bytes(nbytes) == block_bytes(nbytes) >= nbytes
    assert pinned_block_bytes(nbytes) < 2 * nbytes or nbytes == 1


def test_a_run_longer_than_a_chunk_takes_the_whole_pinned_block_and_later_runs_use_the_rest():
    made: list[int] = []

    def empty(n: int) -> torch.Tensor:
        made.append(n)
        return torch.empty(n)

    slot = (1, 2, 1, 3, 1)  # 6 float32 elements: 24 bytes a slot
    pool = SlotPool(slot, torch.float32, torch.device("cpu"), capacity=0, chunk=4, empty=empty, fill_pinned=True)
    pool.allocate(6)  # 144 bytes: torch would pin 256, which hold 10 slots
    assert made == [10 * 6]
    pool.allocate(4)  # in the same chunk
    assert made == [10 * 6]
    pool.allocate(4)  # the chunk is full: a new one of `chunk` slots (96 bytes: pins 128, 5 slots)
    assert made == [10 * 6, 5 * 6]
    plain = SlotPool(slot, torch.float32, torch.device("cpu"), capacity=0, chunk=4, empty=empty)
    plain.allocate(6)
    assert made[-1] == 6 * 6, "a device pool or an unpinned one asks for exactly the run"


def test_without_cuda_the_runs_report_no_pinned_memory(monkeypatch):
    assert host_allocator_stats() is None
    report = bench.run_bench(SMALL, ["lbs:inter_token"], teacher_forcing=False, baselines=())
    (result,) = report.results
    assert result.ok and result.pinned_peak_bytes is None and result.pin_seconds is None
    assert "pinned host memory" not in format_report(report)


def test_bench_gives_pinned_blocks_back_between_policies_not_between_repeats_and_reports_them(monkeypatch):
    """On CUDA each policy starts without the last one's cached pinned blocks (their sizes seldom fit and they
    stay locked in RAM); its repeats keep them, as an app's next question would; the table says what pinning
    cost."""
    releases, runs = [], []
    monkeypatch.setattr(bench, "release_cached_memory", lambda host=True: releases.append(host))
    real = bench.run_policy

    def run_policy(*args):
        runs.append(list(releases))
        return replace(real(*args), pinned_peak_bytes=3 * 10**9, pin_seconds=0.25)

    monkeypatch.setattr(bench, "run_policy", run_policy)
    report = bench.run_bench(SMALL, ["lbs:inter_token", "layerwise"], repeats=2, teacher_forcing=False,
                             baselines=())  # fmt: skip
    assert runs == [[True], [True, False], [True, False, True], [True, False, True, False]]
    text = format_report(report)
    assert "lbs:inter_token: pinned host memory 3.0 GB at most; 0.25 s of its wall time pinning" in text



def test_releasing_gives_back_the_cached_device_memory_and_the_pinned_blocks_only_when_asked(monkeypatch):
    """What an idle app and bench between policies hand back on CUDA (torch's figures, faked here)."""
    reserved, held, calls = [9_000, 1_000, 1_000, 400], [5_000, 1_000], []
    cuda = bench.torch.cuda
    monkeypatch.setattr(cuda, "is_available", lambda: True)
    monkeypatch.setattr(cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(cuda, "memory_reserved", lambda: reserved.pop(0))
    monkeypatch.setattr(cuda, "empty_cache", lambda: calls.append("device"))
    monkeypatch.setattr(cuda, "host_memory_stats", lambda: {"allocated_bytes.current": held.pop(0)})
    monkeypatch.setattr(idle, "release_host_cache", lambda: calls.append("host"))
    assert release_cached_memory(host=False) == Released(8_000, 0)
    assert release_cached_memory() == Released(600, 4_000)
    assert calls == ["device", "device", "host"]
    monkeypatch.setattr(cuda, "is_available", lambda: False)
    assert release_cached_memory() == Released() and not Released().any


def test_layerwise_at_paper_scale_keeps_pinned_only_what_it_uses():
    """Plan-only, Llama-2-7B shapes (benchmarks/pinned_memory.py): on w16 every pinned block is in use at the
    peak and filled by its buffer, 5.6 GB (two sets of host layers, and the prompt's one-row layers left cached,
    pinned 11.1 GB before)."""
    from benchmarks.pinned_memory import measure

    model = measure("w16", "layerwise")
    assert model.peak == model.peak_in_use == model.peak_asked
    assert model.peak < 6 * 10**9


def test_layerwise_keeps_no_freed_pinned_block_as_layers_move_and_buffers_regrow(tiny, monkeypatch, watch_kernels):
    """Twelve steps: layers move between the tiers as the rows change and host buffers outgrow their length;
    a host buffer a layer leaves is a spare, and a spare no later step fits is freed and given back at once."""
    from engine.config import CacheConfig, SearchConfig
    from engine.kv import store as store_module
    from tests.fake_cuda import Fakes
    from tests.test_cuda_paths import emulated_and_cuda
    from tests.test_equivalence import assert_same_run, footprint_budget

    long = SearchConfig(beams=2, width=3, step_tokens=8, max_steps=12, step_delimiter=None, seed=7)
    cache = CacheConfig(policy="layerwise", kv_budget_bytes=footprint_budget(tiny, long, 4.2))
    fakes = Fakes()
    monkeypatch.setattr(store_module, "streams_for", fakes.streams_for)
    emulated, cuda = emulated_and_cuda(fakes, tiny, long, cache)
    assert_same_run(emulated, cuda)  # the CUDA branches give the emulated run's tokens and logits
    pinned = fakes.made[-1].allocator
    assert pinned.peak == pinned.peak_in_use and pinned.new_blocks == 7
