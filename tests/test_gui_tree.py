"""The reasoning tree: SearchTree folding of engine events, and ReasoningTreeView drawing them."""

from __future__ import annotations

import dataclasses
import sys

import pytest

pytest.importorskip("pytestqt")

import itertools

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QImage, QPainter, QPen
from PySide6.QtWidgets import QAbstractSlider

from app.gui import palette as pal
from app.gui.tree_items import RING, edge_pen
from app.gui.tree_view import COL_W, NODE_H, NODE_W, ReasoningTreeView
from app.session import ROOT_ID, Change, SearchTree, SessionModel
from benchmarks.fake_search import fake_run
from engine import events as ev
from engine.config import SearchConfig

SEARCH = SearchConfig(beams=2, width=3, max_steps=4)


def events(search: SearchConfig = SEARCH, **kwargs) -> list[object]:
    return list(fake_run("How fast is the train?", search, **kwargs))


@pytest.fixture
def view(qtbot) -> ReasoningTreeView:
    widget = ReasoningTreeView()
    qtbot.addWidget(widget)
    widget.resize(900, 600)
    widget.show()
    return widget


def feed(view: ReasoningTreeView, stream: list[object]) -> None:
    for event in stream:
        view.apply(event)


# -- SearchTree (plain Python) -----------------------------------------------------------


def test_tree_has_one_node_per_candidate_plus_the_prompt():
    stream = events()
    tree = SearchTree()
    for event in stream:
        tree.apply(event)
    generated = {e.id for e in stream if isinstance(e, ev.CandidateText)}
    assert len(generated) == 2 * 3 + 3 * (2 * 3)  # first step: N*M from the prompt, then N*M per step
    assert set(tree.nodes) == generated | {ROOT_ID}
    assert tree.node(ROOT_ID).text == "How fast is the train?"


def test_states_match_step_selected_and_path_is_final():
    stream = events()
    tree = SearchTree()
    for event in stream:
        tree.apply(event)
    finished = stream[-1]
    assert isinstance(finished, ev.RunFinished)
    for sel in (e for e in stream if isinstance(e, ev.StepSelected)):
        for cid in sel.pruned:
            assert tree.node(cid).state == "pruned"
        for cid in sel.kept:
            assert tree.node(cid).state == ("final" if cid in finished.path else "kept")
    assert tree.chosen_path == finished.path
    assert tree.node(ROOT_ID).state == "final"
    assert tree.outcome == "finished" and tree.answer == finished.answer
    assert not [n for n in tree.nodes.values() if n.state == "running"]


def test_scores_memory_and_path_along_the_chosen_path():
    stream = events()
    tree = SearchTree()
    for event in stream:
        tree.apply(event)
    scored = {e.id: e for e in stream if isinstance(e, ev.CandidateScored)}
    last = tree.chosen_path[-1]
    assert tree.path_to(last) == list(tree.chosen_path)
    steps = tree.path_steps(last)
    assert [p.step for p in steps] == [1, 2, 3, 4]
    assert [p.score for p in steps] == [scored[c].score for c in tree.chosen_path]
    node = tree.node(last)
    snapshot = [e for e in stream if isinstance(e, ev.MemorySnapshot)][-1]
    mem = next(m for m in snapshot.candidates if m.id == last)
    assert (node.device_bytes, node.host_bytes, node.h2d_bytes, node.d2h_bytes) == (
        mem.device_bytes, mem.host_bytes, mem.h2d_bytes, mem.d2h_bytes)
    assert node.device_share == pytest.approx(1 / 3)
    assert tree.emulated and tree.budget_bytes == snapshot.budget_bytes


def test_cancelled_stream_leaves_a_consistent_tree():
    calls = iter(range(100))
    stream = events(should_stop=lambda: next(calls) >= 2)  # stops before step 3
    assert isinstance(stream[-1], ev.RunCancelled)
    tree = SearchTree()
    for event in stream:
        tree.apply(event)
    assert tree.outcome == "cancelled"
    assert {n.step for n in tree.candidates()} == {1, 2}
    for node in tree.candidates():
        assert node.parent in tree.nodes
        assert node.id in tree.node(node.parent).children
        assert node.state in ("kept", "pruned")


