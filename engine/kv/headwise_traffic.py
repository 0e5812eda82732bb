"""Head-wise traffic in closed form: the bytes each step moves over PCIe, from the search's shape alone.

What `HeadwisePolicy` moves (engine/kv/headwise.py) depends on its groups, and they on the shape: with
fixed-length steps every candidate of a step has the same tokens, so a group's device buffers depend only
on how many candidates it holds. Step 1's candidates share the whole prompt (its run, read in place); from
step 2 on each candidate has copied the prompt's partial last block on write, and what a group shares in
consecutive host slots is the prompt's full blocks (its own blocks lie elsewhere in the host pool).
Each of a step's `k` forwards loads the shared prefix once per group and each row's own tokens, and writes
each row's new token back: `H2D_j = (P + B (W + j)) KV_token`, `D2H_j = B KV_token`. Lookahead roll-outs
are forked from the step's children: roll-out `i` of step `s` moves what step `s + i` would.

Exact for a run whose steps run to their full length (tests/test_headwise.py draws shapes, budgets and
methods), but for what selection adds: of step 1's siblings the last to write keeps the prompt's partial
block in its run, and if the search keeps that path and its children make a group of their own (one kept
beam), they read the block in place too, a few % less than here. A lone path (one row a step) always
does, and is counted so. Plan-only runs (engine/plan_only.py) count the same loads on meta tensors.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.config import CacheConfig, SearchConfig
from engine.errors import KVBudgetTooSmall
from engine.kv.headwise import buffer_bytes, head_group_sizes, least_budget


@dataclass(frozen=True)
class KVGeometry:
    """What head-wise bytes depend on in a model: layers, KV heads and the bytes of one token's K and V."""

    num_layers: int
    num_kv_heads: int
    token_bytes: int  # K and V of one token over all layers and heads

    @property
    def head_token_bytes(self) -> int:
        return self.token_bytes // (self.num_layers * self.num_kv_heads)


@dataclass(frozen=True)
class HeadwiseTraffic:
    """Bytes over PCIe of each step (roll-outs included), or why the run would refuse its budget."""

    step_bytes: tuple[int, ...]
    refused: KVBudgetTooSmall | None = None

    @property
    def average(self) -> int:
        """A step's bytes averaged over the steps: what the plan shows as "PCIe per step"."""
        return sum(self.step_bytes) // max(1, len(self.step_bytes))


@dataclass(frozen=True)
class _Prefix:
    read: int  # tokens attention reads in place; they cross each forward
    whole: int  # tokens of the prefix's run in whole blocks: they cross instead where the budget has room


