"""A Stop while the model reads the question (the prefill) ends the run at the next chunk, cancelled before step 1,
with its KV freed as after any cancel: before, the prefill never asked, so Esc, Stop, Ctrl+C and closing the window
waited for the whole prompt (over a minute for a long question on a CPU)."""

from __future__ import annotations

import os
import signal

import pytest

import engine.search as search_module
from app.cli import main
from engine import events as ev
from engine.config import CacheConfig
from engine.errors import PrefillStopped
from engine.kv.blocks import Tier
from engine.kv.cache import KVCache
from engine.runner import prefill
from engine.search import run
from tests.test_prefix_cache import BLOCK, POLICIES, PROMPT, SEARCH, cache_dir  # noqa: F401  (a fixture)

CHUNK = 10  # the prompt's 47 tokens with KV: 5 chunks, 2 after a cached prefix of 32




@pytest.fixture
def made(monkeypatch) -> list[KVCache]:
    """Every KV cache the search makes, kept to look at once the run is over."""
    kept: list[KVCache] = []

    class Kept(KVCache):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            kept.append(self)

    monkeypatch.setattr(search_module, "KVCache", Kept)
    return kept


def events_of(tiny, policy: str, cached: bool, stop) -> list:
    """The run's events; `stop(seen)` is its should_stop, shown the events so far."""
    cache = CacheConfig(policy=policy, block_size=BLOCK, prefix_cache=cached, prefill_chunk=CHUNK)
    seen: list = []
    seen.extend(run("", tiny, SEARCH, cache, prompt_ids=PROMPT, should_stop=lambda: stop(seen)))
    return seen


def in_step_1(seen: list) -> bool:
    return any(e.type == "step_started" for e in seen)


def never(seen: list) -> bool:
    return False


def left_over(kv: KVCache) -> dict:
    """What a closed KV cache still holds: candidates, blocks, slots, pool memory, the prefix cache's pins."""
    store = kv.store
    return {
        "live": dict(kv.live),
        "blocks": dict(kv.blocks.blocks),
        "resident": [store.resident_bytes(tier) for tier in Tier],
        "runs": dict(store._run_users),
        "pool chunks": [len(pool._chunks) for pool in store.pools.values()],
        "pins": dict(kv.prefix.pins) if kv.prefix is not None else {},
        "pinned": list(kv._pinned),
    }


@pytest.mark.usefixtures("cache_dir")
@pytest.mark.parametrize("cached", [False, True])
@pytest.mark.parametrize("policy", POLICIES)
def test_a_stop_in_the_prefill_cancels_the_run_before_step_1_at_the_next_chunk(tiny, forwards, made, policy,
                                                                                cached):  # fmt: skip
    if cached:
        assert events_of(tiny, policy, True, never)[-1].type == "run_finished"  # keeps the prompt's blocks
    stopped_in_step_1 = events_of(tiny, policy, cached, in_step_1)  # a normal cancel, to compare with
    forwards[0] = 0
    events = events_of(tiny, policy, cached, lambda seen: forwards[0] > 0)  # true once the first chunk has run

    assert forwards[0] == 1  # no chunk after the stop, and no step
    assert [e.type for e in events] == ["run_started", "run_cancelled"]
    assert events[-1] == ev.RunCancelled(0)
    kv = made[-1]
    assert left_over(kv) == left_over(made[-2]) == {
        "live": {}, "blocks": {}, "resident": [0, 0], "runs": {}, "pool chunks": [0, 0], "pins": {}, "pinned": [],
    }  # as after a run stopped in its first step
    assert stopped_in_step_1[-1] == ev.RunCancelled(0)
    if cached:  # the half computed prompt went to no prefix cache: the next run finds the blocks kept before
        again = events_of(tiny, policy, True, never)
        assert next(e for e in again if e.type == "prefill_done").cached_tokens == 32


@pytest.mark.usefixtures("cache_dir")
@pytest.mark.parametrize("policy", POLICIES)
def test_a_stop_before_the_prefill_computes_nothing(tiny, forwards, made, policy):
    """Asked before the prompt's first chunk (while the verifier loaded, or the cached prefix was read): no forward."""
    events = events_of(tiny, policy, True, lambda seen: True)
    assert forwards[0] == 0 and [e.type for e in events] == ["run_started", "run_cancelled"]
    assert left_over(made[-1])["blocks"] == {} and left_over(made[-1])["pins"] == {}


def test_the_chunk_loop_asks_before_each_chunk(tiny, forwards):
    asked = []

    def stop() -> bool:
        asked.append(forwards[0])
        return forwards[0] == 2

    with pytest.raises(PrefillStopped) as stopped:
        prefill(tiny.model, PROMPT, tiny.device, chunk=CHUNK, should_stop=stop)
    assert asked == [0, 1, 2] and stopped.value.tokens == 2 * CHUNK
    _, logits = prefill(tiny.model, PROMPT, tiny.device, chunk=CHUNK, should_stop=lambda: False)
    assert logits.shape == (tiny.model.config.vocab_size,)


def ctrl_c_in_the_first_chunk(monkeypatch) -> list[int]:
    """A Ctrl+C (SIGINT to this process) as the prefill's first chunk ends, in every run from now on; returns the
    count of the model's forward calls in the prefills, filled as they run."""
    real, calls = search_module.prefill, [0]

    def ctrl_c_after_the_first_chunk(module, *_):
        calls[0] += 1
        if calls[0] == 1:
            os.kill(os.getpid(), signal.SIGINT)

    def prefill_with_ctrl_c(model, *args, **kwargs):
        handle = model.register_forward_hook(ctrl_c_after_the_first_chunk)
        try:
            return real(model, *args, **kwargs)
        finally:
            handle.remove()

    monkeypatch.setattr(search_module, "prefill", prefill_with_ctrl_c)
    return calls


def test_ctrl_c_while_the_model_reads_the_question_exits_130_before_step_1(tiny, capsys, monkeypatch, tmp_path):
    """The first Ctrl+C lands in the prefill's first chunk; the run ends at the next chunk, recorded cancelled."""
    calls = ctrl_c_in_the_first_chunk(monkeypatch)
    question = "The cat sat on the mat. " * 20
    code = main(["run", question, "--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2",
                 "--step-tokens", "4", "--max-steps", "1", "--prefill-chunk", "8", "--db", str(tmp_path / "s.db")])
    out, err = capsys.readouterr()
    assert code == 130 and calls[0] == 1, err
    assert "prompt:" not in out and "== step 1" not in out and "cancelled after step 0" in out
    assert "beamwise: stopping: no step has begun yet: the run ends before step 1" in err  # no step to drop or keep
    assert "cancelled after step 0" in err.strip().splitlines()[-1]
