"""The window reads at a glance: whole-step ticks, units in every tick, budget in the key, labels at a fitted
zoom, placement in words, the legend off the nodes, no stale status, pruned branches collapse, hovering a node
lights its path."""

from __future__ import annotations

import html

from PySide6.QtCore import QPoint

from app.gui.chart_axes import BytesAxis, StepAxis
from app.gui.charts import ChartsPanel
from app.gui.status_line import StatusLine
from app.gui.tree_view import READABLE_SCALE, ROW_H, ReasoningTreeView
from app.session import ROOT_ID
from benchmarks.fake_search import fake_run
from engine import events as ev
from engine.config import SearchConfig


def test_step_ticks_are_whole_and_bytes_carry_their_unit(qtbot):
    ticks = StepAxis("bottom").tickValues(0.5, 4.5, 400)
    assert ticks == [(1.0, [1.0, 2.0, 3.0, 4.0])]
    assert StepAxis("bottom").tickValues(0.1, 0.9, 400) == [(1.0, [])]
    assert BytesAxis().tickStrings([0, 500_000, 32_000_000], 1, 1) == ["0 B", "500 kB", "32 MB"]
    assert BytesAxis().tickValues(0.0, 1.0, 150) == [(1.0, [0.0])]  # no traffic: one '0 B', no fractions of a byte


def test_charts_start_at_zero_and_name_the_budget_in_the_key(qtbot):
    charts = ChartsPanel()
    qtbot.addWidget(charts)
    for event in fake_run("How fast?"):
        charts.apply(event)
    charts.flush()
    low, high = charts.plots["traffic"].viewRange()[1]
    assert low == 0 and high > 0
    x_low, x_high = charts.plots["traffic"].viewRange()[0]
    assert x_low == 0.5 and x_high == max(charts.session.series.transfer_steps) + 0.5
    assert "budget 1.0 MB" in charts.title("device")


def test_a_fitted_tree_still_shows_scores_and_the_legend_sits_below(qtbot):
    view = ReasoningTreeView()
    qtbot.addWidget(view)
    view.resize(700, 450)
    view.show()
    view.apply_many(list(fake_run("How fast?")))
    view.show_readable()
    assert view.transform().m11() >= READABLE_SCALE - 1e-9 or view.transform().m11() <= 1.0
    assert view.legend.geometry().top() >= view.viewport().geometry().bottom()
    node = next(i for i in view.data.nodes if view.data.nodes[i].device_share is not None)
    assert "GPU" in view.item(node).labels().traffic


def test_opening_a_failed_session_clears_the_last_speed(qtbot):
    from PySide6.QtWidgets import QMainWindow

    window = QMainWindow()
    qtbot.addWidget(window)
    status = StatusLine(window)
    status.speed.setText("270.5 cand-tok/s")
    status.reset()
    status.apply(ev.RunFailed(error="X", message="it broke"), live=False)
    assert status.speed.text() == "- cand-tok/s"


def test_session_titles_have_room(qtbot, tmp_path):
    from app.gui.sessions_panel import SessionsPanel
    from app.store import SessionStore

    panel = SessionsPanel(SessionStore(tmp_path / "s.db"))
    qtbot.addWidget(panel)
    panel.resize(330, 400)
    panel.show()
    assert panel.view.columnWidth(0) >= 200
    assert all(panel.view.columnWidth(c) >= 64 for c in range(5))


def finished_view(qtbot) -> ReasoningTreeView:
    view = ReasoningTreeView()
    qtbot.addWidget(view)
    view.resize(900, 600)
    view.show()
    view.apply_many(list(fake_run("How fast?", SearchConfig(beams=2, width=3, max_steps=4))))
    return view


