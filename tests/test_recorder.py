"""SessionRecorder: lossless replay, one transaction per step, and runs that end early or get killed."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.recorder import SessionRecorder
from app.session import SessionModel
from app.session.rows import candidate_rows, session_facts, session_settings, step_rows
from app.store import SessionStore
from app.store_errors import StoreLocked
from benchmarks.fake_search import fake_run
from engine import events as ev
from engine.config import SearchConfig

ROOT = Path(__file__).resolve().parents[1]


def feed(recorder: SessionRecorder, stream) -> list:
    seen = []
    for event in stream:
        recorder.write(event)
        seen.append(event)
    return seen


def test_finished_run_replays_exactly_and_marks_the_path_final() -> None:
    store = SessionStore(memory=True)
    recorder = SessionRecorder(store)
    stream = feed(recorder, fake_run("How fast?", SearchConfig(beams=2, width=3, max_steps=4, seed=3)))
    sid = recorder.session_id
    assert recorder.finished
    assert store.events(sid) == stream  # lossless, in order
    session = store.get_session(sid)
    end = stream[-1]
    assert session["status"] == "finished" and session["answer"] == end.answer
    assert session["path"] == list(end.path) and session["steps"] == 4 and session["prompt_tokens"] == 12
    assert session["search"]["width"] == 3 and session["policy"] == "lbs" and session["emulated"] is True
    rows = store.candidates(sid)
    assert len(rows) == session["candidates"] == 6 + 3 * 6
    states = {r["id"]: r["state"] for r in rows}
    assert [cid for cid, s in states.items() if s == "final"] == list(end.path)
    last = [e for e in stream if isinstance(e, ev.StepSelected)][-1]
    assert all(states[c] == "pruned" for c in last.pruned)
    assert all(r["device_bytes"] == 4096 and r["score"] is not None for r in rows)
    timeline = store.timeline(sid)
    assert [t["step"] for t in timeline] == [1, 2, 3, 4]
    transfers = [e for e in stream if isinstance(e, ev.TransferStats)]
    assert [t["h2d_bytes"] for t in timeline] == [t.h2d_bytes for t in transfers]
    assert session["h2d_bytes"] == transfers[-1].h2d_bytes
    first = next(e for e in stream if isinstance(e, ev.StepSelected))
    assert timeline[0]["beams"] == [] and timeline[1]["beams"] == list(first.kept)
    assert timeline[0]["kept"] == list(first.kept) and timeline[0]["pruned"] == list(first.pruned)


def test_each_step_is_written_when_it_is_selected_and_not_before(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "s.db")
    watcher = sqlite3.connect(tmp_path / "s.db")  # what another process would see
    recorder = SessionRecorder(store)
    for event in fake_run("q", SearchConfig(beams=2, width=2, max_steps=3)):
        recorder.write(event)
        steps = watcher.execute("SELECT count(*) FROM steps").fetchone()[0]
        cands = watcher.execute("SELECT count(*) FROM candidates WHERE state != 'running'").fetchone()[0]
        if isinstance(event, ev.StepSelected):
            assert steps == event.step and cands == 4 * event.step
        elif isinstance(event, ev.CandidateScored):
            assert steps == event.step - 1 and cands == 4 * (event.step - 1)  # the step is not visible yet
    watcher.close()
    store.close()


def test_a_failing_step_write_leaves_nothing_of_that_step(monkeypatch: pytest.MonkeyPatch) -> None:
    store = SessionStore(memory=True)
    recorder = SessionRecorder(store)
    stream = iter(fake_run("q", SearchConfig(beams=2, width=2, max_steps=3)))
    for event in stream:
        recorder.write(event)
        if isinstance(event, ev.StepSelected):
            break
    original = store.insert_rows

    def broken(conn, table, rows):
        if table == "steps":
            raise RuntimeError("disk fell off")
        return original(conn, table, rows)

    monkeypatch.setattr(store, "insert_rows", broken)
    with pytest.raises(RuntimeError):
        for event in stream:
            recorder.write(event)
    sid = recorder.session_id
    assert [t["step"] for t in store.timeline(sid)] == [1]
    assert {r["step"] for r in store.candidates(sid)} == {1}  # step 2's candidates rolled back with it


def cancel_after(steps: int):
    selected = []

    def should_stop() -> bool:
        return len(selected) >= steps

    return selected, should_stop


def test_cancelled_after_step_two_keeps_steps_one_and_two() -> None:
    store = SessionStore(memory=True)
    recorder = SessionRecorder(store)
    selected, should_stop = cancel_after(2)
    for event in fake_run("q", SearchConfig(beams=2, width=2, max_steps=5), should_stop=should_stop):
        recorder.write(event)
        if isinstance(event, ev.StepSelected):
            selected.append(event)
    sid = recorder.session_id
    session = store.get_session(sid)
    assert session["status"] == "cancelled" and session["steps"] == 2 and session["answer"] is None
    assert [t["step"] for t in store.timeline(sid)] == [1, 2]
    assert store.events(sid)[-1] == ev.RunCancelled(step=2)


def test_cancel_in_the_middle_of_a_step_keeps_its_events_and_marks_its_candidates_running() -> None:
    store = SessionStore(memory=True)
    recorder = SessionRecorder(store)
    stream = list(fake_run("q", SearchConfig(beams=2, width=2, max_steps=3)))
    second = next(i for i, e in enumerate(stream) if isinstance(e, ev.StepStarted) and e.step == 2)
    partial = [*stream[: second + 6], ev.RunCancelled(step=1)]  # step 2: started, a group, a few texts
    feed(recorder, partial)
    sid = recorder.session_id
    assert store.events(sid) == partial
    assert [t["step"] for t in store.timeline(sid)] == [1]
    running = [r for r in store.candidates(sid) if r["state"] == "running"]
    assert running and {r["step"] for r in running} == {2} and all(r["score"] is None for r in running)
    assert store.get_session(sid)["status"] == "cancelled"


def test_failed_run_keeps_the_message() -> None:
    """A user's error is stored in the words the window shows (the exception's class was in front of them); a
    fault in Beamwise keeps its class, which its report needs."""
    store = SessionStore(memory=True)
    for failed, error in [(ev.RunFailed(error="KVBudgetTooSmall", message="Raise the KV budget."),
                           "Raise the KV budget."),
                          (ev.RunFailed(error="IndexError", message="A fault in Beamwise.", details="Traceback ..."),
                           "IndexError: A fault in Beamwise.")]:
        recorder = SessionRecorder(store)
        feed(recorder, [*list(fake_run("q"))[:3], failed])
        session = store.get_session(recorder.session_id)
        assert session["status"] == "failed" and session["error"] == error


def test_close_without_an_end_marks_interrupted() -> None:
    store = SessionStore(memory=True)
    with SessionRecorder(store) as recorder:
        for event in fake_run("q", SearchConfig(beams=1, width=2, max_steps=3)):
            recorder.write(event)
            if isinstance(event, ev.StepSelected):
                break
    session = store.get_session(recorder.session_id)
    assert session["status"] == "interrupted" and session["steps"] == 1


def test_misuse_is_a_clear_error() -> None:
    store = SessionStore(memory=True)
    recorder = SessionRecorder(store)
    stream = list(fake_run("q"))
    with pytest.raises(ValueError, match="before run_started"):
        recorder.write(stream[1])
    feed(recorder, stream)
    with pytest.raises(ValueError, match="new SessionRecorder"):
        recorder.write(stream[0])


def test_locked_database_keeps_the_step_buffered_and_writes_it_later(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SessionStore(path, busy_timeout=0.05)
    recorder = SessionRecorder(store)
    stream = list(fake_run("q", SearchConfig(beams=2, width=2, max_steps=3)))
    first_select = next(i for i, e in enumerate(stream) if isinstance(e, ev.StepSelected))
    feed(recorder, stream[:first_select])
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    with pytest.raises(StoreLocked):
        recorder.write(stream[first_select])
    holder.execute("ROLLBACK")
    holder.close()
    feed(recorder, stream[first_select + 1:])  # the next step's write carries the held one too
    assert store.events(recorder.session_id) == stream
    assert [t["step"] for t in store.timeline(recorder.session_id)] == [1, 2, 3]
    store.close()


DRIVER = """
import sys, time
from app.recorder import SessionRecorder
from app.session import SessionModel
from app.session.rows import candidate_rows, session_facts, session_settings, step_rows
from app.store import SessionStore
from engine import events as ev
from engine.config import SearchConfig
from benchmarks.fake_search import fake_run

