"""The GPU ladder's JSON against issue 9's and issue 14's targets: each target, its figure, met or not.

    python -m benchmarks.gpu_targets bench-results/*.json
    python -m benchmarks.gpu_targets benchmarks/results/h100-2026-11-23/w16.json --markdown

Reads the files `benchmarks.gpu_ladder --json` writes. Files of the same workload are read as one
run (a long workload split over several invocations: `w64.json` and `w64-layerwise.json`); a
row measured twice keeps the later file's. The targets are issue 9's on the 64-candidate workload
(`w64`), printed for every workload found (the issue sets them for w64; others are for scale),
and issue 14's goodput with and without speculation (`spec`). A target whose rows are missing, failed
or were not timed on CUDA says so instead of a figure: absolute times compare only on a GPU, beside
the outside baselines of the same process. A run the ladder's `--time-limit` stopped still bounds its
ratio (it would have taken longer than it ran): where the bound alone settles the target, the
verdict is given with the figure as a bound ("at least 3.10x"); else it is unmeasured and says so.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

EVERY_SWITCH = "lbs:+prefix_order"  # lbs with inter-beam sharing, balanced prefetch and prefix-aware order


@dataclass(frozen=True)
class AtLeast:
    """A run the bench's time limit stopped after `seconds`: its whole run would have taken longer."""

    seconds: float


@dataclass(frozen=True)
class Bound:
    """A figure known only on one side: `value` is its least ("at least") or greatest ("at most") value."""

    value: float
    side: str  # "at least" or "at most"


@dataclass(frozen=True)
class Run:
    """One workload's rows, from one or more JSON files: name -> row (policies and outside baselines)."""

    workload: str
    cuda: bool
    rows: dict[str, dict]
    complete: bool = True  # False: a ladder ended from outside before its last row (its JSON says "complete": false)

    def wall(self, name: str) -> float | AtLeast | str:
        """The row's wall seconds, at least the seconds it ran when the time limit stopped it, or why there is none."""
        row = self.rows.get(name)
        if row is None:
            return f"no {name} row"
        if row.get("timed_out") and self.cuda and (row.get("wall_seconds") or 0) > 0:  # null: it never ran
            return AtLeast(float(row["wall_seconds"]))
        if not row.get("ok"):
            return f"{name} failed: {str(row.get('message', '')).splitlines()[0][:80]}"
        if not self.cuda:
            return f"{name} was not timed on CUDA"
        return float(row["wall_seconds"])

    def measured_wall(self, name: str) -> float | str:
        """The row's wall seconds, or why there is none (a run the time limit stopped bounds nothing here)."""
        wall = self.wall(name)
        return f"{name} was stopped by the time limit after {wall.seconds:.0f} s" if isinstance(wall, AtLeast) else wall


@dataclass(frozen=True)
class Target:
    issue: int
    what: str
    figure: Callable[[Run], float | Bound | str]  # the measured ratio or share, a bound of it, or why unmeasured
    met: Callable[[float], bool]
    unit: str  # how the figure reads: "x" (a ratio) or "%"
    workloads: tuple[str, ...] = ()  # () any workload
    lower_is_better: bool = False  # met below a line (a bound "at least" can then only say NOT MET), else above it

    def shown(self, value: float) -> str:
        return f"{value * 100:.1f}%" if self.unit == "%" else f"{value:.2f}x"


@dataclass(frozen=True)
class Verdict:
    target: Target
    workload: str
    figure: float | None
    reason: str  # why unmeasured ("" when measured)
    side: str = ""  # "at least" or "at most": the figure is a bound (a run the time limit stopped), which settles it

    @property
    def status(self) -> str:
        if self.figure is None:
            return "unmeasured"
        return "met" if self.target.met(self.figure) else "NOT MET"

    def shown(self) -> str:
        if self.figure is None:
            return self.reason
        figure = self.target.shown(self.figure)
        return f"{self.side} {figure}" if self.side else figure


def judge(target: Target, workload: str, figure: float | Bound | str) -> Verdict:
    """A figure's verdict; a bound gives one only where every value on its side falls the same way."""
    if isinstance(figure, str):
        return Verdict(target, workload, None, figure)
    if not isinstance(figure, Bound):
        return Verdict(target, workload, figure, "")
    grows = figure.side == "at least"
    settles = not target.met(figure.value) if grows == target.lower_is_better else target.met(figure.value)
    if settles:
        return Verdict(target, workload, figure.value, "", figure.side)
    reason = f"{figure.side} {target.shown(figure.value)} (a run the time limit stopped): not enough to tell"
    return Verdict(target, workload, None, reason)


def ratio(numerator: str, denominator: str) -> Callable[[Run], float | Bound | str]:
    """Wall of `numerator` over wall of `denominator` (how many times faster `denominator` is); a bound when the
    time limit stopped one of them."""

    def figure(run: Run) -> float | Bound | str:
        top, bottom = run.wall(numerator), run.wall(denominator)
        for part in (top, bottom):
            if isinstance(part, str):
                return part
        if isinstance(top, AtLeast) and isinstance(bottom, AtLeast):
            return f"the time limit stopped both {numerator} and {denominator}"
        if isinstance(top, AtLeast):
            return Bound(top.seconds / bottom, "at least") if bottom > 0 else f"{denominator} took no time"
        if isinstance(bottom, AtLeast):
            return Bound(top / bottom.seconds, "at most")
        return top / bottom if bottom > 0 else f"{denominator} took no time"

    return figure


