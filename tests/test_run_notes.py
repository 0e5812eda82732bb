"""What a run, `bench --max-context` and the prefix cache's disk tier tell or clean up: --speculative turned off
by auto's pick is said at the start, a method that fits no context says why, and a killed write's temporary file
is removed once stale."""

from __future__ import annotations

import io
import os
import time

import pytest
import torch

from app.cli import main
from app.run_printer import Printer
from engine import events as ev
from engine.config import speculation_off_note
from engine.context_plan import max_context, model_facts, why_no_context
from engine.kv import prefix_disk
from engine.synthetic import parameter_count, synthetic_config

GB = 10**9
NOTE = "auto picked headwise, which does not speculate: --speculative is off for this run"


def started(policy: str, requested: str, speculative: bool) -> ev.RunStarted:
    return ev.RunStarted("q", "m", "logprob", "cpu (emulated GPU)", True, policy, 2_000_000, {"method": "beam"},
                         {"policy": requested, "speculative": speculative})  # fmt: skip


@pytest.mark.parametrize(("policy", "requested", "speculative", "said"), [
    ("headwise", "auto", True, True), ("layerwise", "auto", True, True), ("lbs", "auto", True, False),
    ("in_device", "auto", True, False), ("headwise", "auto", False, False), ("headwise", "headwise", True, False),
])  # fmt: skip
def test_speculative_turned_off_by_autos_pick_is_said_at_the_start(capsys, policy, requested, speculative, said):
    note = speculation_off_note(requested, policy, speculative)
    assert (note is not None) == said
    Printer(io.StringIO())(started(policy, requested, speculative))
    err = capsys.readouterr().err
    if said:
        assert f"beamwise: note: auto picked {policy}, which does not speculate: --speculative is off" in err
    else:
        assert "does not speculate" not in err


def test_a_run_that_auto_puts_on_headwise_says_speculation_is_off(capsys):
    """The walkthrough's run, on the tiny model: a budget only head-wise fits."""
    code = main(["run", "What is 7 x 8?", "--model", "synthetic:tiny-llama", "--speculative", "--beams", "2",
                 "--width", "2", "--max-steps", "1", "--step-tokens", "4", "--kv-budget", "100kB", "--no-save",
                 "--no-prefix-cache"])
    out, err = capsys.readouterr()
    assert code == 0 and "policy headwise" in out, out + err
    assert f"beamwise: note: {NOTE}" in err


@pytest.fixture(scope="module")
def llama3():
    config = synthetic_config("llama3-8b")
    return model_facts(config, 2, parameter_count(config))


def test_weights_past_the_gpu_say_why_no_context_fits(llama3, capsys):
    results = max_context(llama3, 1 * GB, 64 * GB)
    assert [r.tokens for r in results] == [0, 0, 0] and results[2].chunk is None
    assert why_no_context(llama3, 1 * GB, 64 * GB, results) == (
        "the weights, 16.1 GB, do not fit the 1.0 GB GPU, so no context does: every method keeps the weights on "
        "the GPU beside its KV")
    assert main(["bench", "--plan-only", "--max-context", "--model", "synthetic:llama3-8b", "--gpu-memory", "1GB",
                 "--host-ram", "64GB"]) == 0  # fmt: skip
    assert capsys.readouterr().out.splitlines()[-1].startswith("note: the weights, 16.1 GB, do not fit")


def test_host_ram_below_one_token_says_why_the_offloading_methods_fit_none(llama3):
    results = max_context(llama3, 24 * GB, 100_000)
    assert results[0].tokens > 0 and results[1].tokens == results[2].tokens == 0
    assert why_no_context(llama3, 24 * GB, 100_000, results) == (
        "layer-wise and head-wise keep the KV in host RAM, and 100.0 kB holds not one token's KV (131.1 kB)")


def test_every_method_fitting_some_context_says_nothing(llama3):
    assert why_no_context(llama3, 24 * GB, 64 * GB, max_context(llama3, 24 * GB, 64 * GB)) is None


def test_a_killed_writes_temporary_file_is_removed_once_stale(tmp_path):
    kv = torch.zeros(2, 2, 1, 4, 3)
    prefix_disk.write_block(tmp_path, b"\x01" * 16, 0, (1, 2, 3, 4), kv)
    stale = tmp_path / f".d0-{'ab' * 16}.12345.0badf00d.tmp"  # write_block's name for a write that never ended
    fresh = tmp_path / f".d1-{'cd' * 16}.{os.getpid()}.0123abcd.tmp"  # a write under way
    stranger = tmp_path / "notes.tmp"
    for path in (stale, fresh, stranger):
        path.write_bytes(b"x" * 100)
    hour_ago = time.time() - prefix_disk.STALE_TEMP_S - 5
    for path in (stale, stranger):
        os.utime(path, (hour_ago, hour_ago))
    blocks = prefix_disk.scan(tmp_path)
    assert [b.depth for b in blocks] == [0]
    assert not stale.exists() and fresh.exists() and stranger.exists()
