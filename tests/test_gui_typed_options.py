"""`beamwise gui OPTIONS`: every option typed wins over the remembered settings whatever its value, and the options
not typed keep the remembered values (`gui --model bundled --beams 4 --width 2`, all three their defaults, ran the
remembered tiny-llama with beams 2 and width 3)."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

pytest.importorskip("pytestqt")

from app import options
from app.cli import build_parser
from app.gui import launch
from app.gui import settings as saved
from app.options import add_search_options
from engine.config import CacheConfig, ModelSpec, SearchConfig

REMEMBERED = (ModelSpec(source="synthetic:tiny-llama"), SearchConfig(beams=2, width=3, temperature=0.3),
              CacheConfig(policy="layerwise", prefix_cache=True))


@pytest.fixture(autouse=True)
def _no_calibration(tmp_path, monkeypatch):
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path / "config"))  # no saved verify-skip thresholds


@pytest.fixture
def remembered(qsettings):
    saved.save_configs(qsettings, *REMEMBERED)  # as an earlier window left them
    return qsettings


def opened(keep_window, settings, argv: list[str]):
    """The window `beamwise ARGV` opens (app/cli.py keeps the command line as `args.argv`), and the configs its
    settings panel shows."""
    args = build_parser().parse_args(argv)
    args.argv = argv
    window = keep_window(launch._build_window(args, settings, None, interactive=False))
    return window.controls.configs()


def test_options_typed_with_their_default_values_win_over_remembered_ones(keep_window, remembered):
    model, search, cache = opened(keep_window, remembered, [
        "gui", "--model", "bundled", "--beams", "4", "--width", "2", "--question", "q"])
    assert (model.source, search.beams, search.width) == ("bundled", 4, 2)  # typed: each its default value
    assert (search.temperature, cache.policy) == (0.3, "layerwise")  # not typed: as remembered


def test_nothing_typed_keeps_every_remembered_setting(keep_window, remembered):
    model, search, cache = opened(keep_window, remembered, ["gui"])
    assert (model.source, search.beams, search.width, search.temperature, cache.policy) == (
        "synthetic:tiny-llama", 2, 3, 0.3, "layerwise")


def test_typed_options_are_read_from_the_command_line_whatever_their_values():
    assert options.typed_options(["--beams", "4", "--no-prefix-cache", "--kv-budget=64MB", "--question", "q",
                                 "--model", "bundled"]) == {"beams", "prefix_cache", "kv_budget", "model"}
    assert options.typed_options([]) == set()
    assert options.typed_options(["--beams"]) is None  # not a command line beamwise takes: nothing known
    assert options.typed_options(["--beams", "many"]) is None


def test_args_without_their_command_line_fall_back_to_values_that_differ_from_defaults():
    """Callers that build `args` themselves (tests): what was typed is then not known, and an option counts as
    typed where its value differs from its default."""
    args = build_parser().parse_args(["gui", "--beams", "4", "--width", "5"])
    assert launch.command_line_options(args) is None
    model, search, _ = launch.explicit_configs(args, REMEMBERED, given=launch.command_line_options(args))
    assert (model.source, search.beams, search.width) == ("synthetic:tiny-llama", 2, 5)


def test_every_search_option_names_a_config_field():
    """An option added to add_search_options without a field of that name (nor an entry in FIELD_OF_OPTION) would
    be typed and then silently dropped for the remembered value."""
    parser = argparse.ArgumentParser(add_help=False)
    add_search_options(parser)
    fields = {f.name for config in REMEMBERED for f in dataclasses.fields(config)}
    not_configs = {"threads"}  # torch's thread pool, set before the window (app/cli.py)
    unmapped = [dest for dest in (action.dest for action in parser._actions)
                if dest not in not_configs and launch.FIELD_OF_OPTION.get(dest, dest) not in fields]
    assert unmapped == []


def test_remembered_settings_that_cannot_go_with_a_typed_option_give_way(capsys):
    """A remembered PRM on the CPU with `--verifier self-judge` typed: the search settings are the command line's
    (a self-judge verifier cannot run on the CPU alone), the model and cache settings still remembered ones."""
    remembered = (REMEMBERED[0], SearchConfig(beams=2, verifier="prm", verifier_model="synthetic:tiny-skywork-prm",
                                              verifier_device="cpu"), REMEMBERED[2])
    args = build_parser().parse_args(["gui", "--verifier", "self-judge"])
    model, search, cache = launch.explicit_configs(args, remembered, given={"verifier"})
    assert (search.verifier, search.verifier_device, search.beams) == ("self-judge", "auto", 4)
    assert (model.source, cache.policy) == ("synthetic:tiny-llama", "layerwise")
    assert "the remembered settings do not go with the options given" in capsys.readouterr().err


def test_beamwise_keeps_its_command_line_for_the_window(monkeypatch):
    """app/cli.py hands `gui` the command line as typed (`beamwise` alone is `beamwise gui`)."""
    import app.cli as cli

    seen: list[list[str]] = []
    real = cli.build_parser

    def recording_parser():
        parser = real()
        parse = parser.parse_args

        def parse_args(argv):
            args = parse(argv)
            args.handler = lambda a: seen.append(a.argv) or 0
            return args

        parser.parse_args = parse_args
        return parser

    monkeypatch.setattr(cli, "build_parser", recording_parser)
    assert cli.main(["gui", "--beams", "4"]) == 0 and cli.main([]) == 0
    assert seen == [["gui", "--beams", "4"], ["gui"]]


def test_thresholds_typed_for_the_window_win_over_a_calibration(keep_window, qsettings, tmp_path, monkeypatch):
    """`gui --verify-skip --tau-conf 0.3 --r-gap 0 --entropy-exit --entropy-theta 8 --entropy-delta 3` with an
    early_exit.json saved ran the calibration's tau 1.0, r_gap 0.999 and the exit off, without a word."""
    from app.early_exit import save_thresholds
    from tests.test_exit_thresholds_given import OFF, TYPED

    save_thresholds(OFF)
    _, search, _ = opened(keep_window, qsettings, ["gui", "--verifier", "self-judge", *TYPED, "--question", "q"])
    assert (search.tau_conf, search.r_gap, search.entropy_theta, search.entropy_delta) == (0.3, 0.0, 8.0, 3.0)
    assert search.verify_skip and search.entropy_exit
