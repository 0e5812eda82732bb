"""bench, eval, models and plan: what the user gave wrong is one line and exit status 2 (a UsageError, or a
ConfigError from the engine's checks); a ValueError from inside Beamwise is a fault: `main` raises it, and the
console script shows its traceback, a line that says it is Beamwise's, and exit status 1.

Before, `main` took every plain ValueError of bench, eval and models for the user's (PLAIN_VALUE_ERRORS): a fault
there was one "beamwise: error:" line, exit 2, with no traceback to report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import INTERNAL_ERROR, main
from app.early_exit import Thresholds, ThresholdsNotSaved, save_thresholds
from app.options import UsageError
from engine.config import CacheConfig, SearchConfig, parse_bytes
from engine.errors import BeamwiseError, ConfigError
from engine.workload import Workload, check_names

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2", "--step-tokens", "4", "--max-steps", "2"]


def _boom(*_args, **_kwargs):
    raise ValueError("boom")


@pytest.fixture(autouse=True)
def _folders(tmp_path: Path, monkeypatch) -> None:
    """Models, sessions and calibrations in this test's own folders, never the user's."""
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path / "config"))


@pytest.fixture
def problems(tmp_path: Path) -> Path:
    path = tmp_path / "problems.jsonl"
    path.write_text('{"question": "What is 2+3?", "answer": "5"}\n', encoding="utf-8")
    return path


def _one_line(capsys, said: str | None = None) -> str:
    err = capsys.readouterr().err
    assert err.startswith("beamwise: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    if said is not None:
        assert err == f"beamwise: error: {said}\n"
    return err


@pytest.mark.parametrize(("argv", "said"), [
    (["bench", "--policies", "bogus", "--plan-only"],
     "unknown policies ['bogus']; choose from in_device, layerwise, headwise, lbs:inter_token, lbs:+inter_beam, "
     "lbs:+balanced_prefetch, lbs:+prefix_order, in_device:+speculative, lbs:+speculative, or lbs "
     "(lbs:+prefix_order)."),
    (["bench", "--kv-budget", "0", "--plan-only"],
     "the KV budget must be a positive size such as 64MB, or unset for automatic."),  # as plan and run say it
    (["bench", "--pcie-gbps", "0", "--plan-only", "--policies", "layerwise"],
     "PCIe bandwidth must be 0.001 to 10,000 GB/s (got 0)."),
    (["bench", "--plan-only", "--question", "What is 2+3?"],
     "a plan has no tokenizer to read a question; give --prompt-tokens instead of --question."),
    (["bench", "--step-delimiter", "\\x", "--plan-only"],
     'the step delimiter "\\x" has a broken escape (truncated \\xXX escape); write it like \\n\\n, or give '
     "'none' to cut steps by length only."),
    (["plan", "What is 2+3?", *TINY, "--beams", "0"], "beams must be at least 1 (got 0)."),
    (["models", "info", "/no/such/model"],
     "/no/such/model does not exist; give a name from `beamwise models list` or a model's path."),
    (["models", "pull", "bad//name"],
     "'bad//name' is not a valid repository id; give it as owner/name, e.g. HuggingFaceTB/SmolLM2-360M-Instruct."),
    (["models", "pull", "owner/name", "--endpoint", "ftp://hub"],
     "--endpoint must be an http:// or https:// URL, such as https://huggingface.co (got 'ftp://hub')."),
])  # fmt: skip
def test_a_bad_option_stays_a_one_line_user_error(capsys, argv: list[str], said: str) -> None:
    assert main(argv) == 2
    _one_line(capsys, said)


def test_models_remove_and_info_of_no_such_name_are_the_users(capsys) -> None:
    assert main(["models", "remove", "no-such-model", "--yes"]) == 2
    assert "no model named 'no-such-model' here; `beamwise models list` shows them" in _one_line(capsys)
    assert main(["models", "info", "no-such-model"]) == 2
    assert "no model named 'no-such-model' here" in _one_line(capsys)


def test_models_remove_without_yes_and_no_terminal_to_ask_is_the_users(monkeypatch, capsys) -> None:
    from app.models_folder import MARKER, models_dir

    folder = models_dir() / "owner--model"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}", encoding="utf-8")
    (folder / MARKER).write_text('{"complete": true}', encoding="utf-8")
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    assert main(["models", "remove", "owner--model"]) == 2
    _one_line(capsys, "removing owner--model needs confirmation; add --yes to remove it.")
    assert folder.is_dir()


def test_models_add_of_a_folder_that_is_no_model_is_the_users(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "not-a-model"
    folder.mkdir()
    assert main(["models", "add", str(folder)]) == 2
    assert f"model folder {folder} has no config.json" in _one_line(capsys)


def test_eval_of_a_missing_problems_file_is_the_users(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "none.jsonl"
    assert main(["eval", str(missing), *TINY, "--no-save"]) == 2
    _one_line(capsys, f"{missing}: no such problems file.")


def test_eval_calibrate_where_the_thresholds_cannot_be_saved_is_the_users(tmp_path: Path, problems: Path,
                                                                          monkeypatch, capsys) -> None:  # fmt: skip
    """check_thresholds_writable raised a plain ValueError: without PLAIN_VALUE_ERRORS it would be a fault."""
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(blocker / "config"))
    assert main(["eval", str(problems), *TINY, "--no-save", "--calibrate"]) == 2
    assert f"cannot save thresholds in {blocker / 'config'} (" in _one_line(capsys)


def test_the_engines_refusals_of_the_users_settings_are_config_errors_and_still_value_errors() -> None:
    """One class for them, a BeamwiseError (the engine cannot import app's UsageError) and a ValueError (the window
    and argparse catch the configs' ValueErrors)."""
    refusals = [lambda: SearchConfig(beams=0), lambda: CacheConfig(block_size=0), lambda: parse_bytes("lots"),
                lambda: Workload(kv_budget_bytes=0), lambda: check_names(["bogus"], [])]
    for refuse in refusals:
        with pytest.raises(ConfigError) as refused:
            refuse()
        assert isinstance(refused.value, BeamwiseError) and isinstance(refused.value, ValueError)
        assert refused.value.user_message() == str(refused.value)  # no hint added: said word for word


def test_thresholds_that_cannot_be_saved_are_the_users_and_still_a_value_error(tmp_path: Path) -> None:
    """Said after every problem ran (eval --calibrate): a plain ValueError would now be a fault, with a traceback."""
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    with pytest.raises(ThresholdsNotSaved, match=r"^cannot save the thresholds to .*; make .* writable") as refused:
        save_thresholds(Thresholds(0.8, 0.2), blocker / "early_exit.json")
    assert isinstance(refused.value, BeamwiseError) and isinstance(refused.value, ValueError)


@pytest.mark.parametrize(("target", "argv"), [
    ("engine.bench._load", ["bench", "--plan-only", "--policies", "in_device"]),
    ("engine.models.load_model", ["eval", "PROBLEMS", *TINY, "--no-save"]),
    ("app.model_library.list_models", ["models", "list"]),
    ("app.model_library.synthetic_entry", ["models", "info", "synthetic:tiny-llama"]),
    ("app.planner.plan", ["plan", "What is 2+3?", *TINY]),
])  # fmt: skip
def test_a_value_error_deep_inside_a_command_is_a_fault(problems: Path, monkeypatch, capsys, target: str,
                                                        argv: list[str]) -> None:  # fmt: skip
    monkeypatch.setattr(target, _boom)
    with pytest.raises(ValueError, match=r"^boom$") as raised:
        main([str(problems) if word == "PROBLEMS" else word for word in argv])
    assert not isinstance(raised.value, UsageError | BeamwiseError)
    assert "beamwise: error:" not in capsys.readouterr().err


def _console(code: str, argv: list[str]) -> subprocess.CompletedProcess:
    script = f"import sys\n{code}\nsys.argv = ['beamwise', *{argv!r}]\nfrom app.cli import console; console()\n"
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(("code", "argv"), [
    ("import app.model_library as lib\ndef boom(): raise ValueError('boom')\nlib.list_models = boom",
     ["models", "list"]),
    ("import engine.bench as bench\ndef boom(*a, **k): raise ValueError('boom')\nbench._load = boom",
     ["bench", "--plan-only", "--policies", "in_device"]),
])  # fmt: skip
def test_the_console_script_ends_a_fault_with_its_traceback_and_the_internal_error_line(code: str,
                                                                                       argv: list[str]) -> None:
    done = _console(code, argv)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.rstrip("\n").split("\n")
    assert "Traceback (most recent call last):" in lines and "ValueError: boom" in lines
    assert lines[-1] == INTERNAL_ERROR  # after the traceback: what it is and what to do
    assert lines.index("ValueError: boom") < len(lines) - 1
    assert "beamwise: error:" not in done.stderr


def test_the_internal_error_line_is_not_said_for_the_users_error_or_an_exit() -> None:
    done = _console("", ["models", "info", "/no/such/model"])
    assert (done.returncode, done.stderr.count("\n")) == (2, 1)
    assert INTERNAL_ERROR not in done.stderr and "Traceback" not in done.stderr
    done = _console("", ["models", "--help"])  # argparse's SystemExit goes through as it is
    assert done.returncode == 0 and done.stderr == "" and "list" in done.stdout
