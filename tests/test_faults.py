"""Faults a user or a hostile tester meets: a held lock, a read-only folder, hostile arguments, a corrupted
import and an unwritable screenshot path. Each one: a clear line, the right exit status, nothing lost or
falsely reported as saved."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import app.store
from app.cli import main
from app.journal import read_journal
from app.store import SessionStore

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2", "--step-tokens", "4", "--max-steps", "2"]
HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
print("held", flush=True)
sys.stdin.readline()
conn.execute("COMMIT")
"""


class HeldLock:
    """Another process holding `BEGIN EXCLUSIVE` on the database until `release()`."""

    def __init__(self, db: Path) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", HOLDER, str(db)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
        assert self.process.stdout.readline().strip() == "held"

    def release(self) -> None:
        self.process.communicate("\n", timeout=10)  # the holder commits and exits; the pipes close


@pytest.fixture
def db(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(app.store, "DEFAULT_BUSY_TIMEOUT", 0.2)  # a locked write gives up quickly here
    path = tmp_path / "s.db"
    SessionStore(path).close()  # an existing database in WAL mode, as after a first run
    return path


def fake(steps: int, question: str = "What is 2+3?"):
    from benchmarks.fake_search import fake_run
    from engine.config import SearchConfig

    return fake_run(question, SearchConfig(beams=2, width=2, max_steps=steps))


def exit_code(args: list[str]) -> int:
    try:
        return main(args)
    except SystemExit as exit_:
        return int(exit_.code or 0)


# ---------------------------------------------------------------- a held lock


def test_a_run_under_a_lock_held_throughout_is_journalled_and_imported_on_the_next_open(db, capsys):
    lock = HeldLock(db)
    try:
        assert main(["run", "What is 2+3?", *TINY, "--db", str(db)]) == 0
    finally:
        lock.release()
    captured = capsys.readouterr()
    assert "answer:" in captured.out
    journals = list(db.parent.glob("*.journal.jsonl"))
    assert len(journals) == 1, "one journal per run, beside the database (its folder is writable)"
    assert "still cannot be written" in captured.err and str(journals[0]) in captured.err
    assert "nothing was lost" not in captured.err  # the old promise that was false
    journal = read_journal(journals[0])
    assert journal.closed and journal.events[-1][1]["type"] == "run_finished"

    assert main(["sessions", "list", "--db", str(db)]) == 0
    listed = capsys.readouterr()
    assert "finished" in listed.out and f"saved the run journal {journals[0].name}" in listed.err
    assert not journals[0].exists(), "the journal is deleted once its session committed"
    with SessionStore(db) as store:
        (session,) = store.list_sessions()
        assert session["status"] == "finished" and session["steps"] == 2
        assert len(store.timeline(session["id"])) == 2 and len(store.candidates(session["id"])) == 8


def test_a_lock_taken_mid_run_keeps_the_steps_before_it_and_the_journal_replaces_them_whole(db, capsys):
    from app.journal_import import recorder_for

    notes: list[str] = []
    store = SessionStore(db)
    recorder = recorder_for(store, notes.append)
    events = list(fake(3))
    lock = None
    for event in events:
        if event.type == "step_started" and event.step == 2:
            lock = HeldLock(db)
        recorder.write(event)
    recorder.close()
    assert recorder.journal_path is not None and "journal" in notes[0]
    with SessionStore(db) as reader:  # readers still see the first step (WAL), the session is 'running'
        (partial,) = reader.list_sessions()
        assert partial["steps"] == 1
    lock.release()
    store.close()
    assert main(["sessions", "show", str(partial["id"]), "--db", str(db)]) == 0
    with SessionStore(db) as store:
        (whole,) = store.list_sessions()
        assert whole["id"] == partial["id"] and whole["steps"] == 3 and whole["status"] == "finished"
        assert len(store.events(whole["id"])) == len(events)


def test_a_journal_still_being_written_by_a_live_process_is_left_alone(db, tmp_path):
    from app.journal import RunJournal, header_for
    from app.journal_import import import_journals

    journal = RunJournal(db.parent, header_for(db, "2026-01-01T00:00:00+00:00", None))  # this process: alive
    journal.append(0.0, {"type": "run_started"})
    journal.sync()
    with SessionStore(db) as store:
        assert import_journals(store) == []
    assert journal.path.exists()
    journal.close()


def test_a_journal_whose_pid_now_names_a_later_process_is_imported(db, capsys):
    """Its writer died (a crash, a power cut) and another program was given its process id: it was skipped as
    still being written, for ever and without a word."""
    from app.journal import RunJournal, header_for
    from app.processes import started_at
    from engine import events as ev

    if started_at(os.getpid()) is None:
        pytest.skip("this system does not say when a process started")
    later = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        header = header_for(db, "2026-01-01T00:00:00+00:00", None)
        journal = RunJournal(db.parent, dataclasses.replace(header, pid=later.pid))
        for number, event in enumerate(fake(2)):
            journal.append(0.1 * number, ev.to_dict(event))
        journal.close()
        lines = journal.path.read_text(encoding="utf-8").splitlines()
        assert json.loads(lines[-1]) == {"closed": True}
        journal.path.write_text("".join(f"{line}\n" for line in lines[:-1]), encoding="utf-8")  # its writer killed
        assert main(["sessions", "list", "--db", str(db)]) == 0
        assert f"saved the run journal {journal.path.name}" in capsys.readouterr().err
        assert not journal.path.exists()
    finally:
        later.kill()
        later.wait()


def closed_journal(db: Path, steps: int = 2, created: str = "2026-01-01T00:00:00+00:00") -> Path:
    """A finished run's journal beside `db`, as a run that found the database busy from its start leaves it."""
    from app.journal import RunJournal, header_for
    from engine import events as ev

    journal = RunJournal(db.parent, header_for(db, created, None))
    for number, event in enumerate(fake(steps)):
        journal.append(0.1 * number, ev.to_dict(event))
    journal.close()
    return journal.path


def test_a_journal_two_processes_read_at_once_is_saved_once(db, monkeypatch, capsys):
    """Two processes opening the database at once (the window and `beamwise run`, say) both read a waiting journal
    before either wrote: each saved it, as two sessions of one run; and one more said it 'cannot read' the
    journal the other had deleted."""
    import app.journal_import as importer

    path = closed_journal(db)
    read = importer.read_journal

    def read_then_the_other_process_imports(found: Path):
        journal = read(found)
        monkeypatch.setattr(importer, "read_journal", read)
        with SessionStore(db) as other:  # the other process imports it while this one has read it
            assert importer.import_journals(other) != []
        return journal

    monkeypatch.setattr(importer, "read_journal", read_then_the_other_process_imports)
    with SessionStore(db) as store:
        assert importer.import_journals(store, notify=print) == []
        (session,) = store.list_sessions()
    assert session["status"] == "finished" and session["steps"] == 2
    assert not path.exists() and not list(db.parent.glob("*.importing"))
    assert capsys.readouterr().out == ""


def test_a_journal_its_importer_left_aside_is_imported_once_whether_or_not_that_import_committed(db):
    """An import renames its journal aside inside its transaction and deletes it after the commit; an importer
    killed between the two left a `.importing` file no later opening looked at, its run never saved."""
    from app.journal_import import TAKEN, import_journals, replay

    path = closed_journal(db)
    aside = path.with_name(path.name + TAKEN)
    path.rename(aside)  # killed before its commit: nothing of it in the database
    with SessionStore(db) as store:
        assert len(import_journals(store)) == 1
        (session,) = store.list_sessions()
    assert session["status"] == "finished" and not aside.exists() and not path.exists()

    later = "2026-01-02T00:00:00+00:00"
    with SessionStore(db) as store:
        replay(store, read_journal(closed_journal(db, 3, later)))  # committed, and then ...
    leftover = closed_journal(db, 3, later)
    leftover = leftover.rename(leftover.with_name(leftover.name + TAKEN))  # ... killed before deleting it
    with SessionStore(db) as store:
        assert import_journals(store) == []
        assert len(store.list_sessions()) == 2  # not saved a second time
    assert not leftover.exists()


def test_a_runs_journal_another_process_imported_first_is_not_said_to_wait(db, capsys):
    """`beamwise run` imports its own journal at its end; when another process opening the database did it first,
    the run said the database 'still cannot be written' and that the run 'is kept whole in the journal'."""
    from app.journal_import import import_journals, recorder_for
    from app.run_output import end_recording

    lock = HeldLock(db)
    store = SessionStore(db)
    recorder = recorder_for(store, lambda _text: None)
    for event in fake(2):
        recorder.write(event)
    lock.release()
    path = recorder.journal_path
    assert path is not None
    recorder.journal.close()
    with SessionStore(db) as other:
        assert len(import_journals(other)) == 1
    end_recording(recorder)
    store.close()
    err = capsys.readouterr().err
    assert "still cannot be written" not in err and "cannot read" not in err
    with SessionStore(db) as store:
        assert len(store.list_sessions()) == 1


# ---------------------------------------------------------------- a read-only folder


@pytest.mark.skipif(os.name == "nt" or os.geteuid() == 0, reason="POSIX permissions; root ignores them")
def test_a_database_in_a_read_only_folder_is_read_and_a_write_names_the_folder(db, capsys):
    with SessionStore(db) as store:
        store.create_session({"question": "q", "status": "finished"})
    folder = db.parent
    folder.chmod(0o555)
    try:
        assert main(["sessions", "list", "--db", str(db)]) == 0
        assert " q" in capsys.readouterr().out
        assert main(["sessions", "rename", "1", "new", "--db", str(db)]) == 2
        err = capsys.readouterr().err
        assert f"the folder {folder}" in err and "Check free disk space" not in err and err.count("\n") == 1
    finally:
        folder.chmod(0o755)


# ---------------------------------------------------------------- hostile arguments


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "caf\udce9?", *TINY], "not UTF-8"),
        (["run", "hi", *TINY, "--beams", "10000", "--width", "8"], "80,000 candidates per step"),
        (["run", "hi", *TINY, "--step-delimiter", "\\ud800"], "lone surrogate"),
        (["run", "hi", *TINY, "--step-delimiter", "\\x"], "broken escape"),
        (["run", "hi", *TINY, "--temperature", "inf"], "finite"),
        (["run", "hi", *TINY, "--pcie-gbps", "inf"], "finite"),
        (["run", "hi", *TINY, "--seed", str(2**64)], "seed"),
        (["run", "hi", *TINY, "--kv-budget", "abc"], "is not a size"),
        (["run", "--question-file", "/no/such/file", *TINY], "cannot read the question file"),
        (["gui", "--question", "hi", "--screenshot", f"{__file__}/shot.png"], "cannot save the screenshot"),
    ],
)
def test_hostile_arguments_get_one_line_and_exit_2(args, message, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path))
    assert exit_code(args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_question_from_standard_input_and_from_a_file(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"What is 2+3?\n")))
    assert main(["run", "-", *TINY, "--no-save", "--json"]) == 0
    first = json.loads(capsys.readouterr().out.splitlines()[0])
    assert first["question"] == "What is 2+3?\n"
    bad = tmp_path / "q.txt"
    bad.write_bytes(b"caf\xe9?")
    assert main(["run", "--question-file", str(bad), *TINY]) == 2
    assert "is not UTF-8 text (byte 0xe9 at offset 3; the file is in another encoding" in capsys.readouterr().err


