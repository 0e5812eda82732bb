"""A fault in Beamwise is reported as one, with its traceback kept for the report; running out of memory is
reported as a size the user can change; the user's own errors keep their own advice."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

import engine.search
from app.cli import main
from engine import events as ev
from engine.config import CacheConfig, SearchConfig
from engine.errors import ChatTemplateUnusable, KVBudgetTooSmall, NotAPRM, failure
from engine.verifiers.pieces import single_token
from engine.verifiers.self_judge import JudgeLayout

TINY = ["--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2", "--step-tokens", "4", "--max-steps", "3"]


@pytest.fixture
def broken_second_step(monkeypatch):
    """Step 2's decoding raises a plain bug, as layer-wise with lookahead did before the tenth session."""
    decode = engine.search._Search._decode_rows

    def broken(search, *args, **kwargs):
        if any(c.step > 1 for c in search.candidates.values()):
            raise ValueError("4 is not in list")
        return decode(search, *args, **kwargs)

    monkeypatch.setattr(engine.search._Search, "_decode_rows", broken)


def test_a_fault_is_named_as_one_and_keeps_its_traceback():
    try:
        [][4]
    except IndexError as error:
        failed = failure(error)
    assert failed.error == "IndexError"
    assert failed.message == ("IndexError: list index out of range. This is a fault in Beamwise, not in your settings: "
                              "please report it with the error's details below (a saved session keeps them too).")
    assert failed.details.startswith("Traceback") and "[][4]" in failed.details


OUT_OF_MEMORY = [torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), MemoryError(),
                 RuntimeError("DefaultCPUAllocator: not enough memory: out of memory")]


@pytest.mark.parametrize("error", OUT_OF_MEMORY, ids=["cuda", "host", "allocator"])
def test_running_out_of_memory_is_a_size_to_change_not_a_fault(error):
    failed = failure(error)
    assert failed.message.endswith("Try fewer beams, shorter steps, a smaller KV budget or a smaller model.")
    assert "fault in Beamwise" not in failed.message and failed.details == ""
    assert failure(MemoryError()).message.startswith("Out of memory.")


def test_the_users_own_error_keeps_its_advice():
    error = KVBudgetTooSmall(100_000, 150_000)
    assert failure(error) == ev.RunFailed("KVBudgetTooSmall", error.user_message())


def test_a_prm_whose_tokenizer_splits_its_tag_is_not_a_prm_beamwise_can_use(tiny):
    with pytest.raises(NotAPRM, match="must be exactly one") as raised:
        single_token(tiny.tokenizer, "a step tag no vocabulary has as one token", "step tag")
    assert "Point --verifier-model" in raised.value.user_message()


def test_a_chat_template_that_drops_the_step_is_said_for_the_model_not_called_a_prm(tiny):
    tokenizer = copy.deepcopy(tiny.tokenizer)
    tokenizer.chat_template = "{% for m in messages %}{{ m['role'] }}: (text withheld)\n{% endfor %}"
    with pytest.raises(ChatTemplateUnusable, match="this model's chat template dropped the step text") as raised:
        JudgeLayout(tokenizer).prefix("What is 2+3?")
    assert "Use another verifier" in raised.value.user_message() and "PRM" not in raised.value.user_message()


def test_a_fault_mid_search_ends_the_run_with_one_failure_after_the_finished_step(tiny, broken_second_step):
    events = list(engine.search.run("What is 2+3?", tiny, SearchConfig(beams=2, width=2, step_tokens=4, max_steps=3),
                                    CacheConfig(policy="lbs")))
    assert [e.step for e in events if isinstance(e, ev.StepSelected)] == [1]
    *_, last = events
    assert isinstance(last, ev.RunFailed) and last.error == "ValueError"
    assert last.message.startswith("ValueError: 4 is not in list. This is a fault in Beamwise")
    assert "in broken" in last.details and last.details.rstrip().endswith("ValueError: 4 is not in list")
    assert sum(e.type in ev.TERMINAL_TYPES for e in events) == 1


def test_the_cli_prints_the_fault_and_its_details_and_exits_1(capsys, broken_second_step):
    assert main(["run", "What is 2+3?", *TINY, "--no-save"]) == 1
    captured = capsys.readouterr()
    assert "step 1" in captured.out.lower()
    error_line, rest = captured.err[captured.err.index("beamwise: error:"):].split("\n", 1)
    assert error_line.startswith("beamwise: error: ValueError: 4 is not in list. This is a fault in Beamwise")
    assert "details for the report:\nTraceback" in rest and "in broken" in rest
    assert "Try fewer beams" not in captured.err


def test_a_saved_failed_session_exports_its_traceback(capsys, tmp_path: Path, broken_second_step):
    db = str(tmp_path / "s.db")
    assert main(["run", "What is 2+3?", *TINY, "--db", db, "--json"]) == 1
    (failed,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()
                 if json.loads(line)["type"] == "run_failed"]
    assert "Traceback" in failed["details"]
    for fmt in ("md", "html", "json"):
        assert main(["sessions", "export", "1", "--db", db, "--format", fmt, "-o", str(tmp_path / f"s.{fmt}")]) == 0
    markdown = (tmp_path / "s.md").read_text(encoding="utf-8")
    assert "## Error details, for a report\n\n```\nTraceback" in markdown and "in broken" in markdown
    page = (tmp_path / "s.html").read_text(encoding="utf-8")
    assert "<details><summary>Error details, for a report</summary><pre>Traceback" in page
    exported = json.loads((tmp_path / "s.json").read_text(encoding="utf-8"))
    assert exported["events"][-1] == failed
    assert main(["sessions", "import", str(tmp_path / "s.json"), "--db", db]) == 0  # a report's round trip
    capsys.readouterr()
    assert main(["sessions", "export", "2", "--db", db, "--format", "md"]) == 0
    assert capsys.readouterr().out == markdown


def test_every_error_that_says_what_to_change_exits_2(capsys):
    """LayersUnavailable (the entropy exit on a PRM with no logit lens) exited 1, as a fault would: the exit
    status came from a hand-kept list of names that had missed it."""
    assert main(["run", "What is 2+3?", *TINY, "--no-save", "--verifier", "prm", "--verifier-model",
                 "synthetic:tiny-qwen-prm", "--entropy-exit"]) == 2
    err = capsys.readouterr().err
    assert "no logit lens to exit on" in err and "details for the report" not in err
