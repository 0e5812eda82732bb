"""The window's layout: the question with Run and Stop above the tree, and the panels' docks around them."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QDockWidget,
    QHBoxLayout,
    QMainWindow,
    QPlainTextEdit,
    QScrollArea,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.gui.charts import ChartsPanel
from app.gui.conversation import with_follow_up
from app.gui.details import NodeDetails
from app.gui.dock_tabs import hide_when_covered
from app.gui.panel import Panel
from app.gui.transcript import TranscriptPanel
from app.gui.tree_view import ReasoningTreeView
from app.session import SessionModel

STOP_TIP = "Stop the search (Esc): the step in progress is dropped, the steps chosen so far are kept"


@dataclass
class Panels:
    """The views of the window's session model."""

    tree: ReasoningTreeView
    charts: ChartsPanel
    details: NodeDetails
    transcript: TranscriptPanel

    @classmethod
    def of(cls, session: SessionModel) -> Panels:
        charts = ChartsPanel(session, deferred=True)  # pyqtgraph: built after the first paint (import_engine)
        return cls(ReasoningTreeView(session), charts, NodeDetails(session), TranscriptPanel(session))

    def all(self) -> tuple[Panel, ...]:
        return (self.tree, self.charts, self.details, self.transcript)


def scrolled(widget: QWidget, min_width: int) -> QScrollArea:
    """`widget` in a scroll area: on a 1366x768 screen a dock gets less than the widget asks for, and it scrolls
    rather than pushing the window past the screen or squeezing the tree and the other docks."""
    scroll = QScrollArea()
    scroll.setWidget(widget)
    scroll.setWidgetResizable(True)
    scroll.setMinimumWidth(min_width)
    scroll.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # Tab goes to the controls in it, not to a frame that shows nothing
    return scroll


def lines_high(edit: QPlainTextEdit, lines: int) -> int:
    """The height that shows `lines` lines of `edit`'s text, frame and margins included."""
    margins = edit.frameWidth() + int(edit.document().documentMargin())
    return lines * edit.fontMetrics().lineSpacing() + 2 * margins


def build_central(window: QMainWindow) -> QVBoxLayout:
    """The question, Run and Stop above the tree, as `window`'s (a MainWindow's) central widget: sets its
    `question`, `run_action`, `refused_run` and `stop_action`, and returns the layout the tree is in."""
    window.question = QPlainTextEdit()
    window.question.setPlaceholderText("Ask a question, then press Run (Ctrl+Enter). Esc stops the search.")
    window.question.setMaximumHeight(80)
    window.question.setMinimumHeight(lines_high(window.question, 2))  # at the window's smallest: room for the plan
    window.question.setTabChangesFocus(True)
    window.question.setAccessibleName("Question")  # a screen reader does not read the placeholder as a name
    window.run_action = QAction("&Run", window)  # Alt+R on the button, R in the Search menu
    run_keys = [QKeySequence("Ctrl+Return"), QKeySequence("Ctrl+Enter")]
    window.run_action.setShortcuts(run_keys)
    window.run_action.setToolTip("Start the search (Ctrl+Enter)")
    window.refused_run = QShortcut(window)  # Ctrl+Enter while Run is greyed out: says why instead of nothing
    window.refused_run.setKeys(run_keys)
    window.refused_run.setEnabled(False)
    window.stop_action = QAction("&Stop", window)
    window.stop_action.setShortcut(QKeySequence(Qt.Key.Key_Escape))
    window.stop_action.setToolTip(STOP_TIP)
    window.stop_action.setEnabled(False)
    buttons = QVBoxLayout()
    for action in (window.run_action, window.stop_action):
        button = QToolButton()
        button.setDefaultAction(action)
        button.setObjectName(f"{action.text().strip('&').lower()}Button")
        button.setMinimumWidth(90)
        buttons.addWidget(button)
        window.addAction(action)
    top = QHBoxLayout()
    top.addWidget(window.question, 1)
    top.addLayout(buttons)
    central = QWidget()
    layout = QVBoxLayout(central)
    layout.setContentsMargins(6, 6, 6, 0)
    layout.addLayout(top)
    window.panels.tree.setMinimumSize(300, 220)  # at the window's smallest the legend still leaves boxes to see
    layout.addWidget(window.panels.tree, 1)
    window.setCentralWidget(central)
    return layout


def add_dock(window: QMainWindow, title: str, name: str, widget: QWidget, area: Qt.DockWidgetArea) -> QDockWidget:
    dock = QDockWidget(title, window)
    dock.setObjectName(name)  # saveState needs stable names
    dock.setWidget(widget)
    window.addDockWidget(area, dock)
    return dock


def build_docks(window: QMainWindow) -> dict[str, QDockWidget]:
    """Settings, Sessions and Models tabbed on the left, Node details and Transcript on the right, the charts
    below: the docks of `window` (a MainWindow), by name."""
    left, right, bottom = (Qt.DockWidgetArea.LeftDockWidgetArea, Qt.DockWidgetArea.RightDockWidgetArea,
                           Qt.DockWidgetArea.BottomDockWidgetArea)
    docks = {"settings": add_dock(window, "Settings", "settingsDock", scrolled(window.controls, 330), left)}
    if window.sessions is not None:
        docks["sessions"] = add_dock(window, "Sessions", "sessionsDock", window.sessions, left)
        window.tabifyDockWidget(docks["settings"], docks["sessions"])
    docks["models"] = add_dock(window, "Models", "modelsDock", scrolled(window.models, 330), left)
    window.tabifyDockWidget(docks["settings"], docks["models"])
    docks["settings"].raise_()
    docks["details"] = add_dock(window, "Node details", "detailsDock", scrolled(window.panels.details, 200), right)
    docks["transcript"] = add_dock(window, "Transcript", "transcriptDock",
                                   with_follow_up(window.panels.transcript, window.talk.box), right)
    docks["charts"] = add_dock(window, "Memory and PCIe", "chartsDock", window.panels.charts, bottom)
    window.resizeDocks([docks["settings"], docks["details"]], [440, 320], Qt.Orientation.Horizontal)
    window.resizeDocks([docks["details"], docks["transcript"]], [3, 2], Qt.Orientation.Vertical)
    for dock in docks.values():
        hide_when_covered(dock)
    return docks
