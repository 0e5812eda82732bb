"""Groups and PCIe bytes of lbs planned by the slots a cascade load takes, against the estimate before (issue 9).

Before, lbs counted a group as its shared prefix once and then every row at the longest member's
remaining length plus the step, as if no family shared its parent's history; now it counts what
`GroupExecutor._load` takes (engine/kv/working.py). Both run here as plan-only runs of the same
workload (the real policies on `meta` tensors: no weights, deterministic on any machine), the
previous estimate put back in `lbs.group_bytes` for the "before" rows. The whole-search bound that
sizes in_device's pool is printed without and with cascade attention too:

    python -m benchmarks.cascade_plans w16
    python -m benchmarks.cascade_plans w64 --budget 4000000000
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

from app import formatting
from app.model_facts import facts_of
from benchmarks.gpu_ladder import WORKLOADS
from engine.bench import Workload, run_bench
from engine.kv import lbs
from engine.kv.policy import Work, common_prefix
from engine.kv.sizing import whole_search_bytes

POLICIES = ("lbs:+inter_beam", "lbs:+balanced_prefetch", "lbs:+prefix_order")


def previous_group_bytes(members: Sequence[Work], step_tokens: int, token_bytes: int, block_size: int | None = None,
                         prefix_floor: int = 0) -> int:  # fmt: skip
    """lbs's estimate before issue 9's cascade plans (its slack for whole slots included): the prefix once,
    then every row the longest member's tokens after it plus the step. `prefix_floor` is not used."""
    if not members:
        return 0
    longest = max(m.tokens for m in members)
    if block_size is None:
        return len(members) * (longest + step_tokens) * token_bytes
    shared = len(common_prefix([m.table for m in members]))
    prefix = min(shared * block_size, min(m.tokens for m in members))
    slack = lbs.SLACK_BLOCKS * block_size
    return (prefix + len(members) * (longest - prefix + step_tokens) + slack) * token_bytes


@contextlib.contextmanager
def previous_estimate() -> Iterator[None]:
    """lbs plans with `previous_group_bytes` inside this block."""
    current, lbs.group_bytes = lbs.group_bytes, previous_group_bytes
    try:
        yield
    finally:
        lbs.group_bytes = current


@dataclass(frozen=True)
class Planned:
    groups: int  # summed over the steps
    max_groups: int
    h2d_bytes: int
    h2d_calls: int
    peak_device_bytes: int


def planned(workload: Workload, policy: str) -> Planned:
    """One plan-only run of `policy`, counting every step's groups."""
    counted: list[int] = []
    plan = lbs.LbsPolicy.plan

    def counting(self, work, budget):
        step = plan(self, work, budget)
        counted.append(len(step.groups))
        return step

    lbs.LbsPolicy.plan = counting
    try:
        result = run_bench(workload, [policy], plan_only=True, baselines=[], teacher_forcing=False).results[0]
    finally:
        lbs.LbsPolicy.plan = plan
    if not result.ok:
        raise SystemExit(f"{policy} did not run: {result.message}")
    return Planned(sum(counted), max(counted), result.h2d_bytes, result.h2d_calls, result.peak_device_bytes)


def whole_bounds(workload: Workload) -> tuple[int, int]:
    """The bound that sizes in_device's pool with every row holding its whole history, and per family."""
    token_bytes = facts_of(workload.model, workload.dtype).kv_token_bytes
    args = (workload.prompt_tokens, workload.search(), token_bytes, workload.block_size)
    return whole_search_bytes(*args), whole_search_bytes(*args, cascade=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", choices=sorted(WORKLOADS))
    parser.add_argument("--budget", type=int, default=None, help="KV budget in bytes (default: the workload's)")
    args = parser.parse_args(argv)
    workload = WORKLOADS[args.workload]
    workload = replace(workload, kv_budget_bytes=args.budget or workload.kv_budget_bytes)
    print(f"{args.workload}: {workload.beams} x {workload.width}, prompt {workload.prompt_tokens}, "
          f"{workload.gen_tokens} generated in steps of {workload.step_tokens}, budget "
          f"{formatting.size(workload.kv_budget_bytes)}")  # fmt: skip
    print(f"{'policy':<24}{'estimate':<10}{'groups':>8}{'max':>5}{'H2D':>12}{'H2D ops':>9}{'peak':>11}")
    for policy in POLICIES:
        with previous_estimate():
            before = planned(workload, policy)
        after = planned(workload, policy)
        for label, row in (("before", before), ("after", after)):
            print(f"{policy:<24}{label:<10}{row.groups:>8}{row.max_groups:>5}{formatting.size(row.h2d_bytes):>12}"
                  f"{row.h2d_calls:>9}{formatting.size(row.peak_device_bytes):>11}")  # fmt: skip
    old, new = whole_bounds(workload)
    print(f"in_device's whole-search bound: {formatting.size(old)} with every row holding its whole history, "
          f"{formatting.size(new)} with cascade attention (python -m benchmarks.whole_bound: against the peak)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
