"""A verifier over a tree of KV segments: the question and each accepted step run once, shared by children.

Every verifier that reads a model (the PRM families and self-judge) lays a path out as token pieces
that never change once written: a `prefix` (the question in the model's format), one `body` per step
(the step and its separator) and a `probe` (text asked after the latest step, dropped afterwards).
The score is read from the model's last hidden state at the last token of `body + probe`.

A path's KV is a chain of `KVNode`s, each holding only its own segment; siblings point to the same
parent node, so the question and the accepted steps are computed once and shared (Python's
refcounts free a segment when no kept path uses it). Scoring a candidate runs only its new step
and the probe on top of its parent's chain. With RKSC's layer-entropy exit (entropy_exit.py) a
scoring pass may stop early; a kept candidate's skipped layers are completed in `settle`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from transformers import DynamicCache

from engine.verifiers.base import PathKey, StepToScore, VerifierCost
from engine.verifiers.entropy_exit import EntropyExit

Readout = Callable[[torch.Tensor], torch.Tensor]  # hidden [B, H] -> scores [B] in [0, 1]


class Layout(Protocol):
    """How one model family writes a path as token ids (each piece tokenized on its own)."""

    def prefix(self, question: str) -> list[int]: ...

    def body(self, question: str, previous: tuple[str, ...], step: str) -> list[int]: ...

    def probe(self, question: str) -> list[int]: ...


@dataclass(frozen=True)
class KVNode:
    """One segment of a path's KV: its own keys and values per layer, and the path's length through it."""

    parent: KVNode | None
    layers: tuple[tuple[torch.Tensor, torch.Tensor], ...]  # per layer (keys, values): [1, H_kv, T, D]
    length: int
    pending: torch.Tensor | None = None  # [1, T, H] entropy exit: the last run layer's output, later layers missing

    def chain(self) -> list[KVNode]:
        """The nodes from the root down to this one."""
        nodes, node = [], self
        while node is not None:
            nodes.append(node)
            node = node.parent
        return nodes[::-1]


class PathVerifier:
    """Scores steps with `body` (a transformers base model returning `last_hidden_state`) and `readout`."""

    def __init__(self, name: str, body: torch.nn.Module, layout: Layout, readout: Readout,
                 device: torch.device, *, pad_id: int = 0, batch_size: int = 8) -> None:
        if batch_size < 1:
            raise ValueError(f"the verifier batch size must be at least 1 (got {batch_size}).")
        self.name, self.body, self.layout, self.readout = name, body, layout, readout
        self.device, self.pad_id, self.batch_size = device, pad_id, batch_size
        self.nodes: dict[PathKey, KVNode] = {}
        self._tokens = self._tokens_full = 0
        self.exit: EntropyExit | None = None  # RKSC's layer-entropy exit, attached by entropy_exit.with_exit

    def path_ids(self, item: StepToScore) -> list[int]:
        """The whole path as the model reads it (pieces concatenated); the score is read at its last token."""
        q, prev = item.question, item.previous_steps
        bodies = [self.layout.body(q, prev[:k], prev[k]) for k in range(len(prev))]
        return [*self.layout.prefix(q), *(i for b in bodies for i in b), *self.layout.body(q, prev, item.step),
                *self.layout.probe(q)]

    @torch.inference_mode()
    def score(self, items: Sequence[StepToScore]) -> list[float]:
        """Run each item's new step (+ probe) over its parent's cached KV; siblings run as one batch."""
        scores = [0.0] * len(items)
        by_parent: dict[PathKey, list[int]] = {}
        for index, item in enumerate(items):
            by_parent.setdefault(item.parent_key, []).append(index)
        for parent_key, rows in by_parent.items():
            parent = self._node(parent_key)
            for start in range(0, len(rows), self.batch_size):
                chunk = rows[start : start + self.batch_size]
                self._score_siblings(parent, [items[i] for i in chunk], chunk, scores)
        return scores

    def settle(self, kept: Sequence[PathKey]) -> VerifierCost:
        """Keep KV only for the kept paths (and, through them, their ancestors); report the tokens run."""
        self.nodes = {key: self.nodes[key] for key in kept if key in self.nodes}
        if self.exit is None:
            cost = VerifierCost(self._tokens, self._tokens_full)
        else:
            self.nodes = {key: self._completed(node) for key, node in self.nodes.items()}
            cost = VerifierCost(self._tokens, self._tokens_full, self.exit.settle())
        self._tokens = self._tokens_full = 0
        return cost

    def _completed(self, node: KVNode) -> KVNode:
        """`node` with the KV of the layers its exited pass skipped (run from its pending hidden states)."""
        if node.pending is None:
            return node
        done, keep = len(node.layers), node.pending.shape[1]
        cache = _batched_cache(node.parent, 1)
        start = node.length - keep
        self.exit.complete(node.pending, cache, start, done)
        rest = _row_node(node.parent, cache.layers[done:], 0, start, keep)
        return KVNode(node.parent, node.layers + rest.layers, node.length)

    def _score_siblings(self, parent: KVNode, items: list[StepToScore], rows: list[int], scores: list[float]) -> None:
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
        batch, width = len(sequences), max(len(s) for s in sequences)
        ids = torch.full((batch, width), self.pad_id, dtype=torch.long)  # [B, T]
        for row, seq in enumerate(sequences):
            ids[row, : len(seq)] = torch.tensor(seq)
        cache = _batched_cache(parent, batch)
        lengths = torch.tensor([len(s) for s in sequences], device=self.device)
        start = parent.length if parent is not None else 0
        layers, pending = cache.layers, None
        if scoring and self.exit is not None:
            passed = self.exit.run(ids.to(self.device), cache, start, lengths)
            last, layers, pending = passed.last, cache.layers[: passed.layers], passed.hidden
        else:
            out = self.body(input_ids=ids.to(self.device), past_key_values=cache, use_cache=True)
            last = out.last_hidden_state[torch.arange(batch, device=self.device), lengths - 1]  # [B, H]
        nodes = [_row_node(parent, layers, row, start, keep[row], pending) for row in range(batch)]
        self._tokens += int(lengths.sum())
        return last, nodes


def _batched_cache(parent: KVNode | None, batch: int) -> DynamicCache:
    """The parent's whole path KV, the same for every row: [B, H_kv, S, D] per layer (views, no copy per row)."""
    if parent is None:
        return DynamicCache()
    chain = parent.chain()
    layers = []
    for layer in range(len(parent.layers)):
        keys = torch.cat([n.layers[layer][0] for n in chain], dim=2)  # [1, H_kv, S, D]
        values = torch.cat([n.layers[layer][1] for n in chain], dim=2)
        layers.append((keys.expand(batch, -1, -1, -1), values.expand(batch, -1, -1, -1)))
    return DynamicCache(layers)


def _row_node(parent: KVNode | None, cache_layers, row: int, start: int, keep: int,
              pending: torch.Tensor | None = None) -> KVNode:
    """Row `row`'s own segment from a batched cache's layers (`pending`: [B, T, H] when layers were skipped)."""
    layers = tuple(
        (layer.keys[row : row + 1, :, start : start + keep].clone(),
         layer.values[row : row + 1, :, start : start + keep].clone())
        for layer in cache_layers
    )
    held = None if pending is None else pending[row : row + 1, :keep].clone()
    return KVNode(parent, layers, start + keep, held)
