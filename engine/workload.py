"""What a bench runs, without torch: the ladder of policies, the outside baselines' names and the workload.

`beamwise bench`'s options are built from these on every `beamwise` command (its parser is the whole
command's), so they live apart from the engine that runs them: the help and the `sessions` commands
do not import torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from engine.config import BUDGET_NOT_POSITIVE, CacheConfig, SearchConfig
from engine.errors import ConfigError

BASELINES = ("generate", "generate:offloaded")  # engine/baselines.py runs them
LADDER: dict[str, dict] = {
    "in_device": {"policy": "in_device"},
    "layerwise": {"policy": "layerwise"},
    "headwise": {"policy": "headwise"},
    "lbs:inter_token": {"policy": "lbs", "inter_beam": False, "balanced_prefetch": False, "prefix_order": False},
    "lbs:+inter_beam": {"policy": "lbs", "inter_beam": True, "balanced_prefetch": False, "prefix_order": False},
    "lbs:+balanced_prefetch": {"policy": "lbs", "inter_beam": True, "balanced_prefetch": True, "prefix_order": False},
    "lbs:+prefix_order": {"policy": "lbs", "inter_beam": True, "balanced_prefetch": True, "prefix_order": True},
    "in_device:+speculative": {"policy": "in_device", "speculative": True},
    "lbs:+speculative": {
        "policy": "lbs", "inter_beam": True, "balanced_prefetch": True, "prefix_order": True, "speculative": True
    },
}
ALIASES = {"lbs": "lbs:+prefix_order"}  # the lbs of `run` and `plan` (every switch on), as its rung is named
SWITCHES = ("prefix_order", "speculative", "lookahead_verify")  # a workload may force these for every policy of a run


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
    step_delimiter: str | None = None  # None: fixed-length steps (the paper's byte model); else steps end early;
    # "auto": the token the warm-up samples most (run_bench resolves it; engine/auto_delimiter.py)
    prefix_order: bool | None = None  # None: as each ladder rung says; else forced for every policy
    speculative: bool | None = None
    speculative_continuations: int = 0  # children's steps a row may speculate: 0 FlashTTS's M_i, 1 one run
    lookahead_verify: bool | None = None  # None: CacheConfig's default (on); only with speculation and a PRM
    verifier_model: str | None = None  # a PRM (folder or synthetic:NAME) scores the steps; None: logprob

    def __post_init__(self) -> None:
        # in_device rows run without the budget, so a zero one went unread there: `bench --kv-budget 0 --policies
        # in_device` ran and its header said "KV budget auto"; the offloading rows refused it
        if self.kv_budget_bytes is not None and self.kv_budget_bytes <= 0:
            raise ConfigError(BUDGET_NOT_POSITIVE)  # as CacheConfig, which `plan` and `run` refuse it with

    def search(self) -> SearchConfig:
        steps = max(1, math.ceil(self.gen_tokens / self.step_tokens))
        return SearchConfig(
            beams=self.beams,
            width=self.width,
            step_tokens=self.step_tokens,
            step_delimiter=self.step_delimiter,
            max_steps=steps,
            temperature=1.0,
            top_p=1.0,
            seed=self.seed,
            verifier="prm" if self.verifier_model else SearchConfig.verifier,
            verifier_model=self.verifier_model,
        )

    def cache(self, name: str) -> CacheConfig:
        """The cache of the ladder's row `name`, with the workload's KV options."""
        return self.cache_for(LADDER[name])

    def cache_for(self, settings: dict) -> CacheConfig:
        """A cache with `settings` (a ladder row's; {}: the policy `run` picks, auto) and the workload's KV options."""
        settings = dict(settings)
        settings.update({k: getattr(self, k) for k in SWITCHES if getattr(self, k) is not None})
        budget = None if settings.get("policy") == "in_device" else self.kv_budget_bytes
        return CacheConfig(kv_budget_bytes=budget, pcie_gbps=self.pcie_gbps, block_size=self.block_size,
                           speculative_continuations=self.speculative_continuations, **settings)

    def prompt_ids(self, loaded) -> list[int]:
        if self.question is not None:
            from engine.search import prompt_ids  # late: this module loads without torch

            return prompt_ids(loaded.encode_chat, self.question)  # what a search asks with this question
        import torch

        vocab_size = getattr(getattr(loaded.model, "config", None), "vocab_size", 16)
        generator = torch.Generator().manual_seed(self.seed)
        return torch.randint(3, max(4, vocab_size), (self.prompt_tokens,), generator=generator).tolist()


def ladder_names(names: Sequence[str]) -> list[str]:
    """`names` with each alias the rung it names: `--policies lbs` was refused as unknown, though lbs is the policy's
    name in `run`, `plan` and the README."""
    return [ALIASES.get(name, name) for name in names]


def check_names(policies: Sequence[str], baselines: Sequence[str]) -> None:
    """ConfigError (a ValueError), saying what to choose from, for a policy not in the LADDER or a baseline not in
    BASELINES, and for a name given twice: it ran twice, and the ratio columns (keyed by name) took the last run."""
    for option, names in (("--policies", policies), ("--baselines", baselines)):
        twice = sorted({name for name in names if list(names).count(name) > 1})
        if twice:
            raise ConfigError(f"{option} names {', '.join(twice)} more than once; give each name once.")
    unknown = set(policies) - set(LADDER)
    if unknown:
        raise ConfigError(f"unknown policies {sorted(unknown)}; choose from {', '.join(LADDER)}.")
    unknown = set(baselines) - set(BASELINES)
    if unknown:
        raise ConfigError(f"unknown baselines {sorted(unknown)}; choose from {', '.join(BASELINES)} "
                         "(or give --baselines= for none).")  # '' reached the bench as two quotes from cmd.exe
