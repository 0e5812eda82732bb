"""`beamwise run`: the JSON Lines contract, human output, and exit 2 with one line for bad input."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import main

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2", "--step-tokens", "4", "--max-steps", "2"]


def test_json_lines_contract(capsys, tmp_path):
    assert main(["run", "What is 2+3?", *TINY, "--json", "--db", str(tmp_path / "s.db")]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    types = [line["type"] for line in lines]
    assert types[0] == "run_started" and types[-1] == "run_finished"
    assert lines[0]["search"]["beams"] == 2
    scored = [line for line in lines if line["type"] == "candidate_scored"]
    assert len(scored) == 8 and {"step", "id", "parent", "text", "score"} <= scored[0].keys()
    selected = [line for line in lines if line["type"] == "step_selected"]
    assert [len(s["kept"]) for s in selected] == [2, 2] and all(isinstance(s["pruned"], list) for s in selected)
    assert {"h2d_bytes", "d2h_bytes"} <= next(x for x in lines if x["type"] == "transfer_stats").keys()
    assert any(x["type"] == "memory_snapshot" for x in lines)
    finished = lines[-1]
    assert isinstance(finished["answer"], str) and len(finished["path"]) == 2
    assert finished["path"][-1] in selected[-1]["kept"]


def test_human_output_shows_candidates_kept_and_answer(capsys):
    assert main(["run", "What is 2+3?", *TINY, "--no-save"]) == 0
    out = capsys.readouterr().out
    assert "== step 1" in out and "== step 2" in out
    assert out.count("parent -") == 4  # the first step's candidates come from the prompt
    assert "kept [" in out and "chosen path:" in out and "answer:" in out
    assert "KV traffic (emulated GPU):" in out  # no CUDA here: every traffic figure says so


def test_the_questions_own_kv_traffic_is_printed_before_step_1s(capsys):
    """Offloading the question's KV (lbs on a small budget) moves bytes before step 1: in the totals, in no step's."""
    args = ["run", "What is 2+3?", *TINY, "--policy", "lbs", "--kv-budget", "140k", "--no-prefix-cache", "--no-save"]
    assert main([*args, "--json"]) == 0
    first = next(json.loads(line) for line in capsys.readouterr().out.splitlines() if '"transfer_stats"' in line)
    d2h = first["d2h_bytes"] - first["step_d2h_bytes"]
    assert d2h > 0
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"KV traffic of the question before step 1 (emulated GPU): H2D 0 B, D2H {d2h:,} B" in out
    assert out.count("KV traffic of the question") == 1  # once, not at every step


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "", *TINY], "question is empty"),
        (["run", "word " * 3000, *TINY, "--no-save"], "context"),
        (["run", "hi", "--model", "/no/such/model"], "does not exist"),
        (["run", "hi", *TINY, "--beams", "0"], "beams must be at least 1"),
        (["run", "hi", *TINY, "--width", "-1"], "width"),
        (["run", "hi", *TINY, "--max-steps", "0"], "max steps"),
        (["run", "hi", *TINY, "--kv-budget", "lots"], "is not a size"),
        (["run", "hi", *TINY, "--policy", "lbs", "--kv-budget", "1KB", "--no-save"],
         "is enough for every step of this search"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, args, message):
    assert exit_code(args) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("error:") == 1 and "Traceback" not in err


def exit_code(args: list[str]) -> int:
    """main's return value, or the code argparse exits with for options it cannot parse."""
    try:
        return main(args)
    except SystemExit as exit_:
        return exit_.code


def test_corrupt_model_file_exits_2(tmp_path, capsys):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"not a model at all" * 100)
    assert main(["run", "hi", "--model", str(bad)]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_console_script_runs_as_a_process(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "app.cli", "run", "hi", *TINY, "--json", "--no-save"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1])["type"] == "run_finished"


@pytest.mark.parametrize(("argv", "code"), [(["sessions", "list", "--db", "DB"], 0), (["run"], 2),
                                            (["run", "q", "--question-file", "f"], 2)])
