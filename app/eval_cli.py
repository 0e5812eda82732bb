"""`beamwise eval PROBLEMS.jsonl`: answer quality and cost of search methods on a problem set.

Problems run one after another; with `--compare` every method runs each problem before the next
problem starts, with the same seed, so an interrupted comparison stays side by side. Each run is
recorded in the session database like `beamwise run`. Ctrl+C keeps the finished problems and prints
the partial table (exit 130). The prefix cache is off unless `--prefix-cache` is given: a cached prompt's KV
is not bit-equal to a computed one (with 2 threads its logits move by ~1e-5), so a problem's samples would
depend on which problems and methods ran before it, in this process or (its disk tier) an earlier one.
Each run records torch's thread count, version, CPU kernels, device and dtype; the JSON and the
table's header name them, for an exact rerun (README, "Reproducing a run"). `--calibrate` also fits RKSC's
verify-skip thresholds (app/calibrate.py) and, for a verifier with a logit lens, the layer-entropy exit's
(app/calibrate_exit.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from app import formatting
from app.early_exit import check_thresholds_writable
from app.exit_options import THRESHOLDS, given_thresholds
from app.json_out import check_json_path, write_json
from app.options import UsageError, add_search_options, check_lookahead, configs_from_args
from app.problems import Problem, load_problems
from app.threads import numerics_line
from engine.config import METHODS, ModelSpec, SearchConfig

if TYPE_CHECKING:
    from app.eval_runs import Evaluation  # imported with torch, in `_start`

TARGET_AGREEMENT = 0.9  # --calibrate: the least share of skipped steps where the verifier picks the same child
LARGE_PROBLEMS = 8_000_000  # bytes of a problems file said on stderr before it is read (~0.1 s a MB, before the model)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="accuracy and cost of search methods on a JSON Lines problem set")
    p.add_argument("problems", help='JSON Lines: {"question": ..., "answer": ...} per line (GSM8K "#### N" too)')
    add_search_options(p, prefix_cache=False)  # see the module docstring
    p.add_argument("--compare", default=None, metavar="METHODS",
                   help=f"comma-separated methods to run side by side, from: {','.join(METHODS)}")
    p.add_argument("--limit", type=int, default=None, help="only the first N problems")
    p.add_argument("--json", dest="json_path", default=None, metavar="PATH", help="also write the results here")
    p.add_argument("--db", default=None, help="session database (default: in the user data folder)")
    p.add_argument("--no-save", action="store_true", help="do not record the runs")
    p.add_argument("--calibrate", action="store_true",
                   help="run the verifier on every step and at every layer; save verify-skip and entropy exit "
                   "thresholds to the user config")
    p.add_argument("--target-agreement", type=float, default=None,
                   help="--calibrate: least share of skipped (or exited) steps where the verifier (or the full "
                   f"pass) would pick the same child (default: {TARGET_AGREEMENT})")
    p.set_defaults(handler=eval_command)


def methods_of(args: argparse.Namespace) -> list[str]:
    if args.compare is None:  # --compare "" ran --method alone, unsaid
        return [args.method or SearchConfig().method]
    if args.method is not None:  # it was dropped, unsaid
        raise UsageError(f"--compare {args.compare} runs its own methods, so --method {args.method} would do nothing: "
                         "name it in --compare, or leave --method out.")
    methods = [m.strip() for m in args.compare.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        named = f": {', '.join(unknown)} is none of them" if unknown else ": no method"  # which word to fix
        raise UsageError(f"--compare takes methods from {', '.join(METHODS)} (got {args.compare!r}{named}).")
    return list(dict.fromkeys(methods))


def config_for(search: SearchConfig, method: str, calibrate: bool) -> SearchConfig:
    """The run's settings for `method`: lookahead only for beam, greedy is one path."""
    changes: dict = {"method": method, "lookahead": search.lookahead if method == "beam" else 0}
    if method == "greedy":
        changes.update(beams=1, width=1)
    if calibrate:  # the verifier on every step, at every layer, recording its lens where it has one
        changes.update(verify_skip=False, entropy_exit=False, calibrate_exit=search.verifier != "logprob")
    return dataclasses.replace(search, **changes)


def _check(args: argparse.Namespace) -> None:
    if args.limit is not None and args.limit < 1:
        raise UsageError(f"--limit must be at least 1 (got {args.limit}).")
    check_lookahead(args.lookahead)  # its method: `_refuse_unused`, which knows --compare
    if args.target_agreement is not None and not args.calibrate:  # it was taken and did nothing
        raise UsageError("--target-agreement sets what --calibrate aims for: add --calibrate, or leave it out.")
    if args.target_agreement is not None and not 0 < args.target_agreement <= 1:
        raise UsageError(f"--target-agreement must be in (0, 1] (got {args.target_agreement}).")
    _refuse_unused(args)
    problems = Path(args.problems).resolve()
    if args.json_path and Path(args.json_path).resolve() == problems:
        raise UsageError(f"--json {args.json_path} is the problems file; the results would replace the problems. "
                         "Pick another --json path.")
    if args.db and not args.no_save and Path(args.db).resolve() == problems:  # it was called a damaged database
        raise UsageError(f"--db {args.db} is the problems file, not a session database. Pick another --db path "
                         "(or leave it out for the default).")


