"""The window reads at a glance: whole-step ticks, units in every tick, budget in the key, labels at a fitted
zoom, placement in words, the legend off the nodes, no stale status."""

from __future__ import annotations

from app.gui.chart_axes import BytesAxis, StepAxis
from app.gui.charts import ChartsPanel
from app.gui.status_line import StatusLine
from app.gui.tree_view import READABLE_SCALE, ReasoningTreeView
from benchmarks.fake_search import fake_run
from engine import events as ev


def test_step_ticks_are_whole_and_bytes_carry_their_unit(qtbot):
    ticks = StepAxis("bottom").tickValues(0.5, 4.5, 400)
    assert ticks == [(1.0, [1.0, 2.0, 3.0, 4.0])]
    assert StepAxis("bottom").tickValues(0.1, 0.9, 400) == [(1.0, [])]
    assert BytesAxis().tickStrings([0, 500_000, 32_000_000], 1, 1) == ["0 B", "500 kB", "32 MB"]


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
