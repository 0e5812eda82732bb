"""The tree's graphics items: one box per candidate and one edge layer per column.

A `NodeItem` copies the facts it draws (so painting never reads the tree) and turns them
into strings only when first painted: a 10,000-node replay shows ~30 boxes, so eliding and
formatting the rest up front would be wasted. An `EdgeColumn` draws every edge into one
step's column; one item per column instead of one path item per edge keeps opening a large
session and laying out a big step cheap, and paints only the edges in the exposed area.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QBrush, QFont, QFontMetrics, QGuiApplication, QPainter, QPainterPath, QPalette, QPen
from PySide6.QtWidgets import QGraphicsItem, QStyleOptionGraphicsItem, QWidget

import app.formatting as fmt
from app.formatting import size as format_bytes
from app.gui import palette as pal
from app.session import ROOT_ID, Node, first_line

NODE_W, NODE_H = 220.0, 74.0
COL_W, ROW_H = NODE_W + 64.0, NODE_H + 14.0
PAD = 8.0
SIMPLE_LOD = 0.6  # below this zoom a node shows its score and id in a screen-sized font instead of every line
TINY_LOD = 0.12  # below this a node is a plain box (even a screen-sized score would not fit in it)
COMPACT_PX = 12.0  # the compact label's height on screen, whatever the zoom
EDGE_ORDER = ("pruned", "running", "kept", "finished", "final")  # painted in this order: chosen path on top
_DEVICE_CACHE = QGraphicsItem.CacheMode.DeviceCoordinateCache  # enum lookups cost ~1 us; 10,000 items add up
_NO_BUTTON = Qt.MouseButton.NoButton
RING = 3.0  # the selection's ring this far outside the box
_NODE_BOUNDS = QRectF(-5, -5, NODE_W + 10, NODE_H + 10)  # the ring and its pen's half width: a cached item is
# cut at its bounds, and the ring showed a pixel of its outer side with square corners
_LEFT = Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter
_RIGHT = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter


class Ink:
    """Fonts, pens and brushes shared by every item (built once per view, after QApplication)."""

    def __init__(self) -> None:
        self.score = pal.ui_font(11.5, bold=True)
        self.text = pal.ui_font(10.0)
        self.small = pal.ui_font(8.5)
        self.text_metrics = QFontMetrics(self.text)
        self.small_metrics = QFontMetrics(self.small)
        styles = {**pal.STATE_STYLES, "root": pal.ROOT_STYLE}
        self.border = {name: QPen(pal.color(s.border), s.width) for name, s in styles.items()}
        self.fill = {name: QBrush(pal.color(s.fill)) for name, s in styles.items()}
        self.text_pen = {name: QPen(pal.color(s.text)) for name, s in styles.items()}
        self.muted = QPen(pal.color(pal.MUTED_TEXT))
        self.selection = QPen(pal.color(pal.SELECTION), 1.4, Qt.PenStyle.DashLine)
        self.focus = QPen(QGuiApplication.palette().color(QPalette.ColorRole.Highlight), 2.6)  # the OS's colour
        self.hover = QPen(pal.color(pal.HOVER), 3.0)
        self.no_kv = QBrush(pal.color(pal.NO_KV))
        self.bar = {dim: (QBrush(pal.color(pal.CPU, dim)), QBrush(pal.color(pal.GPU, dim))) for dim in (110, 255)}
        self.edge = {state: edge_pen(state) for state in EDGE_ORDER}


def edge_pen(state: str) -> QPen:
    """The pen of an edge into a node in `state`: the chosen path thick, pruned faint."""
    if state == "final":
        return QPen(pal.color(pal.EDGE_FINAL), 3.0)
    if state in ("kept", "finished"):
        return QPen(pal.color(pal.EDGE_KEPT), 1.6)
    if state == "pruned":
        return QPen(pal.color(pal.EDGE, 150), 1.0)
    return QPen(pal.color(pal.EDGE), 1.2)


@dataclass(frozen=True)
class Labels:
    """The strings a node box shows (built on first paint from the copied facts)."""

    score: str
    line: str
    meta: str
    traffic: str


def traffic_label(where: str, h2d: int | None, d2h: int | None, metrics: QFontMetrics, width: int) -> str:
    """'GPU 0% · H2D 656.6 kB  D2H 737.3 kB' in `width` pixels: the sizes in whole units when the tenths do not fit,
    then cut at the end with an ellipsis; never a figure without its unit ('D2H 737.3 k' was cut by the box)."""
    def whole(nbytes: int | None) -> str:
        number, _, unit = format_bytes(nbytes).partition(" ")
        return f"{float(number):.0f} {unit}" if unit else number

    for h2d_text, d2h_text in ((format_bytes(h2d), format_bytes(d2h)), (whole(h2d), whole(d2h))):
        label = f"{where}H2D {h2d_text}  D2H {d2h_text}"
        if metrics.horizontalAdvance(label) <= width:
            return label
    return metrics.elidedText(label, Qt.TextElideMode.ElideRight, width)


class NodeItem(QGraphicsItem):
    """One candidate box. `set_node(node)` copies what it draws, so painting never reads the tree."""

    def __init__(self, node_id: int, ink: Ink) -> None:
        super().__init__()
        self.node_id = node_id
        self._ink = ink
        self._content: tuple | None = None
        self._labels: Labels | None = None
        self.xy = (0.0, 0.0)  # the position as plain numbers (cheaper to read than pos())
        self._state = "running"
        self._share: float | None = None
        self.selected = False
        self.focused = False  # selected while the view has the keyboard focus: a solid ring, not a dashed one
        self.on_path = False  # on the hovered node's path
        self.setCacheMode(_DEVICE_CACHE)
        self.setAcceptedMouseButtons(_NO_BUTTON)  # the view handles clicks and drags
        self.setZValue(1)

    def boundingRect(self) -> QRectF:
        return _NODE_BOUNDS

    def restyle(self, ink: Ink) -> None:
        self._ink, self._labels = ink, None
        self.update()

    def set_node(self, node: Node, row: float | None = None) -> tuple[bool, bool]:
        """Copy the node's drawn facts and move to its layout slot (`row`, else the live layout's); return
        (moved, restyled).

        Work is skipped when nothing drawn changed: a node hears ~4 events per step.
        """
        content = (node.state, node.score, node.text, node.group, node.h2d_bytes, node.d2h_bytes,
                   node.device_bytes, node.host_bytes, node.lane)
        restyled = content != self._content
        if restyled:
            self._content, self._labels = content, None
            self._state = "root" if node.id == ROOT_ID and node.state != "final" else node.state
            self._share = node.device_share
            self.update()
        xy = (node.step * COL_W, (node.y if row is None else row) * ROW_H)
        moved = xy != self.xy
        if moved:
            self.xy = xy
            self.setPos(*xy)
        return moved, restyled

    def labels(self) -> Labels:
        """What the box shows, formatted from the copied facts (once per change)."""
        if self._labels is None:
            self._labels = self._format()
        return self._labels

    def _format(self) -> Labels:
        _, score, text, group, h2d, d2h, _, _, lane = self._content or ("", None, "", None, 0, 0, 0, 0, "")
        line = first_line(text) or ("(empty step)" if self.node_id != ROOT_ID else "")
        line = self._ink.text_metrics.elidedText(line, Qt.TextElideMode.ElideRight, int(NODE_W - 2 * PAD))
        if self.node_id == ROOT_ID:
            return Labels("Prompt", line, "", "")
        meta = f"{lane}  {'' if group is None else f'g{group}'}  #{self.node_id}".strip()
        where = "" if self._share is None else f"GPU {self._share:.0%} · "  # placement in words, not only colour
        return Labels(fmt.score(score, "…"), line, meta,
                      traffic_label(where, h2d, d2h, self._ink.small_metrics, int(NODE_W - 2 * PAD)))

    def style(self) -> pal.StateStyle:
        return pal.ROOT_STYLE if self._state == "root" else pal.STATE_STYLES[self._state]

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget: QWidget | None = None) -> None:
        ink, box = self._ink, QRectF(0, 0, NODE_W, NODE_H)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(ink.border[self._state])
        painter.setBrush(ink.fill[self._state])
        painter.drawRoundedRect(box, 7, 7)
        if self.on_path:
            painter.setPen(ink.hover)
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawRoundedRect(box.adjusted(-1.5, -1.5, 1.5, 1.5), 8, 8)
        if self.selected:
            painter.setPen(ink.focus if self.focused else ink.selection)
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawRoundedRect(box.adjusted(-RING, -RING, RING, RING), 9, 9)
        if self.node_id != ROOT_ID:
            self._paint_bar(painter, QRectF(PAD, 47, NODE_W - 2 * PAD, 7))
        lod = QStyleOptionGraphicsItem.levelOfDetailFromTransform(painter.worldTransform())
        if lod >= SIMPLE_LOD:
            self._paint_text(painter)
        elif lod >= TINY_LOD:
            self._paint_compact(painter, lod)

    def _paint_compact(self, painter: QPainter, lod: float) -> None:
        """Zoomed out: score and id in a font that stays COMPACT_PX tall on screen (a fitted tree stays legible)."""
        labels, font = self.labels(), QFont(self._ink.score)
        font.setPixelSize(max(1, round(COMPACT_PX / lod)))
        painter.setFont(font)
        painter.setPen(self._ink.text_pen[self._state])
        text = labels.score if self.node_id == ROOT_ID else f"{labels.score}  #{self.node_id}"
        painter.drawText(QRectF(PAD / 2, 0, NODE_W - PAD, 46), Qt.AlignmentFlag.AlignCenter, text)

    def _paint_text(self, painter: QPainter) -> None:
        ink, labels, inner = self._ink, self.labels(), NODE_W - 2 * PAD
        painter.setPen(ink.text_pen[self._state])
        painter.setFont(ink.score)
        painter.drawText(QRectF(PAD, 4, inner, 20), _LEFT, labels.score)
        painter.setFont(ink.small)
        painter.setPen(ink.muted)
        painter.drawText(QRectF(PAD, 4, inner, 20), _RIGHT, labels.meta)
        painter.drawText(QRectF(PAD, 55, inner, 16), _LEFT, labels.traffic)
        painter.setFont(ink.text)
        painter.setPen(ink.text_pen[self._state])
        painter.drawText(QRectF(PAD, 25, inner, 18), _LEFT, labels.line)

    def _paint_bar(self, painter: QPainter, bar: QRectF) -> None:
        """Two-part fill: the share of this candidate's KV on the GPU (left) and on the CPU (right)."""
        painter.setPen(Qt.PenStyle.NoPen)
        if self._share is None:
            painter.setBrush(self._ink.no_kv)
            painter.drawRoundedRect(bar, 3, 3)
            return
        cpu, gpu = self._ink.bar[110 if self._state == "pruned" else 255]
        painter.setBrush(cpu)
        painter.drawRoundedRect(bar, 3, 3)
        if self._share > 0:
            painter.setBrush(gpu)
            painter.drawRoundedRect(QRectF(bar.x(), bar.y(), bar.width() * self._share, bar.height()), 3, 3)


