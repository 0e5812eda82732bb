"""Two-tier KV tensors (device pool and host pool) and every copy between them, with exact byte counters.

A block's tensor is `[L, 2, H, block_size, D]` (layers, K/V, KV heads, slots, head dim) and
lives in the tier the block manager's placement says. On CUDA the host pool is pinned and
host-to-device copies are asynchronous on the compute stream (a separate copy stream for
prefetch overlap is not built yet); without CUDA the *emulated device* is a second CPU pool:
the copies are real, the bytes are exact, and PCIe time is modelled from the bytes.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from engine.kv.blocks import AppendPlan, BlockManager, Tier

DIRECTIONS = ("h2d", "d2h", "d2d", "h2h")


@dataclass
class Counters:
    """Bytes per direction, cumulative and for the current step, and per candidate for the step."""

    total: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DIRECTIONS, 0))
    step: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DIRECTIONS, 0))
    step_copy_seconds: float = 0.0
    _owned: dict[tuple[str, tuple[int, ...]], int] = field(default_factory=lambda: defaultdict(int))

    def add(self, direction: str, nbytes: int, owners: Sequence[int] = ()) -> None:
        self.total[direction] += nbytes
        self.step[direction] += nbytes
        if owners:
            self._owned[(direction, tuple(owners))] += nbytes

    def per_candidate(self) -> dict[int, dict[str, int]]:
        """This step's bytes per candidate: bytes moved for several candidates are split evenly,
        the first owners taking the remainder, so the parts sum exactly to the step's totals."""
        result: dict[int, dict[str, int]] = defaultdict(lambda: dict.fromkeys(DIRECTIONS, 0))
        for (direction, owners), nbytes in self._owned.items():
            share, extra = divmod(nbytes, len(owners))
            for i, owner in enumerate(owners):
                result[owner][direction] += share + (1 if i < extra else 0)
        return result

    def start_step(self) -> None:
        self.step = dict.fromkeys(DIRECTIONS, 0)
        self._owned.clear()
        self.step_copy_seconds = 0.0


