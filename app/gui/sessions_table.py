"""The Sessions tab's table: one row per conversation, as plain dicts from the store, adapted for a QTableView
(`SessionsTableModel`); its title cell renames the conversation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QColor

import app.formatting as fmt
from app.export.md_escape import without_controls

COLUMNS = ("title", "turns", "created", "model", "status", "answer")
HEADERS = ("Title", "Turns", "Date", "Model", "Status", "Answer")
STATUS_COLOURS = {"failed": "#c0504d", "interrupted": "#b07a12", "cancelled": "#5f6b7a", "running": "#3b7dd8"}
AnyIndex = QModelIndex | QPersistentModelIndex


class SessionsTableModel(QAbstractTableModel):
    """Session rows for a table; the title is editable and `rename(session id, title)` does the actual change, of
    the session a row's title is (its conversation's first turn: `conversation_id`)."""

    def __init__(self, rename: Callable[[int, str], bool], parent: Any = None) -> None:
        super().__init__(parent)
        self.rows: list[dict] = []
        self._rename = rename

    def set_rows(self, rows: list[dict]) -> None:
        self.beginResetModel()
        self.rows = rows
        self.endResetModel()

    def session_id(self, row: int) -> int:
        return int(self.rows[row]["id"])

    def row_of(self, session_id: int) -> int | None:
        return next((i for i, r in enumerate(self.rows) if r["id"] == session_id), None)

    def row_of_conversation(self, conversation_id: int) -> int | None:
        """The row of the conversation whose first turn is session `conversation_id`: the one it titles."""
        return next((i for i, r in enumerate(self.rows) if r["conversation_id"] == conversation_id), None)

    def rowCount(self, parent: AnyIndex = QModelIndex()) -> int:  # noqa: B008 - Qt's signature
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent: AnyIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return HEADERS[section]
        return None

    def flags(self, index: AnyIndex) -> Qt.ItemFlag:
        flags = super().flags(index)
        return flags | Qt.ItemFlag.ItemIsEditable if COLUMNS[index.column()] == "title" else flags

    def data(self, index: AnyIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        row, key = self.rows[index.row()], COLUMNS[index.column()]
        if role == Qt.ItemDataRole.DisplayRole:
            return _display(row, key)
        if role == Qt.ItemDataRole.EditRole:
            return row["title"]
        if role == Qt.ItemDataRole.ToolTipRole:
            return row["question"] if key == "title" else (row.get("error") or row["answer"]) if key in (
                "status", "answer") else None
        if role == Qt.ItemDataRole.ForegroundRole and key == "status" and row["status"] in STATUS_COLOURS:
            return QColor(STATUS_COLOURS[row["status"]])
        if role == Qt.ItemDataRole.UserRole:
            return row["id"]
        return None

    def setData(self, index: AnyIndex, value: Any, role: int = Qt.ItemDataRole.EditRole) -> bool:
        if role != Qt.ItemDataRole.EditRole or COLUMNS[index.column()] != "title":
            return False
        title = " ".join(str(value).split())
        row = self.rows[index.row()]
        if title == row["title"] or not self._rename(row["conversation_id"], title):
            return False  # refused (a blank title too: said), failed or still waiting: the old title stays shown
        self.set_title(row["conversation_id"], title)
        return True

    def set_title(self, conversation_id: int, title: str) -> None:
        """Show a conversation's saved title (its first turn's, session `conversation_id`): at once, or once a rename
        that waited for a busy database lands (the row found again: a follow-up may have been listed since)."""
        row = self.row_of_conversation(conversation_id)
        if row is None:
            return
        self.rows[row]["title"] = title
        index = self.index(row, COLUMNS.index("title"))
        self.dataChanged.emit(index, index, [Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.EditRole])


def _display(row: dict, key: str) -> str:
    """A cell's text; a model's control characters (random weights write ESC, DEL, ...) shown as U+FFFD, as the
    transcript and `beamwise sessions` show them."""
    value = row.get(key)
    if key == "created":
        return fmt.local_time(value)  # stored with the recording machine's offset: as this one's clock said it
    if key == "answer":
        return fmt.brief(without_controls(value or ""), 80)
    return "" if value is None else without_controls(str(value))
