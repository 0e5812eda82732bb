"""The `beamwise` command: run (a headless search), plan, bench, eval, models, sessions and gui. No Qt here."""

from __future__ import annotations

import sys


def _interrupted(when: str = "") -> int:
    """Ctrl+C: one line on stderr and status 130 (128 + SIGINT, as a shell reports it), never a traceback; `when`
    says what was kept where that is known ("while starting: nothing was recorded")."""
    print(f"beamwise: interrupted{' ' + when if when else ''}", file=sys.stderr)
    return 130


try:  # a Ctrl+C in a command's first ~0.3 s lands here (argparse, sqlite_utils, numpy) and printed a traceback
    import argparse
    import codecs
    import contextlib
    import io
    import os
    import threading
    import traceback
    from collections.abc import Sequence
    from typing import NoReturn

    from app import bench_cli, eval_cli, models_cli, plan_cli, sessions_cli
    from app.options import UsageError, add_search_options
    from app.parser import OneLineParser
    from app.question import add_question_file_option, add_question_option
    from app.run_output import (
        cancelled_in_json,
        failures_in_json,
        output_refused,
        reader_left,
        say_output_refused,
    )
    from app.server_options import add_backend_options
    from app.threads import limit_threads
    from engine.errors import BeamwiseError
except KeyboardInterrupt:
    sys.exit(_interrupted("while starting: nothing was recorded"))  # SystemExit: `from app.cli import console` quietly


DESCRIPTION = ("Beamwise answers a question by step-wise beam search over a local language model, a verifier "
               "scoring each step, with the KV cache offloaded to CPU memory. Commands: run (a headless search), "
               "plan, bench, eval, models, sessions and gui (the window, also with no command).")


class _PrintVersion(argparse.Action):
    """`--version`: Beamwise's and its main libraries' versions, read only when asked (no import of torch)."""

    def __init__(self, option_strings, dest, default=None, help=None) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None) -> NoReturn:
        from app.version import version_line

        print(version_line(), flush=True)  # a full output is said by `main`, not failed in the exit's flush
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="beamwise", description=DESCRIPTION)
    parser.add_argument("--version", action=_PrintVersion, dest=argparse.SUPPRESS,
                        help="print the versions of Beamwise, torch, transformers, Qt and Python, and exit")
    sub = parser.add_subparsers(dest="command")

    run = sub.add_parser("run", help="answer a question headless, printing the search as it goes")
    run.add_argument("question", nargs="?", default=None,
                     help="the question, in quotes; - reads it from standard input")
    add_question_option(run)
    add_question_file_option(run)
    add_search_options(run)
    add_backend_options(run)
    run.add_argument("--json", action="store_true", help="print JSON Lines, one object per event")
    run.add_argument("--db", default=None, help=f"session database (default: {_default_db()})")
    run.add_argument("--no-save", action="store_true", help="do not record this run")
    run.add_argument("--session", type=sessions_cli.session_id, default=None, metavar="ID",
                     help="ask a follow-up in the conversation of session ID (any of its turns): the prompt holds "
                          "its earlier questions and chosen answers, and the run is recorded as its next turn")
    run.set_defaults(handler=_run)

    bench_cli.add_parser(sub)
    plan_cli.add_parser(sub)
    models_cli.add_parser(sub)
    eval_cli.add_parser(sub)
    sessions_cli.add_parser(sub)

    gui = sub.add_parser("gui", help="open the window (the default with no command)")
    gui.add_argument("--question", default=None, help="run this question at start")
    gui.add_argument("--screenshot", default=None,
                     help="after the run, save a PNG of the window here and exit (its folder must exist; a file "
                          "there is replaced)")
    gui.add_argument("--db", default=None, help=f"session database (default: {_default_db()})")
    gui.add_argument("--panel", default=None, choices=("settings", "sessions", "models"),
                     help="with --screenshot: show this tab of the left panel in the picture")
    gui.add_argument("--collapse-pruned", action="store_true", help="start with pruned branches collapsed")
    gui.add_argument("--theme", default="system", choices=("system", "light", "dark"),
                     help="colours: follow the OS (default), or always light or dark")
    add_search_options(gui)
    gui.set_defaults(handler=_gui)
    return parser


def _default_db() -> str:
    from app.db_path import default_db_path

    return str(default_db_path())


def _run(args: argparse.Namespace) -> int:
    from app.question import check_given, take_question_option

    take_question_option(args)
    check_given(args.question, args.question_file)  # before the engine's import: a missing question is said at once
    from app.deferred_interrupt import import_torch

    import_torch()  # a Ctrl+C inside torch's import aborted the process (app.run_cli imports it)
    from app.run_cli import run_command  # here, not at the top: `beamwise --help` stays light

    return run_command(args)


def _gui(args: argparse.Namespace) -> int:
    from app.display_check import display_problem

    if problem := display_problem():  # before Qt: its xcb plugin would abort with a core dump
        raise UsageError(problem)
    from app.gui.launch import main as gui_main  # Qt loads only for the window

    return gui_main(args)


