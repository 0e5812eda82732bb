"""The policy comparison harness: one workload, every policy and the LBS ablation ladder, one run.

It reports bytes (exact), wall/copy/compute seconds, stall share and candidate-tokens/s per
policy, ratios to `layerwise` and `in_device`, and whether every policy produced the same
tokens. It asserts nothing about speed: that is for the reader of the table.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import torch

from engine.config import CacheConfig, SearchConfig

LADDER: dict[str, dict] = {
    "in_device": {"policy": "in_device"},
    "layerwise": {"policy": "layerwise"},
    "lbs:inter_token": {"policy": "lbs", "inter_beam": False, "balanced_prefetch": False},
    "lbs:+inter_beam": {"policy": "lbs", "inter_beam": True, "balanced_prefetch": False},
    "lbs:+balanced_prefetch": {"policy": "lbs", "inter_beam": True, "balanced_prefetch": True},
}


@dataclass(frozen=True)
class Workload:
    model: str = "synthetic:tiny-llama"
    dtype: str = "float32"
    beams: int = 8
    width: int = 4
    step_tokens: int = 32
    prompt_tokens: int = 256
    gen_tokens: int = 128
    kv_budget_bytes: int | None = None
    pcie_gbps: float = 25.0
    block_size: int = 16
    seed: int = 0
    question: str | None = None  # the workload's prompt: this question in the chat template, else random tokens

    def search(self) -> SearchConfig:
        steps = max(1, math.ceil(self.gen_tokens / self.step_tokens))
        return SearchConfig(
            beams=self.beams,
            width=self.width,
            step_tokens=self.step_tokens,
            step_delimiter=None,
            max_steps=steps,
            temperature=1.0,
            top_p=1.0,
            seed=self.seed,
        )

    def cache(self, name: str) -> CacheConfig:
        settings = LADDER[name]
        budget = None if settings["policy"] == "in_device" else self.kv_budget_bytes
        return CacheConfig(kv_budget_bytes=budget, pcie_gbps=self.pcie_gbps, block_size=self.block_size, **settings)

    def prompt_ids(self, loaded) -> list[int]:
        if self.question is not None:
            from engine.search import SYSTEM_PROMPT

            return loaded.encode_chat(self.question, system=SYSTEM_PROMPT)
        vocab_size = getattr(getattr(loaded.model, "config", None), "vocab_size", 16)
        generator = torch.Generator().manual_seed(self.seed)
        return torch.randint(3, max(4, vocab_size), (self.prompt_tokens,), generator=generator).tolist()


@dataclass
class PolicyResult:
    name: str
    ok: bool
    message: str = ""
    h2d_bytes: int = 0
    d2h_bytes: int = 0
    d2d_bytes: int = 0
    peak_device_bytes: int = 0
    max_groups: int = 0
    wall_seconds: float = 0.0
    copy_seconds: float = 0.0
    compute_seconds: float = 0.0
    modelled_pcie_seconds: float = 0.0
    stall_seconds: float = 0.0  # waiting for copies: modelled on the emulated device, measured on CUDA
    stall_share: float = 0.0
    candidate_tokens: int = 0
    tokens_per_second: float = 0.0
    tokens_digest: str = ""
    h2d_vs_layerwise: float | None = None
    wall_vs_in_device: float | None = None
    wall_vs_layerwise: float | None = None


@dataclass
class BenchReport:
    workload: Workload
    device: str
    emulated: bool
    plan_only: bool
    results: list[PolicyResult] = field(default_factory=list)
    same_tokens: bool = True

    def to_dict(self) -> dict:
        return asdict(self)


def run_policy(loaded, workload: Workload, name: str, prompt_ids: Sequence[int]) -> PolicyResult:
    """One policy on the workload; failures (such as a budget too small) become a result, not an error."""
    from engine.search import run

    tokens: dict[int, list[int]] = defaultdict(list)  # per candidate: groups interleave candidates differently
    observe = lambda cid, _logits, token: tokens[cid].append(token)  # noqa: E731
    stats, peak, started = [], 0, time.perf_counter()
    for event in run(
        "", loaded, workload.search(), workload.cache(name), observe_logits=observe, prompt_ids=prompt_ids
    ):
        if event.type == "transfer_stats":
            stats.append(event)
        elif event.type == "memory_snapshot":
            peak = max(peak, event.peak_device_bytes)
        elif event.type == "run_failed":
            return PolicyResult(name, False, event.message)
        elif event.type == "run_finished":
            finished = event
    wall = time.perf_counter() - started
    compute = sum(s.compute_seconds for s in stats)
    stall = sum(s.stall_share * s.compute_seconds / (1 - s.stall_share) for s in stats if s.stall_share < 1)
    last = stats[-1]
    return PolicyResult(
        name=name, ok=True, h2d_bytes=last.h2d_bytes, d2h_bytes=last.d2h_bytes, d2d_bytes=last.d2d_bytes,
        peak_device_bytes=peak, max_groups=max(s.groups for s in stats), wall_seconds=wall,
        copy_seconds=sum(s.copy_seconds for s in stats), compute_seconds=compute,
        modelled_pcie_seconds=sum(s.modelled_pcie_seconds for s in stats), stall_seconds=stall,
        stall_share=stall / (stall + compute) if stall + compute else 0.0,
        candidate_tokens=finished.candidate_tokens, tokens_per_second=finished.candidate_tokens / wall,
        tokens_digest=hashlib.sha256(repr(sorted(tokens.items())).encode()).hexdigest()[:16],
    )


def add_ratios(results: list[PolicyResult]) -> None:
    by_name = {r.name: r for r in results if r.ok}
    layerwise, in_device = by_name.get("layerwise"), by_name.get("in_device")
    for r in results:
        if not r.ok:
            continue
        if layerwise and layerwise.h2d_bytes:
            r.h2d_vs_layerwise = r.h2d_bytes / layerwise.h2d_bytes
        if layerwise and layerwise.wall_seconds:
            r.wall_vs_layerwise = r.wall_seconds / layerwise.wall_seconds
        if in_device and in_device.wall_seconds:
            r.wall_vs_in_device = r.wall_seconds / in_device.wall_seconds


def run_bench(
    workload: Workload,
    policies: Sequence[str] = tuple(LADDER),
    *,
    plan_only: bool = False,
    progress: Callable[[str], None] = lambda _: None,
) -> BenchReport:
    unknown = set(policies) - set(LADDER)
    if unknown:
        raise ValueError(f"unknown policies {sorted(unknown)}; choose from {', '.join(LADDER)}.")
    loaded = _load(workload, plan_only)
    if plan_only and workload.question is not None:
        raise ValueError("a plan has no tokenizer to read a question; give --prompt-tokens instead of --question.")
    prompt = workload.prompt_ids(loaded)
    emulated = loaded.device.type != "cuda"
    device = "meta (plan only)" if plan_only else ("cpu (emulated GPU)" if emulated else str(loaded.device))
    report = BenchReport(workload, device, emulated, plan_only)
    for name in policies:
        progress(f"running {name}")
        report.results.append(run_policy(loaded, workload, name, prompt))
    add_ratios(report.results)
    digests = {r.tokens_digest for r in report.results if r.ok}
    report.same_tokens = plan_only or len(digests) <= 1
    return report


def _load(workload: Workload, plan_only: bool):
    if plan_only:
        from engine.plan_only import planned_model

        return planned_model(workload.model, workload.dtype)
    from engine.config import ModelSpec
    from engine.models import load_model

    device = "cuda" if torch.cuda.is_available() else "cpu"
    return load_model(ModelSpec(workload.model, dtype=workload.dtype), device=device)


def versus_generate(loaded, prompt_ids: Sequence[int], candidates: int = 8, tokens: int = 32, seed: int = 0) -> dict:
    """Candidate-tokens/s of one engine step (1 prompt, `candidates` children) beside plain
    `model.generate(num_return_sequences=candidates, do_sample=True)` on the same prompt, in one run.

    Both include their prefill; EOS is not allowed to end either early, so both make
    `candidates * tokens` tokens.
    """
    from engine.search import run

    search = SearchConfig(
        beams=1,
        width=candidates,
        step_tokens=tokens,
        step_delimiter=None,
        max_steps=1,
        temperature=1.0,
        top_p=1.0,
        seed=seed,
    )
    eos = loaded.eos_token_ids
    loaded.eos_token_ids = ()
    try:
        started = time.perf_counter()
        for _ in run("", loaded, search, CacheConfig(policy="in_device"), prompt_ids=prompt_ids):
            pass
        engine_seconds = time.perf_counter() - started
    finally:
        loaded.eos_token_ids = eos
    input_ids = torch.tensor([list(prompt_ids)], device=loaded.device)
    torch.manual_seed(seed)
    started = time.perf_counter()
    with torch.inference_mode():
        out = loaded.model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            do_sample=True,
            num_return_sequences=candidates,
            max_new_tokens=tokens,
            min_new_tokens=tokens,
            top_k=0,
            top_p=1.0,
            temperature=1.0,
            pad_token_id=eos[0] if eos else 0,
        )
    generate_seconds = time.perf_counter() - started
    made = (out.shape[1] - input_ids.shape[1]) * candidates
    return {
        "candidates": candidates,
        "tokens": tokens,
        "prompt_tokens": len(prompt_ids),
        "engine_tokens_per_second": candidates * tokens / engine_seconds,
        "generate_tokens_per_second": made / generate_seconds,
        "engine_vs_generate": (candidates * tokens / engine_seconds) / (made / generate_seconds),
    }
