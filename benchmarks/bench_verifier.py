"""Verifier tokens per step with KV reuse against rescoring every candidate's whole path (issue 12).

    python -m benchmarks.bench_verifier                       # 4 x 4 search, 32-token steps, 8 steps
    python -m benchmarks.bench_verifier --verifiers synthetic:tiny-qwen-prm self-judge --steps 4
    python -m benchmarks.bench_verifier --kv-budget 4MB --shares off auto 0.02 0.1   # the memory split
    python -m benchmarks.bench_verifier --kv-budget 4MB --shares 0.1 --schedules today grouped   # its copies

With --kv-budget, each verifier runs once per share of that budget (`off`: the PRM off the budget,
as --verifier-device cpu; `auto`: one verification batch, FlashTTS's rule) and the table gives the
verifier's budget, tokens, peak and resting KV bytes, its PCIe bytes, the generator's H2D bytes,
and the largest difference of a score from the first setting's (batches of another size change float32 sums).
--schedules runs each setting with the verifier's earlier schedule (`today`: one parent at a time, each
batch loading its whole chain from the segments) and/or the grouped one (`grouped`: prefix order, the
shared chain kept on the device across groups, the next group prefetched; engine/verifiers/schedule.py),
and adds the verifier's copy calls over PCIe and the PCIe seconds the CPU model says compute waited.

Runs a real search (the generator is synthetic:tiny-llama unless --model says otherwise) and sums
each step's `step_selected` event: `verifier_tokens` (what the verifier ran) and
`verifier_tokens_full` (what full rescoring would have run). Token counts are deterministic.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator, Sequence

import engine.search as search_module
from engine.config import CacheConfig, ModelSpec, SearchConfig, parse_bytes
from engine.errors import format_bytes
from engine.models import load_model
from engine.search import run

QUESTION = "A train travels 60 km in 45 minutes. What is its average speed in km/h?"
DEFAULT_VERIFIERS = ("synthetic:tiny-qwen-prm", "synthetic:tiny-skywork-prm", "synthetic:tiny-math-shepherd",
                     "synthetic:tiny-rlhflow-prm", "self-judge")


def step_counts(loaded, verifier: str, args: argparse.Namespace) -> list[tuple[int, int, int]]:
    """(step, verifier tokens, full-rescoring tokens) of one search."""
    name, model = ("self-judge", None) if verifier == "self-judge" else ("prm", verifier)
    search = SearchConfig(beams=args.beams, width=args.width, step_tokens=args.step_tokens, step_delimiter=None,
                          max_steps=args.steps, seed=args.seed, verifier=name, verifier_model=model)
    rows = []
    for event in run(QUESTION, loaded, search, CacheConfig()):
        if event.type == "run_failed":
            raise SystemExit(f"{verifier}: {event.message}")
        if event.type == "step_selected":
            rows.append((event.step, event.verifier_tokens, event.verifier_tokens_full))
    return rows


@contextlib.contextmanager
def verifier_schedule(grouped: bool) -> Iterator[list]:
    """Searches in this block verify with the grouped schedule or the earlier one; yields the verifiers made
    (their pools' run totals are read after the search)."""
    made, original = [], search_module.make_verifier

    def make(*args, **kwargs):
        verifier = original(*args, **kwargs)
        if hasattr(verifier, "grouped"):
            verifier.grouped = grouped
        made.append(verifier)
        return verifier

    search_module.make_verifier = make
    try:
        yield made
    finally:
        search_module.make_verifier = original


def split_run(loaded, verifier: str, share: str, args: argparse.Namespace, schedule: str = "grouped") -> dict:
    """One search with the verifier's KV under `share` of `args.kv_budget`: its figures, summed over the steps."""
    name, model = ("self-judge", None) if verifier == "self-judge" else ("prm", verifier)
    if share == "off" and name == "self-judge":
        return {"failed": "self-judge reads the generator itself; it cannot leave the budget"}
    with verifier_schedule(schedule == "grouped") as made:
        row = _split_events(loaded, name, model, share, args)
    kv = getattr(made[0], "kv", None) if made else None
    if kv is not None:
        total, calls = kv.counters.total, kv.counters.calls  # over the run, settles included
        row.update(v_h2d=total["h2d"], v_d2h=total["d2h"], d2d=total["d2d"],
                   h2d_calls=calls["h2d"], d2h_calls=calls["d2h"], stall=kv.stall_seconds)
    return row


def _split_events(loaded, name: str, model: str | None, share: str, args: argparse.Namespace) -> dict:
    search = SearchConfig(beams=args.beams, width=args.width, step_tokens=args.step_tokens, step_delimiter=None,
                          max_steps=args.steps, seed=args.seed, verifier=name, verifier_model=model,
                          verifier_device="cpu" if share == "off" else "auto")
    cache = CacheConfig(kv_budget_bytes=args.kv_budget,
                        verifier_kv_share=None if share in ("off", "auto") else float(share))
    row = {"share": share, "tokens": 0, "peak": 0, "device": 0, "host": 0, "v_h2d": 0, "v_d2h": 0, "g_h2d": 0,
           "scores": [], "h2d_calls": 0, "d2h_calls": 0, "d2d": 0, "stall": 0.0}
    for event in run(QUESTION, loaded, search, cache):
        if event.type == "run_failed":
            return {**row, "failed": event.message}
        if event.type == "run_started":
            row.update(generator=event.kv_budget_bytes, verifier=event.verifier_kv_budget_bytes, policy=event.policy)
        elif event.type == "memory_snapshot":
            row["peak"] = max(row["peak"], event.verifier_peak_device_bytes)
            row["device"] = max(row["device"], event.verifier_device_bytes)
            row["host"] = max(row["host"], event.verifier_host_bytes)
            row["v_h2d"] += event.verifier_h2d_bytes
            row["v_d2h"] += event.verifier_d2h_bytes
        elif event.type == "transfer_stats":
            row["g_h2d"] = event.h2d_bytes
        elif event.type == "step_selected":
            row["tokens"] += event.verifier_tokens
        elif event.type == "candidate_scored":
            row["scores"].append(event.score)
    return row


def print_split(loaded, args: argparse.Namespace) -> None:
    size = format_bytes
    print(f"KV budget {size(args.kv_budget)}; verifier bytes: peak and most at rest (device, host), PCIe summed")
    print(f"{'verifier':<30} {'share':>5} {'schedule':>8} {'gen budget':>10} {'ver budget':>10} {'policy':>9} "
          f"{'tokens':>7} {'peak':>9} {'device':>9} {'host':>9} {'ver H2D':>9} {'calls':>6} {'ver D2H':>9} "
          f"{'calls':>6} {'ver D2D':>9} {'stall':>8} {'gen H2D':>9} {'max |diff|':>10}")
    for verifier in args.verifiers:
        first = None
        for share in args.shares:
            for schedule in args.schedules:
                r = split_run(loaded, verifier, share, args, schedule)
                if "failed" in r:
                    print(f"{verifier:<30} {share:>5} {schedule:>8} failed: {r['failed']}")
                    continue
                first = first or r["scores"]
                same = _largest_difference(r["scores"], first)
                print(f"{verifier:<30} {share:>5} {schedule:>8} {size(r['generator']):>10} {size(r['verifier']):>10} "
                      f"{r['policy']:>9} {r['tokens']:>7,} {size(r['peak']):>9} {size(r['device']):>9} "
                      f"{size(r['host']):>9} {size(r['v_h2d']):>9} {r['h2d_calls']:>6,} {size(r['v_d2h']):>9} "
                      f"{r['d2h_calls']:>6,} {size(r['d2d']):>9} {r['stall'] * 1e3:>6.2f}ms {size(r['g_h2d']):>9} "
                      f"{same:>10}")


def _largest_difference(scores: list[float], reference: list[float]) -> str:
    if len(scores) != len(reference):
        return "other tree"
    return f"{max(abs(a - b) for a, b in zip(scores, reference, strict=True)):.1e}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="synthetic:tiny-llama")
    parser.add_argument("--verifiers", nargs="+", default=list(DEFAULT_VERIFIERS))
    parser.add_argument("--beams", type=int, default=4)
    parser.add_argument("--width", type=int, default=4)
    parser.add_argument("--step-tokens", type=int, default=32)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kv-budget", type=parse_bytes, default=None, help="compare shares of this budget")
    parser.add_argument("--shares", nargs="+", default=["off", "auto", "0.02", "0.1"],
                        help="off (PRM off the budget), auto (one verification batch) or fractions")
    parser.add_argument("--schedules", nargs="+", choices=["today", "grouped"], default=["grouped"],
                        help="the verifier's schedule: today (one parent at a time) and/or grouped (LBS-like)")
    args = parser.parse_args(argv)
    loaded = load_model(ModelSpec(args.model))
    if args.kv_budget:
        print(f"generator {loaded.name}; {args.beams} x {args.width} search, steps of {args.step_tokens} tokens")
        print_split(loaded, args)
        return 0
    print(f"generator {loaded.name}; {args.beams} x {args.width} search, steps of {args.step_tokens} tokens")
    print(f"{'verifier':<32} {'step':>4} {'ran':>8} {'full':>8} {'fewer':>7}")
    for verifier in args.verifiers:
        for step, tokens, full in step_counts(loaded, verifier, args):
            if step in (1, 2, args.steps):
                print(f"{verifier:<32} {step:>4} {tokens:>8,} {full:>8,} {full / max(tokens, 1):>6.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
