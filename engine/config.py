"""Frozen, validated settings of a run: the search, the KV cache and the model."""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from typing import Any

from engine.errors import ConfigError

AGGREGATIONS = ("last", "min", "prod", "mean")
POLICIES = ("auto", "in_device", "layerwise", "lbs", "headwise")
SPECULATING = ("in_device", "lbs")  # speculative beam extension keeps a row's speculated KV: the group executor's do
VERIFIERS = ("logprob", "self-judge", "prm")
VERIFIER_DEVICES = ("auto", "cpu")  # auto: the generator's device
DTYPES = ("float32", "bfloat16", "float16")
DEVICES = ("auto", "cpu", "cuda")
LEAST_GBPS, MOST_GBPS = 0.001, 10_000  # PCIe bandwidths: 1 MB/s to 10 TB/s (a PCIe 5 x16 link is 64 GB/s)
MAX_CANDIDATES_PER_STEP = 1024  # beams x width; more is refused at once (raise it with max_candidates)
SEED_RANGE = (0, 2**63 - 1)  # candidate seeds are taken mod 2**63: a seed outside would equal one inside
METHODS = ("beam", "best-of-n", "dvts", "greedy")
SELECTIONS = ("best", "majority", "weighted")
MAX_LOOKAHEAD = 16  # greedy roll-out steps after each sampled step (the window's control stops there too)


def _require(ok: bool, message: str) -> None:
    """A ConfigError (a ValueError) saying what to change: every check here refuses what the user gave."""
    if not ok:
        raise ConfigError(message)


def _finite(value: float, name: str) -> None:
    _require(isinstance(value, int | float) and math.isfinite(value), f"{name} must be a finite number (got {value}).")


def _utf8(text: str | None, name: str) -> None:
    try:
        (text or "").encode("utf-8")
    except UnicodeEncodeError as error:
        raise ConfigError(f"{name} has a character that is not valid text ({text[error.start]!r} at {error.start}, "
                         "a lone surrogate); write a real character or its \\n-style escape.") from error