def test_help_sessions_and_a_run_without_a_question_do_not_import_torch(tmp_path, argv, code):
    """Every command builds the whole parser; only the commands that run a model may pay torch's seconds."""
    from app.store import SessionStore

    with SessionStore(tmp_path / "s.db"):  # `sessions list --db` makes no database: it reads one
        pass
    argv = [str(tmp_path / "s.db") if a == "DB" else a for a in argv]
    script = (f"import sys; from app.cli import main; code = main({argv!r}); "
              "print(sorted(m for m in ('torch', 'transformers', 'PySide6') if m in sys.modules), code)")
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.stdout.splitlines()[-1] == f"[] {code}", out.stdout + out.stderr


def test_version_names_beamwise_torch_transformers_qt_and_python_without_importing_them():
    """What a bug report needs, from the installed metadata: `beamwise --version` stays instant."""
    from app.version import version

    script = ("import sys\nfrom app.cli import main\ntry:\n    main(['--version'])\nexcept SystemExit as end:\n"
              "    print(sorted(m for m in ('torch', 'transformers', 'PySide6') if m in sys.modules), end.code)")
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    line, imported = out.stdout.splitlines()
    expected = f"beamwise {version()} (torch {version('torch')}, transformers {version('transformers')}, "
    assert line.startswith(expected) and "PySide6-Essentials 6." in line and ", Python 3." in line
    assert imported in ("[] 0", "[] None") and version() != "not installed"


@pytest.mark.parametrize("typed", ["→\\n", "\\n\\n", "none", "§\\t"])
def test_the_command_line_and_the_window_read_a_delimiter_alike(typed):
    from app.cli import build_parser
    from app.options import parse_delimiter

    args = build_parser().parse_args(["run", "q", "--step-delimiter", typed])
    assert args.step_delimiter == parse_delimiter(typed)
    assert build_parser().parse_args(["run", "q", "--step-delimiter", "→\\n"]).step_delimiter == "→\n"


@pytest.mark.parametrize("command", ["run", "plan", "eval", "gui"])
def test_the_default_delimiter_reaches_the_search(command):
    """argparse passes a string default through `type`: the default of two real newlines was read as whitespace,
    so None, and every command-line search cut its steps by length only."""
    from app.cli import build_parser
    from app.options import configs_from_args
    from engine.config import SearchConfig

    extra = ["p.jsonl"] if command == "eval" else []
    args = build_parser().parse_args([command, *extra])
    assert configs_from_args(args)[1].step_delimiter == SearchConfig().step_delimiter == "\n\n"
    assert build_parser().parse_args(["run", "q", "--step-delimiter", " "]).step_delimiter == " "
    assert build_parser().parse_args(["run", "q", "--step-delimiter", ""]).step_delimiter is None


@pytest.mark.parametrize(("given", "said"), [
    (["--tau-conf", "0.8"], "--tau-conf and --r-gap set verify-skip's thresholds: add --verify-skip"),
    (["--entropy-delta", "1"], "--entropy-theta and --entropy-delta set the entropy exit's thresholds"),
    (["--audit-early-exit"], "--audit-early-exit audits an early exit: add --verify-skip or --entropy-exit"),
    (["--verifier-kv-share", "0.2"], "--verifier-kv-share gives the verifier part of the KV budget, and logprob"),
    (["--speculative", "--policy", "headwise"], "--speculative extends beams with in_device and lbs"),
    (["--no-save", "--db", "x.db"], "--db names the database to record in, and --no-save records nothing"),
])  # fmt: skip
def test_an_option_that_would_do_nothing_is_refused(capsys, given, said):
    """Each was taken without a word and the search ran as if it had not been given (--verifier-model without
    --verifier prm was the one refused)."""
    assert main(["run", "q", "--model", "synthetic:tiny-llama", *given]) == 2
    assert said in capsys.readouterr().err


