"""Where `beamwise run` takes its question from: the argument, a UTF-8 file, or standard input (`-`)."""

from __future__ import annotations

import sys
from pathlib import Path

from app.options import UsageError
from app.text_files import decode_text, not_utf8
from engine.blank_text import is_blank

QUESTION = '"What is 12*7?"'  # the example question every empty-question message shows
EXAMPLE = f"beamwise run {QUESTION}"


def read_question(argument: str | None, file: str | None, command: str = "run") -> str:
    """The question as text; every way it can be unusable is one UsageError (exit 2) saying what to do, with an
    example of `command` (run, plan: both read the question as this does)."""
    check_given(argument, file)
    source = file if file is not None else "-" if argument == "-" else None
    if source is not None:
        text = _decode(_read_bytes(source), "standard input" if source == "-" else source)
    else:  # check_given: without a file there is an argument
        text = checked_argument(argument)
    if is_blank(text):
        raise UsageError(empty_message(source, command))
    return text


def empty_message(source: str | None = None, command: str = "run") -> str:
    """Why the question is empty, naming where it was read from: a file, standard input (`-`) or, with None, the
    argument, with an example of `command` (run, plan); for `gui` and `bench`, which read no question file, in their
    own options."""
    if command not in ("run", "plan"):
        return f'the question is empty; pass one in quotes, e.g. beamwise {command} --question {QUESTION}.'
    example = f"beamwise {command} {QUESTION}"
    if source == "-":
        return f"standard input is empty; pipe the question into it, or pass it in quotes, e.g. {example}."
    if source is not None:
        return f"the question file {source} is empty; write the question in it, or pass it in quotes, e.g. {example}."
    return f"the question is empty; pass a question in quotes, e.g. {example}, or --question-file PATH."


def add_question_option(parser) -> None:
    """`--question TEXT`, as `gui` and `bench` take it, beside the positional QUESTION. Without it argparse read
    `run --question "..."` as an abbreviation of --question-file and said it could not read a file so named."""
    parser.add_argument("--question", dest="question_option", default=None, metavar="TEXT",
                        help="the question, as the positional QUESTION (gui and bench take it this way)")


def add_question_file_option(parser) -> None:
    """`--question-file PATH`, as `run` and `plan` take it."""
    parser.add_argument("--question-file", default=None, metavar="PATH",
                        help="read the question from this UTF-8 file (- for standard input), for long questions")


def take_question_option(args) -> None:
    """Move `--question TEXT` into `args.question` (the positional), refusing both at once."""
    option = getattr(args, "question_option", None)
    if option is None:
        return
    if args.question is not None:
        raise UsageError("give the question once: in quotes or with --question, not both.")
    args.question = option


def check_given(argument: str | None, file: str | None) -> None:
    """The checks that need no reading, so that `beamwise run` says them before it loads the engine (seconds)."""
    if argument is not None and file is not None:
        raise UsageError("give the question one way: in quotes (or with --question) or with --question-file, not both.")
    if argument is None and file is None:
        raise UsageError(f"no question given; pass one in quotes, e.g. {EXAMPLE}, or --question-file PATH "
                         "(- reads standard input).")


def _read_bytes(file: str) -> bytes:
    try:
        if file == "-":
            return sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode("utf-8")
        return Path(file).read_bytes()
    except OSError as error:
        where = "standard input" if file == "-" else f"the question file {file}"
        raise UsageError(f"cannot read {where} ({error.strerror or error}).") from error


def _decode(data: bytes, where: str) -> str:
    try:
        return decode_text(data)
    except UnicodeDecodeError as error:
        raise UsageError(f"the question in {where} is {not_utf8(error)}.") from error


def checked_argument(text: str, file_option: bool = True) -> str:
    """Bytes that were not UTF-8 reach Python as lone surrogates (`\\udcXX`): refuse them by position. Every
    command that takes --question asks this (`gui` and `bench` dropped the byte unsaid); `file_option`: the command
    also takes --question-file, which the advice then names."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        instead = ", or save it in a UTF-8 file and pass --question-file PATH" if file_option else ""
        raise UsageError(f"the question has bytes that are not UTF-8 text (at character {error.start}); "
                         f"write it as UTF-8{instead}.") from error
    return text
