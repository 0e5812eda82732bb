"""Session export and import: a Markdown transcript, lossless JSON, and a self-contained HTML page.

Files are written to a temporary file in the target folder and then moved into place, so a
failed export never leaves a half-written file behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from app.store import SCHEMA_VERSION, SessionStore
from engine import events as ev
from engine.errors import BeamwiseError, format_bytes

FORMATS = ("md", "json", "html")
FILE_FORMAT = "beamwise-session"
FILE_VERSION = 1
PRIVATE_SESSION_KEYS = ("id", "pid", "host")  # meaningless on another machine or in another db


class ExportError(BeamwiseError):
    """The export file could not be written."""


class SessionFileInvalid(BeamwiseError):
    """A file given to import is not a Beamwise session export this version can read."""

    hint = "Import a .json file written by `beamwise sessions export ID --format json`."


# ---------------------------------------------------------------- the lossless dump


def session_dump(store: SessionStore, session_id: int) -> dict[str, Any]:
    """Everything recorded for one session as plain JSON data (ids local to the db left out)."""
    session = {k: v for k, v in store.get_session(session_id).items() if k not in PRIVATE_SESSION_KEYS}
    strip = ("session_id",)
    return {
        "format": FILE_FORMAT,
        "version": FILE_VERSION,
        "schema_version": SCHEMA_VERSION,
        "session": session,
        "candidates": [{k: v for k, v in row.items() if k not in strip} for row in store.candidates(session_id)],
        "timeline": [{k: v for k, v in row.items() if k not in strip} for row in store.timeline(session_id)],
        "events": store.event_dicts(session_id),
    }


def chosen_path(dump: dict[str, Any]) -> list[dict]:
    """The answer's candidates, first step first: the recorded path, else the best beam of the last step."""
    by_id = {c["id"]: c for c in dump["candidates"]}
    ids = list(dump["session"].get("path") or [])
    if not ids and dump["timeline"] and dump["timeline"][-1]["kept"]:
        node = dump["timeline"][-1]["kept"][0]
        while node is not None and node in by_id:
            ids.insert(0, node)
            node = by_id[node]["parent"]
    return [by_id[i] for i in ids if i in by_id]


# ---------------------------------------------------------------- Markdown


def render_markdown(dump: dict[str, Any]) -> str:
    s = dump["session"]
    lines = [f"# {_md_line(s['title'])}", "", "## Question", "", *_quote(s["question"]), ""]
    lines += ["## Run", "", f"- Model: {s['model']}", f"- Verifier: {s['verifier']}", f"- Device: {s['device']}",
              f"- Policy: {s['policy']}, KV budget {_bytes(s['kv_budget_bytes'])}",
              f"- Status: {s['status']}" + (f" ({s['error']})" if s.get("error") else ""),
              f"- Started: {s['created']}; {s['steps']} steps, {s['candidates']} candidates, "
              f"{s['candidate_tokens']} candidate tokens, {s['seconds'] or 0:.2f} s",
              f"- Search: {_settings(s['search'])}", f"- Cache: {_settings(s['cache'])}", ""]
    lines += ["## Chosen path", ""]
    path = chosen_path(dump)
    by_step: dict[int, list[dict]] = {}
    for c in dump["candidates"]:
        by_step.setdefault(c["step"], []).append(c)
    for node in path:
        lines += [f"### Step {node['step']} (candidate {node['id']}, score {_score(node['score'])}, "
                  f"path {_score(node['aggregate'])})", "", *_quote(node["text"]), ""]
        others = sorted((c for c in by_step.get(node["step"], []) if c["id"] != node["id"]),
                        key=lambda c: -(c["score"] if c["score"] is not None else -1))
        if others:
            lines.append("Alternatives:")
            lines += [f"- {c['id']} ({c['state']}, {_score(c['score'])}): {_md_line(_brief(c['text']))}"
                      for c in others[:6]]
            if len(others) > 6:
                lines.append(f"- … and {len(others) - 6} more")
            lines.append("")
    if not path:
        lines += ["No step finished.", ""]
    lines += ["## Answer", "", *(_quote(s["answer"]) if s.get("answer") else ["(no answer: the run did not finish)"]),
              "", "## Memory and PCIe", "", *_memory_summary(dump)]
    return "\n".join(lines) + "\n"


def _memory_summary(dump: dict[str, Any]) -> list[str]:
    s, steps = dump["session"], dump["timeline"]
    peak = max((t["peak_device_bytes"] or 0 for t in steps), default=0)
    lines = [f"Host to device {_bytes(s['h2d_bytes'])}, device to host {_bytes(s['d2h_bytes'])}, "
             f"peak KV on the device {_bytes(peak)} of {_bytes(s['kv_budget_bytes'])}"
             + (" (emulated device)" if s.get("emulated") else "") + ".", ""]
    if steps:
        lines += ["| step | groups | H2D | D2H | KV on device | KV on host | stall |", "|---|---|---|---|---|---|---|"]
        lines += [f"| {t['step']} | {t['groups']} | {_bytes(t['step_h2d_bytes'])} | {_bytes(t['step_d2h_bytes'])} | "
                  f"{_bytes(t['device_bytes'])} | {_bytes(t['host_bytes'])} | "
                  f"{(t['stall_share'] or 0) * 100:.0f}% |" for t in steps]
    return lines


