"""The follow-up a local run suggests keeps its verifier (it named the database and the model only, so the next
turn was scored by logprob), each value quoted for a shell as --db is."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

import pytest

from app.cli import main
from app.follow_up import again_options

SMALL = ["--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2", "--max-steps", "1", "--step-tokens", "8"]


@pytest.mark.parametrize(("verifier", "again", "header"), [
    (["--verifier", "prm", "--verifier-model", "synthetic:tiny-qwen-prm"],
     "--verifier prm --verifier-model synthetic:tiny-qwen-prm", "Qwen2.5-Math-PRM (synthetic:tiny-qwen-prm)"),
    (["--verifier", "self-judge"], "--verifier self-judge", "self-judge"),
])
def test_the_follow_up_line_keeps_the_verifier_and_the_follow_up_runs_with_it(capsys, tmp_path: Path, verifier,
                                                                             again, header):
    db = str(tmp_path / "a folder" / "c.db")
    Path(db).parent.mkdir()
    assert main(["run", "What is 17 * 3?", *SMALL, *verifier, "--db", db]) == 0
    said = capsys.readouterr().err
    line = f"ask a follow-up with: beamwise run --session 1 --db {shlex.quote(db)} --model synthetic:tiny-llama {again}"
    assert line + ' "..."' in said, said
    hint = said.split("ask a follow-up with: beamwise ")[1].splitlines()[0].removesuffix(' "..."')
    assert main([*shlex.split(hint), "And times 2?", "--beams", "2", "--width", "2", "--max-steps", "1",
                 "--step-tokens", "8"]) == 0
    shown = capsys.readouterr()
    assert f"\nverifier {header}; method beam" in "\n" + shown.out + shown.err  # the run's header, not logprob


def test_a_prm_on_the_cpu_and_a_folder_with_a_space_are_repeated_quoted():
    args = argparse.Namespace(db=None, model="bundled", verifier="prm", verifier_model="/PRMs/math shepherd",
                              verifier_device="cpu")
    assert again_options(args) == " --verifier prm --verifier-model '/PRMs/math shepherd' --verifier-device cpu"
    assert again_options(argparse.Namespace(db=None, model="bundled", verifier="logprob")) == ""
