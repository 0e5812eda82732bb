"""A session database another program holds locked: the run's figures are the search's, an eval waits for the lock
once (not 5 s per problem), its journalled runs keep their titles and import oldest first, and `beamwise run`'s
heartbeat says it waits for the database."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sqlite3
import time
from pathlib import Path

import pytest

import app.store
from app import run_cli
from app.cli import main
from app.heartbeat import Heartbeat, StepProgress
from app.journal import RunJournal, header_for, journals_of
from app.journal_import import import_journals, open_session_store
from app.store import SessionStore
from app.store_errors import StoreLocked
from engine import events as ev
from engine.candidate import SearchClock, outside_the_search
from engine.config import CacheConfig, SearchConfig
from engine.search import run

BUSY_S = 1.5  # the busy timeout the tests run under: each wait for the lock lasts this long
TINY = ["--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2", "--step-tokens", "16", "--max-steps", "2"]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@contextlib.contextmanager
def held_lock(db: Path):
    """A second connection holding BEGIN EXCLUSIVE on `db` (another program's write lock)."""
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        holder.execute("ROLLBACK")
        holder.close()


@pytest.fixture
def busy(tmp_path, monkeypatch) -> list[float]:
    """Every write transaction that met the lock, as the seconds it waited, under a `BUSY_S` busy timeout."""
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(app.store, "DEFAULT_BUSY_TIMEOUT", BUSY_S)
    waits: list[float] = []
    transaction = SessionStore.transaction

    @contextlib.contextmanager
    def counted(self):
        began = time.monotonic()
        try:
            with transaction(self) as conn:
                yield conn
        except StoreLocked:
            waits.append(time.monotonic() - began)
            raise

    monkeypatch.setattr(SessionStore, "transaction", counted)
    return waits


def test_the_search_clock_leaves_out_only_the_time_its_caller_spent_outside_the_search():
    clock, outside = Clock(), Clock()
    timed = SearchClock(clock, outside)
    timed.start()
    clock.now += 1.0  # the search's own work
    assert timed.seconds() == 1.0
    clock.now += 5.0  # the caller printing an event: wall time (a device may compute meanwhile), counted
    assert timed.seconds() == 6.0
    clock.now += 7.0
    outside.now += 7.0  # a recorder's write waiting for the database's lock: left out
    assert timed.seconds() == 6.0


@pytest.mark.parametrize("declared", [True, False])
def test_a_runs_seconds_leave_out_a_wait_outside_the_search_and_count_any_other(tiny, declared):
    """A recorder that waited 1 s for a locked database at RunStarted made the run's seconds 1 s longer ("120
    tokens, 5.1 s" for a run of 0.06 s, and goodput as wrong); a caller's other time is wall time, counted."""
    search = SearchConfig(beams=2, width=2, step_tokens=16, max_steps=2)
    events = []
    began = time.perf_counter()
    for event in run("What is 2+3?", tiny, search, CacheConfig()):
        events.append(event)
        if event.type == "run_started":
            with outside_the_search() if declared else contextlib.nullcontext():
                time.sleep(1.0)
    wall = time.perf_counter() - began
    finished = events[-1]
    assert finished.type == "run_finished"
    if declared:
        assert finished.seconds < wall - 0.95, (finished.seconds, wall)  # a loaded machine's search may take seconds
    else:
        assert finished.seconds >= 1.0, finished.seconds
    assert all(seconds <= finished.seconds for _, _, seconds in finished.completions)
    assert finished.tokens_per_second == pytest.approx(finished.candidate_tokens / finished.seconds)


def test_an_eval_under_a_held_lock_waits_for_it_once_and_its_figures_are_the_searches(tmp_path, busy, monkeypatch):
    """Each run waited the busy timeout at its start and again to import its journal: 5.1 s per run, wall seconds
    20.3 for two runs of 0.06 s; their journals imported without their titles, line 2 before line 1."""
    import engine.search

    spans: list[float] = []  # each run's wall seconds, its recording's waits among them
    search = engine.search.run

    def timed(*args, **kwargs):
        began = time.perf_counter()
        yield from search(*args, **kwargs)
        spans.append(time.perf_counter() - began)

    monkeypatch.setattr(engine.search, "run", timed)
    lines = [{"question": f"What is {n}+{n}?", "answer": str(2 * n)} for n in (1, 2, 3)]
    problems = tmp_path / "p.jsonl"
    problems.write_text("".join(json.dumps(line) + "\n" for line in lines))
    db, out = tmp_path / "s.db", tmp_path / "r.json"
    SessionStore(db).close()
    with held_lock(db):
        assert main(["eval", str(problems), *TINY, "--db", str(db), "--json", str(out)]) == 0
    assert len(busy) == 2, busy  # run 1's start, and one try to import the journals at the eval's end
    assert len(spans) == 3 and min(busy) >= BUSY_S - 0.1
    searched = spans[0] - busy[0]  # at most run 1's own seconds: its span less the wait at its start
    data = json.loads(out.read_text())
    assert data["runs"][0]["seconds"] <= searched, (data["runs"], spans)
    assert data["methods"][0]["seconds"] <= sum(spans) - busy[0], (data["methods"], spans)
    with open_session_store(db) as store:  # the next open imports the journals
        sessions = sorted(store.list_sessions(), key=lambda s: s["id"])
        assert [s["title"].split(":")[0] for s in sessions] == [f"eval beam line {n}" for n in (1, 2, 3)]
        assert [s["status"] for s in sessions] == ["finished"] * 3
        assert sessions[0]["seconds"] <= searched, (sessions[0], spans)
        steps = store.query("SELECT seconds FROM steps WHERE session_id = ?", [sessions[0]["id"]])
        assert steps and all(row["seconds"] <= searched for row in steps), (steps, spans)


def test_journals_import_oldest_run_first_with_the_title_they_were_given(tmp_path, monkeypatch):
    """Named `<db>.<date>-<random>`, an eval's line 2 (12:02) became session 2 and its line 1 (12:01) session 3,
    both titled by their bare question."""
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    db = tmp_path / "s.db"
    SessionStore(db).close()
    started = ev.to_dict(ev.RunStarted("What is 2+3?", "m", "logprob", "cpu", True, "in_device", 1, {}, {}))
    cancelled = ev.to_dict(ev.RunCancelled(0))
    written = {}
    for created, title in [("2026-12-07T12:02:00+00:00", "eval beam line 2: b"),
                           ("2026-12-07T12:01:00+00:00", "eval beam line 1: a"),
                           ("2026-12-07T12:01:00+00:00", "eval beam line 0: a")]:
        journal = RunJournal(tmp_path, header_for(db, created, None, title=title))
        journal.append(0.0, started)
        journal.append(0.1, cancelled)
        journal.close()
        written[title] = journal.path
    later = time.time()
    os.utime(written["eval beam line 0: a"], (later - 10, later - 10))  # of one second, the one written first
    for title, path in written.items():  # names that sort the other way round
        path.rename(path.with_name(f"s.db.{'z' if title.endswith(': a') else 'a'}{path.name[-30:]}"))
    names = [p.name for p in journals_of(db, tmp_path / "data")]
    assert names[0].startswith("s.db.z") and names[1].startswith("s.db.z") and names[2].startswith("s.db.a")
    with SessionStore(db) as store:
        assert len(import_journals(store)) == 3
        titles = [s["title"] for s in sorted(store.list_sessions(), key=lambda s: s["id"])]
    assert titles == ["eval beam line 0: a", "eval beam line 1: a", "eval beam line 2: b"]


def test_the_heartbeat_says_a_wait_for_the_database_and_puts_the_phase_back():
    clock = Clock()
    progress = StepProgress(clock)
    progress.apply(ev.RunStarted("q", "m", "logprob", "cpu", True, "lbs", 1, {"beams": 2, "width": 2}, {}))
    progress.wait_for_database(5.0)
    clock.now += 2.0
    assert progress.line() == ("waiting for the session database, 2.0 s of at most 5 s: another program holds it "
                               "locked")
    progress.resume()  # the write went through before the search spoke again
    assert progress.line() == "reading the question, 2.0 s" and not progress.waiting


def test_beamwise_run_says_it_waits_for_the_locked_database(tmp_path, monkeypatch, capsys):
    """It said "reading the question, 2.0 s ... 4.0 s" while its start waited for the lock."""
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(app.store, "DEFAULT_BUSY_TIMEOUT", 0.6)
    monkeypatch.setattr(run_cli, "Heartbeat", functools.partial(Heartbeat, interval=0.1))
    db = tmp_path / "s.db"
    SessionStore(db).close()
    with held_lock(db):
        assert main(["run", "What is 2+3?", *TINY, "--db", str(db)]) == 0
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if line.startswith("  ... ")]
    assert any(line.startswith("  ... waiting for the session database, ") and line.endswith(
        "s of at most 0.6 s: another program holds it locked") for line in said), err
    assert "kept in the journal" in err
