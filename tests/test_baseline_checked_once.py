"""Whether an outside baseline can run here is asked once per baseline: by the bench, before its time limit
(engine/bench.py `_baselines`); `run_baseline` times what it is given (before, it asked `why_not` again)."""

from __future__ import annotations

import pytest

import engine.baselines as baselines
from engine import bench
from engine.bench import BenchReport, TimeLimit
from engine.workload import BASELINES, Workload


@pytest.mark.parametrize("can_run", [True, False])
def test_each_baseline_is_checked_once(monkeypatch, tiny, can_run: bool) -> None:
    asked: list[str] = []

    def why_not(name: str, device) -> str | None:
        asked.append(name)
        return None if can_run else "outside baselines run only on CUDA"

    monkeypatch.setattr(bench, "why_not", why_not)
    monkeypatch.setattr(baselines, "why_not", why_not)
    monkeypatch.setattr(bench, "release_cached_memory", lambda host=False: None)
    monkeypatch.setattr(baselines, "_generate", lambda loaded, name, prompt, rows, tokens, seed, stop: rows * tokens)
    workload = Workload(beams=2, width=2, step_tokens=4, gen_tokens=8, prompt_tokens=4)
    report = BenchReport(workload, "cpu", emulated=True, plan_only=False)
    bench._baselines(tiny, workload, [1, 2, 3, 4], list(BASELINES), lambda text: None, TimeLimit(), report,
                     lambda report: None)
    assert asked == list(BASELINES)
    assert [run.ok for run in report.baselines] == [can_run] * len(BASELINES)
    if not can_run:
        assert {run.message for run in report.baselines} == {"outside baselines run only on CUDA"}
