"""One rule for where a path ends (engine/candidate.py `path_room`): the search's `context_full`, the KV cache's
bound on the steps (engine/kv/sizing.py `within_context`) and the runner's stop (engine/step_buffers.py
`fills_context`) read the same room, so they cannot drift apart."""

from __future__ import annotations

import pytest

from engine.candidate import path_room
from engine.config import SearchConfig
from engine.kv.sizing import within_context
from engine.rows import StepRules
from engine.step_buffers import fills_context


@pytest.mark.parametrize(("prompt", "context", "step"), [(100, 113, 6), (100, 112, 6), (10, 2048, 32), (50, 51, 8)])
def test_the_caches_steps_hold_exactly_the_room_a_path_has(prompt: int, context: int, step: int) -> None:
    room = path_room(prompt, context)
    assert room == context - prompt  # a path holds at most the context, prompt included
    steps = within_context(SearchConfig(step_tokens=step, max_steps=1000), prompt, context).max_steps
    assert (steps - 1) * step < room <= steps * step  # the last step the cache counts is the one that fills it


@pytest.mark.parametrize(("prompt", "context"), [(100, 113), (7, 9), (10, 2048)])
def test_the_runner_stops_at_the_token_that_fills_the_room(prompt: int, context: int) -> None:
    """The runner feeds a path's last token at position prompt + tokens - 1 and samples the next from it: the
    token it samples with `path_room` tokens written is the one after which the search calls the path full."""
    rules = StepRules(max_tokens=8, delimiter=None, eos_ids=frozenset(), temperature=0.0, top_p=1.0,
                      decode=str, context_length=context)
    room = path_room(prompt, context)
    for written in range(1, room + 1):  # tokens of the path after the prompt once this one is sampled
        fed = prompt + written - 2  # the position the token is sampled from
        assert fills_context(fed, rules) == (written >= room)
