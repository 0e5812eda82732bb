"""What a new user met on the command line: defaults in --help, no silent sample question, --db checked first,
one ratio format, one size format."""

from __future__ import annotations

import argparse
import json
import shlex

import pytest

import app.formatting as fmt
from app.cli import build_parser, main
from app.parser import DefaultsFormatter

TINY = ["--model", "synthetic:tiny-llama", "--max-steps", "1", "--step-tokens", "4"]


def test_run_help_shows_defaults(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: 4)" in text or "(default: 2)" in text  # beams / width
    assert "(default: auto)" in text and "(default: bundled)" in text
    assert "(default: \\n\\n)" in text  # the step delimiter as typed
    assert "sessions.db" in text  # where the database lives


def _options(parser, name="beamwise"):
    """(command, action) for every option of every subcommand, `--help` itself left out."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _options(sub, f"{name} {sub_name}")
        elif action.option_strings and not isinstance(action, argparse._HelpAction):
            yield name, action


def test_every_option_with_a_default_names_it_in_help():
    """The README says `--help` lists every option with its default: an option without a help text showed none
    (argparse prints nothing for it), and a default of 0 was taken for "no default" (0 == False)."""
    unnamed = [(name, action.option_strings[0]) for name, action in _options(build_parser())
               if action.default is not None and action.default is not False
               and "default" not in DefaultsFormatter("beamwise")._get_help_string(action)]
    assert unnamed == []
    assert build_parser().parse_args(["run", "q"]).seed == 0  # the default the next line names


def test_a_default_of_zero_is_shown(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "the same tree (default: 0)" in text  # --seed


@pytest.mark.parametrize(("argv", "help_of"), [(["run", "--no-such-option", "q"], "beamwise run"),
                                               (["sessions", "list", "--no-such-option"], "beamwise sessions list"),
                                               (["--no-such-option"], "beamwise")])
def test_an_unknown_option_points_to_its_commands_help(argv, help_of, capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(argv)
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (f"beamwise: error: unrecognized arguments: --no-such-option "
                                       f"(see `{help_of} --help`)\n")


@pytest.mark.parametrize(("argv", "read_as"), [(["bench", "--verifier", "prm"], "--verifier-endpoint"),
                                              (["bench", "--lookahead", "1"], "--lookahead-verify"),
                                              (["run", "--quest", "hi"], "--question-file")])
def test_an_option_is_never_read_as_a_longer_one_it_begins(argv, read_as, capsys):
    """argparse took a prefix of a command's option as that option: `bench --verifier prm` was refused in the words
    of --verifier-endpoint. Options are whole now; one another command takes is said to be that command's."""
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and read_as not in err
    assert err.startswith(f"beamwise: error: unrecognized arguments: {argv[1]}")
    if argv[1] != "--quest":
        assert f"; {argv[1]} is an option of beamwise run, beamwise plan, beamwise eval, beamwise gui, not of " \
               "beamwise bench (see `beamwise bench --help`)" in err


def test_no_command_takes_abbreviated_options():
    """Whole options only: a command's parsers take no abbreviation, its subcommands' neither."""
    parser = build_parser()
    assert all(not command.allow_abbrev for command in parser._commands())
    assert len(parser._commands()) > 8  # run, bench, plan, eval, gui, models and sessions with their subcommands


def test_every_argument_of_every_command_says_what_it_is_in_help():
    """`beamwise sessions export --help` listed `id` with no word on what it is (and so did show, rename, delete,
    import's path and models remove's name)."""
    silent = [(command.prog, action.dest) for command in build_parser()._commands() for action in command._actions
              if not action.help and action.dest != "help" and not isinstance(action, argparse._SubParsersAction)]
    assert silent == []


def test_run_without_a_question_is_an_error(capsys):
    assert main(["run", *TINY, "--no-save"]) == 2
    assert "no question given" in capsys.readouterr().err


def test_run_and_plan_take_the_question_with_question_as_gui_and_bench_do(capsys):
    """`run --question "..."` was read as an abbreviation of --question-file: "cannot read the question file ...".
    Both commands take it as the question; given twice, one line says to give it once."""
    assert main(["run", "--question", "What is 2+3?", *TINY, "--no-save", "--json"]) == 0
    assert '"question": "What is 2+3?"' in capsys.readouterr().out.splitlines()[0]
    prompt_tokens = []
    for question in (["--question", "What is 2+3?"], ["What is 2+3?"], []):
        assert main(["plan", *question, *TINY, "--json"]) == 0
        prompt_tokens.append(json.loads(capsys.readouterr().out)["prompt_tokens"])
    assert prompt_tokens[0] == prompt_tokens[1] > prompt_tokens[2]  # the question counted, either way
    for command in (["run", "--no-save"], ["plan"]):
        assert main([*command, "What is 2+3?", "--question", "Why?", *TINY]) == 2
        err = capsys.readouterr().err
        assert err == "beamwise: error: give the question once: in quotes or with --question, not both.\n"
    assert main(["run", "--question", "hi", "--question-file", "q.txt", *TINY]) == 2
    assert "give the question one way: in quotes (or with --question) or with --question-file, not both" in \
        capsys.readouterr().err


