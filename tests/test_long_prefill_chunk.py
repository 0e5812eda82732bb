"""A long question on the CPU: the automatic prefill chunk is at most CPU_CHUNK there (a Stop is checked between
chunks, and the budget-sized 4,096 tokens took 27 s on the bundled model), CUDA's stays sized to the budget, a typed
--prefill-chunk is used as typed; while a Stop waits for the chunk being read, the progress line says so, and with
--no-save the stop line does not say the run is recorded."""

from __future__ import annotations

import os
import signal
from threading import Event
from types import SimpleNamespace

import pytest

from app.cli import main
from app.heartbeat import StepProgress
from app.run_cli import _ctrl_c_cancels
from engine.config import CacheConfig, SearchConfig
from engine.context_plan import CPU_CHUNK, MAX_CHUNK, activation_token_bytes, default_chunk
from engine.kv.cache import KVCache
from tests.test_prefill_stop import ctrl_c_in_the_first_chunk

SEARCH = SearchConfig(beams=2, width=2, step_tokens=8, max_steps=1)


def test_the_automatic_chunk_is_capped_on_the_emulated_device_only():
    act = 29_184  # the bundled model's activations of one position (float32)
    assert default_chunk(500_000_000, act) == MAX_CHUNK == 4096  # CUDA: sized to the budget, as before
    assert default_chunk(500_000_000, act, emulated=True) == CPU_CHUNK <= 1024
    assert default_chunk(64 * 4 * act, act, emulated=True) == 64  # a budget that fits less: still its own size


@pytest.mark.parametrize(("typed", "used"), [(None, CPU_CHUNK), (4096, 4096), (100, 100)])
def test_a_long_questions_run_on_the_cpu_reads_it_in_short_chunks_unless_one_is_typed(tiny, typed, used):
    cache = CacheConfig(policy="in_device", prefill_chunk=typed, kv_budget_bytes=200_000_000)
    kv = KVCache(tiny, SEARCH, cache, 1500, decode=None, prefill=None)
    try:
        assert kv.emulated and kv.prefill_chunk == used
        act = activation_token_bytes(tiny.model.config, 4)
        assert default_chunk(kv.budget, act) > CPU_CHUNK  # the budget alone would have made it longer
    finally:
        kv.close()


def test_the_progress_line_says_the_stop_waits_for_the_chunk_being_read(capsys):
    progress, stop = StepProgress(clock=lambda: 0.0), Event()
    progress.apply(SimpleNamespace(type="run_started", search={"beams": 2, "width": 2}))
    assert progress.line().startswith("reading the question")
    with _ctrl_c_cancels(stop, lambda: True, lambda: True, recorded=False, reading=progress.stop_asked):
        os.kill(os.getpid(), signal.SIGINT)
    assert stop.is_set()
    assert progress.line().startswith("stopping after the chunk of the question being read")
    err = capsys.readouterr().err
    assert "the run ends before step 1 and nothing is recorded (--no-save)" in err and "recorded cancelled" not in err


def test_ctrl_c_before_step_1_with_no_save_says_nothing_is_recorded(tiny, capsys, monkeypatch):
    """It said "the run ends before step 1 and is recorded cancelled", where --no-save records nothing."""
    calls = ctrl_c_in_the_first_chunk(monkeypatch)
    code = main(["run", "The cat sat on the mat. " * 20, "--model", "synthetic:tiny-llama", "--beams", "2",
                 "--width", "2", "--step-tokens", "4", "--max-steps", "1", "--prefill-chunk", "8", "--no-save"])
    err = capsys.readouterr().err
    assert code == 130 and calls[0] == 1, err
    assert "beamwise: stopping: no step has begun yet: the run ends before step 1 and nothing is recorded " \
           "(--no-save)" in err
    assert "recorded" not in err.replace("nothing is recorded", "")
