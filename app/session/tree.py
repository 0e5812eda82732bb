"""The search tree as plain Python records, built from engine events; the Qt views only adapt it.

`SearchTree.apply(event)` folds one engine event into the tree and returns the ids of the
nodes whose drawing changed (new, re-scored, re-stated or moved), so a view can update
just those; `SessionModel` (app/session/model.py) owns one. The tree also keeps a tidy layout:
column = step, and a row position `y` (in row units) that places each parent's children as a
block centred on the parent, blocks in the order of their parents so edges never cross. A
column only moves while its own step is generated, so earlier columns stay put as the tree grows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from app.session.series import prompt_traffic
from engine import events as ev

ROOT_ID = -1  # the prompt; engine candidate ids are ints >= 0, so -1 never collides
SIBLING_GAP = 0.35  # extra rows between the child blocks of different parents


def first_line(text: str) -> str:
    """The first non-empty line of `text`, stripped ('' when there is none)."""
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


@dataclass
class Node:
    """One candidate step (or the prompt, `ROOT_ID`). Mutable: events fill it in over a step.

    state: running (generated, not yet selected), kept, pruned, finished (kept and ended
    with EOS: a complete answer, or with the model's context full), final (on the chosen path after the run
    finished).
    """

    id: int
    parent: int | None
    step: int
    text: str = ""
    tokens: int = 0
    score: float | None = None
    aggregate: float | None = None
    state: str = "running"
    eos: bool = False  # its path ends with this step: EOS, or `context_full`
    context_full: bool = False  # its path filled the model's context (not EOS)
    group: int | None = None
    prefetched: bool = False
    speculated: int = 0  # leading tokens of its step made speculatively in its parent's step (FlashTTS)
    device_bytes: int = 0
    host_bytes: int = 0
    h2d_bytes: int = 0
    d2h_bytes: int = 0
    own_kv: tuple[int, int] | None = None  # (device, host) KV bytes at the end of its own step; None: never reported
    verifier_device_bytes: int = 0  # the verifier's KV of this step (its own segment), apart from the generator's
    verifier_host_bytes: int = 0
    y: float = 0.0
    children: list[int] = field(default_factory=list)
    lane: str = ""  # "subtree 2" (DVTS) or "sample 5" (best-of-N); empty for beam and greedy

    @property
    def first_line(self) -> str:
        """The first non-empty line of the text, stripped ('' when there is none)."""
        return first_line(self.text)

    @property
    def device_share(self) -> float | None:
        """Share of this candidate's KV bytes resident on the device; None before any snapshot."""
        total = self.device_bytes + self.host_bytes
        return None if total == 0 else self.device_bytes / total


@dataclass(frozen=True)
class PathStep:
    """One row of a node's path from the root: the score the verifier gave that step."""

    id: int
    step: int
    score: float | None
    aggregate: float | None
    first_line: str


