"""A decode step's device buffers, and the context's limit on the positions its rows are fed.

Shared by the decode loop (engine/runner.py) and the speculative runs it starts (engine/speculative_runs.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from engine.kv.streams import device_tensor
from engine.rows import Row, StepRules


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
    """`rules.forced` as (tokens [B, n], applies [B, n]): forward j emits a forced candidate's j-th token. Both
    are built on the host and copied without a host sync (CUDA), like the step's other buffers."""
    if rules.forced is None:
        return None
    tokens, applies = [], []
    for row in rows:
        forced = list(rules.forced.get(row.candidate_id, ())[:forwards])
        tokens.append(forced + [0] * (forwards - len(forced)))
        applies.append([True] * len(forced) + [False] * (forwards - len(forced)))
    return device_tensor(tokens, torch.long, device), device_tensor(applies, torch.bool, device)
