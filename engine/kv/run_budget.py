"""One run's KV budget: set once (--kv-budget, else free device memory, else what the whole search needs), split
between the generator and the verifier, re-read each step, and a policy's refusal said in the budget the user gave."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from engine.config import CacheConfig
from engine.errors import KVBudgetTooSmall, format_bytes_up
from engine.kv.split import emulated_budget, split_budget, total_for
from engine.kv.store import KVStore


def device_free_bytes(device: torch.device) -> int | None:
    """Free bytes of a CUDA device now; None on any other device (what it has cannot change)."""
    if device.type != "cuda":
        return None
    free, _ = torch.cuda.mem_get_info(device)
    # memory torch's caching allocator holds but no tensor uses is free to this process too
    return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)


def whole_slots(nbytes: int, slot: int) -> int:
    """`nbytes` rounded up to whole slots of `slot` bytes."""
    return -(-nbytes // slot) * slot


class RunBudget:
    """The run's KV budget, split between the generator (`budget`) and the verifier (`verifier_budget`)."""

    def __init__(self, cache: CacheConfig, free: int | None, margin: int, whole: int, reserve: Callable[[int], int],
                 verifier_batch_bytes: int, verifier_row_bytes: int) -> None:  # fmt: skip
        """--kv-budget, else `free` device memory (None: not read, or none can be read) less the `margin` and the
        prefill's activations (`reserve`), else what the whole search needs (`whole`, the policy's). `total_for`
        gives the --kv-budget of a generator part."""
        self.margin = margin
        self.read_free = free is not None  # the budget was read from free device memory (no --kv-budget)
        self.shortfall = 0  # device bytes other programs took from the budget at its last re-read
        share = cache.verifier_kv_share
        total = cache.kv_budget_bytes or self._automatic(free, whole, verifier_batch_bytes, share, reserve)
        split = split_budget(total, share, verifier_batch_bytes, verifier_row_bytes)
        self.budget, self.verifier_budget = split.generator_bytes, split.verifier_bytes
        self.total_for = functools.partial(total_for, share=share, verifier_batch_bytes=verifier_batch_bytes,
                                           verifier_row_bytes=verifier_row_bytes)  # a generator part's --kv-budget

    def _automatic(self, free: int | None, whole: int, verifier_bytes: int, share: float | None,
                   reserve: Callable[[int], int]) -> int:  # fmt: skip
        """Free device memory less the margin and what the prefill holds beside the pool (`reserve` of the room
        left after the margin); where none can be read (the emulated device), a budget that holds the
        generator's `whole` search and the verifier's batch, in the shares the user set."""
        if free is None:
            return emulated_budget(whole, verifier_bytes, share)
        return max(free - self.margin - reserve(free - self.margin), 1)

    def current(self, free: int | None, store: KVStore, layer_overhead: int | None) -> int:
        """The budget, re-read each step (`free`: free device bytes now; None where they cannot change). The pool
        is allocated once: when other programs leave less than the activation margin free, the part of the pool
        in use shrinks by the shortfall, and it grows back (up to the pool's size) when memory is freed again.
        Layer-wise's pool holds its buffers' overhead (`layer_overhead`; None for the other policies) beside the
        budget, so its budget is what is left of the pool without it: a shrink moves layers to the host, a grow
        brings them back."""
        shortfall = self.shortfall = 0 if free is None else max(self.margin - free, 0)
        if layer_overhead is not None:
            usable = store.device_capacity_bytes - layer_overhead - shortfall
            return max(0, min(self.budget, usable))
        limit = self.budget if free is None else min(self.budget, store.device_capacity_bytes - shortfall)
        return store.limit_device(limit)

    def refused(self, error: KVBudgetTooSmall, slot: int, whole: int | None, in_device: bool) -> KVBudgetTooSmall:
        """A policy's refusal in the user's terms, so that one raise of the budget is enough. The policy saw the
        budget in whole slots of the pool (`slot` bytes), less what other programs took from it: the refusal names
        the budget the run was given (and what of it was usable, when other programs took some), the step's need
        in whole slots, and a budget under which no later step is refused either (`whole`: every policy's, in
        whole slots; head-wise's prompt needs less than its steps)."""
        need = whole_slots(error.needed_bytes, slot)
        refused = KVBudgetTooSmall(
            self.budget, need, error.what,
            "the generator's share of the KV budget" if self.verifier_budget else "KV budget",
            usable_bytes=error.budget_bytes if self.shortfall else None,
            whole_bytes=whole if whole is not None and whole > need else None, needed_for=error.needed_for,
        )  # fmt: skip
        if in_device:
            refused.hint = "Raise the KV budget, or pick lbs or auto to offload the KV to the CPU."
        elif self.verifier_budget:
            total = self.total_for(max(need, whole or 0))
            refused.hint = (f"The generator gets that with --kv-budget {format_bytes_up(total)} (the verifier's part "
                            f"as now), or give the verifier less of it (--verifier-kv-share). {refused.hint}")
        return refused
