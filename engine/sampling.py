"""Turning logits into tokens: temperature, top-p, and per-candidate counter-based draws, batched on the device."""

from __future__ import annotations

import torch

from engine.rng import CandidateStream, child_stream, root_stream


def candidate_generator(seed: int, candidate_id: int) -> CandidateStream:
    """A stream of its own for a candidate outside a search tree (tests, greedy roll-outs): the seed's
    prompt stream's `candidate_id`-th child. A search derives its candidates' streams with `child_stream`."""
    return child_stream(root_stream(seed), candidate_id)


def logits_to_probs(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """What `sample_tokens` draws from, for one row at a temperature above 0: its own softmax and `nucleus`,
    renormalised (the sampler's inverse CDF scales by the total instead)."""
    # logits: [V] float32 -> probs: [V]
    probs = nucleus(torch.softmax(logits / temperature, dim=-1)[None], top_p)[0]
    return probs / probs.sum()


def nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """`probs` with the top-p tail zeroed (not renormalised), in vocabulary order."""
    # probs: [B, V] -> [B, V]
    if top_p >= 1.0:
        return probs
    ranked, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    outside = ranked.cumsum(-1) - ranked > top_p  # keep the smallest set reaching top_p
    return probs.masked_fill(torch.zeros_like(outside).scatter_(-1, order, outside), 0.0)


def inverse_cdf(probs: torch.Tensor, draws: torch.Tensor) -> torch.Tensor:
    """Index of the first column whose cumulative probability reaches `draw * total`; never a zero column.

    The columns stay in vocabulary order, so logits that differ by rounding (another batch shape, another
    policy) move each token's interval by as little: the token changes only for a draw within that
    rounding of a boundary. Over probabilities sorted by size two near-equal tokens could swap places,
    and every draw landing in either of them would then pick the other."""
    # probs: [B, V] (unnormalised), draws: [B] in (0, 1] -> index: [B]
    cdf = probs.cumsum(-1)  # [B, V]
    target = draws[:, None].to(cdf.dtype) * cdf[:, -1:]  # [B, 1], 0 < target <= total
    index = torch.searchsorted(cdf, target).clamp_(max=probs.shape[-1] - 1)  # [B, 1]
    # rounding of a parallel cumsum can land on a zero column: take the nearest kept one before it
    kept = probs > 0
    last = torch.where(kept, torch.arange(probs.shape[-1], device=probs.device), -1).cummax(-1).values  # [B, V]
    before = last.gather(-1, index)
    first = kept.float().argmax(-1, keepdim=True)  # a row's first kept column
    return torch.where(before >= 0, before, first).squeeze(-1)


def sample_tokens(logits: torch.Tensor, draws: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """One token per row, on the logits' device; greedy when temperature is 0."""
    # logits: [B, V] float32, draws: [B] in (0, 1] -> tokens: [B] int64
    if temperature == 0:
        return logits.argmax(-1)
    return inverse_cdf(nucleus(torch.softmax(logits / temperature, dim=-1), top_p), draws)


def token_stats(logits: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """log p(token) and the top-1 probability max p at temperature 1, from one log-softmax on the logits' device.

    The top-1 probability is RKSC's confidence signal: it does not depend on which token was sampled.
    """
    # logits: [B, V] float32, tokens: [B] -> logprobs [B], top1 [B]
    logp = torch.log_softmax(logits, dim=-1)  # [B, V]
    return logp.gather(-1, tokens[:, None]).squeeze(-1), logp.amax(-1).exp()
