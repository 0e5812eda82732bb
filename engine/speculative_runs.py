"""A decode step's speculative runs (FlashTTS): rows whose step is over decode their candidates' children.

The decode loop (engine/runner.py) records each row's tokens; once a row's step ends, what it samples
on is its candidate's first child's run, and at a host sync it may start the next child's run, or be
lent to a better-ranked candidate's (engine/kv/lending.py). engine/speculation.py says why the tokens
are the children's own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import torch

from engine.kv.streams import device_tensor
from engine.rng import child_stream, uniforms
from engine.rows import Row, RowResult, StepRules
from engine.step_buffers import StepBuffers, context_room, fills_context

Lend = Callable[[int, int, int, int], bool]
"""Lends a row to another row's candidate: `lend(row, lender, tokens, forward)`, before forward call
`forward`, keeps what the row decoded so far and makes its cache columns up to the lender's step's
`tokens`-th hold what the lender's do; False when it cannot (engine/kv/lending.py)."""


def feeding_run(results: Sequence[RowResult], i: int, lent: dict[int, int]) -> tuple[int, RowResult] | None:
    """(the row whose candidate's child it is, the run) that row `i`, its step over, decodes now: the run
    it was last lent for, else its own latest; None when it started none."""
    owner = lent.get(i, i)
    where = -1 if owner == i else i
    for run in reversed(results[owner].aheads):
        if run.row == where:
            return owner, run
    return None


def child_position(row: Row, result: RowResult) -> int:
    """The first position of a child of the row's candidate: right after the step."""
    return row.position + len(result.fed)


def may_speculate(result: RowResult, rules: StepRules, row: Row) -> bool:
    """Whether a row whose step is over may decode its children's steps: it did not end the answer (EOS)
    and its path did not fill the context (a child's first token still fits).

    Past its step a row is fed its own samples drawn from its own stream, which its first child
    continues (engine/rng.py): so these are exactly the tokens that child would sample. Child k > 0
    draws from its own stream from the same position on (`start_runs`).
    """
    return rules.speculate > 0 and not result.finished and not fills_context(child_position(row, result) - 1, rules)


def running(run: RowResult, rules: StepRules) -> bool:
    """A speculative run goes on until it ends its step or reaches `rules.speculate` tokens (the length rule)."""
    return not run.done and len(run.sampled) < rules.speculate


def start_runs(
    results: Sequence[RowResult], rows: Sequence[Row], rules: StepRules, buffers: StepBuffers, forward: int,
    columns: int, lend: Lend | None = None, lent: dict[int, int] | None = None,
) -> StepBuffers:
    """At a host sync before `forward`: each row whose step and last speculative run are over starts
    its next child's step (child k = its k-th run), up to `row.continuations` runs.

    The run feeds the row's last sampled token again, at the position after its step, with child k's
    draws (engine/rng.py); the columns of the row's earlier runs are masked out for it (they stay
    in the cache, to be written back). A group starts at most as many runs past the first child as
    it has rows, the tail blocks the in_device plan reserves for them; when that limit binds, the
    rows allowed the most runs (their parents rank best: M_i = B - j + 1) start theirs first.

    With `lend`, a row whose own candidate has no run left to start is lent to the best-ranked
    candidate that still has some (FlashTTS gives idle slots to the best beams' continuations):
    it decodes that candidate's next child over a copy of its history (`lend`), its own step and
    runs masked out, and records it in `lent` (row -> lender). A lender's row keeps its history:
    a row is lent only once its own candidate needs it no more. `columns`: the cache's columns
    before the step. Returns the buffers (with a mask of `columns + n` columns when the step had none).
    """
    lent = {} if lent is None else lent
    started = sum(max(0, len(r.aheads) - 1) for r in results)
    if forward >= buffers.logprobs.shape[1]:
        return buffers
    order = sorted(range(len(rows)), key=lambda i: -rows[i].continuations)  # best-ranked parents first
    for i in order:
        if started >= len(rows):
            return buffers
        if _runs_left(results[i], rows[i], rules) and _free(results, i, lent, rules):
            buffers = _begin_run(results, rows, rules, buffers, i, i, forward, columns)
            started += 1
    if lend is None:
        return buffers
    idle = [r for r in order if not _needs_row(results[r], rows[r], rules) and _free(results, r, lent, rules)]
    for i in order:
        while idle and started < len(rows) and _runs_left(results[i], rows[i], rules):
            if not lend(idle[0], i, len(results[i].fed), forward):
                break  # no room beside the lender's history (its family's slots are taken): the next lender
            row = idle.pop(0)
            buffers = _begin_run(results, rows, rules, buffers, row, i, forward, columns)
            lent[row] = i
            started += 1
    return buffers


