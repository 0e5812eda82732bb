"""Conversations: sessions linked as turns (migration m003), read from the store.

A session is one turn. Its row names its conversation (`conversation_id`, the first turn's
session id), its `turn` (1-based) and the turn it follows (`previous_id`). Running a turn again
follows the same turn as the original did, so a conversation can branch; its line is the chain
of turns that ends at its newest session, and that is the conversation a follow-up continues.
"""

from __future__ import annotations

from app.db_path import db_option
from app.session_sql import decode_session, newest_first, search_params, text_match
from app.store import SessionStore
from app.store_errors import StoreError
from engine.chat import Turn


class FollowUpRefused(StoreError):
    """The conversation cannot take a follow-up now: its last turn has no answer."""


def line_of(store: SessionStore, session_id: int) -> list[dict]:
    """The turns of `session_id`'s conversation, first turn first: the line through `session_id` that ends at
    the newest session it leads to."""
    start = store.get_session(session_id)
    by_id = _sessions_of(store, start["conversation_id"])
    for newest in sorted(by_id, reverse=True):
        line = _chain(by_id, newest)
        if any(row["id"] == session_id for row in line):
            return line
    return [start]


def runs_of_turns(store: SessionStore, line: list[dict]) -> list[list[dict]]:
    """For each turn of `line` (as `line_of` gives it), every run of that turn, oldest first: the sessions of the
    conversation that follow the same earlier turn. "Run again" of a later turn adds one (the conversation branches
    there); a turn run once is a list of itself. Each run opens the line through it (`line_of`)."""
    if not line:
        return []
    by_id = _sessions_of(store, line[0]["conversation_id"])
    return [[row] if row["previous_id"] is None else
            [run for run in by_id.values() if run["previous_id"] == row["previous_id"]] for row in line]


def history(store: SessionStore, session_id: int) -> list[Turn]:
    """The turns before `session_id` on its own chain, oldest first: what its prompt was built from."""
    chain = _chain(_sessions_of(store, store.get_session(session_id)["conversation_id"]), session_id)
    return [(row["question"], row["answer"] or "") for row in chain[:-1]]


def answered(row: dict) -> bool:
    """Whether the turn `row` (a store row) ended with an answer to follow up."""
    return row["status"] == "finished" and bool(row["answer"])


def follow_up_of(store: SessionStore, session_id: int) -> tuple[int, list[Turn]]:
    """Where a follow-up to `session_id`'s conversation goes: (the session it follows, the history its prompt
    holds). Raises SessionNotFound for a missing id and FollowUpRefused when the last turn has no answer."""
    last = line_of(store, session_id)[-1]
    if not answered(last):
        state = {"running": "still running", "interrupted": "was interrupted"}.get(last["status"], last["status"])
        again = "Run that turn again in the window"
        if last["previous_id"] is not None:  # the command line's way: the conversation goes on after the turn before
            again = (f"Delete that turn (`beamwise sessions delete {last['id']}{db_option(store.path)}`) and ask "
                     f"again with --session {last['previous_id']}, run it again in the window")
        if last["status"] == "running":  # it may yet answer: running it again would only duplicate it
            again = "Wait for that turn to finish (or stop it) and ask again"
        raise FollowUpRefused(
            f"the last turn of conversation {last['conversation_id']} (session {last['id']}, turn {last['turn']}) "
            f"{state} without an answer, so there is nothing to follow up.",
            hint=f"{again}, or start a new conversation (`beamwise run` without --session).")
    return last["id"], _through(store, last)


def list_conversations(store: SessionStore, search: str | None = None, limit: int | None = 200) -> list[dict]:
    """Each conversation's newest session (its largest id: ids only grow), newest first (the moment it was created,
    whatever its offset: `newest_first`), with `turns` (its turn: the length of its line) and `title` the
    conversation's: its first turn's (`conversation_title`), which a follow-up's own title never replaces. `search`
    matches the title, question or answer of any session of the conversation."""
    where, params = "", []
    if search and search.strip():
        where = f"AND s.conversation_id IN (SELECT m.conversation_id FROM sessions m WHERE {text_match('m.')})"
        params = search_params(search)
    sql = (f"SELECT s.*, coalesce(f.title, s.title) AS first_title FROM sessions s LEFT JOIN sessions f ON f.id = "
           f"s.conversation_id WHERE s.id = (SELECT max(id) FROM sessions WHERE conversation_id = "
           f"s.conversation_id) {where} ORDER BY {newest_first('s.')} LIMIT ?")
    rows = store.query(sql, [*params, -1 if limit is None else limit])
    return [_listed(row) for row in rows]


def _listed(row: dict) -> dict:
    """A row of `list_conversations`' query as listed: the newest turn's, titled by the first turn."""
    title = row.pop("first_title")
    return {**decode_session(row), "title": title, "turns": row["turn"]}


def conversation_title(store: SessionStore, session_id: int) -> str:
    """The title of `session_id`'s conversation: its first turn's (the session `conversation_id` names), the one
    the window lists and renames; the session's own where that turn is gone (a damaged database)."""
    session = store.get_session(session_id)
    rows = store.query("SELECT title FROM sessions WHERE id = ?", (session["conversation_id"],))
    return (rows[0]["title"] if rows else None) or session["title"]


def _sessions_of(store: SessionStore, conversation_id: int) -> dict[int, dict]:
    """Every session of a conversation, by id."""
    rows = store.query("SELECT * FROM sessions WHERE conversation_id = ? ORDER BY id", (conversation_id,))
    return {row["id"]: decode_session(row) for row in rows}


def _through(store: SessionStore, session: dict) -> list[Turn]:
    """The turns before `session` on its chain, then its own question and answer."""
    return [*history(store, session["id"]), (session["question"], session["answer"])]


def _chain(by_id: dict[int, dict], last: int) -> list[dict]:
    """The turns that end at session `last`, first turn first."""
    chain, seen, at = [], set(), by_id.get(last)
    while at is not None and at["id"] not in seen:  # a loop (a damaged database) ends where it closes
        seen.add(at["id"])
        chain.append(at)
        at = by_id.get(at["previous_id"]) if at["previous_id"] is not None else None
    return chain[::-1]
