"""Speculative beam extension: the same tree, scores and answer with it off, with one continuation per
candidate and with FlashTTS's M_i; counts that add up."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from app.session import SessionModel
from engine.config import CacheConfig, SearchConfig
from engine.rng import child_stream
from engine.runner import decode_step, prefill
from engine.search import run
from engine.speculation import continuations, speculation_cap
from tests.test_decode_loop import PROMPTS, group, rules_for
from tests.test_equivalence import QUESTION, footprint_budget

# "c" is a single token the random-weight tiny model samples often (about one token in ten),
# so steps end at many different lengths: the spread speculation feeds on.
SEARCH = SearchConfig(beams=2, width=3, step_tokens=10, max_steps=3, step_delimiter="c", seed=0)


def events_of(loaded, search: SearchConfig, cache: CacheConfig) -> list:
    events = list(run(QUESTION, loaded, search, cache))
    assert events[-1].type == "run_finished", events[-1]
    return events


def tree(events) -> list:
    """What a search decides: every candidate's step and parent, each step's kept beams, the answer."""
    scored = [(e.step, e.id, e.parent, e.text, e.tokens, e.finished) for e in events if e.type == "candidate_scored"]
    kept = [(e.step, e.kept, e.pruned) for e in events if e.type == "step_selected"]
    return [scored, kept, (events[-1].answer, events[-1].path)]


def scores(events) -> list[float]:
    """Every step score and path score, and the answer's (float32 sums in other batches: equal to ~1e-7)."""
    pairs = [(e.score, e.aggregate) for e in events if e.type == "candidate_scored"]
    return [x for pair in pairs for x in pair] + [events[-1].score]


def assert_same_search(on, off) -> None:
    assert tree(on) == tree(off)
    assert scores(on) == pytest.approx(scores(off), rel=1e-5, abs=0)


def of_type(events, kind: str) -> list:
    return [e for e in events if e.type == kind]


@pytest.mark.parametrize(
    ("seed", "delimiter", "method", "policy", "candidates"),
    [
        (0, "c", "beam", "in_device", None),
        (2, "c", "beam", "lbs", 1.3),  # two groups a step
        (2, "c", "dvts", "lbs", 1.2),  # many groups a step
        (3, "c", "best-of-n", "in_device", None),  # one child a path: every kept path's speculation is used
        (5, " ", "beam", "in_device", None),
        (4, None, "beam", "lbs", 100),  # fixed-length steps: nothing ends early, nothing is speculated
    ],
)
def test_the_same_search_with_speculation_off_one_and_ranked(tiny, seed, delimiter, method, policy, candidates):
    search = dataclasses.replace(SEARCH, seed=seed, step_delimiter=delimiter, method=method)
    budget = footprint_budget(tiny, search, candidates) if candidates else None
    off = events_of(tiny, search, CacheConfig(policy=policy, kv_budget_bytes=budget))
    one = events_of(tiny, search, CacheConfig(policy=policy, kv_budget_bytes=budget, speculative=True,
                                              speculative_continuations=1))
    ranked = events_of(tiny, search, CacheConfig(policy=policy, kv_budget_bytes=budget, speculative=True))
    assert of_type(off, "run_finished")[0].speculative_tokens == 0
    for on in (one, ranked):
        assert_same_search(on, off)
        assert_tally_adds_up(on)
        snapshots = of_type(on, "memory_snapshot")  # speculation fits the budget the plan checked
        assert all(e.peak_device_bytes <= e.budget_bytes and e.device_bytes <= e.budget_bytes for e in snapshots)
        forwards = lambda events: [e.forwards for e in of_type(events, "transfer_stats")]  # noqa: E731
        if policy == "in_device":  # one group a step: a step never needs more forward calls with speculation
            assert all(a <= b for a, b in zip(forwards(on), forwards(off), strict=True))
        if method == "best-of-n":  # only first children speculate: with one child a path, steps get shorter
            assert sum(forwards(on)) < sum(forwards(off))
    made = lambda events: events[-1].speculative_runs  # noqa: E731
    if delimiter is None:
        assert made(ranked) == made(one) == 0
    if delimiter == "c":
        used = one[-1].speculative_used
        assert used > 0 and (one[-1].speculative_discarded > 0 or method == "best-of-n")
    if method == "best-of-n":  # one child a path: M_i is one, nothing changes
        assert tally(ranked) == tally(one)
    elif delimiter is not None:  # the best-ranked beams' rows go on to their second and third children
        assert made(ranked) > made(one)


def tally(events) -> tuple[int, ...]:
    done = events[-1]
    return (done.speculative_tokens, done.speculative_used, done.speculative_discarded, done.speculative_runs,
            done.speculative_runs_used)


