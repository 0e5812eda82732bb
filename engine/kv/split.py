"""The device KV budget split between the generator and the verifier (FlashTTS's memory split).

The verifier's part by default is what one verification group needs, computed from the verifier's
KV shape and the search's shape (no estimate from the generator's sizes):

    need = block_bytes x ( ceil(r x W / b)  +  r x ceil((k + s) / b) )
    r = min(N x M, batch size)        rows of one group (siblings verified together)
    W = P + S x (k + s) + q           arena columns at the last step: the path and the probe
    block_bytes = b x 2 x L x H_kv x D x element size

with N x M the candidates per step, S the steps (lookahead included), k the tokens of a step,
P the question's tokens in the verifier's format (`layout.prefix`), s the tokens its format adds
around a step (`layout.body` of a one-token step, that token included), q the probe's tokens,
b the verifier's block size and L, H_kv, D its layers, KV heads and head dimension. The first
term is the group's arena (every row holds the path, whole slots), the second the group's new
segments (each row's step and separator in whole blocks), which are written while the arena is in
use. A step counts as k verifier tokens in the group: a PRM on another tokenizer that reads it in
more tokens gets its group split into batches that fit. A batch of one row cannot be split, so the
automatic share also holds one row whose every step reads as many tokens as it can, k x f with f the
most tokens the verifier reads one generator token as (engine/verifiers/reading.py):

    share = max(need, row)    row = the same formula with r = 1 and k x f for k

and a budget whose half cannot hold `row` is refused before the first step, with the budget that would
(an explicit `--verifier-kv-share` is the user's: a row it cannot hold is refused when it comes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from engine.errors import KVBudgetTooSmall


@dataclass(frozen=True)
class BudgetSplit:
    generator_bytes: int
    verifier_bytes: int


def verifier_group_bytes(*, block_size: int, token_bytes: int, rows: int, batch_size: int, prefix: int,
                         per_step: int, probe: int, step_tokens: int, steps: int) -> int:
    """`need` of the module docstring: device bytes of one verification group at the last step."""
    r = min(rows, batch_size)
    width = prefix + steps * (step_tokens + per_step) + probe
    slots = max(1, math.ceil(r * width / block_size)) + r * max(1, math.ceil((step_tokens + per_step) / block_size))
    return slots * block_size * token_bytes


@dataclass(frozen=True)
class VerifierShape:
    """What sizes the verifier's share: its KV bytes a token, its block and batch size, the tokens its format
    adds to a path (P, s and q above, counted from its layout: engine.verifiers.path_kv.format_tokens) and f,
    the most tokens it reads one generator token as. The engine's verifier and the plan both size from it."""

    token_bytes: int
    prefix: int
    per_step: int
    probe: int
    reads_per_token: int = 1
    block_size: int = 16  # the verifier's defaults (engine.verifiers.kv_pools, path_kv): what a plan sizes with
    batch_size: int = 8

    def group_bytes(self, rows: int, step_tokens: int, steps: int) -> int:
        """`need`: one group of up to `rows` siblings at the last step, each step read in `step_tokens`."""
        return verifier_group_bytes(block_size=self.block_size, token_bytes=self.token_bytes, rows=rows,
                                    batch_size=self.batch_size, prefix=self.prefix, per_step=self.per_step,
                                    probe=self.probe, step_tokens=step_tokens, steps=steps)

    def row_bytes(self, step_tokens: int, steps: int) -> int:
        """`row`: one path at the last step, each step read in as many tokens as it can be."""
        return self.group_bytes(1, step_tokens * self.reads_per_token, steps)

    def share_bytes(self, rows: int, step_tokens: int, steps: int) -> int:
        """`share`: the automatic share, max(need, row), so that a batch of one always fits it."""
        return max(self.group_bytes(rows, step_tokens, steps), self.row_bytes(step_tokens, steps))

    def path_widths(self, step_tokens: int, steps: int) -> list[int]:
        """Columns of one path's arena as the run asks its share for them, each step read in `step_tokens`:
        the question alone, then the path and the probe at each step (engine.verifiers.kv_pools refuses a
        share that cannot hold one, at the first that does not fit)."""
        return [self.prefix, *(self.prefix + t * (step_tokens + self.per_step) + self.probe
                               for t in range(1, steps + 1))]

    def arena_bytes(self, rows: int, width: int) -> int:
        """Device bytes of an arena of `rows` x `width` tokens, in whole blocks (kv_pools' `arena_slots`)."""
        return max(1, math.ceil(rows * width / self.block_size)) * self.block_size * self.token_bytes


