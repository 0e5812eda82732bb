"""What a bench reports: a policy's row (`PolicyResult`), the whole report (`BenchReport`) and the time limit
that cuts a long ladder short with every finished row kept (`TimeLimit`)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING

from engine.errors import ConfigError
from engine.workload import Workload

if TYPE_CHECKING:
    from engine.baselines import BaselineRun  # torch: only a bench that runs imports it


@dataclass
class PolicyResult:
    """One policy's row. Every figure is None (null in the JSON) until a run measures it: a row that failed or did not
    run carried 0 B, 0.0 s and timed_runs 1, as if measured (README, bench's JSON)."""

    name: str
    ok: bool
    message: str = ""
    h2d_bytes: int | None = None
    d2h_bytes: int | None = None
    d2d_bytes: int | None = None
    peak_device_bytes: int | None = None
    max_groups: int | None = None
    # the timed figures (None in a plan too: its meta-tensor run times nothing a GPU would do; see PLAN_UNTIMED)
    wall_seconds: float | None = None  # a run the time limit stopped: how long it ran
    copy_seconds: float | None = None
    compute_seconds: float | None = None
    modelled_pcie_seconds: float | None = None  # bytes over PCIe / the configured bandwidth (a plan's too)
    stall_seconds: float | None = None  # waiting for copies: modelled on the emulated device, measured on CUDA
    stall_share: float | None = None
    candidate_tokens: int | None = None
    tokens_per_second: float | None = None
    tokens_digest: str | None = None
    goodput: float | None = None  # FlashTTS: mean over the final kept beams of path tokens per second of its
    # completion time
    idle_row_slots: int | None = None  # summed over steps: slots of rows that had finished their step (and not
    # speculated)
    h2d_calls: int | None = None  # copy operations host-to-device (bytes / calls is the average copy size)
    d2h_calls: int | None = None
    step_h2d_bytes: int | None = None  # H2D per search step, averaged over the steps: the prompt's prefill (in
    # h2d_bytes, a whole-run total) left out
    step_pcie_bytes: int | None = None  # H2D + D2H per search step, averaged: what `beamwise plan` gives as its
    # step_pcie_bytes (app/plan_run.py counts the same events)
    kv_budget_bytes: int | None = None  # the generator's device KV budget the run started with: --kv-budget's, or
    # the automatic one (in_device rows always run without --kv-budget's)
    timed_runs: int | None = None  # the wall and copy seconds are the fastest of this many runs
    forwards: int | None = None  # decode forward calls the run needed (each group's longest row): GPU time tracks it
    speculative_tokens: int | None = None  # made in idle slots for children (speculative beam extension)
    speculative_used: int | None = None  # of them, taken by kept candidates' children
    speculative_discarded: int | None = None  # of them, freed with pruned candidates or unneeded at the end
    speculative_runs: int | None = None  # children's steps started speculatively (one per child)
    speculative_lent_runs: int | None = None  # of them, decoded in rows other candidates lent (their own work over)
    verifier_tokens: int | None = None  # tokens the verifier ran, all steps
    verifier_forwards: int | None = None  # its forward calls
    verifier_rows: int | None = None  # rows in them (LookAhead verification rides a child's next step in its
    # parent's row)
    lookahead_verified: int | None = None  # next steps verified with their parent's step
    lookahead_used: int | None = None  # of them, taken by their child
    timed_out: bool = False  # the bench's time limit stopped this run (wall_seconds: how long it ran) or kept it
    # from starting (see `message`)
    h2d_bytes_eq1: int | None = None  # layer-wise only: the paper's Eq. 1-3 over the rows and tokens the run decoded
    pinned_peak_bytes: int | None = None  # CUDA: pinned host memory torch's caching allocator held at most
    pin_seconds: float | None = None  # CUDA: of the wall time, spent pinning new host blocks (a first use's cost)
    teacher_forced_max_logit_diff: float | None = None  # largest |logit - in_device's| on in_device's tokens (0.0
    # for in_device itself, by definition: it is the reference, and is not replayed against itself)
    h2d_vs_layerwise: float | None = None
    wall_vs_in_device: float | None = None
    wall_vs_layerwise: float | None = None


PLAN_UNTIMED = ("wall_seconds", "copy_seconds", "compute_seconds", "stall_seconds", "stall_share",
                "tokens_per_second", "goodput", "wall_vs_in_device", "wall_vs_layerwise", "pinned_peak_bytes",
                "pin_seconds")  # fmt: skip


def planned(result: PolicyResult) -> PolicyResult:
    """A plan's row: its timed figures None. They were the meta-tensor run's own seconds (a plan's JSON carried
    wall_seconds, goodput and wall_vs_layerwise as if measured)."""
    return replace(result, **dict.fromkeys(PLAN_UNTIMED))


@dataclass
class BenchReport:
    workload: Workload
    device: str
    emulated: bool
    plan_only: bool
    results: list[PolicyResult] = field(default_factory=list)
    same_tokens: bool = True
    reference_max_abs_logit: float | None = None  # in_device's largest |logit|: the scale of the TF differences
    baselines: list[BaselineRun] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    step_delimiter_auto: str | None = None  # with --step-delimiter auto: the text picked (also the workload's now)
    path_tokens: int | None = None  # the most tokens a path decodes: gen_tokens in whole steps (rounded up)
    time_limit_seconds: float | None = None  # rows past it were stopped or not started (their rows say so)
    time_limit_before_rows: str | None = None  # what had used the whole time limit before the first row started
    complete: bool = False  # every row is in (False while the bench runs: what `on_row` sees)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class TimeLimit:
    """A bench's time limit, so that a long ladder ends on its own with every finished row reported: a run
    the limit overtakes is stopped, and rows after it do not start; each such row says so, and how to time
    it alone. `seconds` None: no limit."""

    seconds: float | None = None
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        if self.seconds is not None and not self.seconds > 0:
            raise ConfigError(f"the time limit must be a positive number of seconds (got {self.seconds}).")
        if self.seconds is not None and math.isinf(self.seconds):  # it was taken, and the JSON held Infinity
            raise ConfigError("the time limit must be a finite number of seconds (got inf); leave it out for none.")
        self.started = self.clock()
        self.before_rows: str | None = None  # what used the whole limit before the first row (`rows_start`)

    def passed(self) -> bool:
        return self.seconds is not None and self.clock() - self.started >= self.seconds

    def rows_start(self, before: str) -> None:
        """The first row starts now, after `before` (the model's load and the rest). When the limit has passed
        already, every row says that `before` used it: "time it alone" was no advice, as the same limit would
        cut the row alone too."""
        if self.passed():
            self.before_rows = f"{before} took {seconds_text(self.clock() - self.started)} s"

    def not_run(self, alone: str) -> str:
        if self.before_rows is not None:
            return (f"not run: the bench's time limit ({self.seconds:g} s) had passed before the first row "
                    f"({self.before_rows}); give a larger --time-limit")
        return f"not run: the bench's time limit ({self.seconds:g} s) had passed; time it alone ({alone})"

    def stopped(self, seconds: float, alone: str) -> str:
        return (f"stopped by the bench's time limit ({self.seconds:g} s) after {seconds_text(seconds)} s of this "
                f"run; time it alone ({alone})")


def seconds_text(seconds: float) -> str:
    """Whole seconds from 10 s on, two significant digits below: 0.07 s read "0 s"."""
    return f"{seconds:.0f}" if seconds >= 10 else f"{seconds:.2g}"
