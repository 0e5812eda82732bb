"""The search loop: reproducible, N kept and N*M generated per step, cancellable, clear failures."""

from __future__ import annotations

import pytest

from engine import events as ev
from engine.config import CacheConfig, SearchConfig
from engine.search import run
from engine.verifiers import aggregate

SEARCH = SearchConfig(beams=3, width=2, step_tokens=5, max_steps=4, step_delimiter=None, seed=11)


def events_of(loaded, search=SEARCH, cache=None, **kwargs):
    return list(run("What is 2+3?", loaded, search, cache or CacheConfig(), **kwargs))


def test_same_seed_same_search_other_seed_differs(tiny):
    texts = lambda evs: [(e.id, e.text) for e in evs if e.type == "candidate_scored"]  # noqa: E731
    first, again = events_of(tiny), events_of(tiny)
    assert texts(first) == texts(again)
    assert texts(events_of(tiny, SearchConfig(**{**SEARCH.to_dict(), "seed": 12}))) != texts(first)


def test_keeps_n_and_generates_n_times_m_per_step(tiny):
    evs = events_of(tiny)
    selected = [e for e in evs if e.type == "step_selected"]
    assert len(selected) == SEARCH.max_steps
    for sel in selected:
        assert len(sel.kept) == SEARCH.beams
        scored = [e for e in evs if e.type == "candidate_scored" and e.step == sel.step]
        unfinished = sel.step == 1 or all(not e.finished for e in evs if e.type == "candidate_scored")
        if unfinished:
            assert len(scored) == SEARCH.candidates_per_step
        assert set(sel.kept) | set(sel.pruned) >= {e.id for e in scored}


def test_event_order_per_step_and_terminal_event(tiny):
    types = [e.type for e in events_of(tiny)]
    assert types[:2] == ["run_started", "prefill_done"]
    assert types[-1] == "run_finished" and types.count("run_finished") == 1
    step = types[types.index("step_started") : types.index("step_selected") + 1]
    order = [
        "step_started",
        "group_scheduled",
        "candidate_text",
        "candidate_scored",
        "memory_snapshot",
        "transfer_stats",
        "step_selected",
    ]
    assert [t for i, t in enumerate(step) if i == 0 or t != step[i - 1]] == order


def test_answer_is_the_best_path_and_its_score_is_the_aggregate(tiny):
    evs = events_of(tiny, SearchConfig(**{**SEARCH.to_dict(), "aggregation": "min"}))
    scored = {e.id: e for e in evs if e.type == "candidate_scored"}
    done = evs[-1]
    path_scores = [scored[c].score for c in done.path]
    assert done.score == pytest.approx(aggregate(path_scores, "min"))
    assert [scored[c].parent for c in done.path] == [None, *done.path[:-1]]
    last_kept = [e for e in evs if e.type == "step_selected"][-1].kept
    assert done.path[-1] == max(last_kept, key=lambda c: (scored[c].aggregate, -c))


@pytest.mark.parametrize("policy", ["in_device", "lbs", "layerwise"])
def test_cancel_between_decode_calls_stops_within_a_step(tiny, policy):
    calls = {"n": 0}

    def stop_after_some_tokens():
        calls["n"] += 1
        return calls["n"] > 12

    cache = CacheConfig(policy=policy, kv_budget_bytes=10**9)
    evs = events_of(tiny, cache=cache, should_stop=stop_after_some_tokens)
    assert evs[-1].type == "run_cancelled"
    assert calls["n"] <= 14  # checked before every forward: it stopped at once
    assert evs[-1].step == sum(1 for e in evs if e.type == "step_selected")


def test_self_judge_scores_are_probabilities(tiny):
    search = SearchConfig(beams=2, width=2, step_tokens=4, max_steps=2, step_delimiter=None, verifier="self-judge")
    scores = [e.score for e in events_of(tiny, search) if e.type == "candidate_scored"]
    assert len(scores) == 8 and all(0.0 <= s <= 1.0 for s in scores) and len(set(scores)) > 1


