"""Node details, live charts and transcript panels fed with the fake engine's event stream."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt

from app.gui.charts import TITLES, ChartsPanel
from app.gui.details import PLACEHOLDER, NodeDetails
from app.gui.transcript import TranscriptPanel
from app.gui.tree_view import ReasoningTreeView
from app.session import ROOT_ID
from benchmarks.fake_search import fake_run
from engine import events as ev
from engine.config import SearchConfig
from engine.errors import format_bytes

SEARCH = SearchConfig(beams=2, width=2, max_steps=4)
MARKUP = "<b>not bold</b> & done"


def events(**kwargs) -> list[object]:
    return list(fake_run("<i>How</i> fast is the train?", SEARCH, **kwargs))


def with_markup(stream: list[object]) -> list[object]:
    """The same stream with model text that looks like HTML."""
    return [
        dataclasses.replace(e, text=f"{MARKUP} {e.id}") if isinstance(e, ev.CandidateText | ev.CandidateScored)
        else dataclasses.replace(e, answer=MARKUP) if isinstance(e, ev.RunFinished) else e
        for e in stream
    ]


@pytest.fixture
def tree_and_details(qtbot):
    view = ReasoningTreeView()
    details = NodeDetails(view.session)
    view.node_selected.connect(details.show_node)
    for widget in (view, details):
        qtbot.addWidget(widget)
        widget.show()
    view.resize(900, 600)
    return view, details


# -- NodeDetails ------------------------------------------------------------------------------


def test_clicked_node_shows_its_text_scores_memory_and_path(tree_and_details, qtbot):
    view, details = tree_and_details
    stream = with_markup(events())
    for event in stream:
        view.apply(event)  # folds into the shared session: the details panel hears it too
    target = view.data.chosen_path[2]
    view.centerOn(view.node_center(target))
    with qtbot.waitSignal(view.node_selected):
        qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=view.mapFromScene(view.node_center(target)))
    node = view.data.node(target)
    assert details.node_id == target
    assert details.text.toPlainText() == f"{MARKUP} {target}"  # markup shown literally
    assert details.heading.text() == f"Candidate #{target} · step 3 · final"
    assert details.value("score") == f"{node.score:.3f}"
    assert details.value("tokens") == "8"
    assert details.value("group") == "0"
    assert details.value("kv_device") == f"{format_bytes(node.device_bytes)} (33%)"
    assert details.value("h2d") == format_bytes(node.h2d_bytes)
    rows = details.path_rows()
    assert [r[1] for r in rows] == ["prompt", *(f"#{c}" for c in view.data.chosen_path[:3])]
    assert rows[0][4] == "<i>How</i> fast is the train?"
    assert rows[3][2] == f"{node.score:.3f}" and rows[3][4] == f"{MARKUP} {target}"


def test_details_refresh_when_the_shown_node_is_selected_or_pruned(tree_and_details):
    view, details = tree_and_details
    stream = events()
    first_selected = next(i for i, e in enumerate(stream) if isinstance(e, ev.StepSelected))
    for event in stream[:first_selected]:
        view.apply(event)
    loser = stream[first_selected].pruned[0]
    view.select_node(loser)
    assert details.value("state") == "running"
    view.apply(stream[first_selected])
    assert details.value("state") == "pruned"
    view.apply(stream[0])  # a new run: the old node is gone
    assert details.node_id is None and details.heading.text() == PLACEHOLDER


def test_walking_to_a_sibling_rewrites_one_row_of_the_path_table(tree_and_details):
    """Each written cell made Qt measure its column over every row again (60 ms for a 30-step path, per arrow
    key): a node beside the shown one shares its path but the last row, so only that row's cells are written."""
    view, details = tree_and_details
    for event in events():
        view.apply(event)
    node = view.data.node(view.data.chosen_path[-1])
    sibling = next(c for c in view.data.node(node.parent).children if c != node.id)
    view.select_node(node.id)
    written: list[int] = []
    details.path.model().dataChanged.connect(lambda top, bottom, *_: written.append(top.row()))
    view.select_node(sibling)
    assert details.path.rowCount() == SEARCH.max_steps + 1
    assert 0 < len(written) <= len(details.path_rows()[0]) and set(written) == {SEARCH.max_steps}
    assert details.path_rows()[-1][1] == f"#{sibling}"
    header = details.path.horizontalHeader()
    assert [header.sectionResizeMode(c) for c in range(4)] == [header.ResizeMode.ResizeToContents] * 4