@pytest.mark.parametrize(("given", "said"), [
    (["--pcie-gbps", "1e-300"], "PCIe bandwidth must be 0.001 to 10,000 GB/s (got 1e-300)"),
    (["--kv-budget", "99999999999999999999999TB"], "is more than any machine holds (at most 1,000,000 TB)"),
])  # fmt: skip
def test_absurd_sizes_and_bandwidths_are_refused(capsys, given, said):
    """A PCIe of 1e-300 GB/s printed a step time of 300 digits; a budget of 1e23 TB was shown as
    100000000000000008388608.0 TB and planned green."""
    try:
        code = main(["plan", "q", "--model", "synthetic:tiny-llama", *given])
    except SystemExit as stop:  # argparse's own refusal of a --kv-budget it cannot read
        code = stop.code
    assert code == 2 and said in capsys.readouterr().err


def test_an_option_after_double_dash_is_not_called_another_commands(capsys):
    """`sessions show -- 999 --db a.db` said --db was an option of other commands, not of sessions show."""
    with pytest.raises(SystemExit) as stop:
        main(["sessions", "show", "--", "999", "--db", "a.db"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "after -- every word is read as an argument, so --db was not read" in err
    assert "not of beamwise sessions show" not in err


def test_a_broken_delimiter_escape_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["run", "q", "--step-delimiter", "\\x4"])
    # as typed: it said '\\\\x4' (Python's repr), which is another, whole delimiter
    assert stop.value.code == 2 and 'the step delimiter "\\x4" has a broken escape' in capsys.readouterr().err


SWITCH_ARGS = [
    ([], None, None),
    (["--prefix-order", "--speculative"], True, True),
    (["--no-prefix-order", "--no-speculative"], False, False),
    (["--no-prefix-order", "--speculative"], False, True),
]


@pytest.mark.parametrize(("flags", "prefix_order", "speculative"), SWITCH_ARGS)
def test_run_switches_reach_the_cache_config(flags, prefix_order, speculative):
    from app.cli import build_parser
    from app.options import configs_from_args
    from engine.config import CacheConfig

    cache = configs_from_args(build_parser().parse_args(["run", "q", *flags]))[2]
    default = CacheConfig()
    assert cache.prefix_order == (default.prefix_order if prefix_order is None else prefix_order)
    assert cache.speculative == (default.speculative if speculative is None else speculative)


@pytest.mark.parametrize(("flags", "prefix_order", "speculative"), SWITCH_ARGS)
def test_bench_switches_reach_every_policys_cache_config(flags, prefix_order, speculative, monkeypatch):
    """bench forces a switch for every policy of the ladder; without the flag each rung's name decides."""
    import app.bench_cli as bench_cli
    import engine.bench
    from engine.bench import LADDER, BenchReport, PolicyResult
    from engine.config import CacheConfig

    seen = []

    def fake_bench(workload, policies, **options):
        seen.append(workload)
        return BenchReport(workload, "cpu", emulated=True, plan_only=True, results=[PolicyResult("in_device", True)])

    monkeypatch.setattr(engine.bench, "run_bench", fake_bench)  # bench_cli imports it when a bench runs
    monkeypatch.setattr(bench_cli, "format_report", lambda report: "")
    assert main(["bench", "--plan-only", *flags]) == 0
    (workload,) = seen
    assert (workload.prefix_order, workload.speculative) == (prefix_order, speculative)
    default = CacheConfig()
    for name, rung in LADDER.items():
        cache = workload.cache(name)
        named = rung.get("prefix_order", default.prefix_order), rung.get("speculative", default.speculative)
        assert cache.prefix_order == (named[0] if prefix_order is None else prefix_order), name
        assert cache.speculative == (named[1] if speculative is None else speculative), name


def test_run_prints_each_steps_idle_slots_what_speculation_filled_and_the_goodput(capsys):
    """`beamwise run --speculative`: per step the decode's forward calls and idle row-slots after speculation (of
    those before it), what pruned candidates' speculation freed, and at the end goodput and the speculated totals."""
    import re

    args = ["run", "What is 7 x 8?", "--model", "synthetic:tiny-llama", "--no-save", "--speculative",
            "--step-delimiter", "c", "--beams", "3", "--width", "3"]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    decode = [line for line in out.splitlines() if line.startswith("  decode: ")]
    lent = r"(?:, (\d+) runs? in other beams' rows)?"  # children's runs in rows whose own beam was done
    shape = r"  decode: \d+ forward call\(s\), idle (\d+) (of (\d+) slots \((\d+) tok speculated" + lent + r"\)|slots)"
    steps = [re.fullmatch(shape, line) for line in decode]
    assert steps and all(steps) and any(m[4] for m in steps)
    assert all(int(m[3]) == int(m[1]) + int(m[4]) for m in steps if m[4])  # before = after + what was speculated
    assert re.search(r"\n  \d+ speculated token\(s\) of pruned candidates freed\n", out)
    final = re.search(r"\ngoodput ([\d.]+) tokens/s \(each kept beam's path tokens per second of its completion "
                      r"time\); speculated (\d+) tokens, (\d+) kept \(\d+%\)" + lent + r"\n", out)  # fmt: skip
    assert final and float(final[1]) > 0 and int(final[3]) <= int(final[2])
    assert int(final[2]) == sum(int(m[4] or 0) for m in steps)  # the run's total is the steps' sum
    assert int(final[4]) == sum(int(m[5] or 0) for m in steps) > 0  # rows lent to other beams' children, too


def test_a_run_prints_to_a_cp1252_console_without_stopping(monkeypatch, tmp_path):
    raw = io.BytesIO()  # a Windows redirect or pipe: stdout's encoding is the ANSI code page, not UTF-8
    monkeypatch.setattr("sys.stdout", io.TextIOWrapper(raw, encoding="cp1252", write_through=True))
    assert main(["run", "Πόσα μήλα; 苹果 🍎", *TINY, "--db", str(tmp_path / "s.db")]) == 0
    shown = raw.getvalue().decode("cp1252")
    assert "answer:" in shown and "?" in shown


def test_the_answer_line_replaces_control_characters_as_the_step_lines_and_sessions_show_do():
    """A model's answer is data: an escape or a DEL in it must not drive the terminal (README, "control characters
    are replaced in the terminal"); line breaks and tabs stay."""
    from app.run_printer import Printer
    from engine.events import RunFinished

    out = io.StringIO()
    answer = "o\x18dk7bwr\x7fbj \x1b[31mred\tx\nnext"
    Printer(out)(RunFinished(answer=answer, path=(1,), score=0.5, steps=1, candidate_tokens=8, seconds=1.0,
                             tokens_per_second=8.0))
    shown = out.getvalue().split("\nanswer:\n", 1)[1]
    assert shown == "o\ufffddk7bwr\ufffdbj \ufffd[31mred\tx\nnext\n"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("To solve this.", "'To solve this.'"),
        ("x" * 70, repr("x" * 70)),
        ("x" * 71, repr("x" * 69 + "…")),
        ("We add them.\nThen we multiply.", "'We add them.…'"),  # the next lines are cut too
        ("\n  We add them.  \n", "'We add them.'"),
        ("", "''"),
    ],
)
def test_a_candidates_row_marks_where_its_text_was_cut(text, shown):
    """Its first line was cut at 70 characters unmarked, and later lines dropped unsaid: the chosen path looked
    shorter than the answer printed below it (the exports mark their cuts with "…")."""
    from app.run_printer import Printer
    from engine.events import CandidateScored

    out = io.StringIO()
    Printer(out)(CandidateScored(step=1, id=3, parent=None, text=text, tokens=8, score=0.5, aggregate=0.5,
                                 finished=False, group=0))
    assert out.getvalue().rstrip("\n").endswith(f"path 0.500  {shown}"), out.getvalue()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "hi", "--kv-budget", "-5MB"], "argument --kv-budget: '-5MB' is negative; a size must be positive"),
        (["run", "hi", "--kv-budget", "-5"], "argument --kv-budget: '-5' is negative; a size must be positive"),
        (["run", "hi", "--prefix-cache-ram", "-1GB"], "argument --prefix-cache-ram: '-1GB' is negative"),
        (["run", "hi", "--prefix-cache-disk", "-1GB"], "argument --prefix-cache-disk: '-1GB' is negative"),
        (["bench", "--max-context", "--gpu-memory", "-24GB"], "argument --gpu-memory: '-24GB' is negative"),
        (["run", "hi", "--seed", "-1e3"], "argument --seed: invalid int value: '-1e3'"),
    ],
)
def test_a_negative_value_is_read_as_the_options_value_and_refused_in_its_words(capsys, args, message):
    """argparse took -5MB and -1e3 for options ("expected one argument"); they are the option's value."""
    assert exit_code(args) == 2
    err = capsys.readouterr().err
    assert message in err and "expected one argument" not in err


