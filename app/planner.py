"""Will it fit? A memory plan for a generator, a verifier and search settings, before any weights load.

Weights and KV bytes per token come from the models' configs (`app.model_facts`); the whole search's KV
from `engine.kv.sizing.search_kv_bytes`; the policy `auto` would pick by the engine's own rule; and the
bytes over PCIe from the engine's plan-only run (the real policies on `meta` tensors), so the plan agrees
with a real run's counters; head-wise's from its closed form (`engine.kv.headwise_traffic`) alone, as its
plan-only runs are too slow to wait for. The result is a red/amber/green state and one sentence a person
can act on.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import app.formatting as fmt
from app.model_facts import ModelFacts, facts_of
from app.plan_advice import host_memory_refusal
from app.plan_roles import role_refusal
from app.plan_run import planned_run
from app.prompt_size import PromptSize, prompt_size, verifier_reading
from engine.chat import Turn
from engine.config import CacheConfig, ModelSpec, SearchConfig
from engine.context_plan import activation_token_bytes, default_chunk, prefill_reserve
from engine.errors import InvalidPrompt, KVBudgetTooSmall, ModelLoadError, PrefixCacheTooSmall, format_bytes_up
from engine.kv.cache import CUDA_MARGIN
from engine.kv.headwise_traffic import HeadwiseTraffic, KVGeometry, headwise_traffic
from engine.kv.prefix_cache import require_ram
from engine.kv.sizing import auto_policy, one_candidate_bytes, policy_whole_bytes, search_kv_bytes, within_context
from engine.kv.split import VerifierShape, emulated_budget, share_too_small, split_budget
from engine.models import model_config
from engine.verifiers.families import checked_prm_folder
from engine.verifiers.fit import WeightsDoNotFit, pair_does_not_fit
from engine.verifiers.synthetic_prm import synthetic_prm_entry

TIGHT = 0.8  # above this share of memory a plan is amber: other programs need room too
STEP_TAG_TOKENS = 4  # a PRM's own tokens around one step (a tag, a separator)
PLAN_SECONDS = 30.0  # a plan-only run past its work limit (app.plan_run.PLAN_WORK) is stopped, and Eq. 4-5 bound
# the traffic instead; this clock is only a backstop, for a machine too slow (or too busy) to do that work in it
EQ45_SOURCE = "Eq. 4-5, no prefix sharing: an upper bound"  # each candidate's KV crosses once a step
HEADWISE_SOURCE = "head-wise's closed form; a path kept alone may read more in place"
HEADWISE_ROLLOUTS_SOURCE = "head-wise's closed form, its roll-outs included; a path kept alone may read more in place"
SHARING = ("lbs", "headwise")  # groups share the prefix of the paths kept, and the verifier picks those
NOT_PLANNED = "not planned: these settings cannot run"  # red before the plan-only run
CANNOT_RUN = "It cannot run with these settings: "  # a red plan's sentence where the run refuses before step 2
SHARED_SOURCE = "the engine's plan-only run; the paths a run keeps change what its groups share"


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
    def host_verifier_weights_bytes(self) -> int:
        """A PRM on the CPU (--verifier-device cpu): its float32 weights, in host memory beside the device's."""
        return self.verifier.weights_bytes if self.verifier and self.verifier_on_cpu else 0

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
        verifier = f"{fmt.size(self.verifier_kv_bytes)} (its share of the KV budget)" if self.verifier_kv_bytes else "-"
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
            ("PCIe per step", f"- ({self.traffic_source})" if self.traffic_source == NOT_PLANNED else
                              f"{fmt.size(self.step_pcie_bytes)}, about {fmt.seconds(self.step_pcie_seconds)} "
                              f"at {self.pcie_gbps:g} GB/s ({self.traffic_source})"),
        ]


def _prm_facts(source: str, dtype: str) -> ModelFacts:
    """The PRM's facts; a folder that is missing or has no config.json, or a synthetic model that is no PRM
    (synthetic:tiny-llama, a generator), is refused as a run refuses it."""
    if source.startswith("synthetic:"):
        synthetic_prm_entry(source.removeprefix("synthetic:"))
    else:
        checked_prm_folder(source)
    return facts_of(source, dtype)


