"""`beamwise bench` as a walkthrough found it: PRM mistakes refused per row in `run`'s options, a JSON write that
failed mid-run losing the rows, options that did nothing, rows never measured that looked measured, Ctrl+C in the
first second, and words that differed from plan's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import engine.bench as engine_bench
from app import bench_checks, bench_cli
from app.bench_table import format_report
from app.options import UsageError
from engine.bench_results import BenchReport, PolicyResult
from engine.verifiers.synthetic_prm import save_synthetic_prm
from engine.workload import Workload, check_names, ladder_names
from tests.test_bench_defects import PLAN, TINY, bench, error_line
from tests.test_plan_roles import generator_folder  # noqa: F401 - the fixture, shared

EARLIER = '{"earlier": "a finished report", "complete": true}'


@pytest.fixture
def no_rows(monkeypatch):
    """A bench that reaches its rows fails the test: these settings are refused before any model loads."""

    def ran(*_args, **_kwargs):
        raise AssertionError("the bench ran; it should have been refused before any model loaded")

    monkeypatch.setattr(engine_bench, "run_bench", ran)


# ---------------------------------------------------------------- 3: PRM mistakes refused up front, in bench's words


def test_a_prm_as_the_generator_is_refused_with_bench_s_own_option(capsys, no_rows):
    """It said "Use it as the verifier (--verifier prm --verifier-model ...)", options bench refuses."""
    code, out, err = bench(capsys, *TINY[2:], "--model", "synthetic:tiny-qwen-prm")
    line = error_line(err)
    assert code == 2 and out == "" and "--prm synthetic:tiny-qwen-prm" in line and "--verifier" not in line


@pytest.mark.parametrize("prm", ["missing", "synthetic:tiny-llama", "generator"])
def test_a_prm_the_run_refuses_is_refused_before_any_row(tmp_path, capsys, no_rows, request, prm):
    """Each row failed in turn after the model loaded ("failed: the PRM folder ... does not exist. Point
    --verifier-model to ..."), then "none of the 1 rows produced a figure", exit 1."""
    given = {"missing": str(tmp_path / "no-such-prm"), "synthetic:tiny-llama": prm}.get(prm)
    given = given or str(request.getfixturevalue("generator_folder"))
    code, out, err = bench(capsys, *TINY, "--policies", "in_device", "--prm", given)
    line = error_line(err)
    assert code == 2 and out == "" and "[bench]" not in err and "--verifier" not in line


def test_a_prm_folder_bench_can_use_is_not_refused(tmp_path):
    folder = save_synthetic_prm("tiny-qwen-prm", tmp_path / "prm")
    bench_checks.refuse_models(_bench_args("--prm", str(folder)))  # no UsageError
    bench_checks.refuse_models(_bench_args("--prm", "synthetic:tiny-qwen-prm"))


def _bench_args(*argv: str):
    from app.cli import build_parser

    return build_parser().parse_args(["bench", *argv])


# ---------------------------------------------------------------- 4: a JSON write that fails mid-run


def test_a_json_write_that_fails_after_a_row_loses_no_row(tmp_path, capsys, monkeypatch):
    """A file that passed the pre-check but could not be replaced (chattr +i), or a disk that filled: the write
    raised inside the row's callback, the bench died with "nothing was written", exit 2, and no table."""
    out = tmp_path / "results.json"
    out.write_text(EARLIER, encoding="utf-8")
    tries = []

    def full_disk(path, data, announce=True):
        tries.append(data["complete"])
        raise UsageError(f"cannot write {path}: No space left on device; pick a writable --json path.")

    monkeypatch.setattr(bench_cli, "write_json", full_disk)
    code, printed, err = bench(capsys, *PLAN, "--json", str(out))
    assert code == 2 and "layerwise " in printed and "lbs:inter_token " in printed  # both rows, in the table
    assert error_line(err) == (f"beamwise: error: cannot write {out}: No space left on device; pick a writable "
                               "--json path. The table above holds the rows measured.")
    assert tries == [False, True]  # after the first row, then once more at the end; not after every row
    assert out.read_text(encoding="utf-8") == EARLIER


def test_a_read_only_json_file_is_refused_before_the_bench_runs(tmp_path, capsys, monkeypatch, no_rows):
    """chattr +i passed the probe beside it (a .part file), and the bench died at its first row's write."""
    import os

    out = tmp_path / "results.json"
    out.write_text(EARLIER, encoding="utf-8")
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != out)  # as for an immutable file, even as root
    code, _, err = bench(capsys, *PLAN, "--json", str(out))
    assert code == 2 and "read-only" in error_line(err) and out.read_text(encoding="utf-8") == EARLIER


# ---------------------------------------------------------------- 5: options that did nothing


@pytest.mark.parametrize("given, said", [
    (["--question", "What is 2+2?", "--prompt-tokens", "999"], "--prompt-tokens sets the length of a random-token"),
    (["--lookahead-verify"], "without --prm PATH the rows score steps with log-probabilities"),
    (["--no-lookahead-verify", "--policies", "lbs:+prefix_order", "--prm", "synthetic:tiny-qwen-prm"],
     "no row speculates"),
    (["--plan-only", "--baselines", "generate"], "--plan-only loads no weights, so the outside baselines (generate)"),
])  # fmt: skip
def test_an_option_the_rest_of_the_command_leaves_nothing_to_do_is_refused(capsys, no_rows, given, said):
    code, out, err = bench(capsys, *TINY, *given)
    assert code == 2 and out == "" and said in error_line(err)


