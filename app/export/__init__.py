"""Session export and import: the lossless JSON dump, a Markdown transcript and a self-contained HTML page."""

from __future__ import annotations

from app.export.dump import SessionFileInvalid, chosen_path, import_session, session_dump
from app.export.files import FORMATS, ExportError, export_session, render_session, write_atomically

__all__ = [
    "FORMATS",
    "ExportError",
    "SessionFileInvalid",
    "chosen_path",
    "export_session",
    "import_session",
    "render_session",
    "session_dump",
    "write_atomically",
]
