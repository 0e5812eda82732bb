"""The window's Save dialog for an export: the file and the format, chosen as `sessions export -o` takes them."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QMessageBox, QWidget

from app.export import format_of_name

EXPORT_FILTERS = {"md": "Markdown (*.md)", "html": "Web page (*.html)", "json": "JSON, can be imported (*.json)"}


def ask_export_target(parent: QWidget, suggested: str) -> tuple[Path, str] | None:
    """Ask where to save an export: (the file, its format), or None when cancelled. As `sessions export -o NAME`
    does, the format is the one the name's suffix says (app/export/files.py `format_of_name`), else the chosen
    filter's, and a name with a suffix of its own is written as typed: notes.txt holds Markdown (it became
    notes.txt.md). Only a name without a suffix (notes; "report 1.5") gets the format's, and the dialog, which
    checked the name as typed, did not ask about that file: asked here before it is replaced."""
    name, chosen = QFileDialog.getSaveFileName(parent, "Export session", suggested, ";;".join(EXPORT_FILTERS.values()))
    if not name:
        return None
    path = Path(name)
    fmt = format_of_name(path) or next((f for f, label in EXPORT_FILTERS.items() if label == chosen), "md")
    if has_suffix(path):
        return path, fmt
    path = path.with_name(f"{path.name}.{fmt}")
    if path.exists() and QMessageBox.question(
            parent, "Export session", f"{path.name} already exists.\n\nReplace it?",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
            QMessageBox.StandardButton.No) != QMessageBox.StandardButton.Yes:
        return None
    return path, fmt


def has_suffix(path: Path) -> bool:
    """Whether the name ends in a suffix of its own (.txt, .md, .v2): letters and digits, not digits alone, so the
    dot of "report 1.5" or "Dr. Who" starts none."""
    tail = path.suffix[1:]
    return tail.isalnum() and not tail.isdigit()
