"""The Models page: the models on this machine (what `beamwise models list` and `info` show), pulling one from a
hub with progress and cancel, and removing one Beamwise downloaded after asking."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    Qt,
    QThread,
    QTimer,
    Signal,
    Slot,
)
from PySide6.QtGui import QAction, QColor, QKeySequence
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QFormLayout,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

import app.formatting as fmt
from app import model_library as lib
from app.model_pull import DEFAULT_ENDPOINT, PullCancelled, PullError, PullProgress, pull
from engine.errors import BeamwiseError

COLUMNS = ("name", "role", "architecture", "parameters", "dtype", "size on disk", "context length", "KV per token")
HEADERS = ("Name", "Role", "Architecture", "Params", "Dtype", "Size", "Context", "KV/token")  # the rest: tooltips
PROGRESS_MS = 100  # how often the page shows a running download's latest progress
PROBLEM_CHARS = 60  # of a problem in its row's name cell; the selected row's whole problem shows below the list
PROBLEM_COLOUR = "#c0504d"  # the sessions list's "failed"
AnyIndex = QModelIndex | QPersistentModelIndex
Confirm = Callable[[str, str], bool]


class ModelsTableModel(QAbstractTableModel):
    """One row per `ModelEntry`; the cells are `model_library.describe`'s values, as `models info` prints them."""

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self.entries: list[lib.ModelEntry] = []
        self.cells: list[dict[str, str]] = []

    def set_entries(self, entries: list[lib.ModelEntry]) -> None:
        self.beginResetModel()
        self.entries = entries
        self.cells = [dict(lib.describe(e)) for e in entries]
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


class PullWorker(QObject):
    """Runs one `model_pull.pull` in a QThread; its outcome arrives as a signal on the GUI thread. Progress does not:
    the download also reports from a plain Python thread (the clock beside a transfer), and a signal emitted there
    would make Qt adopt a thread that ends right after. So the worker keeps only the latest report, and the page
    takes it on a timer (`take_report`)."""

    finished = Signal(str)  # the folder
    failed = Signal(str)  # what to do
    cancelled = Signal(str)

    def __init__(self, repo: str, filename: str | None, endpoint: str) -> None:
        super().__init__()
        self.repo, self.filename, self.endpoint = repo, filename, endpoint
        self.cancel = threading.Event()
        self._latest: tuple[int, int, str] | None = None  # bytes done, in all, "40% 1.2 MB of …"

    @Slot()
    def run(self) -> None:
        try:
            folder = pull(self.repo, filename=self.filename, endpoint=self.endpoint, report=self._report,
                          cancel=self.cancel)
        except PullCancelled as stopped:
            self.cancelled.emit(str(stopped))
        except PullError as error:
            self.failed.emit(str(error))
        except Exception as error:  # a bug must not kill the thread silently
            self.failed.emit(f"the download stopped with an error ({type(error).__name__}: {error}).")
        else:
            self.finished.emit(str(folder))

    def _report(self, progress: PullProgress) -> None:
        self._latest = (progress.done, progress.total, progress.line())  # one assignment: safe from any thread

    def take_report(self) -> tuple[int, int, str] | None:
        """The latest progress not yet taken, or None."""
        latest, self._latest = self._latest, None
        return latest


def _sentence(message: str) -> str:
    """A pull's message as a sentence, its first word capitalised only when it is a plain word: one that opens with
    a repository id or an address ("tiny/gen", "http://…") keeps its case, as the hub spells it."""
    first = message.split(" ", 1)[0]
    return fmt.sentence(message) if first.isalpha() else message


def fit_longest(button: QPushButton, labels: tuple[str, ...]) -> None:
    """Wide enough for the longest of the labels it will show: a button sized for its first label cut a longer
    one at both ends ("emove from li")."""
    shown = button.text()
    widths = []
    for label in labels:
        button.setText(label)
        widths.append(button.sizeHint().width())
    button.setText(shown)
    button.setMinimumWidth(max(widths))


def _message_label() -> QLabel:
    """A wrapped, selectable line of the page, hidden while it has nothing to say."""
    label = QLabel()
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    label.hide()
    return label


def _say(label: QLabel, text: str) -> None:
    label.setText(text)
    label.setVisible(bool(text))


