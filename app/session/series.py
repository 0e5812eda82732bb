"""Per-step figures of one run for the charts: device and host KV, PCIe traffic, copy time (plain data)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine import events as ev


@dataclass
class ChartSeries:
    """Per-step figures of one run, appended as events arrive (x values are step numbers)."""

    memory_steps: list[int] = field(default_factory=list)
    device_bytes: list[int] = field(default_factory=list)
    peak_device_bytes: list[int] = field(default_factory=list)
    host_bytes: list[int] = field(default_factory=list)
    verifier_device_bytes: list[int] = field(default_factory=list)  # the verifier's KV, apart from the generator's
    verifier_host_bytes: list[int] = field(default_factory=list)
    transfer_steps: list[int] = field(default_factory=list)
    step_h2d: list[int] = field(default_factory=list)
    step_d2h: list[int] = field(default_factory=list)
    total_h2d: list[int] = field(default_factory=list)
    total_d2h: list[int] = field(default_factory=list)
    prompt_h2d: int = 0  # what the question's KV moved before step 1 (a prefix-cache load, an offload): in the
    prompt_d2h: int = 0  # cumulative figures from step 1 on, in no step's own
    copy_seconds: list[float] = field(default_factory=list)
    modelled_seconds: list[float] = field(default_factory=list)
    stall_share: list[float] = field(default_factory=list)  # of the step's KV time spent waiting for copies
    step_seconds: list[float] = field(default_factory=list)  # the step's compute plus its stall
    budget_bytes: int | None = None
    verifier_budget_bytes: int = 0  # its share of the device KV budget (0: it keeps no KV there)
    verifier_h2d: int = 0  # the verifier's own KV traffic over the run, apart from the generator's
    verifier_d2h: int = 0
    emulated: bool = False
    remote: bool = False  # a generator server's run: it holds the KV, the figures here are zeros

    def traffic(self, cumulative: bool = False) -> tuple[list[int], list[int], list[int]]:
        """x, H2D and D2H of each step (or cumulative), led at x = 0 by the question's own traffic when it moved any."""
        h2d, d2h = (self.total_h2d, self.total_d2h) if cumulative else (self.step_h2d, self.step_d2h)
        if not self.transfer_steps or not (self.prompt_h2d or self.prompt_d2h):
            return list(self.transfer_steps), list(h2d), list(d2h)
        return [0, *self.transfer_steps], [self.prompt_h2d, *h2d], [self.prompt_d2h, *d2h]

    def apply(self, event: object) -> bool:
        """Fold a MemorySnapshot or TransferStats in; True when the charts need redrawing."""
        if isinstance(event, ev.MemorySnapshot):
            self.budget_bytes, self.emulated = event.budget_bytes, event.emulated
            self.memory_steps.append(event.step)
            self.device_bytes.append(event.device_bytes)
            self.peak_device_bytes.append(event.peak_device_bytes)
            self.host_bytes.append(event.host_bytes)
            self.verifier_budget_bytes = event.verifier_budget_bytes
            self.verifier_device_bytes.append(event.verifier_device_bytes)
            self.verifier_host_bytes.append(event.verifier_host_bytes)
            self.verifier_h2d += event.verifier_h2d_bytes
            self.verifier_d2h += event.verifier_d2h_bytes
        elif isinstance(event, ev.TransferStats):
            self.emulated = event.emulated
            if not self.transfer_steps:
                self.prompt_h2d, self.prompt_d2h = prompt_traffic(event)
            self.transfer_steps.append(event.step)
            self.step_h2d.append(event.step_h2d_bytes)
            self.step_d2h.append(event.step_d2h_bytes)
            self.total_h2d.append(event.h2d_bytes)
            self.total_d2h.append(event.d2h_bytes)
            self.copy_seconds.append(event.copy_seconds)
            self.modelled_seconds.append(event.modelled_pcie_seconds)
            self.stall_share.append(event.stall_share)
            self.step_seconds.append(step_seconds(event.compute_seconds, event.stall_share))
        else:
            return False
        return True


def prompt_traffic(first: ev.TransferStats | Mapping[str, Any]) -> tuple[int, int]:
    """H2D and D2H bytes the question's KV moved before step 1: the first step's totals less its own figures.
    `first`: its TransferStats as a run yields it, or its stored timeline row (the same names; None reads as 0),
    so the charts, the tree, the terminal and the exports take the question's traffic alike."""
    row = first if isinstance(first, Mapping) else vars(first)
    h2d, d2h = ((row[f"{d}_bytes"] or 0) - (row[f"step_{d}_bytes"] or 0) for d in ("h2d", "d2h"))
    return h2d, d2h


def question_traffic(prefill: ev.PrefillDone | None, first: ev.TransferStats | Mapping[str, Any] | None,
                     ) -> tuple[int, int]:
    """H2D and D2H bytes the question's KV moved before step 1, the exports' `prompt` row: the run's PrefillDone
    figures, the only record of them in a run cancelled in step 1 (whose headline holds them: a table of no rows
    did not add up to it); else the first step's (`prompt_traffic` of `first`), as sessions stored before
    PrefillDone carried them read 0 there. A run with both counts the same transfers (the store's, to step 1)."""
    if prefill is not None and (prefill.h2d_bytes or prefill.d2h_bytes):
        return prefill.h2d_bytes, prefill.d2h_bytes
    return prompt_traffic(first) if first is not None else (0, 0)


def step_seconds(compute: float, stall_share: float) -> float:
    """The step's time in the KV layer: compute plus the stall (stall = share x (compute + stall))."""
    return compute / (1.0 - stall_share) if stall_share < 1.0 else compute
