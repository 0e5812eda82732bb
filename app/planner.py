"""Will it fit? A memory plan for a generator, a verifier and search settings, before any weights load.

Weights and KV bytes per token come from the models' configs (`app.model_facts`); the whole search's KV
from `engine.kv.cache.search_kv_bytes`; the policy `auto` would pick by the engine's own rule; and the
bytes over PCIe from the engine's plan-only run (the real policies on `meta` tensors), so the plan agrees
with a real run's counters. The result is a red/amber/green state and one sentence a person can act on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import app.formatting as fmt
from app.model_facts import ModelFacts, facts_of
from app.prompt_size import PromptSize, prompt_size
from engine.chat import Turn
from engine.config import CacheConfig, ModelSpec, SearchConfig
from engine.kv.cache import CUDA_MARGIN, policy_whole_bytes, search_kv_bytes
from engine.kv.split import emulated_budget, split_budget, verifier_group_bytes
from engine.verifiers.families import checked_prm_folder
from engine.verifiers.fit import WeightsDoNotFit, pair_does_not_fit

TIGHT = 0.8  # above this share of memory a plan is amber: other programs need room too
VERIFIER_BATCH = 8  # paths a verifier scores together (engine.verifiers.path_kv's default batch size)
STEP_TAG_TOKENS = 4  # a PRM's own tokens around one step (a tag, a separator)
VERIFIER_BLOCK = 16  # tokens per verifier KV block (engine.verifiers.kv_pools' default)
PLAN_OPS_LIMIT = 30_000  # above this a plan-only run takes seconds; the analytic bound is used instead
LBS_KEYS = {(True, True, True): "lbs:+prefix_order", (True, True, False): "lbs:+balanced_prefetch",
            (True, False, False): "lbs:+inter_beam", (False, False, False): "lbs:inter_token"}


@dataclass(frozen=True)
class MemoryPlan:
    """Every figure of one plan, in bytes and seconds; `state` is green, amber or red."""

    generator: ModelFacts
    verifier: ModelFacts | None
    device: str
    emulated: bool
    memory_bytes: int | None  # what the figures are held against: GPU memory, or free host memory when emulated
    kv_budget_bytes: int
    policy: str
    candidates: int
    prompt_tokens: int
    generator_kv_bytes: int  # the whole search, every candidate at full length
    verifier_kv_bytes: int
    activation_bytes: int
    step_pcie_bytes: int
    pcie_gbps: float
    state: str
    sentence: str
    traffic_source: str = "the engine's plan-only run"
    policy_chosen_by: str = "auto picks it"
    verifier_on_cpu: bool = False  # --verifier-device cpu: the PRM's weights and KV are not on the device
    prompt: PromptSize | None = None  # how `prompt_tokens` was found, and the conversation turns it holds

    @property
    def verifier_weights_bytes(self) -> int:
        return self.verifier.weights_bytes if self.verifier and not self.verifier_on_cpu else 0

    @property
    def weights_bytes(self) -> int:
        """On the device: the generator's weights and the PRM's (unless it runs on the CPU)."""
        return self.generator.weights_bytes + self.verifier_weights_bytes

    @property
    def step_pcie_seconds(self) -> float:
        return self.step_pcie_bytes / (self.pcie_gbps * 1e9)

    @property
    def needed_bytes(self) -> int:
        """On the device: weights, activations, the verifier's KV share and the KV the budget gives the generator."""
        kv = min(self.generator_kv_bytes, self.kv_budget_bytes - self.verifier_kv_bytes)
        return self.weights_bytes + self.activation_bytes + self.verifier_kv_bytes + kv

    def lines(self) -> list[str]:
        """The plan as aligned lines for the terminal (the window shows the same rows)."""
        return [f"{label:<24}{value}" for label, value in self.rows()] + ["", f"[{self.state}] {self.sentence}"]

    def _prompt_row(self) -> str:
        if self.prompt is None:
            return f"{self.prompt_tokens:,} tokens"
        turns = f", {self.prompt.turns} earlier turn{'s' * (self.prompt.turns != 1)} of the conversation" \
            if self.prompt.turns else ""
        return f"{self.prompt_tokens:,} tokens ({self.prompt.how}{turns})"

    def rows(self) -> list[tuple[str, str]]:
        memory = "unknown" if self.memory_bytes is None else fmt.size(self.memory_bytes)
        where = "host memory free" if self.emulated else "GPU memory"
        verifier = "-" if self.verifier is None else f"{fmt.size(self.verifier_kv_bytes)} (its share of the KV budget)"
        if self.verifier_on_cpu:
            verifier = "on the CPU, outside the KV budget"
        part = f", {fmt.size(self.kv_budget_bytes - self.verifier_kv_bytes)} of it" if self.verifier_kv_bytes else ""
        weights = [("weights", fmt.size(self.weights_bytes))]
        if self.verifier is not None:
            on_cpu = " (on the CPU)" if self.verifier_on_cpu else ""
            weights += [("  generator weights", fmt.size(self.generator.weights_bytes)),
                        ("  verifier weights", f"{fmt.size(self.verifier.weights_bytes)}{on_cpu}")]
        return [
            ("device", self.device),
            ("prompt", self._prompt_row()),
            *weights,
            ("generator KV", f"{fmt.size(self.generator_kv_bytes)} (whole search; KV budget "
                             f"{fmt.size(self.kv_budget_bytes)}{part})"),
            ("verifier KV", verifier),
            ("activations", f"about {fmt.size(self.activation_bytes)}"),
            (where, memory),
            ("policy", f"{self.policy} ({self.policy_chosen_by})"),
            ("PCIe per step", f"{fmt.size(self.step_pcie_bytes)}, about {fmt.seconds(self.step_pcie_seconds)} "
                              f"at {self.pcie_gbps:g} GB/s ({self.traffic_source})"),
        ]