def headwise_traffic(kv: KVGeometry, prompt_tokens: int, search: SearchConfig, cache: CacheConfig, budget: int,
                     whole_bytes: int) -> HeadwiseTraffic:  # fmt: skip
    """Every step's bytes for a prompt of `prompt_tokens` (its last token is fed at step 1) under the generator's
    KV `budget`; the pool holds at most the whole search (`whole_bytes`, without cascade attention) and the policy
    plans in its whole slots (engine/kv/cache.py). Refused as the run is, in the same words: the prompt's prefill,
    or a step whose one candidate's one KV head does not fit, with the budget under which no step is refused."""
    slot, body = cache.block_size * kv.token_bytes, prompt_tokens - 1
    usable = min(budget, whole_bytes) // slot * slot
    longest = body + (search.max_steps + search.lookahead) * search.step_tokens  # the last step's columns
    floor = -(-least_budget(body, longest, cache.block_size, kv.head_token_bytes, slot) // slot) * slot
    prefill = buffer_bytes(1, 0, 1, _whole_blocks(body, cache.block_size), kv.head_token_bytes) + slot
    if prefill > usable:
        return HeadwiseTraffic((), _refused(budget, prefill, slot, floor, "one KV head of the prompt (headwise)",
                                            "the question's KV"))
    steps = []
    for step in range(1, search.max_steps + 1):
        moved = 0
        for ahead in range(search.lookahead + 1):  # the step, then its roll-outs
            tokens = body + (step + ahead - 1) * search.step_tokens  # each candidate's KV when the decode starts
            prefix = _prefix(body, tokens, search.rows_per_step, cache)
            one = _need(kv, prefix.read, 1, tokens - prefix.read + search.step_tokens, 1, cache.block_size)
            if one > usable:
                what = "one KV head of one candidate (headwise)"
                return HeadwiseTraffic(tuple(steps), _refused(budget, one, slot, floor, what))
            moved += _decode_bytes(kv, prefix, tokens, search, cache, usable)
        steps.append(moved)
    return HeadwiseTraffic(tuple(steps))


def _refused(budget: int, need: int, slot: int, floor: int, what: str, needed_for: str = "this step"
             ) -> KVBudgetTooSmall:  # fmt: skip
    """The run's refusal (engine/kv/cache.py `KVCache._refused`): the need in whole slots, and `floor` (whole
    slots) where a later step needs more."""
    need = -(-need // slot) * slot
    return KVBudgetTooSmall(budget, need, what, whole_bytes=floor if floor > need else None, needed_for=needed_for)


def _decode_bytes(kv: KVGeometry, prefix: _Prefix, tokens: int, search: SearchConfig, cache: CacheConfig,
                  budget: int) -> int:  # fmt: skip
    """One decode of the step's rows of `tokens` each, `k` forwards, group by group: the policy fills each
    group in turn with as many candidates as fit at one head."""
    rows, k, width = search.rows_per_step, search.step_tokens, tokens - prefix.read + search.step_tokens
    size = max(b for b in range(1, rows + 1) if _need(kv, prefix.read, b, width, 1, cache.block_size) <= budget)
    moved = 0
    for members in [size] * (rows // size) + [rows % size] * (rows % size > 0):
        copied = prefix.whole if _has_room_for_whole(kv, prefix, tokens, members, k, cache, budget) else prefix.read
        own = tokens - prefix.read
        moved += sum(copied + members * (own + j) for j in range(k)) + members * k  # H2D, then each new token
    return moved * kv.token_bytes


def _prefix(body: int, tokens: int, rows: int, cache: CacheConfig) -> _Prefix:
    """What a group shares in consecutive host slots: nothing without inter-beam sharing; at step 1 the whole
    prompt; later the prompt's full blocks (each candidate copied its partial last block on write), but a lone
    path (one row a step) owns that block and fills the prompt's run in place, so it reads the whole run."""
    block, run = cache.block_size, _whole_blocks(body, cache.block_size)
    if not cache.inter_beam:
        return _Prefix(0, 0)
    if tokens == body or rows == 1:
        return _Prefix(min(tokens, run), run)
    return _Prefix(body // block * block, run)


def _has_room_for_whole(kv: KVGeometry, prefix: _Prefix, tokens: int, members: int, k: int, cache: CacheConfig,
                        budget: int) -> bool:  # fmt: skip
    """Whether the group's prefix crosses with its run's unread tail: where the prefix fills its run but for
    under a block, the group's head-group size is over one head and the buffers have room for the tail."""
    if prefix.whole - prefix.read >= cache.block_size or prefix.whole == prefix.read:
        return False
    width = tokens - prefix.read + k
    heads = next(g for g in head_group_sizes(kv.num_kv_heads) if _need(kv, prefix.read, members, width, g,
                                                                       cache.block_size) <= budget)
    return heads > 1 and _need(kv, prefix.whole, members, width, heads, cache.block_size) <= budget


def _need(kv: KVGeometry, copied: int, members: int, width: int, heads: int, block: int) -> int:
    """`HeadwisePolicy.need`: the two buffers and a slot's rounding."""
    return buffer_bytes(heads, copied, members, width, kv.head_token_bytes) + block * kv.token_bytes


def _whole_blocks(tokens: int, block: int) -> int:
    return -(-tokens // block) * block
