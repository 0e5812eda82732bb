"""The only code that calls the model: prefill a prompt, decode a group of candidates for one step."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from engine.sampling import sample


@dataclass
class Row:
    """One candidate in a decode batch."""

    candidate_id: int
    pending: int  # the token to feed first: its KV does not exist yet
    position: int  # position id of `pending` (= tokens already in the KV)
    generator: torch.Generator


@dataclass
class RowResult:
    fed: list[int] = field(default_factory=list)  # tokens whose KV this step created
    sampled: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)  # log p(token) at temperature 1
    finished: bool = False  # sampled an EOS token
    done: bool = False  # this step is over for the row


@dataclass(frozen=True)
class StepRules:
    max_tokens: int
    delimiter: str | None
    eos_ids: frozenset[int]
    temperature: float
    top_p: float
    decode: Callable[[Sequence[int]], str]
    context_length: int
    observe: Callable[[int, torch.Tensor, int], None] | None = None  # (candidate, logits [V], token) for tests


def cache_from_kv(model: torch.nn.Module, kv: torch.Tensor) -> DynamicCache:
    """A transformers cache over the group's assembled KV `[L, 2, B, H, T, D]` (views, no copy)."""
    cache = DynamicCache(config=model.config)
    for layer_index, layer in enumerate(cache.layers):
        keys, values = kv[layer_index, 0], kv[layer_index, 1]
        layer.lazy_initialization(keys, values)
        layer.keys, layer.values = keys, values
    return cache


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
    mask: torch.Tensor,
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
    device = mask.device
    results = [RowResult() for _ in rows]
    current = [row.pending for row in rows]
    positions = [row.position for row in rows]
    compute = 0.0
    while not all(r.done for r in results):
        if should_stop():
            break
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