def test_cancel_in_the_middle_of_a_step_prunes_the_unselected_candidates():
    stream = events()
    cut = next(i for i, e in enumerate(stream) if isinstance(e, ev.CandidateScored) and e.step == 2)
    tree = SearchTree()
    for event in [*stream[:cut], ev.RunCancelled(step=1)]:
        tree.apply(event)
    step2 = [n for n in tree.candidates() if n.step == 2]
    assert step2 and all(n.state == "pruned" for n in step2)
    assert not [n for n in tree.nodes.values() if n.state == "running"]


def test_unknown_parent_hangs_under_the_root_and_unknown_events_are_ignored():
    tree = SearchTree()
    changed = tree.apply(ev.CandidateText(3, 42, 999, "orphan", 4, False, 0))
    assert 42 in changed and tree.node(42).parent == ROOT_ID
    assert tree.apply(ev.PrefillDone(prompt_tokens=3, seconds=0.1)) == set()
    assert tree.apply(object()) == set()
    with pytest.raises(KeyError, match="no node 7"):
        tree.node(7)


def test_layout_is_tidy_and_earlier_columns_never_move():
    stream = events(SearchConfig(beams=3, width=3, max_steps=5))
    tree = SearchTree()
    seen: dict[int, float] = {}
    for event in stream:
        tree.apply(event)
        if isinstance(event, ev.StepStarted):  # the previous column is complete: it must stay put
            for node_id, y in seen.items():
                assert tree.node(node_id).y == y
            seen = {n.id: n.y for n in tree.nodes.values()}
    for ids in tree.columns.values():
        ys = [tree.node(i).y for i in ids]
        assert all(b - a >= 1 for a, b in itertools.pairwise(ys))  # no overlap, parent order
        parents = [tree.node(i).parent for i in ids]
        parent_ys = [tree.node(p).y for p in parents if p is not None]
        assert parent_ys == sorted(parent_ys)  # blocks follow their parents: edges never cross


def test_session_subscribers_hear_changes_and_resets():
    session = SessionModel()
    heard: list[Change] = []
    session.subscribe(heard.append)
    session.apply(ev.CandidateText(1, 5, None, "x", 1, False, 0))
    session.reset()
    assert [(c.event_type, c.nodes) for c in heard] == [("candidate_text", {5}), ("reset", {ROOT_ID})]
    assert heard[1].restarted and not heard[0].restarted
    assert len(session.tree) == 1


# -- ReasoningTreeView ------------------------------------------------------------------


def test_view_draws_every_candidate_and_marks_the_chosen_path(view):
    stream = events()
    feed(view, stream)
    finished = stream[-1]
    generated = {e.id for e in stream if isinstance(e, ev.CandidateText)}
    assert set(view.data.nodes) == generated | {ROOT_ID}
    for cid in generated:
        item = view.item(cid)
        assert item.pos().x() == view.data.node(cid).step * COL_W
        expected = "final" if cid in finished.path else view.data.node(cid).state
        assert item.style() == pal.STATE_STYLES[expected]
    assert view.item(ROOT_ID).style() == pal.STATE_STYLES["final"]
    assert view.edge_state(finished.path[-1]) == "final"
    assert edge_pen(view.edge_state(finished.path[-1])).color() == QColor(pal.EDGE_FINAL)
    assert all(view.edge_state(cid) == view.data.node(cid).state for cid in generated)


def test_a_second_run_replaces_the_first(view):
    feed(view, events())
    second = events(SearchConfig(beams=1, width=2, max_steps=2))
    feed(view, second)
    generated = {e.id for e in second if isinstance(e, ev.CandidateText)}
    assert len(view.data) == len(generated) + 1
    steps = {e.step for e in second if isinstance(e, ev.CandidateText)}
    # nodes, one edge layer per column, and the hover highlight
    assert len(view.scene().items()) == len(generated) + 1 + len(steps) + 1


def test_click_on_a_node_emits_node_selected(view, qtbot):
    feed(view, events())
    target = view.data.chosen_path[1]
    view.centerOn(view.node_center(target))
    pos = view.mapFromScene(view.node_center(target))
    with qtbot.waitSignal(view.node_selected) as blocker:
        qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=pos)
    assert blocker.args == [target]
    assert view.selected_id == target and view.item(target).selected


