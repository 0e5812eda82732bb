"""What a new user met on the command line: defaults in --help, no silent sample question, --db checked first,
one ratio format, one size format."""

from __future__ import annotations

import pytest

import app.formatting as fmt
from app.cli import build_parser, main

TINY = ["--model", "synthetic:tiny-llama", "--max-steps", "1", "--step-tokens", "4"]


def test_run_help_shows_defaults(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: 4)" in text or "(default: 2)" in text  # beams / width
    assert "(default: auto)" in text and "(default: bundled)" in text
    assert "(default: \\n\\n)" in text  # the step delimiter as typed
    assert "sessions.db" in text  # where the database lives


def test_run_without_a_question_is_an_error(capsys):
    assert main(["run", *TINY, "--no-save"]) == 2
    assert "no question given" in capsys.readouterr().err


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