class SearchTree:
    """All candidates of one run, keyed by id, with the run-level facts the views show."""

    def __init__(self, *, layout: bool = True) -> None:
        self.laid_out = layout  # False: rows and columns only, no row positions (a reader that draws nothing)
        self._bulk = False  # apply_many: place nodes without layout, lay each column out once at the end
        self.clear()

    def clear(self) -> None:
        """Forget the run: only an empty root remains."""
        self.nodes: dict[int, Node] = {ROOT_ID: Node(ROOT_ID, None, 0, state="kept")}
        self.columns: dict[int, list[int]] = {0: [ROOT_ID]}  # ids per step, top to bottom
        self._layout: dict[int, _Column] = {}
        self.search: dict[str, object] = {}
        self._pending_group: dict[int, tuple[int, bool]] = {}
        self.question = ""
        self.model = ""
        self.device = ""
        self.policy = ""
        self.emulated = False
        self.budget_bytes: int | None = None
        self.current_step = 0
        self.last_selected_step = 0
        self._prompt_traffic_known = False
        self.best_id: int | None = None
        self.chosen_path: tuple[int, ...] = ()
        self.answer: str | None = None
        self.outcome: str | None = None  # "finished", "cancelled" or "failed" once terminal

    # -- queries ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.nodes)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self.nodes

    def node(self, node_id: int) -> Node:
        """The node with this id; KeyError names the id when it is not in this run."""
        try:
            return self.nodes[node_id]
        except KeyError:
            raise KeyError(f"no node {node_id} in this run (it has {len(self.nodes)} nodes)") from None

    def candidates(self) -> list[Node]:
        """Every node except the root."""
        return [n for n in self.nodes.values() if n.id != ROOT_ID]

    def path_to(self, node_id: int) -> list[int]:
        """Ids from the first step's candidate down to `node_id` (the root is not included): the one path walk
        the window, the exports and `beamwise eval` share. Every parent is in the tree (a lost one is the root)."""
        node, path = self.node(node_id), []
        while node.id != ROOT_ID:
            path.append(node.id)
            node = self.nodes[node.parent]  # type: ignore[index]
        return path[::-1]

    def path_steps(self, node_id: int) -> list[PathStep]:
        """Score per step along the path from the root to `node_id`."""
        return [
            PathStep(n.id, n.step, n.score, n.aggregate, n.first_line)
            for n in (self.nodes[i] for i in self.path_to(node_id))
        ]

    def dead_ids(self) -> set[int]:
        """What "collapse pruned" hides: pruned candidates, and every node all of whose children are hidden
        (a branch that led nowhere). A node still generating is never hidden."""
        dead: set[int] = set()
        for step in sorted(self.columns, reverse=True):
            for node_id in self.columns[step]:
                node = self.nodes[node_id]
                if node.state == "pruned" or (node.state != "running" and node.children
                                              and all(c in dead for c in node.children)):
                    dead.add(node_id)
        dead.discard(ROOT_ID)
        return dead

    def compact_rows(self, hidden: set[int]) -> dict[int, float]:
        """Rows of the visible nodes laid out again without the hidden ones: each leaf on the next free row,
        a parent centred on its children, order kept from the live layout."""
        rows: dict[int, float] = {}
        free = 0.0
        stack: list[tuple[int, bool]] = [(ROOT_ID, False)]
        while stack:  # post-order without recursion: children first, then their parent
            node_id, children_done = stack.pop()
            kids = sorted((c for c in self.nodes[node_id].children if c not in hidden), key=lambda c: self.nodes[c].y)
            if not children_done and kids:
                stack.append((node_id, True))
                stack.extend((c, False) for c in reversed(kids))
            elif kids:
                rows[node_id] = (rows[kids[0]] + rows[kids[-1]]) / 2
            else:
                rows[node_id], free = free, free + 1
        return rows

    @property
    def terminal(self) -> bool:
        return self.outcome is not None

    # -- events ----------------------------------------------------------------------------

    def apply(self, event: object) -> set[int]:
        """Fold one engine event in; return the ids of nodes to redraw. Unknown types are ignored."""
        handler = _HANDLERS.get(getattr(event, "type", ""))
        return set() if handler is None else handler(self, event)

    def apply_many(self, events: Iterable[object]) -> set[int]:
        """Fold a whole recorded run in (a replay): the same handlers, but each column is laid out
        once at the end instead of after every arrival."""
        changed: set[int] = set()
        self._bulk = True
        try:
            for event in events:
                handler = _HANDLERS.get(getattr(event, "type", ""))
                if handler is not None:
                    changed |= handler(self, event)
        finally:
            self._bulk = False
        for step in sorted(self._layout):  # parents' rows are final before their children's column
            changed |= self._layout_column(step)
        return changed

    def _on_run_started(self, e: ev.RunStarted) -> set[int]:
        self.clear()
        self.question, self.model, self.device, self.policy = e.question, e.model, e.device, e.policy
        self.emulated, self.budget_bytes = e.emulated, e.kv_budget_bytes
        self.search = dict(e.search)
        self.nodes[ROOT_ID].text = e.question
        return {ROOT_ID}

    def _on_step_started(self, e: ev.StepStarted) -> set[int]:
        self.current_step = e.step
        return set()

    def _on_group_scheduled(self, e: ev.GroupScheduled) -> set[int]:
        prefetched = set(e.prefetched)
        changed = set()
        for cid in e.candidates:
            self._pending_group[cid] = (e.group, cid in prefetched)
            if cid in self.nodes:
                node = self.nodes[cid]
                node.group, node.prefetched = e.group, cid in prefetched
                changed.add(cid)
        return changed

    def _on_candidate(self, e: ev.CandidateText | ev.CandidateScored) -> set[int]:
        changed = {e.id}
        node = self.nodes.get(e.id)
        if node is None:
            node, moved = self._add_node(e.id, e.parent, e.step)
            changed |= moved
        node.text, node.tokens, node.eos, node.group = e.text, e.tokens, e.finished, e.group
        if isinstance(e, ev.CandidateText):  # the score event that follows repeats the text, not these
            node.speculated, node.context_full = e.speculated, e.context_full
        if isinstance(e, ev.CandidateScored):
            node.score, node.aggregate = e.score, e.aggregate
        return changed

    def _add_node(self, node_id: int, parent: int | None, step: int) -> tuple[Node, set[int]]:
        # A parent the tree never saw (a dropped event) hangs under the root, so the tree
        # stays connected rather than losing the candidate.
        parent_id = parent if parent is not None and parent in self.nodes else ROOT_ID
        group, prefetched = self._pending_group.pop(node_id, (None, False))
        node = Node(node_id, parent_id, step, group=group, prefetched=prefetched, lane=self._lane(parent_id))
        self.nodes[node_id] = node
        self.nodes[parent_id].children.append(node_id)
        return node, self._place(node)

    def _lane(self, parent_id: int) -> str:
        """What a new node belongs to: the prompt's children open the DVTS subtrees (M each) or the
        best-of-N samples (one each) in order; every later node inherits its parent's."""
        if parent_id != ROOT_ID:
            return self.nodes[parent_id].lane
        index = len(self.nodes[ROOT_ID].children)
        method = self.search.get("method")
        if method == "dvts":
            return f"subtree {index // max(int(self.search.get('width', 1)), 1) + 1}"
        if method == "best-of-n":
            return f"sample {index + 1}"
        return ""

    def _on_transfer(self, e: ev.TransferStats) -> set[int]:
        """The question's own traffic, before step 1, is the prompt node's (from the run's first figures)."""
        if self._prompt_traffic_known:
            return set()
        self._prompt_traffic_known = True
        root = self.nodes[ROOT_ID]
        root.h2d_bytes, root.d2h_bytes = prompt_traffic(e)
        return {ROOT_ID}

    def _on_memory(self, e: ev.MemorySnapshot) -> set[int]:
        self.emulated, self.budget_bytes = e.emulated, e.budget_bytes
        changed = set()
        for mem in e.candidates:
            node = self.nodes.get(mem.id)
            if node is None:
                continue
            node.device_bytes, node.host_bytes = mem.device_bytes, mem.host_bytes
            node.verifier_device_bytes, node.verifier_host_bytes = mem.verifier_device_bytes, mem.verifier_host_bytes
            if node.step == e.step:  # traffic is per step: keep the share of the node's own step
                node.h2d_bytes, node.d2h_bytes = mem.h2d_bytes, mem.d2h_bytes
                node.own_kv = (mem.device_bytes, mem.host_bytes)
            if mem.group is not None and node.group is None:
                node.group = mem.group
            changed.add(mem.id)
        return changed

    def _on_step_selected(self, e: ev.StepSelected) -> set[int]:
        for cid in e.kept:
            if cid in self.nodes:
                self.nodes[cid].state = "finished" if self.nodes[cid].eos else "kept"
        for cid in e.pruned:
            if cid in self.nodes:
                self.nodes[cid].state = "pruned"
        self.last_selected_step = e.step
        self.best_id = e.kept[0] if e.kept else None
        return {cid for cid in (*e.kept, *e.pruned) if cid in self.nodes}

    def _on_run_finished(self, e: ev.RunFinished) -> set[int]:
        changed = self._close_running()
        self.answer, self.outcome = e.answer, "finished"
        self.chosen_path = tuple(cid for cid in e.path if cid in self.nodes)
        for cid in (ROOT_ID, *self.chosen_path):
            self.nodes[cid].state = "final"
            changed.add(cid)
        if self.chosen_path:
            self.best_id = self.chosen_path[-1]
        return changed

    def _on_run_stopped(self, e: ev.RunCancelled | ev.RunFailed) -> set[int]:
        self.outcome = "cancelled" if isinstance(e, ev.RunCancelled) else "failed"
        return self._close_running()

    def _close_running(self) -> set[int]:
        """Candidates of an unfinished step were never selected: show them as pruned."""
        running = {n.id for n in self.nodes.values() if n.state == "running"}
        for cid in running:
            self.nodes[cid].state = "pruned"
        return running

    # -- layout ----------------------------------------------------------------------------

    def _expected_children(self, parent: int) -> int:
        """Rows to reserve for a parent's children: N*M under the prompt, M under a beam."""
        width = int(self.search.get("width", 1))
        return int(self.search.get("beams", 1)) * width if parent == ROOT_ID else width

    def _place(self, node: Node) -> set[int]:
        """Give a new node its row; returns the ids whose `y` changed.

        Fast path (the engine emits candidates parent by parent): the node joins the last
        block of its column within the rows reserved for it, so nothing else moves.
        Otherwise the column is laid out again (O(column size)); earlier columns never move.
        """
        if not self.laid_out:
            self.columns.setdefault(node.step, []).append(node.id)
            return {node.id}
        column = self._layout.setdefault(node.step, _Column())
        if self._bulk:
            column.blocks.setdefault(node.parent, []).append(node.id)
            return {node.id}
        block = column.blocks.get(node.parent)
        last = column.order[-1] if column.order else None
        if block is not None and node.parent == last and len(block) < column.reserved[last]:
            block.append(node.id)
        elif block is None and (last is None or self._parent_key(node.parent) > self._parent_key(last)):
            reserve = self._expected_children(node.parent)
            start = self.nodes[node.parent].y - (reserve - 1) / 2
            if column.end is not None:
                start = max(start, column.end + SIBLING_GAP)
            column.blocks[node.parent], column.order = [node.id], [*column.order, node.parent]
            column.start[node.parent], column.reserved[node.parent] = start, reserve
            column.end = start + reserve
        else:
            column.blocks.setdefault(node.parent, []).append(node.id)
            return self._layout_column(node.step)
        node.y = column.start[node.parent] + len(column.blocks[node.parent]) - 1
        self.columns.setdefault(node.step, []).append(node.id)
        return {node.id}

    def _parent_key(self, parent: int) -> tuple[float, int]:
        return (self.nodes[parent].y, parent)

    def _layout_column(self, step: int) -> set[int]:
        """Lay column `step` out again: blocks in parent order, each centred on its parent."""
        column = self._layout[step]
        column.order = sorted(column.blocks, key=self._parent_key)
        column.end, moved, ordered = None, set(), []
        for parent in column.order:
            block = column.blocks[parent]
            reserve = max(len(block), self._expected_children(parent))
            start = self.nodes[parent].y - (reserve - 1) / 2
            if column.end is not None:
                start = max(start, column.end + SIBLING_GAP)
            column.start[parent], column.reserved[parent], column.end = start, reserve, start + reserve
            for offset, cid in enumerate(block):
                if self.nodes[cid].y != start + offset:
                    self.nodes[cid].y = start + offset
                    moved.add(cid)
            ordered.extend(block)
        self.columns[step] = ordered
        return moved


@dataclass
class _Column:
    """Layout state of one step's column: children per parent and the rows reserved for them."""

    blocks: dict[int, list[int]] = field(default_factory=dict)  # parent -> children, arrival order
    order: list[int] = field(default_factory=list)  # parents by (y, id)
    start: dict[int, float] = field(default_factory=dict)
    reserved: dict[int, int] = field(default_factory=dict)
    end: float | None = None  # first free row after the last block


_HANDLERS: dict[str, Callable[[SearchTree, object], set[int]]] = {
    ev.RunStarted.type: SearchTree._on_run_started,
    ev.StepStarted.type: SearchTree._on_step_started,
    ev.GroupScheduled.type: SearchTree._on_group_scheduled,
    ev.CandidateText.type: SearchTree._on_candidate,
    ev.CandidateScored.type: SearchTree._on_candidate,
    ev.MemorySnapshot.type: SearchTree._on_memory,
    ev.TransferStats.type: SearchTree._on_transfer,
    ev.StepSelected.type: SearchTree._on_step_selected,
    ev.RunFinished.type: SearchTree._on_run_finished,
    ev.RunCancelled.type: SearchTree._on_run_stopped,
    ev.RunFailed.type: SearchTree._on_run_stopped,
}
