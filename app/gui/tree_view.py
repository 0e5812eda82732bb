"""The live reasoning tree: a QGraphicsView adapting `SearchTree`, one cached item per candidate.

Only the items of the node ids an event changed are created or updated, so one update costs
O(changed), not O(tree). Items paint themselves (score, first line, GPU/CPU fill bar, group,
PCIe bytes) and are cached in device coordinates; when zoomed far out they draw a plain box.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from PySide6.QtCore import QEvent, QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QFontMetrics, QKeySequence, QPainter, QPainterPath, QPen
from PySide6.QtWidgets import (
    QApplication,
    QGraphicsItem,
    QGraphicsPathItem,
    QGraphicsScene,
    QGraphicsView,
    QHBoxLayout,
    QStyleOptionGraphicsItem,
    QToolButton,
    QToolTip,
    QWidget,
)

from app.gui import palette as pal
from app.gui.tree_data import ROOT_ID, Node, SearchTree
from engine import events as ev
from engine.errors import format_bytes

NODE_W, NODE_H = 196.0, 74.0
COL_W, ROW_H = NODE_W + 64.0, NODE_H + 14.0
PAD = 8.0
MIN_SCALE, MAX_SCALE, ZOOM_STEP = 0.03, 3.0, 1.25
SIMPLE_LOD = 0.45  # below this zoom a node is drawn as a plain box (text would be unreadable)
_SCROLL_KEYS = frozenset({Qt.Key.Key_Up, Qt.Key.Key_Down, Qt.Key.Key_Left, Qt.Key.Key_Right, Qt.Key.Key_PageUp,
                          Qt.Key.Key_PageDown, Qt.Key.Key_Home, Qt.Key.Key_End})


class _Fonts:
    """Fonts and metrics shared by every node item (built once per view, after QApplication)."""

    def __init__(self) -> None:
        self.score = pal.ui_font(10.5, bold=True)
        self.text = pal.ui_font(9.0)
        self.small = pal.ui_font(8.0)
        self.text_metrics = QFontMetrics(self.text)


class NodeItem(QGraphicsItem):
    """One candidate box. `show(node)` copies what it draws, so painting never reads the tree."""

    def __init__(self, node_id: int, fonts: _Fonts) -> None:
        super().__init__()
        self.node_id = node_id
        self._fonts = fonts
        self._state, self._score, self._line, self._meta, self._traffic = "running", "", "", "", ""
        self._share: float | None = None
        self._content: tuple | None = None
        self.selected = False
        self.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        self.setAcceptedMouseButtons(Qt.MouseButton.NoButton)  # the view handles clicks and drags
        self.setZValue(1)

    def boundingRect(self) -> QRectF:
        return QRectF(-2, -2, NODE_W + 4, NODE_H + 4)

    def set_node(self, node: Node) -> tuple[bool, bool]:
        """Copy the node's drawn facts and move to its layout slot; return (moved, restyled).

        Work is skipped when nothing drawn changed: a node hears ~4 events per step.
        """
        content = (node.state, node.score, node.text, node.group, node.h2d_bytes, node.d2h_bytes,
                   node.device_bytes, node.host_bytes)
        restyled = content != self._content
        if restyled:
            self._content = content
            self._copy_content(node)
            self.update()
        pos = QPointF(node.step * COL_W, node.y * ROW_H)
        moved = pos != self.pos()
        if moved:
            self.setPos(pos)
        return moved, restyled

    def _copy_content(self, node: Node) -> None:
        self._state = "root" if node.id == ROOT_ID and node.state != "final" else node.state
        if node.id == ROOT_ID:
            self._score, self._meta, self._traffic = "Prompt", "", ""
        else:
            self._score = "…" if node.score is None else f"{node.score:.3f}"
            group = "" if node.group is None else f"g{node.group}"
            self._meta = f"{group}  #{node.id}".strip()
            self._traffic = f"H2D {format_bytes(node.h2d_bytes)}  D2H {format_bytes(node.d2h_bytes)}"
        line = node.first_line or ("(empty step)" if node.id != ROOT_ID else "")
        self._line = self._fonts.text_metrics.elidedText(line, Qt.TextElideMode.ElideRight, int(NODE_W - 2 * PAD))
        self._share = node.device_share

    def style(self) -> pal.StateStyle:
        return pal.ROOT_STYLE if self._state == "root" else pal.STATE_STYLES[self._state]

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget: QWidget | None = None) -> None:
        style = self.style()
        box = QRectF(0, 0, NODE_W, NODE_H)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(QPen(pal.color(style.border), style.width))
        painter.setBrush(pal.color(style.fill))
        painter.drawRoundedRect(box, 7, 7)
        if self.selected:
            painter.setPen(QPen(pal.color(pal.SELECTION), 1.4, Qt.PenStyle.DashLine))
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawRoundedRect(box.adjusted(-3, -3, 3, 3), 9, 9)
        lod = QStyleOptionGraphicsItem.levelOfDetailFromTransform(painter.worldTransform())
        if self.node_id != ROOT_ID:
            self._paint_bar(painter, QRectF(PAD, 47, NODE_W - 2 * PAD, 7))
        if lod < SIMPLE_LOD:
            return
        self._paint_text(painter, style)

    def _paint_text(self, painter: QPainter, style: pal.StateStyle) -> None:
        inner = NODE_W - 2 * PAD
        painter.setPen(pal.color(style.text))
        painter.setFont(self._fonts.score)
        painter.drawText(QRectF(PAD, 4, inner, 20), Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                         self._score)
        painter.setFont(self._fonts.small)
        painter.setPen(pal.color(pal.MUTED_TEXT))
        painter.drawText(QRectF(PAD, 4, inner, 20), Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
                         self._meta)
        painter.drawText(QRectF(PAD, 55, inner, 16), Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                         self._traffic)
        painter.setFont(self._fonts.text)
        painter.setPen(pal.color(style.text))
        painter.drawText(QRectF(PAD, 25, inner, 18), Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                         self._line)

    def _paint_bar(self, painter: QPainter, bar: QRectF) -> None:
        """Two-part fill: the share of this candidate's KV on the GPU (left) and on the CPU (right)."""
        painter.setPen(Qt.PenStyle.NoPen)
        dim = 110 if self._state == "pruned" else 255
        if self._share is None:
            painter.setBrush(pal.color(pal.NO_KV))
            painter.drawRoundedRect(bar, 3, 3)
            return
        painter.setBrush(pal.color(pal.CPU, dim))
        painter.drawRoundedRect(bar, 3, 3)
        if self._share > 0:
            painter.setBrush(pal.color(pal.GPU, dim))
            painter.drawRoundedRect(QRectF(bar.x(), bar.y(), bar.width() * self._share, bar.height()), 3, 3)


