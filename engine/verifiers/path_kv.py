"""A verifier over a tree of KV segments: the question and each accepted step run once, shared by children.

Every verifier that reads a model (the PRM families and self-judge) lays a path out as token pieces
that never change once written: a `prefix` (the question in the model's format), one `body` per step
(the step and its separator) and a `probe` (text asked after the latest step, dropped afterwards).
The score is read from the model's last hidden state at the last token of `body + probe`.

A path's KV is a chain of `KVNode`s (schedule.py), each naming only its own segment in the verifier's pools
(`kv_pools`); siblings point to the same parent node, so the question and the accepted steps are
computed once and shared, and `settle` frees the segments no kept path reaches. Scoring a candidate
runs only its new step and the probe, in an arena that holds its parent's chain and the new tokens.
A step's candidates run in groups of siblings scheduled like the generator's LBS (schedule.py: prefix
order, the shared chain kept on the device across groups, the next group prefetched); `grouped=False`
runs them the earlier way, one parent at a time, each batch loading its whole chain from the segments.
With RKSC's layer-entropy exit (entropy_exit.py) a scoring pass may stop early: its segments then
hold only the layers it ran (the slots are whole), and `settle` completes a kept one's other layers.
Without it, and with an empty probe (the PRM families), an item's speculated next step rides in its
row and is remembered for the child (look_ahead.py: FlashTTS's LookAhead verification).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import torch

from engine.hf_compat import cache_kwargs
from engine.kv.attention import arena_cache
from engine.kv.blocks import Tier
from engine.kv.split import VerifierShape
from engine.models import kv_shape_from_config
from engine.verifiers.base import PathKey, StepToScore, VerifierCost
from engine.verifiers.entropy_exit import EntropyExit
from engine.verifiers.kv_pools import VerifierKV, VerifierMemory
from engine.verifiers.look_ahead import LookAheads, ahead_body
from engine.verifiers.schedule import GroupScheduler, KVNode, VerifyGroup, prefix_order

Readout = Callable[[torch.Tensor], torch.Tensor]  # hidden [B, H] -> scores [B] in [0, 1]


class Layout(Protocol):
    """How one model family writes a path as token ids (each piece tokenized on its own)."""

    def prefix(self, question: str) -> list[int]: ...

    def body(self, question: str, previous: tuple[str, ...], step: str) -> list[int]: ...

    def probe(self, question: str) -> list[int]: ...


def format_tokens(layout: Layout, question: str) -> tuple[int, int, int]:
    """The tokens `layout` adds to a path for `question`: its prefix (the question as the verifier reads it),
    around a one-token step (that token included), at the most of the first step and a later one (RLHFlow's later
    step also closes the turn before it: tiny-rlhflow-prm 23 tokens to the first's 13), and its probe. The run's
    share and the plan count these."""
    around = max(len(layout.body(question, previous, "1")) for previous in ((), ("1",)))
    return len(layout.prefix(question)), around, len(layout.probe(question))


class PathVerifier:
    """Scores steps with `body` (a transformers base model returning `last_hidden_state`) and `readout`."""

    grouped = True  # False: the earlier schedule, one parent at a time (benchmarks and tests compare the two)

    def __init__(self, name: str, body: torch.nn.Module, layout: Layout, readout: Readout,
                 device: torch.device, *, pad_id: int = 0, batch_size: int = 8) -> None:
        if batch_size < 1:
            raise ValueError(f"the verifier batch size must be at least 1 (got {batch_size}).")
        self.name, self.body, self.layout, self.readout = name, body, layout, readout
        self.device, self.pad_id, self.batch_size = device, pad_id, batch_size
        self.nodes: dict[PathKey, KVNode] = {}
        self._stored: dict[int, KVNode] = {}  # every node whose segment is in the pools, by handle
        self._tokens = self._tokens_full = self._forwards = self._rows = 0
        self.looked = LookAheads()  # next steps verified in their parent's pass, until the child asks
        self.kv = self._pools(None)
        self.on_device_budget = True  # False: its KV is outside the device's KV budget (a PRM on the CPU)
        self.exit: EntropyExit | None = None  # RKSC's layer-entropy exit, attached by entropy_exit.with_exit
        self.reads_per_token = 1  # the most tokens it reads a generator token as (reading.py; make_verifier sets it)

    @property
    def looks_ahead(self) -> bool:
        """Whether a step's speculated next step can share its row: the score is read at the end of each
        step's body (an empty probe, as the PRM families have) and every pass runs all layers (no exit)."""
        return self.grouped and self.exit is None and not self.layout.probe("")

    # -- memory -------------------------------------------------------------------------------
    def _pools(self, budget_bytes: int | None, block_size: int = 16) -> VerifierKV:
        shape = kv_shape_from_config(self.body.config, 1)
        dtype = next(self.body.parameters()).dtype
        return VerifierKV(shape.num_layers, shape.num_kv_heads, shape.head_dim, dtype, self.device,
                          budget_bytes=budget_bytes, block_size=block_size)

    def use_budget(self, device_bytes: int, block_size: int = 16) -> None:
        """Hold the verifier's KV within `device_bytes` on the device from now on (before the first score)."""
        if not self.on_device_budget:
            return
        if self._stored:
            raise RuntimeError("the verifier's budget is set before it scores anything.")
        self.kv.close()
        self.kv = self._pools(device_bytes, block_size)

    def shape(self, question: str) -> VerifierShape:
        """What sizes this verifier's share of the budget (engine/kv/split.py): its KV shape and its format's tokens."""
        return VerifierShape(self.kv.token_bytes, *format_tokens(self.layout, question), self.reads_per_token,
                             self.kv.block_size, self.batch_size)

    def batch_bytes(self, question: str, rows: int, step_tokens: int, steps: int) -> int:
        """Device bytes of one verification group of up to `rows` siblings at the search's last step, and at
        least `row_bytes` (`share` in engine/kv/split.py); 0 off the budget."""
        return self.shape(question).share_bytes(rows, step_tokens, steps) if self.on_device_budget else 0

    def row_bytes(self, question: str, step_tokens: int, steps: int) -> int:
        """Device bytes of one row at the last step, each step read in as many tokens as it can be
        (`reads_per_token` each): a share under it may refuse a late step; 0 off the budget."""
        return self.shape(question).row_bytes(step_tokens, steps) if self.on_device_budget else 0

    def memory(self) -> VerifierMemory:
        held = self.kv.memory()
        if self.on_device_budget:
            return held
        return VerifierMemory(host_bytes=held.device_bytes + held.host_bytes)  # a PRM on the CPU: all host memory

    def placement(self, key: PathKey) -> tuple[int, int]:
        node = self.nodes.get(key)
        if node is None:
            return (0, 0)
        size = self.kv.segment_bytes(node.handle)
        on_device = self.on_device_budget and self.kv.tier(node.handle) is Tier.DEVICE
        return (size, 0) if on_device else (0, size)

    def close(self) -> None:
        """The run is over: give the pools' memory back."""
        self.nodes.clear()
        self._stored.clear()
        self.looked = LookAheads()
        self.kv.close()

    # -- scoring ------------------------------------------------------------------------------
    def path_ids(self, item: StepToScore) -> list[int]:
        """The whole path as the model reads it (pieces concatenated); the score is read at its last token."""
        q, prev = item.question, item.previous_steps
        bodies = [self.layout.body(q, prev[:k], prev[k]) for k in range(len(prev))]
        return [*self.layout.prefix(q), *(i for b in bodies for i in b), *self.layout.body(q, prev, item.step),
                *self.layout.probe(q)]

    @torch.inference_mode()
    def score(self, items: Sequence[StepToScore]) -> list[float]:
        """Run each item's new step (+ probe) over its parent's cached KV; siblings run in batches, the
        batches as groups scheduled over the verifier's pools (schedule.py). A step verified ahead in its
        parent's pass is not run again: its remembered score and node are taken."""
        scores = [0.0] * len(items)
        by_parent: dict[PathKey, list[int]] = {}
        for index, item in enumerate(items):
            ahead = self.looked.take(item.key)
            if ahead is not None:
                scores[index], self.nodes[item.key] = ahead.score, ahead.node
                self._tokens_full += ahead.node.length
            else:
                by_parent.setdefault(item.parent_key, []).append(index)
        groups = []
        for parent_key, rows in by_parent.items():
            parent = self._node(parent_key)
            while rows:
                chunk = self._batch(parent, [items[i] for i in rows])
                if self.grouped:
                    groups.append(self._group(parent, items, rows[:chunk]))
                else:
                    self._score_siblings(parent, [items[i] for i in rows[:chunk]], rows[:chunk], scores)
                rows = rows[chunk:]
        if groups:
            run = lambda group, arena: self._score_group(group, arena, items, scores)  # noqa: E731
            GroupScheduler(self.kv).run(prefix_order(groups), run)
        return scores

    def settle(self, kept: Sequence[PathKey]) -> VerifierCost:
        """Keep KV only for the kept paths and their ancestors (the rest is freed), complete the layers an
        exited pass skipped for the kept ones (their copies count in the next step); report the tokens run."""
        self.nodes = {key: self.nodes[key] for key in kept if key in self.nodes}
        for key, node in self.looked.settle(kept).items():
            self.nodes.setdefault(key, node)
        reached = {n.handle for node in [*self.nodes.values(), *self.looked.nodes()] for n in node.chain()}
        dropped = [handle for handle in self._stored if handle not in reached]
        self.kv.free(dropped)
        for handle in dropped:
            del self._stored[handle]
        self.kv.start_step()
        exited = None
        if self.exit is not None:
            self.nodes = {key: self._completed(node) for key, node in self.nodes.items()}
            exited = self.exit.settle()
        cost = VerifierCost(self._tokens, self._tokens_full, exited, self._forwards, self._rows, *self.looked.counts())
        self._tokens = self._tokens_full = self._forwards = self._rows = 0
        return cost

    @torch.inference_mode()
    def _completed(self, node: KVNode) -> KVNode:
        """`node` with the KV of the layers its exited pass skipped, run from its pending hidden states."""
        if node.pending is None:
            return node
        chain = node.parent.chain() if node.parent is not None else []
        start, done = node.length - node.pending.shape[1], node.layers_run
        arena, run = self.kv.arena(1, node.length, keep=[n.handle for n in [*chain, node]])  # [L, 2, 1, H, W, D]
        try:
            self._fill(arena, chain)
            self.exit.complete(node.pending, arena_cache(self.body.config, arena, start), start, done)
            self.kv.write(node.handle, arena[done:, :, 0, :, start : node.length], first_layer=done)
        finally:
            self.kv.release(run)
        return self._keep(KVNode(node.parent, node.handle, node.length))

    def _batch(self, parent: KVNode | None, items: list[StepToScore]) -> int:
        """How many of `items` (siblings) run together: up to the batch size, fewer when the budget is tight."""
        start = parent.length if parent is not None else 0
        widths = [len(self._new_ids(i, start)) for i in items[: self.batch_size]]
        count = len(widths)
        while count > 1 and not self.kv.fits(count, start + max(widths[:count])):
            count -= 1
        return count  # one row that does not fit is refused, with the budget it needs, by the arena

    def _new_ids(self, item: StepToScore, start: int) -> list[int]:
        q = item.question
        own = self.layout.body(q, item.previous_steps, item.step) + self.layout.probe(q)
        return own + self._ahead_ids(item, start, len(own))

    def _ahead_ids(self, item: StepToScore, start: int, own: int) -> list[int]:
        """What of `item.ahead` rides in the item's row after its `own` tokens (`start` columns after its
        parent's chain): none unless the verifier looks ahead."""
        if item.ahead is None or not self.looks_ahead:
            return []
        return ahead_body(self.layout.body, item, own, lambda width: self.kv.fits(1, start + width))

    def _group(self, parent: KVNode | None, items: Sequence[StepToScore], rows: list[int]) -> VerifyGroup:
        q, start = items[rows[0]].question, parent.length if parent is not None else 0
        bodies = [self.layout.body(q, items[r].previous_steps, items[r].step) for r in rows]
        probe = self.layout.probe(q)
        aheads = [self._ahead_ids(items[r], start, len(b) + len(probe)) for r, b in zip(rows, bodies, strict=True)]
        sequences = tuple(tuple(b + probe + a) for b, a in zip(bodies, aheads, strict=True))
        return VerifyGroup(parent, tuple(rows), sequences, tuple(len(b) for b in bodies), tuple(len(a) for a in aheads))

    def _score_group(self, group: VerifyGroup, arena: torch.Tensor, items: Sequence[StepToScore],
                     scores: list[float]) -> None:
        """Run a loaded group (its arena holds the parent's chain in every row) and keep its rows' new KV."""
        sequences = [list(s) for s in group.sequences]
        last, children, looked = self._run(arena, group.parent, sequences, list(group.keep), True, group.ahead)
        probe = len(group.sequences[0]) - group.keep[0] - group.ahead[0]
        for row, value, child in zip(group.rows, self.readout(last).float().tolist(), children, strict=True):
            scores[row] = value
            self.nodes[items[row].key] = child
            self._tokens_full += child.length + probe
        if looked:
            ahead_scores = self.readout(torch.stack([hidden for hidden, _ in looked.values()])).float().tolist()
            for (index, (_, node)), value in zip(looked.items(), ahead_scores, strict=True):
                item = items[group.rows[index]]
                self.looked.remember((*item.key, item.ahead), node, value)

    def _score_siblings(self, parent: KVNode | None, items: list[StepToScore], rows: list[int],
                        scores: list[float]) -> None:
        q = items[0].question
        bodies = [self.layout.body(q, i.previous_steps, i.step) for i in items]
        probe = self.layout.probe(q)
        last, children = self._extend(parent, [b + probe for b in bodies], [len(b) for b in bodies], scoring=True)
        values = self.readout(last).float().tolist()  # [B]
        for row, item, value, child in zip(rows, items, values, children, strict=True):
            scores[row] = value
            self.nodes[item.key] = child
            self._tokens_full += child.length + len(probe)

    def _node(self, key: PathKey) -> KVNode:
        """The cached node of `key`, computing missing ancestors one segment at a time."""
        if key in self.nodes:
            self.nodes[key] = self._completed(self.nodes[key])  # a parent is read at every layer
            return self.nodes[key]
        if len(key) == 1:
            parent, ids = None, self.layout.prefix(key[0])
        else:
            parent, ids = self._node(key[:-1]), self.layout.body(key[0], key[1:-1], key[-1])
        node = self._extend(parent, [ids], [len(ids)])[1][0]
        self.nodes[key] = node
        return node

    def _extend(self, parent: KVNode | None, sequences: list[list[int]], keep: list[int],
                scoring: bool = False) -> tuple[torch.Tensor, list[KVNode]]:
        """Run `sequences` (right-padded) after `parent`; each row keeps its first `keep[r]` new tokens' KV.

        Returns the hidden state at each row's last real token ([B, H]) and the rows' new nodes.
        Padding sits after every real token, so causal attention keeps it out of the real rows.
        A `scoring` pass goes through the entropy exit when there is one (ancestors never do).
        """
        if any(not s for s in sequences):
            raise ValueError("a verifier segment is empty; every step needs at least its separator token.")
        chain = parent.chain() if parent is not None else []
        start = parent.length if parent is not None else 0
        width = start + max(len(s) for s in sequences)
        arena, run = self.kv.arena(len(sequences), width, keep=[n.handle for n in chain])  # [L, 2, B, H, W, D]
        try:
            self._fill(arena, chain)
            return self._run(arena, parent, sequences, keep, scoring)[:2]
        finally:
            self.kv.release(run)

    def _run(self, arena: torch.Tensor, parent: KVNode | None, sequences: list[list[int]], keep: list[int],
             scoring: bool, ahead: Sequence[int] = ()) -> tuple[torch.Tensor, list[KVNode], dict[int, tuple]]:
        """`_extend` over an arena whose rows already hold the parent's chain. A row whose last `ahead[r]`
        tokens are a look-ahead step (no probe, no exit) is read at the end of its own step, and its
        look-ahead's hidden state `[H]` and node (a child of the row's) come back by row in the third value."""
        batch, width = len(sequences), max(len(s) for s in sequences)
        ahead = list(ahead) or [0] * batch
        ids = torch.full((batch, width), self.pad_id, dtype=torch.long)  # [B, T]
        for row, seq in enumerate(sequences):
            ids[row, : len(seq)] = torch.tensor(seq)
        start = parent.length if parent is not None else 0
        cache = arena_cache(self.body.config, arena, start)
        lengths = torch.tensor([len(s) for s in sequences], device=self.device)
        ran, pending = arena.shape[0], None
        if scoring and self.exit is not None:
            passed = self.exit.run(ids.to(self.device), cache, start, lengths)
            last, ran, pending = passed.last, passed.layers, passed.hidden
        else:
            hidden = self.body(input_ids=ids.to(self.device), use_cache=True, **cache_kwargs(self.body, cache))
            hidden = hidden.last_hidden_state
            rows = torch.arange(batch, device=self.device)
            own = lengths - 1 - torch.tensor(ahead, device=self.device)  # [B]: each row's own step ends there
            last, ends = hidden[rows, own], hidden[rows, lengths - 1]  # [B, H] each
        nodes = [self._store(parent, arena[:ran, :, row, :, start : start + keep[row]], start + keep[row],
                             None if pending is None else pending[row : row + 1, : keep[row]].clone())
                 for row in range(batch)]
        looked = {}
        for row in (r for r in range(batch) if ahead[r]):
            end = start + keep[row] + ahead[row]
            looked[row] = (ends[row], self._store(nodes[row], arena[:, :, row, :, start + keep[row] : end], end, None))
        self._tokens += int(lengths.sum())
        self._forwards, self._rows = self._forwards + 1, self._rows + batch
        return last, nodes, looked

    def _fill(self, arena: torch.Tensor, chain: list[KVNode]) -> None:
        """Row 0 of the arena gets the parent's chain from its segments; the other rows copy row 0's.
        Nothing overlaps these loads: on the CPU their modelled PCIe time is all stall."""
        offset, before = 0, self.kv.counters.step["h2d"]
        for node in chain:
            tokens = node.length - offset
            self.kv.load(node.handle, arena[:, :, 0, :, offset : node.length])
            offset += tokens
        self.kv.repeat_row(arena, offset)
        self.kv.model_stall(self.kv.counters.step["h2d"] - before, 0.0)

    def _store(self, parent: KVNode | None, kv: torch.Tensor, length: int, pending: torch.Tensor | None) -> KVNode:
        """A new segment of `kv` `[l, 2, H, T, D]`: every layer, or the first `l` with `pending` (an exited pass)."""
        return self._keep(KVNode(parent, self.kv.put(kv), length, pending, kv.shape[0] if pending is not None else 0))

    def _keep(self, node: KVNode) -> KVNode:
        self._stored[node.handle] = node
        return node
