"""A path that fills the model's context ends there: finished, said so, and no token computed past the context.

The model's context is made short (`context_length` of a copy of the tiny model, the same weights) so the
paths reach it in a few steps; a path holds at most `context_length` tokens, prompt included.
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager

import pytest

from app.cli import main
from engine.config import CacheConfig, SearchConfig
from engine.search import SYSTEM_PROMPT
from tests.test_equivalence import (
    QUESTION,
    assert_matches_plain_transformers,
    assert_same_observed,
    assert_same_run,
    footprint_budget,
    search_trace,
)

ROOM = 13  # tokens the short context leaves after the prompt: two 6-token steps, then one token
FIXED = SearchConfig(beams=2, width=3, step_tokens=6, max_steps=6, step_delimiter=None, seed=7)
UNEVEN = SearchConfig(beams=2, width=3, step_tokens=8, max_steps=6, step_delimiter=" ", seed=3)
SPECULATING = SearchConfig(beams=2, width=3, step_tokens=10, max_steps=12, step_delimiter="c", seed=0)


def short_context(loaded, room: int = ROOM):
    """The model with a context that leaves `room` tokens after QUESTION's prompt."""
    prompt = len(loaded.encode_chat(QUESTION, system=SYSTEM_PROMPT))
    return dataclasses.replace(loaded, context_length=prompt + room), prompt


@contextmanager
def fed_positions(loaded):
    """Every position id the model is fed while the block runs (prefill, steps and padding rows alike)."""
    seen: list[int] = []

    def hook(module, args, kwargs):
        positions = kwargs.get("position_ids")
        if positions is not None:
            seen.extend(positions.flatten().tolist())

    handle = loaded.model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield seen
    finally:
        handle.remove()


def path_tokens(events, cid: int) -> int:
    texts = {e.id: e for e in events if e.type == "candidate_text"}
    tokens = 0
    while cid is not None:
        tokens, cid = tokens + texts[cid].tokens, texts[cid].parent
    return tokens


def assert_stops_at_the_context(events, prompt: int, context: int, max_steps: int) -> None:
    """Every path within the context; the final kept ones fill it, finished and marked so; the search ends."""
    finished, selected = events[-1], [e for e in events if e.type == "step_selected"]
    assert finished.type == "run_finished", finished
    texts = [e for e in events if e.type == "candidate_text"]
    assert all(prompt + path_tokens(events, e.id) <= context for e in texts)
    for e in texts:  # a path that reached the context's end is finished there, and only such a path is marked
        fills = prompt + path_tokens(events, e.id) == context
        assert e.context_full <= fills and (e.finished or not fills)
    kept = selected[-1].kept
    full = {e.id for e in texts if e.context_full}
    assert set(kept) <= full, "the search ended with a path that had room left"
    assert finished.context_full == len(kept) and finished.context_length == context
    assert len(selected) < max_steps, "the search went on after every kept path filled the context"
    assert prompt + path_tokens(events, finished.path[-1]) == context


@pytest.mark.parametrize("search", [FIXED, UNEVEN], ids=["fixed-steps", "delimiter-steps"])
def test_a_path_that_fills_the_context_ends_there(tiny, search):
    loaded, prompt = short_context(tiny)
    with fed_positions(tiny) as positions:
        events, _, _ = search_trace(loaded, search, CacheConfig(policy="in_device", prefix_cache=False))
    assert max(positions) < loaded.context_length, "a token was computed past the model's context"
    assert_stops_at_the_context(events, prompt, loaded.context_length, search.max_steps)


def test_the_last_step_is_cut_to_the_room_left(tiny):
    """Two 6-token steps, then the one token the context has left: it ends every path (no 1-token steps on)."""
    loaded, _ = short_context(tiny)
    events, _, _ = search_trace(loaded, FIXED, CacheConfig(policy="in_device", prefix_cache=False))
    tokens = {e.step: e.tokens for e in events if e.type == "candidate_text"}
    assert tokens == {1: 6, 2: 6, 3: 1}
    assert all(e.context_full == (e.step == 3) for e in events if e.type == "candidate_text")


def test_logits_at_the_context_end_are_plain_transformers(tiny):
    """Each token up to the context's last slot is computed at its own position (none held at a repeated one)."""
    loaded, _ = short_context(tiny)
    trace = search_trace(loaded, FIXED, CacheConfig(policy="in_device", prefix_cache=False))
    assert_matches_plain_transformers(loaded, trace)


@pytest.mark.parametrize("search", [FIXED, UNEVEN], ids=["fixed-steps", "delimiter-steps"])
@pytest.mark.parametrize(("policy", "candidates"), [("lbs", 1.2), ("layerwise", 4.2), ("headwise", 100)])
def test_every_policy_stops_at_the_context_as_in_device(tiny, search, policy, candidates):
    loaded, prompt = short_context(tiny)
    reference = search_trace(loaded, search, CacheConfig(policy="in_device", prefix_cache=False))
    cache = CacheConfig(policy=policy, kv_budget_bytes=footprint_budget(tiny, search, candidates), prefix_cache=False)
    with fed_positions(tiny) as positions:
        other = search_trace(loaded, search, cache)
    assert_same_run(reference, other)
    assert max(positions) < loaded.context_length
    assert_stops_at_the_context(other[0], prompt, loaded.context_length, search.max_steps)


