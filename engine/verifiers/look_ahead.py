"""LookAhead verification (FlashTTS): a child's speculated step, verified in its parent's pass, until it is asked.

When a candidate's row speculated its first child's whole next step (engine/speculation.py), the
verifier runs that step in the same row as the candidate's own: `body(step t) + body(next step)`,
reading the step-t score at the end of its body (causal attention: the tokens after it change
nothing) and the next step's at the row's end, and storing the two segments as a node and its child.
`LookAheads` remembers the child's score and node under the child's path key until the next step
asks for it; `settle` keeps those whose parent path was kept and frees the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from engine.verifiers.base import PathKey, StepToScore
from engine.verifiers.schedule import KVNode

Body = Callable[[str, tuple[str, ...], str], list[int]]  # a layout's `body(question, previous, step)` (path_kv.py)


def ahead_body(body: Body, item: StepToScore, own: int, fits: Callable[[int], bool]) -> list[int]:
    """The body of `item.ahead` (the next step, after `item.step`) as it follows the item's own `own` tokens
    in its row; none when the row of both (`fits(tokens)`) would not fit the verifier's budget alone."""
    ids = body(item.question, (*item.previous_steps, item.step), item.ahead)
    return ids if fits(own + len(ids)) else []


@dataclass(frozen=True)
class Ahead:
    """A next step verified ahead: its segment (a child of its parent step's) and its score."""

    node: KVNode
    score: float


class LookAheads:
    """The look-aheads waiting for their child, by the child's path key, and how many were made, used, dropped."""

    def __init__(self) -> None:
        self.waiting: dict[PathKey, Ahead] = {}
        self.verified = self.used = self.discarded = 0

    def remember(self, key: PathKey, node: KVNode, score: float) -> None:
        """Keep the look-ahead for `key`'s child; one already there for the same path (two candidates whose
        paths read the same) is replaced and counts as discarded (its segment is freed at `settle`)."""
        self.discarded += key in self.waiting
        self.waiting[key] = Ahead(node, score)
        self.verified += 1

    def take(self, key: PathKey) -> Ahead | None:
        """The look-ahead of `key`'s step, if one waits: the child asked, so it is used (and no longer waits)."""
        ahead = self.waiting.pop(key, None)
        self.used += ahead is not None
        return ahead

    def settle(self, kept: Collection[PathKey]) -> dict[PathKey, KVNode]:
        """The step is decided. A look-ahead whose parent path is kept waits for its child's step; one whose
        own path is kept (its step was ranked without the verifier: RKSC's verify-skip) gives that path its
        node, and is used; the others are dropped (their candidates were pruned). Returns the given nodes."""
        given = {key: self.waiting.pop(key).node for key in kept if key in self.waiting}
        self.used += len(given)
        parents = set(kept)
        dropped = [key for key in self.waiting if key[:-1] not in parents]
        for key in dropped:
            del self.waiting[key]
        self.discarded += len(dropped)
        return given

    def nodes(self) -> list[KVNode]:
        return [ahead.node for ahead in self.waiting.values()]

    def counts(self) -> tuple[int, int, int]:
        """(verified, used, discarded) since the last call."""
        counts = (self.verified, self.used, self.discarded)
        self.verified = self.used = self.discarded = 0
        return counts
