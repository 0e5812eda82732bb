"""The live reasoning tree: a QGraphicsView adapting the session's `SearchTree`, one cached item per candidate.

Only the items of the node ids an event changed are created or updated, so one update costs
O(changed), not O(tree). Items paint themselves (score, first line, GPU/CPU fill bar, group,
PCIe bytes) and are cached in device coordinates; when zoomed far out they draw a plain box.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QPointF, Qt, QTimer, Signal
from PySide6.QtGui import QFocusEvent, QKeySequence, QPainter
from PySide6.QtWidgets import (
    QApplication,
    QGraphicsPathItem,
    QGraphicsScene,
    QGraphicsView,
    QToolTip,
    QWidget,
)

from app.gui import palette as pal
from app.gui.panel import SessionView
from app.gui.tree_items import COL_W, NODE_H, NODE_W, ROW_H, NodeItem
from app.gui.tree_overlay import TreeControls
from app.gui.tree_overlay import place as place_overlay
from app.gui.tree_scene import TreeScene, collapsed_ids, dropped_ids, newest_step
from app.gui.tree_text import KEYS_SPOKEN, spoken, tooltip
from app.session import ROOT_ID, Change, SearchTree, SessionModel
from app.session.model import RESET
from engine import events as ev

__all__ = ["COL_W", "NODE_H", "NODE_W", "ROOT_ID", "ROW_H", "NodeItem", "ReasoningTreeView"]  # re-exported

MIN_SCALE, MAX_SCALE, ZOOM_STEP = 0.03, 3.0, 1.25
READABLE_SCALE = 0.8  # at 1920x1080 a box's first line still reads at this zoom
_SCROLL_KEYS = frozenset({Qt.Key.Key_Up, Qt.Key.Key_Down, Qt.Key.Key_Left, Qt.Key.Key_Right, Qt.Key.Key_PageUp,
                          Qt.Key.Key_PageDown, Qt.Key.Key_Home, Qt.Key.Key_End})
_MOVES = frozenset({Qt.Key.Key_Up, Qt.Key.Key_Down, Qt.Key.Key_Left, Qt.Key.Key_Right})  # the selection, box to box
RELAYOUT_MS = 250  # collapsed, a step's new candidates are laid out at most this late (each layout is O(nodes))
_STEP_ENDS = frozenset({ev.RunStarted.type, ev.StepSelected.type, ev.RunFinished.type, ev.RunCancelled.type,
                        ev.RunFailed.type})  # what prunes, keeps or restarts: collapsed, laid out at once


class ReasoningTreeView(SessionView, QGraphicsView):
    """The live tree of the session's `SearchTree` (`.data`); each change redraws only the items it names.

    Follows the newest step until the user scrolls or drags; Fit / Follow resume it.
    Zoom: Ctrl+wheel, Ctrl+= / Ctrl+- / Ctrl+0 (fit). Click a node, or walk to it with the arrow keys:
    `node_selected(id)`.
    """

    node_selected = Signal(int)
    follow_changed = Signal(bool)

    def __init__(self, session: SessionModel | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._selected: int | None = None
        self._press_pos = None
        self.follow = True
        self.collapse_pruned = False
        self.hovered_path: list[int] = []  # the hovered node's path from the prompt, highlighted
        self._rows: dict[int, float] = {}  # collapsed: each shown node's row in the last compact layout
        self._relayout_timer = QTimer(self)
        self._relayout_timer.setSingleShot(True)
        self._relayout_timer.setInterval(RELAYOUT_MS)
        self._relayout_timer.timeout.connect(self._relayout_later)
        self.setScene(QGraphicsScene(self))
        # A BSP index finds the ~100 visible of thousands of items quickly; items only move while
        # their own step is generated, so the index stays cheap to keep.
        self.scene().setItemIndexMethod(QGraphicsScene.ItemIndexMethod.BspTreeIndex)
        self.drawing = TreeScene(self.scene())  # the boxes, edges, hover line and bounds, by node id
        self._items = self.drawing.items  # the boxes by node id (the drawing's dict, cleared in place)
        self.setOptimizationFlags(QGraphicsView.OptimizationFlag.DontSavePainterState
                                  | QGraphicsView.OptimizationFlag.DontAdjustForAntialiasing)
        self.setBackgroundBrush(pal.color(pal.BACKGROUND))
        self.setRenderHints(QPainter.RenderHint.Antialiasing | QPainter.RenderHint.TextAntialiasing)
        self.setDragMode(QGraphicsView.DragMode.ScrollHandDrag)
        self.setTransformationAnchor(QGraphicsView.ViewportAnchor.AnchorUnderMouse)
        self.setViewportUpdateMode(QGraphicsView.ViewportUpdateMode.SmartViewportUpdate)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.setAccessibleName("Reasoning tree")
        self.setAccessibleDescription(KEYS_SPOKEN)
        for bar in (self.horizontalScrollBar(), self.verticalScrollBar()):
            bar.actionTriggered.connect(lambda _action: self.set_follow(False))
        self._build_overlay()
        self._last_column = 0
        self.attach(session)
        self._restart()

    @property
    def data(self) -> SearchTree:
        return self.session.tree

    @property
    def _hover_line(self) -> QGraphicsPathItem:
        return self.drawing.hover_line

    # -- contract ------------------------------------------------------------------------

    def refresh(self, change: Change) -> None:
        """Draw the nodes the change names; follow the newest step as it grows."""
        if change.event_type == RESET:
            self._restart()
            return
        if change.replay:
            self._draw_replay()
            return
        if change.event_type == ev.RunStarted.type:
            self._clear_items()
        for node_id in sorted(change.nodes):  # parents (smaller ids) before children
            self._sync(node_id)
        if change.event_type == ev.RunCancelled.type:
            self._relayout()  # the step in progress is dropped: its boxes go
        elif self.collapse_pruned:
            self._relayout_soon(now=change.event_type in _STEP_ENDS)
        self.drawing.fit_scene()
        self._show_emulated()
        new_column, self._last_column = max(self.data.columns) > self._last_column, max(self.data.columns)
        if change.event_type == ev.RunStarted.type:
            self.set_follow(True)
        if self.follow and (new_column or change.event_type in (ev.StepSelected.type, ev.RunFinished.type)):
            self._follow_newest()

    def _draw_replay(self) -> None:
        """A recorded run folded at once: every node drawn once, then the newest step in view."""
        self._clear_items()
        for node_id in sorted(self.data.nodes):
            self._sync(node_id)
        if self.collapse_pruned or self.data.outcome == "cancelled":
            self._relayout()
        self.drawing.fit_scene()
        self._show_emulated()
        self._last_column = max(self.data.columns)
        self.set_follow(True)
        self._follow_newest()

    def _restart(self) -> None:
        """Empty tree (just the prompt), follow on, selection cleared."""
        self._clear_items()
        self._sync(ROOT_ID)
        self._last_column = 0
        self.drawing.fit_scene()
        self._show_emulated()
        self.set_follow(True)

    def _show_emulated(self) -> None:
        remote = self.data.device.startswith("remote")
        if (self.data.emulated, remote) != (self.legend.emulated, self.legend.remote):
            self.legend.set_emulated(self.data.emulated, remote=remote)
            place_overlay(self, self._buttons, self.legend)  # the words changed: fitted and placed again

    def fit_to_view(self) -> None:
        """Show the whole tree (never magnified past 100 %) and resume following."""
        self.fitInView(self.scene().sceneRect(), Qt.AspectRatioMode.KeepAspectRatio)
        if self.transform().m11() > 1.0:
            self.resetTransform()
        self.set_follow(True)

    def show_readable(self, min_scale: float = READABLE_SCALE) -> None:
        """The whole tree when it fits at a zoom where every line reads; else that zoom, on the chosen path's end."""
        self.fit_to_view()
        if self.transform().m11() >= min_scale:
            return
        self.resetTransform()
        self.scale(min_scale, min_scale)
        target = self.data.best_id if self.data.best_id in self._items else ROOT_ID
        self.centerOn(self.node_center(target) - QPointF(COL_W * 0.6, 0))  # its ancestors to the left

    # -- collapsing pruned branches, hovering a path ------------------------------------------

    def set_collapse_pruned(self, on: bool) -> None:
        """Hide pruned candidates and branches that led nowhere, and close the gaps they leave (or show all)."""
        self.collapse_pruned = on
        if self.collapse_button.isChecked() != on:
            self.collapse_button.setChecked(on)
        self._relayout()
        self.drawing.fit_scene()

    def _relayout_soon(self, now: bool) -> None:
        """Collapsed: lay the tree out again now when a step ends, else once the step's events of the next
        RELAYOUT_MS are in. Once per event, a 2,000-node run took 32 s instead of 4 (O(nodes^2)); meanwhile a
        new candidate waits hidden and the others keep their compact rows (`_sync`)."""
        if now:
            self._relayout()  # which stops the timer
        elif not self._relayout_timer.isActive():
            self._relayout_timer.start()

    def _relayout_later(self) -> None:
        if self.collapse_pruned:
            self._relayout()
            self.drawing.fit_scene()
            if self.follow:
                self._follow_newest()

    def _relayout(self) -> None:
        """Place every item at its live row, or at its compact row when collapsed; hidden ones disappear, and so do
        the candidates of a step a Stop dropped. O(nodes): while collapsed, done when a step ends and at most every
        RELAYOUT_MS within a step."""
        self._relayout_timer.stop()
        hidden = dropped_ids(self.data) | (collapsed_ids(self.data) if self.collapse_pruned else set())
        rows = self._rows = self.data.compact_rows(hidden) if self.collapse_pruned else {}
        self.drawing.place(self.data, hidden, rows)
        self._hover(None)

    def restyle(self) -> None:
        """Take the palette's current colours (the OS switched between light and dark)."""
        self.drawing.restyle()
        self.setBackgroundBrush(pal.color(pal.BACKGROUND))
        self.legend.restyle()
        self.legend.set_emulated(self.legend.emulated, remote=self.legend.remote)
        place_overlay(self, self._buttons, self.legend)

    def is_shown(self, node_id: int) -> bool:
        return self._items[node_id].isVisible()

    def _hover(self, node_id: int | None) -> None:
        """Highlight the path from the prompt to `node_id` (None: no highlight)."""
        path = [] if node_id is None else [ROOT_ID, *self.data.path_to(node_id)]
        if path == self.hovered_path:
            return
        self.drawing.highlight(self.hovered_path, path)
        self.hovered_path = path

    def _hovered_node(self, pos) -> int | None:
        hit = next((i for i in self.items(pos) if isinstance(i, NodeItem) and i.isVisible()), None)
        return None if hit is None else hit.node_id

    def leaveEvent(self, event) -> None:
        self._hover(None)
        super().leaveEvent(event)

    # -- selection, follow, zoom ----------------------------------------------------------

    def select_node(self, node_id: int) -> None:
        """Highlight `node_id` and emit `node_selected`; unknown ids raise KeyError naming them."""
        self.data.node(node_id)
        for old in (self._selected, node_id):
            if old in self._items:
                item = self._items[old]
                item.selected = old == node_id
                item.focused = item.selected and self.hasFocus()
                item.update()
        self._selected = node_id
        self.setAccessibleDescription(spoken(self.data.node(node_id)))  # read out as the arrow keys move
        self.node_selected.emit(node_id)

    def focusInEvent(self, event: QFocusEvent) -> None:
        """The selected box shows the keyboard focus with a solid ring; the tree looked the same with and without
        it. Tabbed into with no box selected, it selects the best (or the prompt), as a list gives its first row
        the focus: the first arrow key then moves from there."""
        super().focusInEvent(event)
        by_keyboard = event.reason() in (Qt.FocusReason.TabFocusReason, Qt.FocusReason.BacktabFocusReason,
                                         Qt.FocusReason.ShortcutFocusReason)
        if by_keyboard and not (self._selected in self._items and self.is_shown(self._selected)):
            first = self.data.best_id if self.data.best_id in self._items else ROOT_ID
            if first in self._items:
                self.select_node(first)
        self._show_focus()

    def focusOutEvent(self, event: QFocusEvent) -> None:
        super().focusOutEvent(event)
        self._show_focus()

    def _show_focus(self) -> None:
        item = self._items.get(self._selected)
        if item is not None:
            item.focused = self.hasFocus()
            item.update()

    @property
    def selected_id(self) -> int | None:
        return self._selected

    def tooltip_for(self, node_id: int) -> str:
        """The rich-text tooltip of `node_id` (built on demand, model text escaped)."""
        return tooltip(self.data.node(node_id))

    def viewportEvent(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ToolTip:
            hit = next((i for i in self.items(event.pos()) if isinstance(i, NodeItem)), None)
            if hit is None:
                QToolTip.hideText()
            else:
                QToolTip.showText(event.globalPos(), self.tooltip_for(hit.node_id), self.viewport())
            return True
        return super().viewportEvent(event)

    def item(self, node_id: int) -> NodeItem:
        """The graphics item drawing `node_id` (tests and the benchmark use it)."""
        return self._items[node_id]

    def node_center(self, node_id: int) -> QPointF:
        """Scene position of the centre of `node_id`'s box."""
        return self._items[node_id].pos() + QPointF(NODE_W / 2, NODE_H / 2)

    def set_follow(self, on: bool) -> None:
        if on == self.follow and self.follow_button.isChecked() == on:
            return
        self.follow = on
        self.follow_button.setChecked(on)
        self.follow_changed.emit(on)
        if on:
            self._follow_newest()

    def zoom_by(self, factor: float) -> None:
        """Scale around the mouse (wheel) or the view centre (keys), clamped to a sane range."""
        current = self.transform().m11()
        factor = max(MIN_SCALE / current, min(MAX_SCALE / current, factor))
        self.scale(factor, factor)

    def _follow_newest(self) -> None:
        target = self.data.best_id if self.data.best_id in self._items else None
        step = newest_step(self.data)
        if target is None or self.data.nodes[target].step < step:
            column = self.data.columns[step]
            target = column[len(column) // 2] if column else ROOT_ID
        if not self._items[target].isVisible() and self._relayout_timer.isActive():
            return  # collapsed, and not laid out yet (its place is not its compact one): the layout follows it
        self.centerOn(self.node_center(target))

    # -- items -----------------------------------------------------------------------------

    def _clear_items(self) -> None:
        self.drawing.clear()
        self._rows = {}
        self._relayout_timer.stop()
        self._selected = None
        self.setAccessibleDescription(KEYS_SPOKEN)
        self.hovered_path = []

    def _sync(self, node_id: int) -> None:
        row = self._rows.get(node_id) if self.collapse_pruned else None
        self.drawing.sync(self.data, node_id, row, self.collapse_pruned)

    def edge_state(self, node_id: int) -> str:
        """The state the edge into `node_id` is drawn in (its pen follows `tree_items.edge_pen`)."""
        return self.drawing.edges[self.data.node(node_id).step].state(node_id)

    # -- overlay ---------------------------------------------------------------------------

    def _build_overlay(self) -> None:
        self.legend = pal.TreeLegend(self)
        self._buttons = TreeControls(self, follow=self.set_follow, fit=self.fit_to_view,
                                     collapse=self.set_collapse_pruned)
        self.follow_button, self.collapse_button = self._buttons.follow_button, self._buttons.collapse_button

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        place_overlay(self, self._buttons, self.legend)

    # -- input -----------------------------------------------------------------------------

    def move_selection(self, key: Qt.Key) -> None:
        """Arrow keys walk the shown boxes, so the tree and its details work without a mouse: Left the parent,
        Right the first child, Up / Down the box above or below in the same step. The first press picks
        the best node (or the prompt); the view stops following and keeps the selected box in sight."""
        shown = self._selected in self._items and self.is_shown(self._selected)  # Collapse pruned may hide it
        current = self._selected if shown else None
        target = self._neighbour(current, key) if current is not None else (
            self.data.best_id if self.data.best_id in self._items else ROOT_ID)
        if target is None:
            return
        self.set_follow(False)
        self.select_node(target)
        self.ensureVisible(self._items[target], 40, 40)

    def _neighbour(self, node_id: int, key: Qt.Key) -> int | None:
        node = self.data.nodes[node_id]
        if key == Qt.Key.Key_Left:
            return node.parent
        if key == Qt.Key.Key_Right:
            return next((c for c in node.children if c in self._items and self.is_shown(c)), None)
        column = [i for i in self.data.columns[node.step] if i in self._items and self.is_shown(i)]
        place = column.index(node_id) + (1 if key == Qt.Key.Key_Down else -1)
        return column[place] if 0 <= place < len(column) else None

    def wheelEvent(self, event) -> None:
        if event.modifiers() & Qt.KeyboardModifier.ControlModifier:
            self.zoom_by(ZOOM_STEP if event.angleDelta().y() > 0 else 1 / ZOOM_STEP)
            event.accept()
            return
        self.set_follow(False)
        super().wheelEvent(event)

    def keyPressEvent(self, event) -> None:
        ctrl = bool(event.modifiers() & Qt.KeyboardModifier.ControlModifier)
        key = event.key()
        if event.matches(QKeySequence.StandardKey.ZoomIn) or (ctrl and key in (Qt.Key.Key_Equal, Qt.Key.Key_Plus)):
            self.zoom_by(ZOOM_STEP)
        elif event.matches(QKeySequence.StandardKey.ZoomOut) or (ctrl and key == Qt.Key.Key_Minus):
            self.zoom_by(1 / ZOOM_STEP)
        elif ctrl and key == Qt.Key.Key_0:
            self.fit_to_view()
        elif not event.modifiers() and key in _MOVES:
            self.move_selection(key)
        elif key in (Qt.Key.Key_Home, Qt.Key.Key_End):  # QGraphicsView ignores them: the prompt, the best box
            self.set_follow(False)
            target = ROOT_ID if key == Qt.Key.Key_Home else self.data.best_id
            if target in self._items:
                self.ensureVisible(self._items[target], 40, 40)
        else:
            if key in _SCROLL_KEYS:
                self.set_follow(False)
            super().keyPressEvent(event)

    def mousePressEvent(self, event) -> None:
        self._press_pos = event.position().toPoint()
        super().mousePressEvent(event)

    def mouseMoveEvent(self, event) -> None:
        if not event.buttons():
            self._hover(self._hovered_node(event.position().toPoint()))
        if self._press_pos is not None and (event.buttons() & Qt.MouseButton.LeftButton) and (
            (event.position().toPoint() - self._press_pos).manhattanLength() > QApplication.startDragDistance()
        ):
            self.set_follow(False)
        super().mouseMoveEvent(event)

    def mouseReleaseEvent(self, event) -> None:
        super().mouseReleaseEvent(event)
        press, self._press_pos = self._press_pos, None
        pos = event.position().toPoint()
        if press is not None and (pos - press).manhattanLength() <= QApplication.startDragDistance():
            for hit in self.items(pos):
                if isinstance(hit, NodeItem):
                    self.select_node(hit.node_id)
                    break
