"""The window by keyboard alone and for a screen reader: Tab order, shortcuts without conflicts, mnemonics,
names for every control, and a usable layout on a 1366x768 laptop screen."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QCoreApplication, QEvent, QPoint, QRect, QSettings, Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractItemView,
    QAbstractSlider,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QDialogButtonBox,
    QFormLayout,
    QGraphicsView,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPlainTextEdit,
    QScrollArea,
    QTextEdit,
    QWidget,
)

from app.gui.bridge import SearchBridge
from app.gui.main_window import MainWindow
from app.gui.server_panel import ServerDialog
from app.recorder import SessionRecorder
from benchmarks.fake_search import fake_run
from engine import events as ev
from engine.config import CacheConfig, ModelSpec, SearchConfig
from tests.test_gui_bridge import CountingLoader, gated, run_fake

INTERACTIVE = (QAbstractButton, QAbstractSlider, QAbstractSpinBox, QLineEdit, QComboBox, QPlainTextEdit, QTextEdit,
               QAbstractItemView, QGraphicsView)


@pytest.fixture
def window(keep_window, tmp_path: Path) -> MainWindow:
    """A window with a session store (so the Sessions tab is there too) and a question, so Run is enabled."""
    store_mod = pytest.importorskip("app.store")
    store = store_mod.SessionStore(tmp_path / "sessions.db")
    settings = QSettings(str(tmp_path / "beamwise.ini"), QSettings.Format.IniFormat)
    bridge = SearchBridge(loader=CountingLoader(), run=run_fake)
    window = keep_window(MainWindow(bridge, settings=settings, store=store, dialogs=False))
    window.question.setPlainText("How fast is the train?")
    return window


def tab_chain(window: MainWindow, start: QWidget, steps: int = 120) -> list[QWidget]:
    """The widgets Tab reaches from `start`, in order, until the chain comes round."""
    window.show()
    window.activateWindow()
    start.setFocus()
    QApplication.processEvents()
    chain: list[QWidget] = []
    while len(chain) < steps and QApplication.focusWidget() not in chain:
        chain.append(QApplication.focusWidget())
        window.focusNextChild()
        QApplication.processEvents()
    return chain


def test_tab_walks_question_run_tree_then_the_settings_in_reading_order_then_the_right_docks(window):
    window.panels.charts.build()  # as `beamwise gui` does after the first paint: the charts come last in their dock
    chain = tab_chain(window, window.question)
    controls, panels = window.controls, window.panels
    assert chain[:3] == [window.question, window.findChild(QAbstractButton, "runButton"), panels.tree]
    assert window.findChild(QAbstractButton, "stopButton") not in chain  # disabled until a run
    settings = [controls.model_picker, controls.verifier, controls.method, controls.beams.slider,
                controls.width.slider, controls.step_tokens.slider, controls.delimiter, controls.max_steps.slider,
                controls.temperature.slider, controls.top_p.slider, controls.seed, controls.aggregation,
                controls.lookahead, controls.select, controls.verify_skip, controls.entropy_exit,
                controls.kv_budget.slider, controls.policy, controls.pcie_gbps.slider, controls.prefix_disk.slider]
    places = [chain.index(widget) for widget in settings]
    assert places == sorted(places) and places[0] > chain.index(panels.tree)
    right = [panels.details.text, panels.details.path, panels.transcript.view, panels.charts.canvas]
    right_places = [chain.index(widget) for widget in right]
    assert right_places == sorted(right_places) and right_places[0] > places[-1]


def test_no_two_actions_share_a_shortcut_and_f1_lists_every_menu_action(window):
    """A window-wide key must be unique; a key bound on one widget (Delete in Models) must not be a window key
    too, or it is ambiguous while that widget has focus, and must be unique on that widget."""
    window_keys: dict[str, str] = {}
    widget_keys: dict[tuple[int, str], str] = {}
    for action in window.findChildren(QAction):
        for keys in action.shortcuts():
            text = keys.toString(QKeySequence.SequenceFormat.PortableText)
            if action.shortcutContext() == Qt.ShortcutContext.WidgetShortcut:
                place = (id(action.parent()), text)
                assert place not in widget_keys, f"{text} is both {widget_keys[place]!r} and {action.text()!r}"
                widget_keys[place] = action.text()
            else:
                assert text not in window_keys, f"{text} is both {window_keys[text]!r} and {action.text()!r}"
                window_keys[text] = action.text()
    assert not {text for _, text in widget_keys} & set(window_keys)
    listed = {what: keys for keys, what in window.shortcuts()}
    for menu in window.menuBar().actions():
        for action in menu.menu().actions():
            if not action.isSeparator():
                name = f"{menu.text().replace('&', '')} > {action.text().replace('&', '')}"
                assert listed.get(name), f"{name} has no shortcut in the F1 list"
    assert "F1" in listed["Help > Keyboard shortcuts"]


def test_every_menu_and_menu_action_has_its_own_mnemonic(window):
    def mnemonic(text: str) -> str:
        place = text.replace("&&", "").find("&")
        assert place >= 0, f"{text!r} has no mnemonic"
        return text.replace("&&", "")[place + 1].lower()

    menus = window.menuBar().actions()
    assert len({mnemonic(menu.text()) for menu in menus}) == len(menus)
    for menu in menus:
        actions = [a for a in menu.menu().actions() if not a.isSeparator()]
        letters = [mnemonic(a.text()) for a in actions]
        assert len(set(letters)) == len(letters), f"{menu.text()}: {letters}"


def labelled_by_form(window: QWidget) -> set[QWidget]:
    """Fields a QFormLayout labels with text, and the buddies of QLabels: a screen reader reads those labels."""
    named = {label.buddy() for label in window.findChildren(QLabel) if label.buddy() is not None}
    for form in window.findChildren(QFormLayout):
        for row in range(form.rowCount()):
            label = form.itemAt(row, QFormLayout.ItemRole.LabelRole)
            field = form.itemAt(row, QFormLayout.ItemRole.FieldRole)
            if label is not None and field is not None and label.widget().text() and field.widget() is not None:
                named.add(field.widget())
    return named


def test_every_control_a_user_reaches_has_a_name(window):
    window.show()
    named = labelled_by_form(window)
    unnamed = []
    for widget in window.findChildren(QWidget):
        if not isinstance(widget, INTERACTIVE) or widget.objectName().startswith("qt_"):
            continue  # Qt's own parts: a spin box's line edit, a table's corner button, a menu bar's extension
        if not widget.focusPolicy() & Qt.FocusPolicy.TabFocus or widget.window() is not window:
            continue  # scroll bars, headers, a combo box's list (a popup); the tabs behind Settings count
        text = widget.text() if isinstance(widget, QAbstractButton) else ""
        if not (widget.accessibleName() or widget in named or text):
            unnamed.append(f"{type(widget).__name__} in {type(widget.parent()).__name__}")
    assert unnamed == []


def test_the_dialogs_have_a_default_button_and_close_with_esc(window, qtbot):
    window.show_shortcuts()
    box = window.shortcuts_box
    assert box.defaultButton() is not None and box.escapeButton() is box.defaultButton()
    dialog = ServerDialog(None, window)
    qtbot.addWidget(dialog)
    dialog.show()
    ok = dialog.findChild(QDialogButtonBox).button(QDialogButtonBox.StandardButton.Ok)
    assert ok.isDefault()
    with qtbot.waitSignal(dialog.rejected, timeout=1000):
        qtbot.keyClick(dialog.endpoint, Qt.Key.Key_Escape)


def test_the_shortcuts_box_shown_again_and_again_is_one_box(window):
    """F1 made a new box each time, a child of the window kept for its life: a window open all day gathered one
    box (and its buttons and labels) per F1."""
    for _ in range(4):
        window.show_shortcuts()
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    assert window.findChildren(QMessageBox) == [window.shortcuts_box]


def test_help_about_names_the_versions_a_bug_report_needs(window, monkeypatch):
    from app.version import version_line

    shown = []
    monkeypatch.setattr(QMessageBox, "about", lambda parent, title, text: shown.append((parent, title, text)))
    about = next(a for a in window.findChildren(QAction) if a.shortcut() == QKeySequence("Shift+F1"))
    about.trigger()
    [(parent, title, text)] = shown
    assert parent is window and title == "About Beamwise" and text.endswith(f"<p>{version_line()}</p>")
    assert "beamwise not installed" not in text


def test_at_1366x768_the_window_fits_and_every_part_keeps_a_usable_size(window, qtbot):
    """A laptop screen less its task bar and title bar: the window's minimum must fit in it, and at that size the
    question, Run, the tree, the settings (scrolling) and each right and bottom dock stay usable."""
    window.show()
    assert window.minimumSizeHint().width() <= 1366 and window.minimumSizeHint().height() <= 700
    window.resize(1366, 700)
    qtbot.waitUntil(lambda: window.size().height() == 700)
    QApplication.processEvents()
    run = window.findChild(QAbstractButton, "runButton")
    minimum = {window.question: (250, 60), run: (60, 20), window.panels.tree: (450, 250),
               window.docks["settings"]: (330, 250), window.panels.details: (250, 100),
               window.panels.transcript: (250, 100), window.panels.charts: (1000, 150)}
    for widget, (width, height) in minimum.items():
        assert widget.isVisible() and widget.width() >= width and widget.height() >= height, (
            type(widget).__name__, widget.size())
    settings = window.docks["settings"].widget()
    assert settings.verticalScrollBar().maximum() > 0  # the settings scroll rather than squeeze


def on_screen(window: MainWindow, widget: QWidget) -> bool:
    """Whether the window shows some of `widget` (not off the screen, behind a tab or scrolled out of sight)."""
    shown = QRect(widget.mapTo(window, QPoint(0, 0)), widget.size())
    parent = widget.parentWidget()
    while parent is not None and parent is not window:
        shown &= QRect(parent.mapTo(window, QPoint(0, 0)), parent.size())
        parent = parent.parentWidget()
    shown &= window.rect()
    seen = window.childAt(shown.center()) if not shown.isEmpty() else None
    return seen is not None and (seen is widget or widget.isAncestorOf(seen))


def tab_walk(window: MainWindow, qtbot) -> tuple[list[QWidget], list[str], list[str]]:
    """Real Tab presses round the window from the question (so a scroll area brings each control it holds into
    view): the chain, the stops not on screen, and the stops Tab did not leave."""
    chain = tab_chain(window, window.question)
    unseen, traps = [], []
    for _ in chain:
        widget = QApplication.focusWidget()
        if not on_screen(window, widget):
            unseen.append(f"{type(widget).__name__} {widget.accessibleName()!r}")
        qtbot.keyClick(widget, Qt.Key.Key_Tab)
        if QApplication.focusWidget() is widget:  # a table moved between its cells: Tab never left it
            traps.append(f"{type(widget).__name__} {widget.accessibleName()!r}")
            window.focusNextChild()
    return chain, unseen, traps


def test_tab_reaches_only_controls_on_screen_leaves_each_and_skips_scroll_areas(window, qtbot):
    """Qt keeps the docks behind another's tab (Sessions and Models behind Settings) visible off the screen: Tab
    walked into them, the focus on controls nobody saw. A table kept Tab for its cells, a trap a keyboard alone
    could not leave. Nor is a dock's scroll area a stop of its own."""
    window.panels.charts.build()  # as `beamwise gui` does after the first paint: the charts' canvas is a stop too
    chain, unseen, traps = tab_walk(window, qtbot)
    assert unseen == [] and traps == [], (unseen, traps)
    assert not [w for w in chain if type(w) is QScrollArea] and window.panels.charts.canvas in chain
    assert window.sessions.search not in chain and window.models.table not in chain
    recorder = SessionRecorder(window.store)  # a row in each table (Models lists the bundled model)
    for event in fake_run("How fast is the train?", SearchConfig(beams=2, width=2, max_steps=2)):
        recorder.write(event)
    window.import_engine()  # as `beamwise gui` does after its first paint: the Models page lists once torch is in
    qtbot.waitUntil(lambda: window.models.table.model().rowCount() > 0, timeout=60_000)  # (the first test: not yet)
    for dock, table in (("sessions", window.sessions.view), ("models", window.models.table)):
        window.docks[dock].raise_()
        chain, unseen, traps = tab_walk(window, qtbot)
        assert table.model().rowCount() and table in chain and unseen == [] and traps == [], (dock, unseen, traps)


