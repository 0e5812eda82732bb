"""The prefix KV cache in runs: a run again and a longer prompt compute only their new tokens, under every
policy, with the same tokens and logits as a run without the cache; the disk tier serves a new process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from engine.config import CacheConfig, SearchConfig
from engine.kv import prefix_cache
from engine.search import run
from tests.test_equivalence import assert_same_run

POLICIES = ("in_device", "lbs", "layerwise", "headwise")
BLOCK = 16
SEARCH = SearchConfig(beams=2, width=2, step_tokens=6, max_steps=2, step_delimiter=None, seed=5)
PROMPT = [(7 * i + 3) % 250 + 2 for i in range(48)]  # 3 full blocks: the run's kept path holds all of them
EXTENSION = [(11 * i + 5) % 250 + 2 for i in range(21)]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh disk tier and no RAM tier: as a first start on a new machine."""
    monkeypatch.setenv("BEAMWISE_PREFIX_CACHE_DIR", str(tmp_path / "prefix-kv"))
    prefix_cache.forget_shared()
    yield tmp_path / "prefix-kv"
    prefix_cache.forget_shared()


def trace(loaded, prompt, policy, cached: bool, **cache_options):
    observed = defaultdict(list)
    cache = CacheConfig(policy=policy, block_size=BLOCK, prefix_cache=cached, prefill_chunk=10, **cache_options)
    events = list(run("", loaded, SEARCH, cache, prompt_ids=prompt,
                      observe_logits=lambda cid, logits, token: observed[cid].append((logits.clone(), token))))
    assert events[-1].type == "run_finished", events[-1]
    parents = {e.id: e.parent for e in events if e.type == "candidate_scored"}
    return events, observed, parents


def prefill_of(events):
    return next(e for e in events if e.type == "prefill_done")


def totals(events):
    last = [e for e in events if e.type == "transfer_stats"][-1]
    return {"h2d": last.h2d_bytes, "d2h": last.d2h_bytes, "d2d": last.d2d_bytes}


@pytest.mark.parametrize("policy", POLICIES)
def test_run_again_and_longer_prompt_compute_only_new_tokens(tiny, cache_dir, policy):
    plain = trace(tiny, PROMPT, policy, cached=False)
    plain_long = trace(tiny, PROMPT + EXTENSION, policy, cached=False)
    assert (prefill_of(plain[0]).cached_tokens, prefill_of(plain[0]).computed_tokens) == (0, len(PROMPT))

    first = trace(tiny, PROMPT, policy, cached=True)  # cold: computes everything, keeps its blocks
    assert (prefill_of(first[0]).cached_tokens, prefill_of(first[0]).computed_tokens) == (0, len(PROMPT))
    assert_same_run(plain, first)

    again = trace(tiny, PROMPT, policy, cached=True)  # "Run again": the prompt's full blocks but the last
    assert prefill_of(again[0]).cached_tokens == 32  # 47 tokens have KV at prefill: 2 full blocks
    assert prefill_of(again[0]).computed_tokens == len(PROMPT) - 32
    assert_same_run(plain, again)

    longer = trace(tiny, PROMPT + EXTENSION, policy, cached=True)  # the first run kept block 3 (its path's)
    assert prefill_of(longer[0]).cached_tokens == len(PROMPT)
    assert prefill_of(longer[0]).computed_tokens == len(EXTENSION)
    assert_same_run(plain_long, longer)


@pytest.mark.parametrize("policy", POLICIES)
def test_cached_prefix_is_counted_once(tiny, cache_dir, policy):
    """The cached prefix crosses once: host to device, or host to host where the prompt lives on the host."""
    plain = trace(tiny, PROMPT, policy, cached=False)[0]
    trace(tiny, PROMPT, policy, cached=True)
    again = trace(tiny, PROMPT, policy, cached=True)[0]
    loaded_bytes = prefill_of(again).cached_tokens * tiny.kv_shape.token_bytes()
    if policy == "headwise":  # copied into the prompt's host run (h2h): the cached part is never written back
        assert totals(again)["d2h"] == totals(plain)["d2h"] - loaded_bytes
        assert totals(again)["h2d"] < totals(plain)["h2d"]  # the prefill's chunks stream a shorter past
    else:
        assert totals(again)["h2d"] == totals(plain)["h2d"] + loaded_bytes
        assert totals(again)["d2h"] == totals(plain)["d2h"]