def test_the_selected_box_shows_the_keyboard_focus_with_a_whole_ring(view, qtbot):
    """The tree looked the same with and without the keyboard focus; and the selection's ring lay outside the
    box's cached bounds, so only a pixel of its outer side showed, with square corners."""
    feed(view, events(SearchConfig(beams=2, width=2, max_steps=3)))
    best = view.data.best_id
    view.select_node(best)
    unfocused = view.grab().toImage()
    view.activateWindow()
    view.setFocus()
    qtbot.waitUntil(view.hasFocus)
    assert view.grab().toImage() != unfocused and view.item(best).focused
    ring = QRectF(0, 0, NODE_W, NODE_H).adjusted(-RING, -RING, RING, RING)
    assert view.item(best).boundingRect().contains(ring.adjusted(-1.3, -1.3, 1.3, 1.3))  # half the focus pen
    view.clearFocus()
    assert not view.item(best).focused


def test_home_and_end_scroll_to_the_prompt_and_the_best_box(view, qtbot):
    """Help > Keyboard shortcuts said Home and End scroll the tree; QGraphicsView ignores both."""
    view.resize(500, 300)
    feed(view, events(SearchConfig(beams=3, width=3, max_steps=6)))

    def shown(node_id: int) -> bool:
        return view.mapToScene(view.viewport().rect()).boundingRect().contains(view.node_center(node_id))

    best = view.data.best_id
    assert shown(best) and not shown(ROOT_ID)  # the view follows the run's end
    view.setFocus()
    qtbot.keyClick(view, Qt.Key.Key_Home)
    assert shown(ROOT_ID) and not view.follow
    qtbot.keyClick(view, Qt.Key.Key_End)
    assert shown(best) and view.selected_id is None  # it scrolls; the selection stays


def test_arrow_keys_walk_the_boxes_and_select_them(view, qtbot):
    feed(view, events(SearchConfig(beams=2, width=2, max_steps=3)))
    tree = view.data
    view.setFocus()
    chosen = []
    view.node_selected.connect(chosen.append)
    qtbot.keyClick(view, Qt.Key.Key_Up)  # the first press picks the best node
    assert view.selected_id == tree.best_id and chosen == [tree.best_id] and not view.follow
    qtbot.keyClick(view, Qt.Key.Key_Left)
    parent = tree.node(tree.best_id).parent
    assert view.selected_id == parent
    qtbot.keyClick(view, Qt.Key.Key_Right)
    assert view.selected_id == tree.node(parent).children[0]
    column = tree.columns[tree.node(parent).step]
    view.select_node(column[0])
    qtbot.keyClick(view, Qt.Key.Key_Down)
    assert view.selected_id == column[1]
    qtbot.keyClick(view, Qt.Key.Key_Up)
    qtbot.keyClick(view, Qt.Key.Key_Up)  # nothing above the top box: it stays
    assert view.selected_id == column[0]
    for _ in range(4):  # up to the prompt, which has no parent
        qtbot.keyClick(view, Qt.Key.Key_Left)
    assert view.selected_id == ROOT_ID
    visible = view.mapToScene(view.viewport().rect()).boundingRect()
    assert visible.contains(view.node_center(ROOT_ID))


def test_an_arrow_key_on_a_box_collapse_hid_starts_again_at_the_best_node(view, qtbot):
    """A pruned box selected, then hidden by Collapse pruned: Up or Down looked for it among the shown boxes
    of its step and raised."""
    feed(view, events(SearchConfig(beams=2, width=2, max_steps=3)))
    tree = view.data
    pruned = next(n.id for n in tree.candidates() if n.state == "pruned")
    view.select_node(pruned)
    view.set_collapse_pruned(True)
    assert not view.is_shown(pruned)
    view.setFocus()
    qtbot.keyClick(view, Qt.Key.Key_Down)
    assert view.selected_id == tree.best_id


def test_follow_stops_when_the_user_scrolls_and_fit_resumes_it(view, qtbot):
    feed(view, events(SearchConfig(beams=4, width=4, max_steps=6)))
    assert view.follow
    view.verticalScrollBar().triggerAction(QAbstractSlider.SliderAction.SliderPageStepAdd)
    assert not view.follow and not view.follow_button.isChecked()
    before = view.transform().m11()
    view.setFocus()
    qtbot.keyClick(view, Qt.Key.Key_Equal, Qt.KeyboardModifier.ControlModifier)
    assert view.transform().m11() == pytest.approx(before * 1.25)
    qtbot.keyClick(view, Qt.Key.Key_Minus, Qt.KeyboardModifier.ControlModifier)
    assert view.transform().m11() == pytest.approx(before)
    qtbot.keyClick(view, Qt.Key.Key_0, Qt.KeyboardModifier.ControlModifier)
    assert view.follow and view.transform().m11() < before
    visible = view.mapToScene(view.viewport().rect()).boundingRect()
    assert visible.contains(view.scene().sceneRect().center())


