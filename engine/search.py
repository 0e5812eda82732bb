"""Step-wise beam search: `run(question, ...)` yields events; every `yield` is a cancellation point.

Each step, every unfinished kept beam expands `width` children (the prompt expands
`beams * width`); each child decodes one step; the verifier scores the step; the best
`beams` paths by aggregated score survive. Finished beams stay in the kept set without
expanding. The answer is the best finished path, else the best path.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from engine import events as ev
from engine.config import CacheConfig, SearchConfig
from engine.errors import BeamwiseError, InvalidPrompt
from engine.kv.cache import KVCache
from engine.loaded import Generator
from engine.replay import Replay
from engine.rows import RowResult, StepRules
from engine.runner import decode_step, prefill
from engine.sampling import candidate_generator
from engine.verifiers import StepToScore, aggregate, make_verifier

SYSTEM_PROMPT = (
    "Solve the problem step by step. Write each step as a short paragraph and separate steps "
    "with a blank line. Finish with a line 'The answer is: ...'."
)


@dataclass
class Candidate:
    id: int
    parent: int | None
    step: int
    text: str = ""
    generated: list[int] = field(default_factory=list)  # every sampled token from the first step on
    step_tokens: int = 0
    scores: list[float] = field(default_factory=list)
    aggregate: float = 0.0
    finished: bool = False
    group: int = 0
    logprobs: tuple[float, ...] = ()


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
) -> Iterator[ev.Event]:
    """Answer `question` by step-wise beam search; never raises for user errors (yields RunFailed).

    `observe_logits(candidate, logits, token)` sees every decode position (tests compare policies with it);
    `prompt_ids` replaces the chat prompt built from `question` (benchmarks use exact prompt lengths);
    `replay` forces another run's tokens and kept beams (teacher forcing, to compare policies' logits).
    """
    try:
        yield from _Search(question, loaded, search, cache, should_stop, observe_logits, prompt_ids, replay).events()
    except BeamwiseError as error:
        yield ev.RunFailed(type(error).__name__, error.user_message())
    except (RuntimeError, ValueError) as error:  # e.g. out of memory: report, keep the caller alive
        yield ev.RunFailed(type(error).__name__, f"{error}. Try fewer beams, shorter steps or a smaller model.")


class _Search:
    def __init__(
        self, question, loaded, search: SearchConfig, cache: CacheConfig, should_stop, observe, prompt_ids, replay
    ):
        self.replay = replay
        self.question, self.loaded, self.cfg, self.cache_cfg = question, loaded, search, cache
        self.should_stop = should_stop
        self.prompt_ids = list(prompt_ids) if prompt_ids is not None else None
        self.candidates: dict[int, Candidate] = {}
        self.next_id = 1
        self.verifier = make_verifier(search.verifier, loaded, search.verifier_model)
        self.rules = StepRules(
            max_tokens=search.step_tokens,
            delimiter=search.step_delimiter,
            eos_ids=frozenset(loaded.eos_token_ids),
            temperature=search.temperature,
            top_p=search.top_p,
            decode=loaded.decode,
            context_length=loaded.context_length,
            observe=observe,
            forced=replay.tokens if replay is not None else None,
        )

    def _prompt(self) -> list[int]:
        if self.prompt_ids is None and not self.question.strip():
            raise InvalidPrompt("The question is empty.", hint="Type a question.")
        prompt = self.prompt_ids or self.loaded.encode_chat(self.question.strip(), system=SYSTEM_PROMPT)
        room = self.loaded.context_length - self.cfg.step_tokens
        if len(prompt) > room:
            raise InvalidPrompt(
                f"The question is {len(prompt)} tokens; the model's context holds {self.loaded.context_length} "
                f"and a step needs {self.cfg.step_tokens} more.",
                hint="Shorten the question or use a model with a longer context.",
            )
        return prompt

    def events(self) -> Iterator[ev.Event]:
        started = time.perf_counter()
        prompt = self._prompt()
        kv = KVCache(
            self.loaded, self.cfg, self.cache_cfg, len(prompt), decode=self._decode_rows, prefill=self._prefill
        )
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
        )
        seconds = kv.prefill(prompt)
        yield ev.PrefillDone(len(prompt), seconds)
        kept: list[int] = []
        step = 0
        for step in range(1, self.cfg.max_steps + 1):
            if self.should_stop():
                yield ev.RunCancelled(step - 1)
                return
            parents = [c for c in kept if not self.candidates[c].finished]
            children = self._expand(kv, parents, step)
            yield ev.StepStarted(step, tuple(parents))
            cancelled = yield from self._decode(kv, children, step)
            if cancelled:
                yield ev.RunCancelled(step - 1)
                return
            yield from self._score(children, step)
            yield from kv.step_events(step)
            pool = [c for c in kept if self.candidates[c].finished] + children  # finished beams compete on
            kept = self._select(kv, pool, step)
            cost = self.verifier.settle([self._key(c) for c in kept])
            yield ev.StepSelected(
                step, tuple(kept), tuple(sorted(set(pool) - set(kept))), cost.tokens, cost.tokens_full
            )
            if all(self.candidates[c].finished for c in kept):
                break
        yield self._finish(kept, step, started)
        kv.close()

    def _decode_rows(self, cache, mask, rows, should_stop, before_forward=None, **forward):
        """The decode callable the KV layer runs: the model and this run's step rules, bound."""
        model = self.loaded.model
        call = functools.partial(model, **forward) if forward else model
        return decode_step(call, cache, mask, rows, self.rules, should_stop, before_forward)

    def _prefill(self, token_ids):
        return prefill(self.loaded.model, token_ids, self.loaded.device)[0]

    def _expand(self, kv: KVCache, parents: list[int], step: int) -> list[int]:
        sources = parents or [None]
        per_parent = self.cfg.width if parents else self.cfg.candidates_per_step
        children = []
        for parent in sources:
            for _ in range(per_parent):
                child = Candidate(self.next_id, parent, step)
                if parent is not None:
                    child.generated = list(self.candidates[parent].generated)
                    child.scores = list(self.candidates[parent].scores)
                self.candidates[child.id] = child
                kv.fork(parent, child.id, candidate_generator(self.cfg.seed, child.id))
                children.append(child.id)
                self.next_id += 1
        for parent in parents:
            kv.release(parent)
        return children

    def _decode(self, kv: KVCache, children: list[int], step: int):
        for done in kv.decode_step(children, self.should_stop):
            yield ev.GroupScheduled(step, done.index, done.group.candidates, done.group.prefetched)
            for cid, result in done.results.items():
                c = self.candidates[cid]
                self._take(c, result, done.index)
                yield ev.CandidateText(step, cid, c.parent, c.text, c.step_tokens, c.finished, c.group)
            if self.should_stop():
                return True
        return False

    def _take(self, c: Candidate, result: RowResult, group: int) -> None:
        c.generated += result.sampled
        c.step_tokens = len(result.sampled)
        c.text = self.loaded.decode(result.sampled)
        c.finished = result.finished
        c.group = group
        c.logprobs = tuple(result.logprobs)

    def _score(self, children: list[int], step: int) -> Iterator[ev.Event]:
        items = [
            StepToScore(
                self.question,
                tuple(self.candidates[p].text for p in self._path(cid)[:-1]),
                self.candidates[cid].text,
                self.candidates[cid].logprobs,
            )
            for cid in children
        ]
        for cid, score in zip(children, self.verifier.score(items), strict=True):
            c = self.candidates[cid]
            c.scores.append(float(score))
            c.aggregate = aggregate(c.scores, self.cfg.aggregation)
            yield ev.CandidateScored(
                step, cid, c.parent, c.text, c.step_tokens, c.scores[-1], c.aggregate, c.finished, c.group
            )

    def _select(self, kv: KVCache, pool: list[int], step: int) -> list[int]:
        """The best `beams` of the pool by aggregated score (ties: the older id); the rest are freed."""
        ranked = sorted(pool, key=lambda c: (-self.candidates[c].aggregate, c))
        if self.replay is not None and step in self.replay.kept:  # teacher forcing: the reference's beams
            forced = list(self.replay.kept[step])
            ranked = forced + [c for c in ranked if c not in forced]
        for c in ranked[self.cfg.beams :]:
            kv.release(c)
        return ranked[: self.cfg.beams]

    def _key(self, cid: int) -> tuple[str, ...]:
        """The verifier's name for a path: the question and each step's text."""
        return (self.question, *(self.candidates[p].text for p in self._path(cid)))

    def _path(self, cid: int | None) -> list[int]:
        path = []
        while cid is not None:
            path.append(cid)
            cid = self.candidates[cid].parent
        return path[::-1]

    def _finish(self, kept: list[int], steps: int, started: float) -> ev.RunFinished:
        finished = [c for c in kept if self.candidates[c].finished]
        best = max(finished or kept, key=lambda c: (self.candidates[c].aggregate, -c))
        winner = self.candidates[best]
        seconds = time.perf_counter() - started
        total = sum(c.step_tokens for c in self.candidates.values())
        return ev.RunFinished(
            self.loaded.decode(winner.generated).strip(),
            tuple(self._path(best)),
            winner.aggregate,
            steps,
            total,
            seconds,
            total / seconds if seconds > 0 else 0.0,
            len(winner.generated) / seconds if seconds > 0 else 0.0,
        )
