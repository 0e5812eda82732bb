"""The window's menus, each action with a keyboard shortcut, and Help > Keyboard shortcuts: every menu action's
keys read from the menus themselves (so the list cannot go stale), then the keys of the tree and the Models tab."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QMainWindow, QMenuBar, QMessageBox, QWidget

from app.gui.dock_tabs import panel_action

ABOUT = ("<b>Beamwise</b><p>Answers a question by step-wise beam search over a local language model, "
         "checks each step with a verifier, and offloads the KV cache to CPU memory, scheduling beams so "
         "that KV crosses PCIe as rarely as possible.</p><p>The tree shows every candidate step, its score, "
         "where its KV lives and the traffic it caused.</p>")

def about_text() -> str:
    """The About box: what Beamwise does, and the versions a bug report needs (read when the box opens)."""
    from app.version import version_line

    return f"{ABOUT}<p>{html.escape(version_line())}</p>"


WIDGET_KEYS = [("Tab / Shift+Tab", "the next / previous control (in a list or table the arrows choose a row)"),
               ("Ctrl+= / Ctrl+- / Ctrl+wheel", "Tree > zoom in / out"),
               ("Left / Right / Up / Down", "Tree > select the parent, first child, or box above / below"),
               ("Page Up/Down, Shift+arrows", "Tree > scroll"), ("Home / End", "Tree > show the prompt / best box"),
               ("click a box", "Tree > its details; hover a box: its path from the prompt lights up"),
               ("Enter in the question", "new line (Ctrl+Enter runs)"),
               ("Enter in the follow-up", "Search > Follow up"),
               ("Enter in Models > Repository", "Models > Pull"), ("Delete in Models", "Models > Remove…"),
               ("Enter / F2 / Delete in Sessions", "Sessions > Open / Rename / Delete…"),
               ("Esc in a dialog", "close it")]
DOCK_TEXTS = {"settings": "&Settings", "sessions": "S&essions", "models": "&Models", "details": "&Node details",
              "transcript": "&Transcript", "charts": "Memory and &PCIe"}  # View's toggles, one letter each
DOCK_KEYS = {name: f"Ctrl+{number}" for number, name in enumerate(DOCK_TEXTS, start=1)}  # fixed: README and F1 say
NO_SESSIONS = ("Sessions are not available: the session database could not be opened when Beamwise started (the "
               "warning then said why), so this window saves nothing. Fix the database or move it aside "
               "(`beamwise sessions move-aside --db FILE`), then start Beamwise again.")


def build_menus(window: QMainWindow, sessions_problem: str = NO_SESSIONS) -> None:
    """File, Search, View and Help of `window` (a MainWindow: its actions, docks and tree). Each panel keeps its
    key when another is absent; Sessions' key then says `sessions_problem` in the status bar."""
    bar = window.menuBar()
    file_menu = bar.addMenu("&File")
    file_menu.addAction(window.talk.new_action)
    window.export_action = file_menu.addAction("&Export session…", window.export_current)
    window.export_action.setShortcut(QKeySequence("Ctrl+E"))
    file_menu.addSeparator()
    file_menu.addAction("&Quit", window.close).setShortcut(QKeySequence("Ctrl+Q"))
    search_menu = bar.addMenu("&Search")
    search_menu.addAction(window.run_action)
    search_menu.addAction(window.stop_action)
    search_menu.addAction(window.talk.box.action)
    view_menu = bar.addMenu("&View")
    for name, keys in DOCK_KEYS.items():  # Ctrl+1 … brings each panel forward
        dock = window.docks.get(name)
        if dock is not None:
            view_menu.addAction(panel_action(dock, DOCK_TEXTS[name], keys))
        else:  # no database: Ctrl+2 says why rather than nothing (or another panel)
            absent = view_menu.addAction(DOCK_TEXTS[name], lambda: window.statusBar().showMessage(sessions_problem))
            absent.setShortcut(QKeySequence(keys))
    view_menu.addSeparator()
    tree = window.panels.tree
    view_menu.addAction("&Fit tree to view", tree.fit_to_view).setShortcut(QKeySequence("Ctrl+0"))
    collapse = view_menu.addAction("&Collapse pruned branches", tree.collapse_button.toggle)
    collapse.setShortcut(QKeySequence("Ctrl+Shift+C"))
    help_menu = bar.addMenu("&Help")
    keys = help_menu.addAction("&Keyboard shortcuts", window.show_shortcuts)
    keys.setShortcut(QKeySequence(QKeySequence.StandardKey.HelpContents))
    about = help_menu.addAction("&About Beamwise", lambda: QMessageBox.about(window, "About Beamwise", about_text()))
    about.setShortcut(QKeySequence("Shift+F1"))


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
    box.setDefaultButton(QMessageBox.StandardButton.Close)  # Enter and Esc both close it
    box.setEscapeButton(QMessageBox.StandardButton.Close)
    return box
