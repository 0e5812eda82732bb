"""How often lbs's prefetch of the next group finds room on CUDA, from plan-only runs of the ladder.

On CUDA the group executor loads the whole next group beside the one computing when the device pool
has room for both (engine/kv/groups.py `_prefetch`); elsewhere it never tries. This runs that
branch on `meta` tensors (no weights, any machine) and counts, per policy, the groups the plan marks
as partly prefetched (`Group.prefetched`, what the emulated device's stall model hides) and the
prefetches that found room or not:

    python -m benchmarks.prefetch_room w64 --kv-budget 2e9
    python -m benchmarks.prefetch_room w16 --kv-budget 0.4e9 --policies lbs:inter_token,lbs:+balanced_prefetch
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from benchmarks.gpu_ladder import WORKLOADS
from engine.bench import run_bench
from engine.kv.blocks import Tier
from engine.kv.groups import GroupExecutor
from engine.kv.pool import PoolExhausted


def count(workload, policy: str) -> dict[str, int]:
    """Groups planned, groups the plan marks as prefetched, and prefetches tried that found room or not."""
    seen = dict.fromkeys(("groups", "marked", "room", "no room"), 0)
    run_step, prefetch = GroupExecutor.run_step, GroupExecutor._prefetch

    def planned(executor, groups, live, timing, should_stop):
        seen["groups"] += len(groups)
        seen["marked"] += sum(1 for g in groups if g.prefetched)
        return run_step(executor, groups, live, timing, should_stop)

    def tried(executor, group, live, carry):  # the CUDA branch of GroupExecutor._prefetch
        if executor.home is Tier.DEVICE:
            return None
        previous = executor.kept
        try:
            batch = executor._load(group, live, carry, early=True)
        except PoolExhausted:
            seen["no room"] += 1
            if executor.kept is not previous:
                failed, executor.kept = executor.kept, previous
                executor._release_if_unused(failed)
            return None
        seen["room"] += 1
        return batch

    GroupExecutor.run_step, GroupExecutor._prefetch = planned, tried
    try:
        report = run_bench(workload, [policy], plan_only=True)
    finally:
        GroupExecutor.run_step, GroupExecutor._prefetch = run_step, prefetch
    if not report.results[0].ok:
        raise SystemExit(f"{policy}: {report.results[0].message}")
    return seen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", choices=sorted(WORKLOADS))
    parser.add_argument("--kv-budget", type=float, default=None, help="bytes (default: the workload's)")
    parser.add_argument("--policies", default="lbs:+balanced_prefetch,lbs:+prefix_order")
    args = parser.parse_args(argv)
    workload = WORKLOADS[args.workload]
    if args.kv_budget is not None:
        workload = replace(workload, kv_budget_bytes=int(args.kv_budget))
    print(f"{args.workload} at {workload.kv_budget_bytes / 1e9:.2f} GB")
    print(f"{'policy':<24} {'groups':>6} {'marked':>6} {'room':>5} {'no room':>7}")
    for policy in args.policies.split(","):
        seen = count(workload, policy)
        print(f"{policy:<24} {seen['groups']:>6} {seen['marked']:>6} {seen['room']:>5} {seen['no room']:>7}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
