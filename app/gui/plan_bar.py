"""The "will it fit?" bar above the tree: the memory plan of the current settings as a coloured state and one
sentence, refreshed shortly after the settings change; the figures are in its tooltip (`beamwise plan` prints them)."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from PySide6.QtCore import QTimer, Signal
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QHBoxLayout, QLabel, QWidget

from app.gui.background import run_in_background
from app.gui.engine_import import engine_modules, engine_ready
from app.gui.hints import first_lines
from app.gui.model_picker import SERVER_SOURCE
from app.gui.terms import window_terms
from engine.chat import Turn
from engine.config import CacheConfig, ModelSpec, SearchConfig

if TYPE_CHECKING:
    from app.planner import MemoryPlan

COLOURS = {"green": "#2f8a57", "amber": "#b07a12", "red": "#c0504d", "unknown": "#5f6b7a"}
DEBOUNCE_MS = 400  # settings change in bursts (a slider drag): plan once they settle
MOST_LINES = 2  # the sentence's lines above the tree; a longer one ends in '…' and is whole in the tooltip
# Run pressed within DEBOUNCE_MS of a change: the bar went on showing the plan of the settings before it all run
UNPLANNED_RUN = "The settings changed just before this run; their memory plan is made once it ends."
WAITING = "Planning memory once PyTorch has loaded…"  # a plan reads configs and tokenizers through transformers

Configs = tuple[ModelSpec, SearchConfig, CacheConfig]
Prompt = tuple[str, Sequence[Turn]]  # the question a Run would ask and the conversation turns before it


class PlanBar(QWidget):
    """Shows `plan(settings)` for the prompt a Run would send (`prompt()`: a follow-up's holds its conversation);
    `planned(plan or None)` fires on the GUI thread after each refresh."""

    planned = Signal(object)

    def __init__(self, configs: Callable[[], Configs], prompt: Callable[[], Prompt],
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._configs, self._prompt = configs, prompt
        self._generation = 0
        self._paused, self._pending = False, False
        self.plan: MemoryPlan | None = None
        self._sentence, self._details = "", ""
        self.dot, self.sentence = QLabel("●"), QLabel("Planning memory…")
        self.sentence.setWordWrap(True)
        row = QHBoxLayout(self)
        row.setContentsMargins(4, 0, 4, 0)
        row.addWidget(self.dot)
        row.addWidget(self.sentence, 1)
        self._timer = QTimer(self, singleShot=True, interval=DEBOUNCE_MS)
        self._timer.timeout.connect(self.refresh_now)
        self._paint("unknown", "Planning memory…", "")

    def schedule(self) -> None:
        """Settings or the question changed: plan again once they settle (after the run, while one is on)."""
        if self._paused:
            self._pending = True
            return
        self._timer.start()

    def set_paused(self, paused: bool) -> None:
        """While a run is on, plans wait: a plan is for the next run, and making one (reading a tokenizer, a
        plan-only run) holds Python's lock for up to 150 ms at a time, which the search and the window then wait
        for. Unpaused, a plan asked for meanwhile is made."""
        if paused == self._paused:
            return
        self._paused = paused
        if paused:
            if self._timer.isActive():  # the settings the run starts with are not those the bar shows
                self._generation += 1  # a plan of the older ones still being made is not shown either
                self._paint("unknown", UNPLANNED_RUN, "")
            self._pending = self._pending or self._timer.isActive()
            self._timer.stop()
        elif self._pending:
            self._pending = False
            self._timer.start()

    def refresh_now(self) -> None:
        """Plan the current settings in a worker thread (a plan-only run can take a second)."""
        self._timer.stop()
        self._generation += 1
        try:
            configs = self._configs()
        except ValueError as error:
            self._show(self._generation, None, f"Fix the settings to see a plan: {window_terms(str(error))}")
            return
        if configs[0].source == SERVER_SOURCE:
            self._show(self._generation, None, "Remote: the server holds the model and its KV cache; "
                       "nothing is planned on this machine.")
            return
        generation, (question, history) = self._generation, self._prompt()  # read here: the store is this thread's
        if not engine_ready():
            self._paint("unknown", WAITING, "")  # the worker below waits for the import, then plans
        work = lambda: (generation, *_plan(configs, question, history))  # noqa: E731
        run_in_background(self, "beamwise-plan", work, self._show)

    def _show(self, generation: int, result: MemoryPlan | None, error: str) -> None:
        if generation != self._generation:
            return  # an older plan, overtaken by a newer request
        self.plan = result
        if result is None:
            self._paint("unknown", error, "")
        else:
            rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>" for k, v in result.rows())
            # the plan's sentence names the command line's options: the window's labels instead, as for an error
            self._paint(result.state, window_terms(result.sentence), f"<table>{rows}</table>")
        self.planned.emit(result)

    def _paint(self, state: str, sentence: str, details: str) -> None:
        self.dot.setStyleSheet(f"color: {COLOURS[state]}; font-size: 16px;")
        words = {"green": "fits", "amber": "runs, with a cost", "red": "will not run as set"}.get(state, "no plan")
        self.dot.setToolTip(words)
        self.dot.setAccessibleName(f"Memory plan: {words}")  # the dot says it in colour only
        self._sentence, self._details = sentence, details
        self._fit_sentence()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit_sentence()

    def _fit_sentence(self) -> None:
        """At most MOST_LINES lines: a refusal's advice wrapped to six lines on the window's narrowest and pushed the
        tree under its minimum, cutting off its bottom. A cut sentence leads the tooltip, whole."""
        width = self.sentence.contentsRect().width()
        shown = first_lines(self._sentence, self.sentence.font(), width, MOST_LINES) if self.isVisible() else None
        self.sentence.setText(shown or self._sentence)
        if shown:  # the window's minimum makes room for the lines shown, rather than the tree under them being cut
            self.sentence.setMinimumHeight(self.sentence.heightForWidth(width))
        whole = html.escape(self._sentence) if shown and shown != self._sentence else ""
        self.setToolTip("<br>".join(t for t in (whole, self._details) if t) or self._sentence)


def _plan(configs: Configs, question: str, history: Sequence[Turn]) -> tuple[MemoryPlan | None, str]:
    """The plan, or None and what went wrong (a model folder that cannot be read, a PRM that is not one)."""
    try:
        engine_modules()
        from app.planner import plan

        return plan(*configs, question=question.strip() or None, history=tuple(history)), ""
    except Exception as failure:  # said in the bar, not raised
        message = failure.user_message() if hasattr(failure, "user_message") else str(failure)
        return None, f"No plan: {window_terms(message)}"  # the window's labels, as the Transcript says it
