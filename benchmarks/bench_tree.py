"""Benchmark of the live tree: time to apply one step's events to a 2,000-node tree and repaint.

Run offscreen: `QT_QPA_PLATFORM=offscreen python -m benchmarks.bench_tree`. It feeds the fake
engine's stream (no model) into `ReasoningTreeView`, loads the first `--steps` steps
(beams*width candidates each), then times `--updates` further steps: applying every event
of the step, then painting the viewport (grabbed to an image so painting really happens).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence

from engine import events as ev
from engine.config import SearchConfig


def _split_steps(stream: Sequence[object]) -> tuple[list[object], list[list[object]], list[object]]:
    """(events before step 1, one list per step from StepStarted to StepSelected, the rest)."""
    head: list[object] = []
    steps: list[list[object]] = []
    for event in stream:
        if isinstance(event, ev.StepStarted):
            steps.append([])
        if isinstance(event, ev.RunFinished | ev.RunCancelled | ev.RunFailed):
            return head, steps, [event]
        (steps[-1] if steps else head).append(event)
    return head, steps, []


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_tree", description=__doc__.splitlines()[0])
    parser.add_argument("--beams", type=int, default=20, help="kept beams N (default 20)")
    parser.add_argument("--width", type=int, default=5, help="children per beam M (default 5)")
    parser.add_argument("--steps", type=int, default=20, help="steps loaded before timing (default 20)")
    parser.add_argument("--updates", type=int, default=5, help="further steps timed one by one (default 5)")
    parser.add_argument("--size", default="1280x800", help="view size WxH in pixels (default 1280x800)")
    args = parser.parse_args(argv)
    if min(args.beams, args.width, args.steps, args.updates) < 1:
        parser.error("--beams, --width, --steps and --updates must all be at least 1")
    try:
        args.width_px, args.height_px = (int(v) for v in args.size.lower().split("x"))
    except ValueError:
        parser.error(f"--size must look like 1280x800 (got {args.size!r})")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Print load time, per-update apply/paint times (mean and max) and a whole-tree paint time."""
    args = _parse(argv)
    from PySide6.QtWidgets import QApplication

    from app.gui.tree_view import ReasoningTreeView
    from benchmarks.fake_search import fake_run

    app = QApplication.instance() or QApplication([])
    view = ReasoningTreeView()
    view.resize(args.width_px, args.height_px)
    view.show()
    search = SearchConfig(beams=args.beams, width=args.width, max_steps=args.steps + args.updates, seed=1)
    head, steps, tail = _split_steps(list(fake_run("benchmark question", search)))

    def load() -> None:
        for event in head + [e for step in steps[: args.steps] for e in step]:
            view.apply(event)
        view.viewport().grab()

    load_ms = _timed(load)
    loaded = len(view.data)
    applies, paints, worst_event = [], [], 0.0
    for step in steps[args.steps :]:
        start = time.perf_counter()
        for event in step:
            worst_event = max(worst_event, _timed(lambda e=event: view.apply(e)))
        applies.append((time.perf_counter() - start) * 1000)
        paints.append(_timed(view.viewport().grab))
        app.processEvents()
    for event in tail:
        view.apply(event)
    view.fit_to_view()
    fit_ms = _timed(view.viewport().grab)
    totals = [a + p for a, p in zip(applies, paints, strict=True)]
    print(f"tree: {loaded} nodes loaded ({args.steps} steps x {args.beams * args.width} candidates + prompt), "
          f"{len(view.data)} after {args.updates} timed updates; view {args.width_px}x{args.height_px}")
    print(f"load all {loaded} nodes and paint:        {load_ms:8.1f} ms")
    print(f"one step update (apply + paint), mean:   {statistics.mean(totals):8.1f} ms")
    print(f"one step update (apply + paint), max:    {max(totals):8.1f} ms")
    print(f"  apply {len(steps[-1])} events, mean / max:       {statistics.mean(applies):6.1f} / {max(applies):.1f} ms")
    print(f"  paint viewport, mean / max:           {statistics.mean(paints):6.1f} / {max(paints):.1f} ms")
    print(f"slowest single event apply:              {worst_event:8.1f} ms")
    print(f"paint whole tree after fit-to-view:      {fit_ms:8.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
