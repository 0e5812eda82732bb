"""How often `lbs` samples other tokens than `in_device` on the CPU in float32 (the logits agree to ~1e-7).

Runs a 4 x 4 search on synthetic:tiny-llama for several seeds, budgets and prefix order on and off, and
compares every candidate's tokens and logits with `in_device`'s (tests/test_equivalence.py's check).
A token differs only where float32 rounding between batch shapes moves a sampling boundary past a draw.

    python -m benchmarks.token_agreement            (Windows: py -3.11 -m benchmarks.token_agreement)
"""

from __future__ import annotations

from engine.config import CacheConfig, ModelSpec, SearchConfig
from engine.models import load_model
from tests.test_equivalence import assert_same_run, footprint_budget, search_trace


def main() -> None:
    tiny = load_model(ModelSpec("synthetic:tiny-llama"))
    compared = differing = 0
    for seed in range(6):
        search = SearchConfig(beams=4, width=4, step_tokens=6, max_steps=4, step_delimiter=None, seed=seed)
        reference = search_trace(tiny, search, CacheConfig(policy="in_device"))
        for candidates in (1.2, 1.6):
            for prefix_order in (False, True):
                budget = footprint_budget(tiny, search, candidates)
                run = search_trace(tiny, search, CacheConfig(policy="lbs", kv_budget_bytes=budget,
                                                             prefix_order=prefix_order))
                compared += 1
                try:
                    assert_same_run(reference, run)
                except AssertionError as error:
                    differing += 1
                    print(f"seed {seed}, budget {candidates} candidates, prefix order {prefix_order}: {error}")
    print(f"lbs runs compared with in_device: {compared}; with other tokens or logits: {differing}")


if __name__ == "__main__":
    main()