def test_ctrl_2_brings_the_covered_sessions_tab_forward_with_the_focus_in_it(window, qtbot):
    """Qt's own toggle closed a panel covered by another tab, so the keys could never show Sessions or Models."""
    window.show()
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)  # a window's keys work only in the active window
    window.question.setFocus()
    sessions = window.docks["sessions"]
    width = window.docks["settings"].width()
    qtbot.keyClick(window.question, Qt.Key.Key_2, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: on_screen(window, window.sessions.view))
    assert sessions.width() == width == 440  # the tabs keep the width they were given, hidden contents or not
    assert QApplication.focusWidget() is window.sessions.search
    assert not on_screen(window, window.controls)  # now behind Sessions
    assert window.sessions.view in tab_chain(window, window.question)
    window.sessions.search.setFocus()  # tab_chain walked the focus round to the question
    qtbot.keyClick(window.sessions.search, Qt.Key.Key_2, Qt.KeyboardModifier.ControlModifier)  # the focus in it: closes
    assert sessions.isHidden()
    qtbot.keyClick(window.question, Qt.Key.Key_2, Qt.KeyboardModifier.ControlModifier)  # closed: opens in front
    qtbot.waitUntil(lambda: on_screen(window, window.sessions.view))
    view_menu = next(m.menu() for m in window.menuBar().actions() if m.text() == "&View")
    assert next(a for a in view_menu.actions() if a.text() == "S&essions").isChecked()
    qtbot.keyClick(window.sessions.search, Qt.Key.Key_3, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: on_screen(window, window.models.table))
    assert window.models.isAncestorOf(QApplication.focusWidget())


