"""What every KV policy shares: the `Policy` protocol, the plan of a step, and the decode callable.

A policy plans a step from the live candidates and the budget (`plan`), runs that plan
through the decode callable it was given (`run_step`, one `GroupDone` per group, each a
cancellation point), and reports where each candidate's KV is (`placement`, `tier_bytes`).
Policies never import the runner or the search: the search hands the KV cache a `Decode`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from engine.kv.blocks import BlockManager, Tier
from engine.kv.pool import PoolExhausted

SLACK_BLOCKS = 2  # rounding to whole slots a figure in tokens leaves out (lbs without cascade, in_device's growth)


@dataclass
class Ahead:
    """Speculative KV kept for one of a candidate's children: the candidate's blocks, then the speculated tokens."""

    table: list[int]
    pending: int  # the last speculated token (its KV does not exist yet)
    tokens: tuple[int, ...]  # the speculated tokens: the start of the child's step


@dataclass
class Live:
    """A candidate whose KV is in blocks: what a step needs to continue it."""

    id: int
    table: list[int]
    pending: int  # the token to feed first: its KV does not exist yet
    generator: Any  # the candidate's random stream (engine.rng), passed through to decoding
    source: int | None = None  # the candidate it was forked from (the prompt's id for the first step)
    prefix: tuple[int, ...] = ()  # this step's tokens already made (speculatively, by its parent's row)
    ahead: dict[int, Ahead] = field(default_factory=dict)  # child index -> speculative KV, until adopted or freed
    continuations: int = 1  # most children whose steps its row speculates (FlashTTS's M_i; the search sets it)


@dataclass(frozen=True)
class Work:
    """What a planner needs to know of one candidate: its blocks, KV length at step start, and its family."""

    id: int
    table: tuple[int, ...]
    tokens: int
    source: int | None = None  # the candidate it was forked from (`Live.source`): its siblings share that history


def work_of(live: Live, blocks: BlockManager) -> Work:
    """What the planners read of a live candidate: its table, its KV length and its source."""
    return Work(live.id, tuple(live.table), blocks.num_tokens(live.table), live.source)


@dataclass(frozen=True)
class Group:
    candidates: tuple[int, ...]
    prefetched: tuple[int, ...] = ()  # of this group, copied while the previous group computed


@dataclass(frozen=True)
class StepPlan:
    policy: str
    groups: tuple[Group, ...]


@dataclass
class StepTiming:
    compute_seconds: float = 0.0
    decode_seconds: float = 0.0  # host time inside the policy's step (loads, waits, decode, write-back, last sync)
    modelled_stall_seconds: float = 0.0
    peak_device_bytes: int = 0  # the device pool's high-water mark during the step
    idle_row_slots: int = 0  # row x forward slots spent on rows whose step had ended (stragglers' waste)
    speculative_tokens: int = 0  # tokens rows made for their children in slots they would have idled
    speculative_runs: int = 0  # children's steps started speculatively (one run per child)
    speculative_lent_runs: int = 0  # of them, decoded in other candidates' rows (lent: engine/kv/lending.py)
    forwards: int = 0  # forward calls the step's groups needed (each group's longest row, summed)
    group_of: dict[int, int] = field(default_factory=dict)
    retries: list[tuple[tuple[int, ...], str]] = field(default_factory=list)  # (group split, why)


def tail_blocks(speculative: bool, continuations: bool) -> int:
    """Blocks a row may open or copy on write in a step, beyond its tokens: its step's tail; with
    speculation one for its first child's run (which continues the row's own tail); with more
    continuations two for each extra run a group may start (one per row: engine/speculative_runs.start_runs),
    each a fork of the row's tail."""
    return 1 + (1 if speculative else 0) + (2 if speculative and continuations else 0)


