"""Options that would do nothing as given are refused (app/options.py `_refuse_unused`): the speculation's sizes
without --speculative, --speculative with --lookahead (README: "--lookahead runs do not speculate"), and greedy's
--temperature / --top-p typed at their default values (only other values were refused)."""

from __future__ import annotations

import pytest

from app.cli import main

TINY = ["--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2", "--step-tokens", "4", "--max-steps", "1",
        "--no-save"]


@pytest.mark.parametrize(("options", "named"), [
    (["--speculative-continuations", "1"], "--speculative-continuations"),
    (["--speculative-ratio", "0.5"], "--speculative-ratio"),
    (["--speculative-ratio", "0.85"], "--speculative-ratio"),  # the default value, typed
    (["--speculative", "--lookahead", "1"], "--lookahead runs do not speculate"),
    (["--method", "greedy", "--temperature", "0.8"], "--temperature"),  # the default value, typed
    (["--method", "greedy", "--top-p", "0.95"], "--top-p"),
])
def test_an_option_that_would_do_nothing_is_refused(capsys, options: list[str], named: str) -> None:
    assert main(["run", "What is 2+3?", *TINY, *options]) == 2
    err = capsys.readouterr().err
    assert err.startswith("beamwise: error: ") and named in err, err


def test_args_built_without_a_command_line_compare_values() -> None:
    """A namespace with no `argv` (a caller's own): an option at its default value is taken as not given."""
    from app.options import configs_from_args, search_parser

    args = search_parser().parse_args(["--method", "greedy", "--temperature", "0.8"])
    args.backend = "local"
    assert configs_from_args(args)[1].method == "greedy"