@dataclass(frozen=True)
class SearchConfig:
    """Step-wise beam search: keep `beams` paths, expand each by `width` children per step.

    A step ends after `step_tokens` tokens or as soon as its text contains `step_delimiter`
    (when set), whichever comes first, or at EOS.
    """

    beams: int = 4
    width: int = 2
    step_tokens: int = 48
    step_delimiter: str | None = "\n\n"
    max_steps: int = 6
    temperature: float = 0.8
    top_p: float = 0.95
    seed: int = 0
    aggregation: str = "last"
    verifier: str = "logprob"
    verifier_model: str | None = None  # the PRM (folder or synthetic:NAME) when verifier is "prm"
    verifier_device: str = "auto"  # "cpu": the PRM on the CPU in float32, its KV outside the device budget
    max_candidates: int = MAX_CANDIDATES_PER_STEP
    method: str = "beam"  # how candidates expand and survive: engine/methods
    lookahead: int = 0  # beam only: K greedy steps after each sampled step, scored at their end
    select: str = "best"  # the final answer: the best path, a majority vote, or a score-weighted vote
    verify_skip: bool = False  # RKSC: skip the verifier when the generator is decisive (tau_conf, r_gap)
    tau_conf: float = 0.9
    r_gap: float = 0.1
    audit_early_exit: bool = False  # run the verifier on skipped steps (and exited layers) too; count disagreements
    entropy_exit: bool = False  # RKSC: stop the verify pass at the layer where the lens entropy settled
    entropy_theta: float = 8.0  # nats for a ~150k vocabulary (scaled to the verifier's): every candidate under it
    entropy_delta: float = 3.0  # ... and changed by less than this since the previous layer
    calibrate_exit: bool = False  # beamwise eval --calibrate: record the verifier's lens layer by layer, no exit

    def __post_init__(self) -> None:
        _require(self.beams >= 1, f"beams must be at least 1 (got {self.beams}).")
        _require(self.width >= 1, f"width (children per beam) must be at least 1 (got {self.width}).")
        _require(self.max_candidates >= 1, f"the candidates cap must be at least 1 (got {self.max_candidates}).")
        _require(
            self.beams * self.width <= self.max_candidates,
            f"beams x width = {self.beams:,} x {self.width:,} = {self.beams * self.width:,} candidates per step, "
            f"more than the cap of {self.max_candidates:,}; lower beams or width, or raise the cap "
            "(--max-candidates).",
        )
        _finite(self.temperature, "temperature")
        _finite(self.top_p, "top-p")
        _require(SEED_RANGE[0] <= self.seed <= SEED_RANGE[1],
                 f"the seed must be a whole number from 0 to 2**63-1 = {SEED_RANGE[1]:,} (got {self.seed}).")
        _utf8(self.step_delimiter, "the step delimiter")
        _require(self.step_tokens >= 1, f"step tokens must be at least 1 (got {self.step_tokens}).")
        _require(self.max_steps >= 1, f"max steps must be at least 1 (got {self.max_steps}).")
        _require(
            self.step_delimiter is None or self.step_delimiter != "",
            "the step delimiter must be non-empty text, or unset to cut steps by length only.",
        )
        _require(self.temperature >= 0, f"temperature must be 0 (greedy) or more (got {self.temperature}).")
        _require(0 < self.top_p <= 1, f"top-p must be in (0, 1] (got {self.top_p}).")
        _require(self.aggregation in AGGREGATIONS, f"aggregation must be one of {', '.join(AGGREGATIONS)}.")
        _require(self.verifier in VERIFIERS, f"verifier must be one of {', '.join(VERIFIERS)}.")
        _require(
            self.verifier != "prm" or bool((self.verifier_model or "").strip()),
            "the prm verifier needs a PRM: choose its folder (--verifier-model PATH).",
        )
        _require(self.verifier_device in VERIFIER_DEVICES, "the verifier's device must be auto or cpu.")
        _require(
            self.verifier_device == "auto" or self.verifier == "prm",
            "--verifier-device cpu moves a PRM; self-judge and logprob read the generator itself.",
        )
        self._check_method()

    def _check_method(self) -> None:
        _require(self.method in METHODS, f"method must be one of {', '.join(METHODS)} (got {self.method!r}).")
        _require(self.select in SELECTIONS, f"select must be one of {', '.join(SELECTIONS)} (got {self.select!r}).")
        _require(0 <= self.lookahead <= MAX_LOOKAHEAD,
                 f"lookahead must be 0..{MAX_LOOKAHEAD} greedy steps (got {self.lookahead}).")
        _require(
            self.lookahead == 0 or self.method == "beam",
            f"lookahead works with the beam method only; set lookahead to 0 for {self.method}.",
        )
        _require(0 < self.tau_conf <= 1, f"tau_conf must be in (0, 1] (got {self.tau_conf}).")
        _require(0 <= self.r_gap < 1, f"r_gap must be in [0, 1) (got {self.r_gap}).")
        _finite(self.entropy_theta, "the entropy exit's theta")
        _finite(self.entropy_delta, "the entropy exit's delta")
        _require(self.entropy_theta > 0 and self.entropy_delta > 0,
                 f"the entropy exit's theta and delta must be positive "
                 f"(got {self.entropy_theta}, {self.entropy_delta}).")
        _require(not self.entropy_exit or self.verifier != "logprob",
                 "the layer-entropy exit needs a verifier that runs a model (self-judge or prm), not logprob.")
        _require(not (self.calibrate_exit and self.entropy_exit),
                 "calibrating the entropy exit runs every layer; turn the exit off while calibrating.")

    @property
    def candidates_per_step(self) -> int:
        return self.beams * self.width

    # the method's shape, for what sizes the search ahead of it (engine/kv/sizing.py); engine/methods does it
    @property
    def rows_per_step(self) -> int:
        """Candidates a step decodes at most: N x M, one for greedy (one path whatever N and M)."""
        return 1 if self.method == "greedy" else self.candidates_per_step

    @property
    def kept_per_step(self) -> int:
        """Paths a step's selection keeps at most: N for beam and DVTS, every sample for best-of-N, one for greedy."""
        if self.method == "best-of-n":
            return self.candidates_per_step
        return 1 if self.method == "greedy" else self.beams

    @property
    def children_per_path(self) -> int:
        """Children a kept path expands the next step: M for beam and DVTS, one for best-of-N and greedy."""
        return self.width if self.method in ("beam", "dvts") else 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


BUDGET_NOT_POSITIVE = "the KV budget must be a positive size such as 64MB, or unset for automatic."