def test_tab_into_the_tree_selects_the_best_box_and_shows_it(window, qtbot):
    """With no box selected, Tab into the tree showed no focus at all: it selects the best box, as a list gives
    its first row the focus, and Node details shows it; the arrow keys move on from there."""
    window.replay(fake_run("How fast is the train?", SearchConfig(beams=2, width=2, max_steps=3)))
    tree = window.panels.tree
    window.show()
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)
    window.question.setFocus()
    qtbot.keyClick(window.question, Qt.Key.Key_Tab)  # to Run
    qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_Tab)
    best = tree.data.best_id
    assert QApplication.focusWidget() is tree and tree.selected_id == best and tree.item(best).focused
    assert window.panels.details.node_id == best
    qtbot.keyClick(tree, Qt.Key.Key_Left)
    assert window.panels.details.node_id == tree.data.node(best).parent


def test_ctrl_enter_runs_and_esc_stops_with_the_focus_in_the_tree(keep_window, tmp_path: Path, qtbot):
    """The window's keys work wherever the focus is: here the tree, which takes the arrow keys itself."""
    gate = threading.Event()
    settings = QSettings(str(tmp_path / "beamwise.ini"), QSettings.Format.IniFormat)
    window = keep_window(MainWindow(SearchBridge(loader=CountingLoader(), run=gated(gate)), settings=settings,
                                    dialogs=False))
    window.controls.set_configs(ModelSpec(source="synthetic:fake"), SearchConfig(beams=2, width=2, max_steps=3),
                                CacheConfig())
    window.question.setPlainText("How fast is the train?")
    window.show()
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)
    tree = window.panels.tree
    tree.setFocus()

    def stop_at_step_1(event: object) -> None:
        if isinstance(event, ev.StepSelected) and event.step == 1:
            qtbot.keyClick(tree, Qt.Key.Key_Escape)
            gate.set()

    window.bridge.event_emitted.connect(stop_at_step_1)
    with qtbot.waitSignal(window.run_ended, timeout=5000) as ended:
        qtbot.keyClick(tree, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert isinstance(ended.args[0], ev.RunCancelled) and QApplication.focusWidget() is tree


def test_a_screen_reader_hears_the_selected_box_the_charts_figures_and_the_plan(window, qtbot):
    """A screen reader sees the tree and the charts as one widget each, never the boxes or lines drawn in them,
    and the plan's dot says its verdict in colour only: each says it in words."""
    window.replay(fake_run("How fast is the train?", SearchConfig(beams=2, width=2, max_steps=3)))
    tree = window.panels.tree
    tree.setFocus()
    qtbot.keyClick(tree, Qt.Key.Key_Up)  # the first press selects the best box
    best = tree.data.node(tree.data.best_id)
    assert tree.accessibleDescription().startswith(f"#{best.id}, step 3, final, score {best.score:.3f}.")
    assert best.first_line in tree.accessibleDescription()
    charts = window.panels.charts.canvas.accessibleDescription()
    assert charts.startswith("Emulated GPU. step 3: PCIe ") and " on the device of a " in charts
    with qtbot.waitSignal(window.plan_bar.planned, timeout=10_000):
        window.plan_bar.refresh_now()
    words = window.plan_bar.dot.toolTip()
    assert window.plan_bar.dot.accessibleName() == f"Memory plan: {words}" and words != "no plan"


def test_a_run_started_from_a_setting_keeps_the_focus_on_stop_then_gives_it_back(window, qtbot):
    """The settings are disabled while a run goes on: Ctrl+Enter in one of them left the window with no focus at
    all, during the run and after it, so the keyboard had nowhere to start from."""
    window.controls.set_configs(ModelSpec(source="synthetic:fake"), SearchConfig(beams=2, width=2, max_steps=3),
                                CacheConfig())
    window.show()
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)
    seed = window.controls.seed
    seed.setFocus()
    during = []
    window.bridge.event_emitted.connect(lambda event: during.append(QApplication.focusWidget()))
    with qtbot.waitSignal(window.run_ended, timeout=5000):
        qtbot.keyClick(seed, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert during and set(during) == {window.findChild(QAbstractButton, "stopButton")}
    assert QApplication.focusWidget() is seed
