"""A process reward model served by vLLM (`vllm serve Qwen/Qwen2.5-Math-PRM-7B --runner pooling`): each
candidate's path is sent to the server's /pooling route as a chat in the Qwen2.5-Math-PRM layout (the
steps joined and ended by `<extra_0>` in the assistant turn), and the step's reward is the positive-class
probability the server pools at the last `<extra_0>`.

Written against vLLM's documented /pooling request and response; not run against vLLM on these machines.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.backends.openai import OpenAICompletions
from engine.errors import RemoteError
from engine.verifiers.base import KeepsNoKV, PathKey, StepToScore, VerifierCost
from engine.verifiers.pieces import step_text
from engine.verifiers.qwen_prm import STEP_TAG, SYSTEM


def prm_chat(item: StepToScore) -> list[dict]:
    steps = [step_text(s) for s in (*item.previous_steps, item.step)]
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": item.question},
        {"role": "assistant", "content": STEP_TAG.join(steps) + STEP_TAG},
    ]


class ServedPRM(KeepsNoKV):  # the server holds its KV: none here
    """One /pooling request per candidate (the server's prefix cache reuses the shared path)."""

    name = "prm (served)"

    def __init__(self, backend: OpenAICompletions) -> None:
        self.backend = backend

    def score(self, items: Sequence[StepToScore]) -> list[float]:
        return [self._reward(item) for item in items]

    def _reward(self, item: StepToScore) -> float:
        pooled = self.backend.pool(prm_chat(item))
        steps = 1 + len(item.previous_steps)
        came = _pooled_shape(pooled, steps)
        if came:
            raise RemoteError(
                f"the PRM server pooled {came} instead of one [P(-), P(+)] pair per step.",
                hint="Serve a Qwen2.5-Math-PRM with vLLM's pooling runner (it pools at each <extra_0>).",
            )
        return _probability(pooled[-1][1])

    def settle(self, kept: Sequence[PathKey]) -> VerifierCost:
        return VerifierCost()


def _pooled_shape(pooled: list, steps: int) -> str:
    """What the server pooled instead of a [P(-), P(+)] pair for each of `steps` steps, or '' when it did. Before,
    three numbers or a bare number for one step read as "1 value(s) for 1 step(s)", which sounds right."""
    if len(pooled) != steps:
        bare = " bare number(s)" if pooled and all(_number(v) for v in pooled) else " value(s)"
        return f"{len(pooled)}{bare} for {steps} step(s)"
    for value in pooled:
        if isinstance(value, list) and len(value) != 2:
            return f"{len(value)} {'numbers' if all(_number(v) for v in value) else 'values'} per step"
        if not isinstance(value, list):
            return "a bare number per step" if _number(value) else f"{_kind(value)} per step"
    return ""


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _kind(value: object) -> str:
    kinds = {str: "text", dict: "an object", bool: "true or false"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)


def _probability(value: object) -> float:
    """P(+) as the server pooled it, checked: text ended the run as a fault in Beamwise, and NaN or 5.0 were
    scored as rewards (NaN sorts anywhere) with nothing said."""
    if not _number(value) or not 0.0 <= value <= 1.0:
        raise RemoteError(
            f"the PRM server pooled {value!r:.60} for P(+), which is not a probability.",
            hint="Serve a Qwen2.5-Math-PRM with vLLM's pooling runner (it pools softmax probabilities).",
        )
    return float(value)