def test_bad_db_is_refused_before_the_model_loads(tmp_path, monkeypatch, capsys):
    import engine.models

    def refuse(*args, **kwargs):
        raise AssertionError("the model must not load before --db is checked")

    monkeypatch.setattr(engine.models, "load_model", refuse)
    folder = tmp_path / "a-folder.db"
    folder.mkdir()
    assert main(["run", "hi", "--model", "bundled", "--db", str(folder)]) == 2
    assert "beamwise: error:" in capsys.readouterr().err


@pytest.mark.parametrize(("value", "text"), [(0.0012, "0.0012x"), (0.98, "0.98x"), (3.4, "3.4x"), (None, "-")])
def test_one_ratio_format(value, text):
    assert fmt.ratio(value) == text


@pytest.mark.parametrize(("value", "text"), [(0, "0 B"), (1500, "1.5 kB"), (32_000_000, "32.0 MB"),
                                             (4.7e9, "4.7 GB")])
def test_sizes_in_the_units_options_take(value, text):
    assert fmt.size(value) == text


def test_axis_ticks_and_durations():
    assert fmt.axis_size(32_000_000) == "32 MB"
    assert fmt.axis_size(0) == "0 B"
    assert fmt.seconds(0.21) == "0.21 s" and fmt.seconds(4.71) == "4.7 s" and fmt.seconds(72) == "1 min 12 s"
    durations = [fmt.seconds(v) for v in (0.00095, 0.0125, 0.00001, 0.0, 0.0999, 0.0000999)]
    assert durations == ["0.95 ms", "12 ms", "10 µs", "0 s", "100 ms", "100 µs"]
    near = [fmt.seconds(v) for v in (9.94, 9.96, 10.4, 59.4, 59.6)]  # a value that rounds up takes the next form
    assert near == ["9.9 s", "10 s", "10 s", "59 s", "1 min 0 s"]


def test_a_recorded_run_names_its_session_for_a_follow_up(tmp_path, capsys):
    """The README's conversation starts `beamwise run "..."` then `beamwise run --session 1 "..."`: the first run
    must say which session it was recorded as, or a new user has no id to follow up on."""
    db = str(tmp_path / "my sessions.db")
    assert main(["run", "What is 2+3?", *TINY, "--db", db]) == 0
    err = capsys.readouterr().err
    hint = f"beamwise run --session 1 --db '{db}' --model synthetic:tiny-llama \"...\""
    assert f"beamwise: recorded as session 1; ask a follow-up with: {hint}" in err, err
    assert main(["run", "--session", "1", "And times 4?", *TINY, "--db", db]) == 0
    assert "recorded as session 2;" in capsys.readouterr().err


def test_the_follow_up_hint_run_as_given_continues_the_conversation_just_recorded(tmp_path, capsys):
    """The hint left out --db and --model: run as given, it read the default database and went after that
    database's session 1, another conversation, on the bundled model."""
    assert main(["run", "Name a colour.", *TINY]) == 0  # the default database's session 1
    capsys.readouterr()
    db = str(tmp_path / "d.db")
    assert main(["run", "What is 2+3?", *TINY, "--db", db]) == 0
    hint = capsys.readouterr().err.split("ask a follow-up with: ")[1].splitlines()[0]
    argv = [word if word != "..." else "And times 4?" for word in shlex.split(hint)][1:]
    assert main([*argv, "--max-steps", "1", "--step-tokens", "4"]) == 0
    assert "recorded as session 2;" in capsys.readouterr().err
    assert main(["sessions", "show", "2", "--db", db]) == 0
    shown = capsys.readouterr().out
    assert "What is 2+3?" in shown and "Name a colour." not in shown and "synthetic:tiny-llama" in shown, shown
    assert main(["run", "hi", *TINY, "--no-save"]) == 0
    assert "recorded as" not in capsys.readouterr().err


