"""Conversations in the window: the follow-up box under the transcript, the turn tabs above the tree, and
New conversation (Ctrl+N).

A run in the window is one turn. After a finished turn the follow-up box asks the next question
in the open conversation (Enter, or Ctrl+Shift+Enter from anywhere): its prompt holds every
earlier question and chosen path, and it is recorded as the next turn after the newest turn of the
branch shown, whichever tab is open (as `beamwise run --session` does; the box says so when an
earlier tab is open). The turn tabs show the turns of the open conversation; choosing one opens
(replays) that turn. "Run again" of a turn reruns it after the same earlier turns: the conversation
branches there, and that turn's tab gets an "N runs" button whose menu opens each run's branch.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtGui import QAction, QKeySequence, QResizeEvent
from PySide6.QtWidgets import QHBoxLayout, QLineEdit, QMenu, QTabBar, QToolButton, QVBoxLayout, QWidget

import app.formatting as fmt
from app.conversations import answered, follow_up_of, history, line_of, runs_of_turns
from app.export.md_escape import without_controls
from app.gui.bridge import Conversation
from app.gui.hints import fit_placeholder
from engine import events as ev
from engine.blank_text import is_blank
from engine.chat import Turn
from engine.errors import BeamwiseError

FOLLOW_UP_HINT = "Ask a follow-up about this answer (Enter)"
HINTS = {  # the placeholder, longest first: the field shows the longest that fits it whole (app/gui/hints.py)
    True: (FOLLOW_UP_HINT, "Ask a follow-up (Enter)", "Follow-up"),
    False: ("Follow-ups come after a finished answer", "Follow-ups come after an answer", "After an answer"),
}


UNSAVED_HINTS = ("Sessions are not saved, so follow-ups cannot be asked", "Sessions are not saved: no follow-ups",
                 "Not saved: no follow-ups", "Not saved")  # the tooltip says why (unsaved_tip)


def retry_hints(turn: int) -> tuple[str, ...]:
    """The placeholder when the branch's newest turn, `turn`, has no answer (it failed or was stopped): a follow-up
    takes its place after the turn before it."""
    return (f"Turn {turn} has no answer: ask again after Turn {turn - 1} (Enter)",
            f"Ask again after Turn {turn - 1} (Enter)", f"After Turn {turn - 1}")


def after_hints(turn: int, answered: bool) -> tuple[str, ...]:
    """The placeholder while an earlier tab is open: a follow-up goes after the branch's newest turn, `turn`, and
    only when that turn has an answer."""
    if answered:
        return (f"Follow up after Turn {turn}, the newest turn (Enter)", f"Follow up after Turn {turn} (Enter)",
                f"After Turn {turn}")
    return (f"Turn {turn}, the newest, has no answer to follow up", f"Turn {turn} has no answer to follow up",
            f"Turn {turn}: no answer")


class TurnBar(QTabBar):
    """One tab per turn of the open conversation (hidden for a single turn); `turn_chosen(session id)`."""

    turn_chosen = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setDocumentMode(True)
        self.setExpanding(False)
        self.setToolTip("The turns of this conversation; choose one to open it")
        self.session_ids: list[int] = []
        self._quiet = False
        self.currentChanged.connect(self._chosen)
        self.hide()

    def show_line(self, rows: list[dict[str, Any]], current: int | None,
                  runs: list[list[dict[str, Any]]] | None = None) -> None:
        """The turns of a conversation line (store rows, first turn first), `current` selected. `runs` holds each
        turn's runs (app/conversations.py runs_of_turns): a turn run more than once gets a button that opens the
        others (the older branch of a conversation is reached there)."""
        self._quiet = True
        try:
            while self.count():
                self.removeTab(0)  # deletes a tab's runs button too
            self.session_ids = [row["id"] for row in rows]
            for turn, row in enumerate(rows, 1):
                mark = "" if row["status"] == "finished" else f" ({row['status']})"
                self.addTab(f"Turn {turn}{mark}")
                self.setTabToolTip(turn - 1, f"Session {row['id']}: {row['question']}")
                if runs is not None and len(runs[turn - 1]) > 1:
                    self.setTabButton(turn - 1, QTabBar.ButtonPosition.RightSide,
                                      self._runs_button(turn, row["id"], runs[turn - 1]))
            if current in self.session_ids:
                self.setCurrentIndex(self.session_ids.index(current))
        finally:
            self._quiet = False
        self.setVisible(len(rows) > 1)

    def _chosen(self, index: int) -> None:
        if not self._quiet and 0 <= index < len(self.session_ids):
            self.turn_chosen.emit(self.session_ids[index])

    def runs_button(self, turn: int) -> QToolButton | None:
        """Turn `turn`'s (1-based) "N runs" button, or None when that turn ran once."""
        button = self.tabButton(turn - 1, QTabBar.ButtonPosition.RightSide)
        return button if isinstance(button, QToolButton) else None

    def _runs_button(self, turn: int, shown: int, runs: list[dict[str, Any]]) -> QToolButton:
        """"2 runs ▾" on a turn's tab: its menu lists every run of the turn, oldest first, and opens the one chosen
        with the turns that follow it."""
        button = QToolButton(self)
        button.setText(f"{len(runs)} runs")
        button.setAutoRaise(True)
        button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        button.setToolTip(f"Turn {turn} was run {len(runs)} times (Run again branches a conversation there): "
                          "open another run and the turns after it")
        button.setAccessibleName(f"Runs of turn {turn}")
        menu = QMenu(button)
        newest = max(run["id"] for run in runs)
        for number, run in enumerate(runs, 1):
            mark = "" if run["status"] == "finished" else f", {run['status']}"
            when = ", newest" if run["id"] == newest else ""
            action = menu.addAction(f"Run {number} (session {run['id']}{when}{mark}): "
                                    f"{fmt.brief(without_controls(run['question'] or ''), 50)}")
            action.setCheckable(True)
            action.setChecked(run["id"] == shown)
            action.triggered.connect(lambda _=False, session_id=run["id"]: self.turn_chosen.emit(session_id))
        button.setMenu(menu)
        return button