def test_details_of_the_prompt_and_of_an_unknown_id(tree_and_details):
    view, details = tree_and_details
    view.apply(events()[0])
    details.show_node(ROOT_ID)
    assert details.heading.text() == "The prompt"
    assert details.text.toPlainText() == "<i>How</i> fast is the train?"
    details.show_node(777)
    assert details.node_id is None and details.value("score") == "–"


def test_the_prompts_details_show_the_traffic_of_the_question_before_step_1(tree_and_details):
    view, details = tree_and_details
    for event in with_prompt_traffic(events(), 50_000, 7_000):
        view.apply(event)
    details.show_node(ROOT_ID)
    assert (details.value("h2d"), details.value("d2h")) == (format_bytes(50_000), format_bytes(7_000))


# -- ChartsPanel -------------------------------------------------------------------------------


def test_charts_add_one_point_per_step_and_say_emulated(qtbot):
    charts = ChartsPanel()
    qtbot.addWidget(charts)
    assert all("emulated GPU" not in charts.title(name) for name in TITLES)
    steps = 0
    for event in events():
        charts.apply(event)
        if isinstance(event, ev.StepSelected):
            steps += 1
            qtbot.waitUntil(lambda: not charts.pending)  # drawn a plot per pass, soon after the events
            for curve in ("step_h2d", "step_d2h", "total_h2d", "total_d2h", "device", "host", "copy", "modelled",
                          "step", "stall"):
                assert charts.point_count(curve) == steps
    assert all("emulated GPU" in charts.title(name) for name in TITLES)
    transfers = [e for e in events() if isinstance(e, ev.TransferStats)]
    charts.flush()
    _, totals = charts.curves["total_h2d"].getData()
    assert list(totals) == [t.h2d_bytes for t in transfers]
    assert charts.budget_line.isVisible() and charts.budget_line.value() == 1 << 20
    charts.reset()
    assert charts.point_count("total_h2d") == 0 and not charts.budget_line.isVisible()


def test_stall_share_bars_and_the_step_time_line_follow_transfer_stats(qtbot):
    charts = ChartsPanel()
    qtbot.addWidget(charts)
    stalls = [0.0, 0.25, 0.5, 0.75]  # one per step (SEARCH has four)
    for event in events():
        if isinstance(event, ev.TransferStats):
            event = dataclasses.replace(event, compute_seconds=0.3, stall_share=stalls[event.step - 1])
        charts.apply(event)
    charts.flush()
    assert list(charts.curves["stall"].opts["height"]) == stalls
    _, seconds = charts.curves["step"].getData()
    assert list(seconds) == pytest.approx([0.3, 0.4, 0.6, 1.2])  # compute / (1 - stall share)
    assert charts.title("stall").startswith("Stall share per step")


def with_prompt_traffic(stream: list[object], h2d: int, d2h: int) -> list[object]:
    """The same stream as if the question's KV moved `h2d` and `d2h` bytes before step 1 (in every total)."""
    return [dataclasses.replace(e, h2d_bytes=e.h2d_bytes + h2d, d2h_bytes=e.d2h_bytes + d2h)
            if isinstance(e, ev.TransferStats) else e for e in stream]


