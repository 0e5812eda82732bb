"""One run's KV cache: resolves the policy and budget, owns blocks and store, runs each step's plan."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from engine import events as ev
from engine.config import SPECULATING, CacheConfig, SearchConfig
from engine.context_plan import activation_token_bytes, default_chunk, prefill_reserve
from engine.errors import KVBudgetTooSmall, PrefillStopped
from engine.kv.attention import uses_cascade
from engine.kv.blocks import BlockManager, Tier
from engine.kv.first_step import PROMPT_ID, first_step_error
from engine.kv.headwise import HeadwisePolicy
from engine.kv.in_device import InDevicePolicy
from engine.kv.layerwise import LayerwisePolicy
from engine.kv.offload import move_to_host
from engine.kv.policies import make_policy, make_store
from engine.kv.policy import Decode, GroupDone, Live, Policy, PolicyContext, StepTiming, work_of
from engine.kv.prefix_cache import PrefixCache
from engine.kv.prefix_io import device_cache, keep_layers, keep_table, load_prefix
from engine.kv.prompt_kv import write_prompt
from engine.kv.run_budget import RunBudget, device_free_bytes, whole_slots
from engine.kv.sizing import (
    auto_policy,
    layerwise_pool,
    one_candidate_bytes,
    policy_whole_bytes,
    refusal_floors,
    search_kv_bytes,
    within_context,
)
from engine.kv.step_report import candidates_memory, transfer_stats
from engine.kv.store import KVStore
from engine.loaded import Generator
from engine.models import KVShape
from engine.verifiers.base import VerifierMemory

CUDA_MARGIN = 1 << 30  # leave this much device memory free for activations when the budget is automatic

Prefill = Callable[..., Any]  # token ids, chunk=, cache=, **forward -> the prompt's cache (engine.runner.prefill)
BudgetProbe = Callable[[], int | None]  # free device bytes now, or None when it cannot change (emulated)



class KVCache:
    """Owns the blocks, the store and the policy of one run; the search drives it step by step."""

    def __init__(
        self,
        loaded: Generator,
        search: SearchConfig,
        cache: CacheConfig,
        prompt_tokens: int,
        *,
        decode: Decode,
        prefill: Prefill,
        free_bytes: BudgetProbe | None = None,
        margin: int = CUDA_MARGIN,
        verifier_batch_bytes: int = 0,
        verifier_row_bytes: int = 0,
        prefix: PrefixCache | None = None,
    ) -> None:
        """`verifier_batch_bytes`: device KV one verification batch needs (0: the verifier keeps no KV); the
        budget is split between the generator (`budget`) and the verifier (`verifier_budget`), a budget whose
        automatic share cannot hold `verifier_row_bytes` (one path's longest) refused at once. `prefix`: the
        prefix cache the prompt's cached blocks come from and this run's blocks go to (None: none)."""
        asked = search.max_steps
        search = within_context(search, prompt_tokens, loaded.context_length)  # every bound below: paths end there
        self.cfg, self.search, self._prefill = cache, search, prefill
        self.prefix, self._pinned, self.chosen, self._body = prefix, [], None, []
        self.kept_d2h_bytes: int | None = None  # what `keep` copied to the host (None: not kept yet)
        self.cached_tokens = self.computed_tokens = 0
        self.prompt_tokens = prompt_tokens
        self._config = loaded.model.config
        shape, self.device = loaded.kv_shape, loaded.device
        self.blocks = BlockManager(cache.block_size)
        token_bytes = shape.token_bytes()  # one token's KV in every layer: the unit of every bound below
        attention = uses_cascade(loaded.model.config)  # in_device's groups read a parent's history once
        whole = search_kv_bytes(prompt_tokens, search, cache, token_bytes, cascade=attention,
                                steps_cut=search.max_steps < asked)  # fmt: skip
        self.emulated = self.device.type != "cuda"  # until the store says (a CPU fake of CUDA in tests)
        self._probe = free_bytes  # None: read CUDA (a bound method here would make a reference cycle)
        act = activation_token_bytes(loaded.model.config, _element_size(loaded.dtype))
        self.run_budget = self._resolve_budget(prompt_tokens, shape, whole, act, margin, verifier_batch_bytes,
                                               verifier_row_bytes)  # fmt: skip
        self.budget, self.verifier_budget = self.run_budget.budget, self.run_budget.verifier_budget
        one = one_candidate_bytes(prompt_tokens, search, token_bytes, cache.block_size)
        self.policy_name = cache.policy if cache.policy != "auto" else auto_policy(whole, one, self.budget)
        self.speculative = cache.speculative and self.policy_name in SPECULATING
        grouped = self.policy_name == "in_device" or (self.policy_name == "lbs" and cache.inter_beam)
        if not (attention and grouped):  # its rows hold their whole history: the pool may need that much
            whole = search_kv_bytes(prompt_tokens, search, cache, token_bytes, cascade=False)
        # budgets no step exceeds (a refusal names them, `_refused`)
        self._no_refusal = refusal_floors(prompt_tokens, search, shape, cache.block_size, whole, one)
        self.layer_overhead = 0  # layer-wise: device bytes its buffers hold beyond its Eq. 1 budget
        self.store = self._make_store(loaded, prompt_tokens, whole)
        self.emulated = self.store.emulated
        context = PolicyContext(
            loaded.model.config, self.blocks, self.store, decode, search.step_tokens, self.speculative,
            self.speculative and cache.speculative_continuations != 1,
        )
        self.context = context
        self.policy: Policy = make_policy(self.policy_name, context, cache, self.budget, self.layer_overhead)
        self.changes: list[tuple[str, str, str, int]] = []  # auto's policy changes not yet reported
        self.live: dict[int, Live] = {}
        self.timing = StepTiming()
        self.prefill_chunk = cache.prefill_chunk or default_chunk(self.budget, act, emulated=self.emulated)

    def _resolve_budget(self, prompt_tokens: int, shape: KVShape, whole: int, act: int, margin: int,
                        verifier_batch_bytes: int, verifier_row_bytes: int) -> RunBudget:  # fmt: skip
        """The run's KV budget (--kv-budget, else free device memory less the `margin` and the prefill's
        activations `act` per token, else what the whole search needs). `whole`: in_device's bound
        (`search_kv_bytes`)."""
        cache, token_bytes = self.cfg, shape.token_bytes()
        free = None if cache.kv_budget_bytes else self._free_bytes()  # read only for an automatic budget
        whole = policy_whole_bytes(cache.policy, whole, prompt_tokens, self.search, token_bytes, shape.num_layers)

        def reserve(room: int) -> int:  # what the prefill holds beside the pool, in the room left after the margin
            return prefill_reserve(prompt_tokens, token_bytes, act, cache.prefill_chunk or default_chunk(room, act))

        return RunBudget(cache, free, margin, whole, reserve, verifier_batch_bytes, verifier_row_bytes)

    def every_step_budget(self) -> int:
        """A --kv-budget under which no step of this search is refused (`_refused` names the same), when the run's
        is below it; 0 when it holds every step. in_device refuses at once, so it says nothing here, and neither
        does a run whose first step is refused before the prompt is read (`first_step_refusal`)."""
        floor = self._no_refusal_budget()
        if floor is None or floor <= self.budget or self.policy_name == "in_device" or self.first_step_refusal():
            return 0  # a first step that cannot run is refused before the prompt is read: no "may" to say
        return self.run_budget.total_for(floor) if self.verifier_budget else floor

    def _slot(self) -> int:
        """The unit the policy sees its budget in: whole slots of the pool (layer-wise's is not in slots)."""
        return 1 if isinstance(self.policy, LayerwisePolicy) else self.store.block_bytes

    def _no_refusal_budget(self) -> int | None:
        """The policy's budget under which no step is refused (`refusal_floors`), in whole slots; None if unknown."""
        floor = self._no_refusal.get(self.policy_name)
        return None if floor is None else whole_slots(floor, self._slot())

    def _make_store(self, loaded: Generator, prompt_tokens: int, whole: int) -> KVStore:
        """The store, its device pool sized for the policy: layer-wise's budget and buffers (`layerwise_pool`),
        else the budget, at most what the whole search needs (`whole`)."""
        pool = min(self.budget, whole)  # the others never need more than the whole search
        if self.policy_name == "layerwise":
            pool, self.layer_overhead = layerwise_pool(self.budget, prompt_tokens, self.search, loaded.kv_shape,
                                                       self.cfg.block_size, from_free_memory=self.run_budget.read_free)
        return make_store(loaded, self.blocks, self.policy_name, pool, self.cfg.pcie_gbps)

    def _free_bytes(self) -> int | None:
        return self._probe() if self._probe is not None else device_free_bytes(self.device)

    @property
    def home(self) -> Tier:
        return self.policy.home

    @property
    def device_label(self) -> str:
        if self.device.type != "cuda":
            return "cpu (emulated GPU)"
        return f"{self.device} ({torch.cuda.get_device_name(self.device)})"

    # -- lifecycle of candidates ----------------------------------------------------------------
    def prefill(self, prompt: Sequence[int], should_stop: Callable[[], bool] | None = None) -> float:
        """Compute the prompt's KV once, in one run of consecutive slots; every candidate shares it. Seconds.

        The leading full blocks found in the prefix cache are loaded instead of computed; the rest is
        computed on top of them (`cached_tokens`, `computed_tokens`: the last prompt token is always
        computed, by the first step). `should_stop` is asked after the load and before each chunk: true, it
        raises `PrefillStopped`, the prompt's blocks freed (a half computed prompt goes to no prefix cache)."""
        start = time.perf_counter()
        refused = self.first_step_refusal()  # head-wise's own `prefill` refuses after a cached prefix's load instead
        if refused is not None and not isinstance(self.policy, HeadwisePolicy):  # (a whole prompt cached reads none)
            raise refused
        self.store.counters.start_step()
        body, cached = list(prompt[:-1]), None
        self._body = body
        if self.prefix is not None:
            self._pinned, cached = load_prefix(self.prefix, body, self.store.host_empty if self.store.pin else None)
        done = 0 if cached is None else cached.shape[3]
        if should_stop is not None and should_stop():  # a prefix read from disk may have taken a while
            raise PrefillStopped(done)
        compute = self._prefill if should_stop is None else functools.partial(self._prefill, should_stop=should_stop)
        if isinstance(self.policy, HeadwisePolicy):  # chunk by chunk straight into the prompt's host blocks
            plan = self.blocks.allocate(body, self.home)
            try:
                self.policy.prefill(compute, plan.new_blocks, self.prefill_chunk, self._current_budget(), cached)
            except KVBudgetTooSmall as error:
                raise self._refused(error) from error
            except PrefillStopped:
                self.store.free(self.blocks.free(plan.table))
                raise
        else:
            cache = None if cached is None else device_cache(self.store, self._config, cached, PROMPT_ID)
            if cache is None or done < len(body):
                cache = compute(body[done:], chunk=self.prefill_chunk, cache=cache)
            plan = write_prompt(self.policy, self.store, self.blocks, body, cache, self.home, self.budget,
                                self._refused)  # fmt: skip
        self.live[PROMPT_ID] = Live(PROMPT_ID, plan.table, prompt[-1], None)
        self.store.sync()
        self.cached_tokens, self.computed_tokens = done, len(prompt) - done
        return time.perf_counter() - start

    def fork(self, parent: int | None, child: int, generator, adopt: int | None = None) -> tuple[int, ...]:
        """A child of `parent` (None: the prompt). With `adopt` (the child's index) it takes over the
        speculative KV its parent's row made for that child, if any, and starts its step with the
        speculated tokens, which it returns."""
        source = self.live[PROMPT_ID if parent is None else parent]
        ahead = source.ahead.pop(adopt, None) if adopt is not None else None
        if ahead is None:
            self.live[child] = Live(child, self.blocks.fork(source.table), source.pending, generator, source.id)
            return ()
        self.live[child] = Live(child, ahead.table, ahead.pending, generator, source.id, prefix=ahead.tokens)
        return ahead.tokens

    def release(self, candidate: int) -> int:
        """Free a candidate's blocks, and its speculative KV at once; returns the speculated tokens discarded."""
        live = self.live.pop(candidate, None)
        if live is None:
            return 0
        self.store.free(self.blocks.free(live.table))
        return self._drop_ahead(live)

    def drop_speculation(self, candidate: int) -> int:
        """Free a kept candidate's speculative KV, which no child will adopt (the run has ended); returns its
        tokens. Its own blocks stay, for the prefix cache."""
        live = self.live.get(candidate)
        return self._drop_ahead(live) if live is not None else 0

    def _drop_ahead(self, live: Live) -> int:
        discarded = 0
        for ahead in live.ahead.values():
            self.store.free(self.blocks.free(ahead.table))
            discarded += len(ahead.tokens)
        live.ahead.clear()
        return discarded

    def keep(self) -> int:
        """Keep the run's blocks in the prefix cache now, once (`close` keeps them if no one did): for the search
        to call once `chosen` is set and before its last event, so that the copies are in the run's figures.
        Returns the bytes those copies moved from the device to the host (`d2h`; a block kept from the host pool
        crosses no PCIe). Copies still queued (a failed step's) land first: `_keep` reads blocks on the host."""
        if self.kept_d2h_bytes is None:
            before = self.store.counters.total["d2h"]
            self.kept_d2h_bytes = 0  # a keep that fails part way is not tried again by `close`
            self.store.sync()
            self._keep()
            self.kept_d2h_bytes = self.store.counters.total["d2h"] - before
        return self.kept_d2h_bytes

    def close(self) -> None:
        """End of the run (finished, cancelled or failed): keep its blocks in the prefix cache (`keep`), free
        every block and give the pools back."""
        try:
            self.store.sync()
            self.keep()
        finally:
            if self.prefix is not None:
                self.prefix.unpin(self._pinned)
                self.prefix.trim()  # the prompt's blocks, pinned until now, count against the caps again
            self._pinned = []
            for candidate in list(self.live):
                self.release(candidate)
            self.policy = None  # layer-wise holds its own layer buffers
            self.store.close()

    def _keep(self) -> None:
        """The chosen path's full blocks (`chosen`, set by the search), else the prompt's, to the prefix cache."""
        if self.prefix is None or not self.live or self.policy is None:
            return
        prompt_blocks = len(self._pinned)
        chosen = self.chosen if self.chosen in self.live else None
        owner = chosen if chosen is not None else PROMPT_ID if PROMPT_ID in self.live else next(iter(self.live))
        table = self.live[owner].table if chosen is not None else self.live[owner].table[:prompt_blocks]
        if isinstance(self.policy, LayerwisePolicy):
            tokens, rows = self.blocks.tokens_of(table), self.policy.row_kv(owner)
            if rows is None and self.policy.rows:  # a path that finished steps ago has no row now: keep the prompt
                owner, rows = self.policy.rows[0], self.policy.row_kv(self.policy.rows[0])
                tokens = self._body[: prompt_blocks * self.cfg.block_size]
            if rows is not None:
                keep_layers(self.prefix, self.store, tokens, rows, owner)
        else:
            keep_table(self.prefix, self.blocks, self.store, table, owner)

    # -- one step -------------------------------------------------------------------------------
    def plan(self, candidates: Sequence[int]):
        """The step's plan under the budget re-read now; with `auto`, an in_device step that no longer fits
        moves the KV at rest to the host and is planned by lbs (`PolicyChanged` in the step's events)."""
        work = [work_of(self.live[c], self.blocks) for c in candidates]
        try:
            return self.policy.plan(work, self._current_budget())
        except KVBudgetTooSmall as error:
            if self.cfg.policy != "auto" or self.policy_name != "in_device":
                raise self._refused(error) from error
            self._go_on_with_lbs(error)
        try:
            return self.policy.plan(work, self._current_budget())
        except KVBudgetTooSmall as error:
            raise self._refused(error) from error

    def first_step_refusal(self) -> KVBudgetTooSmall | None:
        """Step 1's refusal, known before the prompt is read (engine/kv/first_step.py), in the user's terms; None where
        it fits, and for an automatic in_device, which goes on with lbs where a step does not fit."""
        if isinstance(self.policy, InDevicePolicy) and self.cfg.policy != "in_device":
            return None
        error = first_step_error(self.policy, self.store, self.context, self.search, self.prompt_tokens,
                                 self._current_budget(), self.budget)  # fmt: skip
        return None if error is None else self._refused(error)

    def _refused(self, error: KVBudgetTooSmall) -> KVBudgetTooSmall:
        """A policy's refusal in the user's terms (`RunBudget.refused`), so that one raise of the budget is enough."""
        return self.run_budget.refused(error, self._slot(), self._no_refusal_budget(), self.policy_name == "in_device")

    def _go_on_with_lbs(self, error: KVBudgetTooSmall) -> None:
        tables = [(c, live.table) for c, live in self.live.items()]
        tables += [(c, ahead.table) for c, live in self.live.items() for ahead in live.ahead.values()]
        moved = move_to_host(self.store, self.blocks, tables)
        previous, self.policy_name = self.policy_name, "lbs"
        self.policy = make_policy(self.policy_name, self.context, self.cfg, self.budget, self.layer_overhead)
        self.changes.append((previous, self.policy_name, str(error), moved))

    def _current_budget(self) -> int:
        """The budget, re-read each step from free device memory (`RunBudget.current`)."""
        free = self._free_bytes()
        overhead = self.layer_overhead if isinstance(self.policy, LayerwisePolicy) else None
        return self.run_budget.current(free, self.store, overhead)

    def decode_step(
        self, candidates: Sequence[int], should_stop: Callable[[], bool], continuations: dict[int, int] | None = None,
        *, more_of_step: bool = False,
    ) -> Iterator[GroupDone]:
        """Decode the candidates' step, group by group; `continuations`: how many children's steps each
        candidate's row may speculate once its own step is over (FlashTTS's M_i; default one). `more_of_step`:
        decodes of the step already begun (lookahead's roll-outs), whose bytes, peak and time add to its own."""
        for c in candidates:
            self.live[c].continuations = (continuations or {}).get(c, 1)
        if PROMPT_ID in self.live and all(c != PROMPT_ID for c in candidates):
            self.release(PROMPT_ID)  # the first step's children hold the prompt blocks now
        if not more_of_step:
            self.store.counters.start_step()
            self.store.start_peak()
            self.timing = StepTiming()
        plan = self.plan(candidates) if candidates else None  # none: every child's step was speculated whole
        steps = iter(()) if plan is None else self.policy.run_step(plan, self.live, self.timing, should_stop)
        while True:
            started = time.perf_counter()  # the policy's own time, not the caller's between groups (verifying)
            try:
                done = next(steps, None)
                if done is None:
                    self.store.sync()
            finally:
                self.timing.decode_seconds += time.perf_counter() - started
            if done is None:
                return
            self.timing.forwards += max((len(r.fed) for r in done.results.values()), default=0)
            yield done

    # -- reporting ------------------------------------------------------------------------------
    def step_events(self, step: int, verifier: VerifierMemory | None = None,
                    verifier_placement: Callable[[int], tuple[int, int]] = lambda cid: (0, 0)) -> Iterator[ev.Event]:
        """The step's retries, memory snapshot (the generator's KV and, apart, the verifier's: in all and per
        candidate, `verifier_placement(cid)` its step's device and host bytes) and traffic."""
        v = verifier or VerifierMemory()
        for change in self.changes:
            yield ev.PolicyChanged(step, *change)
        self.changes.clear()
        for candidates, reason in self.timing.retries:
            yield ev.GroupRetried(step, candidates, reason)
        rows = {cid: live for cid, live in self.live.items() if cid != PROMPT_ID}
        memory = candidates_memory(rows, self.policy, self.timing, self.store.counters, verifier_placement)
        device_bytes, host_bytes = self.policy.tier_bytes()
        yield ev.MemorySnapshot(
            step, self.emulated, self.budget, device_bytes, host_bytes, self.timing.peak_device_bytes, memory,
            v.budget_bytes, v.device_bytes, v.host_bytes, v.peak_device_bytes, v.h2d_bytes, v.d2h_bytes,
        )
        yield transfer_stats(step, self.emulated, self.store.counters, self.timing, self.store.bandwidth)


def _element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()
