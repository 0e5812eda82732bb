"""The GPU ladder script runs on any machine with --plan-only: the 7B workload's bytes and peaks, no weights."""

from __future__ import annotations

import json

import pytest

from benchmarks.gpu_ladder import WORKLOADS, main


def test_the_ladder_plans_a_workload_and_writes_its_json(tmp_path, capsys):
    out = tmp_path / "w16.json"
    policies = ["in_device", "layerwise", "lbs:inter_token"]
    assert main(["w16", "--plan-only", "--policies", ",".join(policies), "--baselines", "", "--json", str(out)]) == 0
    printed = capsys.readouterr()
    table = printed.out
    assert "synthetic:llama2-7b (bfloat16) on meta (plan only)" in table and f"wrote {out}" in table
    assert "[ladder w16] layerwise: H2D 186.4 GB, peak 2.0 GB on the device" in printed.err  # each row as it ends
    data = json.loads(out.read_text())
    assert data["workload_name"] == "w16" and data["plan_only"] is True and data["baselines"] == []
    assert data["workload"]["beams"] == WORKLOADS["w16"].beams
    results = {r["name"]: r for r in data["results"]}
    assert list(results) == policies and all(r["ok"] for r in results.values())
    assert results["lbs:inter_token"]["h2d_bytes"] < results["layerwise"]["h2d_bytes"]
    assert results["layerwise"]["h2d_bytes_eq1"] < results["layerwise"]["h2d_bytes"]
    assert all(r["peak_device_bytes"] <= WORKLOADS["w16"].kv_budget_bytes for r in results.values())


def test_the_speculation_workload_picks_its_delimiter_and_runs_its_four_policies(tmp_path, capsys):
    """`spec` (issue 14) asks for an automatic delimiter, which a plan cannot sample: a plan names one."""
    assert WORKLOADS["spec"].step_delimiter == "auto" and WORKLOADS["spec"].model == "synthetic:llama2-7b"
    assert main(["spec", "--plan-only"]) == 2
    assert "--step-delimiter TEXT" in capsys.readouterr().err
    out = tmp_path / "spec.json"
    assert main(["spec", "--plan-only", "--step-delimiter", "c", "--json", str(out)]) == 0
    assert "steps of 64 ending at 'c'" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["workload"]["step_delimiter"] == "c" and data["baselines"] == [] and data["step_delimiter_auto"] is None
    names = [r["name"] for r in data["results"]]
    assert names == ["in_device", "in_device:+speculative", "lbs:+prefix_order", "lbs:+speculative"]
    assert all(r["ok"] for r in data["results"])


def test_the_long_workload_times_head_wise_and_layer_wise_beside_the_offloaded_cache(monkeypatch, capsys):
    """`long`: a prompt whose one candidate's KV (Llama-2-7B: 512 kB a token in bf16) is over the budget, so lbs
    and in_device cannot run it; by default it times head-wise and layer-wise, and transformers' offloaded cache."""
    from benchmarks import gpu_ladder

    long = WORKLOADS["long"]
    assert long.prompt_tokens * 2 * 32 * 32 * 128 * 2 > long.kv_budget_bytes
    asked = {}

    def refuse(workload, policies, **options):
        asked.update(workload=workload, policies=policies, **options)
        raise ValueError("stopped before loading")

    monkeypatch.setattr(gpu_ladder, "run_bench", refuse)
    assert main(["long"]) == 2 and "stopped before loading" in capsys.readouterr().err
    assert asked["workload"] == long and asked["policies"] == ["headwise", "layerwise"]
    assert asked["baselines"] == ["generate:offloaded"] and asked["plan_only"] is False


