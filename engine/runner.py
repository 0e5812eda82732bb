"""The only code that calls the model: prefill a prompt, decode a group of candidates for one step."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from engine.hf_compat import cache_kwargs
from engine.kv.streams import device_tensor
from engine.rng import child_stream, uniforms
from engine.rows import Row, RowResult, StepRules
from engine.sampling import sample_tokens, token_stats

SYNC_EVERY = 8  # forward calls between copies of sampled tokens to the host; 1 = every token
RUN_SYNC_EVERY = 2  # the same while rows may speculate several children: a child's run starts at a sync


@torch.inference_mode()
def prefill(
    model: torch.nn.Module,
    token_ids: Sequence[int],
    device: torch.device,
    chunk: int | None = None,
    cache: DynamicCache | None = None,
    **forward,
) -> tuple[DynamicCache, torch.Tensor]:
    """Run the prompt once, `chunk` tokens per forward call (None: all at once); returns its cache (batch 1)
    and the last position's logits `[V]`.

    Chunks keep activations small: each call holds `chunk` positions' hidden states and computes
    logits for its last position only. Each chunk attends to the cache of the earlier ones, so
    the KV and the logits equal one call's. `cache` (e.g. a head-wise cache on the host) and
    `forward` are passed to every call. A `cache` that already holds tokens (a cached prefix) is
    continued: `token_ids` are the tokens after them, at the positions after them.
    """
    ids = list(token_ids)
    step = chunk or max(1, len(ids))
    cache = cache if cache is not None else DynamicCache(config=model.config)
    past = cache.get_seq_length()
    logits = None
    for start in range(0, len(ids), step):
        part = ids[start : start + step]
        out = model(
            input_ids=torch.tensor([part], device=device),
            position_ids=torch.arange(past + start, past + start + len(part), device=device)[None],
            **cache_kwargs(model, cache),
            use_cache=True,
            logits_to_keep=1,
            **forward,
        )
        logits = out.logits[0, -1].float()
    return cache, logits


def delimiter_reached(sampled: Sequence[int], delimiter: str, decode: Callable[[Sequence[int]], str]) -> bool:
    """`delimiter in decode(sampled)`, decoding only the newest tokens while the answer is no.

    Checked after every token, a delimiter first appears in text that ends at the newest token, so a
    window of `4 * len(delimiter) + 4` tokens sees it unless it spans that many tokens (e.g. runs of
    tokens that decode to nothing). A hit in the window is confirmed on the whole text, so the window
    never stops a row that the whole-text check would not.
    """
    window = 4 * len(delimiter) + 4
    if delimiter not in decode(sampled[-window:]):
        return False
    return len(sampled) <= window or delimiter in decode(sampled)


def _row_is_done(result: RowResult, rules: StepRules, position: int, prefix: Sequence[int] = ()) -> bool:
    """The step's stop rules on the row's step so far (`prefix`: its tokens sampled before this decode);
    `position`: where the row's newest token was sampled from."""
    sampled = [*prefix, *result.sampled] if prefix else result.sampled
    if result.finished or len(sampled) >= rules.max_tokens or fills_context(position, rules):
        return True
    return rules.delimiter is not None and delimiter_reached(sampled, rules.delimiter, rules.decode)


def fills_context(position: int, rules: StepRules) -> bool:
    """Whether the token sampled from `position` takes the context's last slot, so its path is full.

    A path (prompt and steps) holds at most `context_length` tokens, as transformers' `max_length`
    counts them: its last token is sampled from position `context_length - 2` and is never fed, so no
    token of a path is ever computed at a position the model does not have (the search ends such a
    path there: engine/search.py)."""
    return position + 2 >= rules.context_length


def context_room(position: int, rules: StepRules) -> int:
    """Tokens a row fed at `position` may sample before its path fills the context (`fills_context`); at least
    one, so a row always runs (a path never reaches the search with less: it ended at the context)."""
    return max(1, rules.context_length - 1 - position)


