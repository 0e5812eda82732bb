"""`in_device`: every block rests on the device; a step is one group that reads the shared prefix in place."""

from __future__ import annotations

from collections.abc import Sequence

from engine.errors import KVBudgetTooSmall
from engine.kv.blocks import Tier
from engine.kv.groups import GroupExecutor
from engine.kv.policy import (
    SLACK_BLOCKS,
    Group,
    PolicyContext,
    StepPlan,
    Work,
    block_placement,
    common_prefix,
    growth_tokens,
    tail_blocks,
)
from engine.kv.working import group_working_bytes


def plan_in_device(
    work: Sequence[Work],
    resident_bytes: int,
    budget: int,
    step_tokens: int,
    token_bytes: int,
    block_size: int,
    tails: int = 1,
    *,
    cascade: bool = False,
    prefix_in_place: bool = False,
) -> StepPlan:
    """One group; the blocks at rest, their growth this step and the working KV must fit the budget.

    A row's step and its speculation hold at most `step_tokens` together, in whole blocks, and each row
    may open or copy on write `tails` blocks besides (engine.kv.policy.growth_tokens). With `cascade` the working KV is
    what the executor's load takes (engine/kv/working.py): nothing for a prefix read in place
    (`prefix_in_place`), each parent's history once, each row's own tokens; without it every row
    holds its whole history.
    """
    growth = len(work) * growth_tokens(step_tokens, block_size, tails) * token_bytes
    slack = SLACK_BLOCKS * block_size * token_bytes
    working = group_working_bytes(work, step_tokens, token_bytes, block_size, cascade=cascade,
                                  prefix_in_place=prefix_in_place)  # fmt: skip
    need = resident_bytes + growth + working + slack
    if need > budget:
        raise KVBudgetTooSmall(budget, need, "keeping the whole search on the device (in_device)")
    return StepPlan("in_device", (Group(tuple(w.id for w in work)),))


class InDevicePolicy:
    name = "in_device"
    home = Tier.DEVICE

    def __init__(self, context: PolicyContext) -> None:
        self.context = context
        self.executor = GroupExecutor(
            context.config, context.blocks, context.store, self.home, context.decode, context.step_tokens, share=True,
            lend=context.continuations,
        )

    def plan(self, work: Sequence[Work], budget: int) -> StepPlan:
        store = self.context.store
        resident = store.resident_bytes(Tier.DEVICE)
        k = self.context.step_tokens
        tails = tail_blocks(self.context.speculative, self.context.continuations)
        prefix = common_prefix([w.table for w in work])
        in_place = store.contiguous(prefix, Tier.DEVICE) is not None  # the prompt's run: read where it rests
        return plan_in_device(work, resident, budget, k, store.token_bytes, store.blocks.block_size, tails,
                              cascade=self.executor.cascade, prefix_in_place=in_place)  # fmt: skip

    def run_step(self, plan, live, timing, should_stop):
        return self.executor.run_step(plan.groups, live, timing, should_stop)

    def placement(self, live) -> tuple[int, int, int, int]:
        return block_placement(self.context.blocks, self.context.store, live.table)

    def tier_bytes(self) -> tuple[int, int]:
        return self.context.store.resident_bytes(Tier.DEVICE), 0
