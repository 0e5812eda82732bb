"""--lookahead-verify / --no-lookahead-verify where no look-ahead is ever scored, and --verifier-kv-share with the
PRM on the CPU, are refused as the other options that would do nothing are (they ran without a word)."""

from __future__ import annotations

import re

import pytest

from app.options import UsageError, configs_from_args, search_parser

PRM = ["--verifier", "prm", "--verifier-model", "synthetic:tiny-math-shepherd"]


def configs(*argv: str):
    args = search_parser().parse_args(list(argv))
    args.argv = ["run", *argv]  # as app/cli.py keeps it: what was typed, whatever its value
    return configs_from_args(args)


@pytest.mark.parametrize(("argv", "said"), [
    (["--lookahead-verify"], "--lookahead-verify switches the verifying of speculated next steps, and speculative "
                             "extension is off: add --speculative"),
    (["--no-lookahead-verify", *PRM], "--no-lookahead-verify switches the verifying of speculated next steps"),
    (["--speculative", "--lookahead-verify"], "the logprob verifier never scores one: pick --verifier prm"),
    (["--speculative", "--no-lookahead-verify", "--verifier", "self-judge"], "the self-judge verifier never"),
    (["--speculative", "--lookahead-verify", *PRM, "--entropy-exit", "--entropy-theta", "1", "--entropy-delta", "1"],
     "--entropy-exit stops that pass early, so none is scored: leave out one of them"),
    (["--verifier-kv-share", "0.3", *PRM, "--verifier-device", "cpu"],
     "--verifier-kv-share gives the verifier part of the device KV budget, and --verifier-device cpu keeps the PRM's "
     "KV in CPU memory, outside that budget: leave out one of them"),
])
def test_options_that_would_do_nothing_are_refused(argv, said):
    with pytest.raises(UsageError, match=re.escape(said)):
        configs(*argv)


@pytest.mark.parametrize("argv", [
    ["--speculative", "--lookahead-verify", *PRM],
    ["--speculative", "--no-lookahead-verify", *PRM],
    ["--speculative", *PRM, "--entropy-exit", "--entropy-theta", "1", "--entropy-delta", "1"],  # not typed: taken
    ["--verifier-kv-share", "0.3", *PRM],
    ["--verifier-device", "cpu", *PRM],
])
def test_the_same_options_where_they_act_are_taken(argv):
    _, search, cache = configs(*argv)
    assert cache.lookahead_verify is ("--no-lookahead-verify" not in argv)
    assert search.verifier == "prm"
