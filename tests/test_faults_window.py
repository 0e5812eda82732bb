"""The window under the same faults: a run whose database is locked throughout is journalled by the worker,
and the next window that opens the database shows it whole. Thread sizing for a busy machine."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

import app.store
from app.gui.bridge import SearchBridge
from app.gui.launch import window_store
from app.gui.sessions_panel import SessionsPanel
from app.store import SessionStore
from app.threads import choose_threads
from tests.test_faults import HeldLock
from tests.test_gui_bridge import CACHE, SEARCH, SPEC, CountingLoader, run_fake


def test_a_window_run_under_a_held_lock_appears_whole_in_the_next_window(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(app.store, "DEFAULT_BUSY_TIMEOUT", 0.2)
    db = tmp_path / "s.db"
    SessionStore(db).close()
    bridge = SearchBridge(loader=CountingLoader(), run=run_fake, store_factory=lambda: SessionStore(db))
    notes: list[str] = []
    bridge.recording_failed.connect(notes.append)
    lock = HeldLock(db)
    try:
        with qtbot.waitSignal(bridge.run_finished, timeout=10000):
            bridge.request_run("q", SPEC, SEARCH, CACHE)
    finally:
        lock.release()
        bridge.shutdown()
    assert any("journal" in n for n in notes) and any("still cannot be written" in n for n in notes)
    assert not any("nothing was lost" in n for n in notes)

    store, _ = window_store(str(db), interactive=False)  # what the next window does when it starts
    try:
        panel = SessionsPanel(store)
        qtbot.addWidget(panel)
        (session,) = store.list_sessions()
        assert session["status"] == "finished" and session["steps"] == SEARCH.max_steps
        assert panel.view.model().rowCount() == 1
    finally:
        store.close()


@pytest.mark.parametrize(("env", "load", "threads"), [({}, 0.0, 2), ({}, 1.2, 1), ({}, 9.0, 1),
                                                       ({"BEAMWISE_THREADS": "3"}, 9.0, 3)])
def test_torch_threads_leave_the_busy_cores_to_the_other_processes(env, load, threads):
    assert choose_threads(env, cores=2, load=load).threads == threads


def test_the_window_keeps_a_core_for_its_own_thread():
    assert choose_threads({}, cores=4, load=0.0, reserve=1).threads == 3
    assert choose_threads({}, cores=2, load=0.0, reserve=1).threads == 1


def test_a_bad_thread_setting_is_a_clear_error():
    with pytest.raises(ValueError, match="BEAMWISE_THREADS"):
        choose_threads({"BEAMWISE_THREADS": "many"}, cores=2, load=0.0)
