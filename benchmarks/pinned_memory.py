"""Pinned host memory each policy would keep locked in RAM on CUDA, on the GPU ladder's workloads (plan-only).

Torch's caching host allocator pins the next power of two of each request and keeps freed blocks
for reuse (tests/fake_pinned.py models it exactly). This runs the real policies on `meta` tensors
(Llama-2-7B shapes, no weights) with every pinned allocation of the KV store shown to that model,
and prints, per policy: the most bytes asked at once, the most the allocator would hold pinned, and
the blocks pinned afresh (each a slow `cudaHostAlloc`). Deterministic:

    python -m benchmarks.pinned_memory                  # every ladder workload, its policies
    python -m benchmarks.pinned_memory long w64         # some of them
"""

from __future__ import annotations

import sys

from app.formatting import format_bytes
from benchmarks.gpu_ladder import POLICIES, WORKLOADS
from engine.bench import LADDER, run_bench
from engine.kv import store as store_module
from tests.fake_pinned import PinnedModel

PLANNED = ("in_device", "layerwise", "lbs:+prefix_order", "headwise")  # a plan samples no delimiter: not spec


def measure(workload_name: str, policy: str) -> PinnedModel:
    """One plan-only run of `policy` on the ladder's workload, its pinned allocations shown to a fresh model."""
    model = PinnedModel()
    store = store_module.KVStore
    original = store.host_empty, store.release_host_cache
    store.host_empty = lambda self, shape, dtype: model.take(original[0](self, shape, dtype))
    store.release_host_cache = lambda self: model.release()
    try:
        report = run_bench(WORKLOADS[workload_name], [policy], plan_only=True, baselines=())
    finally:
        store.host_empty, store.release_host_cache = original
    if not report.results[0].ok:
        raise RuntimeError(f"{workload_name} {policy}: {report.results[0].message}")
    return model


def main(argv: list[str] | None = None) -> int:
    names = (argv if argv is not None else sys.argv[1:]) or [w for w in WORKLOADS if w != "spec"]
    print(f"{'workload':<10}{'policy':<22}{'asked at once':>15}{'pinned (held)':>15}{'new blocks':>12}")
    for name in names:
        for policy in POLICIES.get(name, [p for p in LADDER if p in PLANNED]):
            model = measure(name, policy)
            print(f"{name:<10}{policy:<22}{format_bytes(model.peak_asked):>15}{format_bytes(model.peak):>15}"
                  f"{model.new_blocks:>12}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
