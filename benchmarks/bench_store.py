"""Storage figures for BENCHMARKS.md: recording overhead per run, the time to load and to export a large session.

    python -m benchmarks.bench_store                              # fake event streams only (no torch)
    python -m benchmarks.bench_store --model synthetic:tiny-llama # also the share of a real synthetic run

Times are wall-clock on this machine; the recording share is measured inside one run (time spent
in `SessionRecorder.write` over the run's total), so it does not depend on run-to-run noise.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from app.export import render_session
from app.recorder import SessionRecorder
from app.store import SessionStore
from benchmarks.fake_search import fake_run
from engine.config import CacheConfig, SearchConfig

RUN = SearchConfig(beams=16, width=4, max_steps=20, step_tokens=16, step_delimiter=None, seed=1)  # 64 candidates
BIG = SearchConfig(beams=50, width=4, max_steps=50, seed=2)  # 200 per step x 50 steps = 10,000 candidates


def fake_events(search: SearchConfig) -> list[Any]:
    """The fake engine's whole stream for `search` (no model)."""
    return list(fake_run("How many candidates can one session hold?", search))


def timed_recording(stream: Iterable[Any], store: SessionStore) -> tuple[float, float, int]:
    """(seconds for the whole loop, seconds inside recorder.write, session id) for one event stream."""
    recorder = SessionRecorder(store)
    in_recorder = 0.0
    start = time.perf_counter()
    for event in stream:
        t = time.perf_counter()
        recorder.write(event)
        in_recorder += time.perf_counter() - t
    total = time.perf_counter() - start
    return total, in_recorder, recorder.session_id


def recording_cost(folder: Path, repeats: int = 5) -> dict[str, float]:
    """Recording a 64-candidate, 20-step fake run into a WAL file: per run and per step."""
    events = fake_events(RUN)
    store = SessionStore(folder / "record.db")
    costs = [timed_recording(events, store)[1] for _ in range(repeats)]
    store.close()
    best = min(costs)
    return {"events": len(events), "record_s_median": statistics.median(costs), "record_s_best": best,
            "record_ms_per_step": 1000 * statistics.median(costs) / RUN.max_steps}


def synthetic_share(folder: Path, model: str) -> dict[str, float]:
    """A real search on a synthetic model, with the recorder: its share of the run's time."""
    from engine.config import ModelSpec
    from engine.models import load_model
    from engine.search import run

    loaded = load_model(ModelSpec(source=model), device="cpu")
    question = "A train travels 60 km in 45 minutes. What is its average speed in km/h?"
    bare_start = time.perf_counter()
    bare_events = sum(1 for _ in run(question, loaded, RUN, CacheConfig()))
    bare = time.perf_counter() - bare_start
    store = SessionStore(folder / "synthetic.db")
    total, in_recorder, sid = timed_recording(run(question, loaded, RUN, CacheConfig()), store)
    steps = store.get_session(sid)["steps"]
    store.close()
    return {"model": model, "events": bare_events, "steps": steps, "run_s_without": bare, "run_s_with": total,
            "ratio_with_over_without": total / bare, "recorder_s": in_recorder, "recorder_share": in_recorder / total}


def _best_of(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def load_cost(folder: Path, repeats: int = 3) -> dict[str, float]:
    """Open the db and read back a 10,000-candidate session: events, candidates, timeline."""
    path = folder / "big.db"
    with SessionStore(path) as store:
        _, _, sid = timed_recording(fake_events(BIG), store)
    result: dict[str, float] = {}

    def everything() -> None:
        with SessionStore(path) as fresh:
            fresh.get_session(sid)
            result["candidates"] = len(fresh.candidates(sid))
            result["events"] = len(fresh.events(sid))
            fresh.timeline(sid)

    result["load_all_s"] = _best_of(everything, repeats)
    with SessionStore(path) as store:
        result["events_s"] = _best_of(lambda: store.events(sid), repeats)
        result["candidates_s"] = _best_of(lambda: store.candidates(sid), repeats)
        for fmt in ("md", "html"):  # replayed from the events into a SessionModel, then rendered
            result[f"export_{fmt}_s"] = _best_of(lambda fmt=fmt: render_session(store, sid, fmt), repeats)
    result["db_bytes"] = path.stat().st_size + sum(p.stat().st_size for p in folder.glob("big.db-*"))
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_store", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="also time a real run on this model, e.g. synthetic:tiny-llama")
    parser.add_argument("--json", default=None, help="write the figures to this JSON file too")
    args = parser.parse_args(argv)
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="beamwise-bench-") as tmp:
        folder = Path(tmp)
        figures["recording"] = rec = recording_cost(folder)
        print(f"recording a 64-candidate, 20-step run ({rec['events']} events) into SQLite: "
              f"{rec['record_s_median'] * 1000:.1f} ms median ({rec['record_ms_per_step']:.2f} ms/step), "
              f"best {rec['record_s_best'] * 1000:.1f} ms")
        if args.model:
            figures["synthetic"] = syn = synthetic_share(folder, args.model)
            print(f"{syn['model']}, {syn['steps']} steps: run {syn['run_s_without']:.2f} s without recorder, "
                  f"{syn['run_s_with']:.2f} s with (ratio {syn['ratio_with_over_without']:.3f}); time inside the "
                  f"recorder {syn['recorder_s'] * 1000:.1f} ms = {syn['recorder_share']:.2%} of the run")
        figures["load"] = load = load_cost(folder)
        print(f"loading a {load['candidates']:,}-candidate session ({load['events']:,} events, "
              f"{load['db_bytes'] / 1e6:.1f} MB db): open+everything {load['load_all_s'] * 1000:.0f} ms, "
              f"events {load['events_s'] * 1000:.0f} ms, candidates {load['candidates_s'] * 1000:.0f} ms")
        print(f"exporting it: Markdown {load['export_md_s'] * 1000:.0f} ms, HTML {load['export_html_s'] * 1000:.0f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