def _refuse_unused(args: argparse.Namespace) -> None:
    """Options `config_for` would drop, refused as app/options.py refuses options that do nothing: each was taken
    and the eval ran as if it had not been given."""
    exits = [name for name, given in (("--verify-skip", args.verify_skip), ("--entropy-exit", args.entropy_exit),
                                      ("--audit-early-exit", args.audit_early_exit)) if given]
    if args.calibrate and exits:
        raise UsageError(f"--calibrate runs the verifier on every step and at every layer, so {' and '.join(exits)} "
                         f"would do nothing: leave {_them(exits)} out (and any thresholds given), calibrate, then use "
                         "the saved thresholds in a run without --calibrate.")
    thresholds = [f"--{name.replace('_', '-')}" for name in THRESHOLDS if name in given_thresholds(args)]
    if args.calibrate and thresholds:  # before app/options.py's "add --verify-skip", which the check above refused
        raise UsageError(f"--calibrate measures the early exits' thresholds, so {' and '.join(thresholds)} cannot be "
                         f"given while calibrating: leave {_them(thresholds)} out, calibrate, then run without "
                         "--calibrate (it uses the saved thresholds, or those given there).")
    if args.lookahead and "beam" not in methods_of(args):
        if args.compare:
            raise UsageError(f"--lookahead works with the beam method only, and --compare {args.compare} runs none: "
                             "add beam to --compare, or leave --lookahead out.")
        check_lookahead(args.lookahead, args.method)


def _them(options: list[str]) -> str:
    return "it" if len(options) == 1 else "them"


def _check_calibration(configs: dict[str, SearchConfig]) -> None:
    """--calibrate compares the verifier's first candidate with the most confident one: with one candidate a step
    they are the same, so the verifier "agrees" on every step and the thresholds saved mean nothing."""
    for method, search in configs.items():
        if search.rows_per_step == 1:
            why = "greedy has one" if method == "greedy" else f"{method} with --beams 1 --width 1 has one"
            raise UsageError(f"--calibrate needs several candidates a step ({why}); calibrate with beam, dvts or "
                             "best-of-n and --beams x --width of 2 or more.")


def _say_large(path: str) -> None:
    """A large problems file is read and checked line by line before the model loads: 2,000,000 lines took ~22 s,
    with nothing said (Ctrl+C there exits 130, as anywhere)."""
    try:
        size = Path(path).stat().st_size
    except OSError:  # load_problems says why it cannot read it
        return
    if size > LARGE_PROBLEMS:
        print(f"beamwise: reading {formatting.size(size)} of problems from {path} ...", file=sys.stderr, flush=True)


def _check_models(model_spec: ModelSpec, search: SearchConfig) -> None:
    """A model the run refuses for its part (a missing PRM folder, no PRM family Beamwise knows, a family's head
    or step tag missing, a PRM given as the generator) refused now in the run's words: each of the eval's runs
    failed on it in turn, after the model had loaded. Read as `plan` reads it (app/plan_roles.py), and the PRM's
    layout built from its tokenizer alone (engine/verifiers `verifier_layout`), as the run builds it."""
    from app.plan_roles import CANNOT_RUN_MODEL, laid_out, role_refusal

    refused = role_refusal(model_spec.source, search)
    if refused is not None:
        raise UsageError(refused.removeprefix(CANNOT_RUN_MODEL))
    if search.verifier == "prm" and search.verifier_model:  # a BeamwiseError (NotAPRM, ModelLoadError): exit 2
        laid_out(search.verifier_model)  # read once: role_refusal has built it for a PRM folder


def eval_command(args: argparse.Namespace) -> int:
    """Exit 0 when every problem ran, 2 on bad input or when every run failed for the same error of the settings
    (as `run` refuses them; the table is printed), 130 when interrupted (the partial table is printed), 1 when
    --calibrate had no scored step to save thresholds from."""
    try:
        evaluation, problems = _start(args)
    except KeyboardInterrupt:  # app/cli.py says "interrupted" and exits 130; the file the README says is kept, too
        _say_json_kept(args.json_path)
        raise
    interrupted = False
    try:
        evaluation.run(problems)
    except KeyboardInterrupt:
        interrupted = True
        print(f"\nbeamwise: interrupted; results of {evaluation.done} finished problem(s) follow", file=sys.stderr)
    finally:
        evaluation.close()
    saved = _report(args, evaluation, problems, interrupted)
    if interrupted:
        return 130
    failed = evaluation.settings_failure()
    if failed is not None:
        print(f"beamwise: error: every run failed: {failed.message}", file=sys.stderr)
        return 2
    return 0 if saved else 1