def ask(parent: QWidget) -> Confirm:
    return lambda title, text: QMessageBox.question(parent, title, text) == QMessageBox.StandardButton.Yes


def usable(entry: lib.ModelEntry | None) -> bool:
    """Whether Use may put `entry` into the settings: its facts read, and no problem (an unfinished download has a
    config but not all its weights)."""
    return entry is not None and entry.facts is not None and not entry.problem


class ModelsPage(QWidget):
    """The list with Use / Remove / Add folder, and the pull box. `use_requested(source, as_verifier)`."""

    use_requested = Signal(str, bool)
    pull_ended = Signal(str)  # "finished", "failed" or "cancelled"

    def __init__(self, confirm: Confirm | None = None, parent: QWidget | None = None, *, list_now: bool = True) -> None:
        """`list_now` False: the list waits for `refresh()` (reading a model's facts needs transformers, which the
        window imports in the background after it shows)."""
        super().__init__(parent)
        self.confirm = confirm or ask(self)
        self.table_model = ModelsTableModel(self)
        self._thread: QThread | None = None
        self._worker: PullWorker | None = None
        self._progress_timer = QTimer(self)
        self._progress_timer.setInterval(PROGRESS_MS)
        self._progress_timer.timeout.connect(self._show_progress)
        layout = QVBoxLayout(self)
        layout.addWidget(self._build_table(), 1)
        layout.addLayout(self._build_buttons())
        layout.addWidget(self._build_pull())
        if list_now:
            self.refresh()
        else:  # nothing here may read a model's facts until then: Add folder and Refresh wait too
            self.folder_label.setText("The models are listed once PyTorch has loaded…")
            self.add_button.setEnabled(False)
            self.refresh_button.setEnabled(False)
            self._update_buttons()

    def _build_table(self) -> QTableView:
        self.table = QTableView()
        self.table.setAccessibleName("Models")
        self.table.setModel(self.table_model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.verticalHeader().hide()
        self.table.setTabKeyNavigation(False)  # rows are chosen with the arrows; Tab goes on to the buttons
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.selectionModel().selectionChanged.connect(self._update_buttons)
        self.table.doubleClicked.connect(lambda index: self.use_selected())
        remove = QAction("Remove…", self.table)
        remove.setShortcut(QKeySequence(QKeySequence.StandardKey.Delete))
        remove.setShortcutContext(Qt.ShortcutContext.WidgetShortcut)
        remove.triggered.connect(self.remove_selected)
        self.table.addAction(remove)
        return self.table

    def _build_buttons(self) -> QGridLayout:
        self.use_button = QPushButton("Use as generator")
        self.use_button.setToolTip("Put this model into Settings > Model (double-click a row does the same)")
        self.use_button.clicked.connect(self.use_selected)
        self.remove_button = QPushButton("Remove…")
        self.remove_button.setToolTip("Delete a model Beamwise downloaded (asks first; never touches other files)")
        self.remove_button.clicked.connect(self.remove_selected)
        self.add_button = QPushButton("Add folder…")
        self.add_button.setToolTip("List a model folder you keep elsewhere (Beamwise never deletes it)")
        self.add_button.clicked.connect(self._add_folder)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.clicked.connect(self.refresh)
        fit_longest(self.use_button, ("Use as generator", "Use as verifier"))  # labels _update_buttons sets
        fit_longest(self.remove_button, ("Remove…", "Remove from list"))
        self.problem_label = _message_label()  # the selected row's problem: why Use is off
        self.folder_label = _message_label()
        self.folder_label.show()
        self.folder_status = _message_label()  # what Add folder… and Remove did, beside them (the pull box's own
        # line was cut off at the window's default size)
        rows = QGridLayout()  # two by two, and the folder below: the page fits a 330-pixel dock on a laptop
        rows.addWidget(self.problem_label, 0, 0, 1, 3)
        for place, button in enumerate((self.use_button, self.remove_button, self.add_button, self.refresh_button)):
            rows.addWidget(button, 1 + place // 2, place % 2)
        rows.setColumnStretch(2, 1)
        rows.addWidget(self.folder_label, 3, 0, 1, 3)
        rows.addWidget(self.folder_status, 4, 0, 1, 3)
        return rows

    def _build_pull(self) -> QGroupBox:
        box = QGroupBox("Download from a hub")  # a longer title asked more than the 330 px dock has
        form = QFormLayout(box)
        note = QLabel("Nothing is downloaded until you press Pull.")
        note.setWordWrap(True)
        form.addRow(note)
        self.repo_edit = QLineEdit()
        self.repo_edit.setPlaceholderText("owner/name, e.g. HuggingFaceTB/SmolLM2-360M-Instruct")
        self.repo_edit.returnPressed.connect(self.start_pull)
        self.file_edit = QLineEdit()
        self.file_edit.setPlaceholderText("optional: one file, e.g. model.Q4_K_M.gguf of a GGUF repository")
        self.endpoint_edit = QLineEdit(DEFAULT_ENDPOINT)
        self.endpoint_edit.setToolTip("The hub's address: huggingface.co, a mirror, or a hub on your network")
        self.pull_button = QPushButton("Pull")
        self.pull_button.clicked.connect(self.start_pull)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop the download; pulling the same repository again resumes it")
        self.cancel_button.clicked.connect(self.cancel_pull)
        self.cancel_button.setEnabled(False)
        self.progress = QProgressBar()
        self.progress.setTextVisible(True)
        self.progress.setFormat("")
        self.pull_status = QLabel("")
        self.pull_status.setWordWrap(True)
        buttons = QHBoxLayout()
        buttons.addWidget(self.progress, 1)
        buttons.addWidget(self.pull_button)
        buttons.addWidget(self.cancel_button)
        form.addRow("Repository", self.repo_edit)
        form.addRow("File", self.file_edit)
        form.addRow("Hub", self.endpoint_edit)
        form.addRow(buttons)
        form.addRow(self.pull_status)
        return box

    # ------------------------------------------------------------ the list

    def refresh(self) -> None:
        self.table_model.set_entries(lib.list_models())
        self.folder_label.setText(f"Models folder: {lib.models_dir()}")
        self.add_button.setEnabled(True)
        self.refresh_button.setEnabled(True)
        self._update_buttons()

    def selected(self) -> lib.ModelEntry | None:
        rows = self.table.selectionModel().selectedRows()
        return self.table_model.entries[rows[0].row()] if rows else None

    def select_name(self, name: str) -> None:
        """The first row of that name, or of that source (two models may share a name; a source is one model)."""
        for row, entry in enumerate(self.table_model.entries):
            if name in (entry.name, entry.source):
                self.table.selectRow(row)
                return

    def _update_buttons(self) -> None:
        entry = self.selected()
        listed = entry is not None and entry.where == "added"  # only taken off the list, never deleted
        self.remove_button.setEnabled(entry is not None and (entry.downloaded or listed))
        self.remove_button.setText("Remove from list" if listed else "Remove…")
        self.use_button.setEnabled(usable(entry))
        is_prm = entry is not None and entry.role.startswith("PRM")
        self.use_button.setText("Use as verifier" if is_prm else "Use as generator")
        problem = entry.problem if entry is not None else ""
        _say(self.problem_label, f"{entry.name}: {fmt.sentence(problem)}" if problem else "")

    def use_selected(self) -> None:
        entry = self.selected()
        if usable(entry):
            self.use_requested.emit(entry.source, entry.role.startswith("PRM"))

    def remove_selected(self) -> None:
        entry = self.selected()
        if entry is not None and entry.where == "added":
            self._forget(entry)
            return
        if entry is None or not entry.downloaded:
            return
        question = f"Delete {entry.source} ({fmt.size(entry.size_bytes)})?\n\nThe files are deleted from the disk."
        if not self.confirm("Remove model", question):
            return
        try:
            lib.remove(entry)
        except (OSError, ValueError) as error:
            _say(self.folder_status, f"Could not remove {entry.name}: {error}")
        self.refresh()

    def _forget(self, entry: lib.ModelEntry) -> None:
        """An added folder leaves the list; its files stay where they are (Add folder… lists it again)."""
        try:
            lib.forget_folder(Path(entry.source))
        except BeamwiseError as error:
            _say(self.folder_status, f"Could not take {entry.name} off the list: {error.user_message()}")
        else:
            _say(self.folder_status, f"Took {entry.name} off the list; its files were not touched.")
        self.refresh()

    def _add_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Choose a model folder (with config.json)")
        if folder:
            self.add_folder(Path(folder))

    def add_folder(self, folder: Path) -> bool:
        """List `folder`; False with the reason shown when it is no model Beamwise can read."""
        try:
            added = lib.add_folder(folder)
        except (BeamwiseError, ValueError) as error:
            text = error.user_message() if isinstance(error, BeamwiseError) else str(error)
            _say(self.folder_status, f"Could not add {folder}: {text}")
            return False
        self.refresh()
        self.select_name(str(added))
        others = lib.namesakes(added)
        _say(self.folder_status, f"Added {added}." + (f" Another model here is named {added.name} too "
                                                      f"({', '.join(others)}): on the command line, give this one by "
                                                      "its path." if others else ""))
        return True

    # ------------------------------------------------------------ pulling

    def start_pull(self) -> bool:
        """Start downloading the repository typed in; False (with the reason shown) when it cannot start."""
        repo = self.repo_edit.text().strip()
        if self._thread is not None:
            return False
        if repo.count("/") != 1 or not all(repo.split("/")):
            self.pull_status.setText("Type the repository as owner/name, e.g. HuggingFaceTB/SmolLM2-360M-Instruct.")
            return False
        worker = PullWorker(repo, self.file_edit.text().strip() or None,
                            self.endpoint_edit.text().strip() or DEFAULT_ENDPOINT)
        thread = QThread(self)
        worker.moveToThread(thread)
        thread.started.connect(worker.run)
        # Bound methods of this page, not lambdas: they then run on the GUI thread (queued), not the worker's.
        worker.finished.connect(self._on_finished)
        worker.failed.connect(self._on_failed)
        worker.cancelled.connect(self._on_cancelled)
        self._thread, self._worker = thread, worker
        self.progress.setRange(0, 0)  # busy until the sizes are known
        self.pull_status.setText(f"Asking {worker.endpoint} for {repo}…")
        self._set_pulling(True)
        thread.start()
        self._progress_timer.start()
        return True

    def cancel_pull(self) -> None:
        if self._worker is not None:
            self._worker.cancel.set()
            self.pull_status.setText("Cancelling…")

    def _show_progress(self) -> None:
        """On the GUI thread, every PROGRESS_MS while a download runs: the worker's latest report, if new."""
        report = self._worker.take_report() if self._worker is not None else None
        if report is not None:
            self._on_progress(*report)

    def _on_progress(self, done: int, total: int, line: str) -> None:
        if self.pull_status.text().startswith("Asking") and self._worker is not None:
            self.pull_status.setText(f"Downloading {self._worker.repo} from {self._worker.endpoint}; Cancel keeps "
                                     "what has arrived, and pulling it again resumes.")
        scale = max(1, total // 1_000_000_000 + 1)  # QProgressBar holds an int
        self.progress.setFormat(line)
        self.progress.setRange(0, max(1, total // scale))
        self.progress.setValue(done // scale)

    @Slot(str)
    def _on_finished(self, folder: str) -> None:
        self._end("finished", f"Downloaded to {folder}; select it above and press Use.")

    @Slot(str)
    def _on_failed(self, message: str) -> None:
        self._end("failed", _sentence(message))

    @Slot(str)
    def _on_cancelled(self, message: str) -> None:
        self._end("cancelled", _sentence(message))

    def _end(self, outcome: str, message: str) -> None:
        self._show_progress()  # the last report, a finished file's 100%
        self._progress_timer.stop()
        self.pull_status.setText(message)
        if outcome != "finished":
            self.progress.setRange(0, 1)
            self.progress.setValue(0)
            self.progress.setFormat(outcome)
        if self._thread is not None:
            self._thread.quit()
            self._thread.wait()
            self._thread.deleteLater()
            self._worker.deleteLater()
        self._thread, self._worker = None, None
        self._set_pulling(False)
        self.refresh()
        self.pull_ended.emit(outcome)

    def _set_pulling(self, pulling: bool) -> None:
        self.pull_button.setEnabled(not pulling)
        self.cancel_button.setEnabled(pulling)
        for edit in (self.repo_edit, self.file_edit, self.endpoint_edit):
            edit.setEnabled(not pulling)

    def shutdown(self) -> None:
        """On closing the window: stop a download (it resumes next time) and wait for its thread."""
        self._progress_timer.stop()
        if self._thread is not None:
            self._worker.cancel.set()
            self._thread.quit()
            self._thread.wait(5000)