def test_a_negative_float_in_exponent_form_reaches_the_settings_check(capsys):
    assert exit_code(["run", "hi", *TINY, "--no-save", "--temperature", "-1e-3"]) == 2
    assert "temperature must be 0 (greedy) or more (got -0.001)" in capsys.readouterr().err


def test_an_option_without_its_value_is_still_said_to_lack_one(capsys):
    assert exit_code(["run", "hi", "--kv-budget", "--no-save"]) == 2
    assert "argument --kv-budget: expected one argument" in capsys.readouterr().err


@pytest.mark.parametrize("content", ["", "  \n\t\n"])
def test_an_empty_question_file_is_named_not_asked_for(tmp_path, capsys, content):
    empty = tmp_path / "empty.txt"
    empty.write_text(content, encoding="utf-8")
    assert exit_code(["run", "--question-file", str(empty), *TINY, "--no-save"]) == 2
    err = capsys.readouterr().err
    assert f"the question file {empty} is empty" in err and "or --question-file PATH" not in err


def test_an_empty_standard_input_is_named(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"")))
    assert exit_code(["run", "-", *TINY, "--no-save"]) == 2
    assert "standard input is empty" in capsys.readouterr().err


@pytest.mark.parametrize(("command", "given", "said"), [
    ("run", ["--lookahead", "17"], "--lookahead must be 0..16 greedy steps (got 17)."),
    ("run", ["--method", "dvts", "--lookahead", "1"], "--lookahead works with the beam method only, not --method dvts"),
    ("plan", ["--method", "greedy", "--lookahead", "2"], "--lookahead works with the beam method only, not --method "
                                                         "greedy"),
])
def test_lookahead_refusals_name_the_option_typed(capsys, command, given, said):
    """They said SearchConfig's field ("lookahead must be 0..16", "set lookahead to 0 for dvts"), no option's name."""
    assert main([command, "What is 2+3?", *TINY, "--no-save" if command == "run" else "--json", *given]) == 2
    assert said in capsys.readouterr().err


def test_bench_prm_given_to_plan_names_plans_own_options(capsys):
    """It said only that --prm is bench's, not how plan takes a PRM."""
    with pytest.raises(SystemExit) as ended:
        main(["plan", "What is 2+3?", "--prm", "x"])
    assert ended.value.code == 2
    assert "beamwise plan takes a PRM as --verifier prm --verifier-model PATH" in capsys.readouterr().err


def test_a_prompt_past_the_context_is_said_with_thousands_separators():
    from engine.errors import InvalidPrompt
    from engine.search import check_prompt_fits

    with pytest.raises(InvalidPrompt, match=r"^The prompt is 160,141 tokens .* holds 8,192 and a step needs 1,024"):
        check_prompt_fits(160_141, 8192, 1024)


@pytest.mark.parametrize("command", [["run", "What is 2+3?", *TINY], ["sessions", "list"]])
def test_an_empty_db_is_said_to_be_empty(capsys, command):
    """`--db ""` was said as ". is a folder"."""
    assert main([*command, "--db", ""]) == 2
    assert "--db is empty: give a session database file" in capsys.readouterr().err