def test_budget_too_small_names_the_budget_the_step_needs_and_the_one_the_search_needs(tiny):
    evs = events_of(tiny, cache=CacheConfig(policy="lbs", kv_budget_bytes=1000))
    assert evs[-1].type == "run_failed" and evs[-1].error == "KVBudgetTooSmall"
    assert "this step needs" in evs[-1].message and "is enough for every step of this search" in evs[-1].message


@pytest.mark.parametrize("question", ["", "   \n"])
def test_empty_question_fails_clearly(tiny, question):
    evs = list(run(question, tiny, SEARCH, CacheConfig()))
    assert [e.type for e in evs] == ["run_failed"] and evs[0].error == "InvalidPrompt"


def test_question_longer_than_the_context_fails_clearly(tiny):
    evs = list(run("word " * 5000, tiny, SEARCH, CacheConfig()))
    assert evs[-1].error == "InvalidPrompt" and "context" in evs[-1].message


@pytest.fixture
def closed(monkeypatch) -> list[str]:
    """What the run closed, in order: "kv" (its KV cache) and "verifier"."""
    import engine.search as search_module
    from engine.kv.cache import KVCache

    seen: list[str] = []
    close_kv, make = KVCache.close, search_module.make_verifier

    def made(*args, **kwargs):
        verifier = make(*args, **kwargs)
        close = verifier.close
        verifier.close = lambda: (seen.append("verifier"), close())[1]
        return verifier

    monkeypatch.setattr(KVCache, "close", lambda kv: (seen.append("kv"), close_kv(kv))[1])
    monkeypatch.setattr(search_module, "make_verifier", made)
    return seen


def test_a_run_closed_by_its_consumer_at_run_started_closes_its_kv_cache_and_verifier(tiny, closed):
    """The cleanup began only after RunStarted's yield: closing the generator there closed neither."""
    events = run("What is 2+3?", tiny, SEARCH, CacheConfig())
    assert next(events).type == "run_started" and closed == []
    events.close()
    assert closed == ["kv", "verifier"]


def test_a_run_that_fails_setting_up_closes_what_it_made(tiny, closed, monkeypatch):
    """The verifier's budget failing left the KV cache and the verifier open; a prompt that fails left the
    verifier open (it was made before the prompt was checked)."""
    import engine.search as search_module

    make = search_module.make_verifier  # the fixture's, which spies on close

    def refusing(*args, **kwargs):
        verifier = make(*args, **kwargs)

        def use_budget(device_bytes, block_size=16):
            raise RuntimeError("injected: no share for the verifier")

        verifier.use_budget = use_budget
        return verifier

    monkeypatch.setattr(search_module, "make_verifier", refusing)
    evs = list(run("What is 2+3?", tiny, SEARCH, CacheConfig()))
    assert [e.type for e in evs] == ["run_failed"] and "injected" in evs[0].message
    assert closed == ["kv", "verifier"]
    closed.clear()
    assert [e.type for e in run("", tiny, SEARCH, CacheConfig())] == ["run_failed"]
    assert closed == ["verifier"]


def test_auto_policy_is_in_device_when_it_fits_else_lbs(tiny):
    started = lambda cache: events_of(tiny, cache=cache)[0]  # noqa: E731
    assert started(CacheConfig()).policy == "in_device"
    assert started(CacheConfig(kv_budget_bytes=400_000)).policy == "lbs"


def test_a_finished_beam_that_falls_out_is_reported_pruned(tiny):
    """Finished beams stay in the kept set and compete each step; when one drops out it is pruned."""
    import dataclasses

    often_done = dataclasses.replace(tiny, eos_token_ids=tuple(range(2, 90)))  # ~1 in 6 tokens ends a beam
    # seed: one whose draws carry a finished beam that later drops out (chosen for the counter-based stream)
    search = SearchConfig(beams=3, width=2, step_tokens=4, max_steps=6, step_delimiter=None, seed=4)
    evs = events_of(often_done, search)
    scored = {e.id: e for e in evs if e.type == "candidate_scored"}
    previous: set[int] = set()
    carried_then_pruned = 0
    for sel in (e for e in evs if e.type == "step_selected"):
        fresh = {e.id for e in scored.values() if e.step == sel.step}
        carried = {c for c in previous if scored[c].finished}
        assert set(sel.kept) | set(sel.pruned) == fresh | carried  # every competitor is kept or pruned
        assert not set(sel.kept) & set(sel.pruned)
        carried_then_pruned += len(carried & set(sel.pruned))
        previous = set(sel.kept)
    assert carried_then_pruned > 0, "the run never carried a finished beam that later dropped out"


