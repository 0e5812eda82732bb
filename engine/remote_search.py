"""The step-wise search against a generator server: the same events as engine/search.py, no local KV.

The method policies (engine/methods), the verify-skip gate and the final selection are the local
search's own; what differs is the decode: each child is one /v1/completions request (n=1) whose prompt
is the prompt text plus the path so far, stopped at the step delimiter. The server's prefix cache does
the KV reuse, so the memory and traffic events carry zeros with `emulated=False`.

Verifiers: logprob (the server's token log-probabilities), self-judge (the served model asked about each
step, engine/verifiers/remote_judge.py) and a PRM loaded here beside the server's generator. Every method,
verify-skip and lookahead (each roll-out step one greedy request). Not yet: a PRM served by the server.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

from engine import events as ev
from engine.backends.openai import OpenAICompletions, ServerConfig
from engine.backends.replies import Completion
from engine.backends.sockets import RequestCancelled
from engine.blank_text import is_blank
from engine.candidate import Candidate, SearchClock, completion, goodput
from engine.chat import Turn
from engine.config import SearchConfig
from engine.errors import InvalidPrompt, failure
from engine.methods import method_for
from engine.methods.selection import choose, final_pool
from engine.scoring import path_to, score_step
from engine.search import SYSTEM_PROMPT
from engine.verifiers.base import StepToScore, Verifier
from engine.verifiers.entropy_exit import LayersUnavailable, exit_fields, exit_rule, with_exit
from engine.verifiers.remote_judge import RemoteSelfJudge
from engine.verifiers.served_prm import ServedPRM
from engine.verifiers.simple import LogProbVerifier

REMOTE_DEVICE = "remote: KV is managed by the server"
ANSWER_MARK = "the answer is"


def prompt_text(question: str, history: Sequence[Turn] = ()) -> str:
    """The prompt the server continues. /v1/completions applies no chat template, so this is plain text;
    a conversation's earlier turns come first, each as its problem and its chosen solution, so the text
    of turn k's prompt begins turn k+1's (the server's own prefix cache can keep it)."""
    earlier = "".join(f"Problem: {q.strip()}\n\nSolution:\n{a.strip()}\n\n" for q, a in history)
    return f"{SYSTEM_PROMPT}\n\n{earlier}Problem: {question.strip()}\n\nSolution:\n"


def run(
    question: str,
    server: ServerConfig,
    search: SearchConfig,
    *,
    should_stop: Callable[[], bool] = lambda: False,
    backend: OpenAICompletions | None = None,
    history: Sequence[Turn] = (),
) -> Iterator[ev.Event]:
    """Answer `question` on the server; never raises for user errors (yields RunFailed), like search.run, and
    in its order: a failure or a Stop before RunStarted (the server checked) is its end event alone.

    A Stop ends a request in flight too (`should_stop` is asked while the client waits for the server);
    `history` holds a conversation's earlier turns, (question, chosen path's text), as in search.run.
    """
    try:
        backend = backend or OpenAICompletions(server, should_stop=should_stop)
        turns = tuple((str(q), str(a)) for q, a in history)
        searching = _RemoteSearch(question, server, backend, search, should_stop, turns)
        yield from searching.events()
    except Exception as error:  # the user's error or a fault in Beamwise: report it, keep the caller alive
        yield failure(error)


def make_verifier(search: SearchConfig, backend: OpenAICompletions) -> Verifier:
    """logprob reads the server's log-probabilities; self-judge asks the served model; prm asks a PRM server
    (--verifier-endpoint) or loads the PRM here beside the server's generator (it reads the text, so its
    tokenizer need not be the generator's). The layer-entropy exit runs only for a PRM loaded here."""
    rule = exit_rule(search)
    if rule is not None and (search.verifier == "self-judge" or backend.cfg.prm_endpoint):
        raise LayersUnavailable("a verifier on a server returns scores, not its layers, so the entropy exit "
                                "cannot run there; only a PRM loaded here can exit early.",
                                hint="Run without --entropy-exit, or score the steps with a Math-Shepherd or RLHFlow "
                                     "PRM loaded here (--verifier prm --verifier-model PATH).")  # not the default
        # hint's "or with the self-judge": here the self-judge runs on the server and cannot exit either
    if search.verifier == "self-judge":
        return RemoteSelfJudge(backend)
    if search.verifier == "prm" and backend.cfg.prm_endpoint:
        prm = replace(backend.cfg, endpoint=backend.cfg.prm_endpoint, served_model=search.verifier_model or "",
                      endpoint_option="--verifier-endpoint", model_option="--verifier-model")  # what its errors name
        return ServedPRM(OpenAICompletions(prm, should_stop=backend.should_stop))
    if search.verifier == "prm":
        import torch

        from engine.verifiers import LENS_FAMILIES, prm_verifier
        from engine.verifiers.families import load_prm

        cuda = torch.cuda.is_available() and search.verifier_device != "cpu"  # cpu: beside a server on this GPU
        device, dtype = torch.device("cuda" if cuda else "cpu"), torch.bfloat16 if cuda else torch.float32
        parts = load_prm(search.verifier_model or "", device, dtype)
        return with_exit(prm_verifier(parts), parts.head if parts.family in LENS_FAMILIES else None, rule)
    return LogProbVerifier()


class _RemoteSearch:
    def __init__(
        self,
        question: str,
        server: ServerConfig,
        backend: OpenAICompletions,
        search: SearchConfig,
        should_stop: Callable[[], bool],
        history: tuple[Turn, ...] = (),
    ) -> None:
        self.question, self.server, self.backend, self.cfg = question, server, backend, search
        self.history = history
        self.should_stop = should_stop
        self.method = method_for(search)
        self.verifier = make_verifier(search, backend)
        self.candidates: dict[int, Candidate] = {}
        self.paths: dict[int, str] = {}  # id -> the path's text from the first step on
        self.next_id = 1
        self.gate: dict = {}
        self.step = 0  # the step in progress
        self.extra_tokens = 0  # generated by lookahead roll-outs (not tree nodes)
        self.clock = SearchClock()  # the run's own seconds: candidates' completion times count on it

    def events(self) -> Iterator[ev.Event]:
        try:
            yield from self._steps()
        except RequestCancelled:  # a Stop while the server computed: that request was abandoned
            yield ev.RunCancelled(max(0, self.step - 1))

    def _steps(self) -> Iterator[ev.Event]:
        if is_blank(self.question):
            raise InvalidPrompt("The question is empty.", hint="Type a question.")
        self.clock.start()
        self.backend.check_model()
        if isinstance(self.verifier, ServedPRM):  # its name too, before step 1 (it was found wrong after it)
            self.verifier.backend.check_model()
        yield ev.RunStarted(
            self.question,
            self.backend.name,
            self.verifier.name,
            REMOTE_DEVICE,
            False,
            "remote",
            0,
            self.cfg.to_dict(),
            self.server.to_dict(),
            history=self.history,
        )
        prompt = prompt_text(self.question, self.history)
        kept: list[int] = []
        step = 0
        for step in range(1, self.cfg.max_steps + 1):
            self.step = step
            if self.should_stop():
                yield ev.RunCancelled(step - 1)
                return
            parents = [c for c in kept if not self.candidates[c].finished]
            children = self._expand(parents, step)
            batches = self._batches(children)
            done = None
            if step == 1:  # the first request prefills the prompt on the server: report it as the prefill
                first = time.perf_counter()
                done = self._complete(prompt, batches[0])
                yield ev.PrefillDone(done[0].prompt_tokens or 0, time.perf_counter() - first)
            yield ev.StepStarted(step, tuple(parents))
            yield ev.GroupScheduled(step, 0, tuple(children), ())
            for index, batch in enumerate(batches):
                results = done if done is not None and index == 0 else self._complete(prompt, batch)
                for cid, result in zip(batch, results, strict=True):
                    c = self._take(cid, result)
                    yield ev.CandidateText(step, cid, c.parent, c.text, c.step_tokens, c.finished, c.group)
                if self.should_stop():
                    yield ev.RunCancelled(step - 1)
                    return
            yield from self._score(children, step, self._look_ahead(prompt, children))
            yield from _no_kv_events(step, children)
            pool = [c for c in kept if self.candidates[c].finished] + children
            keep = [c.id for c in self.method.keep([self.candidates[c] for c in pool])]
            pruned = sorted(set(pool) - set(keep))
            cost = self.verifier.settle([self._key(c) for c in keep])  # a PRM keeps the kept paths' KV
            yield ev.StepSelected(
                step, tuple(keep), tuple(pruned), cost.tokens, cost.tokens_full, **self.gate, **exit_fields(cost)
            )
            kept = keep
            if all(self.candidates[c].finished for c in kept):
                break
        yield self._finish(kept, step)

    def _expand(self, parents: list[int], step: int) -> list[int]:
        per_parent = self.method.children() if parents else self.method.roots()
        children = []
        for parent in parents or [None]:
            for index in range(per_parent):
                child = Candidate(self.next_id, parent, step, lane=self.method.lane(index))
                self.next_id += 1
                if parent is not None:
                    before = self.candidates[parent]
                    child.scores, child.lane = list(before.scores), before.lane
                self.candidates[child.id] = child
                self.paths[child.id] = self.paths[parent] if parent is not None else ""
                children.append(child.id)
        return children

    def _batches(self, children: list[int]) -> list[list[int]]:
        """The children each request makes: one each (n=1), or all of a path's children (n=M) when asked."""
        if not self.server.one_request_per_path:
            return [[cid] for cid in children]
        batches: dict[int | None, list[int]] = {}
        for cid in children:
            batches.setdefault(self.candidates[cid].parent, []).append(cid)
        return list(batches.values())

    def _complete(self, prompt: str, batch: list[int]) -> list[Completion]:
        """One request for children of one path, seeded by its first child: the same seed and settings give
        the same tree (where the server honours seeds)."""
        return self._ask(
            prompt + self.paths[batch[0]], len(batch), self.cfg.seed * 1_000_003 + batch[0], self.method.greedy
        )

    def _ask(self, text: str, n: int, seed: int, greedy: bool) -> list[Completion]:
        delimiter = self.cfg.step_delimiter
        return self.backend.complete_many(
            text,
            n,
            max_tokens=self.cfg.step_tokens,
            stop=[delimiter] if delimiter else [],
            temperature=0.0 if greedy else self.cfg.temperature,
            top_p=self.cfg.top_p,
            seed=seed,
        )

    def _as_step(self, result: Completion) -> tuple[str, bool]:
        """The step's text as a local step reads (the delimiter kept where the server stopped at it), and
        whether it ends the answer."""
        finished = result.ended_by_eos or not result.text.strip() or ANSWER_MARK in result.text.lower()
        at_stop = result.at_stop and not finished
        return (result.text + self.cfg.step_delimiter if at_stop else result.text), finished

    def _take(self, cid: int, result: Completion) -> Candidate:
        c = self.candidates[cid]
        c.text, c.finished = self._as_step(result)
        if c.finished:  # its path ends here: FlashTTS's completion time
            c.completed_at = self.clock.seconds()
        c.step_tokens = len(result.logprobs)
        c.logprobs = result.logprobs
        c.top1 = result.top1
        self.paths[cid] += c.text
        return c

    def _look_ahead(self, prompt: str, children: list[int]) -> dict[int, list[tuple[str, Completion]]]:
        """Beam with lookahead: each unfinished child rolled out K greedy steps (a request each), for scoring.
        The child keeps only its own step; the roll-out is not a tree node (search-and-learn)."""
        rolled: dict[int, list[tuple[str, Completion]]] = {}
        for cid in children if self.cfg.lookahead else []:
            text, steps, finished = self.paths[cid], [], self.candidates[cid].finished
            while not finished and len(steps) < self.cfg.lookahead:
                result = self._ask(prompt + text, 1, self.cfg.seed * 1_000_003 + cid, True)[0]
                step, finished = self._as_step(result)
                steps.append((step, result))
                text += step
                self.extra_tokens += len(result.logprobs)
            rolled[cid] = steps
        return rolled

    def _score(
        self, children: list[int], step: int, rolled: dict[int, list[tuple[str, Completion]]]
    ) -> Iterator[ev.Event]:
        """The local search's scoring (engine.scoring): the path, the step and (lookahead) the roll-out, scored
        at its end."""
        items = [self._item(cid, rolled.get(cid, [])) for cid in children]
        self.gate = {}
        yield from score_step(self.candidates, children, step, self.cfg, lambda: self.verifier.score(items), self.gate)

    def _item(self, cid: int, rolled: list[tuple[str, Completion]]) -> StepToScore:
        c = self.candidates[cid]
        steps = (*self._steps_before(cid), c.text, *(text for text, _ in rolled))
        return StepToScore(self.question, steps[:-1], steps[-1], rolled[-1][1].logprobs if rolled else c.logprobs)

    def _path(self, cid: int | None) -> list[int]:
        return path_to(self.candidates, cid)

    def _path_tokens(self, cid: int) -> int:
        return sum(self.candidates[p].step_tokens for p in self._path(cid))

    def _key(self, cid: int) -> tuple[str, ...]:
        """The verifier's name for a path: the question and each step's text (as the local search names it)."""
        return (self.question, *(self.candidates[p].text for p in self._path(cid)))

    def _steps_before(self, cid: int) -> tuple[str, ...]:
        return tuple(self.candidates[p].text for p in self._path(self.candidates[cid].parent))

    def _finish(self, kept: list[int], steps: int) -> ev.RunFinished:
        winner = choose(final_pool([self.candidates[c] for c in kept]), self.cfg.select, lambda c: self.paths[c.id])
        seconds = self.clock.seconds()
        total = sum(c.step_tokens for c in self.candidates.values()) + self.extra_tokens
        path = self._path(winner.id)
        completions = tuple(completion(self.candidates[c], self._path_tokens(c), seconds) for c in kept)
        return ev.RunFinished(
            self.paths[winner.id].strip(),
            tuple(path),
            winner.aggregate,
            steps,
            total,
            seconds,
            total / seconds if seconds > 0 else 0.0,
            goodput([(tokens, at) for _, tokens, at in completions]),
            answer_tokens_per_second=self._path_tokens(winner.id) / seconds if seconds > 0 else 0.0,
            completions=completions,
        )


def _no_kv_events(step: int, children: list[int]) -> Iterator[ev.Event]:
    """Zeros where a local run reports its KV: the server holds it (emulated=False, one group)."""
    memory = tuple(ev.CandidateMemory(c, 0, 0, 0, 0, 0, 0, 0) for c in children)
    yield ev.MemorySnapshot(step, False, 0, 0, 0, 0, memory)
    yield ev.TransferStats(step, False, 0, 0, 0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0, 1)
