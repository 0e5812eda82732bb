"""A search request's life in the window: Run, Stop (or a close while it runs), the bridge's answers, its end.

The window keeps its entry points (`start_run`, `stop_run`, `apply_event`) and its `running`, `last_terminal`
and `current_session`, which other panels read; `RunLifecycle` does their work on the GUI thread and keeps the
request's own bookkeeping (a Stop asked, a close waiting for the end, the settings field to give the focus back).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, QThread, QTimer
from PySide6.QtWidgets import QMainWindow, QToolButton, QWidget

from app import formatting
from app.gui.bridge import Conversation
from app.gui.engine_import import engine_ready, import_failed
from app.gui.gc_freeze import freeze_long_lived, thaw
from app.gui.transcript import NOT_STARTED, stopped_unstarted
from app.session.model import failure_title
from engine import events as ev
from engine.blank_text import is_blank
from engine.chat import Turn
from engine.config import SearchConfig
from engine.errors import BeamwiseError

RUN_OVER = object()  # queued after a run's events: the search request is over

FAILURE_TITLES = {"WeightsDoNotFit": "The PRM does not fit beside the generator"}  # by RunFailed.error


class RunLifecycle:
    """The search requests of `window` (a MainWindow: its question, settings, bridge, session model and status
    line), from Run to the request's end."""

    def __init__(self, window: QMainWindow) -> None:
        self.window = window
        self.settings_focus: QWidget | None = None  # the settings field a run started from, given back at its end
        self.stop_asked = False  # Stop was pressed during the running request
        self.closing = False  # the window closes once the running request is over (closeEvent)
        self.asked: tuple[str, tuple[Turn, ...]] | None = None  # the running request's question and earlier turns
        self.device = ""  # where the running request's model is loaded, as the bridge describes it
        self.unsaved_said = False  # a window without a session database said so after an answer

    def start(self, conversation: Conversation | None = None, question: str | None = None) -> bool:
        """Run `question` (by default the question box's) with the current settings; False (with the reason shown)
        when it cannot start. `conversation` makes it a turn after earlier ones (the follow-up box, whose question
        leaves the question box and its draft alone); a Run of a turn loaded by "Run again" reruns it after its own
        earlier turns; any other Run starts a new conversation."""
        w = self.window
        if w.running:
            return False
        question = (w.question.toPlainText() if question is None else question).strip()
        if is_blank(question):  # zero-width characters alone too, as `beamwise run` refuses them
            w.statusBar().showMessage("Type a question first.", 5000)
            w.question.setFocus()
            return False
        try:
            model, search, cache = w.controls.configs()
        except ValueError as error:
            w.statusBar().showMessage(f"Fix the settings first: {error}", 8000)
            return False
        if not w.controls.is_valid():  # a refusal the configs alone do not make (the entropy exit on this PRM)
            w.statusBar().showMessage(f"Fix the settings first: {w.controls.error_text()}", 8000)
            return False
        try:
            server = w.server.run_config()  # None for a local model; a keyring key is read here
        except BeamwiseError as error:
            w.report_error("Cannot use the server", error.user_message())
            return False
        conversation = conversation or w.talk.conversation_for(question)
        w.talk.rerun, w.talk.follows = None, conversation.previous if conversation is not None else None
        self.begin(search)
        self.asked = (question, conversation.history if conversation is not None else ())
        if server is not None:
            w.status.loading(f"Asking {server.endpoint}", -1)
            w.bridge.request_remote_run(question, server, search, conversation)
            return True
        waiting = "" if engine_ready() else "Loading PyTorch and transformers; the search starts once they are in: "
        w.status.loading(f"{waiting}Preparing {model.source}", -1)
        w.bridge.request_run(question, model, search, cache, conversation)
        return True

    def stop(self) -> None:
        w = self.window
        if w.running and not self.closing:  # closing asked the stop already, and says so
            self.stop_asked = True
            w.bridge.stop()
            w.status.stop_asked()  # the heartbeat's line from the next second on
            said = ("the step in progress is dropped, the steps chosen so far are kept" if w.session.run.steps else
                    "no step has begun yet: the run ends before step 1")  # the model may still read the question
            w.statusBar().showMessage(f"Stopping: {said}…")

    def begin(self, search: SearchConfig) -> None:
        w = self.window
        w.running, w.last_terminal, w.current_session = True, None, None
        self.stop_asked = False
        self.asked, self.device = None, ""
        w.session.reset()
        w.status.begin(search.max_steps)
        focus = w.focusWidget()
        self.settings_focus = focus if w.controls.isAncestorOf(focus) else None
        w.update_actions()
        if self.settings_focus is not None:  # disabled, the settings leave no focus at all: Stop takes it
            w.findChild(QToolButton, "stopButton").setFocus(Qt.FocusReason.OtherFocusReason)
        freeze_long_lived()  # the last run's tree is gone: the run's full collections walk only what it makes

    def apply(self, event: Any) -> None:
        """Fold one engine event into the session model (the panels redraw from it) and the status bar."""
        w = self.window
        if isinstance(event, ev.RunFailed) and w.running:
            self._show_asked()
        w.session.apply(event)
        w.status.apply(event, live=w.running)
        if event.type in ev.TERMINAL_TYPES:
            w.last_terminal = event
            if isinstance(event, ev.RunFailed) and w.running:
                w.report_error(FAILURE_TITLES.get(event.error, failure_title(w.session.run)), event.message,
                               event.details)

    def take(self, item: Any) -> None:
        if item is RUN_OVER:
            self.on_run_finished()
        else:
            self.window.apply_event(item)

    def on_memory_released(self, device_bytes: int, host_bytes: int) -> None:
        w = self.window
        given = [f"{formatting.size(device_bytes)} of GPU memory" if device_bytes else "",
                 f"{formatting.size(host_bytes)} of pinned RAM" if host_bytes else ""]
        w.statusBar().showMessage(f"Idle: gave back {' and '.join(g for g in given if g)} for other programs; "
                                  "the model stays loaded.", 15000)

    def on_run_finished(self) -> None:
        w = self.window
        w.running = False
        thaw()  # what the run's start froze: its garbage cycles are collected again
        for panel in w.panels.all():  # panels that draw a little later show the final state now
            panel.flush()
        w.status.progress.hide()
        w.status.banner.hide()
        w.status.stop_heartbeat()
        if self.stop_asked and stopped_unstarted(w.session.run):  # while the model loaded or the server was
            w.status.step.setText("step -")  # checked: the line said "Stopped before step 1 finished"
            w.statusBar().showMessage(f"{NOT_STARTED}.")
        w.update_actions()
        if self.settings_focus is not None and self.settings_focus.isEnabled():  # where Ctrl+Enter was pressed
            self.settings_focus.setFocus(Qt.FocusReason.OtherFocusReason)
        self.settings_focus = None
        if w.sessions is not None:
            w.sessions.refresh()
        w.list_models()  # if the engine came in during the run
        terminal = w.last_terminal  # the request's own, before a follow-up that did not start reopens its turn
        w.talk.run_over(terminal)
        w.talk.show_turns()
        self._say_unsaved(terminal)
        w.run_ended.emit(terminal)
        if self.closing:  # asked while the run went on (close_when_stopped)
            QTimer.singleShot(0, w.close)

    def _say_unsaved(self, terminal: Any) -> None:
        """In a window whose session database could not be opened (`store_problem`), once, after its first answer:
        that it was not saved, why, and that follow-ups need the database. The window said it only at start (a
        dialog, or stderr), and the follow-up box said "Follow-ups come after an answer" beside the answer."""
        w = self.window
        if not w.store_problem or self.unsaved_said or not isinstance(terminal, ev.RunFinished):
            return
        self.unsaved_said = True
        w.statusBar().showMessage(f"This answer was not saved, and follow-ups need the session database: "
                                  f"{w.store_problem}", 30000)

    def on_model_loaded(self, _name: str, device: str) -> None:
        self.device = device

    def _show_asked(self) -> None:
        """A run refused before it started shows what it asked, and where (`SessionModel.asked`)."""
        if self.asked is not None:
            question, earlier = self.asked
            self.window.session.asked(question, earlier, bool(self.device) and not self.device.startswith("cuda"))

    def on_load_failed(self, message: str) -> None:
        self.window.status.loaded(None, None)
        advice = "" if import_failed() else "\n\nChoose another model under Settings > Model, then press Run."
        self.window.report_error("Could not load the model", f"{message}{advice}")

    def on_failed(self, failure: ev.RunFailed) -> None:
        w = self.window
        self._show_asked()
        began = w.session.run.started is not None  # a refusal before the run (memory, context) never began
        w.session.apply(failure)
        w.last_terminal = failure
        w.report_error("The search stopped with an error" if began else "The search could not run",
                       f"{failure.message}\n\nThe window keeps working: change the settings or try again.",
                       failure.details)

    def on_session_recorded(self, session_id: int) -> None:
        self.window.current_session = session_id
        self.window.talk.show_turns()

    def close_when_stopped(self) -> bool:
        """A close while the search runs asks the stop and closes the window once the run is over; the window
        stays responsive meanwhile. Waiting for the engine's thread here froze it for the 47 s a chunk of the
        question took to read (a chunk has no stop point inside). A second close, one before the search began (a
        model load is abandoned at once) and one with no event loop left to bring the run's end (after the app's
        exec) close now, waiting for the thread as before."""
        w = self.window
        if (self.closing or not w.running or w.session.run.started is None
                or QThread.currentThread().loopLevel() == 0):
            return False
        self.closing = self.stop_asked = True
        w.bridge.stop()
        said = w.status.stop_asked("closing")  # the heartbeat's line until the run ends: said now
        w.statusBar().showMessage(said or "Closing once the search stops at its next token…")
        return True
