"""Outside baselines for `bench`: what a user already has, run on the same rows as the search.

`generate` is plain `model.generate` with every candidate as a row of the same prompt, in
device memory; `generate:offloaded` is the same call with transformers' own layer-by-layer
offloaded cache (`DynamicCache(offloading=True)`, CUDA only). Both make exactly
`rows * gen_tokens` tokens (EOS cannot end a row early), so candidate-tokens/s compare
directly with the policies' rows.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache, StoppingCriteria, StoppingCriteriaList

from engine.errors import BeamwiseError
from engine.hf_compat import cache_kwargs
from engine.workload import BASELINES


@dataclass(frozen=True)
class BaselineRun:
    """One outside baseline's row; its figures None (null in the JSON) where it did not run to its end: a baseline
    that could not run on the CPU carried wall_seconds 0.0, as if measured."""

    name: str
    ok: bool
    message: str = ""
    wall_seconds: float | None = None  # one the time limit stopped: how long it ran
    candidate_tokens: int | None = None
    tokens_per_second: float | None = None  # candidate-tokens/s, as the policies' rows report it
    timed_out: bool = False  # the bench's time limit (`should_stop`) ended it early or kept it from starting


class EngineStepFailed(BeamwiseError):
    """`versus_generate`'s engine step did not finish: there is no engine rate to compare."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"the engine step did not finish, so nothing was compared with model.generate: {reason}")


def why_not(name: str, device: torch.device) -> str | None:
    """Why a baseline cannot run here, or None when it can."""
    if device.type != "cuda":
        return "outside baselines run only on CUDA (absolute times are compared on a GPU only)"
    if name not in BASELINES:
        return f"unknown baseline {name!r}; choose from {', '.join(BASELINES)}"
    return None


def run_baseline(
    loaded, name: str, prompt_ids: Sequence[int], rows: int, gen_tokens: int, seed: int,
    should_stop: Callable[[], bool] = lambda: False,
) -> BaselineRun:  # fmt: skip
    """Time one baseline that can run here (`why_not` is None: the caller asks it, before its time limit); an
    out-of-memory error becomes a result that says so, and so does a run that `should_stop` (asked before each
    token) ends early."""
    stop = _AskedToStop(should_stop)
    try:
        started = time.perf_counter()
        made = _generate(loaded, name, prompt_ids, rows, gen_tokens, seed, stop)
        wall = _seconds_since(started, loaded.device)
        if stop.asked:
            return BaselineRun(name, False, "stopped before its last token", wall_seconds=wall, timed_out=True)
        return BaselineRun(name, True, wall_seconds=wall, candidate_tokens=made,
                           tokens_per_second=made / wall if wall > 0 else None)
    except torch.OutOfMemoryError as error:
        return BaselineRun(name, False, f"out of device memory: {str(error).splitlines()[0]}")
    finally:
        torch.cuda.empty_cache()


class _AskedToStop(StoppingCriteria):
    """Ends `generate` for every row once `should_stop()` says so, and remembers that it did."""

    def __init__(self, should_stop: Callable[[], bool]) -> None:
        self.should_stop = should_stop
        self.asked = False

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        self.asked = self.asked or bool(self.should_stop())
        return torch.full((input_ids.shape[0],), self.asked, dtype=torch.bool, device=input_ids.device)


@torch.inference_mode()
def _generate(
    loaded, name: str, prompt_ids: Sequence[int], rows: int, gen_tokens: int, seed: int,
    stop: StoppingCriteria | None = None,
) -> int:  # fmt: skip
    model = loaded.model
    input_ids = torch.tensor([list(prompt_ids)] * rows, device=loaded.device)  # [rows, P]
    extra = {}
    if name == "generate:offloaded":
        extra |= cache_kwargs(model, DynamicCache(config=model.config, offloading=True))
    if stop is not None:
        extra["stopping_criteria"] = StoppingCriteriaList([stop])
    torch.manual_seed(seed)
    out = model.generate(
        input_ids,
        attention_mask=torch.ones_like(input_ids),
        do_sample=True,
        max_new_tokens=gen_tokens,
        min_new_tokens=gen_tokens,
        top_k=0,
        top_p=1.0,
        temperature=1.0,
        pad_token_id=0,
        **extra,
    )
    return (out.shape[1] - input_ids.shape[1]) * rows


def versus_generate(loaded, prompt_ids: Sequence[int], candidates: int = 8, tokens: int = 32, seed: int = 0) -> dict:
    """Candidate-tokens/s of one engine step (1 prompt, `candidates` children) beside plain
    `model.generate(num_return_sequences=candidates, do_sample=True)` on the same prompt, in one run.

    Both include their prefill; EOS is not allowed to end either early, so both make
    `candidates * tokens` tokens. `EngineStepFailed` when the engine's step fails or is cancelled (its
    message says why): a failed run has no rate to compare.
    """
    from engine.config import CacheConfig, SearchConfig
    from engine.search import run

    search = SearchConfig(
        beams=1, width=candidates, step_tokens=tokens, step_delimiter=None, max_steps=1,
        temperature=1.0, top_p=1.0, seed=seed,
    )  # fmt: skip
    eos = loaded.eos_token_ids
    loaded.eos_token_ids = ()
    try:
        started = time.perf_counter()
        *_, last = run("", loaded, search, CacheConfig(policy="in_device"), prompt_ids=prompt_ids)
        engine_seconds = _seconds_since(started, loaded.device)
    finally:
        loaded.eos_token_ids = eos
    if last.type != "run_finished":  # the search never raises: it ends with RunFailed or RunCancelled instead
        raise EngineStepFailed(last.message if last.type == "run_failed" else "it was cancelled")
    started = time.perf_counter()
    made = _generate(loaded, "generate", prompt_ids, candidates, tokens, seed)
    generate_seconds = _seconds_since(started, loaded.device)
    return {
        "candidates": candidates,
        "tokens": tokens,
        "prompt_tokens": len(prompt_ids),
        "engine_tokens_per_second": candidates * tokens / engine_seconds,
        "generate_tokens_per_second": made / generate_seconds,
        "engine_vs_generate": (candidates * tokens / engine_seconds) / (made / generate_seconds),
    }


def _seconds_since(started: float, device: torch.device) -> float:
    """Seconds since `started`, once the device has run everything queued (CUDA kernels run after the call returns)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - started