def _start(args: argparse.Namespace) -> tuple[Evaluation, list[Problem]]:
    """The Evaluation (the model loaded) and its problems, after every check that needs no model: each refusal
    comes before what takes time."""
    from app.deferred_interrupt import import_torch

    import_torch()  # a Ctrl+C inside torch's import aborted the process
    from app.eval_runs import Evaluation

    _check(args)
    if args.limit is None:  # with --limit, only the lines asked for are read
        _say_large(args.problems)
    problems = load_problems(args.problems, args.limit)
    model_spec, search, cache = configs_from_args(args)
    configs = {m: config_for(search, m, args.calibrate) for m in methods_of(args)}
    _check_models(model_spec, search)  # before the model loads, not in every problem's run
    check_json_path(args.json_path, args.db)  # fail now, not after every problem ran
    if args.calibrate:
        _check_calibration(configs)
        check_thresholds_writable()  # not after every problem ran
    return Evaluation(args, model_spec, configs, cache), problems


def _report(args: argparse.Namespace, evaluation, problems: list[Problem], interrupted: bool) -> bool:
    """Print the table, save a calibration (an interrupted one is not saved) and write the JSON; False when a
    calibration asked for was not saved for want of scored steps. The thresholds go first and the JSON is written
    whatever they did: a --json path that turned unwritable while the problems ran (a full disk, a removed folder)
    is said last, with exit 2, after the calibration's own lines (it was said before them and lost them, unsaid)."""
    from app.eval_report import table

    summaries = evaluation.summaries()
    print(f"\n{evaluation.done} of {len(problems)} problems, {args.problems}")
    if evaluation.numerics:
        print(numerics_line(args.seed, evaluation.numerics))
    vote = any(config.select != "best" for config in evaluation.configs.values())
    print(table(summaries, vote))
    try:
        saved = _save_calibration(args, evaluation, interrupted)
    except BaseException:  # the thresholds' own error is the one said: the JSON is written, or said on stderr
        if args.json_path:
            _write_json_saying_why(args, evaluation, summaries, interrupted)
        raise
    if args.json_path:
        _write_json(args, evaluation, summaries, interrupted)
    return saved


def _write_json_saying_why(args: argparse.Namespace, evaluation, summaries: list, interrupted: bool) -> None:
    """`_write_json` beside an error of its own that the caller raises: a JSON path that cannot be written is said
    here, on stderr, so that neither error hides the other."""
    try:
        _write_json(args, evaluation, summaries, interrupted)
    except UsageError as error:
        print(f"beamwise: error: {error}", file=sys.stderr)


def _save_calibration(args: argparse.Namespace, evaluation, interrupted: bool) -> bool:
    """The calibration saved, when one was asked for and ran to the end: thresholds from the problems that
    finished would replace a whole calibration. False when it had no scored step to save."""
    if not args.calibrate:
        return True
    if interrupted:
        _say_calibration_kept()
        return True
    return evaluation.save_calibration(args.target_agreement or TARGET_AGREEMENT)


def _write_json(args: argparse.Namespace, evaluation, summaries: list, interrupted: bool) -> None:
    """The results as JSON; with no problem finished (Ctrl+C in the first), a file already at the path is kept
    (`_say_json_kept`). A FIFO or /dev/stdout still gets it."""
    if not evaluation.done and _say_json_kept(args.json_path):
        return
    choice = getattr(args, "thread_choice", None)
    data = {"problems_file": str(args.problems), "complete": not interrupted, "seed": args.seed,
            "numerics": evaluation.numerics, "threads_chosen_by": choice.reason if choice else None,
            "methods": [s.to_dict() for s in summaries],
            "runs": [dataclasses.asdict(r) for r in evaluation.finished_runs()]}
    write_json(args.json_path, data)


def _say_json_kept(json_path: str | None) -> bool:
    """True, said on stderr, when a file is already at the --json path of an eval with no problem finished: it
    holds an earlier eval's results, and a report of nothing replaced them (README: Ctrl+C keeps it, and says so,
    whether the model had loaded or not)."""
    if not json_path or not Path(json_path).is_file():
        return False
    print(f"beamwise: no problem finished, so {Path(json_path)} was not written: the file already there is kept.",
          file=sys.stderr)
    return True


def _say_calibration_kept() -> None:
    from app.early_exit import thresholds_path

    path = thresholds_path()
    kept = f"the thresholds in {path} are kept" if path.is_file() else "no thresholds were saved before either"
    print(f"beamwise: the calibration was interrupted, so it saved nothing ({kept}); run it to the end to save "
          "thresholds.", file=sys.stderr)
