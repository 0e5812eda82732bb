"""The transcript: the current best path as readable text while the search runs, then the answer.

It keeps its own small record of each candidate's parent, text and score (from the
CandidateScored events), so it needs no other widget. All model text is HTML-escaped.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from dataclasses import dataclass

from PySide6.QtWidgets import QTextBrowser, QVBoxLayout, QWidget

from app.gui import palette as pal
from engine import events as ev

PLACEHOLDER = "The best reasoning path appears here as the search selects each step."


@dataclass(frozen=True)
class _Step:
    parent: int | None
    step: int
    text: str
    score: float


class TranscriptPanel(QWidget):
    """Best path so far (kept[0] of each StepSelected), then RunFinished's answer and path."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.view = QTextBrowser()
        self.view.setOpenLinks(False)
        self.view.setFont(pal.ui_font(10))
        self.view.setPlaceholderText(PLACEHOLDER)
        self.view.document().setDocumentMargin(10)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.view)
        self.reset()

    def reset(self) -> None:
        """Forget the run and show the placeholder."""
        self._steps: dict[int, _Step] = {}
        self.question = ""
        self.best_path: list[int] = []
        self.answer: str | None = None
        self._status = ""
        self.view.clear()

    def apply(self, event: object) -> None:
        """Record candidate texts; redraw on a selection or the end of the run; ignore other types."""
        if self._fold(event):
            self._render()

    def apply_many(self, events: Iterable[object]) -> None:
        """A recorded run in one go: fold every event, render once."""
        for event in events:
            self._fold(event)
        self._render()

    def _fold(self, event: object) -> bool:
        """Take the event in; True when what the panel shows has changed."""
        if isinstance(event, ev.RunStarted):
            self.reset()
            self.question = event.question
        elif isinstance(event, ev.CandidateScored):
            self._steps[event.id] = _Step(event.parent, event.step, event.text, event.score)
            return False
        elif isinstance(event, ev.StepSelected) and event.kept:
            self.best_path = self._path_to(event.kept[0])
            self._status = f"Best path after step {event.step}"
        elif isinstance(event, ev.RunFinished):
            self.answer = event.answer
            self.best_path = [cid for cid in event.path if cid in self._steps]
            self._status = f"Chosen path · score {event.score:.3f} · {event.steps} steps in {event.seconds:.1f} s"
        elif isinstance(event, ev.RunCancelled):
            self._status = f"Stopped after step {event.step}; the best path so far"
        elif isinstance(event, ev.RunFailed):
            self._status = f"The run failed ({event.error}): {event.message}"
        else:
            return False
        return True

    def plain_text(self) -> str:
        """What the panel shows, as plain text."""
        return self.view.toPlainText()

    def _path_to(self, node_id: int) -> list[int]:
        path: list[int] = []
        current: int | None = node_id
        while current is not None and current in self._steps:
            path.append(current)
            current = self._steps[current].parent
        return path[::-1]

    def _render(self) -> None:
        parts = []
        if self.question:
            parts.append(_heading("Question") + _para(self.question))
        if self._status:
            parts.append(_heading(self._status))
        for cid in self.best_path:
            step = self._steps[cid]
            note = f"step {step.step} · #{cid} · score {step.score:.3f}"
            parts.append(f'<p style="margin:6px 0 0 0; color:{pal.MUTED_TEXT}; font-size:small">'
                         f"{html.escape(note)}</p>" + _para(step.text))
        if self.answer is not None:
            parts.append(_heading("Answer") + _para(self.answer, strong=True))
        self.view.setHtml("".join(parts))
        bar = self.view.verticalScrollBar()
        bar.setValue(bar.maximum())


def _heading(text: str) -> str:
    return f'<p style="margin:10px 0 2px 0; font-weight:600">{html.escape(text)}</p>'


def _para(text: str, strong: bool = False) -> str:
    weight = "font-weight:600;" if strong else ""
    return f'<p style="margin:0; white-space:pre-wrap; {weight}">{html.escape(text.strip())}</p>'