def test_lookahead_verify_with_a_prm_and_a_speculating_row_is_taken():
    bench_checks._refuse_contradictions(_bench_args("--lookahead-verify", "--prm", "synthetic:tiny-qwen-prm"))


# ---------------------------------------------------------------- 6, 9: names and words


def test_the_advice_for_no_baselines_works_in_every_shell():
    with pytest.raises(ValueError, match=r"\(or give --baselines= for none\)"):
        check_names(["layerwise"], ["bogus"])


def test_lbs_is_the_rung_with_every_switch_as_run_and_plan_name_it():
    """`bench --policies lbs` was refused as unknown, though lbs is the policy's name in plan, run and README."""
    assert ladder_names(["lbs", "layerwise"]) == ["lbs:+prefix_order", "layerwise"]
    check_names(ladder_names(["lbs"]), [])


def test_lbs_runs_as_its_rung(capsys):
    code, out, _ = bench(capsys, *PLAN[:-2], "--policies", "lbs")
    assert code == 0 and "lbs:+prefix_order " in out


def test_a_zero_kv_budget_is_refused_in_plan_s_words():
    """bench said "...(got 0 bytes); leave --kv-budget out for automatic.", plan "...such as 64MB, or unset for
    automatic." (engine/config.py)."""
    from engine.config import CacheConfig

    with pytest.raises(ValueError) as from_bench:
        Workload(kv_budget_bytes=0)
    with pytest.raises(ValueError) as from_plan:
        CacheConfig(kv_budget_bytes=0)
    assert str(from_bench.value) == str(from_plan.value)


# ---------------------------------------------------------------- 7: what no run measured is null


def test_a_row_that_failed_or_did_not_run_has_null_figures_and_dashes():
    """They had wall_seconds 0.0, tokens_per_second 0.0, h2d_bytes 0 and timed_runs 1, as if measured."""
    failed = PolicyResult("layerwise", False, "budget too small")
    row = failed.__dict__
    for name in ("h2d_bytes", "wall_seconds", "tokens_per_second", "goodput", "timed_runs", "tokens_digest"):
        assert row[name] is None, name
    from engine.baselines import BaselineRun

    assert BaselineRun("generate", False, "outside baselines run only on CUDA").wall_seconds is None


def test_the_json_of_a_bench_with_a_failed_row_says_null(tmp_path, capsys):
    out = tmp_path / "r.json"
    code, _, _ = bench(capsys, *TINY, "--kv-budget", "10KB", "--policies", "in_device,layerwise", "--json", str(out))
    rows = {r["name"]: r for r in json.loads(out.read_text(encoding="utf-8"))["results"]}
    assert code == 0 and rows["in_device"]["ok"] and rows["in_device"]["timed_runs"] == 1
    failed = rows["layerwise"]
    assert not failed["ok"] and failed["wall_seconds"] is None and failed["h2d_bytes"] is None
    assert failed["timed_runs"] is None and failed["tokens_per_second"] is None
    assert all(b["wall_seconds"] is None for b in json.loads(out.read_text(encoding="utf-8"))["baselines"])


def test_the_table_shows_a_dash_for_a_figure_no_run_measured():
    report = BenchReport(Workload(), "cpu (emulated GPU)", True, False)
    ran = PolicyResult("in_device", True, h2d_bytes=0, d2h_bytes=0, d2d_bytes=0, h2d_calls=0, peak_device_bytes=1,
                       max_groups=1, wall_seconds=1.0, copy_seconds=0.0, compute_seconds=1.0)  # the rest: None
    report.results.append(ran)
    (row,) = [line for line in format_report(report).splitlines() if line.startswith("in_device ")]
    assert "1.00" in row and " - " in row


# ---------------------------------------------------------------- 8: Ctrl+C in the first second


def test_ctrl_c_while_torch_loads_keeps_the_json_there_and_says_so(tmp_path, capsys, monkeypatch):
    """It printed only "beamwise: interrupted": the interrupt came before _ladder's handler was on."""

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(bench_cli, "import_torch", interrupted)
    out = tmp_path / "keep.json"
    out.write_text(EARLIER, encoding="utf-8")
    code, _, err = bench(capsys, *PLAN, "--json", str(out))
    assert code == 130 and out.read_text(encoding="utf-8") == EARLIER
    assert err.strip().endswith(f"so {out} was not written; the file already there is kept")


def test_ctrl_c_after_a_failed_write_does_not_say_the_file_keeps_the_rows(tmp_path, capsys):
    report = BenchReport(Workload(), "cpu (emulated GPU)", True, True, results=[PolicyResult("layerwise", False, "x")])
    args = _bench_args("--json", str(tmp_path / "r.json"))
    failed = UsageError(f"cannot write {args.json_path}: No space left on device; pick a writable --json path.")
    assert bench_cli._interrupted(args, report, False, [failed]) == 130
    said = capsys.readouterr().err
    assert f"{args.json_path} holds none of them: cannot write" in said and "keeps them" not in said
    assert bench_cli._interrupted(args, report, False, [failed], written=1) == 130
    assert f"{args.json_path} holds the first 1 of them (complete: false): cannot write" in capsys.readouterr().err