def _runs_left(result: RowResult, row: Row, rules: StepRules) -> bool:
    """Whether the row's candidate, its step over, has children whose runs have not started."""
    return result.done and 0 < len(result.aheads) < row.continuations and may_speculate(result, rules, row)


def _needs_row(result: RowResult, row: Row, rules: StepRules) -> bool:
    """Whether the row's candidate still needs its row: its step, or children whose runs have not started
    (the first starts at the forward after the step ends: engine/runner.py `record`)."""
    return not result.done or (len(result.aheads) < row.continuations and may_speculate(result, rules, row))


def _free(results: Sequence[RowResult], i: int, lent: dict[int, int], rules: StepRules) -> bool:
    """Whether row `i`, its step over, decodes no run now."""
    feeding = feeding_run(results, i, lent)
    return feeding is None or not running(feeding[1], rules)


def _begin_run(results: Sequence[RowResult], rows: Sequence[Row], rules: StepRules, buffers: StepBuffers, row: int,
               owner: int, forward: int, columns: int) -> StepBuffers:  # fmt: skip
    """Row `row` decodes the next child of row `owner`'s candidate from `forward` on (its own when they are one)."""
    result, source = results[owner], rows[owner]
    k, n = len(result.aheads), buffers.logprobs.shape[1]
    base = child_position(source, result)
    room = context_room(base, rules)
    buffers.tokens[row, forward] = result.sampled[-1]
    positions = [base + min(j, room - 1) for j in range(n - forward)]  # both copied without a host sync (CUDA)
    buffers.positions[row, forward:] = device_tensor(positions, torch.long, buffers.positions.device)
    draws = uniforms([child_stream(source.generator, k)], [base], n - forward)[0]
    buffers.draws[row, forward:] = draws.to(buffers.draws.device, non_blocking=True)
    if buffers.mask is None:
        ones = torch.ones((len(rows), columns + n), dtype=torch.bool, device=buffers.positions.device)
        buffers = dataclasses.replace(buffers, mask=ones, width=columns)
    width = buffers.width
    if row == owner:
        buffers.mask[row, width + len(result.fed) : width + forward] = 0  # its earlier runs
    else:  # the lender's columns up to its step's end (`Lend`); after them, the row's own step and runs
        end = width + len(result.fed)
        buffers.mask[row, :end] = buffers.mask[owner, :end]
        buffers.mask[row, end : width + forward] = 0
    result.aheads.append(RowResult(start=forward, row=-1 if row == owner else row))
    return buffers


def trim_speculation(results: Sequence[RowResult]) -> None:
    """Keep only speculation made in slots the group spent anyway: forwards before its longest row's last.

    The decode loop may run a few forwards past that (it checks the rows every `sync_every`);
    trimming them keeps the first child's run independent of `sync_every`. A trimmed run is no
    longer a whole step, so neither done nor finished.
    """
    forwards = max((len(r.fed) for r in results), default=0)
    for result in results:
        kept = []
        for run in result.aheads:
            keep = forwards - run.start
            if keep <= 0 or not run.fed:
                break
            if keep < len(run.fed):
                del run.fed[keep:], run.sampled[keep:], run.logprobs[keep:], run.top1[keep:]
                run.done = run.finished = False
            kept.append(run)
        result.aheads = kept