def plan(model: ModelSpec, search: SearchConfig, cache: CacheConfig, *, question: str | None = None,
         history: Sequence[Turn] = (), device: DeviceInfo | None = None) -> MemoryPlan:
    """The plan for these settings; reads configs (and the tokenizer) only, runs the policy on meta tensors,
    loads no weights. `history` holds a follow-up's earlier turns: its prompt is the whole conversation.
    Red when the run would refuse the settings (each refusal below in the run's words), else `judge`'s."""
    gen = facts_of(model.source, model.dtype)
    on_cpu = search.verifier_device == "cpu"  # the PRM in float32 in host memory (engine.verifiers.make_verifier)
    prm = _prm_facts(search.verifier_model, "float32" if on_cpu else model.dtype) \
        if search.verifier == "prm" and search.verifier_model else None
    info = device or DeviceInfo.probe(cache.device)
    counted = prompt_size(model.source, question, history)
    prompt = counted.tokens
    bound = within_context(search, prompt, gen.context_length) if gen.context_length else search  # as the run's
    whole = search_kv_bytes(prompt, bound, cache, gen.kv_token_bytes, cascade=True,  # engine.models routes to it
                            steps_cut=bound.max_steps < search.max_steps)  # fmt: skip
    judge_kv = gen if search.verifier == "self-judge" else prm  # self-judge keeps the generator's own KV
    shape = None if judge_kv is None or on_cpu else _verifier_shape(model.source, search, judge_kv, question, prompt)
    act, candidates = _activation_token_bytes(model.source, gen), search.candidates_per_step
    on_gpu = not info.emulated and info.memory_bytes is not None
    room = info.memory_bytes - CUDA_MARGIN if on_gpu and not cache.kv_budget_bytes else None  # an automatic budget
    activations = 0 if room is None else _activations(gen, prompt, candidates, act, _chunk(cache, info, act, room))
    fixed = gen.weights_bytes + (prm.weights_bytes if prm and not on_cpu else 0) + activations  # beside it (a GPU's)
    budget, verifier_kv, too_small = _budget_and_share(info, search, cache, gen, shape, prompt, whole, fixed, bound)
    if room is None:  # the run sizes its chunk to the generator's part of the budget; a GPU's reserve, to `room`
        activations = _activations(gen, prompt, candidates, act, _chunk(cache, info, act, budget - verifier_kv))
    one = one_candidate_bytes(prompt, bound, gen.kv_token_bytes, cache.block_size)
    policy = cache.policy if cache.policy != "auto" else auto_policy(whole, one, budget - verifier_kv)
    draft = MemoryPlan(gen, prm, info.label, info.emulated, info.memory_bytes, budget, policy,
                       search.candidates_per_step, prompt, whole, verifier_kv, activations, 0,
                       cache.pcie_gbps, "green", "", policy_chosen_by="auto picks it" if cache.policy == "auto"
                       else "as set", verifier_on_cpu=on_cpu, prompt=counted)
    share_short = shape and _share_refusal(shape, search, verifier_kv, budget, cache.verifier_kv_share)
    refused = (_device_refusal(cache.device) or role_refusal(model.source, search)
               or _context_refusal(search, gen, prompt, history)
               or _does_not_fit(draft) or too_small or share_short
               or _prefix_cache_refusal(cache, prompt, gen) or _tokenizer_refusal(model.source, search))
    if refused is None:  # only a plan that can run is worth scheduling
        draft, refused = _traffic(draft, model, bound, cache)  # steps past the context hold and move nothing
    if refused and not draft.step_pcie_bytes:  # red with no bytes counted: none to show, not "0 B"
        draft = dataclasses.replace(draft, traffic_source=NOT_PLANNED)
    state, sentence = ("red", refused) if refused else judge(draft)
    return dataclasses.replace(draft, state=state, sentence=sentence)