def test_view_follows_the_newest_step(view):
    feed(view, events(SearchConfig(beams=3, width=3, max_steps=6)))
    visible = view.mapToScene(view.viewport().rect()).boundingRect()
    assert visible.contains(view.node_center(view.data.chosen_path[-1]))


def test_legend_says_emulated_gpu(view):
    assert "emulated GPU" not in view.legend.plain_text()
    view.apply(events()[0])
    assert "emulated GPU" in view.legend.plain_text()
    for state in ("running", "kept", "pruned", "chosen path"):
        assert state in view.legend.plain_text()


def test_markup_in_model_text_is_shown_literally(view):
    markup = "<b>bold</b> & <i>x</i>"
    stream = [dataclasses.replace(e, text=markup) if isinstance(e, ev.CandidateText | ev.CandidateScored) else e
              for e in events()]
    feed(view, stream)
    node_id = view.data.chosen_path[0]
    assert view.item(node_id).labels().line.startswith("<b>bold</b>")
    assert "&lt;b&gt;bold&lt;/b&gt; &amp; &lt;i&gt;" in view.tooltip_for(node_id)


def colours_in(image: QImage) -> set[str]:
    return {QColor(image.pixel(x, y)).name() for x in range(0, image.width(), 2) for y in range(0, image.height(), 2)}