recorder = SessionRecorder(SessionStore(sys.argv[1]))
for event in fake_run("killed mid-run", SearchConfig(beams=2, width=2, max_steps=5)):
    if isinstance(event, ev.StepSelected) and event.step == 2:
        time.sleep(600)  # stuck in step 2, with its candidates buffered: the test kills us here
    recorder.write(event)
"""


def wait_for_a_recorded_step(path: Path, proc: subprocess.Popen, seconds: float) -> None:
    """Poll the database another process writes until its first step is committed (or fail clearly)."""
    deadline = time.monotonic() + seconds
    watcher = sqlite3.connect(path)
    try:
        while watcher.execute("SELECT count(*) FROM steps").fetchone()[0] < 1:
            if proc.poll() is not None:
                detail = proc.stderr.read().decode()[-2000:] if proc.stderr else ""
                pytest.fail(f"the process ended before recording its first step: {detail}")
            assert time.monotonic() < deadline, f"no step reached the database in {seconds:.0f} s"
            time.sleep(0.02)
    finally:
        watcher.close()


@pytest.mark.skipif(os.name == "nt", reason="SIGKILL is POSIX")
def test_sigkill_mid_run_keeps_finished_steps_and_marks_interrupted(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    SessionStore(path).close()
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(path)], cwd=ROOT)
    try:
        wait_for_a_recorded_step(path, proc, seconds=60)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    with SessionStore(path) as store:
        (session,) = store.list_sessions()
        assert session["status"] == "interrupted" and session["steps"] == 1
        assert [t["step"] for t in store.timeline(session["id"])] == [1]
        assert {r["step"] for r in store.candidates(session["id"])} == {1}
        assert len(store.candidates(session["id"])) == 4


@pytest.mark.skipif(os.name == "nt", reason="SIGKILL is POSIX")
def test_sigkill_of_beamwise_run_keeps_finished_steps(tmp_path: Path) -> None:
    """The real thing: `beamwise run` on a synthetic model, killed once a step is in the database."""
    path = tmp_path / "s.db"
    SessionStore(path).close()
    command = [sys.executable, "-m", "app.cli", "run", "Count slowly to one hundred.", "--model",
               "synthetic:tiny-llama", "--max-steps", "60", "--beams", "4", "--width", "2", "--step-tokens", "8",
               "--step-delimiter", "none", "--device", "cpu", "--db", str(path)]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for_a_recorded_step(path, proc, seconds=120)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stderr.close()
    with SessionStore(path) as store:
        (session,) = store.list_sessions()
        assert session["status"] == "interrupted", "the run finished before the kill; make it longer"
        steps = [t["step"] for t in store.timeline(session["id"])]
        assert steps == list(range(1, session["steps"] + 1)) and steps
        assert {r["step"] for r in store.candidates(session["id"])} == set(steps)
        assert store.events(session["id"])[-1].type == "step_selected"


def test_a_beam_pruned_in_a_later_step_is_stored_as_pruned(tmp_path) -> None:
    """A finished beam is carried in the kept set; when a later step drops it, its row says pruned."""
    from benchmarks.fake_search import fake_run
    from engine import events as ev
    from engine.config import SearchConfig

    stream = list(fake_run("q", SearchConfig(beams=2, width=2, max_steps=2)))
    first = next(e for e in stream if e.type == "step_selected" and e.step == 1)
    dropped = next(c for c in first.kept if c not in stream[-1].path)  # kept at step 1, not on the answer's path
    patched = [
        ev.StepSelected(e.step, e.kept[:1] + tuple(c for c in e.kept[1:] if c != dropped), (*e.pruned, dropped))
        if e.type == "step_selected" and e.step == 2 else e
        for e in stream
    ]
    with SessionStore(tmp_path / "s.db") as store:
        recorder = SessionRecorder(store)
        for event in patched:
            recorder.write(event)
        states = {row["id"]: row["state"] for row in store.candidates(recorder.session_id)}
    assert states[dropped] == "pruned"


def scenario(name: str) -> list:
    """Event streams that end every way a run ends (the last one is closed without an end: interrupted)."""
    stream = list(fake_run("q", SearchConfig(beams=2, width=2, max_steps=3, seed=5)))
    second = next(i for i, e in enumerate(stream) if isinstance(e, ev.StepStarted) and e.step == 2)
    first = next(e for e in stream if isinstance(e, ev.StepSelected))
    dropped = next(c for c in first.kept if c not in stream[-1].path)
    return {
        "finished": stream,
        "finished early": list(fake_run("q", SearchConfig(beams=2, width=3, max_steps=5, seed=2), finish_at_step=2)),
        "cancelled inside a step": [*stream[: second + 6], ev.RunCancelled(step=1)],
        "failed": [*stream[:3], ev.RunFailed(error="KVBudgetTooSmall", message="Raise the KV budget.")],
        "dropped later": [ev.StepSelected(2, e.kept[:1], (*e.pruned, *e.kept[1:], dropped))
                          if isinstance(e, ev.StepSelected) and e.step == 2 else e for e in stream],
        "interrupted": stream[: second + 8],
    }[name]


def without(rows: list[dict], *keys: str) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in ("session_id", *keys)} for row in rows]


def stored_and_live(stream) -> tuple[SessionStore, int, SessionModel]:
    """The run recorded, and the same events folded one by one as the window folds them."""
    store, live = SessionStore(memory=True), SessionModel()
    with SessionRecorder(store) as recorder:
        for event in stream:
            recorder.write(event)
            live.apply(event)
    return store, recorder.session_id, live


@pytest.mark.parametrize("name", ["finished", "finished early", "cancelled inside a step", "failed",
                                  "dropped later", "interrupted"])
def test_the_stored_rows_are_what_the_windows_model_reads(name: str) -> None:
    """The recorder writes step by step what the window's model holds at the end, row for row."""
    store, sid, live = stored_and_live(scenario(name))
    assert without(store.candidates(sid)) == candidate_rows(live)
    assert without(store.timeline(sid), "seconds") == step_rows(live)
    expected = {**session_settings(live), **session_facts(live)}
    if name == "interrupted":
        assert expected["status"] == "running"
        expected["status"] = "interrupted"
    session = store.get_session(sid)
    assert {key: session[key] for key in expected} == expected


