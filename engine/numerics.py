"""What a seeded run's numbers depend on besides its settings: torch's build, its thread pool, the device, the dtype.

The sampler's draws are keyed by each candidate's place in the tree (engine/rng.py), so the same seed and
settings give the same draws. The logits they are compared with are float sums, and on the CPU torch splits
a batched decode's matrix products by its thread count: 1 and 2 threads give logits that differ by about
1e-5 (BENCHMARKS.md, "Reproducing a seeded run"), and once in a while a draw falls between the two. So a run
records these facts beside its settings, and an exact rerun pins them (app/threads.py).
"""

from __future__ import annotations

from typing import Any

import torch


def numerics(device: torch.device | str, dtype: torch.dtype) -> dict[str, Any]:
    """The facts a bit-exact rerun of a seeded search must match (thread count read now, when the run starts)."""
    return {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpu": torch.backends.cpu.get_cpu_capability(),  # the kernels torch picked for this CPU (AVX2, AVX512...)
        "device": str(device),
        "dtype": str(dtype).removeprefix("torch."),
    }
