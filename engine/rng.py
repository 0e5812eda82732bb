"""Counter-based random draws: the uniform of (stream key, position) is a pure hash, not generator state.

A candidate's tokens then depend only on its own logits and these numbers, never on which group,
batch or order it was decoded in, and a whole batch's draws come from one vectorised host call
(no per-row generator, no per-row device round trip).

Streams are keyed by a candidate's place in the tree, not by the id the search gives it: the
prompt's stream comes from the seed, child k of a candidate hashes (its parent's key, k), and child
0 *continues* its parent's stream (its positions come after the parent's, so no draw is used twice).
So the tokens a candidate's first child will sample are known before anyone is selected: a row
that ended its step early keeps decoding with the same draws (speculative beam extension).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # splitmix64's increment
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_MASK64 = (1 << 64) - 1


def _mix64(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on a uint64 array (wrapping arithmetic, no warnings for arrays)."""
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


@dataclass(frozen=True)
class CandidateStream:
    """One candidate's random stream: its draw for position `p` is a hash of (key, p)."""

    key: int  # 64 bits


def _hash_pair(a: int, b: int) -> int:
    """A 64-bit key from two integers (splitmix64 of a, offset by b)."""
    a_, b_ = (np.array([x & _MASK64], dtype=np.uint64) for x in (a, b))  # arrays wrap without warnings
    return int(_mix64(_mix64(a_ + _GOLDEN) + b_ * _GOLDEN)[0])


def root_stream(seed: int) -> CandidateStream:
    """The prompt's stream: the first step's candidates are its children."""
    return CandidateStream(_hash_pair(seed, 0))


def child_stream(parent: CandidateStream, index: int) -> CandidateStream:
    """The stream of the `index`-th child: the first child continues its parent's, the others hash (key, index)."""
    return parent if index == 0 else CandidateStream(_hash_pair(parent.key, index))


def stream_keys(streams: Sequence[CandidateStream]) -> np.ndarray:
    """uint64 key of each stream: [B]."""
    for stream in streams:
        if not isinstance(stream, CandidateStream):
            raise TypeError(f"a decode row needs a CandidateStream (engine.rng.child_stream), not {type(stream)!r}")
    return np.array([s.key & _MASK64 for s in streams], dtype=np.uint64)


def uniforms(streams: Sequence[CandidateStream], positions: Sequence[int], count: int) -> torch.Tensor:
    """Draws `[B, count]` float32 in (0, 1]: entry (i, j) is stream i's draw at position `positions[i] + j`.

    Each draw is the `p + 1`-th output of a splitmix64 generator seeded with the stream's key; its
    top 24 bits make a float32 that is exact and never 0 (inverse-CDF sampling relies on that).
    """
    keys = stream_keys(streams)[:, None]  # [B, 1]
    offsets = np.array([p & _MASK64 for p in positions], dtype=np.uint64)[:, None]  # [B, 1]
    counters = offsets + np.arange(1, count + 1, dtype=np.uint64)[None, :]  # [B, count]
    bits = _mix64(keys + counters * _GOLDEN) >> np.uint64(40)  # [B, count], 24 bits
    draws = (bits.astype(np.float32) + np.float32(1.0)) * np.float32(2.0**-24)
    return torch.from_numpy(draws.reshape(len(streams), count))
