"""`bench --help` listed --verifier-endpoint, which bench always refuses, and named the PRM `--verifier prm`, which
bench does not take; a bench whose rows all did not run said in_device "ran without the KV budget"; `beamwise --help`
listed five of the seven `sessions` subcommands; `bench --no-local` without a server was taken without a word."""

from __future__ import annotations

import pytest

from app.cli import build_parser, main
from engine.bench import BenchReport, PolicyResult, Workload, _notes

BUDGETED = Workload(model="synthetic:tiny-llama", kv_budget_bytes=8_000_000, dtype="bfloat16")


def _help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args([*argv, "--help"])
    assert stop.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # argparse's line breaks fall anywhere


def _error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["bench", *argv]) == 2
    return capsys.readouterr().err


def test_bench_help_lists_no_option_bench_refuses_and_names_its_own_prm_option(capsys):
    text = _help(capsys, "bench")
    assert "--verifier-endpoint" not in text and "--verifier prm" not in text
    assert "with --speculative and a PRM (--prm PATH)" in text
    assert "--verifier-endpoint URL" in _help(capsys, "run")  # run still lists it
    assert "with --speculative and a PRM (--verifier prm)" in _help(capsys, "run")


@pytest.mark.parametrize("server", [[], ["--backend", "openai", "--server", "http://127.0.0.1:9", "--served-model",
                                         "m"]])
def test_bench_refuses_a_prm_server_in_words_true_for_bench(capsys, server):
    """A local bench said "add --backend openai to use it", which then refused it as well."""
    err = _error(capsys, *server, "--verifier-endpoint", "http://127.0.0.1:9")
    assert "leave --verifier-endpoint out" in err and "add --backend openai" not in err


def test_no_local_without_a_server_is_refused(capsys):
    err = _error(capsys, "--no-local", "--plan-only")
    assert "--no-local leaves out the run here beside a server's: add --backend openai" in err


def _row(name: str, ok: bool, timed_out: bool = False, diff: float | None = None) -> PolicyResult:
    return PolicyResult(name, ok, "" if ok else "not run: the bench's time limit (1 s) had passed",
                        timed_out=timed_out, teacher_forced_max_logit_diff=diff)


def test_the_notes_name_only_rows_that_ran():
    report = BenchReport(BUDGETED, "cuda:0", emulated=False, plan_only=False, reference_max_abs_logit=20.0,
                         time_limit_seconds=1.0)
    report.results = [_row("in_device", False, timed_out=True), _row("layerwise", False, timed_out=True),
                      _row("in_device:+speculative", False, timed_out=True)]
    notes = _notes(report, forced=True)
    assert not any("without the KV budget" in n for n in notes)
    assert not any("rounding steps are not a policy error" in n for n in notes)  # no row was teacher-forced
    assert any(n.startswith("the time limit (1 s) stopped or did not start: in_device, layerwise") for n in notes)
    report.results[0] = _row("in_device", True, diff=0.0)
    notes = _notes(report, forced=True)
    (unbounded,) = [n for n in notes if "without the KV budget" in n]
    assert unbounded.startswith("in_device ran without the KV budget")  # not in_device:+speculative, which did not
    assert any("rounding steps are not a policy error" in n for n in notes)


def test_the_top_level_help_names_every_sessions_subcommand(capsys):
    text = _help(capsys)
    line = text[text.index("sessions recorded"):]
    for command in ("list", "show", "export", "import", "rename", "delete", "move-aside"):
        assert command in line.split("gui")[0], command