def _tooltip(node: Node) -> str:
    """Rich-text tooltip; every piece of model text is escaped so '<b>' shows literally."""
    if node.id == ROOT_ID:
        return f"<b>Prompt</b><br>{html.escape(node.text[:400])}"
    score = "not scored yet" if node.score is None else f"{node.score:.3f}"
    share = "no KV reported" if node.device_share is None else f"{node.device_share:.0%} of KV on the GPU"
    return (
        f"<b>#{node.id}</b> · step {node.step} · {node.state} · score {score}<br>"
        f"{html.escape(node.first_line[:200])}<br>{share}; H2D {format_bytes(node.h2d_bytes)}, "
        f"D2H {format_bytes(node.d2h_bytes)}"
    )


def _edge_path(parent: QPointF, child: QPointF) -> QPainterPath:
    start = parent + QPointF(NODE_W, NODE_H / 2)
    end = child + QPointF(0, NODE_H / 2)
    mid = (start.x() + end.x()) / 2
    path = QPainterPath(start)
    path.cubicTo(QPointF(mid, start.y()), QPointF(mid, end.y()), end)
    return path


def _edge_pen(state: str) -> QPen:
    if state == "final":
        return QPen(pal.color(pal.EDGE_FINAL), 3.0)
    if state in ("kept", "finished"):
        return QPen(pal.color(pal.EDGE_KEPT), 1.6)
    if state == "pruned":
        return QPen(pal.color(pal.EDGE, 150), 1.0)
    return QPen(pal.color(pal.EDGE), 1.2)


