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
    the policy's terms; None where it fits. lbs plans it as it will, roll-outs included (`first_step_work`);
    layer-wise needs two layers of every row; head-wise one KV head of the prompt (what its `prefill` refuses
    before reading it); in_device the question's blocks in the pool, then the step."""
    decodes = first_step_work(search, prompt_tokens, store.blocks.block_size)
    k, rows = search.step_tokens, search.rows_per_step
    try:
        if isinstance(policy, LbsPolicy):
            for work in decodes:
                policy.plan(work, budget)
        elif isinstance(policy, LayerwisePolicy):
            need = staging_bytes(rows, decodes[-1][0].tokens + k, policy.layer_token_bytes)  # `min_budget`
            if need > budget:
                raise KVBudgetTooSmall(budget, need, "two layers of every candidate (layerwise)")
        elif isinstance(policy, HeadwisePolicy):
            need = buffer_bytes(1, 0, 1, len(decodes[0][0].table) * store.blocks.block_size, policy.head_token_bytes)
            if need + store.block_bytes > budget:
                raise KVBudgetTooSmall(budget, need + store.block_bytes, "one KV head of the prompt (headwise)",
                                       needed_for="the question's KV")  # fmt: skip
        elif isinstance(policy, InDevicePolicy):
            question = len(decodes[0][0].table) * store.block_bytes
            _in_device(policy, store, context, decodes[0], question, budget, whole_budget, k)
    except KVBudgetTooSmall as error:
        return error
    return None


def first_step_work(search: SearchConfig, prompt_tokens: int, block_size: int) -> list[list[Work]]:
    """Step 1's decodes as the search runs them: the prompt's children, each holding the prompt's blocks; with
    `lookahead` K and steps cut by length only, then the deepest roll-out: a row per child at K steps past it,
    the prompt's whole blocks shared, the rest its own (engine/methods/lookahead.py). A step delimiter may end a
    child's step at any token, so its roll-out's length is known only once the step is written: then the
    children alone are planned, and a budget too small for the roll-outs is refused at them."""
    body, rows = prompt_tokens - 1, search.rows_per_step
    prompt = tuple(range(-(-body // block_size)))
    decodes = [[Work(PROMPT_ID + 1 + row, prompt, body, PROMPT_ID) for row in range(rows)]]
    if search.lookahead and search.step_delimiter is None:
        tokens, shared = body + search.step_tokens * search.lookahead, body // block_size
        own = -(-tokens // block_size) - shared  # each row's blocks past the prompt's whole ones
        first = len(prompt)
        decodes.append([Work(PROMPT_ID + 1 + rows + row,
                             prompt[:shared] + tuple(range(first + row * own, first + (row + 1) * own)), tokens,
                             PROMPT_ID + 1 + row) for row in range(rows)])  # fmt: skip
    return decodes


def _in_device(policy: InDevicePolicy, store: KVStore, context: PolicyContext, work: list[Work], question: int,
               budget: int, whole_budget: int, step_tokens: int) -> None:  # fmt: skip
    """in_device's step 1 as `prefill` and `plan` refuse it: the question's blocks in the pool, then the step."""
    what = "keeping the whole search on the device (in_device)"
    if question > store.device_capacity_bytes:
        raise KVBudgetTooSmall(whole_budget, question, what, needed_for="the question's KV")
    tails = tail_blocks(context.speculative, context.continuations)
    plan_in_device(work, question, budget, step_tokens, store.token_bytes, store.blocks.block_size, tails,
                   cascade=policy.executor.cascade, prefix_in_place=True)
