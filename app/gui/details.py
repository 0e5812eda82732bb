"""The selected node in full: text, score per step along its path, tokens, KV place and PCIe bytes.

`NodeDetails` reads the window's `SessionModel` and hears its changes, so the shown node
refreshes when its score, state or memory changes. Every piece of
model text goes into plain-text widgets: a step that says '<b>' shows '<b>'.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFormLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

import app.formatting as fmt
from app.eval_exit import ExitTally
from app.formatting import size as format_bytes
from app.gui import palette as pal
from app.gui.panel import SessionView
from app.gui.terms import commands_html
from app.session import ROOT_ID, Change, SearchTree, SessionModel
from engine.events import StepSelected
from engine.exit_note import earliest_exit_note

FIELDS = ("state", "score", "aggregate", "tokens", "group", "kv_device", "kv_host", "verifier_kv", "verifier_exit",
          "h2d", "d2h")
FIELD_LABELS = {
    "state": "State", "score": "Score (this step)", "aggregate": "Path score", "tokens": "Tokens",
    "group": "Group", "kv_device": "KV on GPU", "kv_host": "KV on CPU", "verifier_kv": "Verifier KV (its step)",
    "verifier_exit": "Verifier exit (its step)",
    "h2d": "H2D (its step)",
    "d2h": "D2H (its step)",
}
PATH_COLUMNS = ("Step", "Id", "Score", "Path score", "First line")
MIN_WIDTH_PX = 160  # the narrowest the panel lays out in (the right dock keeps 200 px)
PLACEHOLDER = "Click a node in the tree to see its text, scores, memory and path."


class NodeDetails(SessionView, QWidget):
    """Details of one node of the session's tree; `show_node(id)` picks it, `clear()` empties the panel."""

    def __init__(self, session: SessionModel | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.node_id: int | None = None
        self.heading = QLabel(PLACEHOLDER)
        self.heading.setTextFormat(Qt.TextFormat.PlainText)
        self.heading.setWordWrap(True)
        self.heading.setFont(pal.ui_font(10, bold=True))
        self.values = {name: self._value_label() for name in FIELDS}
        form = self.form = QFormLayout()
        form.setHorizontalSpacing(14)
        form.setVerticalSpacing(3)
        for name in FIELDS:
            form.addRow(FIELD_LABELS[name], self.values[name])
        self.text = QPlainTextEdit(readOnly=True)
        self.text.setPlaceholderText("full text of the step")
        self.text.setAccessibleName("Full text of the step")
        self.path = self._path_table()
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.text)
        split.addWidget(self.path)
        layout = QVBoxLayout(self)
        layout.addWidget(self.heading)
        layout.addLayout(form)
        layout.addWidget(split, 1)
        self.setMinimumWidth(MIN_WIDTH_PX)  # not the form's side-by-side width: _fit_form wraps it instead
        self.clear()
        self.attach(session)

    @property
    def tree(self) -> SearchTree:
        return self.session.tree

    # -- contract ------------------------------------------------------------------------

    def refresh(self, change: Change) -> None:
        """Show the node again when it, or a node on its path, changed; a node gone with its run clears the panel."""
        if self.node_id is None:
            return
        if self.node_id not in self.tree:
            self.clear()
        elif change.restarted or change.replay or self.node_id in change.nodes or (
                change.nodes & set(self.tree.path_to(self.node_id))):
            self.show_node(self.node_id)

    def clear(self) -> None:
        """Show the placeholder; no node selected."""
        self.node_id = None
        self.heading.setText(PLACEHOLDER)
        for label in self.values.values():
            label.setText("–")
        self.text.setPlainText("")
        self.path.setRowCount(0)
        self._fit_form()

    def show_node(self, node_id: int) -> None:
        """Show `node_id`; an id not in the tree (a previous run's) clears the panel."""
        if node_id not in self.tree:
            self.clear()
            return
        self.node_id = node_id
        node = self.tree.node(node_id)
        if node_id == ROOT_ID:
            self.heading.setText("The prompt")
        else:
            eos = ", fills the model's context: its path ends here" if node.context_full else (
                ", ends the answer" if node.eos else "")
            self.heading.setText(f"Candidate #{node.id} · step {node.step} · {node.state}{eos}")
        selected = None if node_id == ROOT_ID else self._selected(node.step)  # its step's exit: none for the prompt
        values = {
            "state": node.state,
            "score": fmt.score(node.score, "–"),
            "aggregate": fmt.score(node.aggregate, "–"),
            "tokens": _tokens(node.tokens, node.speculated),
            "group": _group(node),
            "kv_device": _kv(node.device_bytes, node.device_share),
            "kv_host": _kv(node.host_bytes, None if node.device_share is None else 1 - node.device_share),
            "verifier_kv": fmt.verifier_place(node.verifier_device_bytes, node.verifier_host_bytes, "–"),
            "verifier_exit": _exit_of(selected),
            "h2d": format_bytes(node.h2d_bytes),
            "d2h": format_bytes(node.d2h_bytes),
        }
        for name, value in values.items():
            self.values[name].setText(value)
        self.values["verifier_exit"].setToolTip(_exit_tip(selected))
        if self.text.toPlainText() != node.text:
            self.text.setPlainText(node.text)
        self._fill_path(node_id)
        self._fit_form()

    def _selected(self, step: int) -> StepSelected | None:
        """The step's step_selected event, None before it was selected."""
        record = self.session.run.steps.get(step)
        return record.selected if record is not None else None

    def value(self, name: str) -> str:
        """The shown value of field `name` (one of FIELDS)."""
        return self.values[name].text()

    def path_rows(self) -> list[list[str]]:
        """The path table as text, one list per row (root first)."""
        return [
            [self.path.item(row, col).text() for col in range(self.path.columnCount())]
            for row in range(self.path.rowCount())
        ]

    # -- internals -----------------------------------------------------------------------

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit_form()

    def _fit_form(self) -> None:
        """Labels beside their values while both fit the panel's width, else every value under its label. (Qt's
        WrapLongRows keeps the widest label's column for the rows it leaves side by side, and on a 200 px dock
        cut their values to 25 px.)"""
        margins = self.layout().contentsMargins()
        labels = max(self.form.labelForField(v).sizeHint().width() for v in self.values.values())
        values = max(v.sizeHint().width() for v in self.values.values())
        beside = margins.left() + labels + self.form.horizontalSpacing() + values + margins.right() <= self.width()
        policy = QFormLayout.RowWrapPolicy.DontWrapRows if beside else QFormLayout.RowWrapPolicy.WrapAllRows
        if self.form.rowWrapPolicy() != policy:
            self.form.setRowWrapPolicy(policy)

    def _fill_path(self, node_id: int) -> None:
        """Write the cells that differ from those shown. Walking to a sibling rewrites one row, not the path; and
        the fitted columns are measured once per fill, not once per cell (a written cell made Qt measure its
        column over every row again: 150 cells of a 30-step path took 60 ms)."""
        rows = [["0", "prompt", "", "", self.tree.node(ROOT_ID).first_line]]
        rows += [
            [str(p.step), f"#{p.id}", fmt.score(p.score, "–"), fmt.score(p.aggregate, "–"), p.first_line]
            for p in self.tree.path_steps(node_id)
        ]
        header, fitted = self.path.horizontalHeader(), range(len(PATH_COLUMNS) - 1)
        for col in fitted:
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.Interactive)
        self.path.setRowCount(len(rows))
        for row, cells in enumerate(rows):
            for col, text in enumerate(cells):
                item = self.path.item(row, col)
                if item is None:
                    self.path.setItem(row, col, QTableWidgetItem(text))
                elif item.text() != text:
                    item.setText(text)
        for col in fitted:
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)

    @staticmethod
    def _value_label() -> QLabel:
        label = QLabel("–")
        label.setTextFormat(Qt.TextFormat.PlainText)
        label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        return label

    @staticmethod
    def _path_table() -> QTableWidget:
        table = QTableWidget(0, len(PATH_COLUMNS))
        table.setAccessibleName("Path from the prompt")
        table.setHorizontalHeaderLabels(PATH_COLUMNS)
        table.verticalHeader().setVisible(False)
        table.verticalHeader().setDefaultSectionSize(22)
        table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        table.setWordWrap(False)
        table.setTabKeyNavigation(False)  # Tab walked its cells and never left it: a trap for the keyboard alone
        header = table.horizontalHeader()
        for col in range(len(PATH_COLUMNS) - 1):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        return table


