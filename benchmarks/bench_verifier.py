"""Verifier tokens per step with KV reuse against rescoring every candidate's whole path (issue 12).

    python -m benchmarks.bench_verifier                       # 4 x 4 search, 32-token steps, 8 steps
    python -m benchmarks.bench_verifier --verifiers synthetic:tiny-qwen-prm self-judge --steps 4

Runs a real search (the generator is synthetic:tiny-llama unless --model says otherwise) and sums
each step's `step_selected` event: `verifier_tokens` (what the verifier ran) and
`verifier_tokens_full` (what full rescoring would have run). Token counts are deterministic.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from engine.config import CacheConfig, ModelSpec, SearchConfig
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="synthetic:tiny-llama")
    parser.add_argument("--verifiers", nargs="+", default=list(DEFAULT_VERIFIERS))
    parser.add_argument("--beams", type=int, default=4)
    parser.add_argument("--width", type=int, default=4)
    parser.add_argument("--step-tokens", type=int, default=32)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    loaded = load_model(ModelSpec(args.model))
    print(f"generator {loaded.name}; {args.beams} x {args.width} search, steps of {args.step_tokens} tokens")
    print(f"{'verifier':<32} {'step':>4} {'ran':>8} {'full':>8} {'fewer':>7}")
    for verifier in args.verifiers:
        for step, tokens, full in step_counts(loaded, verifier, args):
            if step in (1, 2, args.steps):
                print(f"{verifier:<32} {step:>4} {tokens:>8,} {full:>8,} {full / max(tokens, 1):>6.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
