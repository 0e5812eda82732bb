"""Step-wise search: `run(question, ...)` yields events; every `yield` is a cancellation point.

One step loop serves every method (engine/methods): each step, every unfinished kept path expands
the method's number of children (the prompt expands `method.roots()`); each child decodes one step
(beam with lookahead then rolls it out K greedy steps); the verifier scores the step, unless RKSC's
verify-skip finds the generator decisive; the method keeps its survivors. Finished paths stay kept
without expanding; a path that fills the model's context is finished there too (`Candidate.context_full`), so
no token is computed past the context. The answer is picked from the finished kept paths (else all kept) by
`select`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator, Sequence

from engine import events as ev
from engine.blank_text import is_blank
from engine.candidate import Candidate, SearchClock, completion, goodput, path_room
from engine.chat import Turn
from engine.config import CacheConfig, SearchConfig
from engine.errors import InvalidPrompt, PrefillStopped, failure
from engine.kv.cache import KVCache
from engine.kv.prefix_cache import PrefixCache, shared_prefix_cache
from engine.loaded import Generator
from engine.methods import method_for
from engine.methods.lookahead import RolledStep, roll_out
from engine.methods.selection import choose, final_pool
from engine.numerics import numerics
from engine.replay import Replay
from engine.rng import child_stream, root_stream
from engine.rows import RowResult, StepRules
from engine.runner import decode_step, prefill
from engine.scoring import path_to, score_step
from engine.speculation import Tally, adopted_step, continuations, speculation_cap
from engine.step_text import step_text
from engine.verifiers import PRMParts, StepToScore, VerifierCost, make_verifier
from engine.verifiers.entropy_exit import exit_fields, exit_rule

SYSTEM_PROMPT = (
    "Solve the problem step by step. Write each step as a short paragraph and separate steps "
    "with a blank line. Finish with a line 'The answer is: ...'."
)


def prompt_ids(encode_chat: Callable[..., list[int]], question: str, history: Sequence[Turn] = ()) -> list[int]:
    """The prompt a search sends for `question` after a conversation's `history`: the system prompt, the chat
    template over every earlier turn and the question. `encode_chat` is a loaded model's, or `chat_ids` bound to
    a tokenizer alone; the preflight and the memory plan count this, so their figure is PrefillDone's."""
    return encode_chat(question.strip(), SYSTEM_PROMPT, history)


def run(
    question: str,
    loaded: Generator,
    search: SearchConfig,
    cache: CacheConfig,
    *,
    should_stop: Callable[[], bool] = lambda: False,
    observe_logits: Callable | None = None,
    prompt_ids: Sequence[int] | None = None,
    replay: Replay | None = None,
    history: Sequence[Turn] = (),
    prm: PRMParts | None = None,
) -> Iterator[ev.Event]:
    """Answer `question` by step-wise beam search; never raises for user errors (yields RunFailed).

    The last event is the run's end: RunFinished, RunFailed or RunCancelled. RunStarted comes first once the
    run has started (its KV cache made, the prompt checked); a failure before that (an empty or too long
    question, a verifier that does not load, a KV cache that cannot be set up) is its RunFailed alone, not
    recorded: there is no run to record (app/run_output.py `record`). engine/remote_search.py keeps the same order.
    RunFinished's seconds, and the completion times its goodput is read from, are wall time less what the caller
    spent `outside_the_search` (engine/candidate.py: a recorder waiting for a locked session database).

    `observe_logits(candidate, logits, token)` sees every decode position (tests compare policies with it);
    `prompt_ids` replaces the chat prompt built from `question` (benchmarks use exact prompt lengths);
    `replay` forces another run's tokens and kept beams (teacher forcing, to compare policies' logits);
    `history` holds a conversation's earlier turns, (question, chosen path's text), oldest first: the prompt
    is the whole conversation (engine/chat.py) and RunStarted carries it;
    `prm` holds the weights of `search.verifier_model` already loaded (engine.verifiers.load_verifier_prm), as
    `loaded` holds the generator's: a caller running many searches (`beamwise eval`) loads them once, and each run
    still makes its own verifier around them.
    """
    try:
        turns = tuple((str(q), str(a)) for q, a in history)
        searching = _Search(question, loaded, search, cache, should_stop, observe_logits, prompt_ids, replay, turns,
                            prm)
        yield from searching.events()
    except Exception as error:  # the user's error, out of memory or a fault in Beamwise: report, keep the caller alive
        yield failure(error)