def _kv(nbytes: int, share: float | None) -> str:
    return "not reported" if share is None else f"{format_bytes(nbytes)} ({share:.0%})"


def _tokens(tokens: int, speculated: int) -> str:
    """'12', or '12 (first 5 speculated in its parent's step)'."""
    if not speculated:
        return str(tokens)
    which = "all" if speculated == tokens else f"first {speculated}"
    return f"{tokens} ({which} speculated in its parent's step)"


def _group(node) -> str:
    if node.group is None:
        return "none: its whole step was speculated" if node.speculated and node.tokens == node.speculated else "–"
    return f"{node.group}" + (" (prefetched)" if node.prefetched else "")


def _exit_of(selected: StepSelected | None) -> str:
    """The layer-entropy exit of the node's step (all its candidates) in a few words, 'layer 2 of 6 · 66% saved'
    (the form stays side by side on the dock: a sentence here cut mid-word and stacked the whole form), '–'
    when the step had none; marked '⚠ ' when it stopped every candidate at its earliest layer (`_exit_tip`)."""
    if selected is None or selected.exit_layer is None:
        return "–"
    mark = "⚠ " if _exit_note(selected) else ""
    return mark + ExitTally.of_steps([selected]).text()


def _exit_tip(selected: StepSelected | None) -> str:
    """The exit's figures in a sentence, then why the step's scores may say nothing (rich text: the command
    in it never breaks across lines); '' when the step had no exit."""
    if selected is None or selected.exit_layer is None:
        return ""
    tally = ExitTally.of_steps([selected])
    mean = f"{tally.mean_layer:.1f}".removesuffix(".0")
    said = f"The verifier's layer-entropy exit stopped this step's candidates at layer {mean} of {tally.layers}"
    said += "." if tally.saved is None else (f", saving {tally.saved:.0%} of its layer work (tokens x layers, "
                                             "kept candidates' completed layers paid back).")
    return commands_html("\n\n".join(t for t in (said, _exit_note(selected)) if t))


def _exit_note(selected: StepSelected | None) -> str:
    """Why a step's scores may say nothing (engine/exit_note.py), or ''."""
    said = None if selected is None else earliest_exit_note(selected.exit_layer, selected.verifier_layers)
    return "" if said is None else (f"{fmt.sentence(said)} Calibrate the exit for this verifier: run `beamwise "
                                    "eval PROBLEMS --calibrate` in a terminal with the same model and verifier, "
                                    "or switch Entropy exit off.")