def assert_tally_adds_up(events) -> None:
    """The events' per-step and per-child counts add up to the run's tally, and every speculated token is used or
    discarded: the last step's kept beams' speculation, made for a step never run, is discarded at the end (it
    went uncounted: "7 made, 0 used, 1 discarded")."""
    made = sum(e.speculative_tokens for e in of_type(events, "transfer_stats"))
    runs = sum(e.speculative_runs for e in of_type(events, "transfer_stats"))
    used = [e.speculated for e in of_type(events, "candidate_text") if e.speculated]
    pruned = sum(e.speculative_discarded for e in of_type(events, "step_selected"))
    done = events[-1]
    assert tally(events) == (made, sum(used), done.speculative_discarded, runs, len(used))
    assert sum(used) + done.speculative_discarded == made
    assert done.speculative_discarded >= pruned  # with pruned beams' speculation, each step's
    assert len(used) <= runs


def test_continuations_follow_the_parents_rank():
    assert [continuations(j, 4, 8) for j in range(1, 6)] == [4, 3, 2, 1, 1]  # B - j + 1, at least one
    assert continuations(1, 4, 2) == 2  # no more than the children a kept candidate gets
    assert continuations(1, 4, 8, cap=1) == 1  # --speculative-continuations 1: FlashTTS's one run


def test_speculation_fills_idle_slots_and_whole_steps_skip_decoding(tiny):
    """In one group, a step's slots are each row's decoded tokens, its speculation, or idle; a child whose
    step ended inside its parent's speculation is not decoded (no group)."""
    saw_whole = False
    for seed in range(3):
        search = dataclasses.replace(SEARCH, seed=seed)
        events = events_of(tiny, search, CacheConfig(policy="in_device", speculative=True))
        for stats in of_type(events, "transfer_stats"):
            texts = [e for e in of_type(events, "candidate_text") if e.step == stats.step]
            decoded = [e.tokens - e.speculated for e in texts if e.group is not None]
            assert stats.idle_row_slots + stats.speculative_tokens == len(decoded) * max(decoded) - sum(decoded)
            assert stats.forwards == max(decoded)
            whole = [e for e in texts if e.group is None]
            assert all(e.speculated == e.tokens > 0 for e in whole)
            saw_whole |= bool(whole)
        grouped = {c for e in of_type(events, "group_scheduled") for c in e.candidates}
        assert not grouped & {e.id for e in of_type(events, "candidate_text") if e.group is None}
    assert saw_whole, "pick seeds where some child's step ends inside its parent's speculation"


def test_the_session_model_shows_a_speculated_then_used_prefix(tiny):
    events = events_of(tiny, SEARCH, CacheConfig(policy="in_device", speculative=True))
    model = SessionModel(layout=False)
    model.apply_many(events)
    used = {e.id: e.speculated for e in of_type(events, "candidate_text") if e.speculated}
    assert used and all(model.tree.node(cid).speculated == n for cid, n in used.items())


def test_the_truncation_rule_caps_what_a_row_speculates(tiny):
    assert speculation_cap(0.85, [], 10) == 8  # before any step: R x the step length
    assert speculation_cap(0.85, [4, 6], 10) == 4
    assert speculation_cap(0.1, [2], 10) == 1  # at least one token
    search = dataclasses.replace(SEARCH, seed=1)
    events = events_of(tiny, search, CacheConfig(policy="in_device", speculative=True, speculative_ratio=0.25))
    texts = of_type(events, "candidate_text")
    capped = 0
    for e in (e for e in texts if e.speculated):  # speculated in step e.step - 1, capped by the steps before it
        earlier = [t.tokens for t in texts if t.step < e.step - 1]
        cap = speculation_cap(0.25, earlier, search.step_tokens)
        assert e.speculated <= cap
        capped += e.speculated == cap < e.tokens
    assert capped, "pick a seed where the cap truncates a speculation"


def test_layerwise_and_lookahead_do_not_speculate(tiny):
    search = dataclasses.replace(SEARCH, max_steps=2)
    for policy, lookahead in (("layerwise", 0), ("in_device", 1)):
        s = dataclasses.replace(search, lookahead=lookahead)
        off = events_of(tiny, s, CacheConfig(policy=policy, kv_budget_bytes=10**8))
        on = events_of(tiny, s, CacheConfig(policy=policy, kv_budget_bytes=10**8, speculative=True))
        assert_same_search(on, off)
        assert on[-1].speculative_tokens == 0


def test_a_rows_speculation_is_what_its_first_child_decodes(tiny):
    """The runner alone: each row that ends early speculates; decoding its first child from the row's KV
    with the same stream gives the speculated tokens first (all of them when the speculation ended the step)."""
    candidates = [3, 8, 11, 13, 14, 15, 16]
    rules = rules_for(tiny, delimiter="c", max_tokens=10, speculate=10, temperature=1.0, top_p=1.0)
    cache, mask, rows = group(tiny, candidates, seed=2)
    results, _ = decode_step(tiny.model, cache, mask, rows, rules)
    speculated = 0
    for row, result in zip(rows, results, strict=True):
        if not result.aheads:
            continue
        ahead = result.aheads[0]
        speculated += 1
        context = PROMPTS[row.candidate_id][:-1] + result.fed
        child_cache = prefill(tiny.model, context, tiny.device)[0]
        child = dataclasses.replace(row, pending=result.sampled[-1], position=len(context))
        (want,), _ = decode_step(tiny.model, child_cache, None, [child], dataclasses.replace(rules, speculate=0))
        assert want.sampled[: len(ahead.sampled)] == ahead.sampled
        assert want.top1[: len(ahead.top1)] == pytest.approx(ahead.top1, abs=1e-5)  # the child's confidence too
        assert ahead.fed[0] == result.sampled[-1]
        if ahead.done:
            assert (want.sampled, want.finished) == (ahead.sampled, ahead.finished)
    assert speculated >= 2, "pick a seed where several rows end early"
    longest = max(len(r.fed) for r in results)
    assert all(len(r.fed) + sum(len(a.fed) for a in r.aheads) <= longest for r in results)


