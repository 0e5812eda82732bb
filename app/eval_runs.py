"""The runs of one `beamwise eval`: the model loaded once, each problem searched, recorded and judged."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import sys
from pathlib import Path

from app import formatting, run_output
from app.calibrate import StepStat, calibrate
from app.early_exit import Thresholds
from app.eval_report import MethodSummary, ProblemResult, result_of, summarize
from app.problems import Problem
from engine import events as ev
from engine.candidate import SearchClock, outside_the_search
from engine.config import CacheConfig, ModelSpec, SearchConfig
from engine.errors import LayersUnavailable

FEW_STEPS = 50  # fewer calibration steps than this fit thresholds to chance: saved, with a word of warning
PROBLEM_ERRORS = frozenset({"InvalidPrompt"})  # a question the model cannot read: its problem's failure, not the eval's


class Evaluation:
    """Loads the model on creation; `run(problems)` may be interrupted and keeps what finished."""

    def __init__(self, args: argparse.Namespace, model_spec: ModelSpec, configs: dict[str, SearchConfig],
                 cache: CacheConfig) -> None:  # fmt: skip
        from app.recorder import LockSeen  # the store's modules, only where runs are saved
        from engine.models import load_model

        self.args, self.configs, self.cache = args, configs, cache
        self.model_source = model_spec.source  # a calibration records what it ran on
        self.store = None
        self.lock = LockSeen()  # a lock one run (or the import at opening) met is not waited for again by the next
        self.journalled: list[Path] = []  # runs kept in journals, not yet in the database, oldest first
        self.prms: dict[tuple, object] = {}  # PRMParts by (verifier, source, device), loaded once (`_prm`)
        self.refused: list[tuple[int, str]] = []  # (line, method) of runs refused before they started: not saved
        if not args.no_save:  # before the model: a --db it cannot open is said at once, not after a minute's load
            from app.journal_import import open_session_store

            self.store = open_session_store(args.db, notify=run_output.note, lock=self.lock)
        try:
            self.loaded = load_model(model_spec, device=cache.device, progress=run_output.load_progress)
            self.no_layers = self._check_layers(next(iter(configs.values())))
        except BaseException:
            self.close()
            raise
        importlib.import_module("engine.search")  # now, not in the first run's timed window (0.3-0.6 s of its wall)
        self.results: dict[str, list[ProblemResult]] = {m: [] for m in configs}
        self.walls: dict[str, list[float]] = {m: [] for m in configs}  # wall seconds per problem
        self.ends: list = []  # each run's last event, in the order they ran
        self.steps: list[StepStat] = []
        self.lens_steps: list = []  # --calibrate: each step's recorded verifier passes (StepSelected.lens_trace)
        self.done = 0
        self.numerics: dict = {}  # the first run's (engine/numerics.py): every run of one eval shares them

    def _check_layers(self, search: SearchConfig) -> LayersUnavailable | None:
        """Why the self-judge verifier cannot run layer by layer on the loaded generator (a LayersUnavailable), None
        when it can or another verifier scores: with --entropy-exit it is refused now, before the first problem
        (every run failed on it in turn); a calibration keeps it to say why the exit was not calibrated (it said
        the verifier had no logit lens). Every method runs the same generator and verifier."""
        from engine.verifiers.entropy_exit import self_judge_refusal

        refusal = self_judge_refusal(self.loaded) if search.verifier == "self-judge" else None
        if refusal is not None and search.entropy_exit:
            raise refusal
        return refusal

    def run(self, problems: list[Problem]) -> None:
        for index, problem in enumerate(problems, 1):
            for method, search in self.configs.items():
                self._prm(search)  # its one load is before the clock, as the generator's is: in no method's time
                clock = SearchClock()  # the recorder's writes and the journals' import are not the method's time
                events = self._search(problem, method, search)
                self.walls[method].append(clock.seconds())
                result = result_of(method, problem.line, problem.answer, events)
                self.results[method].append(result)
                self._collect_steps(events)
                self.ends.append(events[-1] if events else None)
                refused = self.store is not None and run_output.refused_before_start(events)  # saved nowhere
                if refused:
                    self.refused.append((problem.line, method))
                self._progress(index, len(problems), result, self.ends[-1], refused=refused)
            self.done = index

    def _search(self, problem: Problem, method: str, search: SearchConfig) -> list:
        from engine.search import run

        if self.journalled and self.lock.ago() is None:
            with outside_the_search():
                self._save_journalled()  # before this run's session, so that the sessions keep the runs' order
        recorder = self._recorder(problem, method)
        events = []
        try:
            for event in run(problem.question, self.loaded, search, self.cache, prm=self._prm(search)):
                events.append(event)
                if event.type == "run_started" and not self.numerics:
                    self.numerics = dict(event.numerics)
                run_output.record(recorder, event)  # its writes are outside_the_search (app/recorder.py)
        except KeyboardInterrupt:  # recorded as `run` records Ctrl+C; 'interrupted' is for a process that died
            steps = [e.step for e in events if e.type == "step_selected"]
            run_output.record(recorder, ev.RunCancelled(step=steps[-1] if steps else 0))
            raise
        finally:
            if recorder is not None:
                recorder.close()
                if recorder.journal_path is not None:  # saved before the next run's, or at the eval's end
                    self.journalled.append(recorder.journal_path)
        return events

    def _prm(self, search: SearchConfig):
        """The PRM's weights (PRMParts) for `search`, loaded by the first run that asks and passed to every later
        one with the same PRM and device, as the generator is: each run still makes a fresh verifier around them.
        None for a verifier without a PRM (its one-time measure is made all the same), or a PRM that did not load:
        each run then meets the error itself and fails with it in its own words, as `beamwise run` would."""
        key = (search.verifier, search.verifier_model, search.verifier_device)
        if key not in self.prms:
            from engine.verifiers import prepare_verifier

            try:
                self.prms[key] = prepare_verifier(search.verifier, self.loaded, *key[1:])
            except Exception:  # said by the run's RunFailed (engine.search.run loads it and fails the same way)
                self.prms[key] = None
        return self.prms[key]

    def _save_journalled(self) -> None:
        """The journalled runs into the database, oldest first, until it refuses one: a lock then is remembered,
        so the next runs do not wait for it either (each run waited 5 s for it, then 5 s more to import)."""
        from app.journal_import import import_runs

        self.journalled = import_runs(self.store, self.journalled, notify=run_output.note, lock=self.lock)

    def _recorder(self, problem: Problem, method: str):
        """As `beamwise run` records: a database that turns busy mid-eval moves the run to a journal, not the
        eval to an error that loses every finished problem's result."""
        if self.store is None:
            return None
        from app.journal_import import recorder_for

        title = f"eval {method} line {problem.line}: {problem.question[:40]}"
        return recorder_for(self.store, notify=run_output.warn, title=title, lock=self.lock)

    def _collect_steps(self, events: list) -> None:
        for e in events:
            if e.type == "step_selected" and e.verifier_agrees is not None and e.confidence is not None:
                self.steps.append(StepStat(e.confidence, e.confidence_gap or 0.0, e.verifier_agrees))
            if e.type == "step_selected" and e.lens_trace:
                self.lens_steps.append(e.lens_trace)

    def _progress(self, index: int, total: int, r: ProblemResult, end: object, *, refused: bool = False) -> None:
        """One line per run; a failed run's says why (its traceback, for a fault, is in the saved session), and
        one `refused` before it started (a question past the context) that it was not saved, as `run` saves none."""
        if r.status == "failed":
            why = end.message if isinstance(end, ev.RunFailed) else "the run ended without a result"
            how = "refused before it started, so not saved" if refused else "failed"
            print(f"[eval] {index}/{total} {r.method}: {how}: {why}", file=sys.stderr, flush=True)
            return
        mark = "correct" if r.correct else "wrong" if r.status == "finished" else r.status
        answered = "no answer found" if r.predicted is None else f"answered {r.predicted}"  # not 'answered None'
        print(f"[eval] {index}/{total} {r.method}: {mark} ({answered}, expected {r.expected}); "
              f"{r.tokens} tokens, {r.seconds:.1f} s", file=sys.stderr, flush=True)

    def settings_failure(self) -> ev.RunFailed | None:
        """The first run's failure when every run failed with one error of the user's settings, the kind `run`
        refuses with exit 2 (a KV budget too small for the search); None otherwise. Whether the settings can run
        depends on each question's length, so the eval cannot refuse them before its first problem."""
        from app.run_cli import user_errors

        if not self.ends or not all(isinstance(end, ev.RunFailed) for end in self.ends):
            return None
        kinds = {end.error for end in self.ends}
        return self.ends[0] if len(kinds) == 1 and kinds <= user_errors() - PROBLEM_ERRORS else None

    def summaries(self) -> list[MethodSummary]:
        """Per method, over the problems every method finished (an interrupted problem is left out)."""
        return [summarize(m, self.results[m][: self.done], sum(self.walls[m][: self.done])) for m in self.configs]

    def finished_runs(self) -> list[ProblemResult]:
        """The runs the summaries count: a method that finished the interrupted problem before the others would
        make the JSON's runs compare one method on more problems than the rest."""
        return [r for m in self.configs for r in self.results[m][: self.done]]

    def save_calibration(self, target: float) -> bool:
        """Fit verify-skip's thresholds and, when the verifier's lens was recorded, the entropy exit's; save them,
        keeping an earlier calibration's entropy exit thresholds when this one has no lens to measure its own.
        False when no step was scored, so nothing was saved."""
        from app.early_exit import calibrated_on, model_key, save_thresholds, skip_text, verifier_key

        if not self.steps:
            print("beamwise: no steps to calibrate from (did every run fail?); nothing was saved", file=sys.stderr)
            return False
        search = next(iter(self.configs.values()))  # every method runs the same generator and verifier
        verifier = verifier_key(self.model_source, search.verifier, search.verifier_model)
        found = dataclasses.replace(calibrate(self.steps, target), generator=model_key(self.model_source),
                                    verifier=verifier)
        print(f"verify-skip thresholds: tau_conf {found.tau_conf:.4f}, r_gap {found.r_gap:.4f} "
              f"({skip_text(found)})")
        found = self._with_entropy_exit(found, target)
        print(f"calibrated on {calibrated_on(found)}; saved to {save_thresholds(found)}")
        if found.steps < FEW_STEPS:
            print(f"beamwise: warning: thresholds from {formatting.steps(found.steps)} are a rough guess; calibrate on "
                  f"{FEW_STEPS} steps or more (the shipped problem set gives several hundred)",
                  file=sys.stderr)
        return True

    def _with_entropy_exit(self, found: Thresholds, target: float) -> Thresholds:
        """`found` with the entropy exit's thresholds fitted to the recorded lens; without one (logprob), with the
        saved ones: a logprob calibration wrote "entropy_theta": null over a self-judge one's and said nothing."""
        from app.calibrate_exit import TooFewLayers, calibrate_exit

        if not self.lens_steps:
            why = "the verifier has no logit lens: use --verifier self-judge or a Math-Shepherd or RLHFlow PRM"
            return _keep_earlier_exit(found, str(self.no_layers).removesuffix(".") if self.no_layers else why)
        try:
            fit = calibrate_exit(self.lens_steps, target)
        except TooFewLayers as error:  # verify-skip's thresholds are still saved (they were lost with an error)
            return _keep_earlier_exit(found, str(error))
        print(_exit_line(fit, target))
        return dataclasses.replace(
            found, entropy_theta=fit.theta, entropy_delta=fit.delta, entropy_vocab=fit.vocab,
            entropy_layers=fit.layers, entropy_steps=fit.steps, entropy_mean_layer=fit.mean_layer,
            entropy_agreement=fit.agreement, entropy_missed=fit.missed, entropy_verifier=found.verifier)

    def close(self) -> None:
        """The PRM's weights let go; the journalled runs are tried once more (the database's lock may be gone), then
        said once; the runs refused before they started, which have no session, are named."""
        self.prms.clear()
        if self.store is None:
            return
        try:
            self._say_refused()
            if self.journalled:
                self._save_journalled()
            if self.journalled:
                self._say_journalled()
        finally:
            self.store.close()

    def _say_journalled(self) -> None:
        """The runs still in journals at the eval's end, and when they reach the database: a read-only one only once
        it is made writable (it promised "the next time Beamwise opens it", which reads it without them)."""
        from app.journal import saved_when
        from app.store_file import writable

        path = self.store.path
        read_only = self.store.read_only or not writable(path)
        why = "it can only be read" if read_only else "busy or its disk full"
        runs = f"{len(self.journalled)} run{'s' if len(self.journalled) > 1 else ''}"
        many = len(self.journalled) > 1
        run_output.warn(f"the session database {path} still cannot be written ({why}): {runs} of this eval "
                        f"{'are' if many else 'is'} kept in run journals in {self.journalled[0].parent} and "
                        f"{saved_when(path, read_only, many=many)}.")

    def _say_refused(self) -> None:
        """Which runs have no session: refused before they started, as `beamwise run` records none of those."""
        if not self.refused:
            return
        named = ", ".join(f"line {line} {method}" for line, method in self.refused)
        run_output.note(f"{len(self.refused)} run(s) were refused before they started ({named}; their [eval] lines "
                        f"say why), so no session was saved for them in {self.store.path}: `beamwise run` saves "
                        "none for such a run either.")