def _prm_facts(source: str, dtype: str) -> ModelFacts:
    """The PRM's facts; a folder that is missing or has no config.json is refused as a run refuses it."""
    if not source.startswith("synthetic:"):
        checked_prm_folder(source)
    return facts_of(source, dtype)


def plan(model: ModelSpec, search: SearchConfig, cache: CacheConfig, *, question: str | None = None,
         history: Sequence[Turn] = (), device: DeviceInfo | None = None) -> MemoryPlan:
    """The plan for these settings; reads configs (and the tokenizer) only, runs the policy on meta tensors,
    loads no weights. `history` holds a follow-up's earlier turns: its prompt is the whole conversation."""
    gen = facts_of(model.source, model.dtype)
    prm = _prm_facts(search.verifier_model, model.dtype) if search.verifier == "prm" and search.verifier_model else None
    info = device or DeviceInfo.probe(cache.device)
    counted = prompt_size(model.source, question, history)
    prompt = counted.tokens
    whole = search_kv_bytes(prompt, search, cache, gen.kv_token_bytes, cascade=True)  # engine.models routes to it
    on_cpu = search.verifier_device == "cpu"
    batch = 0 if prm is None or on_cpu else _verifier_batch(prompt, search, prm)
    activations = _activations(gen, prompt, search.candidates_per_step)
    fixed = gen.weights_bytes + (prm.weights_bytes if prm and not on_cpu else 0) + activations
    budget = cache.kv_budget_bytes or _automatic_budget(
        info, policy_whole_bytes(cache.policy, whole, prompt, search, gen.kv_token_bytes, gen.kv.num_layers), batch,
        cache.verifier_kv_share, fixed)
    verifier_kv = split_budget(budget, cache.verifier_kv_share, batch).verifier_bytes
    policy = cache.policy if cache.policy != "auto" else ("in_device" if whole <= budget - verifier_kv else "lbs")
    draft = MemoryPlan(gen, prm, info.label, info.emulated, info.memory_bytes, budget, policy,
                       search.candidates_per_step, prompt, whole, verifier_kv, activations, 0,
                       cache.pcie_gbps, "green", "", policy_chosen_by="auto picks it" if cache.policy == "auto"
                       else "as set", verifier_on_cpu=on_cpu, prompt=counted)
    refused = _does_not_fit(draft)
    if refused is None and policy != "in_device":  # only a plan that can run is worth scheduling
        if _plan_ops(draft, search, gen) <= PLAN_OPS_LIMIT:
            moved, failure = _planned_traffic(model, search, cache, prompt, budget - verifier_kv, policy)
            draft = dataclasses.replace(draft, step_pcie_bytes=moved)
        else:  # the plan-only run would take many seconds: the paper's Eq. 4-5 bound the traffic at once
            failure = None
            draft = dataclasses.replace(draft, step_pcie_bytes=_eq45_step_bytes(prompt, search, gen),
                                        traffic_source="Eq. 4-5, no prefix sharing: an upper bound")
        refused = None if failure is None else f"It cannot run with these settings: {failure}"
    state, sentence = ("red", refused) if refused else judge(draft)
    return dataclasses.replace(draft, state=state, sentence=sentence)


@dataclass(frozen=True)
class DeviceInfo:
    """Where the search would run: a CUDA device's memory, or the emulated GPU over free host memory."""

    label: str
    emulated: bool
    memory_bytes: int | None

    @classmethod
    def probe(cls, device: str = "auto") -> DeviceInfo:
        import torch

        if device != "cpu" and torch.cuda.is_available():
            _, total = torch.cuda.mem_get_info()
            return cls(f"cuda ({torch.cuda.get_device_name()})", False, int(total))
        from engine.synthetic import free_memory_bytes

        return cls("cpu (emulated GPU)", True, free_memory_bytes(torch.device("cpu")))


def _automatic_budget(info: DeviceInfo, whole: int, batch: int, share: float | None, fixed: int) -> int:
    """The engine's rule: on CUDA what is free after the weights less a margin; emulated, the whole search
    and the verifier's batch in their shares."""
    if info.emulated or info.memory_bytes is None:
        return emulated_budget(whole, batch, share)
    return max(info.memory_bytes - fixed - CUDA_MARGIN, 1)