def share_too_small(share_bytes: int, rows: int, width: int, need_bytes: int) -> KVBudgetTooSmall:
    """The refusal of a verifier's share that cannot hold an arena of `rows` x `width` tokens (`need_bytes`):
    the run's words (engine.verifiers.kv_pools) and the plan's alike."""
    error = KVBudgetTooSmall(share_bytes, need_bytes, f"the verifier's batch of {rows} x {width} tokens",
                             budget_name="the verifier's KV share",
                             smallest="the smallest share that holds it")  # a share, not the KV budget
    error.hint = ("Raise --verifier-kv-share or the KV budget, shorten the steps, or use a smaller verifier (a "
                  "smaller PRM; with self-judge, a smaller model, which is its own verifier).")
    return error


def split_budget(total_bytes: int, share: float | None, verifier_batch_bytes: int, verifier_row_bytes: int = 0
                 ) -> BudgetSplit:  # fmt: skip
    """Divide `total_bytes` of device KV between the two models.

    Decoding (the generator) is memory-bound: every extra byte of device KV saves PCIe traffic.
    Verifying (prefill of a step over a cached path) is compute-bound: it needs room for one
    group, and more buys little. So by default the verifier gets what one verification group
    needs (`verifier_batch_bytes`, the formula above, at most half the budget) and the generator
    the rest; `share` sets the verifier's part instead. A verifier that keeps no KV (0) gets nothing.
    `verifier_row_bytes` (`row` above, at most `verifier_batch_bytes`): the least default part a run can go
    on with; a total whose half is less is refused here, before the first step.
    """
    if verifier_batch_bytes <= 0:
        return BudgetSplit(total_bytes, 0)
    if share is None and verifier_row_bytes > total_bytes // 2:
        error = KVBudgetTooSmall(total_bytes, 2 * verifier_row_bytes,
                                 "the verifier's longest path in its half (its automatic share)")
        error.hint = ("Raise the KV budget, set the verifier's part with --verifier-kv-share, shorten the steps "
                      "or the search, or use a smaller verifier (a smaller PRM; with self-judge, a smaller model, "
                      "which is its own verifier).")
        raise error
    verifier = round(total_bytes * share) if share is not None else min(verifier_batch_bytes, total_bytes // 2)
    return BudgetSplit(total_bytes - verifier, verifier)


def total_for(generator_bytes: int, share: float | None, verifier_batch_bytes: int, verifier_row_bytes: int = 0
              ) -> int:  # fmt: skip
    """The smallest KV budget whose generator part (`split_budget`, the verifier's part as set) holds
    `generator_bytes` while the verifier's part still holds its longest path (`verifier_row_bytes`): what to type as
    --kv-budget when the generator's part was refused, so that the raise is not refused for the verifier's part."""

    def enough(total: int) -> bool:
        try:
            split = split_budget(total, share, verifier_batch_bytes, verifier_row_bytes)
        except KVBudgetTooSmall:  # the verifier's automatic half cannot hold its path at this total
            return False
        return split.generator_bytes >= generator_bytes and split.verifier_bytes >= verifier_row_bytes

    low, high = generator_bytes, 2 * generator_bytes + verifier_batch_bytes + 2 * verifier_row_bytes + 1
    if share is not None and 0 < share < 1:
        high = max(high, math.ceil(generator_bytes / (1 - share)) + 2, math.ceil(verifier_row_bytes / share) + 2)
    while low < high:  # the generator's part grows with the total
        middle = (low + high) // 2
        low, high = (low, middle) if enough(middle) else (middle + 1, high)
    return low


def emulated_budget(whole: int, verifier_bytes: int, share: float | None) -> int:
    """The automatic KV budget where no free device memory can be read (the emulated device): room for the
    generator's `whole` search and the verifier's batch, in the shares `split_budget` gives them."""
    if verifier_bytes <= 0:
        return whole
    if share is None:  # the verifier's batch, at most half the total
        return max(whole + verifier_bytes, 2 * verifier_bytes)
    return max(whole + verifier_bytes, math.ceil(whole / (1 - share)), math.ceil(verifier_bytes / share))
