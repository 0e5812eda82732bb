"""One run folded once from the engine's events: tree, chart series, steps, best path, outcome.

Plain Python and no Qt: the window owns one `SessionModel`, applies each event (live or
replayed) to it once, and every panel reads the model and hears a `Change` saying what moved.
The recorder folds its run into a `SessionModel` of its own and stores the rows it reads from
it (app/session/rows.py); the exports replay a stored run into one and render from it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import app.formatting as fmt
from app.session.series import ChartSeries
from app.session.steps import BEFORE_STEP_1, RunRecord
from app.session.tree import ROOT_ID, SearchTree
from engine import events as ev

RESET = "reset"  # Change.event_type of a cleared model (no event)
ASKED = "asked"  # Change.event_type of `asked`: what a run refused before it started had asked
PLOTS_CHANGED_BY = {ev.MemorySnapshot.type: ("device",),
                    ev.TransferStats.type: ("traffic", "cumulative", "copy", "stall")}
ALL_PLOTS = ("traffic", "cumulative", "device", "copy", "stall")


@dataclass(frozen=True)
class Change:
    """What one `apply` (or a whole replay) changed, for the panels to redraw just that."""

    event_type: str  # the event's type; RESET when cleared; the last type of a replay
    nodes: frozenset[int] = frozenset()  # tree nodes to redraw
    plots: tuple[str, ...] = ()  # charts to redraw
    transcript: bool = False  # the best path, the status or the answer moved
    replay: bool = False  # a whole recorded run folded at once

    @property
    def restarted(self) -> bool:
        """The model was cleared (a reset or a new run): views drop what they drew."""
        return self.event_type in (RESET, ev.RunStarted.type)


@dataclass
class Outline:
    """What the transcript shows besides the texts: the best path so far, a status line, the answer."""

    question: str = ""
    history: tuple[tuple[str, str], ...] = ()  # a conversation's earlier turns: (question, chosen path's text)
    best_path: list[int] = field(default_factory=list)
    status: str = ""
    answer: str | None = None


class SessionModel:
    """The fold of one run's events. `subscribe(callback)` hears a `Change` after every apply and reset.

    `layout=False` skips the tree's row positions, for readers that draw nothing (the recorder, `eval`).
    """

    def __init__(self, *, layout: bool = True) -> None:
        self.tree = SearchTree(layout=layout)
        self.series = ChartSeries()
        self.outline = Outline()
        self.run = RunRecord()
        self._listeners: list[Callable[[Change], None]] = []

    def subscribe(self, callback: Callable[[Change], None]) -> None:
        self._listeners.append(callback)

    def reset(self) -> None:
        """Forget the run; subscribers hear a RESET change."""
        self.tree.clear()
        self.series, self.outline, self.run = ChartSeries(), Outline(), RunRecord()
        self._tell(Change(RESET, frozenset(self.tree.nodes), ALL_PLOTS, True))

    def asked(self, question: str, history: Iterable[tuple[str, str]], emulated: bool) -> Change:
        """What a run refused before it started (a question longer than the model's context, a search too large for
        memory, a verifier that does not load) asked, where RunStarted would have said it: such a run ends with its
        RunFailed alone, and the transcript showed no question, the prompt box was empty and the views dropped
        "emulated" (the KV budget's refusal, after RunStarted, keeps them). Nothing once a run has started."""
        if self.run.started is not None:
            return Change(ASKED)
        self.outline.question, self.outline.history = question, tuple(history)
        self.tree.question = self.tree.nodes[ROOT_ID].text = question
        self.tree.emulated = self.series.emulated = emulated
        change = Change(ASKED, frozenset({ROOT_ID}), ALL_PLOTS, transcript=True)
        self._tell(change)
        return change

    def apply(self, event: object) -> Change:
        """Fold one event in and tell the subscribers what changed; unknown types change nothing."""
        kind = getattr(event, "type", "")
        nodes = self.tree.apply(event)
        self._fold_run(event)
        plots = self._fold_series(event)
        change = Change(kind, frozenset(nodes), plots, self._fold_outline(event))
        self._tell(change)
        return change

    def apply_many(self, events: Iterable[object]) -> Change:
        """A recorded run in one go: the same folding, one change for all of it."""
        events = list(events)
        nodes = self.tree.apply_many(events)
        for event in events:
            self._fold_run(event)
            self._fold_series(event)
            self._fold_outline(event)
        last = getattr(events[-1], "type", RESET) if events else RESET
        change = Change(last, frozenset(nodes), ALL_PLOTS, True, replay=True)
        self._tell(change)
        return change

    def _tell(self, change: Change) -> None:
        for callback in list(self._listeners):
            callback(change)

    def _fold_run(self, event: object) -> None:
        if isinstance(event, ev.RunStarted):
            self.run = RunRecord()
        self.run.apply(event)

    def _fold_series(self, event: object) -> tuple[str, ...]:
        if isinstance(event, ev.RunStarted):  # every title says whether the GPU is emulated
            self.series = ChartSeries(budget_bytes=event.kv_budget_bytes, emulated=event.emulated,
                                      remote=event.device.startswith("remote"))
            return ALL_PLOTS
        was = self.series.emulated
        if not self.series.apply(event):
            return ()
        return ALL_PLOTS if self.series.emulated != was else PLOTS_CHANGED_BY[event.type]

    def _fold_outline(self, event: object) -> bool:
        """True when what the transcript shows has changed."""
        o = self.outline
        if isinstance(event, ev.RunStarted):
            self.outline = Outline(question=event.question, history=tuple(event.history))
        elif isinstance(event, ev.StepSelected) and event.kept:
            o.best_path = self.tree.path_to(event.kept[0])
            o.status = f"Best path after step {event.step}"
        elif isinstance(event, ev.RunFinished):
            o.answer, o.best_path = event.answer, list(self.tree.chosen_path)
            o.status = (f"Chosen path · score {fmt.score(event.score)} · {fmt.steps(len(event.path))} · "
                        f"search {fmt.steps(event.steps)} in {event.seconds:.1f} s")  # the path can end earlier
        elif isinstance(event, ev.RunCancelled):  # the step in progress was dropped
            o.status = f"{cancelled_text(event)}; {'the best path so far' if event.step else 'no step was chosen'}"
        elif isinstance(event, ev.RunFailed):  # the message says what to do; no exception class name for users
            o.status = f"{failure_title(self.run)}: {event.message}"
        else:
            return False
        return True


def cancelled_text(event: ev.RunCancelled) -> str:
    """What Stop kept, for the transcript and the status bar alike: the step in progress is dropped, so a stop
    inside step 1 kept no step at all (not "Stopped after step 0")."""
    return f"Stopped after step {event.step}" if event.step else "Stopped before step 1 finished"


def failure_title(run: RunRecord) -> str:
    """A failed run named by what happened: 'The search could not run' before any step, else the step it was in
    ('The search stopped at step 2'), so a run whose first steps are drawn is not said never to have run."""
    where = run.failed_where
    return "The search could not run" if where == BEFORE_STEP_1 else f"The search stopped {where}"
