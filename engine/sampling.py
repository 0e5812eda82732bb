"""Turning logits into tokens: temperature, top-p, and per-candidate seeded draws."""

from __future__ import annotations

import torch


def candidate_generator(seed: int, candidate_id: int) -> torch.Generator:
    """A CPU generator owned by one candidate, so its tokens do not depend on batching or grouping."""
    generator = torch.Generator()
    generator.manual_seed((seed * 1_000_003 + candidate_id * 7_919) % (2**63))
    return generator


def logits_to_probs(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    # logits: [V] float32 -> probs: [V]
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        outside = sorted_probs.cumsum(-1) - sorted_probs > top_p  # keep the smallest set reaching top_p
        sorted_probs[outside] = 0.0
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
        probs /= probs.sum()
    return probs


def sample(logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator) -> int:
    """One token from `logits` ([V], on the CPU); greedy when temperature is 0."""
    if temperature == 0:
        return int(torch.argmax(logits))
    probs = logits_to_probs(logits, temperature, top_p)
    return int(torch.multinomial(probs, 1, generator=generator))