class FollowUpBox(QWidget):
    """A line for the next question of the open conversation and its button; `asked(text)` on Enter."""

    asked = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.field = QLineEdit(placeholderText=FOLLOW_UP_HINT, clearButtonEnabled=True)
        self._hints, self._why = HINTS[True], ""
        self.field.setAccessibleName("Follow-up question")
        self.field.returnPressed.connect(self.submit)
        self.action = QAction("&Follow up", self)
        self.action.setShortcuts([QKeySequence("Ctrl+Shift+Return"), QKeySequence("Ctrl+Shift+Enter")])
        self.action.setToolTip("Ask the follow-up in this conversation (Enter, or Ctrl+Shift+Enter)")
        self.action.triggered.connect(self.submit)
        button = QToolButton()
        button.setDefaultAction(self.action)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 4, 0, 0)
        row.addWidget(self.field, 1)
        row.addWidget(button)

    def submit(self) -> None:
        text = self.field.text().strip()
        if is_blank(text):  # zero-width characters alone too (app/question.py)
            self.field.setFocus()
            return
        self.asked.emit(text)

    def set_open(self, open_turn: bool, hints: tuple[str, ...] | None = None, why: str = "") -> None:
        """Usable only when there is an answered turn for a follow-up to go after and nothing runs. `hints`: the
        placeholder's wordings, longest first (by default the plain ones); `why`: the tooltip, whatever wording fits
        (by default the whole hint, where a shorter one is shown)."""
        self.field.setEnabled(open_turn)
        self.action.setEnabled(open_turn)
        self._hints, self._why = hints or HINTS[open_turn], why
        self._fit_hint()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit_hint()

    def _fit_hint(self) -> None:
        """The longest hint that fits the field whole; a shorter one has the whole sentence as the tooltip."""
        hints = self._hints
        shown = fit_placeholder(self.field, hints)
        self.field.setToolTip(self._why or ("" if shown == hints[0] else hints[0]))


def with_follow_up(transcript: QWidget, box: FollowUpBox) -> QWidget:
    """The transcript with the follow-up box under it, for the transcript's dock."""
    holder = QWidget()
    column = QVBoxLayout(holder)
    column.setContentsMargins(0, 0, 0, 4)
    column.addWidget(transcript, 1)
    column.addWidget(box)
    return holder