def test_a_search_too_large_for_memory_is_refused_with_the_figure_and_the_largest_setting(tiny):
    from app.preflight import check_memory
    from engine.config import CacheConfig, SearchConfig
    from engine.errors import SearchTooLarge

    search = SearchConfig(beams=512, width=2, step_tokens=48, max_steps=6)
    with pytest.raises(SearchTooLarge, match=r"largest setting that fits is --beams \d+ with --width 2"):
        check_memory(tiny, "hi", search, CacheConfig(), free=lambda: 10_000_000)
    check_memory(tiny, "hi", SearchConfig(beams=2), CacheConfig(), free=lambda: 10_000_000)


def test_the_memory_check_counts_paths_only_up_to_the_models_context_and_says_its_share(tiny):
    """`--max-steps 1000` was refused as '20.7 GB, more than the 24.4 GB free' on an 8,192-token model whose paths
    hold 3 GB: its steps past the context were counted, and the 80% share it compares with was never said."""
    from app.preflight import SHARE, check_memory, needed_bytes
    from engine.config import CacheConfig, SearchConfig
    from engine.errors import SearchTooLarge
    from engine.kv.sizing import within_context

    endless = SearchConfig(beams=4, width=2, step_tokens=16, max_steps=1_000_000)
    capped = within_context(endless, 20, tiny.context_length)
    assert capped.max_steps == -(-(tiny.context_length - 20) // 16) and capped.max_steps < 200
    room = needed_bytes(tiny, 40, capped, CacheConfig()) * 2
    check_memory(tiny, "hi", endless, CacheConfig(), free=lambda: room)  # before: refused as terabytes
    with pytest.raises(SearchTooLarge) as refused:
        check_memory(tiny, "hi", endless, CacheConfig(), free=lambda: 10_000)
    said = refused.value.user_message()
    assert f"({SHARE:.0%} of the 10.0 kB of memory free: the model and the app need the rest)" in said, said
    assert "the largest setting that fits is none: --beams 1 with --width 2 needs more" in said


ARGUMENT = st.one_of(st.text(max_size=12).filter(lambda a: not a.startswith(("-h", "--h"))), st.sampled_from(
    ["--beams", "--width", "--seed", "--temperature", "--kv-budget", "--step-delimiter", "--max-candidates",
     "-1", "0", "inf", "nan", "1e309", "\\", "\\u12", "99999999999999999999999", "--policy", "--question-file"]))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(ARGUMENT, max_size=6))