def test_idle_row_slots_count_what_stragglers_waste(tiny):
    """Rows that end their step at a delimiter ride on until the group's longest row ends: every step reports
    exactly those slots, and the run reports its answer path's tokens per second (goodput)."""
    from engine.kv.policy import idle_slots
    from engine.rows import RowResult

    assert idle_slots([RowResult(fed=[1, 2, 3]), RowResult(fed=[1]), RowResult(fed=[])]) == 5
    search = SearchConfig(beams=2, width=3, step_tokens=8, max_steps=3, step_delimiter=" ", seed=3)
    events = list(run("What is 2+3?", tiny, search, CacheConfig(policy="in_device")))
    stats = [e for e in events if e.type == "transfer_stats"]
    per_step = {}
    for e in events:
        if e.type == "candidate_text":
            per_step.setdefault(e.step, []).append(e.tokens)
    for s in stats:
        lengths = per_step[s.step]
        assert s.idle_row_slots == len(lengths) * max(lengths) - sum(lengths)
    assert sum(s.idle_row_slots for s in stats) > 0, "pick a seed where some step ends early"
    finished = events[-1]
    assert finished.goodput > 0 and finished.goodput <= finished.tokens_per_second


def test_goodput_is_the_kept_beams_path_tokens_per_second_of_their_completion(tiny):
    """FlashTTS's goodput: each final kept beam's path tokens over its completion time (EOS: when its path
    ended; else the search's end), averaged; the answer path's tokens over the run's seconds stay beside it."""
    import dataclasses

    from engine.candidate import Candidate, completion, goodput

    assert goodput([(10, 2.0), (30, 3.0)]) == 7.5 and goodput([]) == 0.0
    assert completion(Candidate(4, None, 1, completed_at=1.5), 12, 9.0) == (4, 12, 1.5)
    assert completion(Candidate(5, None, 1), 12, 9.0) == (5, 12, 9.0)
    often_done = dataclasses.replace(tiny, eos_token_ids=tuple(range(2, 90)))  # ~1 in 6 tokens ends a beam
    search = SearchConfig(beams=3, width=2, step_tokens=4, max_steps=6, step_delimiter=None, seed=24)
    evs = events_of(often_done, search)
    finished, last = evs[-1], [e for e in evs if e.type == "step_selected"][-1]
    texts = {e.id: e for e in evs if e.type == "candidate_text"}
    assert [cid for cid, _, _ in finished.completions] == list(last.kept)
    ended = {cid for cid, _, _ in finished.completions if texts[cid].finished}
    assert ended and ended != set(last.kept), "pick a seed where some kept beams end early and some do not"
    for cid, tokens, at in finished.completions:
        path = [cid]
        while texts[path[-1]].parent is not None:
            path.append(texts[path[-1]].parent)
        assert tokens == sum(texts[p].tokens for p in path)
        assert (at < finished.seconds) if cid in ended else (at == finished.seconds)
    rates = [tokens / at for _, tokens, at in finished.completions]
    assert finished.goodput == pytest.approx(sum(rates) / len(rates))
    answer_tokens = sum(texts[p].tokens for p in finished.path)
    assert finished.answer_tokens_per_second == pytest.approx(answer_tokens / finished.seconds)
    old = {k: v for k, v in ev.to_dict(finished).items() if k not in ("completions", "answer_tokens_per_second")}
    assert ev.from_dict(old).completions == () and ev.from_dict(ev.to_dict(finished)) == finished  # journals replay