def test_a_rows_later_runs_are_what_its_other_children_decode(tiny):
    """Run k of a row is child k's step: decoding child k from the row's KV with its own stream gives the
    run's tokens first, with the same log-probs (all of them when the run ended the step); no group
    starts more runs past the first than it has rows."""
    candidates = [3, 8, 11, 13, 14, 15, 16]
    rules = rules_for(tiny, delimiter="c", max_tokens=10, speculate=3, temperature=1.0, top_p=1.0)
    cache, mask, rows = group(tiny, candidates, seed=2)
    rows = [dataclasses.replace(row, continuations=3) for row in rows]
    results, _ = decode_step(tiny.model, cache, mask, rows, rules)
    later = 0
    for row, result in zip(rows, results, strict=True):
        context = PROMPTS[row.candidate_id][:-1] + result.fed
        for k, spec in enumerate(result.aheads):
            assert len(spec.sampled) <= rules.speculate
            if k == 0:
                assert spec.start == len(result.fed)
                continue
            later += 1
            assert spec.start >= result.aheads[k - 1].start + len(result.aheads[k - 1].fed)
            child_cache = prefill(tiny.model, context, tiny.device)[0]
            child = dataclasses.replace(row, pending=result.sampled[-1], position=len(context),
                                        generator=child_stream(row.generator, k), continuations=1)
            (want,), _ = decode_step(tiny.model, child_cache, None, [child], dataclasses.replace(rules, speculate=0))
            assert want.sampled[: len(spec.sampled)] == spec.sampled
            assert want.logprobs[: len(spec.logprobs)] == pytest.approx(spec.logprobs, abs=1e-4)
            if spec.done:
                assert (want.sampled, want.finished) == (spec.sampled, spec.finished)
    assert later >= 2, "pick a seed where rows go on to a second child"
    assert later <= len(rows)
    longest = max(len(r.fed) for r in results)
    assert all(spec.start + len(spec.fed) <= longest for r in results for spec in r.aheads)


def test_logits_are_the_same_with_ranked_speculation(tiny):
    """Every position a candidate decodes itself has the logits it has without speculation (float32 allclose)."""
    search = dataclasses.replace(SEARCH, seed=0, max_steps=2)

    def logits_of(cache: CacheConfig) -> tuple[dict, list]:
        seen: dict[int, list] = {}
        observe = lambda c, logits, token: seen.setdefault(c, []).append(logits)  # noqa: E731
        events = list(run(QUESTION, tiny, search, cache, observe_logits=observe))
        return seen, events

    off, _ = logits_of(CacheConfig(policy="in_device"))
    on, events = logits_of(CacheConfig(policy="in_device", speculative=True))
    skipped = {e.id: e.speculated for e in of_type(events, "candidate_text")}
    assert any(skipped.values())
    for cid, rows in off.items():
        mine = on.get(cid, [])
        assert len(mine) == len(rows) - skipped[cid]
        for a, b in zip(rows[skipped[cid] :], mine, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_rows_whose_parents_rank_best_start_their_runs_first(tiny):
    """When a group may start no more runs past the first child than it has rows, the rows allowed the most
    runs (their parents rank best) take them first, wherever they sit in the group: each candidate makes
    the same runs with its rows in either order."""
    candidates = [3, 8, 11, 13, 14, 15, 16]
    rules = rules_for(tiny, delimiter="c", max_tokens=10, speculate=2, temperature=1.0, top_p=1.0)

    def runs(order: list[int]) -> dict[int, list[tuple[int, ...]]]:
        cache, mask, rows = group(tiny, order, seed=2)
        rows = [dataclasses.replace(r, continuations=1 + candidates.index(r.candidate_id)) for r in rows]
        results, _ = decode_step(tiny.model, cache, mask, rows, rules)
        started = sum(max(0, len(r.aheads) - 1) for r in results)
        assert started == len(rows), "pick a seed and lengths where the group's limit on runs binds"
        return {r.candidate_id: [tuple(a.sampled) for a in res.aheads] for r, res in zip(rows, results, strict=True)}

    given, reversed_ = runs(candidates), runs(candidates[::-1])
    assert given == reversed_  # in the given order the second-worst row (8) took a run the best ones needed
