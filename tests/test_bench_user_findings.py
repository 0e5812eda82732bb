"""`beamwise bench` and `plan` as a new user found them: --json replaced a finished report before the bench ran,
--gen-tokens not in whole steps, names given twice, per-step PCIe beside plan's, a plan's timings, --max-context's
unused options, delimiters in a plan, --time-limit inf, --json "", a limit spent before the first row, the
automatic KV budget, and plan --json's fields."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from app.cli import main
from app.plan_run import planned_run
from engine.bench import TimeLimit, Workload, run_bench
from engine.config import ModelSpec
from engine.errors import ConfigError
from engine.workload import check_names
from tests.test_bench_defects import PLAN, TINY, bench, error_line

ROOT = Path(__file__).resolve().parents[1]
EARLIER = '{"earlier": "a finished report", "complete": true}'


def _kept(path: Path) -> bool:
    return path.read_text(encoding="utf-8") == EARLIER


# ---------------------------------------------------------------- 1: a file at --json kept until a row is in


@pytest.mark.parametrize("refused", [[*PLAN, "--question", "What is 2+3?"], [*TINY, "--prompt-tokens", "5000"]])
def test_a_bench_refused_before_its_first_row_keeps_the_report_at_json(tmp_path, capsys, refused) -> None:
    """A ~495-byte placeholder replaced the earlier report before the bench ran ("fail now, not after")."""
    out = tmp_path / "keep.json"
    out.write_text(EARLIER, encoding="utf-8")
    code, _, err = bench(capsys, *refused, "--json", str(out))
    assert code == 2 and error_line(err) and _kept(out)


def test_ctrl_c_before_the_first_row_keeps_the_report_and_says_so(tmp_path, capsys, monkeypatch) -> None:
    import engine.bench as engine_bench

    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(engine_bench, "_load", interrupted)
    out = tmp_path / "keep.json"
    out.write_text(EARLIER, encoding="utf-8")
    code, _, err = bench(capsys, *PLAN, "--json", str(out))
    assert code == 130 and _kept(out)
    assert err.strip().endswith(f"interrupted before any row finished, so {out} was not written; the file already "
                                "there is kept")
    fresh = tmp_path / "new.json"
    code, _, err = bench(capsys, *PLAN, "--json", str(fresh))
    assert code == 130 and not fresh.exists() and err.strip().endswith(f"so {fresh} was not written")


def test_a_bench_with_rows_replaces_the_report(tmp_path, capsys) -> None:
    out = tmp_path / "keep.json"
    out.write_text(EARLIER, encoding="utf-8")
    assert bench(capsys, *PLAN, "--json", str(out))[0] == 0
    assert json.loads(out.read_text(encoding="utf-8"))["complete"] is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.json"]  # the probe left no .part behind


# ---------------------------------------------------------------- 3: --gen-tokens in whole steps


def test_the_header_and_json_give_the_tokens_the_paths_decode_in_whole_steps(tmp_path, capsys) -> None:
    """`--gen-tokens 10 --step-tokens 4`: the header said "10 generated"; every path decoded 3 steps of 4."""
    out = tmp_path / "b.json"
    code, printed, _ = bench(capsys, *PLAN, "--gen-tokens", "10", "--json", str(out))
    assert code == 0
    assert "12 generated (--gen-tokens 10 in whole steps of 4)" in printed.splitlines()[0]
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["path_tokens"] == 12 and data["workload"]["gen_tokens"] == 10
    _, printed, _ = bench(capsys, *PLAN)
    assert ", 8 generated;" in printed.splitlines()[0]  # a multiple reads as before


# ---------------------------------------------------------------- 4: a name given twice


@pytest.mark.parametrize("given, said", [
    (["--policies", "layerwise,lbs:inter_token,layerwise"], "--policies names layerwise more than once"),
    (["--policies", "layerwise", "--baselines", "generate,generate"], "--baselines names generate more than once"),
])  # fmt: skip
def test_a_name_given_twice_is_refused(capsys, given, said) -> None:
    """It ran twice and the ratio columns compared with the last run of the name."""
    code, out, err = bench(capsys, *PLAN[:-2], *given)
    assert code == 2 and out == "" and said in error_line(err) and "[bench] running" not in err
    with pytest.raises(ConfigError, match="give each name once"):
        check_names(["in_device", "in_device"], [])


# ---------------------------------------------------------------- 6 and 7: per-step PCIe; a plan times nothing

WORKLOAD = Workload(model="synthetic:tiny-llama", dtype="bfloat16", beams=2, width=2, step_tokens=4, gen_tokens=8,
                    prompt_tokens=20, kv_budget_bytes=60_000)  # fmt: skip


@pytest.mark.parametrize("policy", ["lbs:inter_token", "lbs:+prefix_order"])
def test_a_rows_step_pcie_bytes_is_what_plan_gives_per_step(policy) -> None:
    """The H2D/D2H columns are whole-run totals with the prefill's traffic; plan gives PCIe per step."""
    (row,) = run_bench(WORKLOAD, [policy], plan_only=True, baselines=()).results
    cache = WORKLOAD.cache(policy)
    plan = planned_run(ModelSpec(WORKLOAD.model, dtype=WORKLOAD.dtype), WORKLOAD.search(), cache,
                       WORKLOAD.prompt_tokens, WORKLOAD.kv_budget_bytes, cache.policy, 30)  # fmt: skip
    assert row.step_pcie_bytes == plan.step_bytes > 0
    steps = WORKLOAD.search().max_steps
    assert row.step_h2d_bytes * steps <= row.h2d_bytes
    assert (row.step_pcie_bytes - row.step_h2d_bytes) * steps < row.d2h_bytes  # the prefill's offload in the total


