"""The Models page: the models on this machine (what `beamwise models list` and `info` show), pulling one from a
hub with progress and cancel, and removing one Beamwise downloaded after asking."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, QThread, QTimer, Signal, Slot
from PySide6.QtGui import QAction, QKeySequence
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
from app.gui.background import run_in_background
from app.gui.models_table import COLUMNS, ModelRows, ModelsTableModel, read_rows, usable
from app.gui.pull_worker import PullWorker, as_sentence
from app.model_pull import DEFAULT_ENDPOINT
from engine.errors import BeamwiseError

PROGRESS_MS = 100  # how often the page shows a running download's latest progress
USE_LABELS = ("Use as generator", "Use as verifier", "Pull again")  # what Use reads, by the selected row
Confirm = Callable[[str, str], bool]


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


class ModelsPage(QWidget):
    """The list with Use / Remove / Add folder / Add .gguf file, and the pull box. `use_requested(source,
    as_verifier)`; `model_removed(source)` once Remove deleted a model (the settings may have been using it)."""

    use_requested = Signal(str, bool)
    model_removed = Signal(str)
    pull_ended = Signal(str)  # "finished", "failed" or "cancelled"
    listed = Signal()  # the list shows what a reading found (`listing` says whether another comes)

    def __init__(self, confirm: Confirm | None = None, parent: QWidget | None = None, *, list_now: bool = True) -> None:
        """`list_now` False: the list waits for `refresh()` (reading a model's facts needs transformers, which the
        window imports in the background after it shows)."""
        super().__init__(parent)
        self.confirm = confirm or ask(self)
        self.table_model = ModelsTableModel(self)
        self._thread: QThread | None = None
        self._worker: PullWorker | None = None
        self._listing = self._list_again = False  # a reading of the list is out; another was asked meanwhile
        self._select_after: str | None = None  # the row to select once the list is read (a model just added)
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
            for button in (self.add_button, self.add_gguf_button, self.refresh_button):
                button.setEnabled(False)
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
        self.use_button = QPushButton(USE_LABELS[0])
        self.use_button.setToolTip("Put this model into Settings > Model, or resume its unfinished download "
                                   "(double-click a row does the same)")
        self.use_button.clicked.connect(self.use_selected)
        self.remove_button = QPushButton("Remove…")
        self.remove_button.setToolTip("Delete a model Beamwise downloaded (asks first; never touches other files)")
        self.remove_button.clicked.connect(self.remove_selected)
        self.add_button = QPushButton("Add folder…")
        self.add_button.setToolTip("List a model folder you keep elsewhere (Beamwise never deletes it)")
        self.add_button.clicked.connect(self._add_folder)
        self.add_gguf_button = QPushButton("Add .gguf file…")
        self.add_gguf_button.setToolTip("List a GGUF model file you keep elsewhere (Beamwise never deletes it)")
        self.add_gguf_button.clicked.connect(self._add_gguf)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.clicked.connect(self.refresh)
        fit_longest(self.use_button, USE_LABELS)  # labels _update_buttons sets
        fit_longest(self.remove_button, ("Remove…", "Remove from list"))
        self.problem_label = _message_label()  # the selected row's problem: why Use is off
        self.folder_label = _message_label()
        self.folder_label.show()
        self.folder_status = _message_label()  # what Add folder… and Remove did, beside them (the pull box's own
        # line was cut off at the window's default size)
        rows = QGridLayout()  # two by two, and the folder below: the page fits a 330-pixel dock on a laptop
        rows.addWidget(self.problem_label, 0, 0, 1, 3)
        buttons = (self.use_button, self.remove_button, self.add_button, self.add_gguf_button, self.refresh_button)
        for place, button in enumerate(buttons):
            rows.addWidget(button, 1 + place // 2, place % 2)
        rows.setColumnStretch(2, 1)
        rows.addWidget(self.folder_label, 4, 0, 1, 3)
        rows.addWidget(self.folder_status, 5, 0, 1, 3)
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
        self.progress.hide()  # shown while a download runs: idle, an empty bar read as a text box
        self.pull_status = QLabel("")
        self.pull_status.setWordWrap(True)
        buttons = QHBoxLayout()
        buttons.addWidget(self.progress, 1)
        buttons.addStretch(0)  # the bar hidden: Pull and Cancel keep their width, at the right
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
        """Read the list in a worker thread and show it when it is ready: reading a model's facts took seconds (a
        98 MB GGUF's, 9 s), and on the GUI thread the window froze that long after every pull, Cancel, Add and
        Remove. Asked while a reading runs, one more follows it (never two at once). `listed` says it is shown."""
        for button in (self.add_button, self.add_gguf_button, self.refresh_button):
            button.setEnabled(True)
        self.folder_label.setText(f"Models folder: {lib.models_dir()}")
        if self._listing:
            self._list_again = True
            return
        self._listing = True
        run_in_background(self, "beamwise-models-list", read_rows, self._on_listed)

    @property
    def listing(self) -> bool:
        """Whether a reading of the list is out (the rows shown may be older than the models folder)."""
        return self._listing

    def _on_listed(self, rows: ModelRows) -> None:
        """On the GUI thread: the rows read, with the selected model (or the one just added) selected again."""
        chosen = self._select_after or (entry.source if (entry := self.selected()) is not None else None)
        if not self._list_again:  # a model added meanwhile may be in the next reading only
            self._select_after = None
        if rows.failure:
            _say(self.folder_status, rows.failure)
        else:
            self.table_model.set_rows(rows)
        if chosen is not None:
            self.select_name(chosen)
        self._update_buttons()
        self._listing = False
        if self._list_again:
            self._list_again = False
            self.refresh()
        self.listed.emit()

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
        resume = self._resume_of(entry)
        self.use_button.setEnabled(usable(entry) or (resume and self._thread is None))
        is_prm = entry is not None and entry.role.startswith("PRM")
        self.use_button.setText(USE_LABELS[2] if resume else USE_LABELS[1] if is_prm else USE_LABELS[0])
        problem = entry.problem if entry is not None else ""
        if resume:  # the library's advice names the command line's `beamwise models pull`
            problem = "the download did not finish; pull it again to resume it (Pull again), or remove it (Remove…)."
        _say(self.problem_label, f"{entry.name}: {fmt.sentence(problem)}" if problem else "")

    def _resume_of(self, entry: lib.ModelEntry | None) -> bool:
        return entry is not None and entry.source in self.table_model.resumes

    def use_selected(self) -> None:
        """Use the selected model; for an unfinished download, pull it again as its marker records (Pull again)."""
        entry = self.selected()
        if self._resume_of(entry):
            if self._thread is not None:  # a double-click while a pull runs: its fields are that pull's
                return
            asked = self.table_model.resumes[entry.source]
            typed = self.endpoint_edit.text().strip()  # a mirror typed into Hub after this pull failed, as asked
            mirror = typed if typed and self.repo_edit.text().strip() == asked.repo else ""
            self.repo_edit.setText(asked.repo)
            self.file_edit.setText(asked.file or "")
            self.endpoint_edit.setText(mirror or asked.endpoint)
            self._start_pull(asked.revision)
        elif usable(entry):
            self.use_requested.emit(entry.source, entry.role.startswith("PRM"))

    def remove_selected(self) -> None:
        entry = self.selected()
        if entry is not None and entry.where == "added":
            self._forget(entry)
            return
        if entry is None or not entry.downloaded:
            return
        try:  # refused before the question, as the command line refuses it (a pull still downloading it)
            lib.removable(entry)
        except (OSError, ValueError) as error:
            _say(self.folder_status, f"Could not remove {entry.name}: {error}")
            return
        question = f"Delete {entry.source} ({fmt.size(entry.size_bytes)})?\n\nThe files are deleted from the disk."
        if not self.confirm("Remove model", question):
            return
        try:
            lib.remove(entry)  # refused while a pull (this window's or another Beamwise's) downloads it
        except (OSError, ValueError) as error:
            _say(self.folder_status, f"Could not remove {entry.name}: {error}")
        else:
            _say(self.folder_status, f"Removed {entry.name}; its files were deleted.")
            self.model_removed.emit(entry.source)
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

    def _add_gguf(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Choose a GGUF model file", str(Path.home()),
                                              "GGUF models (*.gguf);;All files (*)")
        if path:
            self.add_folder(Path(path))

    def add_folder(self, folder: Path) -> bool:
        """List `folder` (or a .gguf file, as `models add` does); False with the reason shown when it is no model
        Beamwise can read. The list is read again, with the added model selected once it is shown. One listed
        already is said so, as `models add` says it (it said "Added" though nothing changed), and selected."""
        try:
            already = lib.listed_already(folder)
            added = folder.resolve() if already is not None else lib.add_folder(folder)
        except (BeamwiseError, ValueError) as error:
            text = error.user_message() if isinstance(error, BeamwiseError) else str(error)
            _say(self.folder_status, f"Could not add {folder}: {text}")
            return False
        self._select_after = str(added)
        self.refresh()
        others = [] if already else lib.namesakes(added)
        _say(self.folder_status, already or f"Added {added}." + (f" Another model here is named {added.name} too "
                                                                 f"({', '.join(others)}): on the command line, give "
                                                                 "this one by its path." if others else ""))
        return True

    # ------------------------------------------------------------ pulling

    def start_pull(self) -> bool:
        """Start downloading the repository typed in; False (with the reason shown) when it cannot start."""
        return self._start_pull("main")  # a button's `clicked(checked)` must not reach the revision

    def _start_pull(self, revision: str) -> bool:
        repo = self.repo_edit.text().strip()
        if self._thread is not None:
            return False
        if repo.count("/") != 1 or not all(repo.split("/")):
            self.pull_status.setText("Type the repository as owner/name, e.g. HuggingFaceTB/SmolLM2-360M-Instruct.")
            return False
        worker = PullWorker(repo, self.file_edit.text().strip() or None,
                            self.endpoint_edit.text().strip() or DEFAULT_ENDPOINT, revision)
        thread = QThread(self)
        worker.moveToThread(thread)
        thread.started.connect(worker.run)
        # Bound methods of this page, not lambdas: they then run on the GUI thread (queued), not the worker's.
        worker.finished.connect(self._on_finished)
        worker.failed.connect(self._on_failed)
        worker.cancelled.connect(self._on_cancelled)
        self._thread, self._worker = thread, worker
        self.progress.setRange(0, 0)  # busy until the sizes are known
        self.progress.show()
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
        self._end("failed", as_sentence(message))

    @Slot(str)
    def _on_cancelled(self, message: str) -> None:
        self._end("cancelled", as_sentence(message))

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
        self.progress.hide()  # the outcome is pull_status's sentence
        self._set_pulling(False)
        self.refresh()
        self.pull_ended.emit(outcome)

    def _set_pulling(self, pulling: bool) -> None:
        self.pull_button.setEnabled(not pulling)
        self._update_buttons()  # Pull again waits too
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


__all__ = ["COLUMNS", "ModelsPage", "PullWorker", "fit_longest", "usable"]  # COLUMNS, PullWorker, usable: models_table
