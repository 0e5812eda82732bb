"""The Sessions tab's Date column: the stored time (with the offset of the machine that ran it) in local time."""

from __future__ import annotations

import os
import time

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from app.gui.sessions_panel import SessionsPanel
from app.gui.sessions_table import COLUMNS
from app.recorder import SessionRecorder
from app.store import SessionStore
from benchmarks.fake_search import fake_run
from engine.config import SearchConfig

pytestmark = pytest.mark.skipif(not hasattr(time, "tzset"), reason="time.tzset: Unix only")


@pytest.mark.parametrize(("stored", "shown"), [
    ("2026-12-07T14:24:05+00:00", "2026-12-07 23:24"),  # it showed 14:24 for a run made at 23:24 in Tokyo
    ("2026-12-07T23:50:00+00:00", "2026-12-08 08:50"),  # the local date too
    ("2026-12-07T23:24:05+09:00", "2026-12-07 23:24"),  # recorded here
    ("2026-12-07T14:24:05", "2026-12-07 14:24"),  # no offset stored: as written
])
def test_the_date_column_shows_the_sessions_local_time(qtbot, tokyo, stored: str, shown: str) -> None:
    store = SessionStore(memory=True)
    recorder = SessionRecorder(store)
    for event in fake_run("How fast is the train?", SearchConfig(beams=2, width=2, max_steps=2)):
        recorder.write(event)
    with store.transaction() as conn:
        conn.execute("UPDATE sessions SET created = ?", (stored,))
    panel = SessionsPanel(store)
    qtbot.addWidget(panel)
    assert panel.model.data(panel.model.index(0, COLUMNS.index("created"))) == shown