def test_a_plans_json_has_no_timings_and_its_footnotes_say_planned(tmp_path, capsys) -> None:
    """Its rows carried the meta-tensor run's wall_seconds, goodput, wall_vs_layerwise...; layer-wise's H2D was
    "measured"."""
    out = tmp_path / "plan.json"
    code, printed, _ = bench(capsys, *PLAN, "--json", str(out))  # layerwise and lbs:inter_token
    assert code == 0
    for row in json.loads(out.read_text(encoding="utf-8"))["results"]:
        assert row["ok"] and row["h2d_bytes"] >= 0 and row["step_pcie_bytes"] is not None
        for name in ("wall_seconds", "tokens_per_second", "goodput", "stall_share", "compute_seconds",
                     "copy_seconds", "stall_seconds", "wall_vs_layerwise", "wall_vs_in_device"):
            assert row[name] is None, name
    (eq1,) = [line for line in printed.splitlines() if "by the paper's Eq. 1-3" in line]
    assert " planned, " in eq1 and "measured" not in eq1
    assert "H2D, D2H and D2D: each run's totals, the prompt's prefill included" in printed


def test_a_run_keeps_its_timings(capsys) -> None:
    code, printed, _ = bench(capsys, *TINY, "--policies", "in_device,layerwise", "--kv-budget", "60KB")
    assert code == 0 and "H2D, D2H and D2D: each run's totals" in printed
    (eq1,) = [line for line in printed.splitlines() if "by the paper's Eq. 1-3" in line]
    assert " measured, " in eq1


# ---------------------------------------------------------------- 8: --max-context's unused options

MAX_CONTEXT = ["--plan-only", "--max-context", "--model", "synthetic:llama3.1-8b", "--gpu-memory", "24GB",
               "--host-ram", "64GB"]  # fmt: skip


@pytest.mark.parametrize("given, named", [
    (["--beams", "4"], "--beams"),
    (["--kv-budget", "1GB"], "--kv-budget"),
    (["--policies", "layerwise"], "--policies"),
    (["--question", "hi", "--seed", "3"], "--question, --seed"),
])  # fmt: skip
def test_max_context_refuses_the_options_it_does_not_use(capsys, given, named) -> None:
    code, out, err = bench(capsys, *MAX_CONTEXT, *given)
    line = error_line(err)
    assert code == 2 and out == ""
    assert f"does not use {named}: leave" in line and "or leave out --max-context" in line


def test_max_context_still_runs_on_its_own_options(capsys) -> None:
    code, out, _ = bench(capsys, *MAX_CONTEXT, "--dtype", "bfloat16")
    assert code == 0 and "head-wise:" in out


# ---------------------------------------------------------------- 9: a delimiter in a plan


@pytest.mark.parametrize("delimiter", ["\\n\\n", " ", "1"])
def test_a_plan_only_bench_refuses_a_step_delimiter(capsys, delimiter) -> None:
    code, out, err = bench(capsys, *PLAN, "--step-delimiter", delimiter)
    assert code == 2 and out == "" and "leave --step-delimiter out" in error_line(err)


def _plan(capsys, *extra: str) -> dict:
    argv = ["plan", "--model", "synthetic:tiny-llama", "--kv-budget", "200KB", "--beams", "4", "--width", "2",
            "--step-tokens", "16", "--max-steps", "3", "--policy", "lbs", "--json", *extra]  # fmt: skip
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_plan_counts_full_steps_whatever_the_delimiter(capsys) -> None:
    """The plan-only run's stand-in decodes ids joined by spaces: ' ' or '1' ended its steps early and the PCIe
    figure fell to about half (264 kB to 139 kB)."""
    full = _plan(capsys)["step_pcie_bytes"]
    assert full > 0
    for delimiter in (" ", "1", "\\n\\n"):
        assert _plan(capsys, "--step-delimiter", delimiter)["step_pcie_bytes"] == full, delimiter


