"""The Models page's list: its rows read off the GUI thread (`read_rows`: a model's facts took seconds), and the thin
Qt table model that shows them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QColor

import app.formatting as fmt
from app import model_library as lib
from app.pull_marker import PullAsked

COLUMNS = ("name", "role", "architecture", "parameters", "dtype", "size on disk", "context length", "KV per token")
HEADERS = ("Name", "Role", "Architecture", "Params", "Dtype", "Size", "Context", "KV/token")  # the rest: tooltips
PROBLEM_CHARS = 60  # of a problem in its row's name cell; the selected row's whole problem shows below the list
PROBLEM_COLOUR = "#c0504d"  # the sessions list's "failed"
AnyIndex = QModelIndex | QPersistentModelIndex


@dataclass(frozen=True)
class ModelRows:
    """What the list shows: each entry with `describe`'s cells, the pulls that resume unfinished downloads (by
    source), or `failure` (the list could not be read; the rows shown before stay)."""

    entries: list[lib.ModelEntry] = field(default_factory=list)
    cells: list[dict[str, str]] = field(default_factory=list)
    resumes: dict[str, PullAsked] = field(default_factory=dict)
    failure: str = ""


def read_rows() -> tuple[ModelRows]:
    """The list as `run_in_background` hands it on: it reads every model's config (a GGUF's header), so never on
    the GUI thread. A failure is an answer too, not a dead thread."""
    try:
        entries = lib.list_models()
        resumes = {e.source: e.resume for e in entries if e.resume is not None}  # a pull still at it has none
        return (ModelRows(entries, [dict(lib.describe(e)) for e in entries], resumes),)
    except Exception as error:  # a bug or a disk error must not leave the list waiting for ever
        return (ModelRows(failure=f"Could not list the models ({type(error).__name__}: {error}); press Refresh to "
                                  "try again."),)


def usable(entry: lib.ModelEntry | None) -> bool:
    """Whether Use may put `entry` into the settings: its facts read, and no problem (an unfinished download has a
    config but not all its weights)."""
    return entry is not None and entry.facts is not None and not entry.problem


class ModelsTableModel(QAbstractTableModel):
    """One row per `ModelEntry`; the cells are `model_library.describe`'s values, as `models info` prints them."""

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self.entries: list[lib.ModelEntry] = []
        self.cells: list[dict[str, str]] = []
        self.resumes: dict[str, PullAsked] = {}

    def set_rows(self, rows: ModelRows) -> None:
        self.beginResetModel()
        self.entries, self.cells, self.resumes = rows.entries, rows.cells, rows.resumes
        self.endResetModel()

    def rowCount(self, parent: AnyIndex = QModelIndex()) -> int:  # noqa: B008 - Qt's signature
        return 0 if parent.isValid() else len(self.entries)

    def columnCount(self, parent: AnyIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(COLUMNS)

    def data(self, index: AnyIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        cells = self.cells[index.row()]
        entry = self.entries[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            if index.column() == 0:
                return _name_cell(entry)
            text = cells.get(COLUMNS[index.column()], "-")
            return text.split(" (")[0].removesuffix(" tokens") if index.column() > 1 else text
        if role == Qt.ItemDataRole.ForegroundRole and entry.problem:
            return QColor(PROBLEM_COLOUR)
        if role == Qt.ItemDataRole.ToolTipRole:
            return "\n".join(f"{label}: {value}" for label, value in cells.items())
        return None

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return HEADERS[section]
        return None


def _name_cell(entry: lib.ModelEntry) -> str:
    """The name, then what `models list` prints beside or below it: "(downloaded)", or the start of its problem (an
    unfinished download, a damaged list of added folders); the selected row's whole problem shows below the list."""
    if entry.problem:  # its path left out: the row names it, and a long path left no room for what is wrong
        return f"{entry.name}  - {fmt.brief(entry.problem.replace(f' {entry.source}', ''), PROBLEM_CHARS)}"
    return f"{entry.name}  (downloaded)" if entry.downloaded else entry.name