class EdgeColumn(QGraphicsItem):
    """Every edge from a parent's right side to a child's left side, for the children of one column.

    Edges are kept as plain numbers (parent x, parent y, child x, child y, child state) and
    drawn as cubic curves grouped by state, each cut to the exposed area. Not cached: Qt would
    render a cached column whole (a fan-out of 64 edges is ~3,000 px tall, ~27 ms).
    """

    def __init__(self, ink: Ink) -> None:
        super().__init__()
        self._ink = ink
        self._edges: dict[int, tuple[float, float, float, float, str]] = {}
        self._rect = QRectF()
        self._box: list[float] | None = None  # left, top, right, bottom of every edge so far
        self.setFlag(QGraphicsItem.GraphicsItemFlag.ItemUsesExtendedStyleOption)  # exposedRect is filled in
        self.setAcceptedMouseButtons(Qt.MouseButton.NoButton)

    def __len__(self) -> int:
        return len(self._edges)

    def restyle(self, ink: Ink) -> None:
        self._ink = ink
        self.update()

    def state(self, child: int) -> str:
        """The state the edge into `child` is drawn in; KeyError when there is no such edge."""
        return self._edges[child][4]

    def set_edge(self, child: int, parent_xy: tuple[float, float], child_xy: tuple[float, float], state: str) -> None:
        """Draw the edge into `child` from the parent's box at `parent_xy` to the child's box at `child_xy`."""
        edge = (parent_xy[0] + NODE_W, parent_xy[1] + NODE_H / 2, child_xy[0], child_xy[1] + NODE_H / 2, state)
        old = self._edges.get(child)
        if old == edge:
            return
        self._edges[child] = edge
        self._grow(edge)
        for changed in (old, edge):
            if changed is not None:
                self.update(_edge_rect(changed))

    def boundingRect(self) -> QRectF:
        return self._rect

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget: QWidget | None = None) -> None:
        top, bottom = option.exposedRect.top() - 4, option.exposedRect.bottom() + 4
        paths: dict[str, QPainterPath] = {}
        for x0, y0, x1, y1, state in self._edges.values():
            if min(y0, y1) > bottom or max(y0, y1) < top:
                continue
            path = paths.get(state)
            if path is None:
                path = paths[state] = QPainterPath()
            p0, p1, p2, p3 = visible_part(x0, y0, x1, y1, top, bottom)
            path.moveTo(*p0)
            path.cubicTo(*p1, *p2, *p3)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setBrush(Qt.BrushStyle.NoBrush)
        for state in EDGE_ORDER:
            if state in paths:
                painter.setPen(self._ink.edge[state])
                painter.drawPath(paths[state])

    def _grow(self, edge: tuple[float, float, float, float, str]) -> None:
        x0, y0, x1, y1, _ = edge
        box = self._box
        if box is not None and box[0] <= x0 and box[1] <= min(y0, y1) and box[2] >= x1 and box[3] >= max(y0, y1):
            return
        self.prepareGeometryChange()
        if box is None:
            self._box = [x0, min(y0, y1), x1, max(y0, y1)]
        else:
            self._box = [min(box[0], x0), min(box[1], y0, y1), max(box[2], x1), max(box[3], y0, y1)]
        left, top, right, bottom = self._box
        self._rect = QRectF(left - 3, top - 3, right - left + 6, bottom - top + 6)