def test_the_questions_own_traffic_shows_as_a_prompt_bar_and_starts_the_cumulative_line(qtbot):
    charts = ChartsPanel()
    qtbot.addWidget(charts)
    stream = with_prompt_traffic(events(), 50_000, 7_000)
    for event in stream:
        charts.apply(event)
    charts.flush()
    transfers = [e for e in stream if isinstance(e, ev.TransferStats)]
    bars = charts.curves["step_h2d"].opts
    assert list(bars["x"]) == pytest.approx([-0.2, 0.8, 1.8, 2.8, 3.8])  # the prompt at 0, then steps 1 … 4
    assert list(bars["height"]) == [50_000, *(t.step_h2d_bytes for t in transfers)]
    assert charts.curves["step_d2h"].opts["height"][0] == 7_000
    x, totals = charts.curves["total_h2d"].getData()
    assert list(x) == [0, 1, 2, 3, 4] and list(totals) == [50_000, *(t.h2d_bytes for t in transfers)]
    axis = charts.plots["traffic"].getAxis("bottom")
    assert charts.plots["traffic"].viewRange()[0][0] == pytest.approx(-0.5)
    assert axis.tickStrings([0.0, 1.0], 1, 1) == ["prompt", "1"]
    assert charts.plots["copy"].viewRange()[0][0] == pytest.approx(0.5)  # the other plots start at step 1


def test_charts_on_a_real_gpu_are_not_labelled_emulated(qtbot):
    charts = ChartsPanel()
    qtbot.addWidget(charts)
    for event in events():
        if isinstance(event, ev.RunStarted | ev.MemorySnapshot | ev.TransferStats):
            event = dataclasses.replace(event, emulated=False)
        charts.apply(event)
    charts.flush()
    assert all("emulated" not in charts.title(name) for name in TITLES)
    assert charts.point_count("copy") == SEARCH.max_steps


def test_charts_redraw_only_the_plots_an_event_changed_one_per_pass(qtbot):
    charts = ChartsPanel()
    qtbot.addWidget(charts)
    stream = events()
    charts.apply(stream[0])
    charts.flush()
    memory = next(e for e in stream if isinstance(e, ev.MemorySnapshot))
    transfer = next(e for e in stream if isinstance(e, ev.TransferStats))
    charts.apply(memory)
    charts.apply(transfer)
    assert charts.pending == ("device", "traffic", "cumulative", "copy", "stall")
    assert charts.point_count("device") == 0  # not drawn inside apply(): the window stays responsive
    with qtbot.waitSignal(charts.plot_redrawn) as drawn:
        pass
    assert drawn.args == ["device"]
    assert charts.pending == ("traffic", "cumulative", "copy", "stall")  # one plot per pass
    assert charts.point_count("device") == 1 and charts.point_count("copy") == 0
    qtbot.waitUntil(lambda: not charts.pending)
    assert charts.point_count("copy") == 1 and charts.point_count("step_h2d") == 1


# -- TranscriptPanel ---------------------------------------------------------------------------


def test_transcript_streams_the_best_path_then_shows_the_answer(qtbot):
    panel = TranscriptPanel()
    qtbot.addWidget(panel)
    stream = with_markup(events())
    first_selected = next(e for e in stream if isinstance(e, ev.StepSelected))
    for event in stream:
        panel.apply(event)
        if event is first_selected:
            assert panel.best_path == [first_selected.kept[0]]
            assert f"{MARKUP} {first_selected.kept[0]}" in panel.plain_text()
            assert "Best path after step 1" in panel.plain_text()
    finished = stream[-1]
    text = panel.plain_text()
    assert panel.best_path == list(finished.path)
    assert text.rstrip().endswith(MARKUP)  # the answer, literally, last
    assert "<i>How</i> fast is the train?" in text
    assert all(f"{MARKUP} {cid}" in text for cid in finished.path)
    assert f"score {finished.score:.3f}" in text


def test_transcript_after_stop_and_failure(qtbot):
    panel = TranscriptPanel()
    qtbot.addWidget(panel)
    calls = iter(range(100))
    for event in events(should_stop=lambda: next(calls) >= 2):
        panel.apply(event)
    assert "Stopped after step 2" in panel.plain_text()
    assert len(panel.best_path) == 2 and panel.answer is None
    panel.apply(ev.RunFailed(error="KVBudgetTooSmall", message="Raise the KV budget to at least 2 MiB."))
    assert "Raise the KV budget to at least 2 MiB." in panel.plain_text()
    panel.reset()
    assert panel.plain_text() == "" and panel.best_path == []
