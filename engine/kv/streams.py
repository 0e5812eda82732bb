"""The CUDA operations the KV store orders its copies with: a copy stream, events, pinned host memory.

`KVStore` takes them from one `CudaStreams` object instead of calling `torch.cuda` itself, so the
branches that run only on CUDA (loads on the copy stream, write-back beside compute, events that
time copies and stalls, pinned host buffers) can run on the CPU in tests through a fake with the
same methods (tests/fake_cuda.py), which runs copy-stream copies late and checks the ordering
rules. Without CUDA there is no such object (None): the store is the *emulated device*.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch


class CudaStreams:
    """Real CUDA streams and events on one device."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.copy_stream = torch.cuda.Stream(device)

    def current_stream(self):
        return torch.cuda.current_stream(self.device)

    def stream(self, stream) -> contextlib.AbstractContextManager:
        """Make `stream` the current one inside the block (kernels and copies issued there run on it)."""
        return torch.cuda.stream(stream)

    def event(self, timing: bool = False):
        return torch.cuda.Event(enable_timing=timing)

    def copy(self, dst: torch.Tensor, src: torch.Tensor, direction: str) -> None:
        """`dst.copy_(src)` on the current stream, asynchronous to the host (pinned host memory);
        `direction` ("h2d", "d2h", "d2d") says which side is the host."""
        dst.copy_(src, non_blocking=True)

    def host_copy(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """A copy between host tensors, by the CPU now: ordered with no stream, so it may touch host memory
        that a stream reads or writes only after `synchronize`."""
        dst.copy_(src)

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def empty_host(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """Pinned host memory: copies from and to it can be asynchronous. Torch's caching host allocator pins
        the next power of two of the bytes asked and keeps a freed block pinned for a later request of its
        size (`release_host_cache` gives such blocks back)."""
        return torch.empty(shape, dtype=dtype, device="cpu", pin_memory=True)

    def release_host_cache(self) -> None:
        release_host_cache()


@contextlib.contextmanager
def on_copy_stream(streams: CudaStreams | None) -> Iterator[torch.cuda.Event | None]:
    """Issue the copies inside on the copy stream, after what compute has issued so far (the slots they fill may
    still be read there); the yielded event is recorded after them, and compute must wait on it before it reads
    what they load. Without CUDA (None) the copies simply run now and there is no event (the emulated device
    models the overlap instead). The generator's store and the verifier's pools load through it."""
    if streams is None:
        yield None
        return
    streams.copy_stream.wait_stream(streams.current_stream())  # slots may be reused
    done = streams.event()
    with streams.stream(streams.copy_stream):
        yield done
        done.record()


def wait_for_copy_stream(streams: CudaStreams | None) -> None:
    """Compute waits for every copy issued so far on the copy stream, before it writes or reuses memory those copies
    may still read or write. Without CUDA (None) copies ran when issued: nothing to wait for. The generator's store
    and the verifier's pools both call it."""
    if streams is not None:
        streams.current_stream().wait_stream(streams.copy_stream)


def device_tensor(values, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """`values` as a tensor on `device` without a host sync. `torch.tensor(values, device=cuda)` copies with
    `non_blocking=False`, which synchronizes the current stream: inside a load that is the copy stream, so the host
    stood still until every copy queued before it had crossed PCIe, and a prefetch no longer overlapped the decode
    it was issued before. A non-blocking copy from pageable host memory is staged before the call returns (the
    host tensor may go at once) and runs in stream order."""
    return torch.tensor(values, dtype=dtype).to(device, non_blocking=True)


def pinned_block_bytes(nbytes: int) -> int:
    """The bytes torch's caching host allocator pins for a request of `nbytes`: the next power of two (a
    request that fills its block costs no more pinned memory than one a little over the last power)."""
    return 1 << max(nbytes - 1, 0).bit_length()


def filling_pinned_block(count: int, unit_bytes: int) -> int:
    """How many units of `unit_bytes` (slots, tokens, elements) fill the block torch pins for `count` of them:
    at least `count`, and what it would lock in RAM anyway holds the rest."""
    return max(count, pinned_block_bytes(count * unit_bytes) // unit_bytes)


def release_host_cache() -> None:
    """Give the system the pinned host blocks torch's caching allocator keeps for reuse (blocks in use stay)."""
    empty = getattr(torch.accelerator, "empty_host_cache", None) or getattr(torch._C, "_host_emptyCache", None)
    if empty is not None and torch.cuda.is_initialized():
        empty()


@dataclass(frozen=True)
class HostAllocator:
    """What torch's caching host allocator reports: the pinned bytes it holds now (in use and cached), the most
    it has held since the last reset, and the seconds it has spent pinning new blocks in all."""

    held: int
    peak: int
    pin_seconds: float


def host_allocator_stats(reset_peak: bool = False) -> HostAllocator | None:
    """Torch's caching host allocator's figures; `reset_peak` first starts a new peak from what it holds now.
    CUDA only: None where torch has no allocator running or does not report it."""
    reset = getattr(torch.cuda, "reset_peak_host_memory_stats", None)
    if not torch.cuda.is_initialized() or not hasattr(torch.cuda, "host_memory_stats") or reset is None:
        return None
    if reset_peak:
        reset()
    numbers = torch.cuda.host_memory_stats()
    return HostAllocator(int(numbers.get("allocated_bytes.current", 0)), int(numbers.get("allocated_bytes.peak", 0)),
                         numbers.get("host_alloc_time.total", 0) / 1e6)


def streams_for(device: torch.device) -> CudaStreams | None:
    """The device's streams, or None on a device without CUDA (the emulated device, or meta)."""
    return CudaStreams(device) if device.type == "cuda" else None