def test_runs_first_line_gives_the_whole_kv_budget_and_the_generators_part(capsys):
    """Before, `--kv-budget 1MB --verifier self-judge` printed 'KV budget 500,000 B', the generator's part alone,
    where the README says the line gives --kv-budget's exact bytes. --json keeps its fields' meanings."""
    budget = [*TINY, "--kv-budget", "1MB", "--no-save"]
    assert main(["run", "What is 2+3?", *budget, "--verifier", "self-judge"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith("KV budget 1,000,000 B (500,000 B for the generator)"), first
    assert main(["run", "What is 2+3?", *budget]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("KV budget 1,000,000 B")
    assert main(["run", "What is 2+3?", *budget, "--verifier", "self-judge", "--json"]) == 0
    started = json.loads(capsys.readouterr().out.splitlines()[0])
    assert (started["kv_budget_bytes"], started["verifier_kv_budget_bytes"]) == (500_000, 500_000)
    assert started["cache"]["kv_budget_bytes"] == 1_000_000


def test_the_top_level_help_names_every_command():
    """`beamwise --help` opens with a sentence of its commands; it had left out plan and models."""
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert [name for name in commands if name not in parser.description] == []


@pytest.mark.parametrize(("extra", "said"), [
    (["--request-timeout", "5"], "--request-timeout is for a server"),
    (["--request-timeout", "0"], "--request-timeout is for a server"),
    (["--policy", "in_device", "--no-inter-beam"], "--policy in_device has none of them"),
    (["--policy", "layerwise", "--no-prefix-order"], "--policy layerwise has none of them"),
    (["--policy", "headwise", "--no-prefetch"], "--policy headwise has none of them"),
    (["--no-prefix-cache", "--prefix-cache-ram", "1GB"], "size the prefix cache, which is off"),
    (["--method", "greedy", "--temperature", "0.5"], "greedy takes the most likely token"),
    (["--method", "greedy", "--top-p", "0.5"], "greedy takes the most likely token"),
])  # fmt: skip
def test_options_that_would_do_nothing_are_refused_before_the_model_loads(capsys, extra, said):
    """Each ran as if it had not been given while its neighbours were refused: a local run's --request-timeout, lbs's
    switches under another policy, a prefix cache's size with the cache off, a greedy run's sampling settings (which
    its session recorded as used)."""
    assert main(["run", "What is 2+3?", *TINY, "--no-save", *extra]) == 2
    assert said in capsys.readouterr().err


def test_the_same_options_run_where_they_do_something(capsys):
    for extra in (["--policy", "auto", "--no-prefetch"], ["--policy", "lbs", "--kv-budget", "1MB", "--no-inter-beam"],
                  ["--method", "beam", "--temperature", "0.5"], ["--prefix-cache-ram", "1GB"]):
        assert main(["run", "What is 2+3?", *TINY, "--no-save", *extra]) == 0, extra


@pytest.mark.parametrize(("policy", "small", "enough"), [("lbs", "140KB", "184.4kB"),
                                                        ("layerwise", "700KB", "831.5kB")])
def test_a_budget_below_what_a_later_step_needs_is_said_when_the_run_starts(capsys, policy, small, enough):
    """It failed at step 2 with no word before, though the budget every step needs is known at the start."""
    from engine.errors import format_bytes_up

    argv = ["run", "What is 17 * 23?", "--model", "synthetic:tiny-llama", "--beams", "4", "--width", "2",
            "--max-steps", "3", "--step-tokens", "16", "--seed", "5", "--threads", "1", "--step-delimiter", "none",
            "--no-save", "--policy", policy]
    assert main([*argv, "--kv-budget", small]) == 2
    err = capsys.readouterr().err
    note = f"beamwise: note: this KV budget is below what the search's longest step may need, so a step may be " \
           f"refused: --kv-budget {enough.replace('kB', ' kB')} is enough for every step"
    assert note in err and err.index(note) < err.index("error:")
    assert main([*argv, "--kv-budget", enough]) == 0
    assert "note: this KV budget" not in capsys.readouterr().err
    assert main([*argv, "--kv-budget", small, "--json"]) == 2
    started = json.loads(capsys.readouterr().out.splitlines()[0])
    assert format_bytes_up(started["every_step_kv_budget_bytes"]) == enough.replace("kB", " kB")  # exact bytes


def test_every_on_off_option_shows_its_default_in_help():
    """`--speculative, --no-speculative` showed no default (a False default read as nothing to show), where README
    says every option is listed with its default; `--prefix-order` showed `True`."""
    import argparse

    from app.cli import build_parser

    parser = build_parser()
    for command in ("run", "eval", "gui", "plan"):
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
        formatter = sub._get_formatter()
        for action in sub._actions:
            if isinstance(action, argparse.BooleanOptionalAction):
                shown = formatter._get_help_string(action)
                assert "(default: on" in shown or "(default: off" in shown, (command, action.option_strings, shown)


def test_a_follow_up_to_a_missing_session_names_the_database_it_looked_in(tmp_path, capsys, monkeypatch):
    """The store's hint names a --db that is not the default database (compared resolved: the default one under
    another spelling is the default), so `run --session` needs no hint of its own."""
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    assert main(["run", "What is 2+3?", *TINY]) == 0
    other = tmp_path / "other.db"
    assert main(["run", "What is 2+3?", *TINY, "--db", str(other)]) == 0
    capsys.readouterr()
    for db, hint in [(None, "Run `beamwise sessions list` to see the ids."),
                     (str(tmp_path / "data" / ".." / "data" / "sessions.db"), "Run `beamwise sessions list` to see"),
                     (str(other), f"Run `beamwise sessions list --db {other}` to see the ids.")]:
        assert main(["run", "--session", "99", "again", *TINY, *(["--db", db] if db else [])]) == 2
        assert hint in capsys.readouterr().err
