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
from functools import partial

from engine.errors import KVBudgetTooSmall
from engine.kv.blocks import Tier
from engine.kv.groups import GroupExecutor
from engine.kv.policy import SLACK_BLOCKS, Group, PolicyContext, StepPlan, Work, block_placement
from engine.kv.working import group_shape, group_working_bytes


@dataclass(frozen=True)
class Switches:
    inter_beam: bool = True
    balanced_prefetch: bool = True
    prefix_order: bool = False  # order groups so consecutive ones share the most; keep the shared prefix


def footprint(work: Work, step_tokens: int, token_bytes: int) -> int:
    """Device bytes a candidate's KV needs by the end of the step."""
    return (work.tokens + step_tokens) * token_bytes


def group_bytes(
    members: Sequence[Work], step_tokens: int, token_bytes: int, block_size: int | None = None, prefix_floor: int = 0
) -> int:
    """Device bytes of a group's working KV.

    Without `block_size` (no cascade attention) each row holds its whole history, left-padded to the
    longest member. With it, exactly the slots the executor's cascade load takes (engine/kv/working.py):
    the shared prefix staged once (at least `prefix_floor` tokens), each family's history once, and
    each row's own tokens.
    """
    if not members:
        return 0
    if block_size is None:
        return len(members) * (max(m.tokens for m in members) + step_tokens) * token_bytes
    return group_working_bytes(members, step_tokens, token_bytes, block_size, cascade=True, prefix_floor=prefix_floor)


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

    `block_size` says the executor loads groups with cascade attention: with inter-beam sharing a
    group is counted as the slots that load takes (its prefix staged once, a family's history once).
    With prefix order a staged prefix is kept across groups, sized for the step's longest shared
    prefix, so every group counts its prefix at least that long (planned again until it holds).
    Balanced grouping makes as many groups as greedy packing needs, of even size: the room a group leaves
    is for the next one. What of the next group loads there while a group computes, the executor finds at
    run time and its GroupDone says (engine/kv/groups.py): no planned group is marked prefetched.
    """
    if not work:
        return StepPlan("lbs", ())
    shared = block_size if switches.inter_beam else None
    largest = max(footprint(w, step_tokens, token_bytes) for w in work)
    alone = max(group_bytes([w], step_tokens, token_bytes, shared) for w in work) if shared else largest
    if alone + slack > budget:
        raise KVBudgetTooSmall(budget, alone + slack)
    budget -= slack
    floor = 0
    while True:
        need = partial(group_bytes, step_tokens=step_tokens, token_bytes=token_bytes, block_size=shared,
                       prefix_floor=floor)  # fmt: skip
        groups = _fitting_groups(work, budget, need, switches)
        kept = _kept_prefix(groups, shared, switches)
        if kept <= floor:  # floor only grows, up to the longest candidate: this ends
            break
        floor = kept
    return StepPlan("lbs", tuple(Group(tuple(w.id for w in g)) for g in groups))


def _fitting_groups(work: Sequence[Work], budget: int, need, switches: Switches) -> list[list[Work]]:
    """Greedy groups of at most `budget` bytes by `need`; balanced, as many of even size; then in prefix order."""

    def fits(members: list[Work], candidate: Work) -> bool:
        return need([*members, candidate]) <= budget

    groups = _greedy_groups(work, fits, switches.inter_beam)
    if switches.balanced_prefetch:
        size = math.ceil(len(work) / len(groups))
        groups = _greedy_groups(work, lambda members, c: len(members) < size and fits(members, c), switches.inter_beam)
    return _prefix_order(groups) if switches.prefix_order else groups


def _kept_prefix(groups: list[list[Work]], block_size: int | None, switches: Switches) -> int:
    """Tokens of the staged prefix that prefix order keeps across groups (engine/kv/kept_prefix.py `PrefixKeeper.load`):
    sized for the longest shared prefix of the step's groups; 0 when none is kept."""
    if block_size is None or not switches.prefix_order:
        return 0
    return max(group_shape(g, block_size, cascade=True).prefix for g in groups)


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
            share=switches.inter_beam, lend=context.continuations,
        )
        self.executor.prefixes.keep = switches.prefix_order
        self.executor.prefetch = switches.balanced_prefetch

    def plan(self, work: Sequence[Work], budget: int) -> StepPlan:
        store = self.context.store
        cascade = self.executor.cascade  # groups are counted in the whole slots their load takes: no slack
        slack = 0 if cascade else SLACK_BLOCKS * store.block_bytes
        shared = store.blocks.block_size if cascade else None
        k = self.context.step_tokens
        return plan_lbs(work, budget, k, store.token_bytes, self.switches, slack, shared)

    def run_step(self, plan, live, timing, should_stop):
        return self.executor.run_step(plan.groups, live, timing, should_stop)

    def placement(self, live) -> tuple[int, int, int, int]:
        return block_placement(self.context.blocks, self.context.store, live.table)

    def tier_bytes(self) -> tuple[int, int]:
        store = self.context.store
        return store.resident_bytes(Tier.DEVICE), store.resident_bytes(Tier.HOST)
