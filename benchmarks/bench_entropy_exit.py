"""The layer-entropy exit (RKSC) on one search: mean exit layer, verifier layer work saved, what it changes.

    python -m benchmarks.bench_entropy_exit                                  # bundled model, self-judge
    python -m benchmarks.bench_entropy_exit --model synthetic:tiny-qwen2 --theta 1000 --delta 1000
    python -m benchmarks.bench_entropy_exit --verifier synthetic:tiny-rlhflow-prm --model synthetic:tiny-llama

Runs the same search (same seed) three times: the exit off, on, and on with --audit-early-exit
(the full pass runs too and says whether it would have put another child first). Layer work is
tokens x decoder layers through the verifier, kept candidates' completed layers included, so it
is deterministic; the logit lens's own cost (the LM head at each checked layer) is not in it, so
compare the wall seconds too (on a shared machine they are noisy).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from engine.config import CacheConfig, ModelSpec, SearchConfig
from engine.models import load_model
from engine.search import run

QUESTION = "Tom has 3 apples and buys 4 more. Then he eats 2. How many apples does he have now?"
SETTINGS = {"off": {}, "exit": {"entropy_exit": True},
            "exit+audit": {"entropy_exit": True, "audit_early_exit": True}}


def measure(loaded, args: argparse.Namespace, changes: dict) -> dict:
    """One search's figures, from its `step_selected` events."""
    name, model = ("self-judge", None) if args.verifier == "self-judge" else ("prm", args.verifier)
    search = SearchConfig(beams=args.beams, width=args.width, step_tokens=args.step_tokens, max_steps=args.steps,
                          seed=args.seed, verifier=name, verifier_model=model, entropy_theta=args.theta,
                          entropy_delta=args.delta, **changes)
    started = time.perf_counter()
    events = list(run(QUESTION, loaded, search, CacheConfig()))
    seconds = time.perf_counter() - started
    if events[-1].type == "run_failed":
        raise SystemExit(f"{args.verifier}: {events[-1].message}")
    steps = [e for e in events if e.type == "step_selected"]
    exited = [e.exit_layer for e in steps if e.exit_layer is not None]
    audited = [e.exit_agrees for e in steps if e.exit_agrees is not None]
    return {
        "seconds": seconds, "answer": events[-1].answer,
        "layers": max((e.verifier_layers or 0 for e in steps), default=0),
        "exit_layer": sum(exited) / len(exited) if exited else None,
        "work": sum(e.verifier_layer_tokens for e in steps), "full": sum(e.verifier_layer_tokens_full for e in steps),
        "audited": len(audited), "disagreed": sum(not a for a in audited),
    }


def row(label: str, m: dict, reference: dict) -> str:
    layer = "-" if m["exit_layer"] is None else f"{m['exit_layer']:.1f}/{m['layers']}"
    saved = f"{1 - m['work'] / m['full']:.1%}" if m["full"] else "-"
    audit = f"{m['disagreed']}/{m['audited']}" if m["audited"] else "-"
    same = "same" if m["answer"] == reference["answer"] else "differs"
    work, full = (f"{m['work']:,}", f"{m['full']:,}") if m["full"] else ("-", "-")
    return f"{label:<11} {layer:>9} {work:>12} {full:>12} {saved:>7} {audit:>9} {same:>8} {m['seconds']:>8.1f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="bundled")
    parser.add_argument("--verifier", default="self-judge", help="self-judge or a PRM (folder or synthetic:NAME)")
    parser.add_argument("--beams", type=int, default=2)
    parser.add_argument("--width", type=int, default=2)
    parser.add_argument("--step-tokens", type=int, default=24)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--theta", type=float, default=SearchConfig().entropy_theta)
    parser.add_argument("--delta", type=float, default=SearchConfig().entropy_delta)
    args = parser.parse_args(argv)
    loaded = load_model(ModelSpec(args.model))
    print(f"generator {loaded.name}; verifier {args.verifier}; {args.beams} x {args.width} search, "
          f"{args.steps} steps of at most {args.step_tokens} tokens; theta {args.theta}, delta {args.delta} "
          "(for a ~150k vocabulary)")
    print(f"{'setting':<11} {'exit at':>9} {'layer work':>12} {'no exit':>12} {'saved':>7} {'audit':>9} "
          f"{'answer':>8} {'wall s':>8}")
    reference = None
    for label, changes in SETTINGS.items():
        measured = measure(loaded, args, changes)
        reference = reference or measured
        print(row(label, measured, reference), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
