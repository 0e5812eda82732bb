"""Importing a conversation (a version 2 export) that one turn spoils: the refusal names the turn and the file's
own section; a file in another encoding says "save it as UTF-8", as a question file and a problem set do."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from app.export import SessionFileInvalid, import_session, session_dump
from app.store import SessionStore
from tests.test_conversations import record


@pytest.fixture
def store() -> SessionStore:
    return SessionStore(memory=True)


@pytest.fixture
def conversation(store: SessionStore) -> dict:
    """The export of a conversation of three turns."""
    first = record(store, "What is 2+3?")
    second = record(store, "And times 4?", previous=first)
    dump = session_dump(store, record(store, "Halve it.", previous=second))
    assert dump["version"] == 2 and len(dump["turns"]) == 3
    return dump


def refusal(store: SessionStore, tmp_path: Path, dump: dict, edit: Callable[[dict], object]) -> str:
    edit(dump)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(dump), encoding="utf-8")
    before = store.list_sessions()
    with pytest.raises(SessionFileInvalid) as info:
        import_session(store, path)
    assert store.list_sessions() == before  # nothing written
    return str(info.value).removeprefix(f"{path}")


@pytest.mark.parametrize(("edit", "said"), [
    (lambda d: d["turns"][1]["session"].update(steps="x"),
     ", turn 2: the session, field 'steps' should be int, not str ('x')."),  # was "sessions entry 1", every turn
    (lambda d: d["turns"][2]["candidates"][3].update(score="x"),
     ", turn 3: candidates entry 4, field 'score' should be float"),
    (lambda d: d["turns"][0]["timeline"][0].update(step="1"), ", turn 1: timeline entry 1, field 'step' should be"),
    (lambda d: d["turns"][1]["timeline"][0].update(extra=1), ", turn 2 has unknown timeline fields: extra."),
    (lambda d: d["turns"][2].pop("events"), ", turn 3 is missing its 'events' section."),
    (lambda d: d["turns"].__setitem__(1, []), ", turn 2 is not an object."),
    (lambda d: d["turns"][1]["session"].pop("question"), ", turn 2 has a session without a question"),
    (lambda d: d["turns"][2]["candidates"][0].update(parent=999), ", turn 3: candidate 1 has parent 999"),
    (lambda d: d["turns"][1]["events"].append({"type": "no_such_event"}), ", turn 2 has an event this Beamwise"),
])  # fmt: skip
def test_a_spoilt_turn_is_named(store: SessionStore, tmp_path: Path, conversation: dict, edit, said: str) -> None:
    assert refusal(store, tmp_path, conversation, edit).startswith(said)


def test_a_one_turn_export_names_no_turn(store: SessionStore, tmp_path: Path) -> None:
    dump = session_dump(store, record(store, "What is 2+3?"))
    assert dump["version"] == 1
    said = refusal(store, tmp_path, dump, lambda d: d["candidates"][1].update(score="x"))
    assert said.startswith(": candidates entry 2, field 'score' should be float")


def test_an_export_in_another_encoding_says_to_save_it_as_utf8(store: SessionStore, tmp_path: Path,
                                                                conversation: dict) -> None:
    """It said "not valid JSON: 'utf-8' codec can't decode byte 0xe4 in position ...", where a question file and
    a problem set say "save it as UTF-8"."""
    conversation["turns"][0]["session"]["question"] = "Wie viel ist 2+3? Bitte erklären."
    path = tmp_path / "latin1.json"
    path.write_bytes(json.dumps(conversation, ensure_ascii=False).encode("latin-1", "replace"))
    before = store.list_sessions()
    with pytest.raises(SessionFileInvalid) as info:
        import_session(store, path)
    said = str(info.value)
    assert "is not UTF-8 text (byte 0xe4 at offset " in said and "save it as UTF-8" in said
    assert "codec" not in said and "not valid JSON" not in said
    assert store.list_sessions() == before
