"""The only code that calls the model: prefill a prompt, decode a group of candidates for one step."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch
from transformers import DynamicCache

from engine.rows import Row, RowResult, StepRules
from engine.sampling import sample


@torch.inference_mode()
def prefill(
    model: torch.nn.Module, token_ids: Sequence[int], device: torch.device
) -> tuple[DynamicCache, torch.Tensor]:
    """Run the prompt once; returns its cache (batch 1) and the last position's logits `[V]`."""
    input_ids = torch.tensor([list(token_ids)], device=device)
    out = model(input_ids=input_ids, use_cache=True)
    return out.past_key_values, out.logits[0, -1].float()


def _row_is_done(result: RowResult, rules: StepRules, position: int) -> bool:
    if result.finished or len(result.sampled) >= rules.max_tokens or position + 1 >= rules.context_length:
        return True
    return rules.delimiter is not None and rules.delimiter in rules.decode(result.sampled)


@torch.inference_mode()
def decode_step(
    model: torch.nn.Module,
    cache: DynamicCache,
    mask: torch.Tensor | None,
    rows: Sequence[Row],
    rules: StepRules,
    should_stop: Callable[[], bool] = lambda: False,
    before_forward: Callable[[], None] | None = None,
) -> tuple[list[RowResult], float]:
    """Decode every row for one step in batched forward calls; rows that finish early idle.

    `mask` `[B, T]` marks real (1) and padding (0) columns of the cache. Returns each row's
    result and the seconds spent in forward calls. Row i's new KV is in cache columns
    `T .. T + len(results[i].fed) - 1`. `before_forward` runs before each forward call (the
    layer-wise policy re-places layers there).
    """
    device = mask.device if mask is not None else cache.layers[0].keys.device
    results = [RowResult() for _ in rows]
    current = [row.pending for row in rows]
    positions = [row.position for row in rows]
    compute = 0.0
    while not all(r.done for r in results):
        if should_stop():
            break
        if mask is not None:
            mask = torch.cat([mask, torch.ones((len(rows), 1), dtype=mask.dtype, device=device)], dim=1)
        if before_forward is not None:
            before_forward()
        start = time.perf_counter()
        out = model(
            input_ids=torch.tensor([[t] for t in current], device=device),  # [B, 1]
            attention_mask=mask,  # [B, T + t + 1]
            position_ids=torch.tensor([[p] for p in positions], device=device),  # [B, 1]
            past_key_values=cache,
            use_cache=True,
        )
        logits = out.logits[:, -1].float().cpu()  # [B, V]
        compute += time.perf_counter() - start
        log_probs = torch.log_softmax(logits, dim=-1)
        for i, (row, result) in enumerate(zip(rows, results, strict=True)):
            if result.done:
                continue
            token = sample(logits[i], rules.temperature, rules.top_p, row.generator)
            if rules.observe is not None:
                rules.observe(row.candidate_id, logits[i], token)
            result.fed.append(current[i])
            result.sampled.append(token)
            result.logprobs.append(float(log_probs[i, token]))
            result.finished = token in rules.eos_ids
            result.done = _row_is_done(result, rules, positions[i])
            current[i], positions[i] = token, positions[i] + 1
    return results, compute