def _quiet_progress_bars() -> None:
    """transformers' "Loading weights" bars would clutter every run's stderr; Beamwise reports loading itself.
    Before huggingface_hub loads, its switch is an environment variable read at import: a command refused for its
    arguments then never pays for importing transformers."""
    if "huggingface_hub" not in sys.modules:
        os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
        return
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def tolerate_console_encoding() -> None:
    """Print what the console's encoding cannot show as '?' rather than stop: a question or a step in Greek,
    Chinese or with emoji, printed where stdout's encoding is cp1252 (a Windows redirect or pipe) or ascii
    (PYTHONIOENCODING), raised UnicodeEncodeError mid-run, and the run ended as an error."""
    for stream in (sys.stdout, sys.stderr):  # None without a console (pythonw, beamwise-gui)
        if (isinstance(stream, io.TextIOWrapper) and stream.errors == "strict"
                and codecs.lookup(stream.encoding).name != "utf-8"):
            stream.reconfigure(errors="replace")


INTERNAL_ERROR = ("beamwise: internal error (a fault in Beamwise, not in what you gave): please report it with the "
                  "lines above.")


def main(argv: Sequence[str] | None = None) -> int:
    """Every command, returning its exit status (`console` is the console script that exits with it).

    The user's errors are UsageError (app) and BeamwiseError (engine; a config's checks raise ConfigError): one line,
    exit status 2, as is standard output with no room for what is printed (`output_refused`). Any other exception, a
    plain ValueError too, is a fault in Beamwise and is raised on, for `console` to show with its traceback (it was
    said as one line, as if the user had typed something wrong)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    tolerate_console_encoding()
    args = None
    try:
        args = build_parser().parse_args(argv or ["gui"])
        args.argv = argv or ["gui"]  # as typed: `gui` tells an option typed with its default value from one left out
        if args.command in ("run", "plan", "eval", "gui", "bench"):  # every command that runs a model (plan's on meta)
            with failures_in_json(args.command == "run" and args.json):  # --threads 0: a run's stream ends too
                _limit_threads(args)
            _quiet_progress_bars()
        return _flushed(args.handler(args))
    except (UsageError, BeamwiseError) as error:
        return _said(error)
    except KeyboardInterrupt as interrupt:  # past the parser, a run --json stream ends with its run_cancelled
        if args is not None and args.command == "run" and args.json:
            cancelled_in_json(interrupt)
        # a run says its own Ctrl+C once its recorder is open: one reaching here came before (the engine's import)
        before_run = args is not None and args.command == "run"
        return _interrupted("before the search began: nothing was recorded" if before_run else "")
    except BrokenPipeError:  # `beamwise ... | head`: the reader left; say nothing more
        reader_left(sys.stdout)  # so the exit flush cannot fail again
        return 0
    except OSError as error:  # `beamwise ... > /dev/full`: no room for the output, the user's to fix
        if not output_refused(error):
            raise
        say_output_refused(error)
        return 2


def _flushed(code: int) -> int:
    """`code`, once standard output holds nothing unwritten: with a buffered output (a redirect), a full disk was
    met only by the exit's flush, which Python says as "Exception ignored" and exit status 120, not `main`."""
    try:
        if sys.stdout is not None:  # None without a console (pythonw, beamwise-gui)
            sys.stdout.flush()
    except BrokenPipeError:  # the reader left (`| head`): the status still says how the command ended
        reader_left(sys.stdout)
    return code


def _limit_threads(args: argparse.Namespace) -> None:
    """torch's pool: the free cores (one kept for the window), or --threads; eval records the choice. A --threads
    or BEAMWISE_THREADS that is no count is the user's to fix (app/threads.py says which)."""
    try:
        args.thread_choice = limit_threads(reserve=int(args.command == "gui"), given=getattr(args, "threads", None))
    except ValueError as error:
        raise UsageError(str(error)) from error


def _said(error: UsageError | BeamwiseError) -> int:
    """The user's error as one line on stderr; exit status 2."""
    message = error.user_message() if isinstance(error, BeamwiseError) else str(error)
    print(f"beamwise: error: {message}", file=sys.stderr)
    return 2


def exit_with(code: int) -> NoReturn:
    """End the process with `code`, as the `beamwise` command: the interpreter's own exit when every thread is
    done, else at once (the store is closed and the settings saved by then; stdout and stderr are flushed here).

    A daemon thread still inside torch when the interpreter finalizes aborts the process ("terminate called
    without an active exception", status 134): closing the window mid-way through a model load (the load is
    abandoned, not waited for) or while the plan bar plans did that. Only the process's entry points call this:
    `main` itself returns, for tests and callers in-process."""
    if any(thread.daemon and thread.is_alive() for thread in threading.enumerate()):
        for stream in filter(None, (sys.stdout, sys.stderr)):  # None without a console (pythonw, beamwise-gui)
            with contextlib.suppress(OSError, ValueError):  # a closed pipe or stream: nothing more to say
                stream.flush()
        os._exit(code)
    sys.exit(code)


def console() -> NoReturn:
    """The `beamwise` console script (pyproject's [project.scripts]) and `python -m app.cli`. A fault in Beamwise
    (an exception `main` raises on) ends with Python's traceback, then a line that says it is Beamwise's to fix, and
    exit status 1. Not for Ctrl+C, a closed pipe or a full output (`main` says those and returns) nor SystemExit
    (`--help`)."""
    try:
        code = main()
    except Exception:
        traceback.print_exc()
        print(INTERNAL_ERROR, file=sys.stderr, flush=True)
        code = 1
    exit_with(code)


if __name__ == "__main__":
    console()
