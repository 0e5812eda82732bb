"""Bytes and copy calls in every direction, device-to-device included, of plan-only runs of the ladder.

The bench table counts calls across PCIe only (`H2D ops`); this tallies every copy the KV store
counts, per policy, on `meta` tensors (no weights, any machine):

    python -m benchmarks.copy_calls w16
    python -m benchmarks.copy_calls w64 --gen-tokens 1024 --policies in_device,lbs:inter_token
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from dataclasses import replace

from app import formatting
from benchmarks.gpu_ladder import WORKLOADS
from engine.bench import run_bench
from engine.kv.store import DIRECTIONS, Counters


def tally(workload, policy: str) -> dict[str, list[int]]:
    """(bytes, calls) per direction of one plan-only run, from every `Counters.add` the store makes."""
    seen: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    add = Counters.add

    def counting(self, direction: str, nbytes: int, owners=()) -> None:
        add(self, direction, nbytes, owners)
        seen[direction][0] += nbytes
        seen[direction][1] += 1

    Counters.add = counting
    try:
        report = run_bench(workload, [policy], plan_only=True, baselines=[])
    finally:
        Counters.add = add
    result = report.results[0]
    if not result.ok:
        raise SystemExit(f"{policy} did not run: {result.message}")
    return seen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", choices=sorted(WORKLOADS))
    parser.add_argument("--policies", default="in_device,lbs:inter_token,lbs:+inter_beam,lbs:+prefix_order")
    parser.add_argument("--gen-tokens", type=int, default=None, help="generated tokens (default: the workload's)")
    args = parser.parse_args(argv)
    workload = WORKLOADS[args.workload]
    if args.gen_tokens is not None:
        workload = replace(workload, gen_tokens=args.gen_tokens)
    print(f"{args.workload}, {workload.gen_tokens} generated tokens, plan only: bytes / copy calls")
    print(f"{'policy':<22}" + "".join(f"{d.upper():>26}" for d in DIRECTIONS))
    for policy in [p for p in args.policies.split(",") if p]:
        seen = tally(workload, policy)
        cells = [f"{formatting.size(seen[d][0])} / {seen[d][1]:,}" for d in DIRECTIONS]
        print(f"{policy:<22}" + "".join(f"{c:>26}" for c in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