def _quote(text: str) -> list[str]:
    return [f"> {line}".rstrip() for line in text.strip("\n").split("\n")] if text.strip() else ["> (empty)"]


def _md_line(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _brief(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _bytes(value: int | None) -> str:
    return "-" if value is None else format_bytes(value)


def _settings(data: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in data.items()) or "-"


# ---------------------------------------------------------------- writing and importing


def render_session(store: SessionStore, session_id: int, fmt: str) -> str:
    """The export text of one session in `fmt` (md, json or html)."""
    if fmt not in FORMATS:
        raise ValueError(f"export format must be one of {', '.join(FORMATS)} (got {fmt!r}).")
    dump = session_dump(store, session_id)
    if fmt == "json":
        return json.dumps(dump, indent=1, ensure_ascii=False) + "\n"
    if fmt == "html":
        from app.export_html import render_html

        return render_html(dump)
    return render_markdown(dump)


def export_session(store: SessionStore, session_id: int, fmt: str, path: Path | str) -> Path:
    """Write one session to `path` in `fmt`; all or nothing. Returns the path written."""
    return write_atomically(Path(path), render_session(store, session_id, fmt))


def write_atomically(path: Path, text: str) -> Path:
    """Write to a temporary file next to `path`, then replace: readers never see half a file."""
    folder = path.parent
    if path.is_dir():
        raise ExportError(f"cannot export to {path}: it is a folder.", hint="Give a file name, e.g. session.md.")
    if not folder.is_dir():
        raise ExportError(f"cannot export to {path}: the folder {folder} does not exist.",
                          hint="Create the folder first or choose another one.")
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=folder)
    except OSError as error:
        raise ExportError(f"cannot write to the folder {folder} ({error.strerror or error}).",
                          hint="Choose a folder you can write to, such as your Documents folder.") from error
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        if os.name != "nt":
            tmp.chmod(0o644)
        os.replace(tmp, path)
    except OSError as error:
        tmp.unlink(missing_ok=True)
        raise ExportError(f"cannot write {path} ({error.strerror or error}); nothing was written.",
                          hint="Check free disk space and that the file is not open in another program.") from error
    return path


def import_session(store: SessionStore, path: Path | str) -> int:
    """Add the session in a JSON export to the store, in one transaction; returns its new id."""
    dump = _read_dump(Path(path))
    session = dict(dump["session"])
    if session.get("status") == "running":
        session["status"] = "interrupted"  # nothing is recording it any more
    session["emulated"] = None if session.get("emulated") is None else int(session["emulated"])
    (session,) = _checked_rows(store, "sessions", [session], path)
    candidates = _checked_rows(store, "candidates", dump["candidates"], path)
    timeline = _checked_rows(store, "steps", dump["timeline"], path)
    try:
        event_rows = [{"seq": i, "type": data["type"], "data": json.dumps(ev.to_dict(ev.from_dict(data)))}
                      for i, data in enumerate(dump["events"])]
    except (KeyError, TypeError, ValueError) as error:
        raise SessionFileInvalid(f"{path} has an event this Beamwise cannot read ({error!r}).") from error
    with store.transaction() as conn:
        sid = store.insert_session(conn, session)
        store.insert_rows(conn, "candidates", [{**c, "session_id": sid} for c in candidates])
        store.insert_rows(conn, "steps", [{**t, "session_id": sid, **{k: json.dumps(t.get(k) or [])
                                          for k in ("beams", "kept", "pruned")}} for t in timeline])
        store.insert_rows(conn, "events", [{**e, "session_id": sid} for e in event_rows])
    return sid


def _read_dump(path: Path) -> dict[str, Any]:
    try:
        dump = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise SessionFileInvalid(f"cannot read {path} ({error.strerror or error}).") from error
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise SessionFileInvalid(f"{path} is not a Beamwise session export (not valid JSON: {error}).") from error
    if not isinstance(dump, dict) or dump.get("format") != FILE_FORMAT:
        raise SessionFileInvalid(f"{path} is not a Beamwise session export (no \"format\": \"{FILE_FORMAT}\").")
    if not isinstance(dump.get("version"), int) or dump["version"] > FILE_VERSION:
        raise SessionFileInvalid(f"{path} was written by a newer Beamwise (export version {dump.get('version')}).",
                                 hint="Update Beamwise to import it.")
    for key, kind in (("session", dict), ("candidates", list), ("timeline", list), ("events", list)):
        if not isinstance(dump.get(key), kind):
            raise SessionFileInvalid(f"{path} is missing its {key!r} section.")
    if not dump["session"].get("question") or not dump["session"].get("created"):
        raise SessionFileInvalid(f"{path} has a session without a question or creation time.")
    return dump


def _checked_rows(store: SessionStore, table: str, rows: list[Any], path: Path | str) -> list[dict]:
    """Rows with one shared set of known columns (keys become SQL column names); unknown fields are refused."""
    known = set(store.db[table].columns_dict)
    keys: set[str] = set()
    for row in rows:
        if not isinstance(row, dict):
            raise SessionFileInvalid(f"{path} has a {table} entry that is not an object.")
        keys |= set(row)
    unknown = keys - known
    if unknown:
        raise SessionFileInvalid(f"{path} has unknown {table} fields: {', '.join(sorted(map(str, unknown)))}.")
    return [{k: row.get(k) for k in sorted(keys)} for row in rows]
