"""A search's first step, planned before the prompt is read: each of its rows (the prompt's children) holds the
prompt's blocks and nothing else, so a policy's plan of it needs only their number and length. A long question
was read for 11 s on the CPU, then refused at its first step; `KVCache.prefill` refuses it first now."""

from __future__ import annotations

from engine.config import SearchConfig
from engine.errors import KVBudgetTooSmall
from engine.kv.headwise import HeadwisePolicy, buffer_bytes
from engine.kv.in_device import InDevicePolicy, plan_in_device
from engine.kv.layer_budget import staging_bytes
from engine.kv.layerwise import LayerwisePolicy
from engine.kv.lbs import LbsPolicy
from engine.kv.policy import Policy, PolicyContext, Work, tail_blocks
from engine.kv.store import KVStore

PROMPT_ID = 0  # the prompt's row (engine/kv/cache.py)


def first_step_error(policy: Policy, store: KVStore, context: PolicyContext, search: SearchConfig,
                     prompt_tokens: int, budget: int, whole_budget: int) -> KVBudgetTooSmall | None:
    """The refusal of step 1 under `budget` (the budget as the step would read it; `whole_budget` the run's), in
    the policy's terms; None where it fits. lbs plans it as it will; layer-wise needs two layers of every row;
    head-wise one KV head of the prompt (what its `prefill` refuses before reading it); in_device the question's
    blocks in the pool, then the step."""
    body, k, rows = prompt_tokens - 1, search.step_tokens, search.rows_per_step
    blocks = tuple(range(-(-body // store.blocks.block_size)))
    work = [Work(PROMPT_ID + 1 + row, blocks, body, PROMPT_ID) for row in range(rows)]
    try:
        if isinstance(policy, LbsPolicy):
            policy.plan(work, budget)
        elif isinstance(policy, LayerwisePolicy):
            need = staging_bytes(rows, body + k, policy.layer_token_bytes)  # its `min_budget` at step 1
            if need > budget:
                raise KVBudgetTooSmall(budget, need, "two layers of every candidate (layerwise)")
        elif isinstance(policy, HeadwisePolicy):
            need = buffer_bytes(1, 0, 1, len(blocks) * store.blocks.block_size, policy.head_token_bytes)
            if need + store.block_bytes > budget:
                raise KVBudgetTooSmall(budget, need + store.block_bytes, "one KV head of the prompt (headwise)",
                                       needed_for="the question's KV")  # fmt: skip
        elif isinstance(policy, InDevicePolicy):
            _in_device(policy, store, context, work, len(blocks) * store.block_bytes, budget, whole_budget, k)
    except KVBudgetTooSmall as error:
        return error
    return None


def _in_device(policy: InDevicePolicy, store: KVStore, context: PolicyContext, work: list[Work], question: int,
               budget: int, whole_budget: int, step_tokens: int) -> None:  # fmt: skip
    """in_device's step 1 as `prefill` and `plan` refuse it: the question's blocks in the pool, then the step."""
    what = "keeping the whole search on the device (in_device)"
    if question > store.device_capacity_bytes:
        raise KVBudgetTooSmall(whole_budget, question, what, needed_for="the question's KV")
    tails = tail_blocks(context.speculative, context.continuations)
    plan_in_device(work, question, budget, step_tokens, store.token_bytes, store.blocks.block_size, tails,
                   cascade=policy.executor.cascade, prefix_in_place=True)
