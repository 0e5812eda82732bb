"""The plan of a long question: head-wise's figures come from its closed form with no plan-only run (a 3,000-token
question's head-wise plan took 38 s, 30 of them in a plan-only run whose figures it did not use), and the
activations row counts one prefill chunk, the one the run reads the question in, not the whole prompt."""

from __future__ import annotations

import pytest

from app import planner
from app.planner import HEADWISE_SOURCE, DeviceInfo, plan
from engine.config import CacheConfig, ModelSpec, SearchConfig
from engine.context_plan import CPU_CHUNK, activation_token_bytes, default_chunk
from engine.kv.cache import CUDA_MARGIN, KVCache
from engine.models import model_config

TINY = ModelSpec("synthetic:tiny-llama")
EMULATED = DeviceInfo("cpu (emulated GPU)", True, 16_000_000_000)
CARD = DeviceInfo("cuda (24 GB card)", False, 24_000_000_000)
SEARCH = SearchConfig(beams=2, width=2, step_tokens=8, max_steps=2)
LONG = "The cat sat on the mat and looked at the dog. " * 20  # 700 tokens or so


def _act() -> int:
    return activation_token_bytes(model_config(TINY.source), 4)


def _logits(p) -> int:
    return p.candidates * p.generator.vocab_size * 4


def test_a_headwise_plan_runs_no_plan_only_run(monkeypatch):
    def no_plan_only_run(*args, **kwargs):
        raise AssertionError("head-wise ran a plan-only run")

    monkeypatch.setattr(planner, "planned_run", no_plan_only_run)
    p = plan(TINY, SEARCH, CacheConfig(policy="headwise", kv_budget_bytes=1_000_000), question=LONG, device=EMULATED)
    assert p.traffic_source == HEADWISE_SOURCE and p.step_pcie_bytes > 0 and p.state == "amber"
    red = plan(TINY, SEARCH, CacheConfig(policy="headwise", kv_budget_bytes=20_000), question=LONG, device=EMULATED)
    assert red.state == "red" and red.sentence.startswith("It cannot run with these settings: ")
    assert "one KV head of the prompt (headwise)" in red.sentence


def test_the_activations_are_one_chunks_not_the_whole_prompts():
    short, long = (plan(TINY, SEARCH, CacheConfig(kv_budget_bytes=50_000_000), question=q, device=EMULATED)
                   for q in ("What is 2+3?", LONG))
    assert short.prompt_tokens < CPU_CHUNK < long.prompt_tokens
    assert short.activation_bytes == _logits(short) + short.prompt_tokens * _act()  # shorter than a chunk
    assert long.activation_bytes == _logits(long) + CPU_CHUNK * _act()  # it grew with the whole prompt
    typed = plan(TINY, SEARCH, CacheConfig(kv_budget_bytes=50_000_000, prefill_chunk=64), question=LONG,
                 device=EMULATED)
    assert typed.activation_bytes == _logits(typed) + 64 * _act()


@pytest.mark.parametrize(("budget", "chunk"), [(50_000_000, None), (300_000, None), (50_000_000, 32)])
def test_the_plans_chunk_is_the_runs(tiny, budget, chunk):
    cache = CacheConfig(policy="lbs", kv_budget_bytes=budget, prefill_chunk=chunk)
    p = plan(TINY, SEARCH, cache, question=LONG, device=EMULATED)
    kv = KVCache(tiny, SEARCH, cache, p.prompt_tokens, decode=None, prefill=None)
    try:
        assert p.activation_bytes == _logits(p) + min(kv.prefill_chunk, p.prompt_tokens) * _act()
    finally:
        kv.close()


def test_on_a_gpu_without_a_budget_the_chunk_is_the_one_its_reserve_leaves_room_for():
    p = plan(TINY, SEARCH, CacheConfig(), question=LONG, device=CARD)
    chunk = default_chunk(CARD.memory_bytes - CUDA_MARGIN, _act())  # engine/kv/cache.py's prefill reserve
    assert chunk > CPU_CHUNK  # a GPU's is not capped
    assert p.activation_bytes == _logits(p) + min(chunk, p.prompt_tokens) * _act()