def token_budget(row: Row, rules: StepRules) -> int:
    """The most tokens the row can sample this step (the stop rules allow at least one)."""
    return max(1, min(rules.max_tokens - len(row.prefix), context_room(row.position, rules)))


@dataclass(frozen=True)
class StepBuffers:
    """One step's device state, allocated once at the step's final length (no per-token allocation)."""

    tokens: torch.Tensor  # [B, 1 + n]: column 0 the pending tokens, column j + 1 the token sampled by forward j
    # float64 holding float32 values (exactly), so that a sync reads them beside the tokens in one copy
    logprobs: torch.Tensor  # [B, n]: log p of the token sampled by forward j, temperature 1
    top1: torch.Tensor  # [B, n]: the top-1 probability of forward j's distribution, temperature 1
    positions: torch.Tensor  # [B, n]: position id fed at forward j (held where the row's path fills the context)
    draws: torch.Tensor  # [B, n] float32 in (0, 1]: the rows' random draws for forward j
    mask: torch.Tensor | None  # [B, T + n], or None when no row has padding (SDPA's fastest path)
    forced: tuple[torch.Tensor, torch.Tensor] | None  # teacher forcing: tokens [B, n] and where they apply [B, n]
    width: int  # T: the mask's columns before this step


def step_mask(mask: torch.Tensor | None, forwards: int) -> torch.Tensor | None:
    """The attention mask at the step's final width; None when the caller gave none (no row is padded). The
    callers know their rows' lengths on the host, so the mask is not read back (a host sync on CUDA)."""
    # mask: [B, T] -> [B, T + forwards] or None
    if mask is None or mask.is_meta:
        return None
    full = torch.ones((mask.shape[0], mask.shape[1] + forwards), dtype=torch.bool, device=mask.device)
    full[:, : mask.shape[1]] = mask.bool()
    return full