def _budget_and_share(info: DeviceInfo, search: SearchConfig, cache: CacheConfig, gen: ModelFacts,
                      shape: VerifierShape | None, prompt: int, whole: int, fixed: int, bound: SearchConfig
                      ) -> tuple[int, int, str | None]:  # fmt: skip
    """The KV budget (--kv-budget, or the engine's automatic one beside the `fixed` weights and activations), the
    verifier's part of it as the run splits it (`shape`: the verifier that keeps KV on the device, or None), and
    why the run refuses that split before its first step (None when it does not; a share too small for one path
    is `_share_refusal`'s). `bound`: the search as its paths can grow (`within_context`), which the generator's KV
    cache sizes itself by, as the run's does."""
    steps = search.max_steps + search.lookahead  # a roll-out's steps are verified too
    batch, row = (0, 0) if shape is None else (shape.share_bytes(search.candidates_per_step, search.step_tokens, steps),
                                               shape.row_bytes(search.step_tokens, steps))
    prefill_kv = prefill_reserve(prompt, gen.kv_token_bytes, act_token=0, chunk=0)  # the prefill's KV beside the
    # pool, as the run leaves it free (its activations are in `fixed`)
    budget = cache.kv_budget_bytes or _automatic_budget(
        info, policy_whole_bytes(cache.policy, whole, prompt, bound, gen.kv_token_bytes, gen.kv.num_layers), batch,
        cache.verifier_kv_share, fixed + prefill_kv)
    try:
        verifier_kv, too_small = split_budget(budget, cache.verifier_kv_share, batch, row).verifier_bytes, None
    except KVBudgetTooSmall as error:  # the run refuses it before its first step
        verifier_kv, too_small = budget // 2, cannot_run(error.user_message())
    return budget, verifier_kv, too_small


def _traffic(draft: MemoryPlan, model: ModelSpec, search: SearchConfig, cache: CacheConfig
             ) -> tuple[MemoryPlan, str | None]:  # fmt: skip
    """`draft` with the bytes a step moves over PCIe and where the figure comes from: the engine's plan-only run,
    head-wise's closed form, or Eq. 4-5's bound for a run too long to wait for; and why the run refuses these
    settings in the middle of the search (a step that does not fit), None when it does not. Head-wise runs no
    plan-only run: its closed form gives every step's bytes and refusal at once (its plan-only run of a long
    question took 30 s, and its figures were the closed form's all the same)."""
    prompt, policy, gen = draft.prompt_tokens, draft.policy, draft.generator
    budget = draft.kv_budget_bytes - draft.verifier_kv_bytes  # the generator's part
    if policy == "headwise":
        traffic = _headwise(prompt, search, cache, gen, budget)
        draft = dataclasses.replace(draft, step_pcie_bytes=traffic.average, traffic_source=HEADWISE_ROLLOUTS_SOURCE
                                    if search.lookahead else HEADWISE_SOURCE)
        refused = traffic.refused  # in the step after the ones it counted (the prompt's: before step 1)
        return draft, refused and refusal_sentence(refused.user_message(), len(traffic.step_bytes) + 1)
    planned = planned_run(model, search, cache, prompt, budget, policy, PLAN_SECONDS)
    draft = dataclasses.replace(draft, step_pcie_bytes=planned.step_bytes)
    why, step = planned.refused, planned.step
    if not planned.finished and policy != "in_device":  # too long to wait for: the paper's bound at once
        draft = dataclasses.replace(draft, step_pcie_bytes=_eq45_step_bytes(prompt, search, gen),
                                    traffic_source=EQ45_SOURCE)
    elif policy in SHARING and search.candidates_per_step > 1:
        draft = dataclasses.replace(draft, traffic_source=SHARED_SOURCE)
    return draft, why and refusal_sentence(why, step)


def refusal_sentence(why: str, step: int) -> str:
    """A red plan's sentence for the run's refusal `why` in `step` (1-based; 0: before the first). Up to step 1 it
    is certain; a later step's was found with every path at its full length, and paths that end early need less:
    red all the same, as amber and green promise that no step is refused however long the paths run."""
    if step <= 1:
        return cannot_run(why)
    return f"It may be refused at step {step}, where its paths run to their full length: {after_colon(why)}"


def cannot_run(why: str) -> str:
    """A red plan's sentence for a refusal before step 2, `why` in the run's words."""
    return f"{CANNOT_RUN}{after_colon(why)}"


def after_colon(text: str) -> str:
    """`text` to follow a colon inside a sentence: a capitalised first word lowered ("...settings: the prompt is",
    not "The prompt is"), a word in capitals kept ("KV budget", "CUDA")."""
    if text[:1].isupper() and text[1:2].islower():
        return text[0].lower() + text[1:]
    return text


