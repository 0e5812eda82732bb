"""KV policies: turn the step's candidates and the device budget into an ordered plan of groups.

`in_device` keeps every block on the device. `lbs` (locality-aware beam scheduling) keeps
blocks on the host and runs the step group by group: a group's KV crosses PCIe once per
step (inter-token locality), groups gather candidates that share blocks so a shared block
crosses once (inter-beam, the paper's Algorithm 1), and balanced groups leave room to
prefetch the next group while this one computes. `layerwise` is the token-by-token
baseline and is planned in `engine.kv.layerwise`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from engine.errors import KVBudgetTooSmall


@dataclass(frozen=True)
class Work:
    """What the scheduler needs to know of one candidate: its blocks and KV length at step start."""

    id: int
    table: tuple[int, ...]
    tokens: int


@dataclass(frozen=True)
class Group:
    candidates: tuple[int, ...]
    prefetched: tuple[int, ...] = ()  # of this group, copied while the previous group computed


@dataclass(frozen=True)
class StepPlan:
    policy: str
    groups: tuple[Group, ...]


@dataclass(frozen=True)
class Switches:
    inter_beam: bool = True
    balanced_prefetch: bool = True


def footprint(work: Work, step_tokens: int, token_bytes: int) -> int:
    """Device bytes a candidate's KV needs by the end of the step."""
    return (work.tokens + step_tokens) * token_bytes


def group_bytes(members: Sequence[Work], step_tokens: int, token_bytes: int) -> int:
    """Device bytes of a group's working KV: rows are left-padded to the longest member."""
    if not members:
        return 0
    return len(members) * footprint(max(members, key=lambda w: w.tokens), step_tokens, token_bytes)


def plan_in_device(
    work: Sequence[Work], resident_bytes: int, budget: int, step_tokens: int, token_bytes: int, block_size: int
) -> StepPlan:
    """One group; the blocks at rest, their growth this step and the working KV must fit the budget."""
    growth = len(work) * (step_tokens + block_size) * token_bytes  # new tokens, each row may open a block
    need = resident_bytes + growth + group_bytes(work, step_tokens, token_bytes)
    if need > budget:
        raise KVBudgetTooSmall(budget, need, "keeping the whole search on the device (in_device)")
    return StepPlan("in_device", (Group(tuple(w.id for w in work)),))


def plan_lbs(work: Sequence[Work], budget: int, step_tokens: int, token_bytes: int, switches: Switches) -> StepPlan:
    """Groups that each fit the budget, ordered so shared blocks travel together."""
    if not work:
        return StepPlan("lbs", ())
    largest = max(footprint(w, step_tokens, token_bytes) for w in work)
    if largest > budget:
        raise KVBudgetTooSmall(budget, largest)
    if switches.balanced_prefetch:
        per_group = budget // largest
        rounds = math.ceil(len(work) / per_group)
        size = math.ceil(len(work) / rounds)
        groups = _greedy_groups(work, lambda members, _: len(members) < size, switches.inter_beam)
        spare = (budget - size * largest) // largest  # whole candidates of the next group that fit beside
        planned = [Group(groups[0])]
        planned += [Group(g, g[: min(spare, len(g))]) for g in groups[1:]]
        return StepPlan("lbs", tuple(planned))

    def fits(members: list[Work], candidate: Work) -> bool:
        return group_bytes([*members, candidate], step_tokens, token_bytes) <= budget

    groups = _greedy_groups(work, fits, switches.inter_beam)
    return StepPlan("lbs", tuple(Group(g) for g in groups))


def _greedy_groups(work: Sequence[Work], can_add, by_overlap: bool) -> list[tuple[int, ...]]:
    """The paper's Algorithm 1: seed a group, then add the candidate sharing most blocks with it.

    Without `by_overlap` candidates are taken in their given order. Ties go to the earlier
    candidate, so the plan is deterministic.
    """
    remaining = list(work)
    groups: list[tuple[int, ...]] = []
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
        groups.append(tuple(m.id for m in members))
    return groups


def _best_overlap(remaining: Sequence[Work], blocks: set[int]) -> int:
    best, best_shared = 0, -1
    for index, w in enumerate(remaining):
        shared = len(blocks.intersection(w.table))
        if shared > best_shared:
            best, best_shared = index, shared
    return best