def check_prompt_fits(prompt_tokens: int, context_length: int, step_tokens: int, earlier_turns: int = 0) -> None:
    """`InvalidPrompt` when a prompt of `prompt_tokens` (the question, or a conversation of `earlier_turns` turns
    before it) leaves no room in the model's context for a step; `beamwise plan` asks the same."""
    if prompt_tokens <= context_length - step_tokens:
        return
    room = context_length - prompt_tokens  # a shorter step still fits where the prompt leaves room
    shorter = f" or lower --step-tokens to {room:,} or less" if room > 0 else ""
    if earlier_turns:
        raise InvalidPrompt(
            f"The conversation is {prompt_tokens:,} tokens over {earlier_turns + 1} turns (the system prompt and chat "
            f"template included); the model's context holds {context_length:,} and a step needs {step_tokens:,} more.",
            hint=f"Start a new conversation (Ctrl+N in the window, or `beamwise run` without --session){shorter}.",
        )
    raise InvalidPrompt(
        f"The prompt is {prompt_tokens:,} tokens (the question, the system prompt and the chat template); the model's "
        f"context holds {context_length:,} and a step needs {step_tokens:,} more.",
        hint=f"Shorten the question{shorter}, or use a model with a longer context.",
    )


class _Search:
    def __init__(
        self, question, loaded, search: SearchConfig, cache: CacheConfig, should_stop, observe, prompt_ids, replay,
        history: tuple[Turn, ...] = (), prm: PRMParts | None = None,
    ):
        self.replay, self.history, self.prm = replay, history, prm
        self.question, self.loaded, self.cfg, self.cache_cfg = question, loaded, search, cache
        self.should_stop = should_stop
        self.prompt_ids = list(prompt_ids) if prompt_ids is not None else None
        self.candidates: dict[int, Candidate] = {}
        self.next_id = 1
        self.prompt_tokens = 0  # the prompt's length, set when it is built: a path is it and its steps
        self.clock = SearchClock()  # the run's own seconds: candidates' completion times count on it
        self.method = method_for(search)
        self.extra_tokens = 0  # generated by lookahead roll-outs (not tree nodes)
        self.speculation = Tally()
        self.speculating = False  # set once the KV cache says its policy keeps speculated KV
        self.gate: dict = {}  # the step's verify-skip facts, for its StepSelected
        self.rules = StepRules(
            max_tokens=search.step_tokens,
            delimiter=search.step_delimiter,
            eos_ids=frozenset(loaded.eos_token_ids),
            temperature=0.0 if self.method.greedy else search.temperature,
            top_p=search.top_p,
            decode=loaded.decode,
            context_length=loaded.context_length,
            observe=observe,
            forced=replay.tokens if replay is not None else None,
        )

    def _prompt(self) -> list[int]:
        if self.prompt_ids is None and is_blank(self.question):
            raise InvalidPrompt("The question is empty.", hint="Type a question.")
        prompt = self.prompt_ids or prompt_ids(self.loaded.encode_chat, self.question, self.history)
        check_prompt_fits(len(prompt), self.loaded.context_length, self.cfg.step_tokens, len(self.history))
        self.prompt_tokens = len(prompt)
        return prompt

    def events(self) -> Iterator[ev.Event]:
        """The run's events. The verifier and the KV cache are closed as soon as the run ends: finished, failed
        (from the moment each is made) or closed by its consumer at any `yield`, RunStarted's included."""
        with contextlib.ExitStack() as made:  # closes in reverse: the KV cache, then the verifier
            cfg = self.cfg
            self.verifier = make_verifier(cfg.verifier, self.loaded, cfg.verifier_model, cfg.verifier_device,
                                          exit_rule(cfg), self.prm)
            made.callback(self.verifier.close)
            self.clock.start()  # the run's time counts from here: a verifier's load is not in it
            prompt = self._prompt()
            kv = self._kv_cache(prompt)
            made.callback(kv.close)  # the KV pools go back at once, also when the run fails or is cancelled
            if kv.prefix is not None:  # a RAM cap below the blocks the prefill pins (load_prefix): refused unstarted
                kv.prefix.require((len(prompt) - 1) // kv.prefix.block_size)
            self.verifier.use_budget(kv.verifier_budget, self.cache_cfg.block_size)
            # teacher forcing names each candidate's tokens, and roll-outs fork children of their own: no speculation
            self.speculating = kv.speculative and self.replay is None and self.cfg.lookahead == 0
            yield ev.RunStarted(
                self.question,
                self.loaded.name,
                self.verifier.name,
                kv.device_label,
                kv.emulated,
                kv.policy_name,
                kv.budget,
                self.cfg.to_dict(),
                self.cache_cfg.to_dict(),
                kv.verifier_budget,
                self.history,
                numerics(self.loaded.device, self.loaded.dtype),
                kv.every_step_budget(),
            )
            yield from self._steps(kv, prompt)

    def _kv_cache(self, prompt: list[int]) -> KVCache:
        """The run's KV cache, sized with the verifier's share; its whole-search bound counts lookahead's roll-outs
        (engine.kv.sizing.whole_search_bytes)."""
        sized = dataclasses.replace(self.cfg, max_steps=self.cfg.max_steps + self.cfg.lookahead, lookahead=0)
        rows = sized.candidates_per_step
        need = self.verifier.batch_bytes(self.question, rows, sized.step_tokens, sized.max_steps)
        row = self.verifier.row_bytes(self.question, sized.step_tokens, sized.max_steps)
        return KVCache(
            self.loaded, self.cfg, self.cache_cfg, len(prompt), decode=self._decode_rows, prefill=self._prefill,
            verifier_batch_bytes=need, verifier_row_bytes=row, prefix=self._prefix_cache(),
        )

    def _prefix_cache(self) -> PrefixCache | None:
        """The process's prefix cache for this model, when the settings keep one (never for plan-only runs)."""
        c = self.cache_cfg
        if not c.prefix_cache or self.loaded.plan_only:
            return None
        return shared_prefix_cache(self.loaded, c.block_size, c.prefix_cache_ram_bytes, c.prefix_cache_disk_bytes)

    def _steps(self, kv: KVCache, prompt: list[int]) -> Iterator[ev.Event]:
        try:
            seconds = kv.prefill(prompt, self.should_stop)
        except PrefillStopped:  # a Stop while the model reads the question ends the run as one in step 1 does
            yield ev.RunCancelled(0)
            return
        problem = kv.prefix.disk_problem if kv.prefix is not None else None
        moved = kv.store.counters.total  # the question's own traffic: a run cancelled in step 1 has no other record
        yield ev.PrefillDone(len(prompt), seconds, kv.cached_tokens, kv.computed_tokens, problem, moved["h2d"],
                             moved["d2h"])
        kept: list[int] = []
        step = 0
        for step in range(1, self.cfg.max_steps + 1):
            if self.should_stop():
                yield ev.RunCancelled(step - 1)
                return
            parents = [c for c in kept if not self.candidates[c].finished]
            children = self._expand(kv, parents, step)
            yield ev.StepStarted(step, tuple(parents))
            self._limit_speculation(step)
            cancelled = yield from self._decode(kv, children, step, self._continuations(parents, children))
            if cancelled:
                yield ev.RunCancelled(step - 1)
                return
            extra = self._look_ahead(kv, children)
            yield from self._score(children, step, extra)
            yield from kv.step_events(step, self.verifier.memory(), lambda c: self.verifier.placement(self._key(c)))
            pool = [c for c in kept if self.candidates[c].finished] + children  # finished beams compete on
            kept, discarded = self._select(kv, pool, step)
            cost = self.verifier.settle([self._key(c) for c in kept])
            self._count_look_ahead(cost)
            yield ev.StepSelected(
                step, tuple(kept), tuple(sorted(set(pool) - set(kept))), cost.tokens, cost.tokens_full,
                **self.gate, **exit_fields(cost), speculative_discarded=discarded, verifier_forwards=cost.forwards,
                verifier_rows=cost.rows, lookahead_verified=cost.ahead_verified, lookahead_used=cost.ahead_used,
                lookahead_discarded=cost.ahead_discarded,
            )
            if all(self.candidates[c].finished for c in kept):
                break
        yield self._finish(kept, step, kv)

    def _decode_rows(self, cache, mask, rows, should_stop, before_forward=None, lend=None, **forward):
        """The decode callable the KV layer runs: the model and this run's step rules, bound."""
        model = self.loaded.model
        call = functools.partial(model, **forward) if forward else model
        return decode_step(call, cache, mask, rows, self.rules, should_stop, before_forward, lend=lend)

    def _limit_speculation(self, step: int) -> None:
        """This step's speculation cap: R x the mean step length so far (FlashTTS's truncation rule)."""
        if not self.speculating:
            return
        lengths = [c.step_tokens for c in self.candidates.values() if c.step < step]
        cap = speculation_cap(self.cache_cfg.speculative_ratio, lengths, self.cfg.step_tokens)
        self.rules = dataclasses.replace(self.rules, speculate=cap)

    @contextlib.contextmanager
    def _greedy(self) -> Iterator[None]:
        """Decode at temperature 0 inside the block (lookahead roll-outs), without speculation."""
        sampled = self.rules
        self.rules = dataclasses.replace(sampled, temperature=0.0, speculate=0)
        try:
            yield
        finally:
            self.rules = sampled

    def _continuations(self, parents: list[int], children: list[int]) -> dict[int, int]:
        """How many children's steps each candidate's row may speculate: M_i = B - j + 1 when its parent
        ranks j-th by path score (the prompt's children: j = 1), at most the children it would have and
        the `speculative_continuations` setting."""
        if not self.speculating:
            return {}
        ranked = sorted(parents, key=lambda p: -self.candidates[p].aggregate)  # stable: ties keep kept order
        rank = {p: j for j, p in enumerate(ranked, start=1)}
        per_child = self.method.children()
        cap = self.cache_cfg.speculative_continuations
        return {
            c: continuations(rank.get(self.candidates[c].parent, 1), self.cfg.beams, per_child, cap) for c in children
        }

    def _new_id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def _prefill(self, token_ids, **options):
        return prefill(self.loaded.model, token_ids, self.loaded.device, **options)[0]

    def _expand(self, kv: KVCache, parents: list[int], step: int) -> list[int]:
        """Each parent's children (the prompt's in the first step); a child's stream derives from its
        parent's and its index, and child k takes over its parent's k-th speculative run, if any."""
        sources = parents or [None]
        per_parent = self.method.children() if parents else self.method.roots()
        children = []
        for parent in sources:
            before = self.candidates[parent] if parent is not None else None
            stream = before.stream if before is not None else root_stream(self.cfg.seed)
            for index in range(per_parent):
                child = Candidate(self._new_id(), parent, step, lane=self.method.lane(index))
                if before is not None:
                    child.generated, child.scores, child.lane = list(before.generated), list(before.scores), before.lane
                child.stream = child_stream(stream, index)
                self.candidates[child.id] = child
                adopted = kv.fork(parent, child.id, child.stream, adopt=index if self.speculating else None)
                if adopted:
                    child.speculated, child.prefix = len(adopted), before.ahead[index]  # the parent's run
                    self.speculation.used += len(adopted)
                    self.speculation.runs_used += 1
                children.append(child.id)
        for parent in parents:
            self.speculation.discarded += kv.release(parent)
        return children

    def _decode(self, kv: KVCache, children: list[int], step: int, runs: dict[int, int]):
        whole = [c for c in children if self._speculated_whole(c)]
        for cid in whole:  # their step ended inside their parent's speculation: nothing to decode
            yield self._text(step, self._take(self.candidates[cid], None, None))
        for done in kv.decode_step([c for c in children if c not in whole], self.should_stop, runs):
            yield ev.GroupScheduled(step, done.index, done.group.candidates, done.group.prefetched)
            for cid, result in done.results.items():
                yield self._text(step, self._take(self.candidates[cid], result, done.index))
            if self.should_stop():
                return True
        self.speculation.made += kv.timing.speculative_tokens
        self.speculation.runs += kv.timing.speculative_runs
        self.speculation.lent += kv.timing.speculative_lent_runs
        return False

    def _speculated_whole(self, cid: int) -> bool:
        prefix = self.candidates[cid].prefix
        return prefix is not None and prefix.done

    def _text(self, step: int, c: Candidate) -> ev.CandidateText:
        return ev.CandidateText(step, c.id, c.parent, c.text, c.step_tokens, c.finished, c.group, c.speculated,
                                c.context_full)

    def _take(self, c: Candidate, result: RowResult | None, group: int | None) -> Candidate:
        """Record the candidate's step: `result` after the tokens its parent speculated for it, if any."""
        if c.prefix is not None:
            result, c.prefix = adopted_step(c.prefix, result), None
        before = list(c.generated)
        c.generated += result.sampled
        c.step_tokens = len(result.sampled)
        c.context_full = not result.finished and self._fills_context(c)
        c.finished = result.finished or c.context_full
        c.text = step_text(self.loaded.decode, before, result.sampled, c.finished)
        if c.finished:  # its path ends here (EOS, or the context's end): FlashTTS's completion time
            c.completed_at = self.clock.seconds()
        c.group = group
        c.logprobs = tuple(result.logprobs)
        c.top1 = tuple(result.top1)
        c.ahead = result.aheads  # what its own row speculated for its children (run k: child k)
        return c

    def _fills_context(self, c: Candidate) -> bool:
        """Whether the candidate's path (the prompt and its steps) holds the model's whole context: the runner
        stopped its step there (engine/step_buffers.py `fills_context`), and no later step would have room."""
        return len(c.generated) >= path_room(self.prompt_tokens, self.loaded.context_length)

    def _look_ahead(self, kv: KVCache, children: list[int]) -> dict[int, list[RolledStep]]:
        """Beam with lookahead: each unfinished child's greedy roll-out texts, for scoring (else none)."""
        if self.cfg.lookahead == 0:
            return {}
        todo = {c: self.candidates[c].generated for c in children if not self.candidates[c].finished}
        room = path_room(self.prompt_tokens, self.loaded.context_length)  # a roll-out ends there, as a path does
        rolled = roll_out(kv, todo, self.cfg.lookahead, self._new_id, self.loaded.decode, self._greedy,
                          self.should_stop, room=room)
        self.extra_tokens += rolled.tokens
        return rolled.steps

    def _item(self, cid: int, extra: Sequence[RolledStep], step: int) -> StepToScore:
        """What the verifier reads: the path, the new step and (lookahead) the roll-out, scored at its end;
        and the first child's next step when it can be verified ahead."""
        c = self.candidates[cid]
        steps = (*(self.candidates[p].text for p in self._path(cid)[:-1]), c.text, *(r.text for r in extra))
        logprobs = extra[-1].logprobs if extra else c.logprobs
        return StepToScore(self.question, steps[:-1], steps[-1], logprobs, self._ahead_text(c, step))

    def _ahead_text(self, c: Candidate, step: int) -> str | None:
        """LookAhead verification: the text the first child's step will have when the candidate's row
        speculated it whole (the child adopts it as it is: `_speculated_whole`), with a step still to come,
        the switch on and a verifier that can. Speculation is off for the lookahead method's roll-outs."""
        run = c.ahead[0] if c.ahead else None
        if run is None or not run.done or step >= self.cfg.max_steps or not self.cache_cfg.lookahead_verify:
            return None
        if not (self.speculating and self.verifier.looks_ahead):
            return None
        return step_text(self.loaded.decode, c.generated, run.sampled, run.finished)  # as `_take` will write it

    def _count_look_ahead(self, cost: VerifierCost) -> None:
        self.speculation.verified_ahead += cost.ahead_verified
        self.speculation.verified_used += cost.ahead_used
        self.speculation.verified_discarded += cost.ahead_discarded

    def _score(self, children: list[int], step: int, extra: dict[int, list[RolledStep]]) -> Iterator[ev.Event]:
        items = lambda: [self._item(cid, extra.get(cid, ()), step) for cid in children]  # noqa: E731
        verify = lambda: self.verifier.score(items())  # noqa: E731
        self.gate = {}
        yield from score_step(self.candidates, children, step, self.cfg, verify, self.gate)

    def _select(self, kv: KVCache, pool: list[int], step: int) -> tuple[list[int], int]:
        """The method's survivors of the pool, best first (ties: the older id); the rest are freed at once,
        with their speculation (the second value: its tokens)."""
        keep = [c.id for c in self.method.keep([self.candidates[c] for c in pool])]
        order = keep + sorted(set(pool) - set(keep), key=lambda c: (-self.candidates[c].aggregate, c))
        if self.replay is not None and step in self.replay.kept:  # teacher forcing: the reference's beams
            forced = list(self.replay.kept[step])
            order = forced + [c for c in order if c not in forced]
        discarded = sum(kv.release(c) for c in order[len(keep) :])
        self.speculation.discarded += discarded
        return order[: len(keep)], discarded

    def _key(self, cid: int) -> tuple[str, ...]:
        """The verifier's name for a path: the question and each step's text."""
        return (self.question, *(self.candidates[p].text for p in self._path(cid)))

    def _path(self, cid: int | None) -> list[int]:
        return path_to(self.candidates, cid)

    def _finish(self, kept: list[int], steps: int, kv: KVCache) -> ev.RunFinished:
        pool = final_pool([self.candidates[c] for c in kept])
        winner = choose(pool, self.cfg.select, lambda c: self.loaded.decode(c.generated))
        best = kv.chosen = winner.id  # its path's blocks go to the prefix cache
        self.speculation.discarded += sum(kv.drop_speculation(c) for c in kept)  # made for a step never run
        seconds = self.clock.seconds()
        kept_bytes = kv.keep()  # the prefix cache's copies of the run's blocks, in its figures (after the clock)
        total = sum(c.step_tokens for c in self.candidates.values()) + self.extra_tokens
        completions = tuple(completion(self.candidates[c], len(self.candidates[c].generated), seconds) for c in kept)
        return ev.RunFinished(
            self.loaded.decode(winner.generated).strip(),
            tuple(self._path(best)),
            winner.aggregate,
            steps,
            total,
            seconds,
            total / seconds if seconds > 0 else 0.0,
            goodput([(tokens, at) for _, tokens, at in completions]),
            self.speculation.made,
            self.speculation.used,
            self.speculation.discarded,
            self.speculation.runs,
            self.speculation.runs_used,
            self.speculation.verified_ahead,
            self.speculation.verified_used,
            self.speculation.verified_discarded,
            answer_tokens_per_second=len(winner.generated) / seconds if seconds > 0 else 0.0,
            completions=completions,
            speculative_lent_runs=self.speculation.lent,
            context_full=sum(self.candidates[c].context_full for c in kept),
            context_length=self.loaded.context_length,
            prefix_kept_d2h_bytes=kept_bytes,
        )