def _prefix_cache_refusal(cache: CacheConfig, prompt: int, gen: ModelFacts) -> str | None:
    """Why the run refuses a prefix cache RAM cap below the blocks it pins (the full blocks of every prompt token
    but the last: `engine.kv.prefix_io.load_prefix`), in its words; None when it holds them or is not capped."""
    if not cache.prefix_cache:
        return None
    try:
        require_ram(cache.prefix_cache_ram_bytes, max(prompt - 1, 0) // cache.block_size,
                    cache.block_size * gen.kv_token_bytes)
    except PrefixCacheTooSmall as refused:
        return cannot_run(refused.user_message())
    return None


def _tokenizer_refusal(source: str, search: SearchConfig) -> str | None:
    """Why the run refuses a model folder (the generator's, or the PRM's) that holds no tokenizer files, in its
    words; None for every other source (synthetic models, GGUF files and the bundled model carry their own)."""
    from pathlib import Path

    from engine.models import check_tokenizer_files
    from engine.prm_names import named_family

    prm = [named_family(search.verifier_model)[1]] if search.verifier == "prm" and search.verifier_model else []
    for name in [source, *prm]:
        folder = Path(name).expanduser()
        if name in ("bundled", "default") or name.startswith("synthetic:") or not folder.is_dir():
            continue
        try:
            check_tokenizer_files(folder)
        except ModelLoadError as error:
            return f"It cannot run with this model: {after_colon(error.user_message())}"
    return None


def _device_refusal(device: str) -> str | None:
    """Why the run refuses `device` as it loads the model (`--device cuda` where no CUDA device is), in its words."""
    from engine.models import resolve_device  # the run's own check: the plan then shows the emulated GPU's figures

    try:
        resolve_device(device)
    except ModelLoadError as error:
        return cannot_run(error.user_message())
    return None


def _context_refusal(search: SearchConfig, gen: ModelFacts, prompt: int, history: Sequence[Turn]) -> str | None:
    """Why the run refuses a prompt of `prompt` tokens (the question, or the conversation, longer than the model's
    context holds with one step), in its words; None where the context is unknown."""
    from engine.search import check_prompt_fits  # the run's own check (engine.search is loaded only to plan)

    if gen.context_length is None:
        return None
    try:
        check_prompt_fits(prompt, gen.context_length, search.step_tokens, len(history))
    except InvalidPrompt as error:
        return cannot_run(error.user_message())
    return None


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


def _verifier_shape(source: str, search: SearchConfig, verifier: ModelFacts, question: str | None, prompt: int
                    ) -> VerifierShape:  # fmt: skip
    """What sizes the verifier's share, as the run sizes it (engine/kv/split.py) with its default batch and block
    size: the tokens its own layout reads (app.prompt_size.verifier_reading), or where its tokenizer cannot be
    read, the generator's whole prompt as the question and a few tokens of the verifier's own around a step.
    `verifier`: the PRM, or for self-judge the generator."""
    reading = verifier_reading(source, search.verifier, search.verifier_model, question)
    if reading is None:
        return VerifierShape(verifier.kv_token_bytes, prompt, STEP_TAG_TOKENS, STEP_TAG_TOKENS)
    return VerifierShape(verifier.kv_token_bytes, reading.prefix, reading.per_step, reading.probe,
                         reading.reads_per_token)


def _share_refusal(shape: VerifierShape, search: SearchConfig, share_bytes: int, budget: int, share: float | None
                   ) -> str | None:  # fmt: skip
    """Why the verifier's `share_bytes` (`share` of the budget as set, None: the automatic part) may be refused, in
    the run's words, with the share or budget that holds one path at its longest: each step of k generator tokens
    read in k x f (f: the most verifier tokens a generator token reads as) with its format's tokens at their most
    (engine.verifiers.path_kv `format_tokens`).
    kv_pools splits a group down to one row and widens no arena past the share, so a share this passes is never
    refused (where the tokenizers can be read: else `_verifier_shape`'s is an estimate)."""
    steps = search.max_steps + search.lookahead  # a roll-out's steps are verified in their step
    widths = shape.path_widths(search.step_tokens * shape.reads_per_token, steps)
    refused = next((i for i, width in enumerate(widths) if shape.arena_bytes(1, width) > share_bytes), None)
    if refused is None:
        return None
    error = share_too_small(share_bytes, 1, widths[refused], shape.arena_bytes(1, widths[refused]))
    need = shape.arena_bytes(1, widths[-1])
    enough = math.ceil(100 * need / budget) / 100
    if share is None:  # the automatic part: a share set instead holds it
        holds = f"--verifier-kv-share 0.5 and a KV budget of {format_bytes_up(2 * need)}"
    else:
        holds = f"a KV budget of {format_bytes_up(math.ceil(need / share))} at this share"
    if enough < 1:  # a share is below 1 (engine.config): 0.996 of the budget is told as the budget alone
        holds = f"--verifier-kv-share {enough:g}" if share is None else f"--verifier-kv-share {enough:g} or {holds}"
    why = f"{error} {error.hint} With {holds}, the verifier's part holds one path."
    if refused == 0:
        return cannot_run(why)
    step = max(1, refused - search.lookahead)
    return (f"It may be refused at step {step}, where its steps run to their full length and the verifier reads "
            f"each generator token in as many tokens as it can ({shape.reads_per_token}): {why}")