def forced_tokens(
    rows: Sequence[Row], rules: StepRules, forwards: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """`rules.forced` as (tokens [B, n], applies [B, n]): forward j emits a forced candidate's j-th token."""
    if rules.forced is None:
        return None
    tokens = torch.zeros((len(rows), forwards), dtype=torch.long)
    applies = torch.zeros((len(rows), forwards), dtype=torch.bool)
    for i, row in enumerate(rows):
        forced = rules.forced.get(row.candidate_id, ())[:forwards]
        tokens[i, : len(forced)] = torch.tensor(forced, dtype=torch.long)
        applies[i, : len(forced)] = True
    return tokens.to(device), applies.to(device)


def allocate_buffers(
    mask: torch.Tensor | None, device: torch.device, rows: Sequence[Row], budgets: Sequence[int], rules: StepRules
) -> StepBuffers:
    """Buffers for `max(budgets)` forward calls; sampling happens where the logits are (plan-only runs: the host)."""
    n = max(budgets)
    sampling = torch.device("cpu") if device.type == "meta" else device  # plan_only.ShapeOnlyModel: host logits
    tokens = torch.empty((len(rows), 1 + n), dtype=torch.long, device=sampling)
    tokens[:, 0] = device_tensor([row.pending for row in rows], torch.long, sampling)  # no host sync (CUDA)
    rooms = [context_room(row.position, rules) for row in rows]  # past its step a row runs on (speculation)
    positions = [[row.position + min(j, room - 1) for j in range(n)] for row, room in zip(rows, rooms, strict=True)]
    draws = uniforms([row.generator for row in rows], [row.position for row in rows], n)  # [B, n] on the host
    return StepBuffers(
        tokens=tokens,
        logprobs=torch.empty((len(rows), n), dtype=torch.float64, device=sampling),
        top1=torch.empty((len(rows), n), dtype=torch.float64, device=sampling),
        positions=device_tensor(positions, torch.long, device),
        draws=draws.to(sampling, non_blocking=True),
        mask=step_mask(mask, n),
        forced=forced_tokens(rows, rules, n, sampling),
        width=0 if mask is None else mask.shape[1],
    )


def forward_and_sample(
    model: torch.nn.Module, cache: DynamicCache, buffers: StepBuffers, j: int, rules: StepRules
) -> torch.Tensor:
    """Forward call j of the step, its tokens, log-probs and top-1 probabilities written into the buffers;
    returns logits [B, V]."""
    # [B, 1, 1, T + j + 1], True: attend. Given 2D, transformers asks on every call whether any row is padded
    # (a read of the device: a host sync per token on CUDA); Beamwise passes a mask only when one is, and a 4D
    # boolean mask is taken as it is (a decode step's one query attends every column its row holds)
    mask = None if buffers.mask is None else buffers.mask[:, None, None, : buffers.width + j + 1]
    out = model(
        input_ids=buffers.tokens[:, j : j + 1].to(buffers.positions.device),  # [B, 1]; no copy unless plan-only
        attention_mask=mask,
        position_ids=buffers.positions[:, j : j + 1],  # [B, 1]
        **cache_kwargs(model, cache),
        use_cache=True,
    )
    logits = out.logits[:, -1].float()  # [B, V]
    tokens = sample_tokens(logits, buffers.draws[:, j], rules.temperature, rules.top_p)  # [B]
    if buffers.forced is not None:
        forced, applies = buffers.forced
        tokens = torch.where(applies[:, j], forced[:, j], tokens)
    buffers.tokens[:, j + 1] = tokens
    buffers.logprobs[:, j], buffers.top1[:, j] = token_stats(logits, tokens)
    return logits


def record(
    results: list[RowResult], rows: Sequence[Row], rules: StepRules, buffers: StepBuffers, first: int, count: int,
    lent: dict[int, int] | None = None,
) -> None:
    """Host decisions for forwards `first .. first + count - 1`, from one copy of their tokens, log-probs
    and top-1 probabilities. `lent`: each row lent to another row's candidate (`start_runs`), and to which."""
    lent = lent or {}
    tokens, logprobs, top1 = _host_results(buffers, first, count)  # waits for the device
    for i, (row, result) in enumerate(zip(rows, results, strict=True)):
        for c in range(count):
            j = first + c
            if not result.done:
                _take(result, tokens[i][c], tokens[i][c + 1], (logprobs[i][c], top1[i][c]), rules)
                result.done = _row_is_done(result, rules, row.position + j, row.prefix)
                continue
            if not result.aheads and row.continuations > 0 and _may_speculate(result, rules, row):
                result.aheads.append(RowResult(start=j))  # the first child continues right after the step
            feeding = _feeding(results, i, lent)
            if feeding is None or j < feeding[1].start or not _running(feeding[1], rules):
                break
            owner, run = feeding
            _take(run, tokens[i][c], tokens[i][c + 1], (logprobs[i][c], top1[i][c]), rules)
            run.done = _row_is_done(run, rules, _child_position(rows[owner], results[owner]) + len(run.fed) - 1)


def _device_of(cache: DynamicCache) -> torch.device:
    """Where the cache's KV is: its first layer's keys, or the device a layer names whose KV is placed before each
    forward call (the layer-wise policy's `LayerKV`)."""
    layer = cache.layers[0]
    return layer.keys.device if layer.keys is not None else layer.device


def _host_results(buffers: StepBuffers, first: int, count: int) -> tuple[list, list, list]:
    """Forwards `first .. first + count - 1`'s tokens `[B][count + 1]` (with the one fed before them), log-probs
    and top-1 probabilities `[B][count]`, read in one copy to the host (one wait for the device, not three).
    The tokens travel as float64 beside them, which holds every token id exactly."""
    stop = first + count
    tokens = buffers.tokens[:, first : stop + 1].double()
    packed = torch.cat([tokens, buffers.logprobs[:, first:stop], buffers.top1[:, first:stop]], dim=1).tolist()
    tokens = [[int(t) for t in row[: count + 1]] for row in packed]  # packed: [B][3 * count + 1]
    return tokens, [row[count + 1 : 2 * count + 1] for row in packed], [row[2 * count + 1 :] for row in packed]


def _feeding(results: Sequence[RowResult], i: int, lent: dict[int, int]) -> tuple[int, RowResult] | None:
    """(the row whose candidate's child it is, the run) that row `i`, its step over, decodes now: the run
    it was last lent for, else its own latest; None when it started none."""
    owner = lent.get(i, i)
    where = -1 if owner == i else i
    for run in reversed(results[owner].aheads):
        if run.row == where:
            return owner, run
    return None


def _child_position(row: Row, result: RowResult) -> int:
    """The first position of a child of the row's candidate: right after the step."""
    return row.position + len(result.fed)


def _take(result: RowResult, fed: int, token: int, probs: tuple[float, float], rules: StepRules) -> None:
    """Append one token; `probs`: its log-probability and the top-1 probability of its distribution."""
    result.fed.append(fed)
    result.sampled.append(token)
    result.logprobs.append(probs[0])
    result.top1.append(probs[1])
    result.finished = token in rules.eos_ids


def _may_speculate(result: RowResult, rules: StepRules, row: Row) -> bool:
    """Whether a row whose step is over may decode its children's steps: it did not end the answer (EOS)
    and its path did not fill the context (a child's first token still fits).

    Past its step a row is fed its own samples drawn from its own stream, which its first child
    continues (engine/rng.py): so these are exactly the tokens that child would sample. Child k > 0
    draws from its own stream from the same position on (`start_runs`).
    """
    return rules.speculate > 0 and not result.finished and not fills_context(_child_position(row, result) - 1, rules)


def _running(run: RowResult, rules: StepRules) -> bool:
    """A speculative run goes on until it ends its step or reaches `rules.speculate` tokens (the length rule)."""
    return not run.done and len(run.sampled) < rules.speculate


Lend = Callable[[int, int, int, int], bool]
"""Lends a row to another row's candidate: `lend(row, lender, tokens, forward)`, before forward call
`forward`, keeps what the row decoded so far and makes its cache columns up to the lender's step's
`tokens`-th hold what the lender's do; False when it cannot (engine/kv/lending.py)."""


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
    return result.done and 0 < len(result.aheads) < row.continuations and _may_speculate(result, rules, row)


def _needs_row(result: RowResult, row: Row, rules: StepRules) -> bool:
    """Whether the row's candidate still needs its row: its step, or children whose runs have not started
    (the first starts at the forward after the step ends, `record`)."""
    return not result.done or (len(result.aheads) < row.continuations and _may_speculate(result, rules, row))


def _free(results: Sequence[RowResult], i: int, lent: dict[int, int], rules: StepRules) -> bool:
    """Whether row `i`, its step over, decodes no run now."""
    feeding = _feeding(results, i, lent)
    return feeding is None or not _running(feeding[1], rules)


def _begin_run(results: Sequence[RowResult], rows: Sequence[Row], rules: StepRules, buffers: StepBuffers, row: int,
               owner: int, forward: int, columns: int) -> StepBuffers:  # fmt: skip
    """Row `row` decodes the next child of row `owner`'s candidate from `forward` on (its own when they are one)."""
    result, source = results[owner], rows[owner]
    k, n = len(result.aheads), buffers.logprobs.shape[1]
    base = _child_position(source, result)
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


def observe_rows(
    results: list[RowResult], rows: Sequence[Row], rules: StepRules, logits: torch.Tensor, buffers: StepBuffers, j: int
) -> None:
    """Hands each unfinished row's float32 logits [V] and its token to `rules.observe` (copies them to the host)."""
    host_logits = logits.cpu()  # [B, V]
    tokens = buffers.tokens[:, j + 1].tolist()
    for i, (row, result) in enumerate(zip(rows, results, strict=True)):
        if not result.done:
            rules.observe(row.candidate_id, host_logits[i], tokens[i])


@torch.inference_mode()
def decode_step(
    model: torch.nn.Module,
    cache: DynamicCache,
    mask: torch.Tensor | None,
    rows: Sequence[Row],
    rules: StepRules,
    should_stop: Callable[[], bool] = lambda: False,
    before_forward: Callable[[], None] | None = None,
    sync_every: int = SYNC_EVERY,
    lend: Lend | None = None,
) -> tuple[list[RowResult], float]:
    """Decode every row for one step in batched forward calls; rows that finish early idle, or speculate.

    `mask` `[B, T]` marks real (1) and padding (0) columns of the cache, or is None when no row is
    padded (so SDPA can take its fastest path; it is not read to find out). Tokens are sampled
    on the device and copied to the host every `sync_every` forward calls (every call when
    `rules.observe` is set, which gets each row's logits on the host), where each row's
    stop rules are applied token by token, so results do not depend on `sync_every`. A row may be
    fed tokens after it is done (every row is in every forward call). Returns each row's result
    and the seconds spent in forward calls and waiting for their tokens. Row i's new KV is in
    cache columns `T .. T + len(results[i].fed) - 1`; later columns hold tokens fed after it was
    done, to be ignored. `before_forward` runs before each forward call (the layer-wise policy
    re-places layers there), and `should_stop` is asked before each one. With `rules.speculate`, a
    row whose step ended early records what it samples on as its first child's step, then (with
    `row.continuations` > 1) its next children's, each a run in `RowResult.aheads`; with `lend` too,
    rows whose candidate has no run left decode other candidates' (`start_runs`).

    No CUDA graphs: a graph replays fixed shapes and addresses, but each forward attends over one
    more cache column (and the layer-wise policy moves layers between forwards), so every token
    would need its own capture. They pay once attention reads a fixed-size arena with per-row
    lengths (paged or variable-length attention) instead of a growing view.
    """
    if sync_every < 1:
        raise ValueError(f"sync_every must be at least 1 forward call (got {sync_every}).")
    results = [RowResult() for _ in rows]
    if not rows:
        return results, 0.0
    budgets = [token_budget(row, rules) for row in rows]
    device = mask.device if mask is not None else _device_of(cache)
    buffers = allocate_buffers(mask, device, rows, budgets, rules)
    sync_every = 1 if rules.observe is not None else sync_every
    runs = rules.speculate > 0 and any(row.continuations > 1 for row in rows)
    if runs:  # a child's run past the first starts at a sync: sync more often
        sync_every = min(sync_every, RUN_SYNC_EVERY)
        columns = mask.shape[1] if mask is not None else cache.get_seq_length()
    done_forwards, compute, lent = 0, 0.0, {}
    while not all(r.done for r in results):
        need = max(b - done_forwards for b, r in zip(budgets, results, strict=True) if not r.done)
        count, stopped = 0, False
        for j in range(done_forwards, done_forwards + min(sync_every, need)):
            if should_stop():
                stopped = True
                break
            if before_forward is not None:
                before_forward()
            start = time.perf_counter()
            logits = forward_and_sample(model, cache, buffers, j, rules)
            compute += time.perf_counter() - start
            if rules.observe is not None:
                observe_rows(results, rows, rules, logits, buffers, j)
            count += 1
        start = time.perf_counter()
        record(results, rows, rules, buffers, done_forwards, count, lent)
        done_forwards += count
        if runs and not stopped and not all(r.done for r in results):
            buffers = start_runs(results, rows, rules, buffers, done_forwards, columns, lend, lent)
        compute += time.perf_counter() - start
        if stopped:
            break
    trim_speculation(results)
    return results, compute
