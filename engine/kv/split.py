"""The device KV budget split between the generator and the verifier (FlashTTS's memory split)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BudgetSplit:
    generator_bytes: int
    verifier_bytes: int


def split_budget(total_bytes: int, share: float | None, verifier_batch_bytes: int) -> BudgetSplit:
    """Divide `total_bytes` of device KV between the two models.

    Decoding (the generator) is memory-bound: every extra byte of device KV saves PCIe traffic.
    Verifying (prefill of a step over a cached path) is compute-bound: it needs room for one
    batch, and more buys little. So by default the verifier gets what one verification batch
    needs (`verifier_batch_bytes`, at most half the budget) and the generator the rest; `share`
    sets the verifier's part instead. A verifier that keeps no KV (batch bytes 0) gets nothing.
    """
    if verifier_batch_bytes <= 0:
        return BudgetSplit(total_bytes, 0)
    verifier = round(total_bytes * share) if share is not None else min(verifier_batch_bytes, total_bytes // 2)
    return BudgetSplit(total_bytes - verifier, verifier)