def test_view_renders_to_an_image_after_every_event(view):
    chosen = {pal.STATE_STYLES["final"].border, pal.STATE_STYLES["final"].fill}
    seen, stream = [], events()
    for event in stream:
        view.apply(event)
        image = QImage(400, 300, QImage.Format.Format_RGB32)
        image.fill(QColor("#000000"))
        painter = QPainter(image)
        view.scene().render(painter)
        painter.end()
        seen.append(colours_in(image))
    assert pal.ROOT_STYLE.fill in seen[0] and not chosen & seen[0]  # the prompt alone
    generated = next(i for i, e in enumerate(stream) if isinstance(e, ev.CandidateText))
    assert pal.STATE_STYLES["running"].fill in seen[generated]  # a candidate drawn as it arrives
    assert chosen & seen[-1]  # the chosen path, once the run has finished


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="None is immortal from Python 3.12 on")
def test_qt_void_calls_do_not_drain_the_refcount_of_none():
    # PySide6 6.12.0 on Python 3.11 drops one reference to None per call of a void method
    # (QPainter.setPen, ...); painting a tree then aborts the interpreter. Needs PySide6 != 6.12.0.
    # The count is global: another thread of the suite that drops references while this loop runs moved it by
    # over 100 once (a fresh clone's CI run), so other threads wait (a long switch interval) and the loop is long
    # enough that a build that leaks (one per call) falls far below any such noise.
    image = QImage(10, 10, QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(5.0)
    try:
        before = sys.getrefcount(None)
        for _ in range(3000):
            painter.setPen(QPen(QColor("#123456")))
        after = sys.getrefcount(None)
    finally:
        sys.setswitchinterval(interval)
        painter.end()
    assert after > before - 1000, "this PySide6 build leaks None references: install PySide6-Essentials!=6.12.0"


def test_select_unknown_node_names_it(view):
    with pytest.raises(KeyError, match="no node 12345"):
        view.select_node(12345)
    assert view.node_center(ROOT_ID) == view.item(ROOT_ID).pos() + QPointF(NODE_W / 2, NODE_H / 2)


def test_layout_stays_tidy_when_candidates_arrive_out_of_parent_order():
    stream = events(SearchConfig(beams=3, width=2, max_steps=3))
    shuffled: list[object] = []
    for event in stream:  # emit each step's candidate texts last parent first
        if isinstance(event, ev.CandidateText) and shuffled and isinstance(shuffled[-1], ev.CandidateText):
            run_start = len(shuffled)
            while run_start and isinstance(shuffled[run_start - 1], ev.CandidateText):
                run_start -= 1
            shuffled.insert(run_start, event)
        else:
            shuffled.append(event)
    tree = SearchTree()
    for event in shuffled:
        tree.apply(event)
    assert len(tree) == len(SearchTree().nodes) + 6 * 3
    for ids in tree.columns.values():
        ys = [tree.node(i).y for i in ids]
        assert ys == sorted(ys) and len(set(ys)) == len(ys)
        parent_ys = [tree.node(tree.node(i).parent).y for i in ids if i != ROOT_ID]
        assert parent_ys == sorted(parent_ys)


def test_an_edge_cut_to_the_exposed_band_is_exactly_that_part_of_the_curve():
    from app.gui.tree_items import visible_part

    def on_curve(curve, t):
        (ax, ay), (bx, by), (cx, cy), (dx, dy) = curve
        u = 1 - t
        return (u**3 * ax + 3 * u * u * t * bx + 3 * u * t * t * cx + t**3 * dx,
                u**3 * ay + 3 * u * u * t * by + 3 * u * t * t * cy + t**3 * dy)

    whole = visible_part(0.0, 0.0, 64.0, 3000.0, -10.0, 4000.0)
    assert whole == ((0.0, 0.0), (32.0, 0.0), (32.0, 3000.0), (64.0, 3000.0))  # fully visible: untouched
    part = visible_part(0.0, 0.0, 64.0, 3000.0, 1000.0, 1400.0)
    assert part[0][1] == pytest.approx(1000.0) and part[3][1] == pytest.approx(1400.0)
    for u in (0.0, 0.3, 0.7, 1.0):
        x, y = on_curve(part, u)
        t = next(t / 10000 for t in range(10001) if on_curve(whole, t / 10000)[1] >= y)
        assert x == pytest.approx(on_curve(whole, t)[0], abs=0.05)
    upward = visible_part(0.0, 3000.0, 64.0, 0.0, 1000.0, 1400.0)  # child above its parent
    assert {round(upward[0][1]), round(upward[3][1])} == {1000, 1400}


def placement(view: ReasoningTreeView) -> dict[int, tuple[bool, tuple[float, float]]]:
    """Each node: shown or not, and where its box is."""
    return {i: (view.is_shown(i), view.item(i).xy) for i in view.data.nodes}


def fresh_layout(view: ReasoningTreeView) -> dict[int, tuple[bool, tuple[float, float]]]:
    """The placement Collapse pruned gives when switched on now, over the tree as it is."""
    view.set_collapse_pruned(False)
    view.set_collapse_pruned(True)
    return placement(view)


def test_collapsed_a_live_run_is_laid_out_once_a_step_not_once_an_event(view):
    """Collapsed, every event laid the whole tree out again, O(nodes) each: a 1,921-node run took 32 s of the
    window instead of 4. A step's end lays it out at once; the events within a step wait for a timer (which
    never fires here: no event loop runs). The boxes end where a fresh layout puts them."""
    view.set_collapse_pruned(True)
    stream = events(SearchConfig(beams=3, width=3, max_steps=5))
    layouts: list[int] = []
    relayout = view._relayout
    view._relayout = lambda: (layouts.append(len(view.data.nodes)), relayout())
    feed(view, stream)
    ends = [e for e in stream if isinstance(e, ev.RunStarted | ev.StepSelected | ev.RunFinished)]
    assert len(layouts) == len(ends) and len(stream) > 10 * len(layouts)
    del view._relayout
    assert placement(view) == fresh_layout(view)


def test_collapsed_a_steps_new_candidates_show_soon_in_their_compact_rows(view, qtbot):
    view.set_collapse_pruned(True)
    stream = events(SearchConfig(beams=3, width=3, max_steps=4))
    last_text = max(i for i, e in enumerate(stream) if isinstance(e, ev.CandidateText) and e.step == 3)
    first_text = min(i for i, e in enumerate(stream) if isinstance(e, ev.CandidateText) and e.step == 3)
    view.resize(260, 160)  # smaller than the tree, so following moves the view
    feed(view, stream[:first_text])
    qtbot.wait(300)  # step 2 laid out and followed
    centre = view.mapToScene(view.viewport().rect().center())
    feed(view, stream[first_text: last_text + 1])
    new = [e.id for e in stream[: last_text + 1] if isinstance(e, ev.CandidateText) and e.step == 3]
    assert not any(view.is_shown(i) for i in new)  # until the timer lays them out, not at a live row
    assert all(view.edge_state(i) == "hidden" for i in new)
    assert view.mapToScene(view.viewport().rect().center()) == centre  # not to a hidden one's live row
    qtbot.waitUntil(lambda: all(view.is_shown(i) for i in new), timeout=2000)
    assert placement(view) == fresh_layout(view)
    followed = view.node_center(new[len(new) // 2])
    assert view.mapToScene(view.viewport().rect().center()) != centre or followed == centre  # the layout follows