def _activations(gen: ModelFacts, prompt: int, candidates: int, act_token: int, chunk: int) -> int:
    """Working memory of one forward pass: float32 logits for each candidate, and the activations of the prefill's
    chunk of `chunk` tokens (`act_token` each: engine.context_plan), not of the whole prompt."""
    return candidates * (gen.vocab_size or 32_000) * 4 + min(chunk, prompt) * act_token


def _activation_token_bytes(source: str, gen: ModelFacts) -> int:
    """One prefill position's activations, as the run counts them (engine.context_plan.activation_token_bytes);
    where no transformers config can be read (a GGUF file, the bundled model not yet converted) from the hidden
    size alone: its states, q/k/v and a gated MLP about 8 x hidden wide."""
    try:
        return activation_token_bytes(model_config(source), gen.kv.dtype_bytes)
    except ModelLoadError:
        return (gen.hidden_size or 4096) * gen.kv.dtype_bytes * 8


def _chunk(cache: CacheConfig, info: DeviceInfo, act_token: int, budget: int) -> int:
    """The run's prefill chunk: --prefill-chunk as typed, else sized to `budget` (engine.context_plan.default_chunk,
    at most CPU_CHUNK on the emulated device)."""
    return cache.prefill_chunk or default_chunk(budget, act_token, emulated=info.emulated)


def _headwise(prompt: int, search: SearchConfig, cache: CacheConfig, gen: ModelFacts, budget: int
              ) -> HeadwiseTraffic:  # fmt: skip
    """Head-wise's bytes and refusal under the generator's `budget`, its pool capped as the run caps it."""
    kv = KVGeometry(gen.kv.num_layers, gen.kv.num_kv_heads, gen.kv_token_bytes)
    return headwise_traffic(kv, prompt, search, cache, budget,
                            search_kv_bytes(prompt, search, cache, gen.kv_token_bytes, cascade=False))


def _eq45_step_bytes(prompt: int, search: SearchConfig, gen: ModelFacts) -> int:
    """Eq. 4-5 averaged over the steps: each candidate's KV crosses once a step; its new tokens go back."""
    n, k, steps, token = search.candidates_per_step, search.step_tokens, search.max_steps, gen.kv_token_bytes
    h2d = sum(n * (prompt + i * k) * token for i in range(steps))
    return (h2d + steps * n * k * token) // steps


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
    return host_memory_refusal(p)


def judge(p: MemoryPlan) -> tuple[str, str]:
    """Amber: it runs but moves KV over PCIe or fills memory; green: it fits. For a plan the run would not refuse:
    `plan` makes red itself, from every refusal it checks (a model in a part it cannot play, the context,
    `_does_not_fit`, the verifier's share, the prefix cache, the tokenizer files, a step the plan-only run or
    head-wise cannot fit)."""
    memory = p.memory_bytes
    if p.step_pcie_bytes:
        most = "up to " if p.traffic_source == EQ45_SOURCE else ""  # an upper bound: no run counted the bytes
        return "amber", (f"{p.candidates} candidates will move {most}{fmt.size(p.step_pcie_bytes)} per step over "
                         f"PCIe: {most}about {fmt.seconds(p.step_pcie_seconds)} a step.")
    if memory is not None and p.needed_bytes > TIGHT * memory:
        return "amber", (f"It fits, but takes {p.needed_bytes / memory:.0%} of "
                         f"{'free memory' if p.emulated else 'GPU memory'}; other programs may push it out.")
    return "green", f"Everything fits on the {'emulated ' if p.emulated else ''}GPU: {p.candidates} candidates, " \
                    "no KV crosses PCIe during the steps."  # a prompt found in the prefix cache crosses once before
