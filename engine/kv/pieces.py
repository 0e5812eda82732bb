"""A strided host view as the few contiguous pieces it is made of, so that a PCIe copy of it stays asynchronous.

A copy between the GPU and pinned host memory is asynchronous only when its host side is contiguous;
PyTorch gathers or scatters any other host side on the CPU through pageable memory (aten's Copy.cu,
`copy_requires_temporaries`), blocking the host. The host views the KV layer copies are strided but
few pieces in memory order: a range of a token-major run's tokens is one, one layer's head group of
a head-major run is one per head. `split` finds them; `copy` (for the KV store and the verifier's
pools) sends each as one asynchronous copy to or from the matching piece of the device side, laid out
in the same order (a device side laid out otherwise is rearranged on the device, through one
temporary).

    host = segment[:, :, :, 0:4]     # [L, 2, H, 4, D] of a token-major run: memory order T, L, 2, H, D
    split(host).pieces == 1          # one copy of host.permute(split(host).order)
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch

MAX_PIECES = 256  # more pieces than this cross as PyTorch sends them (pageable): fewer, larger copies win


@dataclass(frozen=True)
class Split:
    """`order`: the host view's dims from the largest stride to the smallest; its first `lead` dims (in that
    order) index the pieces, the rest is one contiguous piece."""

    order: tuple[int, ...]
    lead: int
    pieces: int

    def views(self, ordered: torch.Tensor) -> list[torch.Tensor]:
        """The pieces of a tensor of the host view's shape permuted to `order` (the host view's own pieces are
        contiguous; another tensor's are views at the same places)."""
        return [ordered[index] for index in itertools.product(*(range(n) for n in ordered.shape[: self.lead]))]


def memory_order(tensor: torch.Tensor) -> tuple[int, ...]:
    """The dims from the largest stride to the smallest; a dim of size 1 (any stride) goes first."""
    return tuple(sorted(range(tensor.dim()), key=lambda i: (tensor.shape[i] != 1, -tensor.stride(i))))


def split(host: torch.Tensor) -> Split:
    """The fewest contiguous pieces `host` is made of, read in its memory order."""
    order = memory_order(host)
    view = host.permute(order)  # the dims after the last one (a 0-dim view) are always contiguous
    lead = next(k for k in range(view.dim() + 1) if not view.numel() or view[(0,) * k].is_contiguous())
    return Split(order, lead, math.prod(view.shape[:lead]))


def split_copy(dst: torch.Tensor, src: torch.Tensor, direction: str) -> Split | None:
    """How a PCIe copy with a strided host side crosses: as the contiguous pieces of that side (None: as one
    copy: the host side is contiguous, or it is in too many pieces to pay, and PyTorch stages it)."""
    host = src if direction == "h2d" else dst if direction == "d2h" else None
    if host is None or host.is_contiguous():
        return None
    found = split(host)
    return found if found.pieces <= MAX_PIECES else None


def copy(streams, dst: torch.Tensor, src: torch.Tensor, direction: str, found: Split | None) -> None:
    """The copy on `streams` (engine/kv/streams.py) as `split_copy` found it: as it is (None), or each contiguous
    piece of the host side as one asynchronous copy, to or from the device side's matching piece; a device side
    not laid out in the host's memory order is rearranged on the device through one temporary (a copy on the
    device, not counted in D2D: PyTorch would make it too)."""
    if found is None:
        streams.copy(dst, src, direction)
        return
    host, device = (src, dst) if direction == "h2d" else (dst, src)
    ordered = device.permute(found.order)
    parts = found.views(ordered)
    staging = None
    if not all(part.is_contiguous() for part in parts):
        staging = torch.empty(ordered.shape, dtype=device.dtype, device=device.device)
        parts = found.views(staging)
        if direction == "d2h":
            streams.copy(staging, ordered, "d2d")
    for host_part, device_part in zip(found.views(host.permute(found.order)), parts, strict=True):
        if direction == "h2d":
            streams.copy(device_part, host_part, "h2d")
        else:
            streams.copy(host_part, device_part, "d2h")
    if staging is not None and direction == "h2d":
        streams.copy(ordered, staging, "d2d")