@pytest.mark.parametrize(("policy", "candidates"), [("in_device", None), ("lbs", 1.3)])
def test_speculation_stops_at_the_context(tiny, policy, candidates):
    """Rows that speculate their children's steps stop at the context too, with the tokens of a run without."""
    loaded, prompt = short_context(tiny, room=24)
    budget = footprint_budget(tiny, SPECULATING, candidates) if candidates else None
    off = search_trace(loaded, SPECULATING, CacheConfig(policy=policy, kv_budget_bytes=budget, prefix_cache=False))
    with fed_positions(tiny) as positions:
        on = search_trace(loaded, SPECULATING, CacheConfig(policy=policy, kv_budget_bytes=budget, prefix_cache=False,
                                                           speculative=True))  # fmt: skip
    assert_same_observed(off, on)
    assert max(positions) < loaded.context_length
    for events in (off[0], on[0]):
        assert_stops_at_the_context(events, prompt, loaded.context_length, SPECULATING.max_steps)


def test_a_lookahead_roll_out_stops_at_the_context(tiny):
    """Beam with lookahead rolls each child out greedily for scoring: a roll-out went on past the context's end
    (feeding its last position and beyond), where the path's own steps stop."""
    loaded, prompt = short_context(tiny)
    search = dataclasses.replace(FIXED, method="beam", lookahead=3)
    with fed_positions(tiny) as positions:
        events, _, _ = search_trace(loaded, search, CacheConfig(policy="in_device", prefix_cache=False))
    assert max(positions) < loaded.context_length - 1, "a roll-out fed a position past where a path may feed"
    assert_stops_at_the_context(events, prompt, loaded.context_length, search.max_steps)


def test_the_command_says_the_context_is_full(tmp_path, capsys):
    """The reproduction from the report: a 2,031-token prompt in a 2,048-token context."""
    question = tmp_path / "mid.txt"
    question.write_text("What is the sum of 2 and 3? " * 90)
    argv = ["run", "--question-file", str(question), "--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2",
            "--max-steps", "6", "--step-tokens", "16", "--seed", "1", "--threads", "1", "--no-save",
            "--step-delimiter", "none"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "the model's context (2,048 tokens) is full: the paths stop here" in out
    assert "== step 3" not in out and out.count("[context full]") == 4


def test_the_windows_tree_marks_the_paths_that_filled_the_context(tiny):
    """The tree drew such a node as any finished one, whose legend read "complete (EOS)"."""
    from app.session import SessionModel

    loaded, _ = short_context(tiny)
    events, _, _ = search_trace(loaded, FIXED, CacheConfig(policy="in_device", prefix_cache=False))
    model = SessionModel()
    model.apply_many(events)
    full = {e.id for e in events if e.type == "candidate_text" and e.context_full}
    assert full and {n.id for n in model.tree.nodes.values() if n.context_full} == full
    assert all(model.tree.nodes[cid].eos for cid in full)


def test_sessions_show_and_the_exports_say_the_context_filled_the_paths(tiny, tmp_path, capsys):
    """`run` said it; the stored session's `sessions show` and exports did not (and counted '1 steps')."""
    from html import escape

    from app.export import render_session
    from app.recorder import SessionRecorder
    from app.store import SessionStore

    loaded, _ = short_context(tiny)
    events, _, _ = search_trace(loaded, FIXED, CacheConfig(policy="in_device", prefix_cache=False))
    db = tmp_path / "s.db"
    with SessionStore(db) as store:
        recorder = SessionRecorder(store)
        for event in events:
            recorder.write(event)
        said = f"The model's context ({loaded.context_length:,} tokens) is full: the paths stop here."
        assert said in render_session(store, recorder.session_id, "md")
        assert f"<td>Context</td><td>{escape(said[:-1])}</td>" in render_session(store, recorder.session_id, "html")
    assert main(["sessions", "show", "1", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert said in out and "  3 steps, " in out


def test_the_bounds_count_no_step_past_the_context(tiny):
    """`--max-steps 1000`: the whole-search bound, `auto`'s choice and the plan counted every step at full length,
    though a path ends at the model's context; they are those of the steps that fit."""
    from app.planner import plan
    from engine.config import ModelSpec
    from engine.kv.cache import KVCache
    from engine.kv.sizing import within_context

    endless = SearchConfig(beams=2, width=2, step_tokens=16, max_steps=1000, step_delimiter=None)
    prompt = 40
    fitting = within_context(endless, prompt, tiny.context_length)
    assert fitting.max_steps == -(-(tiny.context_length - prompt) // 16)
    kvs = [KVCache(tiny, search, CacheConfig(prefix_cache=False), prompt, decode=None, prefill=None)
           for search in (endless, fitting)]
    try:
        assert kvs[0].budget == kvs[1].budget and kvs[0].policy_name == kvs[1].policy_name == "in_device"
    finally:
        for kv in kvs:
            kv.close()
    spec, cache = ModelSpec("synthetic:tiny-llama"), CacheConfig(device="cpu")
    planned = plan(spec, endless, cache, question="What is 2+3?")
    fitting = within_context(endless, planned.prompt_tokens, tiny.context_length)
    assert planned.generator_kv_bytes == plan(spec, fitting, cache, question="What is 2+3?").generator_kv_bytes