def test_follow_up_reuses_the_chosen_path(tiny, cache_dir):
    """A prompt that continues the prompt with the chosen answer (a follow-up) loads the path's full blocks."""
    events, observed, _ = trace(tiny, PROMPT, "in_device", cached=True)
    finished = events[-1]
    answer = [t for cid in finished.path for _, t in observed[cid]]
    follow = PROMPT + answer + EXTENSION
    kept = (len(PROMPT) + len(answer) - 1) // BLOCK * BLOCK  # the last answer token has no KV yet
    plain = trace(tiny, follow, "in_device", cached=False)
    cached = trace(tiny, follow, "in_device", cached=True)
    assert prefill_of(cached[0]).cached_tokens == kept
    assert prefill_of(cached[0]).computed_tokens == len(follow) - kept
    assert_same_run(plain, cached)


def test_disk_tier_serves_a_new_process(tiny, cache_dir):
    trace(tiny, PROMPT, "lbs", cached=True)
    files = list(cache_dir.rglob("*.kv"))
    assert len(files) >= 3
    prefix_cache.forget_shared()  # a new process: nothing in RAM
    again = trace(tiny, PROMPT, "lbs", cached=True)
    assert prefill_of(again[0]).cached_tokens == 32
    assert_same_run(trace(tiny, PROMPT, "lbs", cached=False), again)


def test_a_disk_folder_that_cannot_be_written_is_said_and_the_run_goes_on(tiny, tmp_path, monkeypatch, capsys):
    """BEAMWISE_PREFIX_CACHE_DIR under a file (or on a read-only disk): the disk tier stored nothing and nothing said
    so. The prefill's event names the folder and the OS's reason, the window's status bar and `run` say it, and
    the run goes on with the RAM tier (its answer the same)."""
    from app.cli import main
    from app.formatting import prefix_disk_text

    (tmp_path / "a-file").write_text("x", encoding="utf-8")
    monkeypatch.setenv("BEAMWISE_PREFIX_CACHE_DIR", str(tmp_path / "a-file" / "prefix-kv"))
    prefix_cache.forget_shared()
    events = trace(tiny, PROMPT, "in_device", cached=True)[0]
    problem = prefill_of(events).prefix_disk_problem
    assert problem is not None and str(tmp_path / "a-file") in problem and "Not a directory" in problem
    assert prefix_disk_text(problem).startswith(f"the prefix cache cannot write its disk folder ({problem})")
    flags = ["--model", "synthetic:tiny-llama", "--max-steps", "1", "--no-save"]
    assert main(["run", "What is 2+2?", *flags]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "prefix cache cannot write" in line]
    assert len(said) == 1 and said[0].startswith(f"beamwise: note: the prefix cache cannot write its disk folder "
                                                 f"({tmp_path / 'a-file'}")  # this model's folder under it
    monkeypatch.setenv("BEAMWISE_PREFIX_CACHE_DIR", str(tmp_path / "prefix-kv"))
    prefix_cache.forget_shared()
    assert prefill_of(trace(tiny, PROMPT, "in_device", cached=True)[0]).prefix_disk_problem is None


def test_a_disk_cap_below_the_prompts_blocks_holds_once_the_run_ends(tiny, cache_dir):
    """`--prefix-cache-disk 1kB` left the prompt's blocks on disk (119,016 bytes): they were pinned while the run
    trimmed the tiers, and nothing trimmed them after."""
    trace(tiny, PROMPT, "in_device", cached=True, prefix_cache_disk_bytes=1000)
    assert sum(f.stat().st_size for f in cache_dir.rglob("*.kv")) <= 1000


def test_different_model_misses(tiny, tiny_qwen2, cache_dir):
    trace(tiny, PROMPT, "in_device", cached=True)
    other = trace(tiny_qwen2, PROMPT, "in_device", cached=True)
    assert prefill_of(other[0]).cached_tokens == 0
    assert len({p.parent.name for p in cache_dir.rglob("*.kv")}) == 2  # one folder per model


def test_no_prefix_cache_writes_nothing(tiny, cache_dir):
    trace(tiny, PROMPT, "in_device", cached=False)
    trace(tiny, PROMPT, "in_device", cached=False)
    assert not cache_dir.exists() or not list(cache_dir.rglob("*.kv"))


