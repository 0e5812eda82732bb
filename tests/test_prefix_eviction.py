"""The prefix cache on its own: chain keys, RKSC eviction within both caps, pins, damaged files, model keys."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from engine.errors import PrefixCacheTooSmall
from engine.kv import prefix_disk
from engine.kv.prefix_cache import PrefixCache, chain_keys, score

SHAPE = (2, 2, 1, 4, 3)  # L, 2, H, block_size, D
BLOCK_BYTES = 2 * 2 * 1 * 4 * 3 * 4


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(folder=None, ram_blocks=None, disk_bytes=None, clock=None) -> PrefixCache:
    return PrefixCache(SHAPE, torch.float32, seed=b"test", ram_bytes=None if ram_blocks is None else ram_blocks *
                       BLOCK_BYTES, disk_bytes=disk_bytes, folder=folder, clock=clock or Clock())


def kv_of(value: float):
    return lambda: torch.full(SHAPE, float(value))


def add_chain(cache: PrefixCache, tokens) -> list[bytes]:
    keys = cache.keys(tokens)
    for depth, key in enumerate(keys):
        cache.add(key, depth, tokens[depth * 4 : depth * 4 + 4], kv_of(depth))
    return keys


def test_chain_keys_are_token_exact_and_the_same_in_every_process():
    tokens = list(range(10))
    keys = chain_keys(tokens, 4, b"m")
    assert len(keys) == 2  # the partial block has none
    assert chain_keys(tokens[:8], 4, b"m") == keys
    other = chain_keys([0, 1, 2, 3, 4, 5, 6, 99], 4, b"m")
    assert other[0] == keys[0] and other[1] != keys[1]
    assert chain_keys(tokens, 4, b"other model")[0] != keys[0]
    code = "from engine.kv.prefix_cache import chain_keys; print(chain_keys(list(range(10)), 4, b'm')[1].hex())"
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                         cwd=os.path.dirname(os.path.dirname(__file__)))
    assert out.stdout.strip() == keys[1].hex(), out.stderr


def test_score_follows_uses_recency_and_depth():
    assert score(3, 0, 0) > score(0, 0, 0)  # reused more
    assert score(0, 0, 0) > score(0, 10, 0)  # used more lately
    assert score(0, 0, 0) > score(0, 0, 1)  # shallower
    assert score(1, 1, 1) == pytest.approx((2 / 2) / 2)


def test_lookup_stops_at_the_first_miss_and_counts_uses():
    cache = make()
    tokens = list(range(12))
    keys = add_chain(cache, tokens)
    del cache.entries[keys[1]]  # a parent evicted before its child: the child is unreachable
    found = cache.lookup(tokens)
    assert [e.depth for e in found] == [0]
    assert found[0].uses == 1


def test_ram_cap_evicts_the_lowest_score_and_never_a_pinned_block():
    clock = Clock()
    cache = make(ram_blocks=3, clock=clock)
    a = add_chain(cache, list(range(8)))  # depths 0, 1
    clock.now += 600  # ten minutes later
    b = add_chain(cache, [50 + t for t in range(8)])  # another prompt: depths 0, 1
    for _ in range(2):  # the first prompt is used again: recent and reused (a[1]: 3 / 2 > b[0]: 1 / 1)
        cache.lookup(list(range(8)))
    cache.pin([b[1]])
    cache.trim()
    assert cache.ram_used <= 3 * BLOCK_BYTES
    assert set(cache.entries) == {a[0], a[1], b[1]}  # b[0] had the lowest unpinned score
    cache.unpin([b[1]])
    cache.ram_bytes = 2 * BLOCK_BYTES
    cache.trim()
    assert set(cache.entries) == {a[0], a[1]}


def test_pinned_blocks_survive_a_cap_below_them():
    cache = make(ram_blocks=1)
    keys = add_chain(cache, list(range(12)))
    cache.pin(keys)
    cache.trim()
    assert set(cache.entries) == set(keys)
    with pytest.raises(PrefixCacheTooSmall, match=f"smallest cap that works is {3 * BLOCK_BYTES:,} bytes"):
        cache.require(3)


def test_disk_tier_keeps_its_cap_by_score(tmp_path):
    clock = Clock()
    cache = make(folder=tmp_path, clock=clock)
    deep = add_chain(cache, list(range(16)))  # depths 0..3
    size = sum(f.size for f in prefix_disk.scan(tmp_path)) // 4
    cache.pin([deep[3]])
    cache.disk_bytes = 2 * size
    cache.trim()
    left = {f.key for f in prefix_disk.scan(tmp_path)}
    assert sum(f.size for f in prefix_disk.scan(tmp_path)) <= 2 * size
    assert left == {deep[0], deep[3]}  # the pinned one stays; of the rest the shallowest scores highest


def test_a_new_instance_reads_the_disk_tier(tmp_path):
    tokens = list(range(8))
    add_chain(make(folder=tmp_path), tokens)
    found = make(folder=tmp_path).lookup(tokens)
    assert [e.depth for e in found] == [0, 1]
    assert torch.equal(found[1].kv, torch.full(SHAPE, 1.0))


@pytest.mark.parametrize("damage", ["garbage", "truncated", "other tokens", "other shape", "flipped bytes",
                                    "no checksum"])
def test_a_damaged_file_is_a_miss_and_is_removed(tmp_path, damage):
    """"flipped bytes": NaN written over KV inside a file that still loads (it gave every later run that shared the
    block NaN scores); "no checksum": a file without one (an older Beamwise's) is recomputed once."""
    tokens = list(range(8))
    keys = add_chain(make(folder=tmp_path), tokens)
    path = prefix_disk.block_path(tmp_path, keys[1], 1)
    if damage == "garbage":
        path.write_bytes(b"not a tensor file")
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:100])
    elif damage == "other tokens":
        torch.save({"tokens": [9, 9, 9, 9], "kv": torch.zeros(SHAPE)}, path)
    elif damage == "other shape":
        torch.save({"tokens": tokens[4:], "kv": torch.zeros((1, 2, 3))}, path)
    elif damage == "flipped bytes":
        one, nan = torch.ones(2).numpy().tobytes(), torch.full((2,), float("nan")).numpy().tobytes()
        data = path.read_bytes()
        assert data.count(one) > 1
        path.write_bytes(data.replace(one, nan, 1))
        assert torch.load(path, weights_only=True)["kv"].isnan().any()  # it still loads
    else:
        torch.save({"tokens": tokens[4:], "kv": torch.full(SHAPE, 1.0)}, path)
    found = make(folder=tmp_path).lookup(tokens)
    assert [e.depth for e in found] == [0]
    assert not path.exists()


