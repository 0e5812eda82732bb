"""The prompt's computed KV into a run (engine/kv/cache.py `KVCache.prefill`): layer-wise keeps the model's cache as
its first row; the other policies write it, its layers stacked, into the prompt's blocks."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from transformers import DynamicCache

from engine.errors import KVBudgetTooSmall
from engine.kv.blocks import AppendPlan, BlockManager, Tier
from engine.kv.first_step import PROMPT_ID
from engine.kv.layerwise import LayerwisePolicy
from engine.kv.policy import Policy
from engine.kv.pool import PoolExhausted
from engine.kv.store import KVStore


def write_prompt(policy: Policy, store: KVStore, blocks: BlockManager, body: Sequence[int], cache: DynamicCache,
                 home: Tier, budget: int, refuse: Callable[[KVBudgetTooSmall], KVBudgetTooSmall]) -> AppendPlan:
    """The prompt's blocks for `body`, its KV `cache` (batch 1, computed on the device) kept by layer-wise as its
    first row, else written into them on `home`; a pool that cannot hold even the question's KV (in_device's,
    whose `budget` the refusal names) is refused in the user's terms (`refuse`)."""
    plan = blocks.allocate(body, home)
    if isinstance(policy, LayerwisePolicy):
        policy.start(PROMPT_ID, cache)  # keeps the prompt's KV as its first row
        return plan
    try:
        store.place(plan.new_blocks, home)
    except PoolExhausted as error:  # in_device: the budget cannot hold even the question's KV
        need = len(plan.new_blocks) * store.block_bytes
        refused = KVBudgetTooSmall(budget, need, "keeping the whole search on the device (in_device)",
                                   needed_for="the question's KV")  # fmt: skip
        raise refuse(refused) from error
    store.write(plan, stacked_layers(cache), home, PROMPT_ID)
    return plan


def stacked_layers(cache: DynamicCache) -> torch.Tensor:
    """A batch-1 cache's KV as `[L, 2, H, P, D]`, each layer let go as soon as it is copied: while the prompt's
    KV is written into blocks it is on the device twice at most (engine.context_plan.prefill_reserve), not three
    times (the cache, a stack of each layer, their stack). The cache is spent."""
    first = cache.layers[0].keys[0]  # [H, P, D]
    kv = first.new_empty((len(cache.layers), 2, *first.shape))
    for index, layer in enumerate(cache.layers):
        kv[index, 0].copy_(layer.keys[0])
        kv[index, 1].copy_(layer.values[0])
        layer.keys = layer.values = None
    return kv