def _keep_earlier_exit(found: Thresholds, why: str) -> Thresholds:
    """`found` with the entropy exit thresholds saved before, when this calibration could not fit its own."""
    from app.early_exit import keep_entropy_of, kept_entropy_text, load_thresholds

    found = keep_entropy_of(found, load_thresholds())
    kept = "" if found.entropy_theta is None else f"; {kept_entropy_text(found)}"
    print(f"entropy exit: not calibrated ({why}){kept}")
    return found


def _exit_line(fit, target: float) -> str:
    """What the entropy exit's calibration found (an ExitFit); when no pair reached the target, that and what to do."""
    if fit.missed is not None:
        return (f"entropy exit: no threshold pair reached {target:.0%} agreement on {formatting.steps(fit.steps)} "
                f"(the strictest, the 10th percentiles, agreed on {fit.missed:.0%} of the steps it exits); saved the "
                f"exit as off for this verifier, so the exit does not fire: --entropy-exit runs all {fit.layers} "
                "layers and says why. Calibrate on more problems, or lower --target-agreement, to find thresholds "
                "that exit early")
    return (f"entropy exit thresholds: theta {fit.theta:.4f}, delta {fit.delta:.4f} on the ~150k-vocabulary "
            f"scale ({fit.theta_nats:.4f} and {fit.delta_nats:.4f} nats for this verifier's {fit.vocab:,} "
            f"tokens): exit at layer {fit.mean_layer:.1f} of {fit.layers} on average, on {fit.exit_rate:.0%} "
            f"of {formatting.steps(fit.steps)}, full pass agrees on {fit.agreement:.0%}")