class ReasoningTreeView(QGraphicsView):
    """The live tree. `apply(event)` updates `.data` and only the items it changed.

    Follows the newest step until the user scrolls or drags; Fit / Follow resume it.
    Zoom: Ctrl+wheel, Ctrl+= / Ctrl+- / Ctrl+0 (fit). Click a node: `node_selected(id)`.
    """

    node_selected = Signal(int)
    follow_changed = Signal(bool)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.data = SearchTree()
        self._fonts = _Fonts()
        self._items: dict[int, NodeItem] = {}
        self._edges: dict[int, QGraphicsPathItem] = {}
        self._bounds = QRectF()
        self._selected: int | None = None
        self._press_pos = None
        self.follow = True
        self.setScene(QGraphicsScene(self))
        # A BSP index finds the ~100 visible of thousands of items quickly; items only move while
        # their own step is generated, so the index stays cheap to keep.
        self.scene().setItemIndexMethod(QGraphicsScene.ItemIndexMethod.BspTreeIndex)
        self.setOptimizationFlags(QGraphicsView.OptimizationFlag.DontSavePainterState
                                  | QGraphicsView.OptimizationFlag.DontAdjustForAntialiasing)
        self.setBackgroundBrush(pal.color(pal.BACKGROUND))
        self.setRenderHints(QPainter.RenderHint.Antialiasing | QPainter.RenderHint.TextAntialiasing)
        self.setDragMode(QGraphicsView.DragMode.ScrollHandDrag)
        self.setTransformationAnchor(QGraphicsView.ViewportAnchor.AnchorUnderMouse)
        self.setViewportUpdateMode(QGraphicsView.ViewportUpdateMode.SmartViewportUpdate)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        for bar in (self.horizontalScrollBar(), self.verticalScrollBar()):
            bar.actionTriggered.connect(lambda _action: self.set_follow(False))
        self._build_overlay()
        self.reset()

    # -- contract ------------------------------------------------------------------------

    def apply(self, event: object) -> None:
        """Fold one engine event into the tree and redraw what changed; other types are ignored."""
        if isinstance(event, ev.RunStarted):
            self._clear_items()
        last_column = max(self.data.columns)
        for node_id in self.data.apply(event):
            self._sync(node_id)
        new_column = max(self.data.columns) > last_column
        if isinstance(event, ev.RunStarted):
            self.set_follow(True)
        if isinstance(event, ev.RunStarted | ev.MemorySnapshot) and event.emulated != self.legend.emulated:
            self.legend.set_emulated(event.emulated)
        if self.follow and (new_column or isinstance(event, ev.StepSelected | ev.RunFinished)):
            self._follow_newest()

    def apply_many(self, events: Sequence[object]) -> None:
        """A recorded run in one go: the data folds every event, then each changed node is drawn once."""
        events = list(events)
        if any(isinstance(e, ev.RunStarted) for e in events):
            self._clear_items()
        for node_id in sorted(self.data.apply_many(events)):  # parents (smaller ids) before children
            self._sync(node_id)
        flags = [e.emulated for e in events if isinstance(e, ev.RunStarted | ev.MemorySnapshot)]
        if flags and flags[-1] != self.legend.emulated:
            self.legend.set_emulated(flags[-1])
        self.set_follow(True)
        self._follow_newest()

    def reset(self) -> None:
        """Empty tree (just the prompt), follow on, selection cleared."""
        self._clear_items()
        self.data.reset()
        self._sync(ROOT_ID)
        self.legend.set_emulated(False)
        self.set_follow(True)

    def fit_to_view(self) -> None:
        """Show the whole tree (never magnified past 100 %) and resume following."""
        self.fitInView(self.scene().sceneRect(), Qt.AspectRatioMode.KeepAspectRatio)
        if self.transform().m11() > 1.0:
            self.resetTransform()
        self.set_follow(True)

    # -- selection, follow, zoom ----------------------------------------------------------

    def select_node(self, node_id: int) -> None:
        """Highlight `node_id` and emit `node_selected`; unknown ids raise KeyError naming them."""
        self.data.node(node_id)
        for old in (self._selected, node_id):
            if old in self._items:
                self._items[old].selected = old == node_id
                self._items[old].update()
        self._selected = node_id
        self.node_selected.emit(node_id)

    @property
    def selected_id(self) -> int | None:
        return self._selected

    def tooltip_for(self, node_id: int) -> str:
        """The rich-text tooltip of `node_id` (built on demand, model text escaped)."""
        return _tooltip(self.data.node(node_id))

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
        step = max(self.data.columns)
        if target is None or self.data.nodes[target].step < step:
            column = self.data.columns[step]
            target = column[len(column) // 2] if column else ROOT_ID
        self.centerOn(self.node_center(target))

    # -- items -----------------------------------------------------------------------------

    def _clear_items(self) -> None:
        self.scene().clear()
        self._items.clear()
        self._edges.clear()
        self._bounds = QRectF()
        self._selected = None

    def _sync(self, node_id: int) -> None:
        node = self.data.nodes[node_id]
        item = self._items.get(node_id)
        created = item is None
        if created:
            item = self._items[node_id] = NodeItem(node_id, self._fonts)
            self.scene().addItem(item)
        moved, restyled = item.set_node(node)
        if moved or created:  # the root is created where it stays (0, 0): it must count too
            self._grow_bounds(item)
        if node.parent is not None and (moved or restyled or node.id not in self._edges):
            self._sync_edge(node, moved or node.id not in self._edges)
        if moved:
            for child in node.children:
                if child in self._edges:
                    self._sync_edge(self.data.nodes[child], True)

    def _sync_edge(self, node: Node, moved: bool) -> None:
        edge = self._edges.get(node.id)
        if edge is None:
            edge = self._edges[node.id] = QGraphicsPathItem()
            self.scene().addItem(edge)
        if moved:
            edge.setPath(_edge_path(self._items[node.parent].pos(), self._items[node.id].pos()))
        if edge.data(0) != node.state:
            edge.setData(0, node.state)
            edge.setPen(_edge_pen(node.state))
            edge.setZValue(0.5 if node.state == "final" else 0)

    def _grow_bounds(self, item: NodeItem) -> None:
        rect = item.sceneBoundingRect()
        if self._bounds.contains(rect):
            return
        self._bounds = rect if self._bounds.isNull() else self._bounds.united(rect)
        self.scene().setSceneRect(self._bounds.adjusted(-60, -60, 60, 60))

    # -- overlay ---------------------------------------------------------------------------

    def _build_overlay(self) -> None:
        self.legend = pal.TreeLegend(self)
        self._buttons = QWidget(self)
        row = QHBoxLayout(self._buttons)
        row.setContentsMargins(0, 0, 0, 0)
        self.follow_button = QToolButton(text="Follow", checkable=True, checked=True)
        self.follow_button.setToolTip("Keep the newest step in view (turns off when you scroll or drag)")
        self.follow_button.toggled.connect(self.set_follow)
        fit = QToolButton(text="Fit")
        fit.setToolTip("Show the whole tree (Ctrl+0)")
        fit.clicked.connect(self.fit_to_view)
        for button in (fit, self.follow_button):
            row.addWidget(button)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self.legend.adjustSize()
        area = self.viewport().geometry()
        self.legend.move(area.left() + 8, area.bottom() - self.legend.height() - 8)
        self._buttons.adjustSize()
        self._buttons.move(area.right() - self._buttons.width() - 8, area.top() + 8)
        self.legend.raise_()
        self._buttons.raise_()

    # -- input -----------------------------------------------------------------------------

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
        else:
            if key in _SCROLL_KEYS:
                self.set_follow(False)
            super().keyPressEvent(event)

    def mousePressEvent(self, event) -> None:
        self._press_pos = event.position().toPoint()
        super().mousePressEvent(event)

    def mouseMoveEvent(self, event) -> None:
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