def stall_share(name: str) -> Callable[[Run], float | str]:
    def figure(run: Run) -> float | str:
        wall = run.measured_wall(name)
        return wall if isinstance(wall, str) else float(run.rows[name].get("stall_share", 0.0))

    return figure


def goodput_gain(with_it: str, without: str) -> Callable[[Run], float | str]:
    """Goodput (FlashTTS: kept tokens per second of completion) with speculation over without it."""

    def figure(run: Run) -> float | str:
        for name in (with_it, without):
            wall = run.measured_wall(name)
            if isinstance(wall, str):
                return wall
        before = float(run.rows[without].get("goodput", 0.0))
        return float(run.rows[with_it].get("goodput", 0.0)) / before if before > 0 else f"{without} has no goodput"

    return figure


TARGETS = (
    Target(9, "lbs (every switch) faster than transformers' offloaded cache: at least 6x",
           ratio("generate:offloaded", EVERY_SWITCH), lambda x: x >= 6.0, "x"),
    Target(9, "lbs (every switch) within 1.2x of in_device", ratio(EVERY_SWITCH, "in_device"),
           lambda x: x <= 1.2, "x", lower_is_better=True),
    Target(9, "in_device at least as fast as plain generate (1.0x)", ratio("generate", "in_device"),
           lambda x: x >= 1.0, "x"),
    Target(9, "layerwise no slower than transformers' offloaded cache", ratio("layerwise", "generate:offloaded"),
           lambda x: x <= 1.0, "x", lower_is_better=True),
    Target(9, "lbs (every switch) stalls under 10% of its run", stall_share(EVERY_SWITCH), lambda x: x < 0.10, "%",
           lower_is_better=True),
    Target(9, "lbs (every switch) no slower than lbs:inter_token alone", ratio(EVERY_SWITCH, "lbs:inter_token"),
           lambda x: x <= 1.0, "x", lower_is_better=True),
    Target(14, "goodput with speculation over without (lbs, every switch)",
           goodput_gain("lbs:+speculative", EVERY_SWITCH), lambda x: x > 1.0, "x", ("spec",)),
    Target(14, "goodput with speculation over without (in_device)",
           goodput_gain("in_device:+speculative", "in_device"), lambda x: x > 1.0, "x", ("spec",)),
)  # fmt: skip


def load_runs(paths: Sequence[Path]) -> list[Run]:
    """The files grouped by workload, in the order each workload first appears; later files' rows win."""
    runs: dict[str, Run] = {}
    for path in paths:
        try:
            report = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise SystemExit(f"cannot read {path}: {error}") from error
        complete = isinstance(report, dict) and report.get("complete", True) is not False  # older files: whole
        if not isinstance(report, dict) or ("results" not in report and complete):
            raise SystemExit(f"{path} is not a bench report (write one with benchmarks.gpu_ladder --json PATH)")
        name = report.get("workload_name") or "workload"
        cuda = report.get("device") == "cuda" and not report.get("plan_only", False)
        rows = {row["name"]: row for row in [*report.get("results", []), *report.get("baselines", [])]}
        before = runs.get(name)
        if before is not None:
            rows, cuda, complete = {**before.rows, **rows}, before.cuda and cuda, before.complete and complete
        runs[name] = Run(name, cuda, rows, complete)
    return list(runs.values())


def verdicts(runs: Sequence[Run]) -> list[Verdict]:
    found = []
    for target in TARGETS:
        for run in runs:
            if target.workloads and run.workload not in target.workloads:
                continue
            found.append(judge(target, run.workload, target.figure(run)))
    return found


def pinning(runs: Sequence[Run]) -> list[str]:
    """Timed rows whose wall includes pinning new host memory (a first use in the process: an app pays it
    on its first question only), with the seconds, so a verdict near its line can be read without them."""
    lines = []
    for run in runs:
        for name, row in run.rows.items():
            seconds = row.get("pin_seconds")
            if run.cuda and row.get("ok") and seconds:
                lines.append(f"{run.workload} {name}: {seconds:.2f} s of its {row['wall_seconds']:.2f} s wall pinning "
                             f"host memory ({(row.get('pinned_peak_bytes') or 0) / 1e9:.1f} GB pinned at most)")
    return lines


def render(found: Sequence[Verdict], markdown: bool) -> str:
    if markdown:
        lines = ["| issue | target | workload | figure | |", "|---|---|---|---|---|"]
        lines += [f"| {v.target.issue} | {v.target.what} | {v.workload} | {v.shown()} | {v.status} |" for v in found]
        return "\n".join(lines)
    width = max((len(v.target.what) for v in found), default=10)
    return "\n".join(
        f"{v.target.issue:>2}  {v.target.what:<{width}}  {v.workload:<8} {v.status:<10} {v.shown()}" for v in found
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", type=Path, help="JSON files from benchmarks.gpu_ladder --json")
    parser.add_argument("--markdown", action="store_true", help="a Markdown table for BENCHMARKS.md")
    args = parser.parse_args(argv)
    runs = load_runs(args.reports)
    found = verdicts(runs)
    if not found:
        print("no workload in these files has a target (issue 14's goodput targets read the spec workload)")
        return 0
    print(render(found, args.markdown))
    unfinished = [run.workload for run in runs if not run.complete]
    if unfinished:
        print(f"\nnot finished (ended from outside before their last row): {', '.join(unfinished)}; "
              "a target whose rows it did not reach says so")
    runs_pinned = pinning(runs)
    if runs_pinned:
        print("\nfirst-use pinning inside the timed rows:")
        print("\n".join(runs_pinned))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