def growth_tokens(step_tokens: int, block_size: int, tails: int) -> int:
    """Tokens of whole blocks one row may take in a step: its `step_tokens` new tokens (step and speculation
    together) fill at most `ceil(step_tokens / block_size)` fresh blocks, besides the `tails` it opens or
    copies on write (`tail_blocks`)."""
    return (-(-step_tokens // block_size) + tails) * block_size


OUT_OF_MEMORY = (torch.OutOfMemoryError, PoolExhausted)  # a group that does not fit: split it and retry


def split_for_retry(group: Group, error: BaseException, timing: StepTiming) -> list[Group]:
    """The two halves of a group that ran out of device memory (CUDA, or a pool the budget re-read
    shrank), recorded in `timing.retries`; a single candidate that cannot fit re-raises `error`."""
    if len(group.candidates) == 1:
        raise error
    timing.retries.append((group.candidates, f"{type(error).__name__}: {error}"))
    middle = len(group.candidates) // 2
    return [Group(group.candidates[:middle]), Group(group.candidates[middle:])]


@dataclass(frozen=True)
class GroupDone:
    index: int
    group: Group
    results: dict[int, Any]  # candidate id -> the decode's row result (`fed`, `sampled`, ...)


class Decode(Protocol):
    """Decodes rows for one step over `cache`; the search binds the model and the step rules.

    `mask` `[B, T]` marks real (1) and padding (0) columns of the cache, or is None when no row
    is padded; `forward` is passed to every model call (e.g. `kv_prefix=`); `lend` lets rows decode
    other rows' candidates' children (engine.speculative_runs.Lend, engine/kv/lending.py). Returns each row's
    result and the seconds spent in forward calls.
    """

    def __call__(
        self,
        cache: Any,
        mask: torch.Tensor | None,
        rows: Sequence[Any],
        should_stop: Callable[[], bool],
        before_forward: Callable[[], None] | None = None,
        lend: Callable[[int, int, int, int], bool] | None = None,
        **forward: Any,
    ) -> tuple[list[Any], float]: ...


@dataclass(frozen=True)
class PolicyContext:
    """What a policy is built from: the model's config (for its cache), blocks, store, decode, step length."""

    config: Any
    blocks: Any  # engine.kv.blocks.BlockManager
    store: Any  # engine.kv.store.KVStore
    decode: Decode
    step_tokens: int
    speculative: bool = False  # rows keep speculated KV for their first child (one more tail block each)
    continuations: bool = False  # rows may speculate more children: a group's extra runs (one per row) copy tails


class Policy(Protocol):
    name: str
    home: Tier  # where blocks rest between steps

    def plan(self, work: Sequence[Work], budget: int) -> StepPlan: ...

    def run_step(
        self, plan: StepPlan, live: dict[int, Live], timing: StepTiming, should_stop: Callable[[], bool]
    ) -> Iterator[GroupDone]: ...

    def placement(self, live: Live) -> tuple[int, int, int, int]:
        """(device blocks, host blocks, device bytes, host bytes) of one candidate's KV."""
        ...

    def tier_bytes(self) -> tuple[int, int]:
        """(device, host) bytes of KV at rest."""
        ...


def idle_slots(results: Sequence[Any]) -> int:
    """Row slots a batch spent on rows already done: every row rides every forward until the longest ends.

    Slots a done row filled with speculation (`aheads`) are not idle.
    """
    forwards = max((len(r.fed) for r in results), default=0)
    return len(results) * forwards - sum(len(r.fed) + speculated(r) for r in results)


def group_done(index: int, group: Group, results: Sequence[Any], timing: StepTiming) -> GroupDone:
    """Note a decoded group in the step's timing (idle and speculated slots, each member's group) and
    name its results by candidate."""
    timing.idle_row_slots += idle_slots(results)
    timing.speculative_tokens += sum(speculated(r) for r in results)
    timing.speculative_runs += sum(len(getattr(r, "aheads", ())) for r in results)
    timing.speculative_lent_runs += sum(run.row >= 0 for r in results for run in getattr(r, "aheads", ()))
    for c in group.candidates:
        timing.group_of[c] = index
    return GroupDone(index, group, dict(zip(group.candidates, results, strict=True)))


def speculated(result: Any) -> int:
    """Tokens a row made for its children after its own step ended."""
    return sum(len(run.fed) for run in getattr(result, "aheads", ()))


def common_prefix(tables: Sequence[Sequence[int]]) -> list[int]:
    """The leading block ids every table shares."""
    if not tables:
        return []
    shortest = min(len(t) for t in tables)
    prefix = []
    for i in range(shortest):
        block = tables[0][i]
        if any(t[i] != block for t in tables):
            break
        prefix.append(block)
    return prefix


def block_placement(blocks, store, table) -> tuple[int, int, int, int]:
    """(device blocks, host blocks, device bytes, host bytes) of a table of blocks at rest."""
    on_device = sum(1 for b in table if blocks.blocks[b].on_device)
    on_host = len(table) - on_device
    return on_device, on_host, on_device * store.block_bytes, on_host * store.block_bytes
