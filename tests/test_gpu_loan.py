"""The one-command GPU loan: its plan, its deadline and the files it leaves, checked on the CPU."""

from __future__ import annotations

import json
import sys

import pytest

from benchmarks import gpu_ladder, gpu_loan


def test_the_loan_asks_the_ladder_for_the_targets_rows_with_the_baselines_before_the_slow_ones(
    tmp_path, capsys, monkeypatch
):
    assert gpu_loan.main(["--out", str(tmp_path), "--seconds", "420", "--dry-run"]) == 0
    ladder_line, tests_line = capsys.readouterr().out.splitlines()
    assert ladder_line.startswith("ladder, at most 330 s: ") and tests_line.startswith(
        "tests, what is left (at least 90 s)"
    )
    ladder, _ = gpu_loan.plan(tmp_path, 420, 90)
    assert ladder.command[:4] == [sys.executable, "-m", "benchmarks.gpu_ladder", "w64"]
    asked = {}

    def record(workload, policies, **options):
        asked.update(workload=workload, policies=policies, **options)
        return object()

    monkeypatch.setattr(gpu_ladder, "run_bench", record)
    monkeypatch.setattr(gpu_ladder, "format_report", lambda report: "")
    monkeypatch.setattr(gpu_ladder, "_named", lambda name, report: {})
    assert gpu_ladder.main(ladder.command[3:]) == 0  # the ladder takes every argument the loan gives it
    assert asked["workload"] == gpu_ladder.WORKLOADS["w64"]
    assert asked["policies"] == ["in_device", "lbs:+prefix_order", "layerwise", "lbs:inter_token"]
    assert asked["baselines"] == ["generate", "generate:offloaded"] and asked["baselines_after"] == "lbs:+prefix_order"
    assert asked["time_limit"].seconds == 420 - 90 - gpu_loan.STOP_GRACE - gpu_loan.IMPORTS and not asked["plan_only"]
    assert not (tmp_path / "loan.json").exists()  # a dry run writes nothing


def test_a_loan_too_short_for_the_ladder_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        gpu_loan.main(["--out", str(tmp_path), "--seconds", "150"])
    assert "--seconds must leave the ladder a minute" in capsys.readouterr().err


def test_without_cuda_the_loan_says_what_is_missing_and_runs_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(gpu_loan, "run_step", lambda *a: pytest.fail("ran a step without CUDA"))
    assert gpu_loan.main(["--out", str(tmp_path)]) == 2  # this CPU has no CUDA device
    err = capsys.readouterr().err
    assert "missing: a CUDA device" in err and "pip download" not in err  # wheels would not bring a GPU
    assert json.loads((tmp_path / "loan.json").read_text())["machine"]["python"]


def test_a_package_only_the_tests_need_leaves_the_ladder_to_run_alone(tmp_path, capsys, monkeypatch):
    """sqlite_utils imports dateutil and click, which the carried wheels did not hold: the whole loan stopped at
    its checks, where the ladder needs neither."""
    real_import = gpu_loan.importlib.import_module

    def no_dateutil(name):
        if name == "sqlite_utils":
            raise ImportError("No module named 'dateutil'")
        return real_import(name)

    machine, missing = gpu_loan.machine_checks(no_dateutil)
    assert machine["torch"] and "sqlite_utils" not in machine
    assert machine["tests_missing"] == ["sqlite_utils (No module named 'dateutil')"]
    assert not any(m.startswith("sqlite_utils") for m in missing)
    ran = []
    monkeypatch.setattr(gpu_loan, "machine_checks", lambda: ({"device": "fake", "tests_missing": ["pytest (x)"]}, []))
    monkeypatch.setattr(gpu_loan, "run_step", lambda step, log, left: ran.append(step.name))
    monkeypatch.setattr(gpu_loan, "targets", lambda out: "targets")
    gpu_loan.main(["--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert ran == ["ladder"] and "the CUDA tests not run: missing pytest (x)" in err and "python-dateutil" in err
    tests = json.loads((tmp_path / "loan.json").read_text())["steps"][1]
    assert tests["status"] is None and tests["note"] == "not run: missing pytest (x)"


def test_the_loan_runs_its_steps_kills_one_at_its_deadline_and_keeps_every_file(tmp_path, capsys, monkeypatch):
    """Real child processes: the ladder's stand-in writes a report the targets read; the tests' stand-in
    outlives its seconds and is killed; loan.json and the logs keep what each did."""
    report = {"workload_name": "w64", "device": "cuda", "plan_only": False, "complete": True,
              "results": [{"name": "in_device", "ok": True, "wall_seconds": 4.0},
                          {"name": "lbs:+prefix_order", "ok": True, "wall_seconds": 4.4, "stall_share": 0.01}],
              "baselines": [{"name": "generate", "ok": True, "wall_seconds": 5.0}]}  # fmt: skip
    target = tmp_path / "w64.json"
    write = f"import pathlib; pathlib.Path({str(target)!r}).write_text({json.dumps(report)!r}); print('row in')"
    linger = "import time; print('testing', flush=True); time.sleep(60)"
    steps = [gpu_loan.Step("ladder", [sys.executable, "-c", write], 60, "w64.log"),
             gpu_loan.Step("tests", [sys.executable, "-c", linger], 3, "gpu-tests.log")]  # fmt: skip
    monkeypatch.setattr(gpu_loan, "plan", lambda out, seconds, test_seconds: steps)
    monkeypatch.setattr(gpu_loan, "machine_checks", lambda: ({"device": "fake"}, []))
    assert gpu_loan.main(["--out", str(tmp_path)]) == 1  # the killed tests make it fail
    assert (tmp_path / "w64.log").read_text() == "row in\n" and (tmp_path / "gpu-tests.log").read_text() == "testing\n"
    loan = json.loads((tmp_path / "loan.json").read_text())
    ladder, tests = loan["steps"]
    assert ladder["status"] == 0 and tests["status"] != 0 and tests["note"] == "killed after 3 s"
    assert 3 <= tests["seconds"] < 30
    table = (tmp_path / "targets.md").read_text()
    assert "| 9 | in_device at least as fast as plain generate (1.0x) | w64 | 1.25x | met |" in table
    assert "| 9 | lbs (every switch) within 1.2x of in_device | w64 | 1.10x | met |" in table
    assert "no generate:offloaded row" in table  # a row the ladder did not reach says so
    assert "ladder exit 0, tests exit -9" in capsys.readouterr().out


def test_a_step_with_no_time_left_is_not_started(tmp_path):
    step = gpu_loan.Step("tests", [sys.executable, "-c", "raise SystemExit(3)"], 90, "log")
    gpu_loan.run_step(step, tmp_path / "log", seconds_left=2)
    assert step.status is None and step.note == "not run: 2 s of the loan were left"
    assert not (tmp_path / "log").exists()
    assert gpu_loan.targets(tmp_path) == "no w64.json: the ladder wrote no row (see w64.log)"
