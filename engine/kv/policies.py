"""A run's offload policy made by its name, and the store laid out for it (engine/kv/cache.py picks the name and
sizes the pool)."""

from __future__ import annotations

from engine.config import CacheConfig
from engine.kv.blocks import BlockManager
from engine.kv.headwise import HeadwisePolicy
from engine.kv.in_device import InDevicePolicy
from engine.kv.layerwise import LayerwisePolicy
from engine.kv.lbs import LbsPolicy, Switches
from engine.kv.policy import Policy, PolicyContext
from engine.kv.store import KVStore
from engine.loaded import Generator


def make_policy(name: str, context: PolicyContext, cache: CacheConfig, budget: int, layer_overhead: int) -> Policy:
    """Policy `name`; layer-wise with its Eq. 1 `budget` and the device bytes its buffers hold beyond it."""
    if name == "layerwise":
        return LayerwisePolicy(context, budget, layer_overhead)
    if name == "in_device":
        return InDevicePolicy(context)
    if name == "headwise":
        return HeadwisePolicy(context, share=cache.inter_beam)
    switches = Switches(cache.inter_beam, cache.balanced_prefetch, cache.prefix_order)
    return LbsPolicy(context, switches)


def make_store(loaded: Generator, blocks: BlockManager, policy_name: str, pool: int, pcie_gbps: float) -> KVStore:
    """The run's store for policy `policy_name`, its device pool `pool` bytes."""
    shape, device = loaded.kv_shape, loaded.device
    return KVStore(
        blocks,
        num_layers=shape.num_layers,
        num_kv_heads=shape.num_kv_heads,
        head_dim=shape.head_dim,
        dtype=loaded.dtype,
        device=device,
        budget_bytes=pool,
        pcie_gbps=pcie_gbps,
        host_device="meta" if device.type == "meta" else "cpu",  # plan-only runs hold no data
        host_layout="head" if policy_name == "headwise" else "token",  # how its copies read the host
    )
