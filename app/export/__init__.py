"""Session export and import: the lossless JSON dump, and a Markdown transcript and a self-contained HTML page
rendered from the session's `SessionModel` (app/export/report.py)."""

from __future__ import annotations

from app.export.dump import SessionFileInvalid, import_session, session_dump
from app.export.files import (
    FORMATS,
    ExportError,
    default_file_stem,
    export_session,
    format_of_name,
    refuse_the_database,
    render_session,
    write_atomically,
)
from app.export.report import Report, session_report

__all__ = [
    "FORMATS",
    "ExportError",
    "Report",
    "SessionFileInvalid",
    "default_file_stem",
    "export_session",
    "format_of_name",
    "import_session",
    "refuse_the_database",
    "render_session",
    "session_dump",
    "session_report",
    "write_atomically",
]
