"""A step's memory and traffic as events, read from the store's byte counters and the step's timing."""

from __future__ import annotations

from collections.abc import Callable

from engine import events as ev
from engine.kv.policy import Live, Policy, StepTiming
from engine.kv.store import Counters


def candidates_memory(
    live: dict[int, Live], policy: Policy, timing: StepTiming, counters: Counters,
    verifier_placement: Callable[[int], tuple[int, int]],
) -> tuple[ev.CandidateMemory, ...]:
    """Each candidate's KV by tier (`policy.placement`), its share of the step's traffic (shared blocks split evenly:
    `Counters.per_candidate`) and, apart, its verifier KV (`verifier_placement(cid)`: device and host bytes)."""
    memory, traffic_of = [], counters.per_candidate()
    for cid, row in live.items():
        traffic = traffic_of.get(cid, {})
        memory.append(ev.CandidateMemory(cid, timing.group_of.get(cid), *policy.placement(row), traffic.get("h2d", 0),
                                         traffic.get("d2h", 0), *verifier_placement(cid)))  # fmt: skip
    return tuple(memory)


def transfer_stats(step: int, emulated: bool, counters: Counters, timing: StepTiming, bandwidth: float
                   ) -> ev.TransferStats:  # fmt: skip
    """The run's and the step's bytes, the step's modelled PCIe time at `bandwidth` and its share of stalls: modelled
    on the emulated device, else measured between CUDA events."""
    pcie = (counters.step["h2d"] + counters.step["d2h"]) / bandwidth
    compute = timing.compute_seconds
    stall = timing.modelled_stall_seconds if emulated else counters.step_stall_seconds
    if not emulated:  # measured stall: a wait inside a forward call (layer-wise's) is in the decode loop's
        compute = max(timing.decode_seconds - stall, 0.0)  # host time too; compute is the step's time less it
    return ev.TransferStats(
        step,
        emulated,
        counters.total["h2d"],
        counters.total["d2h"],
        counters.total["d2d"],
        counters.step["h2d"],
        counters.step["d2h"],
        counters.step["d2d"],
        counters.step_copy_seconds,
        pcie,
        compute,
        stall / (stall + compute) if stall + compute > 0 else 0.0,
        len(set(timing.group_of.values())),
        timing.idle_row_slots,
        counters.calls["h2d"],
        counters.calls["d2h"],
        timing.speculative_tokens,
        timing.forwards,
        timing.speculative_runs,
        timing.speculative_lent_runs,
    )
