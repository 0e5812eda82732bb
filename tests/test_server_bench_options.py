"""`bench --backend openai`: each option the server's bench does not apply is refused in one line before any
request, and the KV options a user gives for the search here are what that search runs with (and what --json
records). Before, --plan-only, --policies, --kv-budget, --time-limit and the rest were taken without a word, exit 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import app.bench_remote as bench_remote
from app.bench_remote import local_cache, workload_record
from app.cli import main
from engine.config import CacheConfig
from engine.workload import Workload
from tests.fake_openai import MODEL, FakeServer
from tests.test_server_as_a_user import one_error

QUESTION = "A train travels 60 km in 45 minutes. What is its average speed in km/h?"


def server_bench(url: str, *extra: str) -> list[str]:
    return ["bench", "--backend", "openai", "--server", url, "--served-model", MODEL, "--model", "synthetic:tiny-llama",
            "--question", QUESTION, "--beams", "1", "--width", "2", "--step-tokens", "8", "--gen-tokens", "8",
            "--request-timeout", "2", *extra]


@pytest.mark.parametrize("given, named", [
    (["--plan-only"], "--plan-only"),
    (["--plan-only", "--max-context", "--gpu-memory", "24GB", "--host-ram", "64GB"],
     "--plan-only, --max-context, --gpu-memory, --host-ram"),
    (["--policies", "lbs:+prefix_order"], "--policies"),
    (["--baselines", ""], "--baselines"),
    (["--time-limit", "5"], "--time-limit"),
    (["--prompt-tokens", "9"], "--prompt-tokens"),
    (["--lookahead-verify"], "--lookahead-verify"),
    (["--prm", "synthetic:tiny-qwen-prm"], "--prm"),
    (["--policies", "in_device", "--time-limit", "5"], "--policies, --time-limit"),
])  # fmt: skip
@pytest.mark.parametrize("no_local", [[], ["--no-local"]])
def test_the_ladders_options_are_refused_before_any_request(capsys, given, named, no_local) -> None:
    with FakeServer() as server:
        code = main([*server_bench(server.url), *no_local, *given])
        assert not server.requests
    line = one_error(capsys)
    assert code == 2 and f"does not use {named}: leave" in line, line
    assert "or leave out --backend openai to compare the policies here." in line


@pytest.mark.parametrize("given, named", [
    (["--kv-budget", "1MB"], "--kv-budget sets"),
    (["--pcie-gbps", "8"], "--pcie-gbps sets"),
    (["--speculative"], "--speculative sets"),
    (["--dtype", "bfloat16", "--block-size", "8", "--prefix-order"], "--dtype, --block-size, --prefix-order set"),
])  # fmt: skip
def test_the_options_of_the_search_here_are_refused_with_no_local(capsys, given, named) -> None:
    with FakeServer() as server:
        code = main([*server_bench(server.url), "--no-local", *given])
        assert not server.requests
    line = one_error(capsys)
    assert code == 2 and f"{named} the search here, and --no-local leaves it out" in line, line


def test_an_auto_delimiter_is_refused_not_sent_to_the_server_as_text(capsys) -> None:
    """Before, the server stopped each step at the text "auto", which a local bench resolves in a warm-up."""
    with FakeServer() as server:
        code = main([*server_bench(server.url), "--no-local", "--step-delimiter", "auto"])
        assert not server.requests
    line = one_error(capsys)
    assert code == 2 and "--step-delimiter auto" in line and "give the delimiter itself" in line, line


def test_the_search_here_runs_with_the_kv_options_given(capsys, tmp_path: Path, monkeypatch) -> None:
    """Before, it ran on CacheConfig()'s defaults while --json recorded kv_budget_bytes as if it had been used."""
    caches: list[CacheConfig] = []

    def kept(workload: Workload) -> CacheConfig:
        caches.append(local_cache(workload))
        return caches[-1]

    monkeypatch.setattr(bench_remote, "local_cache", kept)
    report = tmp_path / "remote.json"
    with FakeServer() as server:
        code = main([*server_bench(server.url), "--kv-budget", "64MB", "--pcie-gbps", "8", "--block-size", "8",
                     "--no-prefix-order", "--json", str(report)])
    assert code == 0, capsys.readouterr()
    (cache,) = caches
    assert (cache.kv_budget_bytes, cache.pcie_gbps, cache.block_size, cache.prefix_order) == (64_000_000, 8.0, 8,
                                                                                              False)
    assert cache.policy == CacheConfig().policy == "auto"  # as `run` picks it
    written = json.loads(report.read_text(encoding="utf-8"))
    assert [r["backend"] for r in written["runs"]] == ["openai", "local"] and all(r["ok"] for r in written["runs"])
    assert written["workload"]["kv_budget_bytes"] == 64_000_000 and written["workload"]["question"] == QUESTION
    assert "prompt_tokens" not in written["workload"]  # the question is asked, not random tokens


def test_switches_left_out_leave_the_policys_own_choice() -> None:
    assert local_cache(Workload()) == CacheConfig()


def test_no_local_records_no_field_of_the_search_here() -> None:
    record = workload_record(Workload(kv_budget_bytes=1_000_000), "Q?", local=False)
    assert "kv_budget_bytes" not in record and "model" not in record and "dtype" not in record
    assert (record["beams"], record["question"]) == (Workload().beams, "Q?")
