"""How often lbs's prefetch of the next group finds room on CUDA, from plan-only runs of the ladder.

On CUDA the group executor loads the whole next group beside the one computing when the device pool
has room for both (engine/kv/groups.py `_prefetch`); elsewhere it never tries. This runs that
branch on `meta` tensors (no weights, any machine) and counts, per policy, the groups and the whole-group
prefetches that found room or not. When a whole group finds no room, CUDA copies what fits of it into
the room left (engine/kv/staging.py): the last columns are the PCIe bytes copied that way while the
group before computed, against all PCIe bytes of the groups after each step's first:

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


def count(workload, policy: str) -> dict[str, int]:
    """Groups planned, whole-group prefetches that found room or not, and the PCIe bytes loaded ahead (by a
    prefetch or copy-ahead) and in all of the groups after each step's first."""
    seen = dict.fromkeys(("groups", "room", "no room", "ahead", "later"), 0)
    run_step, prefetch, stage, load = (GroupExecutor.run_step, GroupExecutor._prefetch, GroupExecutor._stage_next,
                                       GroupExecutor._load)  # fmt: skip
    first: dict[int, object] = {}  # executor -> its step's first group

    def planned(executor, groups, live, timing, should_stop):
        executor.overlap = True  # the CUDA branches, on `meta` tensors
        first[id(executor)] = groups[0] if groups else None
        seen["groups"] += len(groups)
        return run_step(executor, groups, live, timing, should_stop)

    def ahead(method, counted: bool):
        def wrapper(executor, group, *args):
            before = executor.store.counters.step["h2d"]
            result = method(executor, group, *args)
            seen["ahead"] += executor.store.counters.step["h2d"] - before
            if counted and executor.home is not Tier.DEVICE:
                seen["room" if result is not None else "no room"] += 1
            return result

        return wrapper

    def loading(executor, group, live, *args, early=False, **kwargs):
        batch = load(executor, group, live, *args, early=early, **kwargs)
        if group is not first.get(id(executor)) and not early:
            seen["later"] += batch.h2d_bytes
        return batch

    GroupExecutor.run_step, GroupExecutor._load = planned, loading
    GroupExecutor._prefetch, GroupExecutor._stage_next = ahead(prefetch, True), ahead(stage, False)
    try:
        report = run_bench(workload, [policy], plan_only=True)
    finally:
        GroupExecutor.run_step, GroupExecutor._prefetch = run_step, prefetch
        GroupExecutor._stage_next, GroupExecutor._load = stage, load
    if not report.results[0].ok:
        raise SystemExit(f"{policy}: {report.results[0].message}")
    seen["later"] += seen["ahead"]  # a group's bytes loaded ahead are its own, not its load's
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
    print(f"{'policy':<24} {'groups':>6} {'room':>5} {'no room':>7} {'ahead':>10} {'of later':>10}")
    for policy in args.policies.split(","):
        seen = count(workload, policy)
        print(f"{policy:<24} {seen['groups']:>6} {seen['room']:>5} {seen['no room']:>7} "
              f"{seen['ahead'] / 1e6:>8.1f}MB {seen['later'] / 1e6:>8.1f}MB")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
