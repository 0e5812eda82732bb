"""Help > Keyboard shortcuts: every menu action's keys, read from the menus themselves (so the list cannot go
stale), then the keys that belong to the tree and the Models tab."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QMenuBar, QMessageBox, QWidget

WIDGET_KEYS = [("Ctrl+= / Ctrl+- / Ctrl+wheel", "Tree > zoom in / out"), ("arrows, Page Up/Down", "Tree > scroll"),
               ("click a box", "Tree > its details; hover a box: its path from the prompt lights up"),
               ("Enter in the question", "new line (Ctrl+Enter runs)"),
               ("Enter in Models > Repository", "Models > Pull"), ("Delete in Models", "Models > Remove…")]


def menu_shortcuts(menus: QMenuBar) -> list[tuple[str, str]]:
    """(keys, "Menu > Action") for every action of every menu, then WIDGET_KEYS."""
    rows = []
    for menu_action in menus.actions():
        for action in menu_action.menu().actions():
            if not action.isSeparator():
                keys = " or ".join(k.toString(QKeySequence.SequenceFormat.NativeText) for k in action.shortcuts())
                rows.append((keys, f"{menu_action.text().replace('&', '')} > {action.text().replace('&', '')}"))
    return rows + WIDGET_KEYS


def shortcuts_box(parent: QWidget, rows: list[tuple[str, str]]) -> QMessageBox:
    table = "".join(f"<tr><td><b>{html.escape(keys)}</b>&nbsp;&nbsp;</td><td>{html.escape(what)}</td></tr>"
                    for keys, what in rows)
    box = QMessageBox(QMessageBox.Icon.NoIcon, "Keyboard shortcuts", f"<table>{table}</table>",
                      QMessageBox.StandardButton.Close, parent)
    box.setTextFormat(Qt.TextFormat.RichText)
    return box
