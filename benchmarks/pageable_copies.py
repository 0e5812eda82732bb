"""How many of each policy's PCIe copies PyTorch would send through pageable temporaries on CUDA.

A copy between pinned host memory and the GPU is asynchronous only when both sides are contiguous;
otherwise PyTorch (aten's Copy.cu, `copy_requires_temporaries`) gathers the host side on the CPU into
pageable memory when the copy is issued (host to GPU), or waits for the stream and scatters it on the CPU
(GPU to host). Such copies block the host and do not overlap compute. This runs each policy's CUDA
branches on the CPU through the fake streams (tests/fake_cuda.py, `staged=True`) on tiny-llama, and each
tiny PRM's (its KV pools at a share that moves segments to the host and back), and counts them; the
figures are counts of copy calls, deterministic:

    python -m benchmarks.pageable_copies
"""

from __future__ import annotations

from engine.config import CacheConfig, ModelSpec
from engine.kv import store as store_module
from engine.models import load_model
from engine.verifiers import kv_pools as pools_module
from tests.fake_cuda import FakeCuda
from tests.test_equivalence import SEARCH, footprint_budget, search_trace
from tests.test_verifier_schedule import PRMS, beam_tree, tight

POLICIES = {  # policy -> (settings, candidates the budget holds)
    "lbs (every switch)": ({"policy": "lbs"}, 1.2),
    "lbs:inter_token": ({"policy": "lbs", "inter_beam": False, "balanced_prefetch": False, "prefix_order": False},
                        1.5),
    "layerwise": ({"policy": "layerwise"}, 4.2),
    "headwise": ({"policy": "headwise"}, 0.5),
}


def main() -> int:
    tiny = load_model(ModelSpec("synthetic:tiny-llama"))
    made: list[FakeCuda] = []
    store_module.streams_for = pools_module.streams_for = lambda device: made.append(FakeCuda(staged=True)) or made[-1]
    print(f"{'policy':<34} {'PCIe copies':>12} {'through pageable temporaries':>30}")
    for name, (settings, candidates) in POLICIES.items():
        events = search_trace(tiny, SEARCH, CacheConfig(kv_budget_bytes=footprint_budget(tiny, SEARCH, candidates),
                                                        **settings))[0]  # fmt: skip
        last = [e for e in events if e.type == "transfer_stats"][-1]
        print(f"{name:<34} {last.h2d_calls + last.d2h_calls:>12} {len(made[-1].staged):>30}")
    for prm in PRMS:  # a beam tree scored at a share that holds one path: segments go to the host and back
        verifier = tight(prm, 1.0, True)
        beam_tree(verifier)
        calls = verifier.kv.counters.calls["h2d"] + verifier.kv.counters.calls["d2h"]
        print(f"{'verifier ' + prm:<34} {calls:>12} {len(made[-1].staged):>30}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
