"""The sessions panel: browse, search, rename, delete and export recorded sessions.

One row per conversation (its newest turn, with its turn count, titled by its first turn, which a rename
changes; app/conversations.py), as plain dicts from the store; `SessionsTableModel` only adapts
them for a QTableView. The panel asks for opening or re-running a session through signals and
leaves that to the main window. A rename or delete never freezes the window while another process
holds the database's write lock: it waits for the lock off the GUI thread (app/gui/session_writes.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import (
    QEvent,
    QPoint,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import QAction, QKeySequence, QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMenu,
    QMessageBox,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

import app.formatting as fmt
from app.conversations import conversation_title, list_conversations
from app.export import default_file_stem, export_session
from app.export.md_escape import without_controls
from app.gui.export_dialog import ask_export_target
from app.gui.session_writes import SessionWrites
from app.gui.sessions_table import COLUMNS, SessionsTableModel
from app.store import BLANK_TITLE, SessionStore
from engine.blank_text import is_blank
from engine.errors import BeamwiseError

COLUMN_WIDTHS = (220, 56, 124, 150, 80, 240)  # px; the user can drag them, the last one stretches
PAGE = 200  # conversations listed at a time: a long history opens at once, "Show older" lists more
SEARCH_WAIT_MS = 200  # the search box lists once typing pauses this long (a search over 2,000 sessions: ~25 ms)
BUTTON_PADDING_PX = 20  # a push button's frame and margins around its words
StoreSource = SessionStore | Callable[[], SessionStore]


def _no_match(search: str) -> str | None:
    """What an empty list means: no session matches the search (None when nothing was searched for)."""
    if not search.strip():
        return None
    return f"No sessions match “{search.strip()}”. Search for other words, or clear the search to list them all."


def delete_question(row: dict) -> str:
    """The confirmation for deleting a listed conversation: what `SessionStore.delete` removes, which is its newest
    turn only (as `beamwise sessions delete` removes the one session it is given); earlier turns stay. The row's
    title is the conversation's (its first turn's), so a later turn is named as a turn of it."""
    title, turn = without_controls(row["title"]), row["turns"]
    if turn <= 1:
        return f"Delete “{title}” and everything recorded for it?\n\nThis cannot be undone."
    earlier = "Turn 1 stays" if turn == 2 else f"Turns 1 to {turn - 1} stay"
    return (f"Delete turn {turn} of the conversation “{title}” and everything recorded for that turn?\n\n"
            f"{earlier}, listed as the conversation. This cannot be undone.")


SEARCH_BOUND = ("open", "run_again")  # the buttons greyed while the window's search runs


class SessionsPanel(QWidget):
    """A searchable list of recorded sessions with open, run again, rename, export and delete."""

    open_requested = Signal(int)
    run_again_requested = Signal(int)
    export_requested = Signal(int)
    session_renamed = Signal(int, str)
    session_deleted = Signal(int)
    exported = Signal(int, str)  # session id, path written
    export_failed = Signal(int, str)  # session id, what went wrong (also said in a dialog)

    def __init__(self, store: StoreSource, parent: QWidget | None = None, *, export_dialog: bool = True,
                 in_use: Callable[[int], str | None] | None = None) -> None:
        """`store` is a SessionStore or a callable returning the one to use now (asked on every refresh).

        With `export_dialog` the panel answers its own `export_requested` with a save dialog; pass
        False to handle the signal elsewhere. `in_use(session id)` says why a session must not be deleted
        now (the window's run needs it), or None.
        """
        super().__init__(parent)
        self._store_source = store
        self._in_use = in_use or (lambda _session_id: None)
        self._shown = PAGE  # conversations listed; "Show older" adds a page
        self._menu: QMenu | None = None  # the right click's, built on the first
        self._search_running = False  # the window's search: Open and Run again wait for its end (`set_search_running`)
        self._menu_actions: dict[str, QAction] = {}  # the right click's Open and Run again, once it is built
        self.writes = SessionWrites(self, self.store, self._show_message, self._update_buttons)  # rename, delete
        self.model = SessionsTableModel(self._rename, self)
        self._build()
        if export_dialog:
            self.export_requested.connect(self.export_with_dialog)
        self.refresh()

    # ---------------------------------------------------------------- building

    def _size_columns(self) -> None:
        """Titles readable in a narrow dock: the title gets room first, the rest scrolls sideways if it must."""
        header = self.view.horizontalHeader()
        header.setMinimumSectionSize(64)  # a header such as "Answer" is never cut
        for column, width in enumerate(COLUMN_WIDTHS):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.Interactive)
            self.view.setColumnWidth(column, width)
        header.setStretchLastSection(True)
        self.view.setHorizontalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)

    def _build(self) -> None:
        self.search = QLineEdit(self, placeholderText="Search titles, questions and answers", clearButtonEnabled=True)
        self._search_wait = QTimer(self, singleShot=True, interval=SEARCH_WAIT_MS)
        self._search_wait.timeout.connect(self.refresh)
        self.search.textChanged.connect(self._search_edited)
        self.search.returnPressed.connect(self.refresh)  # Enter lists at once
        self.search.setAccessibleName("Search sessions")
        self.view = QTableView(self)
        self.view.setAccessibleName("Sessions")
        self.view.setModel(self.model)
        self.view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.view.setEditTriggers(QAbstractItemView.EditTrigger.EditKeyPressed)  # F2 renames
        self.view.verticalHeader().hide()
        self.view.setWordWrap(False)
        self.view.setTabKeyNavigation(False)  # rows are chosen with the arrows; Tab goes on to the buttons
        self._size_columns()
        self.view.doubleClicked.connect(lambda index: self.open_requested.emit(self.model.session_id(index.row())))
        self.view.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.view.customContextMenuRequested.connect(self._show_menu)
        self.view.selectionModel().selectionChanged.connect(lambda *_: self._update_buttons())
        self.message = QLabel(self, wordWrap=True)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.message.hide()
        self.older = QPushButton(f"Show {PAGE} older conversations", self)
        self.older.setToolTip("Only the newest are listed at first; searching looks through all of them")
        self.older.clicked.connect(self.show_older)
        self.older.hide()
        buttons = QHBoxLayout()
        self.buttons: dict[str, QPushButton] = {}
        for key, text, slot in (("open", "Open", self.open_requested), ("run_again", "Run again",
                                self.run_again_requested), ("export", "Export…", self.export_requested)):
            button = QPushButton(text, self)
            button.clicked.connect(lambda _=False, s=slot: self._emit_for_selected(s))
            self.buttons[key] = button
            buttons.addWidget(button)
        self.buttons["delete"] = QPushButton("Delete…", self)
        self.buttons["delete"].clicked.connect(self.delete_selected)
        buttons.addStretch(1)
        buttons.addWidget(self.buttons["delete"])
        for button in self.buttons.values():  # as narrow as their words, not the style's 80 px: the four fit a 330
            # px dock, and the Sessions tab no longer widens the window's smallest from 854 to 862 px
            button.setMinimumWidth(button.fontMetrics().horizontalAdvance(button.text()) + BUTTON_PADDING_PX)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        for widget in (self.search, self.view, self.older, self.message):
            layout.addWidget(widget)
        layout.addLayout(buttons)
        self._add_shortcuts()
        self._update_buttons()

    def _add_shortcuts(self) -> None:
        """Delete, Enter (either: the number pad's too) and F2 on the list (the context menu shows F2 and Delete;
        F1 lists all three)."""
        enter = [QKeySequence(Qt.Key.Key_Return), QKeySequence(Qt.Key.Key_Enter)]
        for keys, slot in ((QKeySequence.keyBindings(QKeySequence.StandardKey.Delete), self.delete_selected),
                           (enter, lambda: self._emit_for_selected(self.open_requested)),
                           ([QKeySequence(Qt.Key.Key_F2)], self.rename_selected)):
            action = QAction(self.view)
            action.setShortcuts(keys)
            action.setShortcutContext(Qt.ShortcutContext.WidgetShortcut)
            action.triggered.connect(slot)
            self.view.addAction(action)

    def set_search_running(self, running: bool) -> None:
        """Open and Run again are greyed while the window's search runs: it refuses both then (each would put
        another session's question and settings under the running one), and a button that looked usable was
        refused only once pressed."""
        self._search_running = running
        self._update_buttons()

    def _update_buttons(self) -> None:
        has = self.selected_id() is not None and self.waiting is None  # one write at a time
        for key, button in self.buttons.items():
            button.setEnabled(has and not (self._search_running and key in SEARCH_BOUND))
            button.setToolTip("Stop the running search first" if has and not button.isEnabled() else "")
        for key, action in self._menu_actions.items():
            action.setEnabled(self.buttons[key].isEnabled())

    def _show_menu(self, pos: QPoint) -> None:
        index = self.view.indexAt(pos)
        if not index.isValid():
            return
        self.view.selectRow(index.row())
        self.context_menu().popup(self.view.viewport().mapToGlobal(pos))

    def context_menu(self) -> QMenu:
        """The actions on the selected session (also what a right click shows). Built once: a menu built per click
        was a child of the panel, kept with its actions for as long as the window stayed open."""
        if self._menu is not None:
            return self._menu
        menu = self._menu = QMenu(self)
        for key, text, signal in (("open", "Open", self.open_requested),
                                  ("run_again", "Run again", self.run_again_requested)):
            self._menu_actions[key] = menu.addAction(text, lambda s=signal: self._emit_for_selected(s))
        self._update_buttons()
        menu.addAction("Rename", self.rename_selected).setShortcut(QKeySequence(Qt.Key.Key_F2))
        menu.addAction("Export…", lambda: self._emit_for_selected(self.export_requested))
        menu.addSeparator()
        menu.addAction("Delete…", self.delete_selected).setShortcut(QKeySequence.StandardKey.Delete)
        return menu

    # ---------------------------------------------------------------- state

    def store(self) -> SessionStore:
        source = self._store_source
        return source if isinstance(source, SessionStore) else source()

    @property
    def waiting(self) -> tuple[str, int] | None:
        """("rename" or "delete", session id) while that write waits for the database, else None."""
        return self.writes.waiting

    def selected_id(self) -> int | None:
        rows = self.view.selectionModel().selectedRows()
        return self.model.session_id(rows[0].row()) if rows else None

    def select(self, session_id: int) -> bool:
        row = self.model.row_of(session_id)
        if row is not None:
            self.view.selectRow(row)
        return row is not None

    def _search_edited(self, text: str) -> None:
        """A key in the search box: list once typing pauses, not at each key (each search reads every session's
        texts, and a key waited for the one before it); an emptied box lists at once, reading no texts."""
        if text.strip():
            self._search_wait.start()
        else:
            self.refresh()

    def refresh(self) -> None:
        """Reload from the store with the current search text, keeping the selection when it still exists."""
        self._search_wait.stop()
        keep = self.selected_id()
        try:
            rows = list_conversations(self.store(), self.search.text() or None, limit=self._shown + 1)  # newest turns
        except BeamwiseError as error:
            self._show_message(error.user_message())
            self.model.set_rows([])
            self.older.hide()
        else:
            self._show_message(_no_match(self.search.text()) if not rows else None)
            self.model.set_rows(rows[: self._shown])
            self.older.setVisible(len(rows) > self._shown)
            if keep is not None:
                self.select(keep)
        self._update_buttons()

    def showEvent(self, event: QShowEvent) -> None:
        """The tab shown again: sessions other processes recorded meanwhile are listed."""
        super().showEvent(event)
        if not event.spontaneous():
            self._relist()

    def changeEvent(self, event: QEvent) -> None:
        """The window active again (the user is back from a terminal that ran `beamwise run`): list what it added."""
        super().changeEvent(event)
        if event.type() == QEvent.Type.ActivationChange and self.isVisible() and self.isActiveWindow():
            self._relist()

    def _relist(self) -> None:
        """List again what other processes wrote to the database (`beamwise run` in a terminal), a run of theirs
        that died since the window opened marked interrupted first, so it is not listed as running for ever.
        Only here, not on every refresh: typing in the search box lists again once typing pauses."""
        try:
            self.store().mark_interrupted()
        except BeamwiseError:
            pass  # busy or read-only now: the listing still reads, and the next time the tab shows marks them
        self.refresh()

    def show_older(self) -> None:
        """List the next page of older conversations below those shown."""
        self._shown += PAGE
        self.refresh()

    def _show_message(self, text: str | None) -> None:
        self.message.setText(text or "")
        self.message.setVisible(bool(text))

    def _emit_for_selected(self, signal: Any) -> None:
        session_id = self.selected_id()
        if session_id is not None and not self.writes.still_waiting():
            signal.emit(session_id)

    # ---------------------------------------------------------------- actions

    def rename_selected(self) -> None:
        rows = self.view.selectionModel().selectedRows()
        if rows and not self.writes.still_waiting():
            self.view.edit(self.model.index(rows[0].row(), COLUMNS.index("title")))

    def _rename(self, session_id: int, title: str) -> bool:
        """The model's rename of a conversation's title, its first turn's (session `session_id`): True when the title
        is saved now; False when it failed (said) or waits for the database (the old title stays shown until it is
        saved, and stays for good if it cannot be)."""
        if self.writes.still_waiting():
            return False
        old = without_controls(self.model.rows[self.model.row_of_conversation(session_id)]["title"])
        if is_blank(title):  # refused unsaid, where `sessions rename` says why
            self._warn("Could not rename the session", ValueError(BLANK_TITLE), f"The title stays “{old}”.")
            return False

        def saved() -> None:
            self.model.set_title(session_id, title)
            self.session_renamed.emit(session_id, title)

        return self.writes.write(("rename", session_id), lambda store: store.rename(session_id, title), saved,
                                  lambda error: self._warn("Could not rename the session", error,
                                                           f"The title stays “{old}”."))

    def delete_selected(self) -> None:
        session_id = self.selected_id()
        if session_id is None or self.writes.still_waiting():
            return
        busy = self._in_use(session_id)
        if busy:
            QMessageBox.warning(self, "Could not delete the session", busy)
            return
        answer = QMessageBox.question(
            self, "Delete session", delete_question(self.model.rows[self.model.row_of(session_id)]),
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, QMessageBox.StandardButton.No)
        if answer != QMessageBox.StandardButton.Yes:
            return

        def deleted() -> None:
            self.refresh()
            self.session_deleted.emit(session_id)

        self.writes.write(("delete", session_id), lambda store: store.delete(session_id), deleted,
                          lambda error: self._warn("Could not delete the session", error))

    def export_with_dialog(self, session_id: int) -> Path | None:
        """Ask where to save (app/gui/export_dialog.py: the file and format as `sessions export -o` takes them), then
        export."""
        suggested = f"{default_file_stem(self._title(session_id))}.md"  # any turn's: its conversation's title
        target = ask_export_target(self, suggested)
        if target is None:
            return None
        path, fmt = target
        try:
            written = export_session(self.store(), session_id, fmt, path)
        except BeamwiseError as error:
            self.export_failed.emit(session_id, error.user_message())
            self._warn("Could not export the session", error)
            return None
        self.exported.emit(session_id, str(written))
        return written

    def _title(self, session_id: int) -> str:
        """The title of a session's conversation (its first turn's, as listed; the export holds every turn): its
        row's when listed, else the store's (an earlier turn, an older branch's)."""
        row = self.model.row_of(session_id)
        if row is not None:
            return self.model.rows[row]["title"]
        try:
            return conversation_title(self.store(), session_id) or f"session {session_id}"
        except BeamwiseError:
            return f"session {session_id}"  # the export itself says what is wrong

    def _warn(self, title: str, error: Exception, after: str = "") -> None:
        text = error.user_message() if isinstance(error, BeamwiseError) else str(error)
        QMessageBox.warning(self, title, f"{fmt.sentence(text)} {after}".strip())