def test_hostile_option_lists_never_raise_out_of_main(capsys, argv):
    """Any argument list: exit 0 or 2, never a traceback. `--max-steps 0` stops before a model would load."""
    code = exit_code(["run", "hi", *argv, "--max-steps", "0", "--no-save"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and err.count("error:") == 1


def _journal(db: Path, edit) -> Path:
    """A closed journal of a two-step run for `db`, its events passed through `edit` (a dict per event)."""
    from app.journal import RunJournal, header_for
    from engine import events as ev

    journal = RunJournal(db.parent, header_for(db, "2026-11-24T10:00:00", None))
    for number, event in enumerate(fake(2)):
        journal.append(0.1 * number, edit(ev.to_dict(event)))
    journal.close()
    return journal.path


@pytest.mark.parametrize(("edit", "named"), [
    (lambda e: {**e, "type": "run_paused"} if e["type"] == "step_started" else e, "KeyError('run_paused')"),
    (lambda e: {**e, "model": None} if e["type"] == "run_started" else e, "field 'model' should be str, not NoneType"),
    (lambda e: {**e, "kept": [999]} if e["type"] == "step_selected" else e, "no node 999"),
], ids=["a newer event type", "a field of another type", "ids that make no tree"])  # fmt: skip
def test_a_journal_beamwise_cannot_import_is_left_in_place_and_every_command_still_works(db, capsys, edit, named):
    """Before, its error raised out of every command that opened the database (and out of the window's start)."""
    path = _journal(db, edit)
    assert main(["sessions", "list", "--db", str(db)]) == 0
    err = capsys.readouterr().err
    assert f"the run journal {path} was not imported" in err and named in err and "Traceback" not in err
    assert path.exists(), "kept: a newer Beamwise may import it"
    with SessionStore(db) as store:
        assert store.list_sessions() == [], "nothing of it was written"
    assert main(["run", "What is 2+3?", *TINY, "--db", str(db)]) == 0  # the next run is recorded as ever
    with SessionStore(db) as store:
        assert [s["status"] for s in store.list_sessions()] == ["finished"]


# ---------------------------------------------------------------- export and import


def test_export_refuses_to_overwrite_without_force(db, tmp_path, capsys):
    from app.recorder import SessionRecorder

    with SessionStore(db) as store, SessionRecorder(store) as recorder:
        for event in fake(1):
            recorder.write(event)
    out = tmp_path / "s.md"
    out.write_text("mine")
    assert main(["sessions", "export", "1", "-o", str(out), "--db", str(db)]) == 2
    assert "--force" in capsys.readouterr().err and out.read_text() == "mine"
    assert main(["sessions", "export", "1", "-o", str(out), "--force", "--db", str(db)]) == 0
    assert out.read_text() != "mine"


@pytest.mark.parametrize("tail", ["", "-wal", "-shm"])
def test_export_over_the_session_database_itself_is_refused_even_with_force(db, capsys, tail):
    """`sessions export 1 -o sessions.db --force` replaced every session with one session's Markdown."""
    from app.recorder import SessionRecorder

    with SessionStore(db) as store, SessionRecorder(store) as recorder:
        for event in fake(1):
            recorder.write(event)
    target = db.with_name(db.name + tail)
    assert main(["sessions", "export", "1", "-o", str(target), "--force", "--db", str(db)]) == 2
    assert "it is the session database itself; nothing was written" in capsys.readouterr().err
    with SessionStore(db) as store:
        assert [s["id"] for s in store.list_sessions()] == [1]


@pytest.mark.parametrize(("output", "said"), [
    ("{tmp}", "cannot export to {tmp}: it is a folder; nothing was written. Give a file in it, e.g. "),
    ("", "-o was given an empty file name"),
])  # fmt: skip
def test_export_to_a_folder_or_no_name_says_so_with_or_without_force(db, tmp_path, capsys, output, said):
    """A folder read "already exists ... Add --force", and --force then said it was a folder; -o '' read
    "error:  already exists"."""
    from app.recorder import SessionRecorder

    with SessionStore(db) as store, SessionRecorder(store) as recorder:
        for event in fake(1):
            recorder.write(event)
    for force in ([], ["--force"]):
        assert main(["sessions", "export", "1", "-o", output.format(tmp=tmp_path), *force, "--db", str(db)]) == 2
        assert said.format(tmp=tmp_path) in capsys.readouterr().err


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["candidates"][0].update(id=str(d["candidates"][0]["id"])), "should be int"),
        (lambda d: d["candidates"][1].update(parent=999), "not a candidate"),
        (lambda d: d["timeline"][0].update(kept=[999]), "not a candidate"),
        (lambda d: d["candidates"][0].update(step=0), "steps start at 1"),
        (lambda d: d["candidates"][0].update(score="high"), "should be float"),
        (lambda d: next(e for e in d["events"] if e["type"] == "candidate_text").update(id="7"), "candidate ids"),
        (lambda d: d["events"][0].update(search=7), "field 'search' should be an object, not int"),
        (lambda d: d["events"][0].update(model=1.5), "field 'model' should be str"),
        (lambda d: next(e for e in d["events"] if e["type"] == "candidate_text").update(tokens="4"),
         "field 'tokens' should be int"),
        (lambda d: next(e for e in d["events"] if e["type"] == "memory_snapshot").update(candidates=["x"]),
         "field 'candidates' should be a list of CandidateMemory, not list"),
        (lambda d: d["session"].update(h2d_bytes=10**30), "should be int"),
        (lambda d: d["session"].update(seconds=10**30), "should be float"),  # an integer no REAL can hold
        (lambda d: d["session"].update(emulated=[1]), "field 'emulated' should be int"),
        (lambda d: d["events"][0]["search"].update(width=[1]),
         "(run_started), search settings: SearchConfig's 'width' should be int, not [1]"),
        (lambda d: d["session"]["cache"].update(kv_budget_bytes="big"),
         "the session's cache settings: CacheConfig's 'kv_budget_bytes' should be int or null"),
        (lambda d: d["events"][0]["search"].update(seed=2**70),  # it said "should be int, not 1180591620717411303424"
         "SearchConfig's 'seed' should be int from -2**63 to 2**63-1 (what SQLite holds), not 1180591620717411303424"),
    ],
)
def test_a_corrupted_import_is_refused_whole_before_anything_is_written(db, tmp_path, capsys, edit, message):
    from app.recorder import SessionRecorder

    with SessionStore(db) as store, SessionRecorder(store) as recorder:
        for event in fake(2):
            recorder.write(event)
    exported = tmp_path / "s.json"
    assert main(["sessions", "export", "1", "-o", str(exported), "--db", str(db)]) == 0
    dump = json.loads(exported.read_text())
    edit(dump)
    exported.write_text(json.dumps(dump))
    assert main(["sessions", "import", str(exported), "--db", str(db)]) == 2
    assert message in capsys.readouterr().err
    with SessionStore(db) as store:
        assert len(store.list_sessions()) == 1