def test_ram_cap_too_small_names_the_smallest(tiny, cache_dir):
    cache = CacheConfig(block_size=BLOCK, prefix_cache=True, prefix_cache_ram_bytes=1000)
    events = list(run("", tiny, SEARCH, cache, prompt_ids=PROMPT))
    need = 2 * BLOCK * tiny.kv_shape.token_bytes()  # the prompt's 2 full blocks are pinned while it runs
    assert events[-1].type == "run_failed"
    assert f"the smallest cap that works is {need:,} bytes" in events[-1].message
    assert f"--prefix-cache-ram {need}" in events[-1].message
    fits = CacheConfig(block_size=BLOCK, prefix_cache=True, prefix_cache_ram_bytes=need)
    assert list(run("", tiny, SEARCH, fits, prompt_ids=PROMPT))[-1].type == "run_finished"


def test_ram_cap_holds_after_a_run(tiny, cache_dir):
    """The prompt's 4 full blocks fill the cap; the path's 5th block (deepest, lowest score) is evicted."""
    cap = 4 * BLOCK * tiny.kv_shape.token_bytes()
    trace(tiny, PROMPT + EXTENSION, "in_device", cached=True, prefix_cache_ram_bytes=cap)
    shared = next(iter(prefix_cache._SHARED.values()))
    assert shared.ram_used <= cap and shared.evicted["ram"] == 1
    assert {e.depth for e in shared.entries.values()} == {0, 1, 2, 3}


def test_cli_run_again_in_a_new_process(tmp_path):
    """Two `beamwise run` processes: the second prefills only what the first did not keep."""
    env = dict(os.environ, BEAMWISE_PREFIX_CACHE_DIR=str(tmp_path / "kv"), BEAMWISE_DATA_DIR=str(tmp_path / "data"),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    command = [sys.executable, "-m", "app.cli", "run", "--model", "synthetic:tiny-llama", "--beams", "1", "--width",
               "1", "--max-steps", "1", "--step-tokens", "4", "--no-save", "What is 2+3?"]
    root = Path(__file__).resolve().parents[1]
    outputs = [subprocess.run(command, env=env, cwd=root, capture_output=True, text=True, timeout=300)
               for _ in range(2)]
    for out in outputs:
        assert out.returncode == 0, out.stderr
    first = next(line for line in outputs[0].stdout.splitlines() if line.startswith("prompt:"))
    second = next(line for line in outputs[1].stdout.splitlines() if line.startswith("prompt:"))
    assert "(0 cached" in first
    assert "(0 cached" not in second and " cached, " in second


def test_old_prefill_events_read_back():
    from engine import events as ev

    old = ev.from_dict({"type": "prefill_done", "prompt_tokens": 40, "seconds": 0.5})
    assert (old.cached_tokens, old.computed_tokens) == (0, 40)
    new = ev.from_dict(ev.to_dict(ev.PrefillDone(40, 0.1, 32, 8)))
    assert (new.cached_tokens, new.computed_tokens) == (32, 8)


@pytest.mark.parametrize("policy", ["in_device", "lbs", "layerwise"])
def test_on_cuda_the_cached_prefix_crosses_from_pinned_memory(tiny, cache_dir, policy, monkeypatch, watch_kernels):
    """Through the CUDA branches (tests/fake_cuda.py): the cached blocks are gathered into the store's pinned
    memory, so their one host-to-device copy is asynchronous, with the emulated run's tokens and logits. (Blocks
    kept after the run go to pageable RAM, where the cache keeps them, in a copy the run waits for anyway.)"""
    from engine.kv import store as store_module
    from tests.fake_cuda import Fakes

    trace(tiny, PROMPT, policy, cached=True)
    emulated = trace(tiny, PROMPT, policy, cached=True)
    fakes = Fakes()
    monkeypatch.setattr(store_module, "streams_for", fakes.streams_for)
    fakes.on = True
    cuda = trace(tiny, PROMPT, policy, cached=True)
    assert prefill_of(cuda[0]).cached_tokens == 32
    assert_same_run(emulated, cuda)
    assert not [copy for copy in fakes.made[-1].unpinned if copy.startswith("h2d")]
