"""What sits on the tree view's edges: Collapse pruned / Fit / Follow above the nodes, the legend below them."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtWidgets import QGraphicsView, QHBoxLayout, QToolButton, QWidget

from app.gui.palette import TreeLegend


class TreeControls(QWidget):
    """The view's buttons; `follow_button` and `collapse_button` are checkable and call back when toggled."""

    def __init__(self, parent: QWidget, *, follow: Callable[[bool], None], fit: Callable[[], None],
                 collapse: Callable[[bool], None]) -> None:
        super().__init__(parent)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        self.follow_button = QToolButton(text="Follow", checkable=True, checked=True)
        self.follow_button.setToolTip("Keep the newest step in view (turns off when you scroll or drag)")
        self.follow_button.toggled.connect(follow)
        fit_button = QToolButton(text="Fit")
        fit_button.setToolTip("Show the whole tree (Ctrl+0)")
        fit_button.clicked.connect(fit)
        self.collapse_button = QToolButton(text="Collapse pruned", checkable=True)
        self.collapse_button.setToolTip("Hide pruned candidates and branches that led nowhere (Ctrl+Shift+C)")
        self.collapse_button.toggled.connect(collapse)
        for button in (self.collapse_button, fit_button, self.follow_button):
            row.addWidget(button)


LEGEND_SHARE = 4  # the whole legend takes at most 1/4 of the view's height; on a shorter view it is one line


def place(view: QGraphicsView, controls: QWidget, legend: TreeLegend) -> None:
    """Margins so that neither covers a node: the controls above the viewport, the legend below it. At 1024x640
    the wrapped legend took most of the tree's 220 px and no box could be read: there it goes compact."""
    legend.fit_width(max(200, view.width() - 24), view.height() // LEGEND_SHARE)
    controls.adjustSize()
    top = controls.height() + 8
    view.setViewportMargins(0, top, 0, legend.height() + 8)
    area = view.viewport().geometry()
    legend.move(area.left() + 4, area.bottom() + 4)
    controls.move(area.right() - controls.width() - 8, area.top() - top + 4)
    legend.raise_()
    controls.raise_()
