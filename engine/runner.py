"""The only code that calls the model: prefill a prompt, decode a group of candidates for one step."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch
from transformers import DynamicCache

from engine.errors import PrefillStopped
from engine.hf_compat import cache_kwargs
from engine.kv.streams import device_tensor
from engine.rng import uniforms
from engine.rows import Row, RowResult, StepRules
from engine.sampling import sample_tokens, token_stats
from engine.speculative_runs import (
    Lend,
    child_position,
    feeding_run,
    may_speculate,
    running,
    start_runs,
    trim_speculation,
)
from engine.step_buffers import StepBuffers, context_room, fills_context, forced_tokens, step_mask, token_budget

SYNC_EVERY = 8  # forward calls between copies of sampled tokens to the host; 1 = every token
RUN_SYNC_EVERY = 2  # the same while rows may speculate several children: a child's run starts at a sync


@torch.inference_mode()
def prefill(
    model: torch.nn.Module,
    token_ids: Sequence[int],
    device: torch.device,
    chunk: int | None = None,
    cache: DynamicCache | None = None,
    should_stop: Callable[[], bool] | None = None,
    **forward,
) -> tuple[DynamicCache, torch.Tensor]:
    """Run the prompt once, `chunk` tokens per forward call (None: all at once); returns its cache (batch 1)
    and the last position's logits `[V]`.

    Chunks keep activations small: each call holds `chunk` positions' hidden states and computes
    logits for its last position only. Each chunk attends to the cache of the earlier ones, so
    the KV and the logits equal one call's. `cache` (e.g. a head-wise cache on the host) and
    `forward` are passed to every call. A `cache` that already holds tokens (a cached prefix) is
    continued: `token_ids` are the tokens after them, at the positions after them.

    Each chunk is a cancellation point: `should_stop()` true before it raises `PrefillStopped` (a Stop
    waits for one chunk at most, not for the whole prompt); the cache is then half filled, the caller's to drop.
    """
    ids = list(token_ids)
    step = chunk or max(1, len(ids))
    cache = cache if cache is not None else DynamicCache(config=model.config)
    past = cache.get_seq_length()
    logits = None
    for start in range(0, len(ids), step):
        if should_stop is not None and should_stop():
            raise PrefillStopped(past + start)
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
    and top-1 probabilities. `lent`: each row lent to another row's candidate, and to which
    (engine/speculative_runs.py `start_runs`)."""
    lent = lent or {}
    tokens, logprobs, top1 = _host_results(buffers, first, count)  # waits for the device
    for i, (row, result) in enumerate(zip(rows, results, strict=True)):
        for c in range(count):
            j = first + c
            if not result.done:
                _take(result, tokens[i][c], tokens[i][c + 1], (logprobs[i][c], top1[i][c]), rules)
                result.done = _row_is_done(result, rules, row.position + j, row.prefix)
                continue
            if not result.aheads and row.continuations > 0 and may_speculate(result, rules, row):
                result.aheads.append(RowResult(start=j))  # the first child continues right after the step
            feeding = feeding_run(results, i, lent)
            if feeding is None or j < feeding[1].start or not running(feeding[1], rules):
                break
            owner, run = feeding
            _take(run, tokens[i][c], tokens[i][c + 1], (logprobs[i][c], top1[i][c]), rules)
            run.done = _row_is_done(run, rules, child_position(rows[owner], results[owner]) + len(run.fed) - 1)


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


def _take(result: RowResult, fed: int, token: int, probs: tuple[float, float], rules: StepRules) -> None:
    """Append one token; `probs`: its log-probability and the top-1 probability of its distribution."""
    result.fed.append(fed)
    result.sampled.append(token)
    result.logprobs.append(probs[0])
    result.top1.append(probs[1])
    result.finished = token in rules.eos_ids


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
