"""When `auto` goes on with lbs mid-run (free GPU memory fell), the CLI prints it, the status bar shows it, the
stored session's policy says it, and the exports carry it."""

from __future__ import annotations

import dataclasses
import io

from app.export.markdown import render_markdown
from app.export.report import replayed, report_of
from app.recorder import SessionRecorder
from app.run_printer import Printer
from app.store import SessionStore
from benchmarks.fake_search import fake_run
from engine import events as ev
from engine.config import SearchConfig

CHANGE = ev.PolicyChanged(2, "in_device", "lbs", "KV budget 1.0 MB is too small for keeping the whole search on "
                          "the device (in_device); the smallest budget that works is 1.2 MB.", 345_600)  # fmt: skip


def changed_run() -> list:
    """A fake run that starts on in_device and, at step 2, goes on with lbs (its event before the step's memory)."""
    events = []
    for event in fake_run("Speed of a train?", SearchConfig(beams=2, width=2, max_steps=3)):
        if isinstance(event, ev.RunStarted):
            event = dataclasses.replace(event, policy="in_device")
        if isinstance(event, ev.MemorySnapshot) and event.step == 2:
            events.append(CHANGE)
        events.append(event)
    return events


def test_the_cli_prints_the_change_and_what_moved():
    out = io.StringIO()
    printer = Printer(out)
    for event in changed_run():
        printer(event)
    assert ("free device memory fell below what in_device needs: 345,600 B of KV moved to the host, going on with "
            "lbs") in out.getvalue()  # fmt: skip


def test_the_status_bar_shows_the_policy_it_went_on_with(qtbot):
    from PySide6.QtWidgets import QMainWindow

    from app.gui.status_line import StatusLine

    window = QMainWindow()
    qtbot.addWidget(window)
    line = StatusLine(window)
    events = changed_run()
    for event in events[: events.index(CHANGE)]:
        line.apply(event, live=False)
    assert line.policy.text() == "policy: in_device"
    line.apply(CHANGE, live=False)
    assert line.policy.text() == "policy: lbs (was in_device)"
    assert "345.6 kB of KV moved to the CPU, going on with lbs" in line.policy.toolTip()
    line.apply(events[0], live=False)  # the next run starts as it says
    assert line.policy.text() == "policy: in_device" and line.policy.toolTip() == ""


def test_the_stored_session_and_its_export_name_both_policies():
    store = SessionStore(memory=True)
    recorder = SessionRecorder(store)
    for event in changed_run():
        recorder.write(event)
    row = store.get_session(recorder.session_id)
    assert row["policy"] == "in_device, then lbs from step 2 (GPU memory fell)"
    markdown = render_markdown(report_of(replayed(changed_run()), row))
    assert "- Policy: in_device, then lbs from step 2 (GPU memory fell), KV budget" in markdown