# ---------------------------------------------------------------- 10 and 11: --time-limit inf, --json ""


def test_an_infinite_time_limit_is_refused(capsys) -> None:
    """It was taken, and the JSON held `Infinity` (not JSON)."""
    code, out, err = bench(capsys, *PLAN, "--time-limit", "inf")
    assert code == 2 and out == "" and "--time-limit must be a finite number of seconds (got inf)" in error_line(err)
    with pytest.raises(ConfigError, match="finite"):
        TimeLimit(math.inf)


def test_an_empty_json_path_is_refused_by_bench_and_eval(tmp_path, capsys) -> None:
    """`--json ""` wrote nothing and exited 0."""
    code, out, err = bench(capsys, *PLAN, "--json", "")
    assert code == 2 and out == "" and '--json needs a file name (got "")' in error_line(err)
    problems = tmp_path / "p.jsonl"
    problems.write_text('{"question": "1+1?", "answer": "2"}\n', encoding="utf-8")
    assert main(["eval", str(problems), "--model", "synthetic:tiny-llama", "--no-save", "--json", ""]) == 2
    assert '--json needs a file name (got "")' in capsys.readouterr().err


# ---------------------------------------------------------------- 13: a limit spent before the first row


class LateClock:
    """A clock that stands wherever the test sets it (`now`)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_limit_spent_before_the_first_row_says_what_took_it_and_to_raise_it(monkeypatch) -> None:
    """Every row said "time it alone (--policies in_device)", though the model's load had used the limit, and a
    row alone would be cut the same."""
    import engine.bench as engine_bench

    clock, real = LateClock(), engine_bench._load

    def slow_load(*args, **kwargs):
        clock.now = 2.5
        return real(*args, **kwargs)

    monkeypatch.setattr(engine_bench, "_load", slow_load)
    report = run_bench(WORKLOAD, ["layerwise", "lbs:inter_token"], plan_only=True, baselines=(),
                       time_limit=TimeLimit(2, clock))  # fmt: skip
    said = "the bench's time limit (2 s) had passed before the first row (reading the model's shapes took 2.5 s)"
    assert all(r.timed_out and r.message == f"not run: {said}; give a larger --time-limit" for r in report.results)
    assert report.time_limit_before_rows == "reading the model's shapes took 2.5 s"
    assert "the time limit (2 s) stopped or did not start: layerwise, lbs:inter_token; it had passed before the " \
           "first row (reading the model's shapes took 2.5 s): give a larger --time-limit" in report.notes
    assert not any("time it alone" in r.message or "time it alone" in n for r in report.results for n in report.notes)


def test_a_stopped_run_shows_sub_second_and_whole_seconds() -> None:
    limit = TimeLimit(2)
    assert "after 0.07 s of this run" in limit.stopped(0.07, "--policies in_device")
    assert "after 3.5 s of this run" in limit.stopped(3.46, "--policies in_device")
    assert "after 31 s of this run" in limit.stopped(31.4, "--policies in_device")


# ---------------------------------------------------------------- 14: the budget the rows ran with


def test_without_kv_budget_the_header_and_json_give_the_budget_each_row_ran_with(tmp_path, capsys) -> None:
    """The header said "KV budget auto" and the JSON's kv_budget_bytes was null."""
    out = tmp_path / "b.json"
    code, printed, _ = bench(capsys, *TINY, "--plan-only", "--policies", "layerwise,lbs:inter_token", "--json",
                             str(out))  # fmt: skip
    assert code == 0
    rows = {r["name"]: r["kv_budget_bytes"] for r in json.loads(out.read_text(encoding="utf-8"))["results"]}
    assert all(isinstance(b, int) and b > 0 for b in rows.values()), rows
    header = printed.splitlines()[0]
    assert re.search(r"KV budget auto: [\d.]+ kB", header), header
    code, printed, _ = bench(capsys, *PLAN)
    assert "KV budget 60.0 kB;" in printed.splitlines()[0]  # a given budget reads as before


# ---------------------------------------------------------------- 15: plan --json's fields in the README


def test_every_field_of_plan_json_is_documented_in_the_readme_plan_section(capsys) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Will it fit? (`beamwise plan`)"):]
    section = section[:section.index("\n## ", 5)]
    for field in _plan(capsys):
        assert f"`{field}`" in section, field
