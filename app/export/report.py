"""What the Markdown and HTML exports (and `beamwise sessions show`) read of a session: its `SessionModel`.

A stored session is replayed from its events into a `SessionModel`, the fold the window draws,
and read through app/session/rows.py, the rows the recorder stores; so an export shows what
the window shows. Only the columns the recorder sets itself (title, times, an interrupted
status) come from the session's row.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import app.formatting as fmt
from app.conversations import line_of
from app.session import SearchTree, SessionModel
from app.session.rows import candidate_rows, session_facts, session_settings, step_rows
from app.session.series import question_traffic
from app.store import SessionStore
from engine import events as ev

RECORDED_ONLY = ("title", "created", "finished", "status", "seconds")  # columns no event holds


@dataclass(frozen=True)
class Report:
    """One session as the exports show it: the session's columns, its candidates and steps, the chosen path."""

    session: dict[str, Any]
    candidates: list[dict[str, Any]]  # by step then id
    timeline: list[dict[str, Any]]  # one per finished step
    path: list[dict[str, Any]]  # the answer's candidates (or the best beam's so far), first step first
    tree: SearchTree  # laid out as the window lays it out
    by_step: dict[int, list[dict[str, Any]]]  # the candidates again, per step
    before_step_1: tuple[int, int] = (0, 0)  # H2D, D2H of the question's KV before step 1 (`question_traffic`)

    def alternatives(self, node: dict[str, Any]) -> list[dict[str, Any]]:
        """The other candidates of `node`'s step, best score first (unscored last)."""
        others = [c for c in self.by_step.get(node["step"], []) if c["id"] != node["id"]]
        return sorted(others, key=lambda c: -(c["score"] if c["score"] is not None else -1))

    def no_answer(self) -> str:
        """What stands where the answer would: a run that finished with a chosen path of no text (the model ended it
        at once) has none either, and was said not to have finished beside its status "finished"."""
        if self.session.get("status") == "finished":
            return "no answer: the chosen path has no text (the model ended it at once)"
        return "no answer: the run did not finish"

    def verifier_traffic(self) -> str:
        """The verifier's own KV traffic ('' when it moved none and ran on the device), as `run` prints it per step:
        the session's H2D and D2H totals are the generator's alone."""
        s = self.session
        search = s.get("search") if isinstance(s.get("search"), dict) else {}
        on_cpu = search.get("verifier_device") == "cpu"
        h2d, d2h = s.get("verifier_h2d_bytes") or 0, s.get("verifier_d2h_bytes") or 0
        if not (h2d or d2h or on_cpu):
            return ""
        where = "; the PRM ran on the CPU, its KV in CPU memory" if on_cpu else ""
        return f"verifier KV traffic H2D {h2d:,} B, D2H {d2h:,} B (apart from the generator's){where}"

    def kv_budget(self) -> str:
        """The KV budget as `beamwise run`'s first line gives it: the whole, and the generator's part where a
        verifier keeps KV (the row's `kv_budget_bytes` is the generator's part alone)."""
        s = self.session
        cache = s.get("cache") if isinstance(s.get("cache"), dict) else {}
        return fmt.kv_budget(s["kv_budget_bytes"], s.get("verifier_kv_budget_bytes") or 0, cache.get("kv_budget_bytes"))


def report_of(model: SessionModel, stored: dict[str, Any]) -> Report:
    """The report of a folded run; `stored` is its session row (for the recorder's own columns)."""
    session = dict(stored)
    if model.run.started is not None:  # an imported session may carry no events: its row is all there is
        session.update(session_settings(model), **session_facts(model))
        session.update({key: stored[key] for key in RECORDED_ONLY if key in stored})
        session["verifier_kv_budget_bytes"] = model.run.started.verifier_kv_budget_bytes
    # the verifier's KV traffic, which the session's H2D and D2H (the generator's) leave out, and where its KV was
    session["verifier_h2d_bytes"], session["verifier_d2h_bytes"] = model.series.verifier_h2d, model.series.verifier_d2h
    end = model.run.end
    session["context_note"] = fmt.context_full_text(end) if isinstance(end, ev.RunFinished) and end.context_full \
        else None  # the model's context filled the paths: said as `run` says it
    # the prefix cache's copies of the kept blocks after the last step: in the D2H total (session_facts), no step's
    session["prefix_kept_d2h_bytes"] = end.prefix_kept_d2h_bytes if isinstance(end, ev.RunFinished) else 0
    if isinstance(end, ev.RunFailed) and end.details:  # a fault: what its report needs
        session["error_details"] = end.details
    candidates = candidate_rows(model)
    by_id, by_step = {c["id"]: c for c in candidates}, {}
    for c in candidates:
        by_step.setdefault(c["step"], []).append(c)
    path = [by_id[i] for i in model.outline.best_path if i in by_id]
    timeline = step_rows(model)
    before = question_traffic(model.run.prefill, timeline[0] if timeline else None)
    return Report(session, candidates, timeline, path, model.tree, by_step, before)


def replayed(events: Iterable[object]) -> SessionModel:
    """A recorded run folded in one go, as the window opens a session."""
    model = SessionModel()
    model.apply_many(events)
    return model


def session_report(store: SessionStore, session_id: int) -> Report:
    return report_of(replayed(store.events(session_id)), store.get_session(session_id))


def conversation_reports(store: SessionStore, session_id: int) -> tuple[list[Report], int]:
    """The reports of every turn of `session_id`'s conversation (app/conversations.py), and which one it is."""
    line = [row["id"] for row in line_of(store, session_id)]
    return [session_report(store, sid) for sid in line], line.index(session_id)


def dump_report(dump: dict[str, Any]) -> Report:
    """The report of one turn of a session dump (app/export/dump.py), from the events it carries."""
    return report_of(replayed(ev.from_dict(data) for data in dump["events"]), dump["session"])
