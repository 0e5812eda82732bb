"""What a run did step by step and how it ended, folded from its events: the part of a run the tree does not draw.

`RunRecord` keeps the run's start event, each step's own events (its start, memory snapshot, transfer stats and
selection) and the run's prompt size and terminal event. `SessionModel` owns one; the
recorder's step rows, the exports' memory tables and `beamwise eval` read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine import events as ev

STATUS_OF_END = {ev.RunFinished.type: "finished", ev.RunCancelled.type: "cancelled", ev.RunFailed.type: "failed"}


BEFORE_STEP_1 = "before step 1"  # `failure_point` of a run that failed before it started a step


def failure_point(begun: int, selected: int) -> str:
    """Where a failed run stopped, from the last step it started and the last it chose (0: none): 'before step 1';
    'at step N' inside step N; 'after step N' when every step it started was chosen (it failed in the answer).
    The one place that decides it: `beamwise run`'s last line, the exports and the window's title say these words."""
    if begun == 0:
        return BEFORE_STEP_1
    return f"{'after' if selected >= begun else 'at'} step {begun}"


@dataclass
class StepRecord:
    """One step's events; a field stays None until its event arrives."""

    step: int
    started: ev.StepStarted | None = None
    memory: ev.MemorySnapshot | None = None  # the step's last snapshot
    transfer: ev.TransferStats | None = None
    selected: ev.StepSelected | None = None  # None: the run ended inside this step

    @property
    def beams(self) -> tuple[int, ...]:
        return self.started.beams if self.started else ()


@dataclass
class RunRecord:
    """The run's start, steps in order and outcome."""

    started: ev.RunStarted | None = None
    prompt_tokens: int | None = None
    prefill: ev.PrefillDone | None = None
    steps: dict[int, StepRecord] = field(default_factory=dict)
    end: ev.RunFinished | ev.RunCancelled | ev.RunFailed | None = None
    policy_changes: list[ev.PolicyChanged] = field(default_factory=list)  # auto went on with another policy

    def apply(self, event: object) -> None:
        """Fold one event in; events that say nothing about steps or the outcome are ignored."""
        if isinstance(event, ev.RunStarted):
            self.started = event
        elif isinstance(event, ev.PrefillDone):
            self.prompt_tokens, self.prefill = event.prompt_tokens, event
        elif isinstance(event, ev.StepStarted):
            self._step(event.step).started = event
        elif isinstance(event, ev.MemorySnapshot):
            self._step(event.step).memory = event
        elif isinstance(event, ev.TransferStats):
            self._step(event.step).transfer = event
        elif isinstance(event, ev.StepSelected):
            self._step(event.step).selected = event
        elif isinstance(event, ev.PolicyChanged):
            self.policy_changes.append(event)
        elif isinstance(event, ev.RunFinished | ev.RunCancelled | ev.RunFailed):
            self.end = event

    def _step(self, step: int) -> StepRecord:
        return self.steps.setdefault(step, StepRecord(step))

    @property
    def selected_steps(self) -> list[StepRecord]:
        """The steps that finished (were selected), first step first."""
        return [record for _, record in sorted(self.steps.items()) if record.selected is not None]

    @property
    def status(self) -> str:
        """running, finished, cancelled or failed."""
        return "running" if self.end is None else STATUS_OF_END[self.end.type]

    @property
    def error(self) -> str | None:
        """A failed run's message ('what happened and what to do'), else None. A fault in Beamwise (one with
        details) keeps its exception's class in front ('IndexError: ...'), which its report needs; a user's
        error is said in the window's words alone (`sessions show` and the exports printed 'KVBudgetTooSmall: ')."""
        if not isinstance(self.end, ev.RunFailed):
            return None
        return f"{self.end.error}: {self.end.message}" if self.end.details else self.end.message

    @property
    def failed_where(self) -> str:
        """`failure_point` of this run's last started and last chosen steps."""
        started = max((step for step, record in self.steps.items() if record.started is not None), default=0)
        return failure_point(started, max((record.step for record in self.selected_steps), default=0))

    @property
    def traffic(self) -> ev.TransferStats | None:
        """The run's cumulative transfers as of its last finished step."""
        return next((r.transfer for r in reversed(self.selected_steps) if r.transfer is not None), None)
