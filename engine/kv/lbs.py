"""Locality-aware beam scheduling (LBS): blocks rest on the host; a step runs group by group.

A group's KV crosses PCIe once per step (inter-token locality); groups gather candidates that
share blocks so a shared block crosses once and is read in place by every member (inter-beam,
the paper's Algorithm 1); balanced groups leave room to prefetch the next group while this
one computes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from engine.errors import KVBudgetTooSmall
from engine.kv.blocks import Tier
from engine.kv.groups import GroupExecutor
from engine.kv.policy import Group, PolicyContext, StepPlan, Work, common_prefix

SLACK_BLOCKS = 2  # a group's arena and its staged prefix each round up to whole slots


@dataclass(frozen=True)
class Switches:
    inter_beam: bool = True
    balanced_prefetch: bool = True
    prefix_order: bool = False  # order groups so consecutive ones share the most; keep the shared prefix


def footprint(work: Work, step_tokens: int, token_bytes: int) -> int:
    """Device bytes a candidate's KV needs by the end of the step."""
    return (work.tokens + step_tokens) * token_bytes


def group_bytes(members: Sequence[Work], step_tokens: int, token_bytes: int, block_size: int | None = None) -> int:
    """Device bytes of a group's working KV: rows are left-padded to the longest member.

    With `block_size` (the shared prefix is read in place), the blocks every member starts
    with are counted once and each row holds only its own tokens.
    """
    if not members:
        return 0
    longest = max(m.tokens for m in members)
    if block_size is None:
        return len(members) * (longest + step_tokens) * token_bytes
    shared = len(common_prefix([m.table for m in members]))
    prefix = min(shared * block_size, min(m.tokens for m in members))
    return (prefix + len(members) * (longest - prefix + step_tokens)) * token_bytes


def plan_lbs(
    work: Sequence[Work],
    budget: int,
    step_tokens: int,
    token_bytes: int,
    switches: Switches,
    slack: int = 0,
    block_size: int | None = None,
) -> StepPlan:
    """Groups that each fit the budget (less `slack` bytes of rounding), ordered so shared blocks travel together.

    `block_size` says the group's shared prefix is read in place (counted once); balanced
    grouping makes as many groups as greedy packing needs, of even size, and marks the
    next group's candidates that fit beside the largest group as prefetched.
    """
    if not work:
        return StepPlan("lbs", ())
    largest = max(footprint(w, step_tokens, token_bytes) for w in work)
    if largest + slack > budget:
        raise KVBudgetTooSmall(budget, largest + slack)
    budget -= slack
    shared = block_size if switches.inter_beam else None

    def fits(members: list[Work], candidate: Work) -> bool:
        return group_bytes([*members, candidate], step_tokens, token_bytes, shared) <= budget

    groups = _greedy_groups(work, fits, switches.inter_beam)
    if not switches.balanced_prefetch:
        groups = _prefix_order(groups) if switches.prefix_order else groups
        return StepPlan("lbs", tuple(Group(tuple(w.id for w in g)) for g in groups))
    size = math.ceil(len(work) / len(groups))
    groups = _greedy_groups(work, lambda members, c: len(members) < size and fits(members, c), switches.inter_beam)
    groups = _prefix_order(groups) if switches.prefix_order else groups
    biggest = max(group_bytes(g, step_tokens, token_bytes, shared) for g in groups)
    spare = (budget - biggest) // largest  # whole candidates of the next group that fit beside
    ids = [tuple(w.id for w in g) for g in groups]
    return StepPlan("lbs", (Group(ids[0]), *(Group(g, g[: min(spare, len(g))]) for g in ids[1:])))


def _greedy_groups(work: Sequence[Work], can_add, by_overlap: bool) -> list[list[Work]]:
    """The paper's Algorithm 1: seed a group, then add the candidate sharing most blocks with it.

    Without `by_overlap` candidates are taken in their given order. Ties go to the earlier
    candidate, so the plan is deterministic.
    """
    remaining = list(work)
    groups: list[list[Work]] = []
    while remaining:
        members = [remaining.pop(0)]
        blocks = set(members[0].table)
        while remaining:
            index = _best_overlap(remaining, blocks) if by_overlap else 0
            if not can_add(members, remaining[index]):
                break
            chosen = remaining.pop(index)
            members.append(chosen)
            blocks.update(chosen.table)
        groups.append(members)
    return groups


def _prefix_order(groups: list[list[Work]]) -> list[list[Work]]:
    """FlashTTS's prefix-aware order: after each group, the one sharing most of its blocks (ties: earlier)."""
    remaining, ordered = list(groups), [groups[0]] if groups else []
    remaining = remaining[1:]
    while remaining:
        blocks = {b for w in ordered[-1] for b in w.table}
        shared = [len(blocks.intersection(b for w in g for b in w.table)) for g in remaining]
        ordered.append(remaining.pop(shared.index(max(shared))))
    return ordered


def _best_overlap(remaining: Sequence[Work], blocks: set[int]) -> int:
    best, best_shared = 0, -1
    for index, w in enumerate(remaining):
        shared = len(blocks.intersection(w.table))
        if shared > best_shared:
            best, best_shared = index, shared
    return best


class LbsPolicy:
    """Blocks rest on the host; each step's groups are loaded, decoded and written back in turn."""

    name = "lbs"
    home = Tier.HOST

    def __init__(self, context: PolicyContext, switches: Switches) -> None:
        self.context, self.switches = context, switches
        self.executor = GroupExecutor(
            context.config, context.blocks, context.store, self.home, context.decode, context.step_tokens,
            share=switches.inter_beam,
        )
        self.executor.keep_prefix = switches.prefix_order

    def plan(self, work: Sequence[Work], budget: int) -> StepPlan:
        store = self.context.store
        slack = SLACK_BLOCKS * store.block_bytes
        shared = store.blocks.block_size if self.executor.cascade else None  # the prefix is read in place
        k = self.context.step_tokens
        return plan_lbs(work, budget, k, store.token_bytes, self.switches, slack, shared)

    def run_step(self, plan, live, timing, should_stop):
        return self.executor.run_step(plan.groups, live, timing, should_stop)

    def placement(self, live) -> tuple[int, int, int, int]:
        return block_placement(self.context.blocks, self.context.store, live.table)

    def tier_bytes(self) -> tuple[int, int]:
        store = self.context.store
        return store.resident_bytes(Tier.DEVICE), store.resident_bytes(Tier.HOST)


def block_placement(blocks, store, table) -> tuple[int, int, int, int]:
    """(device blocks, host blocks, device bytes, host bytes) of a table of blocks at rest."""
    on_device = sum(1 for b in table if blocks.blocks[b].on_device)
    on_host = len(table) - on_device
    return on_device, on_host, on_device * store.block_bytes, on_host * store.block_bytes