def _mutated(data, rng):
    """`data` with one to three values replaced by a value of another kind, or removed, anywhere in it."""
    def places(obj, at=()):
        yield at
        for key, value in (obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()):
            yield from places(value, (*at, key))

    chosen = [at for at in places(data) if at]
    for _ in range(rng.randint(1, 3)):
        *parents, key = rng.choice(chosen)
        holder = data
        try:
            for step in parents:
                holder = holder[step]
            if rng.random() < 0.3:
                del holder[key]
            else:
                holder[key] = rng.choice([None, 0, -1, 1.5, "", "x", [], {}, True, 10**30, [1], {"a": 1}])
        except (KeyError, IndexError, TypeError):  # an earlier change removed or replaced the place
            pass
    return data


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 2**32 - 1))
def test_a_damaged_export_is_refused_or_imports_a_session_every_view_can_read(tmp_path, capsys, seed):
    """Import checks every value: before, a wrong type in an event or an integer past SQLite's range imported
    (or raised out of main), and the session's export, `sessions show` and the window then raised."""
    import copy
    import random
    import tempfile

    from app.export import render_session
    from app.recorder import SessionRecorder

    exported = tmp_path / "d.json"
    db = Path(tempfile.mkdtemp(dir=tmp_path)) / "s.db"  # a fresh database per example: Hypothesis repeats seeds
    if not exported.exists():
        with SessionStore(tmp_path / "source.db") as store, SessionRecorder(store) as recorder:
            for event in fake(2):
                recorder.write(event)
        assert main(["sessions", "export", "1", "-o", str(exported), "--db", str(tmp_path / "source.db")]) == 0
    damaged = tmp_path / f"d{seed}.json"
    damaged.write_text(json.dumps(_mutated(copy.deepcopy(json.loads(exported.read_text())), random.Random(seed))))
    code = main(["sessions", "import", str(damaged), "--db", str(db)])
    err = capsys.readouterr().err
    assert code in (0, 2) and "Traceback" not in err
    with SessionStore(db) as store:
        if code == 2:
            assert err.count("beamwise: error:") == 1 and store.list_sessions() == []
        else:
            (row,) = store.list_sessions()
            for fmt in ("md", "html", "json"):
                assert render_session(store, row["id"], fmt)
            assert main(["sessions", "show", str(row["id"]), "--db", str(db)]) == 0


