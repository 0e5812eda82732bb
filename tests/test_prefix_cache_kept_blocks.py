"""The prefix cache's copies of a run's kept blocks are counted and reported once (`KVCache.keep`): bytes exact,
d2h from the device pool, none across PCIe from the host pool, none again at `close` or for blocks already kept."""

from __future__ import annotations

import functools

import pytest

from engine import events as ev
from engine.config import CacheConfig, SearchConfig
from engine.kv.cache import KVCache
from engine.kv.prefix_cache import PrefixCache
from engine.rows import StepRules
from engine.runner import decode_step, prefill

BLOCK = 16
SEARCH = SearchConfig(beams=2, width=2, step_tokens=6, max_steps=2, step_delimiter=None, seed=5)
PROMPT = [(7 * i + 3) % 250 + 2 for i in range(48)]  # 47 tokens with KV at prefill: 2 full blocks


def prefix_for(tiny) -> PrefixCache:
    shape = tiny.kv_shape
    block = (shape.num_layers, 2, shape.num_kv_heads, BLOCK, shape.head_dim)
    return PrefixCache(block, tiny.dtype, seed=b"test", ram_bytes=None, disk_bytes=None, folder=None)


def cache_of(tiny, policy: str, prefix: PrefixCache) -> KVCache:
    rules = StepRules(SEARCH.step_tokens, None, frozenset(), 1.0, 1.0, tiny.decode, tiny.context_length)
    return KVCache(
        tiny, SEARCH, CacheConfig(policy=policy, block_size=BLOCK, prefix_cache=True), len(PROMPT),
        decode=lambda cache, mask, rows, stop, hook=None, **forward: decode_step(
            functools.partial(tiny.model, **forward), cache, mask, rows, rules, stop, hook),
        prefill=lambda ids, **options: prefill(tiny.model, ids, tiny.device, **options)[0],
        prefix=prefix,
    )  # fmt: skip


@pytest.mark.parametrize(("policy", "crosses"), [("in_device", True), ("lbs", False)])
def test_kept_blocks_are_counted_once_and_exactly(tiny, policy, crosses):
    prefix = prefix_for(tiny)
    kv = cache_of(tiny, policy, prefix)
    kv.prefill(PROMPT)
    before = dict(kv.store.counters.total)
    kept = kv.keep()  # the prompt's 2 full blocks: from the device pool (in_device) or the host pool (lbs)
    two_blocks = 2 * BLOCK * tiny.kv_shape.token_bytes()
    assert kept == (two_blocks if crosses else 0)
    assert kv.store.counters.total["d2h"] - before["d2h"] == kept
    assert kv.store.counters.total["h2h"] - before["h2h"] == (0 if crosses else two_blocks)
    assert len(prefix.entries) == 2
    after = dict(kv.store.counters.total)
    assert kv.keep() == kept  # once: asked again, it copies nothing more
    kv.close()  # nor does the end of the run
    assert after == kv.store.counters.total

    again = cache_of(tiny, policy, prefix)  # the same prompt again: its blocks are in the cache already
    again.prefill(PROMPT)
    before = dict(again.store.counters.total)
    again.close()  # kept at close when no one asked before: nothing new, nothing copied
    assert again.kept_d2h_bytes == 0 and again.store.counters.total == before


def test_run_finished_reads_back_without_the_field():
    """Sessions recorded before the field read back with nothing kept."""
    finished = ev.RunFinished("a", (1,), 0.5, 1, 3, 1.0, 3.0, prefix_kept_d2h_bytes=737_280)
    data = ev.to_dict(finished)
    assert ev.from_dict(data) == finished
    del data["prefix_kept_d2h_bytes"]
    assert ev.from_dict(data).prefix_kept_d2h_bytes == 0


def test_a_runs_kept_blocks_are_in_its_end_event_and_its_sessions_d2h(tmp_path, monkeypatch, capsys):
    """Run's end, `sessions show` and exports said D2H 0 B though the run wrote its blocks to the prefix cache."""
    import json
    from pathlib import Path

    from app.cli import main

    monkeypatch.setenv("BEAMWISE_PREFIX_CACHE_DIR", str(tmp_path / "pc"))
    db = str(tmp_path / "s.db")
    args = ["run", "What is 17 * 23?", "--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2",
            "--max-steps", "2", "--step-tokens", "8", "--policy", "in_device", "--db", db]
    assert main([*args, "--json"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    end, steps = events[-1], [e for e in events if e["type"] == "transfer_stats"]
    blocks = list(Path(tmp_path / "pc").rglob("d*.kv"))
    block_bytes = 3 * 2 * 2 * BLOCK * 16 * 4  # tiny-llama: 3 layers, K and V, 2 KV heads, head dim 16, float32
    assert end["type"] == "run_finished" and blocks
    assert end["prefix_kept_d2h_bytes"] == len(blocks) * block_bytes  # exact: each kept block once
    assert sum(s["d2h_bytes"] for s in steps) == 0  # in_device: no step copies to the host
    assert main(["sessions", "show", "1", "--db", db]) == 0
    assert f"D2H {len(blocks) * block_bytes:,} B" in capsys.readouterr().out
