"""in_device's whole-search bound against its real peak, before and after counting pruned paths as freed.

The bound is what `auto` compares with the KV budget (in_device when the whole search fits, else lbs),
what sizes in_device's device pool, and the plan's generator KV in the window and `beamwise plan`.
Before, it held every candidate's blocks of every step at rest and staged each family's history from
the prompt on; now it holds only the paths each step keeps (pruned candidates are freed at selection)
and the history after the prompt's full blocks (the prompt is read in place), and counts a lookahead's
roll-outs itself (engine/kv/sizing.py `whole_search_bytes`). The peak is a plan-only in_device run of
the same workload with no budget, so its pool is the bound: it would fail if the bound were too small.
Everything here is deterministic (plan-only: the real policy and store on `meta` tensors):

    python -m benchmarks.whole_bound
    python -m benchmarks.whole_bound w64 --budget 8000000000
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from app import formatting
from app.model_facts import facts_of
from benchmarks.gpu_ladder import WORKLOADS
from engine.bench import Workload, run_bench
from engine.config import CacheConfig, SearchConfig
from engine.kv.policy import growth_tokens, tail_blocks
from engine.kv.sizing import auto_policy, one_candidate_bytes, search_kv_bytes


def previous_whole_bytes(prompt_tokens: int, search: SearchConfig, cache: CacheConfig, token_bytes: int) -> int:
    """The bound before (commit be50d2f), with cascade attention: every candidate's growth of every step at
    rest, each family's history from the prompt on, and a lookahead run sized as `lookahead` more steps."""
    search = replace(search, max_steps=search.max_steps + search.lookahead, lookahead=0)
    n, steps, k, block = search.candidates_per_step, search.max_steps, search.step_tokens, cache.block_size
    per_step = growth_tokens(k, block, tail_blocks(cache.speculative, cache.speculative_continuations != 1))
    longest = prompt_tokens + steps * k
    at_rest = prompt_tokens + 3 * block + n * steps * per_step
    if search.width == 1 or search.method not in ("beam", "dvts"):
        return (at_rest + n * (longest + k) + 2 * block) * token_bytes
    own = min(longest, block + k) if cache.speculative else 0
    return (at_rest + search.beams * longest + n * (own + k) + 2 * block) * token_bytes


def in_device_peak(workload: Workload) -> int:
    """The device pool's peak of a plan-only in_device run (its pool sized to the bound)."""
    result = run_bench(workload, ["in_device"], plan_only=True, baselines=[], teacher_forcing=False).results[0]
    if not result.ok:
        raise SystemExit(f"in_device did not run within its bound: {result.message}")
    return result.peak_device_bytes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="*", help=f"of {', '.join(sorted(WORKLOADS))} (default: w16 w64 w32x128)")
    parser.add_argument("--budget", type=int, help="the budget auto compares with (default: the workload's)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.workloads) - set(WORKLOADS))
    if unknown:
        parser.error(f"unknown workload {', '.join(unknown)}; choose from {', '.join(sorted(WORKLOADS))}")
    print(f"{'workload':<10}{'before':>10}{'now':>10}{'peak':>10}{'now/peak':>10}   auto at budget: before -> now")
    for name in args.workloads or ["w16", "w64", "w32x128"]:
        workload = WORKLOADS[name]
        search, cache = workload.search(), CacheConfig(block_size=workload.block_size)
        token_bytes = facts_of(workload.model, workload.dtype).kv_token_bytes
        before = previous_whole_bytes(workload.prompt_tokens, search, cache, token_bytes)
        now = search_kv_bytes(workload.prompt_tokens, search, cache, token_bytes, cascade=True)
        peak = in_device_peak(workload)
        budget = args.budget or workload.kv_budget_bytes
        one = one_candidate_bytes(workload.prompt_tokens, search, token_bytes, workload.block_size)
        picks = f"{auto_policy(before, one, budget)} -> {auto_policy(now, one, budget)} ({formatting.size(budget)})"
        print(f"{name:<10}{formatting.size(before):>10}{formatting.size(now):>10}{formatting.size(peak):>10}"
              f"{now / peak:>10.2f}   {picks}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
