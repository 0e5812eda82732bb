"""Search methods: how candidates expand each step and which survive, over search.py's one step loop.

`method_for(config)` gives the policy of `config.method`: `beam` (the best N of N x M), `dvts`
(N independent subtrees, each keeps its best child), `best-of-n` (N x M complete samples, the
verifier picks at the end) and `greedy` (one path at temperature 0). `lookahead` rolls children out
greedily for scoring, `confidence` is RKSC's verify-skip, `selection` picks the final answer.
"""

from __future__ import annotations

from engine.config import SearchConfig
from engine.methods.base import Method
from engine.methods.policies import BeamMethod, BestOfNMethod, DvtsMethod, GreedyMethod

__all__ = ["Method", "method_for"]


def method_for(config: SearchConfig) -> Method:
    """The expand/select policy of `config.method`."""
    if config.method == "beam":
        return BeamMethod(config.beams, config.width)
    if config.method == "dvts":
        return DvtsMethod(config.beams, config.width)
    if config.method == "best-of-n":
        return BestOfNMethod(config.beams * config.width)
    if config.method == "greedy":
        return GreedyMethod()
    raise ValueError(f"unknown method {config.method!r}; use beam, best-of-n, dvts or greedy.")
