"""A run again in a new process (RAM tier empty, disk tier warm) keeps its path's blocks without copying them
from the device again nor writing their files again: the disk tier holds them already."""

from __future__ import annotations

from engine.config import CacheConfig, SearchConfig
from engine.kv import prefix_cache, prefix_disk
from engine.search import run
from tests.test_prefix_cache import cache_dir  # noqa: F401 (a fixture)

BLOCK = 16
SEARCH = SearchConfig(beams=2, width=2, step_tokens=6, max_steps=2, step_delimiter=None, seed=5)
PROMPT = [(7 * i + 3) % 250 + 2 for i in range(48)]  # 2 full blocks with KV at prefill; the kept path has 3




def finished(loaded):
    cache = CacheConfig(policy="in_device", block_size=BLOCK, prefix_cache=True)
    events = list(run("", loaded, SEARCH, cache, prompt_ids=PROMPT))
    assert events[-1].type == "run_finished", events[-1]
    return events[-1]


def test_a_new_process_keeps_blocks_on_disk_without_copying_or_writing_them(tiny, cache_dir, monkeypatch):  # noqa: F811
    first = finished(tiny)
    files = sorted(cache_dir.rglob("d*.kv"))
    block_bytes = BLOCK * tiny.kv_shape.token_bytes()
    assert len(files) == 3  # the prompt's 2 blocks and the path's third
    assert first.prefix_kept_d2h_bytes == len(files) * block_bytes
    inodes = {f: f.stat().st_ino for f in files}

    writes = []
    write_block = prefix_disk.write_block
    monkeypatch.setattr(prefix_disk, "write_block", lambda *a, **k: writes.append(a[1]) or write_block(*a, **k))
    prefix_cache.forget_shared()  # a new process: nothing in RAM, the disk tier warm
    again = finished(tiny)
    assert again.path == first.path
    assert again.prefix_kept_d2h_bytes == 0  # the path's third block was copied from the device again
    assert writes == []  # nor written again
    assert sorted(cache_dir.rglob("d*.kv")) == files
    assert {f: f.stat().st_ino for f in files} == inodes  # os.replace of a new file would change the inode
    shared = next(iter(prefix_cache._SHARED.values()))
    assert len(shared.entries) == 3  # the path's block joined the RAM tier from its file


def test_a_damaged_file_is_copied_and_written_again(tiny, cache_dir):  # noqa: F811
    first = finished(tiny)
    deepest = max(cache_dir.rglob("d*.kv"), key=lambda f: f.name)
    assert deepest.name.startswith("d2-")
    deepest.write_bytes(b"damaged")
    prefix_cache.forget_shared()
    again = finished(tiny)
    assert again.prefix_kept_d2h_bytes == BLOCK * tiny.kv_shape.token_bytes()  # that block only: the rest loaded
    assert deepest.stat().st_size > len(b"damaged")
    assert first.path == again.path