def path_curve(boxes: list[tuple[float, float]]) -> QPainterPath:
    """The edges through boxes at these top-left corners, one after the other (the hovered path's line)."""
    line = QPainterPath()
    for (x0, y0), (x1, y1) in itertools.pairwise(boxes):
        y0, y1, mid = y0 + NODE_H / 2, y1 + NODE_H / 2, (x0 + NODE_W + x1) / 2
        line.moveTo(x0 + NODE_W, y0)
        line.cubicTo(mid, y0, mid, y1, x1, y1)
    return line


def _edge_rect(edge: tuple[float, float, float, float, str]) -> QRectF:
    x0, y0, x1, y1, _ = edge
    return QRectF(x0 - 3, min(y0, y1) - 3, x1 - x0 + 6, abs(y1 - y0) + 6)


Point = tuple[float, float]


def visible_part(x0: float, y0: float, x1: float, y1: float, top: float, bottom: float) -> tuple[Point, ...]:
    """Control points of the part of the edge curve between heights `top` and `bottom`.

    The curve (control points at mid-x, heights y0 and y1) is the same one drawn whole, cut
    exactly: a fan-out from one parent spans thousands of pixels, and stroking what lies
    outside the exposed area is most of the cost of painting the tree.
    """
    mid = (x0 + x1) / 2
    curve = ((x0, y0), (mid, y0), (mid, y1), (x1, y1))
    if y0 == y1 or (top <= min(y0, y1) and max(y0, y1) <= bottom):
        return curve
    # y(t) = y0 + (y1 - y0) * s(t) with s the smoothstep 3t^2 - 2t^3, which has a closed-form inverse.
    s_a, s_b = sorted(min(1.0, max(0.0, (y - y0) / (y1 - y0))) for y in (top, bottom))
    t_a, t_b = (0.5 - math.sin(math.asin(1 - 2 * s_v) / 3) for s_v in (s_a, s_b))
    head = _split(curve, t_b)[0]
    return head if t_a <= 0 else _split(head, t_a / t_b)[1]


def _split(curve: tuple[Point, ...], t: float) -> tuple[tuple[Point, ...], tuple[Point, ...]]:
    """De Casteljau: the cubic `curve` cut at parameter t into (before, after)."""
    def lerp(a: Point, b: Point) -> Point:
        return (a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t)

    p0, p1, p2, p3 = curve
    a, b, c = lerp(p0, p1), lerp(p1, p2), lerp(p2, p3)
    d, e = lerp(a, b), lerp(b, c)
    f = lerp(d, e)
    return (p0, a, d, f), (f, e, c, p3)
