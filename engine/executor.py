"""Runs one step of a group plan (in_device or lbs): assemble each group's KV, decode, write back.

Timing model for the emulated device: a group's copies to the device stall compute unless
they were prefetched while the previous group computed; write-back is not counted as a stall
(it can overlap the next group). On CUDA the copies are real but not yet overlapped with compute.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from engine.kv.blocks import BlockManager, Tier
from engine.kv.store import KVStore
from engine.runner import Row, RowResult, StepRules, cache_from_kv, decode_step
from engine.scheduling import Group


@dataclass
class Live:
    """A candidate whose KV is in blocks: what a step needs to continue it."""

    id: int
    table: list[int]
    pending: int
    generator: torch.Generator
    source: int | None = None  # the candidate it was forked from (the prompt's id for the first step)


@dataclass
class StepTiming:
    compute_seconds: float = 0.0
    modelled_stall_seconds: float = 0.0
    peak_device_bytes: int = 0  # blocks resident on the device plus the running group's working KV
    group_of: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class GroupDone:
    index: int
    group: Group
    results: dict[int, RowResult]


class StepExecutor(Protocol):
    """What the KV cache drives each step: `GroupExecutor` (in_device, lbs) or the layer-wise baseline."""

    def run_step(
        self,
        groups: Sequence[Group],
        live: dict[int, Live],
        rules: StepRules,
        share: bool,
        timing: StepTiming,
        should_stop: Callable[[], bool],
    ) -> Iterator[GroupDone]: ...


class GroupExecutor:
    """Decodes groups of candidates whose KV is gathered from blocks in the store."""

    def __init__(self, model: torch.nn.Module, blocks: BlockManager, store: KVStore, home: Tier) -> None:
        self.model, self.blocks, self.store, self.home = model, blocks, store, home

    def run_step(
        self,
        groups: Sequence[Group],
        live: dict[int, Live],
        rules: StepRules,
        share: bool,
        timing: StepTiming,
        should_stop: Callable[[], bool],
    ) -> Iterator[GroupDone]:
        """Yields after each group (a cancellation point); `live` tables are updated in place."""
        previous_compute = 0.0
        for index, group in enumerate(groups):
            before = self.store.counters.step["h2d"]
            members = [live[c] for c in group.candidates]
            results, compute = self._run_group(members, rules, share, should_stop, timing)
            copied = (self.store.counters.step["h2d"] - before) / self.store.bandwidth
            hidden = copied * len(group.prefetched) / len(group.candidates)  # the prefetched share overlaps
            timing.modelled_stall_seconds += copied - min(hidden, previous_compute)
            timing.compute_seconds += compute
            previous_compute = compute
            for c in group.candidates:
                timing.group_of[c] = index
            yield GroupDone(index, group, dict(zip(group.candidates, results, strict=True)))
            if should_stop():
                return

    def _run_group(
        self, members: list[Live], rules: StepRules, share: bool, should_stop, timing: StepTiming
    ) -> tuple[list[RowResult], float]:
        tables = [m.table for m in members]
        kv = self.store.gather(tables, [m.id for m in members], share=share, extra=0)  # [L, 2, B, H, P, D]
        width = kv.shape[4]
        lengths = [self.blocks.num_tokens(t) for t in tables]
        mask = torch.zeros((len(members), width), dtype=torch.long, device=kv.device)
        for row, length in enumerate(lengths):
            mask[row, width - length :] = 1
        cache = cache_from_kv(self.model, kv)
        del kv
        rows = [Row(m.id, m.pending, length, m.generator) for m, length in zip(members, lengths, strict=True)]
        results, compute = decode_step(self.model, cache, mask, rows, rules, should_stop)
        working = sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)
        timing.peak_device_bytes = max(timing.peak_device_bytes, self.store.resident_bytes(Tier.DEVICE) + working)
        for row, (member, result) in enumerate(zip(members, results, strict=True)):
            n = len(result.fed)
            if n == 0:
                continue
            new_kv = [
                (layer.keys[row, :, width : width + n], layer.values[row, :, width : width + n])
                for layer in cache.layers
            ]
            plan = self.blocks.append(member.table, result.fed, self.home)
            self.store.write(plan, new_kv, self.home, member.id)
            member.table = plan.table
            member.pending = result.sampled[-1]
        return results, compute
