"""The transcript: a conversation's earlier turns, then the current best path while the search runs, then the answer.

It reads the window's `SessionModel`: the outline (best path, status, answer) and the tree's
texts and scores. All model text is HTML-escaped.
"""

from __future__ import annotations

import html

from PySide6.QtGui import QResizeEvent, QShowEvent
from PySide6.QtWidgets import QTextBrowser, QVBoxLayout, QWidget

import app.formatting as fmt
from app.gui import palette as pal
from app.gui.hints import fit_placeholder
from app.gui.panel import SessionView
from app.gui.terms import window_terms
from app.session import Change, SessionModel
from app.session.model import RESET
from app.session.steps import RunRecord
from engine import events as ev

PLACEHOLDER = "The best path so far shows here during a run."
PLACEHOLDERS = (PLACEHOLDER, "The best path shows here.", "Best path")  # a placeholder does not wrap: one fits
NOT_STARTED = "Stopped before the search started: nothing was recorded"  # the status bar says it too


class TranscriptPanel(SessionView, QWidget):
    """Best path so far (kept[0] of each StepSelected), then RunFinished's answer and path."""

    def __init__(self, session: SessionModel | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.view = QTextBrowser()
        self.view.setAccessibleName("Transcript")
        self.view.setOpenLinks(False)
        self.view.setFont(pal.ui_font(10))
        self.view.setPlaceholderText(PLACEHOLDER)
        self.view.setToolTip("The best reasoning path so far, step by step, then the answer")
        self.view.document().setDocumentMargin(10)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.view)
        self.attach(session)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        fit_placeholder(self.view, PLACEHOLDERS)

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        fit_placeholder(self.view, PLACEHOLDERS)  # the view has its final width now

    @property
    def best_path(self) -> list[int]:
        return self.session.outline.best_path

    @property
    def answer(self) -> str | None:
        return self.session.outline.answer

    def refresh(self, change: Change) -> None:
        """Redraw when the best path, the status or the answer moved; a reset shows the placeholder."""
        if change.event_type == RESET:
            self.view.clear()
        elif change.transcript:
            self._render()

    def plain_text(self) -> str:
        """What the panel shows, as plain text."""
        return self.view.toPlainText()

    def _render(self) -> None:
        outline, tree = self.session.outline, self.session.tree
        parts = []
        for turn, (asked, answered) in enumerate(outline.history, 1):  # a conversation's earlier turns
            parts.append(_heading(f"Turn {turn} · Question") + _para(asked))
            parts.append(_heading(f"Turn {turn} · Answer") + _para(answered))
        if outline.question:
            title = f"Turn {len(outline.history) + 1} · Question" if outline.history else "Question"
            parts.append(_heading(title) + _para(outline.question))
        if outline.status:
            parts.append(_heading(self._status()))
        for node in (tree.node(cid) for cid in outline.best_path):
            note = f"step {node.step} · #{node.id} · score {fmt.score(node.score)}"
            parts.append(f'<p style="margin:6px 0 0 0; color:{pal.MUTED_TEXT}; font-size:small">'
                         f"{html.escape(note)}</p>" + _para(node.text))
        if outline.answer is not None:
            parts.append(_heading("Answer") + _para(outline.answer, strong=True))
        self.view.setHtml("".join(parts))
        bar = self.view.verticalScrollBar()
        bar.setValue(bar.maximum())

    def _status(self) -> str:
        """The outline's status in the window's words: a failure's advice names the controls, as the error dialog
        says it (the engine names --endpoint), and a Stop before the search started says nothing was recorded."""
        run = self.session.run
        if isinstance(run.end, ev.RunCancelled) and stopped_unstarted(run):
            return NOT_STARTED
        return window_terms(self.session.outline.status)


def stopped_unstarted(run: RunRecord) -> bool:
    """Whether a Stop came before the search started (RunStarted): a model still loading ends with no event, a
    server still being checked with RunCancelled alone. No session was stored, and no step was there to choose:
    the window says so as the CLI does, not "Stopped before step 1 finished; no step was chosen"."""
    return run.started is None and (run.end is None or isinstance(run.end, ev.RunCancelled))


def _heading(text: str) -> str:
    return f'<p style="margin:10px 0 2px 0; font-weight:600">{html.escape(text)}</p>'


def _para(text: str, strong: bool = False) -> str:
    weight = "font-weight:600;" if strong else ""
    return f'<p style="margin:0; white-space:pre-wrap; {weight}">{html.escape(text.strip())}</p>'
