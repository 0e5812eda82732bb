"""Turning logits into tokens: temperature, top-p, and per-candidate counter-based draws, batched on the device."""

from __future__ import annotations

import torch

from engine.rng import CandidateStream, child_stream, root_stream


def candidate_generator(seed: int, candidate_id: int) -> CandidateStream:
    """A stream of its own for a candidate outside a search tree (tests, greedy roll-outs): the seed's
    prompt stream's `candidate_id`-th child. A search derives its candidates' streams with `child_stream`."""
    return child_stream(root_stream(seed), candidate_id)


def logits_to_probs(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """The reference semantics of sampling, for one row: what `sample_tokens` draws from."""
    # logits: [V] float32 -> probs: [V]
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        outside = sorted_probs.cumsum(-1) - sorted_probs > top_p  # keep the smallest set reaching top_p
        sorted_probs[outside] = 0.0
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
        probs /= probs.sum()
    return probs


def sorted_probs(logits: torch.Tensor, temperature: float, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Probabilities in descending order with the top-p tail zeroed (not renormalised), and their token ids."""
    # logits: [B, V] float32 -> probs: [B, V], order: [B, V]
    probs = torch.softmax(logits / temperature, dim=-1)
    probs, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    if top_p < 1.0:
        probs = probs.masked_fill(probs.cumsum(-1) - probs > top_p, 0.0)
    return probs, order


def inverse_cdf(probs: torch.Tensor, draws: torch.Tensor) -> torch.Tensor:
    """Index of the first column whose cumulative probability reaches `draw * total`; never a zero column."""
    # probs: [B, V] (descending, unnormalised), draws: [B] in (0, 1] -> index: [B]
    cdf = probs.cumsum(-1)  # [B, V]
    target = draws[:, None].to(cdf.dtype) * cdf[:, -1:]  # [B, 1], 0 < target <= total
    index = torch.searchsorted(cdf, target)  # [B, 1]
    last_kept = ((probs > 0).sum(-1, keepdim=True) - 1).clamp_(min=0)  # guards rounding of a parallel cumsum
    return torch.minimum(index, last_kept).squeeze(-1)


def sample_tokens(logits: torch.Tensor, draws: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """One token per row, on the logits' device; greedy when temperature is 0."""
    # logits: [B, V] float32, draws: [B] in (0, 1] -> tokens: [B] int64
    if temperature == 0:
        return logits.argmax(-1)
    probs, order = sorted_probs(logits, temperature, top_p)
    return order.gather(-1, inverse_cdf(probs, draws)[:, None]).squeeze(-1)


def token_stats(logits: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """log p(token) and the top-1 probability max p at temperature 1, from one log-softmax on the logits' device.

    The top-1 probability is RKSC's confidence signal: it does not depend on which token was sampled.
    """
    # logits: [B, V] float32, tokens: [B] -> logprobs [B], top1 [B]
    logp = torch.log_softmax(logits, dim=-1)  # [B, V]
    return logp.gather(-1, tokens[:, None]).squeeze(-1), logp.amax(-1).exp()
