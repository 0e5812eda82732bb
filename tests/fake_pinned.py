"""A model of how much pinned host memory torch's caching host allocator holds, for tests and benchmarks on the CPU.

Torch (aten/src/ATen/core/CachingHostAllocator.h) asks CUDA for the next power of two of the bytes
requested, keeps a freed block pinned in a free list of its size for a later request of the same
size, and gives free blocks back only when asked to (`torch.accelerator.empty_host_cache`). So what a
run keeps locked in RAM is the largest number of blocks of each size it used at once, summed over
sizes, not the bytes it asked for. This counts exactly that, and the new blocks (each a `cudaHostAlloc`,
slow: several GB/s) for the allocations it is shown (`take`, with a tensor whose death frees its block).
"""

from __future__ import annotations

import weakref
from collections import Counter

import torch


def block_bytes(nbytes: int) -> int:
    """What torch pins for a request of `nbytes`: the next power of two."""
    return 1 << max(nbytes - 1, 0).bit_length()


class PinnedModel:
    def __init__(self) -> None:
        self.free: Counter[int] = Counter()  # cached blocks of each size
        self.held = 0  # pinned bytes the allocator holds: blocks in use and cached
        self.peak = 0
        self.asked = 0  # bytes of requests in use
        self.peak_asked = 0
        self.in_use = 0  # bytes of the blocks in use (what the allocator would need with no cache)
        self.peak_in_use = 0
        self.new_blocks = 0  # blocks pinned afresh (cudaHostAlloc calls)

    def take(self, tensor: torch.Tensor) -> torch.Tensor:
        """Count `tensor` (just allocated) as pinned until it is freed."""
        nbytes = tensor.numel() * tensor.element_size()
        size = block_bytes(nbytes)
        if self.free[size]:
            self.free[size] -= 1
        else:
            self.held += size
            self.new_blocks += 1
        self.asked += nbytes
        self.in_use += size
        self.peak, self.peak_asked = max(self.peak, self.held), max(self.peak_asked, self.asked)
        self.peak_in_use = max(self.peak_in_use, self.in_use)
        weakref.finalize(tensor, self._give, size, nbytes)
        return tensor

    def _give(self, size: int, nbytes: int) -> None:
        self.free[size] += 1
        self.asked -= nbytes
        self.in_use -= size

    def release(self) -> None:
        """`empty_host_cache`: the cached blocks go back to the system."""
        self.held -= sum(size * count for size, count in self.free.items())
        self.free.clear()
