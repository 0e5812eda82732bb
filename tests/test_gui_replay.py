"""Replaying a recorded run in one batch shows exactly what applying it event by event shows."""

from __future__ import annotations

from app.gui.charts import ChartsPanel
from app.gui.transcript import TranscriptPanel
from app.session import SearchTree, SessionModel
from benchmarks.fake_search import fake_run
from engine.config import SearchConfig

STREAM = list(fake_run("replay?", SearchConfig(beams=5, width=3, max_steps=4, seed=4)))


def snapshot(tree: SearchTree):
    return (
        {i: (n.parent, n.step, n.y, n.state, n.score, n.group, n.text) for i, n in tree.nodes.items()},
        {step: list(ids) for step, ids in tree.columns.items()},
        tree.chosen_path,
        tree.best_id,
    )


def test_tree_data_batch_equals_event_by_event():
    live, batch = SearchTree(), SessionModel()
    for event in STREAM:
        live.apply(event)
    heard = []
    batch.subscribe(heard.append)
    change = batch.apply_many(STREAM)
    assert snapshot(batch.tree) == snapshot(live)
    assert heard == [change] and change.nodes >= set(live.nodes) - {min(live.nodes)}


def test_transcript_and_charts_batch_equal_event_by_event(qtbot):
    live_text, batch_text = TranscriptPanel(), TranscriptPanel()
    live_charts, batch_charts = ChartsPanel(), ChartsPanel()
    for widget in (live_text, batch_text, live_charts, batch_charts):
        qtbot.addWidget(widget)
    for event in STREAM:
        live_text.apply(event)
        live_charts.apply(event)
    batch_text.apply_many(STREAM)
    batch_charts.apply_many(STREAM)
    assert batch_text.plain_text() == live_text.plain_text() and "The answer is" in batch_text.plain_text()
    assert vars(batch_charts.session.series) == vars(live_charts.session.series)


def test_fit_to_view_shows_the_whole_tree(qtbot):
    from app.gui.tree_view import ReasoningTreeView

    view = ReasoningTreeView()
    qtbot.addWidget(view)
    view.resize(600, 400)
    view.show()
    view.apply_many(STREAM)
    view.zoom_by(3.0)  # close in on the newest step: most of the tree is out of view
    view.set_follow(False)

    def visible() -> list[int]:
        shown = view.mapToScene(view.viewport().rect()).boundingRect()
        return [i for i in view.data.nodes if shown.contains(view.item(i).sceneBoundingRect())]

    assert len(visible()) < len(view.data.nodes)
    view.fit_to_view()
    assert visible() == list(view.data.nodes)
    assert view.transform().m11() <= 1.0 and view.follow


def test_tree_view_batch_draws_what_event_by_event_draws(qtbot):
    from app.gui.tree_view import ROOT_ID, ReasoningTreeView

    live, batch = ReasoningTreeView(), ReasoningTreeView()
    for view in (live, batch):
        qtbot.addWidget(view)
    for event in STREAM:
        live.apply(event)
    batch.apply_many(STREAM)

    def drawn(view: ReasoningTreeView) -> dict:
        return {
            node_id: (view.item(node_id).xy, view.item(node_id).style(), view.item(node_id).labels(),
                      None if node_id == ROOT_ID else view.edge_state(node_id))
            for node_id in view.data.nodes
        }

    assert drawn(batch) == drawn(live)
    assert batch.scene().sceneRect() == live.scene().sceneRect()
    assert len(batch.scene().items()) == len(live.scene().items())
