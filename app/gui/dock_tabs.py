"""The window's panels by keyboard: a covered tab's contents hidden, so Tab skips them, and View's Ctrl+1 … that
bring a panel to the front with the keyboard focus in it."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QApplication, QDockWidget, QWidget


def hide_when_covered(dock: QDockWidget) -> None:
    """Qt moves the docks behind another's tab off the screen but keeps them visible: Tab walked from Settings
    into the Sessions and Models tabs behind it, the focus on controls nobody could see. The dock's contents are
    hidden while it is covered or closed (and a shown Sessions tab lists again, as its showEvent means to)."""
    contents = dock.widget()
    policy = contents.sizePolicy()
    policy.setRetainSizeWhenHidden(True)  # hidden, it still sizes its dock: the tabs keep their width
    contents.setSizePolicy(policy)
    dock.visibilityChanged.connect(contents.setVisible)


def panel_action(dock: QDockWidget, text: str, keys: str) -> QAction:
    """View's entry for `dock`, checked while the panel is open. Qt's own toggle closed a panel that was covered
    by another tab, so Ctrl+2 could never show Sessions behind Settings, and a toggle on "in front" closed Node
    details, the Transcript and the charts, always in view, instead of moving the focus there: this one brings the
    panel to the front with the focus in it, and closes it only when the focus is in it already (pressed again)."""
    action = QAction(text, dock.parent(), checkable=True)
    action.setShortcut(QKeySequence(keys))
    action.setChecked(not dock.isHidden())
    dock.toggleViewAction().toggled.connect(action.setChecked)  # closed by its own button, or restored

    def triggered() -> None:
        if holds_focus(dock):
            dock.close()
        else:
            dock.show()
            dock.raise_()
            focus_first(dock.widget())
        action.setChecked(not dock.isHidden())

    action.triggered.connect(triggered)
    return action


def holds_focus(dock: QDockWidget) -> bool:
    """Whether the keyboard focus is in `dock`'s contents, shown and in front."""
    focus = QApplication.focusWidget()
    contents = dock.widget()
    return (focus is not None and not dock.isHidden() and not contents.isHidden()
            and (focus is contents or contents.isAncestorOf(focus)))


def focus_first(widget: QWidget) -> None:
    """The keyboard focus to the first control inside `widget` that Tab reaches, else to `widget` itself: with
    none (the settings greyed while a search runs, the charts before they are built) the focus stayed where it
    was, so the panel's shortcut neither focused it nor, pressed again, closed it."""
    candidate = widget.nextInFocusChain()
    while candidate is not widget:
        if (widget.isAncestorOf(candidate) and candidate.isVisible() and candidate.isEnabled()
                and candidate.focusPolicy() & Qt.FocusPolicy.TabFocus):
            candidate.setFocus(Qt.FocusReason.ShortcutFocusReason)
            return
        candidate = candidate.nextInFocusChain()
    widget.setFocus(Qt.FocusReason.ShortcutFocusReason)
