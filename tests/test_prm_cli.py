"""`beamwise run --verifier prm --verifier-model PATH`: the PRM named, its tokens counted, bad input in one line."""

from __future__ import annotations

import pytest

from app.cli import main
from engine.verifiers.synthetic_prm import save_synthetic_prm

RUN = ["run", "What is 2+3?", "--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2",
       "--step-tokens", "6", "--max-steps", "2", "--step-delimiter", "none", "--no-save"]


def test_a_run_with_a_prm_folder_names_its_family_and_counts_verifier_tokens(capsys, tmp_path):
    folder = save_synthetic_prm("tiny-math-shepherd", tmp_path / "tiny-math-shepherd")
    assert main([*RUN, "--verifier", "prm", "--verifier-model", str(folder)]) == 0
    out = capsys.readouterr().out
    assert f"verifier Math-Shepherd ({folder})" in out
    assert out.count("verifier ran") == 2


@pytest.mark.parametrize(("extra", "message"), [
    (["--verifier", "prm"], "needs a PRM"),
    (["--verifier", "prm", "--verifier-model", "/no/such/prm"], "does not exist"),
    (["--verifier", "prm", "--verifier-model", "synthetic:tiny-llama"], "not a synthetic PRM"),
])
def test_bad_prm_input_exits_2_with_one_line(capsys, extra, message):
    assert main([*RUN, *extra]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("error:") == 1 and "Traceback" not in err


def test_a_prm_whose_head_is_missing_exits_2(capsys, tmp_path):
    folder = save_synthetic_prm("tiny-skywork-prm", tmp_path / "skywork", drop_head=True)
    assert main([*RUN, "--verifier", "prm", "--verifier-model", str(folder)]) == 2
    assert "value head (v_head.summary) is missing" in capsys.readouterr().err