def test_a_real_search_is_stored_as_the_windows_model_reads_it(tiny) -> None:
    """The engine's own stream (KV placement, traffic, a budget that offloads) stored as the window reads it."""
    from engine.config import CacheConfig
    from engine.search import run

    search = SearchConfig(beams=2, width=2, step_tokens=4, max_steps=3, step_delimiter=None, seed=3)
    stream = list(run("What is 2+3?", tiny, search, CacheConfig(policy="lbs", kv_budget_bytes=300_000)))
    store, sid, live = stored_and_live(stream)
    rows = store.candidates(sid)
    assert without(rows) == candidate_rows(live) and len(rows) == 4 + 2 * 4
    assert all(r["host_bytes"] > 0 and r["h2d_bytes"] > 0 for r in rows) and store.get_session(sid)["h2d_bytes"] > 0
    assert without(store.timeline(sid), "seconds") == step_rows(live)


def test_rows_an_earlier_release_stored_are_what_its_events_fold_into_today(tmp_path: Path) -> None:
    """tests/data/sessions_m001.db holds real runs (finished and cancelled) recorded by the recorder that folded
    events on its own; replayed into today's SessionModel, their events give back exactly those rows."""
    import shutil

    from app.export.report import replayed

    path = tmp_path / "old.db"
    shutil.copy(Path(__file__).parent / "data" / "sessions_m001.db", path)
    with SessionStore(path) as store:
        sessions = store.list_sessions()
        assert {s["status"] for s in sessions} == {"finished", "cancelled"}
        for session in sessions:
            model = replayed(store.events(session["id"]))
            assert without(store.candidates(session["id"])) == candidate_rows(model)
            assert without(store.timeline(session["id"]), "seconds") == step_rows(model)
            facts = session_facts(model)
            assert {key: store.get_session(session["id"])[key] for key in facts} == facts
