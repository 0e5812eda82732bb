"""A strided host view crosses PCIe as its contiguous pieces (engine/kv/pieces.py, `KVStore.copy`): the same
data as one copy, each piece asynchronous (never PyTorch's pageable temporaries), and counted as one call each."""

from __future__ import annotations

import pytest
import torch

from engine.kv import pieces
from engine.kv import store as store_module
from engine.kv.blocks import BlockManager
from engine.kv.headwise import group_major
from engine.kv.pool import SlotPool
from engine.kv.store import KVStore
from tests.fake_cuda import FakeCuda

pytestmark = pytest.mark.usefixtures("watch_kernels")  # every compute kernel checked against queued copies

L, H, D, BLOCK = 3, 4, 5, 4


def host_run(layout: str, slots: int = 3) -> torch.Tensor:
    """A run's segment `[L, 2, H, T, D]` of a host pool in `layout`, filled with distinct values."""
    pool = SlotPool((L, 2, H, BLOCK, D), torch.float32, torch.device("cpu"), capacity=0, chunk=8, layout=layout)
    segment = pool.segment(pool.allocate(slots))
    segment.copy_(torch.arange(segment.numel(), dtype=torch.float32).view(segment.shape))
    return segment


@pytest.mark.parametrize(
    ("layout", "view", "expected"),
    [
        ("layer", lambda s: s, 1),  # contiguous: one copy as it is
        ("token", lambda s: s[:, :, :, 2:9], 1),  # a range of tokens of a token-major run
        ("token", lambda s: s[1, :, :, 2:9], 7),  # one layer of it: a piece per token
        ("head", lambda s: s[1, :, 1:3, :7], 2),  # one layer's head group, some tokens: a piece per head
        ("head", lambda s: s[1, :, 1:3], 1),  # one layer's head group, the whole run: one piece
        ("head", lambda s: s[1, 0, :, 2:4], H * 2),  # K only of every head: a piece per head and token
    ],
)
def test_a_host_view_splits_into_the_fewest_contiguous_pieces_in_its_memory_order(layout, view, expected):
    host = view(host_run(layout))
    split = pieces.split(host)
    parts = split.views(host.permute(split.order))
    assert split.pieces == len(parts) == expected
    assert all(part.is_contiguous() for part in parts)
    assert sum(part.numel() for part in parts) == host.numel()
    assert torch.equal(torch.cat([p.flatten() for p in parts]).sort().values, host.flatten().sort().values)


def test_head_wise_arena_gives_a_head_groups_rows_as_one_piece_and_a_forwards_new_tokens_as_one_per_group():
    """The host arena of head-wise's rows, `[L, 2, B, G, g, C, D]` group-major: a load (one layer, one head
    group, every row, the first `n` columns) is one piece; a forward's write (one layer, every head, one
    column) is one piece per head group."""
    shape = (L, 2, 3, 2, 2, 10, D)  # 3 rows, 2 groups of 2 heads, 10 columns
    arena = group_major(torch.arange(2 * torch.Size(shape).numel(), dtype=torch.float32), shape)
    assert arena.shape == shape
    assert pieces.split(arena[1, :, :, 1, :, :7]).pieces == 1
    assert pieces.split(arena[1, :, :, :, :, 7:8]).pieces == 2
    assert len(set(arena.flatten().tolist())) == arena.numel() and arena.max() < arena.numel(), "the first elements"


def head_major_store() -> KVStore:
    return KVStore(BlockManager(block_size=BLOCK), num_layers=L, num_kv_heads=H, head_dim=D, dtype=torch.float32,
                   device=torch.device("cpu"), budget_bytes=0, host_layout="head")  # fmt: skip


def fake_store(monkeypatch) -> tuple[KVStore, FakeCuda]:
    fake = FakeCuda(staged=True)
    monkeypatch.setattr(store_module, "streams_for", lambda device: fake)
    return head_major_store(), fake


def pinned_run(fake: FakeCuda, layout: str = "head") -> torch.Tensor:
    """`host_run`, but in memory the fake counts as pinned (as the store's host pool is)."""
    values = host_run(layout)
    pinned = fake.empty_host((values.numel(),), torch.float32)
    segment = pinned.view(L, H, values.shape[3], 2, D).permute(0, 3, 1, 2, 4)
    segment.copy_(values)
    return segment


@pytest.mark.parametrize("device_layout", ["head-major", "layer-major"])
def test_a_head_group_crosses_as_one_asynchronous_copy_per_head_into_either_device_layout(monkeypatch, device_layout):
    """A device side laid out like the host's takes each piece straight; another is filled through one
    temporary on the device. Either way: the host's values, one call per piece, nothing pageable."""
    store, fake = fake_store(monkeypatch)
    host = pinned_run(fake)[1, :, 1:3, :7]  # [2, 2 heads, 7 tokens, D]
    if device_layout == "head-major":
        device = torch.zeros((2, 12, 2, D)).permute(2, 0, 1, 3)[:, :, :7]  # [2 heads, capacity, 2, D] in memory
    else:
        device = torch.zeros((2, 2, 7, D))
    store.copy(device, host, "h2d")
    store.sync()
    assert torch.equal(device, host)
    assert store.counters.calls["h2d"] == 2 and store.counters.total["h2d"] == host.numel() * 4
    assert fake.staged == [] and fake.unpinned == []


def test_new_tokens_cross_to_a_head_major_host_run_as_one_copy_per_head(monkeypatch):
    store, fake = fake_store(monkeypatch)
    host = pinned_run(fake)[2, :, :, 5:7]  # [2, H, 2 tokens, D]: a piece per head
    new = torch.randn((2, H, 2, D))
    store.copy(host, new, "d2h")
    store.sync()
    assert torch.equal(host, new)
    assert store.counters.calls["d2h"] == H and fake.staged == []


def test_a_view_of_too_many_pieces_crosses_as_pytorch_sends_it_and_counts_one_call(monkeypatch):
    store, fake = fake_store(monkeypatch)
    monkeypatch.setattr(pieces, "MAX_PIECES", 3)
    host = pinned_run(fake)[1, :, 1:3, :7]  # two pieces
    store.copy(torch.zeros(host.shape), host, "h2d")
    assert fake.staged == [] and store.counters.calls["h2d"] == 2
    host = pinned_run(fake)[1, 0, :, 2:4]  # K only: a piece per head and token, 8 > 3
    device = torch.zeros(host.shape)
    store.copy(device, host, "h2d")
    store.sync()
    assert torch.equal(device, host) and len(fake.staged) == 1 and store.counters.calls["h2d"] == 3


def test_the_emulated_device_counts_the_calls_cuda_would_make():
    """The deterministic CPU counts (bench, events) are CUDA's: a copy in pieces counts each."""
    store = head_major_store()
    assert store.emulated
    host = host_run("head")[0, :, 1:4, :3]
    device = torch.zeros(host.shape)
    store.copy(device, host, "h2d")
    assert torch.equal(device, host) and store.counters.calls["h2d"] == 3
