"""benchmarks/gpu_targets.py: the GPU ladder's JSON read against issue 9's and 14's targets (the stored H100 run,
workloads split over files, CPU reports that cannot say, and files that are not reports)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.gpu_targets import load_runs, main, verdicts
from engine.bench import Workload, run_bench

H100 = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "h100-2026-11-23"


def by_target(found) -> dict[str, tuple[str, float | None]]:
    return {v.target.what: (v.status, v.figure) for v in found}


def test_the_stored_h100_run_reads_as_benchmarks_md_says():
    """BENCHMARKS.md, "Measured on an H100": lbs 4.35x the offloaded cache (6x not met), 1.10x in_device, in_device
    1.25x faster than generate, layer-wise 3.3x slower than the offloaded cache, no stalls."""
    found = by_target(verdicts(load_runs([H100 / "w16.json"])))
    status, figure = found["lbs (every switch) faster than transformers' offloaded cache: at least 6x"]
    assert status == "NOT MET" and figure == pytest.approx(15.2759 / 3.5126, rel=1e-3)
    assert found["lbs (every switch) within 1.2x of in_device"][0] == "met"
    assert found["lbs (every switch) within 1.2x of in_device"][1] == pytest.approx(3.5126 / 3.1968, rel=1e-3)
    assert found["in_device at least as fast as plain generate (1.0x)"] == ("met", pytest.approx(1.2468, rel=1e-3))
    assert found["layerwise no slower than transformers' offloaded cache"][0] == "NOT MET"
    assert found["lbs (every switch) stalls under 10% of its run"][0] == "met"


def test_a_workload_split_over_files_is_read_as_one_run(tmp_path):
    report = json.loads((H100 / "w16.json").read_text(encoding="utf-8"))
    layerwise = [r for r in report["results"] if r["name"] == "layerwise"]
    first = {**report, "results": [r for r in report["results"] if r["name"] != "layerwise"], "baselines": []}
    second = {**report, "results": layerwise}  # and the baselines
    (tmp_path / "a.json").write_text(json.dumps(first), encoding="utf-8")
    (tmp_path / "b.json").write_text(json.dumps(second), encoding="utf-8")
    split = verdicts(load_runs([tmp_path / "a.json", tmp_path / "b.json"]))
    assert by_target(split) == by_target(verdicts(load_runs([H100 / "w16.json"])))
    alone = by_target(verdicts(load_runs([tmp_path / "a.json"])))
    assert alone["in_device at least as fast as plain generate (1.0x)"] == ("unmeasured", None)


def test_a_cpu_report_says_why_each_target_is_unmeasured(tmp_path, capsys):
    workload = Workload(beams=2, width=2, step_tokens=4, prompt_tokens=16, gen_tokens=8)
    report = run_bench(workload, ["in_device", "lbs:inter_token", "lbs:+prefix_order"], teacher_forcing=False)
    path = tmp_path / "w-cpu.json"
    path.write_text(json.dumps({"workload_name": "w64", **report.to_dict()}), encoding="utf-8")
    found = verdicts(load_runs([path]))
    assert found and all(v.status == "unmeasured" for v in found)
    reasons = {v.target.what: v.reason for v in found}
    assert reasons["lbs (every switch) within 1.2x of in_device"] == "lbs:+prefix_order was not timed on CUDA"
    assert "outside baselines run only on CUDA" in reasons["in_device at least as fast as plain generate (1.0x)"]
    assert reasons["layerwise no slower than transformers' offloaded cache"] == "no layerwise row"
    assert main([str(path), "--markdown"]) == 0
    row = "| 9 | lbs (every switch) within 1.2x of in_device | w64 | lbs:+prefix_order was not timed on CUDA |"
    assert row in capsys.readouterr().out


def test_goodput_gain_is_read_from_the_spec_workload_only(tmp_path):
    rows = [{"name": n, "ok": True, "wall_seconds": 1.0, "goodput": g} for n, g in
            (("lbs:+prefix_order", 100.0), ("lbs:+speculative", 130.0), ("in_device", 120.0),
             ("in_device:+speculative", 114.0))]  # fmt: skip
    for name in ("spec", "w16"):
        report = {"workload_name": name, "device": "cuda", "plan_only": False, "results": rows, "baselines": []}
        (tmp_path / f"{name}.json").write_text(json.dumps(report), encoding="utf-8")
    found = [v for v in verdicts(load_runs([tmp_path / "spec.json", tmp_path / "w16.json"])) if v.target.issue == 14]
    figures = [(v.workload, v.status, round(v.figure, 6)) for v in found]
    assert figures == [("spec", "met", 1.3), ("spec", "NOT MET", 0.95)]


@pytest.mark.parametrize("content", ["not json", "[1, 2]", '{"workload_name": "w16"}'])
def test_a_file_that_is_not_a_bench_report_is_a_clear_error(tmp_path, content):
    path = tmp_path / "x.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(SystemExit, match=r"x\.json"):
        load_runs([path])


def test_rows_that_paid_for_pinning_host_memory_say_how_much_beside_the_verdicts(tmp_path, capsys):
    report = json.loads((H100 / "w16.json").read_text(encoding="utf-8"))
    for row in report["results"]:
        if row["name"] == "layerwise":
            row.update(pin_seconds=4.25, pinned_peak_bytes=5_600_000_000)
    (tmp_path / "w16.json").write_text(json.dumps(report), encoding="utf-8")
    assert main([str(tmp_path / "w16.json")]) == 0
    out = capsys.readouterr().out
    assert "first-use pinning inside the timed rows:" in out
    assert "w16 layerwise: 4.25 s of its 50.13 s wall pinning host memory (5.6 GB pinned at most)" in out
    assert main([str(H100 / "w16.json")]) == 0  # that run reported no pinning (older bench): no such lines
    assert "first-use pinning" not in capsys.readouterr().out


def test_a_ladder_ended_from_outside_is_read_for_the_rows_it_finished(tmp_path, capsys):
    """The ladder writes its JSON after every row ("complete": false until the last): a killed one still counts."""
    report = json.loads((H100 / "w16.json").read_text(encoding="utf-8"))
    kept = [r for r in report["results"] if r["name"] in ("in_device", "lbs:+prefix_order")]
    partial = tmp_path / "w16.json"
    partial.write_text(json.dumps({**report, "results": kept, "baselines": [], "complete": False}), encoding="utf-8")
    started = tmp_path / "w64.json"  # killed before its first row: the placeholder the ladder writes first
    started.write_text(json.dumps({"workload_name": "w64", "complete": False}), encoding="utf-8")
    found = by_target(verdicts(load_runs([partial])))
    assert found["lbs (every switch) within 1.2x of in_device"][0] == "met"
    assert found["in_device at least as fast as plain generate (1.0x)"] == ("unmeasured", None)
    assert main([str(partial), str(started)]) == 0
    out = capsys.readouterr().out
    assert "not finished (ended from outside before their last row): w16, w64" in out
    assert all(v.status == "unmeasured" for v in verdicts(load_runs([started])))


def test_a_run_the_time_limit_stopped_bounds_its_ratio_and_settles_the_targets_it_can(tmp_path, capsys):
    """Layer-wise stopped after 540 s beside an offloaded cache that took 135 s is at least 4x slower: NOT MET
    (target: no slower). A bound on the other side of a line says nothing, and says so."""
    report = json.loads((H100 / "w16.json").read_text(encoding="utf-8"))
    rows = {r["name"]: r for r in [*report["results"], *report["baselines"]]}
    stopped = {"name": "layerwise", "ok": False, "timed_out": True, "wall_seconds": 540.0,
               "message": "stopped by the bench's time limit (540 s) after 540 s of this run; time it alone"}
    offloaded = {**rows["generate:offloaded"], "wall_seconds": 135.0}
    path = tmp_path / "w64-layerwise.json"
    path.write_text(json.dumps({**report, "workload_name": "w64", "results": [stopped], "baselines": [offloaded]}),
                    encoding="utf-8")  # fmt: skip
    found = {v.target.what: v for v in verdicts(load_runs([path]))}
    slow = found["layerwise no slower than transformers' offloaded cache"]
    assert (slow.status, slow.figure, slow.shown()) == ("NOT MET", 4.0, "at least 4.00x")
    quick = {**stopped, "wall_seconds": 60.0}  # stopped sooner than the baseline ran: at least 0.44x tells nothing
    path.write_text(json.dumps({**report, "workload_name": "w64", "results": [quick], "baselines": [offloaded]}),
                    encoding="utf-8")  # fmt: skip
    vague = {v.target.what: v for v in verdicts(load_runs([path]))}[slow.target.what]
    assert vague.status == "unmeasured" and vague.reason.startswith("at least 0.44x (a run the time limit stopped)")
    lbs = {**rows["lbs:+prefix_order"], "wall_seconds": 4.0}  # the offloaded cache stopped after 135 s: >= 33.75x
    path.write_text(json.dumps({**report, "workload_name": "w64", "results": [lbs],
                                "baselines": [{**offloaded, "ok": False, "timed_out": True}]}), encoding="utf-8")
    fast = {v.target.what: v for v in verdicts(load_runs([path]))}
    six = fast["lbs (every switch) faster than transformers' offloaded cache: at least 6x"]
    assert (six.status, six.shown()) == ("met", "at least 33.75x")
    assert main([str(path)]) == 0 and "at least 33.75x" in capsys.readouterr().out
