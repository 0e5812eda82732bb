"""The engine's plan-only run of the user's own settings: the bytes a step moves over PCIe, or why it is refused.

The search runs as `beamwise run` would (the same method, lookahead, speculation, prefill chunk and the
policy the plan resolved) on `engine.plan_only`'s shape-only model, whose steps always run to their full
length and whose candidates a content hash scores. A step's bytes are the run's per-step counters
(`step_h2d_bytes` + `step_d2h_bytes`); the question's own traffic (its offload before step 1) is in none of
them, as in a real run's. A run that would refuse does so before its first decode (the prompt's or the
first step's plan), so a limit that stops a long plan-only run still sees most refusals.

The limit is the run's work (`engine.plan_only.ShapeOnlyModel.work`: each forward call counts its rows and the
model's layers), so the same settings give the same figure on an idle machine and on a busy one. It counted layer
forward calls alone: a 512-candidate search of a 3-layer model made few calls of many rows each, never reached it,
and the clock stopped it instead, after a share of its steps that depended on how busy the machine was. A time
limit far above the work's stays as a backstop for a machine too slow for that work.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from engine.config import CacheConfig, ModelSpec, SearchConfig

FIRST_TOKEN = 3  # the plan's prompt is made of token ids from here on (below it sit a vocabulary's special tokens)
PLAN_WORK = 100_000  # rows and layers of forward calls a plan-only run may make (1-3 s here: 2 cores, idle, one
# thread; a 64 x 8 search of 64-token steps on tiny-llama counts 375,000 in all)


@dataclass(frozen=True)
class PlannedRun:
    """What the plan-only run did: bytes over PCIe per step (averaged over its steps), or why it failed and in
    which `step` (1-based; 0: before the first, the prompt's); `finished` False: its work (or time) limit stopped
    it, and `step_bytes` is 0."""

    step_bytes: int
    refused: str | None = None
    finished: bool = True
    step: int = 0


def planned_run(model: ModelSpec, search: SearchConfig, cache: CacheConfig, prompt_tokens: int, budget: int,
                policy: str, seconds: float, work: int | None = None) -> PlannedRun:
    """Run the search on meta tensors with `policy` and the generator's KV `budget` (the verifier's share
    already taken off: the plan-only run's verifier keeps no KV), for at most `work` of its work (`PLAN_WORK` when
    None) and, as a backstop, about `seconds`."""
    from engine.plan_only import planned_model
    from engine.search import run

    loaded = planned_model(model.source, model.dtype)
    settings = dataclasses.replace(cache, policy=policy, kv_budget_bytes=max(1, budget), verifier_kv_share=None,
                                   prefix_cache=False)
    prompt = [FIRST_TOKEN + i % 13 for i in range(prompt_tokens)]
    steps: list[int] = []
    started = 0  # the step under way
    deadline, work = time.monotonic() + seconds, PLAN_WORK if work is None else work
    stop = lambda: loaded.model.work > work or time.monotonic() > deadline  # noqa: E731
    full = dataclasses.replace(search, step_delimiter=None)  # every step at its full --step-tokens, the most a run's
    # step can take: the stand-in model "decodes" ids joined by spaces, so ' ' or '1' ended its steps after a token
    for event in run("", loaded, full, settings, prompt_ids=prompt, should_stop=stop):
        if event.type == "step_started":
            started = event.step
        if event.type == "run_failed":
            return PlannedRun(0, event.message, step=started)
        if event.type == "run_cancelled":
            return PlannedRun(0, finished=False)
        if event.type == "transfer_stats":
            steps.append(event.step_h2d_bytes + event.step_d2h_bytes)
    return PlannedRun(sum(steps) // max(1, len(steps)))
