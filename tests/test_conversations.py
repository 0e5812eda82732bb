"""Conversations: migration m003 on an old database, `beamwise run --session ID` end to end, the one-line
refusals, a follow-up journalled under a held lock, and a rerun that branches."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

import app.store
from app.cli import main
from app.conversations import FollowUpRefused, follow_up_of, history, line_of, list_conversations
from app.recorder import SessionRecorder
from app.store import SCHEMA_VERSION, SessionStore
from benchmarks.fake_search import fake_run
from engine import events as ev
from engine.config import ModelSpec, SearchConfig
from engine.models import load_model
from engine.search import SYSTEM_PROMPT
from tests.test_faults import HeldLock

TINY = ["--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2", "--step-tokens", "4", "--max-steps", "2"]
OLD_DB = Path(__file__).parent / "data" / "sessions_m001.db"


@pytest.fixture
def db(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(app.store, "DEFAULT_BUSY_TIMEOUT", 0.2)
    return tmp_path / "s.db"


def record(store: SessionStore, question: str, previous: int | None = None, end: str = "finished") -> int:
    recorder = SessionRecorder(store, previous=previous)
    sent = ()  # what a run following `previous` is sent (any end: the tests follow cancelled turns too)
    if previous is not None:
        before = store.get_session(previous)
        sent = (*history(store, previous), (before["question"], before["answer"] or ""))
    for event in fake_run(question, SearchConfig(beams=2, width=2, max_steps=2)):
        if event.type == "run_finished" and end == "running":  # this process's run, still going
            break
        if event.type == "run_finished" and end == "cancelled":
            event = ev.RunCancelled(step=1)
        recorder.write(dataclasses.replace(event, history=sent) if isinstance(event, ev.RunStarted) else event)
    return recorder.session_id


def test_m003_makes_every_old_session_a_one_turn_conversation(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    shutil.copy(OLD_DB, path)
    with SessionStore(path) as store:
        assert store.schema_version == SCHEMA_VERSION == 4  # m004 too: tests/test_conversation_ids.py
        assert [r["name"] for r in store.db["migrations"].rows][2] == "m003_conversations"
        sessions = store.list_sessions()
        assert sessions and all(s["conversation_id"] == s["id"] and s["turn"] == 1 and s["previous_id"] is None
                                for s in sessions)
        assert all(line_of(store, s["id"]) == [store.get_session(s["id"])] for s in sessions)
        listed = list_conversations(store)
        assert sorted(c["id"] for c in listed) == sorted(s["id"] for s in sessions)
        assert {c["turns"] for c in listed} == {1}
        follow = record(store, "And then?", previous=sessions[0]["id"])  # an old session takes a follow-up
        assert store.get_session(follow)["turn"] == 2
    with SessionStore(path) as again:  # reopening applies nothing twice
        assert len(list(again.db["migrations"].rows)) == 4


def test_turns_history_branches_and_listing() -> None:
    with SessionStore(memory=True) as store:
        first = record(store, "What is 2+3?")
        second = record(store, "And times 4?", previous=first)
        third = record(store, "Halve it.", previous=second)
        other = record(store, "Something else")
        assert [s["turn"] for s in line_of(store, first)] == [1, 2, 3]
        assert {s["conversation_id"] for s in line_of(store, third)} == {first}
        answers = {sid: store.get_session(sid)["answer"] for sid in (first, second)}
        assert history(store, third) == [("What is 2+3?", answers[first]), ("And times 4?", answers[second])]
        assert follow_up_of(store, first) == (third, [*history(store, third), ("Halve it.",
                                                                               store.get_session(third)["answer"])])
        rows = {c["id"]: c for c in list_conversations(store)}
        assert set(rows) == {third, other} and rows[third]["turns"] == 3 and rows[other]["turns"] == 1
        assert [c["id"] for c in list_conversations(store, "times 4")] == [third]  # any turn matches
        again = record(store, "And times 4?", previous=first)  # turn 2 run again: a branch that is now newest
        assert [s["id"] for s in line_of(store, again)] == [first, again]
        assert [s["id"] for s in line_of(store, third)] == [first, second, third]  # the old branch is kept
        assert follow_up_of(store, first)[0] == again  # from a shared turn: the newest line
        assert follow_up_of(store, third)[0] == third  # from a turn of the old branch: that branch
        assert list_conversations(store, "Halve")[0]["turns"] == 2  # listed by its newest line
        assert history(store, again) == history(store, second)


def test_cli_follow_up_end_to_end(db: Path, capsys) -> None:
    assert main(["run", "What is 2+3?", *TINY, "--db", str(db)]) == 0
    assert main(["run", "--session", "1", "And times 4?", *TINY, "--db", str(db), "--json"]) == 0
    captured = capsys.readouterr()
    assert "follow-up: turn 2 of the conversation of session 1" in captured.err
    started = next(line for line in captured.out.splitlines() if '"run_started"' in line)
    with SessionStore(db) as store:
        one, two = store.get_session(1), store.get_session(2)
        assert (two["conversation_id"], two["turn"], two["previous_id"]) == (1, 2, 1)
        assert store.events(2)[0].history == (("What is 2+3?", one["answer"]),)
        assert ev.from_dict(json.loads(started)).history == (("What is 2+3?", one["answer"]),)
        tiny = load_model(ModelSpec("synthetic:tiny-llama"))
        expected = len(tiny.encode_chat("And times 4?", SYSTEM_PROMPT, [("What is 2+3?", one["answer"])]))
        assert store.events(2)[1].prompt_tokens == expected  # the prompt held the whole conversation
    assert main(["run", "--session", "1", "Halve it.", *TINY, "--db", str(db)]) == 0  # the id of any turn
    with SessionStore(db) as store:
        assert [s["turn"] for s in line_of(store, 3)] == [1, 2, 3] and store.get_session(3)["previous_id"] == 2


def test_cli_follow_up_refusals_are_one_line(db: Path, capsys) -> None:
    SessionStore(db).close()
    assert main(["run", "--session", "7", "x?", *TINY, "--db", str(db)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"beamwise: error: there is no session 7 in {db}. Run `beamwise sessions list --db {db}` to see "
                   "the ids."]  # the database it looked in: `sessions list` alone lists the default one
    with SessionStore(db) as store:
        cancelled = record(store, "What is 2+3?", end="cancelled")
    assert main(["run", "--session", str(cancelled), "x?", *TINY, "--db", str(db)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cancelled without an answer" in err[0] and "start a new conversation" in err[0]
    with SessionStore(db) as store:
        assert len(store.list_sessions()) == 1  # nothing was recorded


@pytest.mark.parametrize("command", ["run", "plan"])
def test_a_follow_up_in_a_database_that_is_not_there_makes_none(db: Path, capsys, command: str) -> None:
    """Before, `run --session 99 --db X` (and `plan`) made an empty database at a mistyped X, then said there was
    no session 99 and to run `beamwise sessions list`, which lists the default database, not X."""
    assert main([command, "--session", "99", "x?", *TINY, "--db", str(db)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"beamwise: error: there is no session database at {db}, so there is no session 99 to follow "
                   "up. Check the --db path, or leave --db out for the default database."]
    assert not db.exists()


def test_a_cancelled_later_turn_says_the_command_lines_way_on_and_it_works(db: Path, capsys) -> None:
    """The refusal named the window alone ("Run that turn again in the window"): headless, there was no way on
    said. Deleting that turn and asking again on the turn before it goes on with the conversation."""
    with SessionStore(db) as store:
        first = record(store, "What is 2+3?")
        cancelled = record(store, "And times 4?", previous=first, end="cancelled")
    assert main(["run", "--session", str(first), "x?", *TINY, "--db", str(db)]) == 2
    said = capsys.readouterr().err
    assert (f"Delete that turn (`beamwise sessions delete {cancelled} --db {db}`) and ask again with --session "
            f"{first}, run it again in the window, or start a new conversation") in said, said
    assert main(["sessions", "delete", str(cancelled), "--db", str(db), "--yes"]) == 0
    assert main(["run", "--session", str(first), "x?", *TINY, "--db", str(db)]) == 0
    with SessionStore(db) as store:
        assert [s["question"] for s in line_of(store, first)] == ["What is 2+3?", "x?"]


def test_a_follow_up_to_a_turn_still_running_is_told_to_wait(db: Path) -> None:
    """Before, a follow-up to a turn still running was told to 'Run that turn again', which would only repeat it."""
    with SessionStore(db) as store:
        running = record(store, "What is 2+3?", end="running")
        with pytest.raises(FollowUpRefused) as refused:
            follow_up_of(store, running)
    said = refused.value.user_message()
    assert "still running without an answer" in said and "Wait for that turn to finish (or stop it)" in said
    assert "Run that turn again" not in said


def test_a_follow_up_under_a_held_lock_is_journalled_and_imported_as_the_next_turn(db: Path, capsys) -> None:
    with SessionStore(db) as store:
        first = record(store, "What is 2+3?")
    lock = HeldLock(db)
    try:
        assert main(["run", "--session", str(first), "And times 4?", *TINY, "--db", str(db)]) == 0
    finally:
        lock.release()
    err = capsys.readouterr().err
    assert "is busy" in err and "journal" in err
    assert main(["sessions", "list", "--db", str(db)]) == 0
    with SessionStore(db) as store:
        follow = max(s["id"] for s in store.list_sessions())
        row = store.get_session(follow)
        assert (row["conversation_id"], row["turn"], row["previous_id"]) == (first, 2, first)


# ---------------------------------------------------------------- exports and `sessions show`


def test_a_conversation_exports_and_imports_whole(db: Path, capsys) -> None:
    from app.export import render_session, session_dump

    with SessionStore(db) as store:
        first = record(store, "What is 2+3?")
        second = record(store, "And times 4?", previous=first)
    out = db.parent / "talk.json"
    assert main(["sessions", "export", str(first), "-o", str(out), "--db", str(db)]) == 0  # any turn: all of it
    dump = json.loads(out.read_text(encoding="utf-8"))
    assert dump["version"] == 2 and [t["session"]["question"] for t in dump["turns"]] == ["What is 2+3?",
                                                                                        "And times 4?"]
    assert main(["sessions", "import", str(out), "--db", str(db)]) == 0
    assert "(turn 2 of a conversation of 2 turns" in capsys.readouterr().out
    with SessionStore(db) as store:
        again = max(s["id"] for s in store.list_sessions())
        assert [s["turn"] for s in line_of(store, again)] == [1, 2]
        assert line_of(store, again)[0]["id"] not in (first, second)  # a conversation of its own
        assert session_dump(store, again) == session_dump(store, second)  # lossless, every turn
        assert store.events(again) == store.events(second)
        md = render_session(store, second, "md")
        assert md.startswith("# What is 2+3?\n\nA conversation of 2 turns.")  # the conversation's title, as listed
        assert "## Turn 1: What is 2+3?" in md and "## Turn 2: And times 4?" in md and "### Chosen path" in md
        page = render_session(store, first, "html")
        assert "<h2>Conversation</h2>" in page and "Turn 1 (this page)" in page and 'data-turn="0"' in page
        assert "And times 4?" in page
        single = record(store, "Alone")
        assert session_dump(store, single)["version"] == 1 and "turns" not in session_dump(store, single)
    assert main(["sessions", "show", str(second), "--db", str(db)]) == 0
    shown = capsys.readouterr().out
    assert f"turn 2 of 2 of conversation {first}" in shown
    assert "turn 1 (session" in shown and "<- this session" in shown
    assert main(["sessions", "list", "--db", str(db)]) == 0
    assert f"2 of #{first}" in capsys.readouterr().out


def test_an_export_with_a_bad_turn_imports_nothing(db: Path) -> None:
    from app.export import SessionFileInvalid, import_session, session_dump

    with SessionStore(db) as store:
        first = record(store, "What is 2+3?")
        record(store, "And times 4?", previous=first)
        dump = session_dump(store, first)
        dump["turns"][1]["events"].append({"type": "no_such_event"})
        bad = db.parent / "bad.json"
        bad.write_text(json.dumps(dump), encoding="utf-8")
        with pytest.raises(SessionFileInvalid, match="cannot read"):
            import_session(store, bad)
        assert len(store.list_sessions()) == 2


def test_a_turn_that_later_turns_follow_is_not_deleted(db: Path) -> None:
    from app.store_errors import StoreError

    with SessionStore(db) as store:
        first = record(store, "What is 2+3?")
        second = record(store, "And times 4?", previous=first)
        with pytest.raises(StoreError, match=f"session\\(s\\) {second} follow"):
            store.delete(first)
        assert len(store.list_sessions()) == 2
        store.delete(second)  # newest first works
        store.delete(first)
        assert store.list_sessions() == []


@pytest.mark.parametrize("change", ["reorder", "drop the first", "repeat the first", "another history"])
def test_an_export_whose_turns_do_not_follow_each_other_is_refused(db: Path, capsys, change) -> None:
    """Each turn's run_started says which turns its run was sent; a file whose turns disagree was imported."""
    with SessionStore(db) as store:
        first = record(store, "What is 2+3?")
        second = record(store, "And times 4?", previous=first)
        record(store, "And minus 1?", previous=second)
    out = db.parent / "talk.json"
    assert main(["sessions", "export", str(first), "-o", str(out), "--db", str(db)]) == 0
    dump = json.loads(out.read_text(encoding="utf-8"))
    turns = dump["turns"]
    if change == "another history":
        started = next(e for e in turns[1]["events"] if e["type"] == "run_started")
        started["history"] = [["What is 2+2?", turns[0]["session"]["answer"]]]
    dump["turns"] = {"reorder": [turns[1], turns[0], turns[2]], "drop the first": turns[1:],
                     "repeat the first": [turns[0], *turns]}.get(change, turns)
    out.write_text(json.dumps(dump), encoding="utf-8")
    capsys.readouterr()
    assert main(["sessions", "import", str(out), "--db", str(db)]) == 2
    assert "has turns that do not follow each other (one missing, repeated or moved)" in capsys.readouterr().err
    with SessionStore(db) as store:
        assert len(store.list_sessions()) == 3, "nothing was written"


def test_an_export_never_gives_an_import_its_session_ids(db: Path, capsys) -> None:
    """A hand-made file's "id": 2**63-1 was taken, and every later session got a random 63-bit id."""
    with SessionStore(db) as store:
        first = record(store, "What is 2+3?")
    out = db.parent / "one.json"
    assert main(["sessions", "export", str(first), "-o", str(out), "--db", str(db)]) == 0
    dump = json.loads(out.read_text(encoding="utf-8"))
    dump["session"].update(id=2**63 - 1, conversation_id=5, previous_id=first, pid=1, host="elsewhere")
    out.write_text(json.dumps(dump), encoding="utf-8")
    assert main(["sessions", "import", str(out), "--db", str(db)]) == 0
    with SessionStore(db) as store:
        imported = store.get_session(max(s["id"] for s in store.list_sessions()))
        assert imported["id"] == first + 1 and imported["previous_id"] is None and imported["host"] != "elsewhere"
        assert record(store, "Next?") == first + 2