def test_collapse_pruned_hides_dead_branches_and_closes_the_gaps(qtbot):
    view = finished_view(qtbot)
    tree = view.data
    dead = tree.dead_ids()
    pruned = {n.id for n in tree.candidates() if n.state == "pruned"}
    assert pruned <= dead and not dead & set(tree.chosen_path)
    height_before = view.scene().sceneRect().height()
    view.collapse_button.click()
    assert all(not view.is_shown(i) for i in dead) and all(view.is_shown(i) for i in tree.chosen_path)
    assert view.scene().sceneRect().height() < height_before  # rows closed up, not left empty
    shown_ys = [view.item(i).xy[1] for i in tree.nodes if i not in dead]
    for node_id in tree.nodes:  # every shown parent sits between its shown children
        kids = [view.item(c).xy[1] for c in tree.nodes[node_id].children if c not in dead]
        if kids:
            assert min(kids) <= view.item(node_id).xy[1] <= max(kids)
    assert len(set(zip(shown_ys, [tree.nodes[i].step for i in tree.nodes if i not in dead], strict=True))) == len(
        shown_ys)  # no two shown boxes share a place
    view.collapse_button.click()
    assert all(view.is_shown(i) for i in tree.nodes)
    assert all(view.item(i).xy[1] == tree.nodes[i].y * ROW_H for i in tree.nodes)


def test_hovering_a_node_highlights_its_path_from_the_prompt(qtbot):
    view = finished_view(qtbot)
    view.fit_to_view()
    target = view.data.chosen_path[-1]
    where = view.mapFromScene(view.node_center(target))
    qtbot.mouseMove(view.viewport(), where)
    assert view.hovered_path == [ROOT_ID, *view.data.chosen_path]
    assert all(view.item(i).on_path for i in view.hovered_path)
    assert not view._hover_line.path().isEmpty()
    qtbot.mouseMove(view.viewport(), view.mapFromScene(view.scene().sceneRect().topLeft()) + QPoint(2, 2))
    assert view.hovered_path == [] and not any(view.item(i).on_path for i in view.data.nodes)


def plain_window(qtbot, tmp_path):
    from PySide6.QtCore import QSettings

    from app.gui.bridge import SearchBridge
    from app.gui.main_window import MainWindow

    window = MainWindow(SearchBridge(), settings=QSettings(str(tmp_path / "w.ini"), QSettings.Format.IniFormat),
                        dialogs=False)
    qtbot.addWidget(window)
    return window


def test_every_menu_action_has_a_shortcut_and_help_lists_them(qtbot, tmp_path):
    window = plain_window(qtbot, tmp_path)
    rows = window.shortcuts()
    menu_rows = [(keys, what) for keys, what in rows if " > " in what and not what.startswith(("Tree", "Models"))]
    assert len(menu_rows) >= 12 and all(keys for keys, _ in menu_rows), [w for k, w in menu_rows if not k]
    assert ("Ctrl+Shift+C", "View > Collapse pruned branches") in rows
    assert any(what == "View > Models" for _, what in rows)
    window.show_shortcuts()
    text = window.shortcuts_box.text()
    assert all(html.escape(keys) in text for keys, _ in rows)
    window.close()


def test_dark_theme_repaints_the_tree_the_charts_and_the_widgets(qtbot, tmp_path):
    from PySide6.QtGui import QPalette
    from PySide6.QtWidgets import QApplication

    from app.gui import palette as pal

    window = plain_window(qtbot, tmp_path)
    window.panels.tree.apply_many(list(fake_run("How fast?")))
    try:
        window.apply_theme(True)
        assert window.panels.tree.backgroundBrush().color().name() == pal.DARK["BACKGROUND"]
        assert window.panels.tree.item(ROOT_ID)._ink.fill["root"].color().name() == pal.DARK["ROOT_STYLE"].fill
        assert window.panels.charts.canvas.backgroundBrush().color().name() == pal.DARK["BACKGROUND"]
        assert QApplication.instance().palette().color(QPalette.ColorRole.Window).lightness() < 128
    finally:
        window.apply_theme(False)
    assert window.panels.tree.backgroundBrush().color().name() == pal.LIGHT["BACKGROUND"]
    assert QApplication.instance().palette().color(QPalette.ColorRole.Window).lightness() >= 128
    window.close()
