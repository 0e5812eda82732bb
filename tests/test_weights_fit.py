"""A PRM whose weights do not fit beside the generator's: said before loading, with what to do and the memory
that would hold the pair; `--verifier-device cpu` keeps the PRM and its KV off the device."""

from __future__ import annotations

import json

import pytest
import torch

import engine.verifiers as verifiers
from app.cli import main
from app.planner import DeviceInfo, plan
from engine.config import CacheConfig, ModelSpec, SearchConfig
from engine.search import run
from engine.verifiers.fit import WORKING_ROOM, WeightsDoNotFit, pair_does_not_fit, prm_weight_bytes
from engine.verifiers.synthetic_prm import save_synthetic_prm, synthetic_prm

GB = 1_000_000_000
RUN = [
    "run",
    "What is 2+3?",
    "--model",
    "synthetic:tiny-llama",
    "--beams",
    "2",
    "--width",
    "2",
    "--step-tokens",
    "6",
    "--max-steps",
    "1",
    "--step-delimiter",
    "none",
    "--no-save",
    "--verifier",
    "prm",
    "--verifier-model",
    "synthetic:tiny-qwen-prm",
]


def test_a_pair_that_fits_passes_and_one_that_does_not_names_both_sizes_and_the_memory_needed():
    assert pair_does_not_fit(3 * GB, 3 * GB, 8 * GB, "cuda:0") is None
    message = pair_does_not_fit(14 * GB, 14 * GB, 24 * GB, "cuda:0 (RTX 4090)")
    assert "generator's weights (14.0 GB) and the PRM's (14.0 GB)" in message
    assert "cuda:0 (RTX 4090), which has 24.0 GB" in message
    assert f"{(28 * GB + WORKING_ROOM) / GB:.1f} GB" in message  # the memory that would hold both and a search
    hint = WeightsDoNotFit(message).user_message()
    assert "smaller PRM" in hint and "--verifier-device cpu" in hint


@pytest.mark.parametrize("name", ["tiny-qwen-prm", "tiny-skywork-prm", "tiny-math-shepherd"])
def test_prm_weight_bytes_are_what_loading_puts_on_the_device(name, tmp_path):
    parts = synthetic_prm(name, torch.device("cpu"), torch.float32)
    loaded = sum(p.numel() * p.element_size() for m in (parts.body, parts.head) for p in m.parameters())
    assert prm_weight_bytes(f"synthetic:{name}", torch.float32) == loaded
    folder = save_synthetic_prm(name, tmp_path / name)
    assert prm_weight_bytes(str(folder), torch.float32) == loaded  # read from the safetensors headers only
    assert prm_weight_bytes(str(folder), torch.bfloat16) == loaded // 2


def test_a_run_refused_for_weights_exits_2_with_one_line(capsys, monkeypatch):
    def too_big(generator, source, device, dtype):
        raise WeightsDoNotFit(pair_does_not_fit(14 * GB, 15 * GB, 24 * GB, "cuda:0 (test)"))

    monkeypatch.setattr(verifiers, "check_pair_fits", too_big)
    assert main(RUN) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "do not both fit" in err and "--verifier-device cpu" in err


def test_a_prm_on_the_cpu_takes_no_share_of_the_device_budget(tiny):
    search = SearchConfig(
        beams=2,
        width=2,
        step_tokens=6,
        step_delimiter=None,
        max_steps=2,
        verifier="prm",
        verifier_model="synthetic:tiny-qwen-prm",
        verifier_device="cpu",
    )
    events = list(run("What is 2+3?", tiny, search, CacheConfig(kv_budget_bytes=4_000_000, verifier_kv_share=0.5)))
    assert events[-1].type == "run_finished"
    assert (events[0].kv_budget_bytes, events[0].verifier_kv_budget_bytes) == (4_000_000, 0)
    assert all(e.verifier_device_bytes == 0 for e in events if e.type == "memory_snapshot")


def test_only_a_prm_can_move_to_the_cpu():
    with pytest.raises(ValueError, match="self-judge and logprob read the generator"):
        SearchConfig(verifier="self-judge", verifier_device="cpu")


def big_prm_folder(tmp_path):
    """config.json of a 7B Qwen2.5-Math-PRM, and a tokenizer file (the planner reads configs, and asks only
    whether a tokenizer is there)."""
    folder = tmp_path / "Qwen2.5-Math-PRM-7B"
    folder.mkdir()
    config = {
        "architectures": ["Qwen2ForProcessRewardModel"],
        "model_type": "qwen2",
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "max_position_embeddings": 4096,
    }
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    (folder / "tokenizer.json").write_text("{}", encoding="utf-8")
    return folder


def test_the_plan_is_red_when_the_pair_does_not_fit_and_shows_both_models_weights(tmp_path):
    model = ModelSpec("synthetic:llama2-7b", dtype="bfloat16")
    card = DeviceInfo("cuda (24 GB card)", False, 24 * GB)
    search = SearchConfig(verifier="prm", verifier_model=str(big_prm_folder(tmp_path)))
    p = plan(model, search, CacheConfig(), device=card)
    assert p.state == "red" and "do not both fit" in p.sentence and "--verifier-device cpu" in p.sentence
    rows = dict(p.rows())
    assert rows["  generator weights"] == "13.5 GB" and rows["  verifier weights"].startswith("15.")
    on_cpu = plan(
        model,
        SearchConfig(verifier="prm", verifier_model=search.verifier_model, verifier_device="cpu"),
        CacheConfig(),
        device=card,
    )
    assert on_cpu.state != "red" and on_cpu.weights_bytes == on_cpu.generator.weights_bytes


def test_the_plan_gives_the_verifier_its_share_of_the_kv_budget():
    search = SearchConfig(
        beams=2, width=2, max_steps=2, step_tokens=8, verifier="prm", verifier_model="synthetic:tiny-qwen-prm"
    )
    emulated = DeviceInfo("cpu (emulated GPU)", True, 16 * GB)
    shared = plan(
        ModelSpec("synthetic:tiny-llama"),
        search,
        CacheConfig(kv_budget_bytes=4_000_000, verifier_kv_share=0.1),
        device=emulated,
    )
    assert shared.verifier_kv_bytes == 400_000
    assert dict(shared.rows())["generator KV"].endswith("KV budget 4.0 MB, 3.6 MB of it)")
    logprob = plan(
        ModelSpec("synthetic:tiny-llama"),
        SearchConfig(beams=2, width=2, max_steps=2, step_tokens=8),
        CacheConfig(kv_budget_bytes=4_000_000, verifier_kv_share=0.1),
        device=emulated,
    )
    assert logprob.verifier_kv_bytes == 0  # a verifier with no KV leaves the budget to the generator