def stack_layers(new_kv: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """Per-layer (K, V), each `[H, n, D]`, as one `[L, 2, H, n, D]` tensor (shape only for meta tensors)."""
    keys = new_kv[0][0]
    if keys.is_meta:
        return torch.empty((len(new_kv), 2, *keys.shape), dtype=keys.dtype, device="meta")
    return torch.stack([t for pair in new_kv for t in pair]).unflatten(0, (len(new_kv), 2))


class KVStore:
    """Holds block tensors in a device tier and a host tier; performs and counts every copy."""

    def __init__(
        self,
        blocks: BlockManager,
        *,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
        pcie_gbps: float = 25.0,
        host_device: torch.device | str = "cpu",
    ) -> None:
        self.blocks = blocks
        self.shape = (num_layers, 2, num_kv_heads, blocks.block_size, head_dim)
        self.dtype = dtype
        self.device = torch.device(device)
        self.pcie_gbps = pcie_gbps
        self.host_device = torch.device(host_device)  # "meta" for plan-only runs that move no data
        self.emulated = self.device.type != "cuda"
        self.pin = not self.emulated and self.host_device.type == "cpu"
        self.token_bytes = 2 * num_layers * num_kv_heads * head_dim * torch.tensor([], dtype=dtype).element_size()
        self.block_bytes = self.token_bytes * blocks.block_size
        self._tensors: dict[Tier, dict[int, torch.Tensor]] = {Tier.DEVICE: {}, Tier.HOST: {}}
        self.counters = Counters()

    # -- residency ----------------------------------------------------------------------------
    def tensor(self, block_id: int, tier: Tier) -> torch.Tensor:
        return self._tensors[tier][block_id]

    def _allocate(self, block_id: int, tier: Tier) -> torch.Tensor:
        if tier is Tier.DEVICE:
            t = torch.empty(self.shape, dtype=self.dtype, device=self.device)
        else:
            t = torch.empty(self.shape, dtype=self.dtype, device=self.host_device, pin_memory=self.pin)
        self._tensors[tier][block_id] = t
        self.blocks.set_placement(block_id, **{"on_device" if tier is Tier.DEVICE else "on_host": True})
        return t

    def free(self, block_ids: Sequence[int]) -> None:
        """Release the tensors of blocks the manager has freed."""
        for block_id in block_ids:
            for tier in Tier:
                self._tensors[tier].pop(block_id, None)

    def resident_bytes(self, tier: Tier) -> int:
        return len(self._tensors[tier]) * self.block_bytes

    def tier_of(self, block_id: int) -> Tier:
        return Tier.DEVICE if block_id in self._tensors[Tier.DEVICE] else Tier.HOST

    # -- copies -------------------------------------------------------------------------------
    def _copy(self, dst: torch.Tensor, src: torch.Tensor, direction: str, owners: Sequence[int] = ()) -> None:
        start = time.perf_counter()
        # Only host-to-device copies may run ahead: they read pinned memory in stream order. A
        # device-to-host copy completes before returning, because the CPU reads host blocks
        # directly (copy-on-write, the layer-wise host tensors).
        dst.copy_(src, non_blocking=direction == "h2d" and self.pin)
        self.counters.step_copy_seconds += time.perf_counter() - start
        self.counters.add(direction, src.numel() * src.element_size(), owners)

    @staticmethod
    def direction(src: Tier, dst: Tier) -> str:
        return {
            (Tier.HOST, Tier.DEVICE): "h2d",
            (Tier.DEVICE, Tier.HOST): "d2h",
            (Tier.DEVICE, Tier.DEVICE): "d2d",
            (Tier.HOST, Tier.HOST): "h2h",
        }[(src, dst)]

    def gather(
        self, tables: Sequence[Sequence[int]], owners: Sequence[int], *, share: bool, extra: int
    ) -> torch.Tensor:
        """Assemble the group's KV on the device, left-padded: `[L, 2, B, H, P + extra, D]`.

        Row i holds table i's tokens in its last columns before `P` (the longest table).
        With `share`, a block used by several rows crosses PCIe once and is duplicated on
        the device; its bytes are attributed to those rows in equal parts.
        """
        lengths = [self.blocks.num_tokens(t) for t in tables]
        width = max(lengths, default=0)
        L, _, H, _, D = self.shape
        work = torch.zeros((L, 2, len(tables), H, width + extra, D), dtype=self.dtype, device=self.device)
        users: dict[int, list[int]] = defaultdict(list)
        for row, table in enumerate(tables):
            for block_id in table:
                users[block_id].append(owners[row])
        placed: dict[int, tuple[int, int]] = {}
        for row, (table, length) in enumerate(zip(tables, lengths, strict=True)):
            column = width - length
            for block_id in table:
                n = self.blocks.blocks[block_id].num_tokens
                target = work[:, :, row, :, column : column + n]
                if share and block_id in placed:
                    src_row, src_col = placed[block_id]
                    self._copy(target, work[:, :, src_row, :, src_col : src_col + n], "d2d", [owners[row]])
                else:
                    tier = self.tier_of(block_id)
                    split = users[block_id] if share else [owners[row]]
                    self._copy(
                        target, self.tensor(block_id, tier)[:, :, :, :n], self.direction(tier, Tier.DEVICE), split
                    )
                    placed[block_id] = (row, column)
                column += n
        return work

    def write(
        self, plan: AppendPlan, new_kv: Sequence[tuple[torch.Tensor, torch.Tensor]], home: Tier, owner: int
    ) -> None:
        """Apply an append plan: copy-on-write within `home`, then the new (K, V) per layer, each `[H, n, D]`."""
        for cow in plan.copies:
            dst = self._allocate(cow.target, home)
            src_tier = self.tier_of(cow.source)
            self._copy(
                dst[:, :, :, : cow.tokens],
                self.tensor(cow.source, src_tier)[:, :, :, : cow.tokens],
                self.direction(src_tier, home),
                [owner],
            )
        for block_id in plan.new_blocks:
            if block_id not in self._tensors[home]:
                self._allocate(block_id, home)
        if not plan.writes:
            return
        staged = stack_layers(new_kv)  # [L, 2, H, n, D]: one device-side staging copy, not a tier transfer
        direction = self.direction(Tier.DEVICE, home)
        for w in plan.writes:
            dst = self.tensor(w.block, home)[:, :, :, w.offset : w.offset + w.count]
            self._copy(dst, staged[:, :, :, w.start : w.start + w.count], direction, [owner])

    @property
    def bandwidth(self) -> float:
        """Modelled PCIe bytes per second."""
        return self.pcie_gbps * 1e9

    def transfer(self, src: torch.Tensor, direction: str, owners: Sequence[int] = ()) -> torch.Tensor:
        """A copy of `src` in the tier `direction` leads to (always a real copy, also when emulated)."""
        to_host = direction in ("d2h", "h2h")
        if to_host:
            dst = torch.empty(src.shape, dtype=src.dtype, device=self.host_device, pin_memory=self.pin)
        else:
            dst = torch.empty(src.shape, dtype=src.dtype, device=self.device)
        self._copy(dst, src, direction, owners)
        return dst

    def select(self, src: torch.Tensor, rows: torch.Tensor, direction: str) -> torch.Tensor:
        """Rows of `src` (dim 0) gathered within its tier; the bytes written are counted as `direction`."""
        start = time.perf_counter()
        out = src.index_select(0, rows.to(src.device))
        self.counters.step_copy_seconds += time.perf_counter() - start
        self.counters.add(direction, out.nbytes)
        return out

    def sync(self) -> None:
        if not self.emulated:
            torch.cuda.synchronize(self.device)
