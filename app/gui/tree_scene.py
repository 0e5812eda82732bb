"""What the tree view draws in its scene: one box per node, one edge layer per step's column, the hover line and
the boxes' bounds, kept by node id so that an update touches only the items it names; and which boxes it hides."""

from __future__ import annotations

from PySide6.QtCore import QRectF
from PySide6.QtGui import QPen
from PySide6.QtWidgets import QGraphicsPathItem, QGraphicsScene

from app.gui import palette as pal
from app.gui.tree_items import COL_W, NODE_H, NODE_W, ROW_H, EdgeColumn, Ink, NodeItem, path_curve
from app.session import ROOT_ID, Node, SearchTree

SCENE_MARGIN = 60.0


class TreeScene:
    """The items of `scene` by node id; the view says where each box goes (its live or its compact row)."""

    def __init__(self, scene: QGraphicsScene) -> None:
        self.scene = scene
        self.ink = Ink()
        self.items: dict[int, NodeItem] = {}
        self.edges: dict[int, EdgeColumn] = {}  # step -> the edges into that column
        self.bounds: tuple[float, float, float, float] | None = None  # left, top, right, bottom of the boxes
        self.hover_line: QGraphicsPathItem  # made by clear(), which the view calls before it draws

    def clear(self) -> None:
        """An empty scene: no boxes, no edges, no bounds; a new hover line."""
        self.scene.clear()
        self.items.clear()
        self.edges.clear()
        self.bounds = None
        self.hover_line = QGraphicsPathItem()
        self.hover_line.setPen(QPen(pal.color(pal.HOVER, 150), 6.0))
        self.hover_line.setZValue(0.5)  # over the edges, under the boxes
        self.scene.addItem(self.hover_line)

    def restyle(self) -> None:
        """Take the palette's current colours in every box, edge and the hover line."""
        self.ink = Ink()
        for item in self.items.values():
            item.restyle(self.ink)
        for column in self.edges.values():
            column.restyle(self.ink)
        self.hover_line.setPen(QPen(pal.color(pal.HOVER, 150), 6.0))

    def sync(self, tree: SearchTree, node_id: int, row: float | None, collapsed: bool) -> None:
        """Create or update `node_id`'s box at `row` (its compact row when collapsed, else None), and the edges
        that its change moves or restyles."""
        node = tree.nodes[node_id]
        item = self.items.get(node_id)
        created = item is None
        if created:
            item = self.items[node_id] = NodeItem(node_id, self.ink)
            self.scene.addItem(item)
        if created and collapsed and row is None and node_id != ROOT_ID:
            item.setVisible(False)  # collapsed: a new candidate shows at the next layout, in its compact row
        moved, restyled = item.set_node(node, row)
        if (moved or created) and item.isVisible():  # the root is created where it stays (0, 0): it counts too
            self.grow_bounds(item.xy)
        if node.parent is not None and (moved or restyled or created):
            self.sync_edge(node)
        if moved:
            for child in node.children:
                if child in self.items:
                    self.sync_edge(tree.nodes[child])

    def sync_edge(self, node: Node) -> None:
        column = self.edges.get(node.step)
        if column is None:
            column = self.edges[node.step] = EdgeColumn(self.ink)
            self.scene.addItem(column)
        item = self.items[node.id]
        state = node.state if item.isVisible() else "hidden"  # an edge state no pen draws
        column.set_edge(node.id, self.items[node.parent].xy, item.xy, state)

    def place(self, tree: SearchTree, hidden: set[int], rows: dict[int, float]) -> None:
        """Every box at its compact row in `rows`, else at its live row; the `hidden` ones and their edges
        disappear. O(nodes)."""
        self.bounds = None
        for node_id, item in self.items.items():
            node = tree.nodes[node_id]
            item.setVisible(node_id not in hidden)
            xy = (node.step * COL_W, rows.get(node_id, node.y) * ROW_H)
            if xy != item.xy:
                item.xy = xy
                item.setPos(*xy)
            if node_id not in hidden:
                self.grow_bounds(xy)
        for node_id, item in self.items.items():
            node = tree.nodes[node_id]
            if node.parent is not None and node.parent in self.items:
                state = "hidden" if node_id in hidden else node.state  # an edge state no pen draws
                self.edges[node.step].set_edge(node_id, self.items[node.parent].xy, item.xy, state)

    def highlight(self, old: list[int], path: list[int]) -> None:
        """Unmark the boxes of the `old` path, mark those of `path` and draw the hover line along them."""
        for node in old:
            if node in self.items:
                self.items[node].on_path = False
                self.items[node].update()
        for node in path:
            self.items[node].on_path = True
            self.items[node].update()
        self.hover_line.setPath(path_curve([self.items[node].xy for node in path]))

    def grow_bounds(self, xy: tuple[float, float]) -> None:
        x, y = xy
        box = (x - 2, y - 2, x + NODE_W + 2, y + NODE_H + 2)
        old = self.bounds
        if old is not None and old[0] <= box[0] and old[1] <= box[1] and old[2] >= box[2] and old[3] >= box[3]:
            return
        if old is not None:
            box = (min(old[0], box[0]), min(old[1], box[1]), max(old[2], box[2]), max(old[3], box[3]))
        self.bounds = box

    def fit_scene(self) -> None:
        """The scene rect: every box plus a margin (set once per update, not once per node)."""
        left, top, right, bottom = self.bounds or (0.0, 0.0, NODE_W, NODE_H)
        m = SCENE_MARGIN
        rect = QRectF(left - m, top - m, right - left + 2 * m, bottom - top + 2 * m)
        if rect != self.scene.sceneRect():
            self.scene.setSceneRect(rect)


def dropped_ids(tree: SearchTree) -> set[int]:
    """The candidates of the step a Stop dropped (those after the last step chosen). Their texts had arrived, so
    they stayed in the tree as boxes with no score, though the status bar and the transcript said the step in
    progress was dropped; the recorded session holds them too, so a replay drops them the same way."""
    if tree.outcome != "cancelled":
        return set()
    return {node_id for node_id, node in tree.nodes.items() if node.step > tree.last_selected_step}


def collapsed_ids(tree: SearchTree) -> set[int]:
    """What Collapse pruned hides (`SearchTree.dead_ids`), where the boxes kept at the last step a Stop left are
    leaves: their children were all dropped, and collapsed the tree hid every branch as if it had led nowhere."""
    dead = tree.dead_ids()
    if tree.outcome == "cancelled":
        for node_id in tree.columns[tree.last_selected_step]:
            if node_id != ROOT_ID and tree.nodes[node_id].state != "pruned":
                dead.difference_update(tree.path_to(node_id))
    return dead


def newest_step(tree: SearchTree) -> int:
    """The newest step the tree shows: the last one chosen after a Stop (`dropped_ids`), else the newest begun."""
    return tree.last_selected_step if tree.outcome == "cancelled" else max(tree.columns)
