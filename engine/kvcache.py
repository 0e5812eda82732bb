"""One run's KV cache: resolves the policy and budget, owns blocks and store, runs each step's plan."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence

import torch

from engine import events as ev
from engine.config import CacheConfig, SearchConfig
from engine.errors import KVBudgetTooSmall
from engine.executor import GroupDone, GroupExecutor, Live, StepExecutor, StepTiming
from engine.kv.blocks import BlockManager, Tier
from engine.kv.layerwise import LayerwiseExecutor
from engine.kv.store import KVStore
from engine.runner import StepRules, prefill
from engine.scheduling import Group, StepPlan, Switches, Work, plan_in_device, plan_lbs

PROMPT_ID = 0
CUDA_MARGIN = 1 << 30  # leave this much device memory free for activations when the budget is automatic


def whole_search_bytes(prompt_tokens: int, search: SearchConfig, token_bytes: int, block_size: int) -> int:
    """Upper bound of in_device's peak: every candidate's full-length KV at rest (block-rounded) and working."""
    n, steps = search.candidates_per_step, search.max_steps
    longest = prompt_tokens + steps * search.step_tokens
    at_rest = prompt_tokens + block_size + n * steps * (search.step_tokens + block_size)
    return (at_rest + n * (longest + search.step_tokens)) * token_bytes


class KVCache:
    def __init__(self, loaded, search: SearchConfig, cache: CacheConfig, prompt_tokens: int) -> None:
        self.model, self.cfg, self.search = loaded.model, cache, search
        shape = loaded.kv_shape
        self.device = loaded.device
        self.blocks = BlockManager(cache.block_size)
        self.store = KVStore(
            self.blocks,
            num_layers=shape.num_layers,
            num_kv_heads=shape.num_kv_heads,
            head_dim=shape.head_dim,
            dtype=loaded.dtype,
            device=self.device,
            pcie_gbps=cache.pcie_gbps,
            host_device="meta" if self.device.type == "meta" else "cpu",  # plan-only runs hold no data
        )
        self.emulated = self.store.emulated
        whole = whole_search_bytes(prompt_tokens, search, self.store.token_bytes, cache.block_size)
        self.budget = cache.kv_budget_bytes or self._automatic_budget(whole)
        self.policy = cache.policy if cache.policy != "auto" else ("in_device" if whole <= self.budget else "lbs")
        self.home = Tier.DEVICE if self.policy == "in_device" else Tier.HOST
        self.live: dict[int, Live] = {}
        self.executor: StepExecutor
        if self.policy == "layerwise":
            self.executor = LayerwiseExecutor(self.model, self.blocks, self.store, self.budget)
        else:
            self.executor = GroupExecutor(self.model, self.blocks, self.store, self.home)
        self.timing = StepTiming()

    def _automatic_budget(self, whole: int) -> int:
        if self.emulated:
            return whole
        free, _ = torch.cuda.mem_get_info(self.device)
        return max(free - CUDA_MARGIN, 1)

    @property
    def device_label(self) -> str:
        if self.emulated:
            return "cpu (emulated GPU)"
        return f"{self.device} ({torch.cuda.get_device_name(self.device)})"

    # -- lifecycle of candidates ----------------------------------------------------------------
    def prefill(self, prompt: Sequence[int]) -> float:
        """Compute the prompt's KV once; every candidate shares its blocks. Returns seconds."""
        start = time.perf_counter()
        self.store.counters.start_step()
        cache, _ = prefill(self.model, prompt[:-1], self.device)
        plan = self.blocks.allocate(prompt[:-1], self.home)
        if isinstance(self.executor, LayerwiseExecutor):
            self.executor.start(PROMPT_ID, cache)  # keeps the prompt's KV as its first row
        else:
            new_kv = [(layer.keys[0], layer.values[0]) for layer in cache.layers]
            self.store.write(plan, new_kv, self.home, PROMPT_ID)
        self.live[PROMPT_ID] = Live(PROMPT_ID, plan.table, prompt[-1], torch.Generator())
        self.store.sync()
        return time.perf_counter() - start

    def fork(self, parent: int | None, child: int, generator: torch.Generator) -> None:
        source = self.live[PROMPT_ID if parent is None else parent]
        self.live[child] = Live(child, self.blocks.fork(source.table), source.pending, generator, source.id)

    def release(self, candidate: int) -> None:
        live = self.live.pop(candidate, None)
        if live is not None:
            self.store.free(self.blocks.free(live.table))

    def close(self) -> None:
        for candidate in list(self.live):
            self.release(candidate)

    # -- one step -------------------------------------------------------------------------------
    def plan(self, candidates: Sequence[int]):
        work = [Work(c, tuple(self.live[c].table), self.blocks.num_tokens(self.live[c].table)) for c in candidates]
        token_bytes, k = self.store.token_bytes, self.search.step_tokens
        if self.policy == "layerwise":
            need = self.executor.min_budget(len(work), k)
            if need > self.budget:
                raise KVBudgetTooSmall(self.budget, need, "two layers of every candidate (layerwise)")
            return StepPlan("layerwise", (Group(tuple(w.id for w in work)),))
        if self.policy == "in_device":
            resident = self.store.resident_bytes(Tier.DEVICE)
            return plan_in_device(work, resident, self.budget, k, token_bytes, self.blocks.block_size)
        switches = Switches(inter_beam=self.cfg.inter_beam, balanced_prefetch=self.cfg.balanced_prefetch)
        return plan_lbs(work, self.budget, k, token_bytes, switches)

    def decode_step(
        self, candidates: Sequence[int], rules: StepRules, should_stop: Callable[[], bool]
    ) -> Iterator[GroupDone]:
        if PROMPT_ID in self.live and all(c != PROMPT_ID for c in candidates):
            self.release(PROMPT_ID)  # the first step's children hold the prompt blocks now
        plan = self.plan(candidates)
        self.store.counters.start_step()
        self.timing = StepTiming()
        share = self.policy == "in_device" or self.cfg.inter_beam
        yield from self.executor.run_step(plan.groups, self.live, rules, share, self.timing, should_stop)
        self.store.sync()

    # -- reporting ------------------------------------------------------------------------------
    def _placement(self, live: Live) -> tuple[int, int, int, int]:
        """(device blocks, host blocks, device bytes, host bytes) of one candidate's KV."""
        if isinstance(self.executor, LayerwiseExecutor):
            share = self.executor.resident_share()
            total = self.blocks.num_tokens(live.table) * self.store.token_bytes
            blocks_on_device = round(len(live.table) * share)
            return (
                blocks_on_device,
                len(live.table) - blocks_on_device,
                round(total * share),
                total - round(total * share),
            )
        on_device = sum(1 for b in live.table if self.blocks.blocks[b].on_device)
        on_host = len(live.table) - on_device
        return on_device, on_host, on_device * self.store.block_bytes, on_host * self.store.block_bytes

    def _tier_totals(self) -> tuple[int, int]:
        if isinstance(self.executor, LayerwiseExecutor):
            return self.executor.tier_bytes()
        return self.store.resident_bytes(Tier.DEVICE), self.store.resident_bytes(Tier.HOST)

    def step_events(self, step: int) -> Iterator[ev.Event]:
        counters = self.store.counters
        memory, traffic_of = [], counters.per_candidate()
        for cid, live in self.live.items():
            if cid == PROMPT_ID:
                continue
            traffic = traffic_of.get(cid, {})
            group = self.timing.group_of.get(cid)
            memory.append(
                ev.CandidateMemory(cid, group, *self._placement(live), traffic.get("h2d", 0), traffic.get("d2h", 0))
            )
        device_bytes, host_bytes = self._tier_totals()
        yield ev.MemorySnapshot(
            step, self.emulated, self.budget, device_bytes, host_bytes, self.timing.peak_device_bytes, tuple(memory)
        )
        pcie = (counters.step["h2d"] + counters.step["d2h"]) / self.store.bandwidth
        compute = self.timing.compute_seconds
        stall = self.timing.modelled_stall_seconds if self.emulated else counters.step_copy_seconds
        yield ev.TransferStats(
            step,
            self.emulated,
            counters.total["h2d"],
            counters.total["d2h"],
            counters.total["d2d"],
            counters.step["h2d"],
            counters.step["d2h"],
            counters.step["d2d"],
            counters.step_copy_seconds,
            pcie,
            compute,
            stall / (stall + compute) if stall + compute > 0 else 0.0,
            len(set(self.timing.group_of.values())),
        )