def test_two_instances_on_one_folder_do_not_break_each_other(tmp_path):
    tokens = list(range(12))
    first, second = make(folder=tmp_path), make(folder=tmp_path)
    keys = add_chain(first, tokens)
    add_chain(second, tokens)  # the same blocks written again: whole files, the same bytes
    (tmp_path / ".d0-abc.123.tmp").write_bytes(b"half")  # a write that was cut off: ignored
    assert len(prefix_disk.scan(tmp_path)) == 3
    second.disk_bytes = 1  # the second evicts everything on disk
    second.trim()
    assert prefix_disk.scan(tmp_path) == []
    assert [e.key for e in first.lookup(tokens)] == keys  # the first still has them in RAM
    assert make(folder=tmp_path).lookup(tokens) == []  # a third finds nothing: a miss, not an error


def test_model_key_separates_models(tiny, tiny_qwen2):
    key = prefix_disk.model_key(tiny.source, tiny.dtype, tiny.model, 16)
    assert key == prefix_disk.model_key(tiny.source, tiny.dtype, tiny.model, 16)
    assert key != prefix_disk.model_key(tiny_qwen2.source, tiny_qwen2.dtype, tiny_qwen2.model, 16)
    assert key != prefix_disk.model_key(tiny.source, torch.bfloat16, tiny.model, 16)
    assert key != prefix_disk.model_key(tiny.source, tiny.dtype, tiny.model, 32)
    with torch.no_grad():
        changed = next(tiny.model.parameters())
        saved = changed[0, 0].item()
        changed[0, 0] += 1.0  # other weights, same name: another key
        try:
            assert key != prefix_disk.model_key(tiny.source, tiny.dtype, tiny.model, 16)
        finally:
            changed[0, 0] = saved


def test_model_key_sees_a_changed_weights_file(tmp_path, tiny):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"x" * 10)
    key = prefix_disk.model_key(str(folder), tiny.dtype, tiny.model, 16)
    (folder / "model.safetensors").write_bytes(b"x" * 11)
    assert key != prefix_disk.model_key(str(folder), tiny.dtype, tiny.model, 16)