def _verifier_batch(prompt: int, search: SearchConfig, prm: ModelFacts) -> int:
    """One verification group at the last step: the engine's formula (engine/kv/split.py) with its default batch
    and block size, each step counted with a few tokens of the PRM's own around it (its tokenizer is not loaded)."""
    return verifier_group_bytes(block_size=VERIFIER_BLOCK, token_bytes=prm.kv_token_bytes,
                                rows=search.candidates_per_step, batch_size=VERIFIER_BATCH, prefix=prompt,
                                per_step=STEP_TAG_TOKENS, probe=STEP_TAG_TOKENS, step_tokens=search.step_tokens,
                                steps=search.max_steps)


def _activations(gen: ModelFacts, prompt: int, candidates: int) -> int:
    """Working memory of one forward pass: float32 logits for each candidate and the prefill's hidden states."""
    vocab, hidden = gen.vocab_size or 32_000, gen.hidden_size or 4096
    return candidates * vocab * 4 + prompt * hidden * gen.kv.dtype_bytes * 8


def _plan_ops(p: MemoryPlan, search: SearchConfig, gen: ModelFacts) -> int:
    """About how many layer updates a plan-only run makes (its time grows with them: ~1 ms per 1,000)."""
    longest = (p.prompt_tokens + search.max_steps * search.step_tokens) * gen.kv_token_bytes
    groups = -(-p.candidates * longest // max(1, p.kv_budget_bytes))
    return search.max_steps * search.step_tokens * groups * gen.kv.num_layers


def _eq45_step_bytes(prompt: int, search: SearchConfig, gen: ModelFacts) -> int:
    """Eq. 4-5 averaged over the steps: each candidate's KV crosses once a step; its new tokens go back."""
    n, k, steps, token = search.candidates_per_step, search.step_tokens, search.max_steps, gen.kv_token_bytes
    h2d = sum(n * (prompt + i * k) * token for i in range(steps))
    return (h2d + steps * n * k * token) // steps


def _planned_traffic(model: ModelSpec, search: SearchConfig, cache: CacheConfig, prompt: int, budget: int,
                     policy: str) -> tuple[int, str | None]:
    """Bytes over PCIe per step from the engine's plan-only run; (0, why) when the plan cannot run."""
    from engine.bench import Workload, run_bench

    key = "layerwise" if policy == "layerwise" else LBS_KEYS.get(
        (cache.inter_beam, cache.balanced_prefetch, cache.prefix_order), "lbs:+prefix_order")
    workload = Workload(model=model.source, dtype=model.dtype, beams=search.beams, width=search.width,
                        step_tokens=search.step_tokens, prompt_tokens=prompt,
                        gen_tokens=search.step_tokens * search.max_steps, kv_budget_bytes=budget,
                        pcie_gbps=cache.pcie_gbps, block_size=cache.block_size, seed=search.seed)
    result = run_bench(workload, [key], plan_only=True).results[0]
    if not result.ok:
        return 0, result.message
    return (result.h2d_bytes + result.d2h_bytes) // max(1, search.max_steps), None


def _does_not_fit(p: MemoryPlan) -> str | None:
    """Why the plan cannot run at all (red), or None."""
    memory = p.memory_bytes
    on_gpu = memory is not None and not p.emulated
    if on_gpu and p.generator.weights_bytes + p.activation_bytes > memory:
        return (f"The weights alone ({fmt.size(p.generator.weights_bytes)}) need more than the GPU's "
                f"{fmt.size(memory)}: pick a smaller model or a narrower dtype, or run on the CPU.")
    pair = pair_does_not_fit(p.generator.weights_bytes, p.verifier_weights_bytes, memory, "the GPU") \
        if on_gpu and p.verifier_weights_bytes else None
    if pair:
        return f"{pair[0].upper()}{pair[1:]} {WeightsDoNotFit.hint}"
    host_need = p.weights_bytes + p.generator_kv_bytes + p.verifier_kv_bytes + p.activation_bytes
    if memory is not None and p.emulated and host_need > memory:
        return (f"This search needs about {fmt.size(host_need)}, more than the {fmt.size(memory)} of "
                "memory free: lower the beams, the width or the steps.")
    return None


def judge(p: MemoryPlan) -> tuple[str, str]:
    """Amber: it runs but moves KV over PCIe or fills memory; green: it fits. (Red is `_does_not_fit`'s.)"""
    memory = p.memory_bytes
    if p.step_pcie_bytes:
        return "amber", (f"{p.candidates} candidates will move {fmt.size(p.step_pcie_bytes)} per step over PCIe: "
                         f"about {fmt.seconds(p.step_pcie_seconds)} a step.")
    if memory is not None and p.needed_bytes > TIGHT * memory:
        return "amber", (f"It fits, but takes {p.needed_bytes / memory:.0%} of "
                         f"{'free memory' if p.emulated else 'GPU memory'}; other programs may push it out.")
    return "green", f"Everything fits on the {'emulated ' if p.emulated else ''}GPU: {p.candidates} candidates, " \
                    "no KV crosses PCIe."
