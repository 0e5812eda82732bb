"""The engine's plan-only run of the user's own settings: the bytes a step moves over PCIe, or why it is refused.

The search runs as `beamwise run` would (the same method, lookahead, speculation, prefill chunk and the
policy the plan resolved) on `engine.plan_only`'s shape-only model, whose steps always run to their full
length and whose candidates a content hash scores. A step's bytes are the run's per-step counters
(`step_h2d_bytes` + `step_d2h_bytes`); the question's own traffic (its offload before step 1) is in none of
them, as in a real run's. A run that would refuse does so before its first decode (the prompt's or the
first step's plan), so a limit that stops a long plan-only run still sees most refusals.

The limit is the run's work, counted in layer forward calls (a forward call over every layer of the model counts
its layers), so the same settings give the same figure on an idle machine and on a busy one; a time limit far
above it only keeps a machine too slow for that work from waiting for long.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from engine.config import CacheConfig, ModelSpec, SearchConfig

FIRST_TOKEN = 3  # the plan's prompt is made of token ids from here on (below it sit a vocabulary's special tokens)
PLAN_WORK = 200_000  # layer forward calls a plan-only run may make (about 2-7 s here, 2 cores, idle)


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
    already taken off: the plan-only run's verifier keeps no KV), for at most `work` layer forward calls
    (`PLAN_WORK` when None) and about `seconds`."""
    from engine.plan_only import planned_model
    from engine.search import run

    loaded = planned_model(model.source, model.dtype)
    settings = dataclasses.replace(cache, policy=policy, kv_budget_bytes=max(1, budget), verifier_kv_share=None,
                                   prefix_cache=False)
    prompt = [FIRST_TOKEN + i % 13 for i in range(prompt_tokens)]
    steps: list[int] = []
    started = 0  # the step under way
    deadline, done, layers = time.monotonic() + seconds, [0], loaded.kv_shape.num_layers
    loaded.model.register_forward_pre_hook(lambda *_: done.__setitem__(0, done[0] + layers))
    work = PLAN_WORK if work is None else work
    stop = lambda: done[0] > work or time.monotonic() > deadline  # noqa: E731
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
