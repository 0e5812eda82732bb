"""The main window: question, Run/Stop, settings and panels in docks, status bar; it owns the session model.

Only this GUI thread touches widgets: the engine's events arrive through `SearchBridge`'s queued
signals and are folded once into the window's `SessionModel`; every panel reads that model and
redraws what each change names. A stored session replays through the same model.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from PySide6.QtCore import QSettings, QSignalBlocker, Qt, QTimer, Signal
from PySide6.QtGui import QCloseEvent, QShowEvent, QTextCursor
from PySide6.QtWidgets import QMainWindow, QMessageBox

from app import model_library
from app.gui import palette as pal
from app.gui import settings as saved
from app.gui.background import run_in_background
from app.gui.bridge import Conversation, SearchBridge
from app.gui.charts import dock_height
from app.gui.controls import SearchControls
from app.gui.conversation import ConversationControls
from app.gui.engine_import import engine_failure, engine_in_reach, engine_ready, import_failed
from app.gui.event_pump import EventPump
from app.gui.gc_freeze import freeze_long_lived
from app.gui.menus import build_menus, menu_shortcuts, shortcuts_box
from app.gui.model_picker import SERVER_SOURCE
from app.gui.models_page import ModelsPage
from app.gui.plan_bar import PlanBar
from app.gui.run_lifecycle import RUN_OVER, RunLifecycle
from app.gui.server_panel import ServerPicker
from app.gui.sessions_panel import SessionsPanel
from app.gui.status_line import StatusLine
from app.gui.terms import window_terms
from app.gui.window_layout import Panels, build_central, build_docks
from app.session import SessionModel
from engine import events as ev
from engine.blank_text import is_blank
from engine.config import CacheConfig, ModelSpec, SearchConfig
from engine.errors import BeamwiseError

DRAFT_BACK = " (Ctrl+Z in the question box brings back what you had typed there)"


class MainWindow(QMainWindow):
    """The Beamwise window. `run_ended(terminal event or None)` fires when a search request is over."""

    run_ended = Signal(object)
    error_reported = Signal(str, str)  # title, text (also shown as a dialog when dialogs are on)

    def __init__(self, bridge: SearchBridge, *, settings: QSettings | None = None, store: Any = None,
                 dialogs: bool = True, store_problem: str = "") -> None:
        """`store` None: the window saves nothing, and `store_problem` (the database's error) says why."""
        super().__init__()
        self.bridge, self.store, self.dialogs = bridge, store, dialogs
        self.store_problem = store_problem
        self.settings = settings if settings is not None else saved.default_settings()
        self.session = SessionModel()
        self.panels = Panels.of(self.session)
        self.running = False
        self.current_session: int | None = None
        self.last_terminal: Any = None
        self.lifecycle = RunLifecycle(self)  # Run, Stop, the bridge's answers and the request's end
        self._settings_error = ""  # the settings' error the status bar said last
        self.shortcuts_box: QMessageBox | None = None  # Help > Keyboard shortcuts, the last one shown
        self.setWindowTitle("Beamwise")
        self.resize(1400, 900)
        self._central_layout = build_central(self)  # the status line's load banner goes above the tree
        self.controls = SearchControls()
        self._valid_delimiter = self.controls.delimiter.text()  # the last valid one (configs_to_remember)
        self.server = ServerPicker(self.controls.model_picker, self.settings, self)  # "Server…" in the picker
        self.status = StatusLine(self)
        self._central_layout.insertWidget(1, self.status.banner)
        self.talk = ConversationControls(self)  # follow-ups, turn tabs, New conversation
        self.plan_bar = PlanBar(self.controls.configs, self.talk.planned_prompt)  # "will it fit?" before a run
        self._central_layout.insertWidget(1, self.plan_bar)
        self.controls.changed.connect(self.plan_bar.schedule)
        self._central_layout.insertWidget(self._central_layout.indexOf(self.panels.tree), self.talk.turns)
        self.sessions = SessionsPanel(store, in_use=self.talk.in_use) if store is not None else None
        self.models = ModelsPage(confirm=None if dialogs else lambda title, text: False, list_now=engine_ready())
        self.docks = build_docks(self)
        self._charts_sized = False  # its height is set at the first show, for the size the window opens at
        build_menus(self)
        self._connect()
        self._restore()
        self.plan_bar.schedule()
        self._engine_asked = self._models_unlisted = False
        self._pending_rerun: int | None = None  # a Run again asked before the engine was in (see load_session_settings)

    # ------------------------------------------------------------ building

    def showEvent(self, event: QShowEvent) -> None:
        """The first time: the charts' dock for the window's height, so a short window leaves the tree most of it."""
        super().showEvent(event)
        if not self._charts_sized:
            self._charts_sized = True
            self.resizeDocks([self.docks["charts"]], [dock_height(self.height())], Qt.Orientation.Vertical)

    def shortcuts(self) -> list[tuple[str, str]]:
        """(keys, what) for every menu action and the widgets' own keys: what Help > Keyboard shortcuts lists."""
        return menu_shortcuts(self.menuBar())

    def show_shortcuts(self) -> None:
        """The box is the window's child: the last one is deleted, or each F1 kept one for the window's life."""
        if self.shortcuts_box is not None:
            self.shortcuts_box.deleteLater()
        self.shortcuts_box = shortcuts_box(self, self.shortcuts())  # kept for tests
        if self.dialogs:
            self.shortcuts_box.exec()

    def _connect(self) -> None:
        self.run_action.triggered.connect(lambda: self.start_run())
        self.refused_run.activated.connect(lambda: self.start_run())  # start_run says what to fix first
        self.stop_action.triggered.connect(self.stop_run)
        self.controls.changed.connect(self.update_actions)
        self.controls.changed.connect(self._note_valid_delimiter)
        self.controls.verifier.refused.connect(lambda message: self.report_error("Not a PRM Beamwise knows", message))
        self.question.textChanged.connect(self.update_actions)
        self.question.textChanged.connect(self.plan_bar.schedule)  # the prompt's length is in the plan
        self.talk.box.field.textChanged.connect(self.plan_bar.schedule)  # a follow-up: the whole conversation
        b = self.bridge
        b.load_progress.connect(self.status.loading)
        b.model_loaded.connect(self.status.loaded)
        b.model_loaded.connect(self.lifecycle.on_model_loaded)
        b.load_failed.connect(self.lifecycle.on_load_failed)
        # bursts of events in slices: the window stays responsive
        self._pump = EventPump(self.lifecycle.take, parent=self)
        b.event_emitted.connect(self._pump.push)
        b.failed.connect(self.lifecycle.on_failed)
        b.recording_failed.connect(lambda text: self.statusBar().showMessage(text, 15000))
        b.session_recorded.connect(self.lifecycle.on_session_recorded)
        b.run_finished.connect(lambda: self._pump.push(RUN_OVER))  # behind the run's last event
        b.memory_released.connect(self.lifecycle.on_memory_released)
        self.panels.tree.node_selected.connect(self.panels.details.show_node)
        self.models.use_requested.connect(self.use_model)
        self.models.model_removed.connect(self.forget_model)
        if self.sessions is not None:
            self.sessions.open_requested.connect(self.open_session)
            self.sessions.run_again_requested.connect(self.load_session_settings)
            self.sessions.session_deleted.connect(self.talk.forget)
            self.sessions.exported.connect(  # File > Export and the Sessions tab's Export…: said, as the CLI does
                lambda session_id, path: self.statusBar().showMessage(f"Exported session {session_id} to {path}",
                                                                      15000))
            self.sessions.export_failed.connect(  # a success said before stayed there beside the failure's dialog
                lambda session_id, text: self.statusBar().showMessage(
                    f"Could not export session {session_id}: {text}", 15000))

    def _restore(self) -> None:
        configs = saved.load_configs(self.settings)
        if configs is not None:
            self.controls.set_configs(*configs)
        self.question.setPlainText(saved.load_question(self.settings))
        if saved.restore_window(self.settings, self):
            self._charts_sized = True  # the docks as the user left them, not sized again at the first show
        self.update_actions()

    def apply_theme(self, dark: bool) -> None:
        """Light or dark, as the OS says (or --theme): widgets, the tree and the charts."""
        from PySide6.QtWidgets import QApplication

        pal.apply_theme(QApplication.instance(), dark)
        self.panels.tree.restyle()
        self.panels.charts.restyle()

    def use_model(self, source: str, as_verifier: bool) -> None:
        """The Models page's "Use": the model goes into the settings, which are shown."""
        if as_verifier:
            self.controls.verifier.set_choice("prm", source)
        else:
            self.controls.model_picker.set_source(source)
        self.docks["settings"].raise_()
        role = "verifier" if as_verifier else "generator"
        self.statusBar().showMessage(f"{source} is the {role} now; press Run (Ctrl+Enter).", 8000)

    def forget_model(self, source: str) -> None:
        """A model removed on the Models page stops being the generator or the PRM: the bundled model and the
        default verifier take its place, said in the status bar (the plan bar said "model path ... does not
        exist")."""
        roles = []
        if self.controls.model_picker.source() == source:
            self.controls.model_picker.set_source("bundled")
            roles.append("the generator is the bundled model")
        if self.controls.verifier.choice() == ("prm", source):
            self.controls.verifier.set_choice(SearchConfig().verifier, None)
            roles.append(f"the verifier is {SearchConfig().verifier}")
        if roles:
            self.statusBar().showMessage(f"Removed the model in use: {' and '.join(roles)} now.", 15000)

    # ------------------------------------------------------------ running

    def load_model(self) -> None:
        """Load the selected model in the background (progress in the status bar)."""
        try:
            model, _, cache = self.controls.configs()
        except ValueError:
            return  # the settings panel already says what to fix
        if model.source == SERVER_SOURCE:
            return  # the server has the model loaded
        self.status.loading(f"Loading {model.source}", -1)
        self.bridge.request_load(model, cache.device)

    def start_run(self, conversation: Conversation | None = None, question: str | None = None) -> bool:
        """Run the question (`question`, else the question box's) with the current settings; False (with the reason
        shown) when it cannot start (`RunLifecycle.start` says more)."""
        return self.lifecycle.start(conversation, question)

    def stop_run(self) -> None:
        self.lifecycle.stop()

    def _begin(self, search: SearchConfig) -> None:  # benchmarks/bench_window.py starts a run this way
        self.lifecycle.begin(search)

    def apply_event(self, event: Any) -> None:
        """Fold one engine event into the session model (the panels redraw from it) and the status bar."""
        self.lifecycle.apply(event)

    def import_engine(self) -> None:
        """Import pyqtgraph, PyTorch, transformers and the engine in the background (app/gui/engine_import.py);
        the window is in use meanwhile. Call it once the window has painted: the import holds the GIL in long
        stretches. The model load and the plan wait for it on their own; when it ends the charts are built and the
        Models page lists its models."""
        if not self._engine_asked and not engine_ready():  # ready: the Models page listed its models at once
            self._engine_asked = True
            run_in_background(self, "beamwise-import", engine_failure, self._on_engine_imported)
        elif not self._engine_asked:
            self.panels.charts.build()

    def _on_engine_imported(self, failure: str) -> None:
        """PyTorch and the engine are in (or could not be: `failure` says what to reinstall, and so does a load)."""
        self.panels.charts.build()  # pyqtgraph is in: making the plots takes ~0.2 s now
        if self.running:  # a Run pressed meanwhile froze what was alive then: torch's objects join them (gc_freeze)
            freeze_long_lived()
        if failure:
            self.models.folder_label.setText(failure)
            self.statusBar().showMessage(failure, 30000)
        else:  # it reads each model's config (~70 ms): in the next pass, or after a run the engine starts at once
            self._models_unlisted = True
            QTimer.singleShot(0, self, self.list_models)
        if self._pending_rerun is not None:
            session_id, self._pending_rerun = self._pending_rerun, None
            self.load_session_settings(session_id)

    def list_models(self) -> None:
        if self._models_unlisted and not self.running:
            self._models_unlisted = False
            self.models.refresh()

    def update_actions(self) -> None:
        valid = self.controls.is_valid()
        has_question = not is_blank(self.question.toPlainText())
        self.run_action.setEnabled(not self.running and valid and has_question)
        self.refused_run.setEnabled(not self.running and not self.run_action.isEnabled())
        tip = "Start the search (Ctrl+Enter)" if has_question else "Type a question first"
        self.run_action.setToolTip(tip if valid else f"Fix the settings: {self.controls.error_text()}")
        self._say_settings_error()
        self.stop_action.setEnabled(self.running)
        self.controls.setEnabled(not self.running)
        self.plan_bar.set_paused(self.running)
        if self.sessions is not None:
            self.sessions.set_search_running(self.running)
        self.talk.update()

    def _say_settings_error(self) -> None:
        """Why Run went grey, in the status bar as the setting changes: the settings' own red line sits at the
        bottom of their scrolled panel, out of sight, and Run went grey with no reason shown."""
        error = self.controls.error_text()
        if error == self._settings_error:
            return
        self._settings_error = error
        if error:
            self.statusBar().showMessage(f"Fix the settings first: {error}")
        elif self.statusBar().currentMessage().startswith("Fix the settings first: "):
            self.statusBar().clearMessage()

    def report_error(self, title: str, text: str, details: str = "") -> None:
        """Tell the user what happened and what to do; the window stays usable. `details` (a fault's traceback)
        sits behind the dialog's Show Details button, where a report can copy it from. Options the engine
        names (`--kv-budget`) are named as the window's controls."""
        text = window_terms(text)
        self.error_reported.emit(title, text)
        self.statusBar().showMessage(f"{title}.", 15000)
        if self.dialogs and details:  # window-modal, not blocking: the run's last events still arrive
            box = QMessageBox(QMessageBox.Icon.Warning, title, text, QMessageBox.StandardButton.Ok, self)
            box.setDetailedText(details)
            box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            box.open()
        elif self.dialogs:
            QMessageBox.warning(self, title, text)

    # ------------------------------------------------------------ sessions

    def replay(self, events: Iterable[Any]) -> None:
        """Show a recorded run exactly as it ended, through the same apply() path as a live one."""
        events = list(events)
        self.session.reset()
        self.status.reset()
        self.session.apply_many(events)  # the same folding, drawn once instead of per event
        for event in events:
            self.status.apply(event, live=False)
            if event.type in ev.TERMINAL_TYPES:
                self.last_terminal = event

    def open_session(self, session_id: int, *, show_question: bool = True) -> None:
        """Show a recorded session and its conversation's turns; its question goes into the question box unless
        `show_question` is False (a follow-up that recorded nothing goes back to its turn: the box keeps the user's
        draft)."""
        if self.running:
            self.statusBar().showMessage("Stop the running search before opening a session.", 8000)
            return
        try:
            events = self.store.events(session_id)
        except BeamwiseError as error:
            self.report_error("Could not open the session", error.user_message())
            return
        started = next((e for e in events if isinstance(e, ev.RunStarted)), None)
        replaced = started is not None and show_question and self.show_question(started.question)
        self.replay(events)
        self.current_session = session_id
        self.talk.show_turns()
        self.statusBar().showMessage(f"Session {session_id} opened{DRAFT_BACK if replaced else ''}.", 8000)

    def load_session_settings(self, session_id: int) -> None:
        """"Run again": the session's question and settings go into the controls; Run starts it. Its model is found
        among the models here (model_library.source_of_name reads the engine's names): asked before PyTorch and
        transformers are in, it waits for them, as a Run does (the GUI thread never imports them itself: an import
        there beside the background one failed with a half-imported transformers and froze the window). Refused while
        a search runs, as Open is: it put another question and settings under the running one."""
        if self.running:
            self.statusBar().showMessage("Stop the running search before running a session again.", 8000)
            return
        if not engine_in_reach():
            self._pending_rerun = session_id
            self.import_engine()
            self.statusBar().showMessage(f"Loading PyTorch and transformers; the settings of session {session_id} load "
                                         "once they are in.")
            return
        try:
            row = self.store.get_session(session_id)
        except BeamwiseError as error:
            self.report_error("Could not read the session", error.user_message())
            return
        try:
            current, _, current_cache = self.controls.configs()
        except ValueError:
            current, current_cache = ModelSpec(), CacheConfig()
        try:
            remote = self.server.recorded(row.get("cache") or {})  # a server's run: that server again
            source = SERVER_SOURCE if remote else None if import_failed() else model_library.source_of_name(
                row.get("model") or "")  # without the engine no model can run: the model stays as it was
            kept = f"; it ran on {row.get('model')}, which is not one model in Models, so the model stays as it was" \
                if source is None else ""
            source = source or current.source
            model = ModelSpec(source=source, dtype=current.dtype)
            search = SearchConfig(**row["search"])
            cache = current_cache if remote else CacheConfig(**row["cache"])
        except (TypeError, ValueError, KeyError) as error:
            self.report_error("Could not reuse the session's settings",
                              f"They do not fit this version of Beamwise ({error}). Set them by hand.")
            return
        self.controls.set_configs(model, search, cache)
        replaced = self.show_question(row.get("question") or "")
        self.talk.load_rerun(session_id, row)  # a later turn reruns after its own earlier turns
        self.docks["settings"].raise_()
        self.statusBar().showMessage(f"Settings of session {session_id} loaded{kept}; press Run to run it again"
                                     f"{DRAFT_BACK if replaced else ''}.", 10000)

    def show_question(self, text: str) -> bool:
        """Put `text` into the question box as one edit the box can undo; True where it replaced a draft of the
        user's (other text), which Ctrl+Z in the box brings back (setPlainText dropped it, undo history and all)."""
        before = self.question.toPlainText()
        if before == text:
            return False
        cursor = self.question.textCursor()
        cursor.select(QTextCursor.SelectionType.Document)
        cursor.insertText(text)
        self.question.setTextCursor(cursor)
        return not is_blank(before)

    def export_current(self) -> None:
        if self.store is None or self.sessions is None:
            self.report_error("Nothing to export", "Sessions are not being saved in this window "
                              "(the session database could not be opened).")
            return
        session_id = self.current_session
        if session_id is None and self.sessions.isVisible():  # the row selected in the Sessions tab in view
            session_id = self.sessions.selected_id()  # (one selected behind another tab exported what was not shown)
        if session_id is None:
            self.report_error("Nothing to export", "Run a search or open a session first.")
            return
        self.sessions.export_with_dialog(session_id)

    # ------------------------------------------------------------ closing

    def configs_to_remember(self) -> tuple[ModelSpec, SearchConfig, CacheConfig] | None:
        """The settings to remember at close: those shown, never invalid ones. A step delimiter left with a broken
        escape (`\\x`) goes back to its last valid text and every other change is kept: dropping them all for one
        typo lost the beams, width, KV budget and policy set since. None when the settings are refused as a whole
        (a combination such as beams x width over the cap): the remembered ones stay."""
        try:
            return self.controls.configs()
        except ValueError:
            pass
        field = self.controls.delimiter
        typed = field.text()
        with QSignalBlocker(field):  # the panel does not revalidate for a text it holds only while this reads it
            field.setText(self._valid_delimiter)
            try:
                return self.controls.configs()
            except ValueError:
                return None
            finally:
                field.setText(typed)

    def _note_valid_delimiter(self) -> None:
        """The step delimiter's text whenever the settings are valid: what a close keeps of a broken one."""
        if self.controls.is_valid():
            self._valid_delimiter = self.controls.delimiter.text()

    def closeEvent(self, event: QCloseEvent) -> None:
        if self.lifecycle.close_when_stopped():
            event.ignore()
            return
        configs = self.configs_to_remember()
        if configs is not None:
            saved.save_configs(self.settings, *configs)
        saved.save_question(self.settings, self.question.toPlainText())
        saved.save_window(self.settings, self)
        self.settings.sync()
        self.bridge.shutdown()
        self.models.shutdown()
        super().closeEvent(event)
