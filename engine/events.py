"""Frozen event records that `search.run` yields; they cross threads and carry no tensors.

Every event has a class attribute `type` (its JSON name). `to_dict` turns one into plain
JSON data and `from_dict` reverses it, so a recorded session replays exactly.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(frozen=True)
class RunStarted:
    type: ClassVar[str] = "run_started"
    question: str
    model: str
    verifier: str
    device: str  # "cuda:0 (NVIDIA ...)" or "cpu (emulated GPU)"
    emulated: bool
    policy: str  # the resolved policy, never "auto"
    kv_budget_bytes: int  # the generator's part of the device KV budget
    search: dict[str, Any]
    cache: dict[str, Any]
    verifier_kv_budget_bytes: int = 0  # the verifier's part (--verifier-kv-share); 0 when it keeps no KV
    history: tuple[tuple[str, str], ...] = ()  # a conversation's earlier turns: (question, chosen path's text)
    numerics: dict[str, Any] = dataclasses.field(default_factory=dict)  # torch, threads, cpu... (engine/numerics.py)
    every_step_kv_budget_bytes: int = 0  # a --kv-budget under which no step is refused, when the run's is below it
    # (its first steps fit, a later one may not: a path that ends early needs less); 0 when it holds every step


@dataclass(frozen=True)
class PrefillDone:
    type: ClassVar[str] = "prefill_done"
    prompt_tokens: int
    seconds: float
    cached_tokens: int = 0  # loaded from the prefix cache instead of computed
    computed_tokens: int | None = None  # computed by this run (None, in events stored before: all of them)
    prefix_disk_problem: str | None = None  # why the prefix cache's disk tier cannot keep this run's blocks
    h2d_bytes: int = 0  # KV traffic of the question before step 1 (a prefix-cache load, an offload), which the first
    d2h_bytes: int = 0  # step's TransferStats totals hold beyond its own; 0 in events stored before

    def __post_init__(self) -> None:
        if self.computed_tokens is None:
            object.__setattr__(self, "computed_tokens", self.prompt_tokens - self.cached_tokens)


@dataclass(frozen=True)
class StepStarted:
    type: ClassVar[str] = "step_started"
    step: int  # 1-based
    beams: tuple[int, ...]  # ids of the kept beams expanded in this step (empty tuple: the prompt)


@dataclass(frozen=True)
class GroupScheduled:
    type: ClassVar[str] = "group_scheduled"
    step: int
    group: int  # 0-based within the step
    candidates: tuple[int, ...]
    prefetched: tuple[int, ...]  # candidates whose KV was copied while the previous group computed


@dataclass(frozen=True)
class CandidateText:
    type: ClassVar[str] = "candidate_text"
    step: int
    id: int
    parent: int | None  # None for the first step's candidates (their parent is the prompt)
    text: str  # this step's text only
    tokens: int
    finished: bool  # its path ends here: emitted EOS (the answer is complete), or `context_full`
    group: int | None  # None: the whole step was made speculatively in its parent's step (no group ran it)
    speculated: int = 0  # leading tokens of this step made speculatively in its parent's step, then used
    context_full: bool = False  # finished because its path filled the model's context (not by EOS): it ends here


@dataclass(frozen=True)
class CandidateScored:
    type: ClassVar[str] = "candidate_scored"
    step: int
    id: int
    parent: int | None
    text: str
    tokens: int
    score: float  # the verifier's score of this step, in [0, 1]
    aggregate: float  # the path's score under the configured aggregation
    finished: bool
    group: int


@dataclass(frozen=True)
class StepSelected:
    type: ClassVar[str] = "step_selected"
    step: int
    kept: tuple[int, ...]  # best first
    pruned: tuple[int, ...]
    verifier_tokens: int = 0  # tokens the verifier ran this step, all candidates together
    verifier_tokens_full: int = 0  # what rescoring every candidate's whole path would have run
    verify_skipped: bool = False  # RKSC verify-skip: the generator was decisive, ranked by confidence
    confidence: float | None = None  # the step's highest candidate confidence (engine/methods/confidence.py)
    confidence_gap: float | None = None  # its lead over the next candidate
    verifier_agrees: bool | None = None  # verifier and confidence rank the same child first (None: not run)
    exit_layer: float | None = None  # layer-entropy exit: mean verifier layers the step's candidates ran
    verifier_layers: int | None = None  # the verifier's decoder layers (with the entropy exit on)
    verifier_layer_tokens: int = 0  # tokens x layers the verifier ran, completing kept candidates included
    verifier_layer_tokens_full: int = 0  # tokens x layers had no pass exited early
    exit_agrees: bool | None = None  # audit: the exit's and the full pass's scores put the same child first
    lens_trace: tuple = ()  # calibration: each verify pass's (vocabulary, entropies, scores) layer by layer
    speculative_discarded: int = 0  # speculated tokens of the pruned candidates, freed with them
    verifier_forwards: int = 0  # forward calls the verifier made this step
    verifier_rows: int = 0  # rows in them (a look-ahead rides in its parent step's row)
    lookahead_verified: int = 0  # speculated next steps the verifier checked with their parent's step
    lookahead_used: int = 0  # of those checked a step before, taken by their child (its score, or its KV)
    lookahead_discarded: int = 0  # ... and freed unused with their pruned parent


@dataclass(frozen=True)
class CandidateMemory:
    type: ClassVar[str] = "candidate_memory"
    id: int
    group: int | None
    device_blocks: int
    host_blocks: int
    device_bytes: int
    host_bytes: int
    h2d_bytes: int  # this candidate's share of the step's traffic (shared blocks split evenly)
    d2h_bytes: int
    verifier_device_bytes: int = 0  # the verifier's KV of this candidate's own step, on the device
    verifier_host_bytes: int = 0  # ... or on the host (the question and earlier steps are its ancestors')


@dataclass(frozen=True)
class MemorySnapshot:
    type: ClassVar[str] = "memory_snapshot"
    step: int
    emulated: bool
    budget_bytes: int
    device_bytes: int  # KV resident on the device at the end of the step
    host_bytes: int
    peak_device_bytes: int  # high-water mark during the step
    candidates: tuple[CandidateMemory, ...]
    verifier_budget_bytes: int = 0  # the verifier's share of the device KV budget (0: it keeps no KV)
    verifier_device_bytes: int = 0  # the verifier's KV at rest on the device at the end of its scoring
    verifier_host_bytes: int = 0
    verifier_peak_device_bytes: int = 0  # its KV at rest and its batch's arena, high-water mark of the step
    verifier_h2d_bytes: int = 0  # the verifier's traffic this step
    verifier_d2h_bytes: int = 0


@dataclass(frozen=True)
class TransferStats:
    type: ClassVar[str] = "transfer_stats"
    step: int
    emulated: bool
    h2d_bytes: int  # cumulative since the run started
    d2h_bytes: int
    d2d_bytes: int
    step_h2d_bytes: int
    step_d2h_bytes: int
    step_d2d_bytes: int
    copy_seconds: float  # measured on CUDA; on the emulated device the real host memcpy time
    modelled_pcie_seconds: float  # bytes over PCIe / configured bandwidth
    compute_seconds: float
    stall_share: float  # share of the step spent waiting for copies (modelled when emulated)
    groups: int
    idle_row_slots: int = 0  # decode slots of rows that had finished their step while others ran on (unused)
    h2d_calls: int = 0  # cumulative copy operations across PCIe (fewer, larger copies run faster)
    d2h_calls: int = 0
    speculative_tokens: int = 0  # tokens finished rows made for their children in those slots (FlashTTS)
    forwards: int = 0  # decode forward calls the step needed: each group's longest row, summed over groups
    speculative_runs: int = 0  # children's steps started in those slots (one run per child; several per row)
    speculative_lent_runs: int = 0  # of them, decoded in rows other candidates lent (their own work over)


@dataclass(frozen=True)
class GroupRetried:
    """A group ran out of device memory and was run again (nothing was lost): split in two, or, in
    layer-wise, with fewer resident layers ("resident layers A -> B"); `reason` says which and why."""

    type: ClassVar[str] = "group_retried"
    step: int
    candidates: tuple[int, ...]
    reason: str


@dataclass(frozen=True)
class PolicyChanged:
    """`auto` went on with another KV policy (nothing was lost): in_device's step no longer fit the budget
    re-read from free device memory, so the KV at rest crossed to the host (`moved_bytes`) and the run goes
    on with lbs; `reason` says what no longer fit."""

    type: ClassVar[str] = "policy_changed"
    step: int
    previous: str
    policy: str
    reason: str
    moved_bytes: int


@dataclass(frozen=True)
class RunFinished:
    type: ClassVar[str] = "run_finished"
    answer: str
    path: tuple[int, ...]  # candidate ids from the first step to the last
    score: float
    steps: int
    candidate_tokens: int
    seconds: float  # wall time from the search's start, less its caller's time `outside_the_search` (SearchClock)
    tokens_per_second: float
    goodput: float = 0.0  # FlashTTS: the mean over the final kept beams of path tokens / its completion seconds
    speculative_tokens: int = 0  # made in idle row slots for children (speculative beam extension)
    speculative_used: int = 0  # of them, the tokens kept candidates' children took as their steps' starts
    speculative_discarded: int = 0  # of them, freed with pruned candidates or unneeded at the end (the last kept)
    speculative_runs: int = 0  # children's steps started speculatively (one run per child)
    speculative_runs_used: int = 0  # of them, taken by a child (each child counted once)
    lookahead_verified: int = 0  # speculated next steps the verifier checked with their parent's step
    lookahead_used: int = 0  # of them, taken by their child instead of running it again
    lookahead_discarded: int = 0  # of them, freed with their pruned parent
    answer_tokens_per_second: float = 0.0  # the answer path's tokens per second of the whole run
    completions: tuple[tuple[int, int, float], ...] = ()  # each final kept beam: (id, path tokens, completion s)
    speculative_lent_runs: int = 0  # speculative runs decoded in rows other candidates lent (their own work over)
    context_full: int = 0  # final kept paths that filled the model's context: they end there, not by EOS
    context_length: int = 0  # the model's context in tokens (0: not recorded, in events stored before)
    prefix_kept_d2h_bytes: int = 0  # the prefix cache's copies of kept blocks to the host, after the last step's
    # transfer_stats (engine.kv.cache.KVCache.keep): in none of its totals


@dataclass(frozen=True)
class RunFailed:
    type: ClassVar[str] = "run_failed"
    error: str  # exception class name
    message: str  # what happened and what to do
    details: str = ""  # an internal fault's traceback, for its report (empty for the user's errors)


@dataclass(frozen=True)
class RunCancelled:
    type: ClassVar[str] = "run_cancelled"
    step: int  # the last step that finished (0: none)


Event = (
    RunStarted
    | PrefillDone
    | StepStarted
    | GroupRetried
    | GroupScheduled
    | CandidateText
    | CandidateScored
    | StepSelected
    | MemorySnapshot
    | TransferStats
    | PolicyChanged
    | RunFinished
    | RunFailed
    | RunCancelled
)

EVENT_TYPES: dict[str, type] = {
    cls.type: cls
    for cls in (
        RunStarted,
        PrefillDone,
        StepStarted,
        GroupRetried,
        PolicyChanged,
        GroupScheduled,
        CandidateText,
        CandidateScored,
        StepSelected,
        MemorySnapshot,
        TransferStats,
        RunFinished,
        RunFailed,
        RunCancelled,
    )
}
TERMINAL_TYPES = frozenset({"run_finished", "run_failed", "run_cancelled"})


def to_dict(event: Any) -> dict[str, Any]:
    """JSON-ready dict with a leading "type"; tuples become lists."""
    data = {"type": event.type}
    for f in dataclasses.fields(event):
        value = getattr(event, f.name)
        if isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0]):
            value = [to_dict(v) for v in value]
        elif isinstance(value, tuple):
            value = list(value)
        data[f.name] = value
    return data


_FIELD_NAMES = {name: tuple(f.name for f in dataclasses.fields(cls)) for name, cls in EVENT_TYPES.items()}
_TUPLE_FIELDS = {  # fields whose JSON lists turn back into tuples (annotations are strings here)
    name: tuple(f.name for f in dataclasses.fields(cls) if str(f.type).startswith("tuple"))
    for name, cls in EVENT_TYPES.items()
}


def from_dict(data: dict[str, Any]) -> Any:
    """Inverse of `to_dict`. A replay decodes ~20,000 of these, so it does no per-field type checks."""
    kind = data["type"]
    kwargs = {name: data[name] for name in _FIELD_NAMES[kind] if name in data}  # missing: an older session
    for name in _TUPLE_FIELDS[kind]:
        if name in kwargs:
            kwargs[name] = tuple(_from_item(item) for item in kwargs[name])
    return EVENT_TYPES[kind](**kwargs)


def _from_item(item: Any) -> Any:
    if isinstance(item, dict):
        return CandidateMemory(**{k: v for k, v in item.items() if k != "type"})
    return tuple(item) if isinstance(item, list) else item  # a conversation turn
