"""A PRM folder named with a family it is not (`qwen-prm:` before a plain causal LM): the family's reward head is
missing, which is the user's to mend (the prefix or the folder), not a fault. It failed on the first head tensor
it lacked (KeyError 'score.0.weight' from engine/verifiers/weights.py), as a fault in Beamwise, exit 1."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from app.cli import main
from engine.errors import NotAPRM, PRMHeadMissing, failure
from engine.verifiers import families
from engine.verifiers.families import load_prm
from engine.verifiers.synthetic_prm import save_synthetic_prm
from engine.verifiers.weights import read_tensors, weight_files

CPU = torch.device("cpu")
RUN = ["run", "What is 2+3?", "--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2",
       "--step-tokens", "6", "--max-steps", "1", "--step-delimiter", "none", "--no-save"]
QWEN_HEAD = "score.0.weight, score.0.bias, score.2.weight, score.2.bias"


@pytest.fixture(scope="module")
def causal_lm(tmp_path_factory) -> Path:
    """A plain causal LM with no reward head (an RLHFlow PRM is one)."""
    return save_synthetic_prm("tiny-rlhflow-prm", tmp_path_factory.mktemp("lm") / "tiny-rlhflow-prm")


@pytest.mark.parametrize(("family", "label", "lacks"), [
    ("qwen-prm", "Qwen2.5-Math-PRM", QWEN_HEAD),
    ("skywork-prm", "Skywork-o1-Open-PRM", "v_head.summary.weight, v_head.summary.bias"),
])
def test_a_causal_lm_named_as_a_head_family_is_refused_before_its_body_loads(causal_lm, monkeypatch, family, label,
                                                                             lacks):
    monkeypatch.setattr(families, "_load_body_and_head", None)  # the refusal comes before any weight is read
    with pytest.raises(NotAPRM) as raised:
        load_prm(f"{family}:{causal_lm}", CPU, torch.float32)
    message = raised.value.user_message()
    assert f"{causal_lm} has no {label} reward head, which the family {family} reads: its weights lack {lacks}." \
        in message
    assert f"Check the family named before the path ({family}:)" in message and "check the folder" in message
    assert failure(raised.value).details == ""  # said as the user's to mend, not as a fault


def test_a_head_family_with_part_of_its_head_is_an_incomplete_download(tmp_path):
    folder = save_synthetic_prm("tiny-qwen-prm", tmp_path / "qwen")
    weights = folder / "model.safetensors"
    save_file({k: v for k, v in load_file(str(weights)).items() if not k.startswith("score.2.")}, str(weights),
              metadata={"format": "pt"})
    with pytest.raises(PRMHeadMissing, match=r"its weights lack score\.2\.weight, score\.2\.bias\.") as raised:
        load_prm(f"qwen-prm:{folder}", CPU, torch.float32)
    assert "download may be incomplete" in raised.value.user_message()


def test_reading_a_tensor_no_file_holds_is_a_missing_head_not_a_key_error(causal_lm):
    with pytest.raises(PRMHeadMissing, match=r"the weights lack score\.0\.weight\."):
        read_tensors(weight_files(causal_lm), ["score.0.weight"])


def test_the_run_exits_2_with_one_line(capsys, causal_lm):
    assert main([*RUN, "--verifier", "prm", "--verifier-model", f"qwen-prm:{causal_lm}"]) == 2
    err = capsys.readouterr().err
    assert f"has no Qwen2.5-Math-PRM reward head, which the family qwen-prm reads: its weights lack {QWEN_HEAD}" \
        in err
    assert err.count("error:") == 1 and "Traceback" not in err and "fault" not in err


def test_the_family_it_is_still_loads(causal_lm):
    assert load_prm(f"rlhflow-prm:{causal_lm}", CPU, torch.float32).family == "rlhflow-prm"
