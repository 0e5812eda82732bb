"""What the engine gives back between searches: the memory torch's allocators keep cached after a run.

A search's KV pools go back to torch when it ends, but torch keeps the freed device memory reserved
(its caching allocator) and the pinned host blocks locked in RAM (its caching host allocator), ready
for the next search. On a gaming PC that is VRAM and RAM another program (a game) cannot have while
Beamwise sits idle. `release_cached_memory` hands both back; the loaded model stays. The next search
pays once for allocating and pinning again (pinning runs at a few GB/s).
"""

from __future__ import annotations

import gc
from dataclasses import dataclass

import torch

from engine.kv.streams import host_allocator_stats, release_host_cache


@dataclass(frozen=True)
class Released:
    device_bytes: int = 0  # device memory torch had reserved and no longer has
    host_bytes: int = 0  # pinned host memory it no longer holds

    @property
    def any(self) -> bool:
        return self.device_bytes > 0 or self.host_bytes > 0


def release_cached_memory(host: bool = True) -> Released:
    """Give the system the device memory and (with `host`) the pinned host memory torch keeps cached; nothing
    in use is touched. Without CUDA there is nothing to give back."""
    gc.collect()  # a failed run's frames may hold tensors in reference cycles
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return Released()
    reserved = torch.cuda.memory_reserved()
    torch.cuda.empty_cache()
    device = max(reserved - torch.cuda.memory_reserved(), 0)
    if not host:
        return Released(device)
    held = _pinned_held()
    release_host_cache()
    return Released(device, max(held - _pinned_held(), 0))


def _pinned_held() -> int:
    """Pinned bytes torch's caching host allocator holds now, in use or cached (0 where torch does not say)."""
    stats = host_allocator_stats()
    return 0 if stats is None else stats.held
