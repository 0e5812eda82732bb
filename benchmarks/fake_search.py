"""A model-free stand-in for `engine.search.run`: the same event order, deterministic content.

Used by the benchmarks and by GUI and storage tests that need a realistic stream fast. The real engine yields the
same sequence per step: step_started, group_scheduled*, candidate_text*, candidate_scored*,
memory_snapshot, transfer_stats, step_selected; then one terminal event.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

from engine import events as ev
from engine.config import CacheConfig, SearchConfig

KV_PER_TOKEN = 4096


def fake_run(
    question: str,
    search: SearchConfig | None = None,
    cache: CacheConfig | None = None,
    *,
    should_stop: Callable[[], bool] = lambda: False,
    finish_at_step: int | None = None,
) -> Iterator[object]:
    search = search or SearchConfig(beams=2, width=2, max_steps=3)
    cache = cache or CacheConfig()
    rng = random.Random(search.seed)
    budget = 1 << 20
    yield ev.RunStarted(question, "synthetic:fake", search.verifier, "cpu (emulated GPU)", True, "lbs", budget,
                        search.to_dict(), cache.to_dict())
    yield ev.PrefillDone(prompt_tokens=12, seconds=0.01)
    next_id, beams, scores, path_of = 1, [None], {}, {}
    h2d = d2h = 0
    for step in range(1, search.max_steps + 1):
        if should_stop():
            yield ev.RunCancelled(step=step - 1)
            return
        yield ev.StepStarted(step, tuple(b for b in beams if b is not None))
        parents = [p for p in beams for _ in range(search.width if p is not None else search.beams * search.width)]
        ids = list(range(next_id, next_id + len(parents)))
        next_id += len(parents)
        yield ev.GroupScheduled(step, 0, tuple(ids), ())
        finished = finish_at_step is not None and step >= finish_at_step
        for cid, parent in zip(ids, parents, strict=True):
            yield ev.CandidateText(step, cid, parent, f"Step {step} of candidate {cid}.\n\nmore", 8, finished, 0)
        for cid, parent in zip(ids, parents, strict=True):
            scores[cid] = rng.random()
            path_of[cid] = [*path_of.get(parent, []), cid]
            yield ev.CandidateScored(step, cid, parent, f"Step {step} of candidate {cid}.", 8, scores[cid],
                                     scores[cid], finished, 0)
        ranked = sorted(ids, key=lambda c: -scores[c])
        kept, pruned = tuple(ranked[: search.beams]), tuple(ranked[search.beams :])
        step_h2d, step_d2h = len(ids) * KV_PER_TOKEN * 8, len(ids) * KV_PER_TOKEN * 2
        h2d, d2h = h2d + step_h2d, d2h + step_d2h
        mems = tuple(ev.CandidateMemory(c, 0, 1, 2, KV_PER_TOKEN, 2 * KV_PER_TOKEN, step_h2d // len(ids),
                                        step_d2h // len(ids)) for c in ids)
        yield ev.MemorySnapshot(step, True, budget, len(ids) * KV_PER_TOKEN, 2 * len(ids) * KV_PER_TOKEN,
                                len(ids) * KV_PER_TOKEN, mems)
        yield ev.TransferStats(step, True, h2d, d2h, 0, step_h2d, step_d2h, 0, 0.001, 0.002, 0.01, 0.1, 1)
        yield ev.StepSelected(step, kept, pruned)
        beams = list(kept)
        if finished:
            break
    best = beams[0]
    yield ev.RunFinished("The answer is 80 km/h.", tuple(path_of[best]), scores[best], step, 8 * next_id, 1.0, 8.0)