class ConversationControls:
    """The window's conversation state: which session a follow-up or a rerun continues, and its turn tabs."""

    def __init__(self, window: Any) -> None:
        self.window = window
        self.turns = TurnBar()
        self.box = FollowUpBox()
        self.new_action = QAction("&New conversation", window)
        self.new_action.setShortcut(QKeySequence("Ctrl+N"))
        self.new_action.setToolTip("Clear the window for a new question (Ctrl+N)")
        self.new_action.triggered.connect(self.new_conversation)
        self.rerun: tuple[str, Conversation] | None = None  # "Run again" of a later turn: its question and history
        self.follows: int | None = None  # the session the run in progress is the next turn of
        self.asked: int | None = None  # the follow-up in progress: the turn open when it was asked
        self.line: list[dict[str, Any]] = []  # the turns the tabs show (store rows): the branch of the open turn
        self.conversation_shown: int | None = None  # the conversation of those turns (the follow-up box's text's)
        self.box.asked.connect(self.ask)
        self.turns.turn_chosen.connect(window.open_session)
        window.addAction(self.box.action)
        self.update()

    def conversation_for(self, question: str) -> Conversation | None:
        """The conversation a Run of `question` continues: a loaded rerun of a later turn, else none (a new one)."""
        if self.rerun is not None and self.rerun[0] == question:
            return self.rerun[1]
        return None

    def planned_prompt(self) -> tuple[str, tuple[Turn, ...]]:
        """What the next run would send, for the plan bar: a follow-up typed in the box where `follow_up_place`
        puts it (as `ask` builds it); else the question box's text, a new conversation or a loaded rerun's."""
        window = self.window
        follow_up = self.box.field.text().strip()
        if follow_up and self.box.field.isEnabled():
            try:
                return follow_up, self.follow_up_place().history
            except BeamwiseError:
                pass  # the open turn cannot be followed up: Run would start a new conversation
        question = window.question.toPlainText()
        conversation = self.conversation_for(question.strip())
        return question, conversation.history if conversation is not None else ()

    def follow_up_place(self) -> Conversation:
        """Where a follow-up goes: after the newest turn of the open turn's branch, as `beamwise run --session ID`
        puts it for any turn ID (app/conversations.py follow_up_of). When that turn has no answer (it failed or was
        stopped) and the turn before it has one, the follow-up takes its place after that turn, as "Run again" of
        it would (the conversation branches there): a follow-up that failed on a setting is asked again once the
        setting is fixed. Raises BeamwiseError where there is nothing to go after."""
        store = self.window.store
        line = line_of(store, self.window.current_session)
        if retryable(line):
            return Conversation(line[-1]["previous_id"], tuple(history(store, line[-1]["id"])))
        follows, turns = follow_up_of(store, self.window.current_session)
        return Conversation(follows, tuple(turns))

    def ask(self, text: str) -> None:
        """Run `text` as the next turn of the open conversation, where `follow_up_place` puts it, whichever of its
        tabs is open. Branching from an earlier turn is what "Run again" of the turn after it does. The text stays
        in the box until its turn has an answer, and the question box keeps what the user left there (a draft)."""
        window = self.window
        if window.running:
            window.statusBar().showMessage("Wait for the search to end (or Stop it) before a follow-up.", 8000)
            return
        if window.store is None or window.current_session is None:
            window.report_error("Nothing to follow up", "Run a question or open a session first.")
            return
        try:
            place = self.follow_up_place()
        except BeamwiseError as error:
            window.report_error("Cannot ask a follow-up", error.user_message())
            return
        waiting = window.sessions.waiting if window.sessions is not None else None
        if waiting is not None and waiting[0] == "delete" and waiting[1] in (window.current_session, place.previous):
            # landing first, the delete would leave the follow-up nothing to follow, and its run unsaved
            window.statusBar().showMessage(f"Session {waiting[1]} is being deleted (the Sessions tab is waiting for "
                                           "the database); nothing to follow up.", 8000)
            return
        opened = window.current_session
        if window.start_run(place, text):
            self.asked = opened

    def run_over(self, terminal: Any) -> None:
        """The follow-up's run is over. Answered, its text leaves the box. One that recorded nothing (its model did
        not load, its prompt was refused, or Stop came before it started) goes back to the turn that was open: the
        window had dropped the conversation, and the follow-up could not be asked again. One that failed or was
        stopped keeps its text in the box, which asks it again in that turn's place (`follow_up_place`)."""
        window = self.window
        asked, self.asked = self.asked, None
        if asked is None:
            return
        if isinstance(terminal, ev.RunFinished) and terminal.answer:  # else it is asked again in that turn's place
            self.box.field.clear()
        elif window.current_session is None:
            said = window.statusBar().currentMessage()  # what went wrong stays in the status bar
            window.open_session(asked, show_question=False)
            window.statusBar().showMessage(said, 15000)

    def load_rerun(self, session_id: int, row: dict[str, Any]) -> None:
        """"Run again" of `row`: a later turn reruns after its own earlier turns (it branches there)."""
        self.rerun = None
        if row.get("previous_id") is not None:
            try:
                self.rerun = (row.get("question") or "", Conversation(row["previous_id"],
                                                                      tuple(history(self.window.store, session_id))))
            except BeamwiseError:
                self.rerun = None
        self.window.plan_bar.schedule()  # a rerun of a later turn sends its earlier turns too

    def new_conversation(self) -> None:
        window = self.window
        if window.running:
            window.statusBar().showMessage("Stop the running search before starting a new conversation.", 8000)
            return
        window.session.reset()
        window.status.reset()
        window.current_session, window.last_terminal, self.rerun = None, None, None
        window.question.clear()
        self.box.field.clear()  # a follow-up kept to be asked again belonged to the conversation left
        window.question.setFocus()
        self.show_turns()
        window.statusBar().showMessage("New conversation: type a question and press Run (Ctrl+Enter).", 8000)

    def in_use(self, session_id: int) -> str | None:
        """Why the Sessions tab must not delete `session_id` now, or None. The run in progress is the next turn
        after it, and its own row, which protects it in the store, is written only once the model has loaded:
        deleted meanwhile, the new turn had nothing to follow and was not saved."""
        if self.window.running and session_id == self.follows:
            return (f"The running search is the next turn after session {session_id}; nothing was deleted. Stop "
                    "the search first (Esc), then delete it.")
        return None

    def forget(self, session_id: int) -> None:
        """A session deleted from the Sessions tab: the window no longer shows it (a follow-up, an export or a
        turn tab of it would find nothing) and the turn tabs drop it. The store refuses to delete a running one.
        A loaded "Run again" that would follow it becomes a new conversation (its run would have nothing to follow
        and would not be saved)."""
        window = self.window
        if self.rerun is not None and self.rerun[1].previous == session_id:
            self.rerun = None
            window.plan_bar.schedule()
        if window.current_session == session_id:
            window.session.reset()
            window.status.reset()
            window.current_session, window.last_terminal = None, None
            window.statusBar().showMessage(f"Session {session_id} was deleted.", 8000)
        self.show_turns()

    def show_turns(self) -> None:
        """The turn tabs of the open session's conversation, and whether a follow-up can be asked."""
        window = self.window
        rows: list[dict[str, Any]] = []
        runs: list[list[dict[str, Any]]] = []
        if window.store is not None and window.current_session is not None:
            try:
                rows = line_of(window.store, window.current_session)
                runs = runs_of_turns(window.store, rows)
            except BeamwiseError:
                rows, runs = [], []
        self.line = rows
        conversation = rows[0]["conversation_id"] if rows else None
        if conversation is not None and conversation != self.conversation_shown:  # another conversation opened:
            self.box.field.clear()  # a follow-up kept to be asked again (it failed) was the one left's
        self.conversation_shown = conversation if conversation is not None else self.conversation_shown
        self.turns.show_line(rows, window.current_session, runs)
        self.update()
        window.plan_bar.schedule()  # the open turn changed: so did a follow-up's conversation

    def update(self) -> None:
        """The follow-up box and the turn tabs follow the window: a turn opens only while nothing runs, and the box
        is usable where `follow_up_place` has somewhere to put a follow-up. Without a session database it says that
        follow-ups need one, and why there is none."""
        window = self.window
        self.turns.setEnabled(not window.running)
        if window.store is None:
            self.box.set_open(False, UNSAVED_HINTS, unsaved_tip(window.store_problem))
            return
        self.box.set_open(*self._box_state())

    def _box_state(self) -> tuple[bool, tuple[str, ...]]:
        """Whether a follow-up can be asked now, and the box's placeholder. The branch's newest turn must have an
        answer (the open turn's is its run's end, which its row may not hold yet), else the follow-up takes that
        turn's place after the one before it (`retryable`)."""
        window = self.window
        terminal = window.last_terminal  # a chosen path of no text is no answer to follow
        finished = isinstance(terminal, ev.RunFinished) and bool(terminal.answer)
        if window.running or window.current_session is None:
            return False, HINTS[False]
        if not self.line:  # the store could not list the turns: the open one alone
            return finished, HINTS[finished]
        turns, newest = len(self.line), self.line[-1]
        earlier = newest["id"] != window.current_session  # an earlier tab is open: the box says where it goes
        ready = answered(newest) if earlier else finished
        if ready:
            return True, after_hints(turns, True) if earlier else HINTS[True]
        if retryable(self.line):
            return True, retry_hints(turns)
        return False, after_hints(turns, False) if earlier else HINTS[False]


def retryable(line: list[dict[str, Any]]) -> bool:
    """Whether a follow-up to `line` (a branch's turns, first first) takes its newest turn's place: that turn ended
    without an answer (it failed, was stopped or interrupted) and the turn before it has one."""
    return len(line) > 1 and line[-1]["status"] != "running" and not answered(line[-1]) and answered(line[-2])


def unsaved_tip(problem: str) -> str:
    """The follow-up box's tooltip in a window without a session database: why there is none (`problem`, as said
    at start), and that a follow-up needs one, since it is asked after a saved turn."""
    why = problem or "the session database could not be opened."
    return (f"Sessions are not being saved in this window: {why}\n\nFollow-ups need the session database: a "
            "follow-up is asked after a saved turn. Fix the database (or choose another with --db), then start "
            "Beamwise again.")
