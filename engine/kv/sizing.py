"""What a search's KV needs: its bounds per policy (in_device's whole search, lbs's one candidate, layer-wise's
pool), the budgets no step exceeds, and `auto`'s pick among the policies by them."""

from __future__ import annotations

import dataclasses

from engine.candidate import path_room
from engine.config import CacheConfig, SearchConfig
from engine.kv.headwise import least_budget
from engine.kv.layer_budget import every_layer_bytes, pool_overhead, staging_bytes
from engine.kv.policy import SLACK_BLOCKS, growth_tokens, tail_blocks
from engine.models import KVShape


def within_context(search: SearchConfig, prompt_tokens: int, context_length: int) -> SearchConfig:
    """The search as its paths can grow: a path ends at the model's context (engine/step_buffers.py
    `fills_context`), so steps past it hold no KV. Its bounds count only these (`--max-steps 1000` on an
    8,192-token model was 20.7 GB where its paths hold 3 GB, and `auto` offloaded a search that fit)."""
    room = max(path_room(prompt_tokens, context_length), 1)
    return dataclasses.replace(search, max_steps=min(search.max_steps, -(-room // search.step_tokens)))


def longest_tokens(prompt_tokens: int, search: SearchConfig) -> int:
    """The most tokens one row's KV reaches: the prompt, every step and a lookahead roll-out's steps."""
    return prompt_tokens + (search.max_steps + search.lookahead) * search.step_tokens


def whole_search_bytes(
    prompt_tokens: int,
    search: SearchConfig,
    token_bytes: int,
    block_size: int,
    tails: int = 1,
    *,
    cascade: bool = False,
    speculative: bool = False,
    steps_cut: bool = False,
) -> int:
    """Upper bound of in_device's peak: the KV at rest at any moment of the search, and a step's working KV.

    At rest during step `t`: the prompt's blocks; the paths step `t - 1` kept (pruned candidates are
    freed at selection), each with at most `t - 1` steps' blocks of its own; and the growth of step `t`
    of every candidate and of each roll-out (lookahead). A row's step and its speculation together hold
    at most a step's tokens, in whole blocks; besides, each candidate and step opens or copies on write
    up to `tails` blocks (engine.kv.policy.growth_tokens). `3 x block_size` covers the prompt's partial
    block, a run kept for one block still in use, and the plan's slack. The working KV is
    `working_tokens`'s.
    """
    n, steps, k = search.rows_per_step, search.max_steps, search.step_tokens
    per_step = growth_tokens(k, block_size, tails)
    kept = search.kept_per_step * (steps - 1) * per_step  # kept paths' blocks rest until their children fork them
    at_rest = prompt_tokens + 3 * block_size + kept + n * (1 + search.lookahead) * per_step
    working = working_tokens(prompt_tokens, search, block_size, cascade, speculative, steps_cut=steps_cut)
    return (at_rest + working) * token_bytes


def working_tokens(prompt_tokens: int, search: SearchConfig, block_size: int, cascade: bool, speculative: bool,
                   *, steps_cut: bool = False) -> int:  # fmt: skip
    """Tokens of in_device's working KV in any step (engine/kv/working.py), the largest step first.

    A row's history at a step's start is under `prompt + steps x k` tokens (its speculated start
    included); a lookahead roll-out's, `(lookahead - 1) x k` longer. Without cascade attention each of
    the `n` rows holds its whole history plus the step. With it the prefix every row shares is read
    in place or staged once (at most a row's history), the rows forked from one kept path (a family)
    read the history after the prompt's full blocks once from the parent level, and a row holds only
    what it no longer shares with its siblings: nothing, or with speculation a copied partial block and
    its speculated start (under a block and a step). A method whose paths have one child each
    (best-of-N, greedy) makes every row a family of its own, and so do lookahead's roll-outs: each a
    family's history and no own tokens. With `G` families the prefix `p` (at least the prompt's full
    blocks, `s`) and the families' histories after it take at most `p + G x (h - p) <= h + (G - 1) x
    (h - s)` for histories of at most `h`, staged or not. One slot of rounding for each of the load's
    two runs.

    The prefix is staged (the prompt copied beside its blocks at rest) only where the rows' common prefix
    passes the prompt's run of slots: from step 2 on (a path expanded alone, its siblings pruned or finished;
    every kept path of one family). In step 1 every row starts with the prompt's whole table, read in place,
    so a one-step search without roll-outs counts no `s` here (a long question's plan was twice its need).
    `steps_cut`: `within_context` cut the steps to the context's room, where a step ended early by the
    delimiter may leave room for another: one step is then not the most a row takes.
    """
    n, k = search.rows_per_step, search.step_tokens
    decoded = prompt_tokens + search.max_steps * k  # a sampled step's rows
    longest = decoded + max(search.lookahead - 1, 0) * k  # a roll-out's rows
    if not cascade:
        return n * (longest + k)
    shared = prompt_tokens // block_size * block_size  # every row's table starts with these blocks
    own = min(decoded, block_size + k) if speculative and search.children_per_path > 1 else 0
    sampled = decoded + (min(search.kept_per_step, n) - 1) * (decoded - shared) + n * (own + k)
    rolled = longest + (n - 1) * (longest - shared) + n * k if search.lookahead else 0
    one_step = search.max_steps == 1 and not search.lookahead and not steps_cut
    in_place = shared if one_step else 0  # step 1 stages no prefix
    return max(sampled, rolled) - in_place + 2 * block_size


def search_kv_bytes(prompt_tokens: int, search: SearchConfig, cache: CacheConfig, token_bytes: int, *,
                    cascade: bool, steps_cut: bool = False) -> int:  # fmt: skip
    """`whole_search_bytes` under these cache settings (speculation's blocks and tokens counted); `cascade`:
    the model attends through Beamwise's cascade attention (engine.kv.attention.uses_cascade); `steps_cut`:
    `search` is `within_context`'s with fewer steps than asked."""
    tails = tail_blocks(cache.speculative, cache.speculative_continuations != 1)
    return whole_search_bytes(prompt_tokens, search, token_bytes, cache.block_size, tails, cascade=cascade,
                              speculative=cache.speculative, steps_cut=steps_cut)  # fmt: skip


def one_candidate_bytes(prompt_tokens: int, search: SearchConfig, token_bytes: int, block_size: int) -> int:
    """Upper bound of what lbs needs for its largest group of one: a candidate's KV at the last step's end."""
    return (longest_tokens(prompt_tokens, search) + SLACK_BLOCKS * block_size) * token_bytes


def policy_whole_bytes(policy: str, whole: int, prompt_tokens: int, search: SearchConfig, token_bytes: int,
                       num_layers: int) -> int:  # fmt: skip
    """What the whole search needs under `policy`, given `whole`, in_device's bound (`search_kv_bytes`): the
    automatic budget where no free memory can be read. Layer-wise's rows hold their whole history, the
    prompt too, in every layer (and never less than its two staging layers)."""
    if policy != "layerwise":
        return whole
    longest, layer_token_bytes = longest_tokens(prompt_tokens, search), token_bytes // num_layers
    return max(every_layer_bytes(search.candidates_per_step, longest, num_layers, layer_token_bytes),
               staging_bytes(search.rows_per_step, longest, layer_token_bytes))


def auto_policy(whole: int, one: int, budget: int) -> str:
    """in_device when the whole search fits, lbs when one candidate does, else headwise (HeadInfer)."""
    if whole <= budget:
        return "in_device"
    return "lbs" if one <= budget else "headwise"


def refusal_floors(prompt_tokens: int, search: SearchConfig, shape: KVShape, block_size: int, whole: int, one: int
                   ) -> dict[str, int]:  # fmt: skip
    """Per policy, a budget no step of the search exceeds (a refusal names it): `whole` for in_device, `one`
    (its largest group of one) for lbs, layer-wise's min_budget and head-wise's need at the last step."""
    longest = longest_tokens(prompt_tokens, search)
    layer_floor = staging_bytes(search.rows_per_step, longest, shape.layer_token_bytes())
    head_token_bytes = shape.layer_token_bytes() // shape.num_kv_heads
    head_floor = least_budget(prompt_tokens - 1, longest - 1, block_size, head_token_bytes,
                              shape.token_bytes() * block_size)  # fmt: skip
    return {"in_device": whole, "lbs": one, "layerwise": layer_floor, "headwise": head_floor}


def layerwise_pool(budget: int, prompt_tokens: int, search: SearchConfig, shape: KVShape, block_size: int, *,
                   from_free_memory: bool) -> tuple[int, int]:  # fmt: skip
    """Layer-wise's device pool and the overhead of its buffers in it: its budget's layers (at most every layer of
    every row at the longest length) and the overhead of buffers sized for a step's end (`pool_overhead`). A
    budget read from free memory (less the margin) holds the overhead too, so the pool fits beside the margin."""
    rows, layer_token_bytes = search.candidates_per_step, shape.layer_token_bytes()
    longest = longest_tokens(prompt_tokens, search)
    block_bytes = shape.token_bytes() * block_size
    budget = min(budget, every_layer_bytes(rows, longest, shape.num_layers, layer_token_bytes))
    overhead = pool_overhead(
        budget, rows, prompt_tokens - 1, longest, search.step_tokens, shape.num_layers, layer_token_bytes, block_bytes,
    )  # fmt: skip
    if from_free_memory:  # the smaller budget left needs less overhead than this: it fits
        budget = max(0, budget - overhead)
    return -(-(budget + overhead) // block_bytes) * block_bytes, overhead  # whole slots: all of it is there