def test_markdown_export_makes_model_html_inert(db, capsys):
    from app.export import render_session
    from app.recorder import SessionRecorder

    with SessionStore(db) as store:
        with SessionRecorder(store) as recorder:
            for event in fake(1, "<script>alert(1)</script> <img src=x onerror=alert(2)>"):
                recorder.write(event)
        text = render_session(store, 1, "md")
    assert "<script>" not in text and "<img" not in text and "&lt;script&gt;" in text


def test_a_store_that_cannot_be_written_is_opened_read_only_and_says_which_folder(db, capsys, monkeypatch):
    """The same path as a read-only folder, for machines where the tests run as root (permissions ignored)."""
    with SessionStore(db) as store:
        store.create_session({"question": "q", "status": "finished"})
    monkeypatch.setattr(app.store, "writable", lambda path: False)
    assert main(["sessions", "list", "--db", str(db)]) == 0
    assert main(["sessions", "delete", "1", "--yes", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert f"the folder {db.parent}" in err and "can only be read" in err and err.count("\n") == 1
    with SessionStore(db) as store:
        assert store.read_only and len(store.list_sessions()) == 1


@pytest.mark.skipif(os.name == "nt", reason="POSIX signals")
def test_the_first_ctrl_c_asks_the_run_to_stop_and_is_recorded_as_cancelled(db, capsys):
    import signal
    import threading

    from app.run_cli import _ctrl_c_cancels, _open_recorder
    from app.run_output import record
    from engine import events as ev

    stop = threading.Event()
    with _ctrl_c_cancels(stop):
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.is_set()  # no KeyboardInterrupt: the search stops at its next step boundary
    recorder = _open_recorder(type("Args", (), {"no_save": False, "db": str(db)})())
    for event in fake(2):
        record(recorder, ev.RunCancelled(step=1) if event.type == "run_finished" else event)
    recorder.close()
    recorder.store.close()
    with SessionStore(db) as store:
        assert store.list_sessions()[0]["status"] == "cancelled"  # the window's name for the same thing


def test_a_cancelled_run_says_what_it_kept_and_which_session_holds_it(db, capsys):
    """The first Ctrl+C said "cancelling after this step", but the search stops within its step and drops it; and
    no line named the session the cancelled run was recorded as (a finished run's last line does)."""
    import signal

    from app.run_cli import _drive, _open_recorder
    from engine import events as ev

    args = type("Args", (), {"no_save": False, "db": str(db), "json": False})()

    def events(should_stop):
        for event in fake(3):
            yield event
            if event.type == "step_selected":  # Ctrl+C during step 2
                os.kill(os.getpid(), signal.SIGINT)
                assert should_stop()
                yield ev.RunCancelled(step=event.step)
                return

    assert _drive(args, _open_recorder(args), events) == 130
    err = capsys.readouterr().err
    assert "stopping: the step in progress is dropped, the steps chosen so far are kept" in err
    assert err.rstrip().splitlines()[-1] == "beamwise: recorded as session 1, cancelled after step 1"
    with SessionStore(db) as store:
        assert store.get_session(1)["status"] == "cancelled"