def test_the_ladder_saves_its_json_after_every_row_and_a_time_limit_ends_it_by_itself(monkeypatch, tmp_path, capsys):
    """A ladder the device tool kills keeps the rows it finished; one given --time-limit ends with them all."""
    from benchmarks import gpu_ladder
    from engine.bench import Workload

    tiny = Workload(beams=2, width=2, step_tokens=4, prompt_tokens=16, gen_tokens=8)
    monkeypatch.setitem(gpu_ladder.WORKLOADS, "w16", tiny)
    written = []
    real_write = gpu_ladder.write_json

    def record(path, data, announce=True):
        written.append((data.get("complete"), [r["name"] for r in data.get("results", [])]))
        real_write(path, data, announce)

    monkeypatch.setattr(gpu_ladder, "write_json", record)
    out = tmp_path / "w16.json"
    assert main(["w16", "--policies", "in_device,lbs:inter_token", "--baselines", "", "--json", str(out)]) == 0
    assert written == [(False, []), (False, ["in_device"]), (False, ["in_device", "lbs:inter_token"]),
                       (True, ["in_device", "lbs:inter_token"])]  # fmt: skip
    assert json.loads(out.read_text())["complete"] is True and not (tmp_path / "w16.json.part").exists()

    assert main(["w16", "--policies", "in_device", "--time-limit", "0.001", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["complete"] is True and data["time_limit_seconds"] == 0.001
    assert [(r["name"], r["ok"], r["timed_out"]) for r in data["results"]] == [("in_device", False, True)]
    assert all(not b["timed_out"] and "only on CUDA" in b["message"] for b in data["baselines"])  # the CPU's reason
    assert "stopped or did not start" in capsys.readouterr().out


def test_the_ladder_refuses_an_unknown_baseline_before_it_writes_or_runs(monkeypatch, tmp_path, capsys):
    from benchmarks import gpu_ladder

    monkeypatch.setattr(gpu_ladder, "run_bench", lambda *a, **k: pytest.fail("ran with an unknown baseline"))
    out = tmp_path / "w16.json"
    assert main(["w16", "--plan-only", "--baselines", "vllm", "--json", str(out)]) == 2
    assert "unknown baselines ['vllm']; choose from generate, generate:offloaded" in capsys.readouterr().err
    assert not out.exists()


def test_the_ladder_refuses_an_unwritable_json_path_before_it_runs(monkeypatch, tmp_path, capsys):
    from benchmarks import gpu_ladder

    monkeypatch.setattr(gpu_ladder, "run_bench", lambda *a, **k: pytest.fail("ran before checking --json"))
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["w16", "--plan-only", "--json", str(blocker / "w16.json")]) == 2
    assert "cannot write" in capsys.readouterr().err


def test_the_ladder_runs_the_outside_baselines_after_the_policy_it_is_given(monkeypatch, tmp_path, capsys):
    """--baselines-after: a time limit then stops the slow rows after it, not the baselines (CPU: each baseline's row
    says why it did not run, in the place it would have run)."""
    from benchmarks import gpu_ladder
    from engine.bench import Workload

    monkeypatch.setitem(WORKLOADS, "w16", Workload(beams=2, width=2, step_tokens=4, prompt_tokens=16, gen_tokens=8))
    rows = []
    real_save = gpu_ladder.write_json

    def record(path, data, announce=True):
        rows.append(([r["name"] for r in data.get("results", [])], [b["name"] for b in data.get("baselines", [])]))
        real_save(path, data, announce)

    monkeypatch.setattr(gpu_ladder, "write_json", record)
    out = tmp_path / "w16.json"
    args = ["w16", "--policies", "in_device,lbs:inter_token", "--baselines", "generate", "--json", str(out)]
    assert main([*args, "--baselines-after", "in_device"]) == 0
    assert rows == [([], []), (["in_device"], []), (["in_device"], ["generate"]),
                    (["in_device", "lbs:inter_token"], ["generate"]), (["in_device", "lbs:inter_token"], ["generate"])]
    assert "only on CUDA" in json.loads(out.read_text())["baselines"][0]["message"]
    assert main([*args, "--baselines-after", "layerwise"]) == 2
    assert "after 'layerwise', which is not one of the policies (in_device, lbs:inter_token)" in capsys.readouterr().err