@dataclass(frozen=True)
class CacheConfig:
    """Where KV lives and how beams are scheduled across the device budget.

    `kv_budget_bytes=None` means: free device memory minus a safety margin on CUDA, and
    on the emulated device (no CUDA) a budget that fits the whole search.
    """

    policy: str = "auto"
    kv_budget_bytes: int | None = None
    block_size: int = 16
    inter_token: bool = True
    inter_beam: bool = True
    balanced_prefetch: bool = True
    prefix_order: bool = True  # lbs: consecutive groups share the most blocks; a shared prefix stays
    speculative: bool = False  # in_device, lbs: rows that end their step early decode their first child's
    speculative_ratio: float = 0.85  # FlashTTS's R: speculate at most R x the mean step length so far
    speculative_continuations: int = 0  # children's steps a row speculates: 0 FlashTTS's M_i = B - j + 1, n at most n
    lookahead_verify: bool = True  # with speculation and a PRM: a whole speculated next step is verified with its step
    pcie_gbps: float = 25.0
    device: str = "auto"
    prefill_chunk: int | None = None  # prompt tokens per prefill call; None: sized to the budget
    verifier_kv_share: float | None = None  # the verifier's part of the device KV budget; None: FlashTTS's rule
    prefix_cache: bool = False  # keep prompts' and chosen paths' blocks for later runs (engine/kv/prefix_cache.py)
    prefix_cache_ram_bytes: int | None = None  # host-RAM cap of the prefix cache; None: from free RAM
    prefix_cache_disk_bytes: int | None = None  # disk cap of the prefix cache; None: from free disk

    def __post_init__(self) -> None:
        _require(
            self.prefill_chunk is None or self.prefill_chunk >= 1,
            f"the prefill chunk must be at least 1 token, or unset to size it to the budget "
            f"(got {self.prefill_chunk}).",
        )
        _require(self.policy in POLICIES, f"policy must be one of {', '.join(POLICIES)} (got {self.policy!r}).")
        _require(self.kv_budget_bytes is None or self.kv_budget_bytes > 0, BUDGET_NOT_POSITIVE)
        _require(1 <= self.block_size <= 4096, f"block size must be 1..4096 tokens (got {self.block_size}).")
        _finite(self.pcie_gbps, "PCIe bandwidth")
        _require(MOST_GBPS >= self.pcie_gbps >= LEAST_GBPS,  # 1e-300 printed a time of 300 digits
                 f"PCIe bandwidth must be {LEAST_GBPS:g} to {MOST_GBPS:,} GB/s (got {self.pcie_gbps:g}).")
        _require(self.device in DEVICES, "device must be auto, cpu or cuda.")
        _finite(self.speculative_ratio, "the speculation ratio")
        _require(0 < self.speculative_ratio <= 1,
                 f"the speculation ratio R must be in (0, 1] of the mean step length (got {self.speculative_ratio}).")
        _require(self.speculative_continuations >= 0,
                 f"speculative continuations must be 0 (FlashTTS's B - j + 1 for the j-th ranked beam) or a count "
                 f"of 1 or more (got {self.speculative_continuations}).")
        _require(
            self.policy != "lbs" or self.inter_token,
            "lbs needs inter_token on (it is what makes a group decode a whole step on the device).",
        )
        for cap, name in ((self.prefix_cache_ram_bytes, "RAM"), (self.prefix_cache_disk_bytes, "disk")):
            _require(cap is None or cap > 0,
                     f"the prefix cache's {name} cap must be a positive size such as 512MB, or unset for automatic.")
        share = self.verifier_kv_share
        if share is not None:
            _finite(share, "the verifier's KV share")
            _require(0 < share < 1, f"the verifier's KV share must be a fraction between 0 and 1, such as 0.25 "
                                    f"(got {share}); leave it unset for one verification batch's worth.")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ModelSpec:
    """Which generator to load: 'bundled', a folder, a .gguf file or 'synthetic:NAME'."""

    source: str = "bundled"
    dtype: str = "float32"
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _require(bool(self.source.strip()), "the model must be 'bundled', a path or synthetic:NAME.")
        _require(self.dtype in DTYPES, f"dtype must be one of {', '.join(DTYPES)}.")


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


MOST_BYTES = 10**18  # a size larger than this (an exabyte) is a typing slip, not a machine


def parse_bytes(text: str) -> int:
    """'64MB' -> 64_000_000, '1.5GiB' -> 1_610_612_736, '4096' -> 4096. Read in decimal, exactly: a size a
    refusal printed ('32.3 kB') is the bytes shown (a float product read 32,299 B, a byte short)."""
    match = _SIZE.match(str(text))
    if not match:
        raise ConfigError(f"{text!r} is not a size; write it like 512MB, 7GB or 1.5GiB.")
    number, unit = Decimal(match.group(1)), (match.group(2) or "").lower()
    binary = "i" in unit
    prefix = unit.replace("i", "").replace("b", "")
    scale = 1024 ** "_kmgt".index(prefix) if binary and prefix else _UNITS[prefix]
    size = int(number * scale)
    if size > MOST_BYTES:  # it was taken and shown as 100000000000000008388608.0 TB, and planned green
        raise ConfigError(f"{text!r} is more than any machine holds (at most {MOST_BYTES // 10**12:,} TB); write it "
                         "like 512MB, 7GB or 1.5GiB.")
    return size


def speculation_off_note(requested: str, policy: str, speculative: bool) -> str | None:
    """What to tell the user when --speculative was asked for and `auto` (`requested`) picked a `policy` that does
    not speculate (the CLI refuses an explicit one at once); None otherwise. A pure function of
    RunStarted's `cache` and `policy`, so the CLI and the window can say it from the event."""
    if not speculative or requested != "auto" or policy in SPECULATING:
        return None
    return f"auto picked {policy}, which does not speculate: --speculative is off for this run"
