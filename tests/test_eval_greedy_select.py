"""`--method greedy` took `--select majority|weighted` without a word, where `--temperature` is refused: a vote over
greedy's one final path picks that path whatever the rule (engine/methods/selection.py `choose`)."""

from __future__ import annotations

import pytest

from app.cli import build_parser, main
from app.options import UsageError, configs_from_args
from tests.test_eval_cli import TINY, write


def configs(*argv: str):
    return configs_from_args(build_parser().parse_args(["run", "What is 2+3?", *argv]))


@pytest.mark.parametrize("select", ["majority", "weighted"])
def test_a_vote_with_greedy_is_refused_as_sampling_is(select):
    with pytest.raises(UsageError, match=rf"^--select {select} votes among the final paths, and greedy has one: pick "
                       r"--method beam, dvts or best-of-n to vote, or leave it out\.$"):
        configs("--method", "greedy", "--select", select)


def test_the_other_methods_and_an_aggregation_with_greedy_are_taken():
    """A vote is the point of --select with the sampling methods; greedy's path score is still aggregated (the
    run's "chosen path ... (score S)" and the window's path score read it), so --aggregation does something."""
    assert configs("--method", "beam", "--select", "majority")[1].select == "majority"
    assert configs("--method", "greedy", "--select", "best", "--aggregation", "min")[1].aggregation == "min"


def test_eval_refuses_a_vote_with_greedy_before_it_runs(tmp_path, capsys):
    problems = write(tmp_path, '{"question": "What is 2+3?", "answer": "5"}')
    assert main(["eval", str(problems), *TINY, "--method", "greedy", "--select", "weighted", "--no-save"]) == 2
    captured = capsys.readouterr()
    assert "--select weighted votes among the final paths, and greedy has one" in captured.err
    assert "problems" not in captured.out


@pytest.mark.parametrize("option", [("--select", "majority"), ("--temperature", "0.5"), ("--top-p", "1.0")])
def test_eval_comparing_greedy_alone_refuses_what_greedy_ignores(tmp_path, capsys, option):
    """`--compare greedy` ran greedy alone and took a vote or a temperature without a word, where `--method greedy`
    refused them; the refusal names --compare's way on."""
    problems = write(tmp_path, '{"question": "What is 2+3?", "answer": "5"}')
    assert main(["eval", str(problems), *TINY, "--compare", "greedy", *option, "--no-save"]) == 2
    err = capsys.readouterr().err
    assert "greedy" in err and "add beam, dvts or best-of-n to --compare" in err


def test_eval_comparing_greedy_with_a_sampling_method_takes_a_vote(tmp_path, capsys):
    """With beam beside it, --select and --temperature do something (for beam)."""
    problems = write(tmp_path, '{"question": "What is 2+3?", "answer": "5"}')
    argv = ["eval", str(problems), *TINY, "--compare", "greedy,beam", "--select", "majority", "--temperature", "0.7",
            "--max-steps", "1", "--no-save"]
    assert main(argv) == 0
    assert "greedy" in capsys.readouterr().out
