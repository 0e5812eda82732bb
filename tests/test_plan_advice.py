"""A red plan's advice where the emulated search does not fit in free host memory: fewer beams where the KV
overflows, bfloat16 or a smaller model where the weights do (it told "lower the beams" for 27.0 GB of weights in
22.0 GB). The memory free is fixed here, so the sentences do not depend on this machine."""

from __future__ import annotations

import pytest

import app.formatting as fmt
from app import planner
from app.cli import main
from app.planner import DeviceInfo, plan
from engine.config import CacheConfig, ModelSpec, SearchConfig

LLAMA7B = ModelSpec("synthetic:llama2-7b")  # 27.0 GB of weights in float32
SEARCH = SearchConfig(beams=2, width=2, max_steps=2, step_tokens=16)


def emulated(memory: int) -> DeviceInfo:
    return DeviceInfo("cpu (emulated GPU)", True, memory)


@pytest.fixture(autouse=True)
def patient_plans(monkeypatch):
    monkeypatch.setattr(planner, "PLAN_SECONDS", 120.0)


def test_weights_over_free_memory_advise_bfloat16_not_fewer_beams(monkeypatch, capsys):
    monkeypatch.setattr(DeviceInfo, "probe", classmethod(lambda cls, device="auto": emulated(22_000_000_000)))
    args = ["plan", "hi", "--model", "synthetic:llama2-7b", "--beams", "2", "--width", "2", "--max-steps", "2",
            "--step-tokens", "16"]
    assert main(args) == 3
    out = capsys.readouterr().out
    assert ("[red] This search needs about 27.6 GB, more than the 22.0 GB of memory free, and its weights alone "
            "take 27.0 GB, so fewer beams cannot help: load the weights in bfloat16 (--dtype bfloat16: about "
            "13.8 GB in all) or pick a smaller model.") in out, out
    assert main([*args, "--dtype", "bfloat16"]) == 0  # the advice taken fits
    assert "[red]" not in capsys.readouterr().out


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_weights_over_free_memory_even_in_bfloat16_advise_a_smaller_model(dtype):
    p = plan(ModelSpec(LLAMA7B.source, dtype=dtype), SEARCH, CacheConfig(), question="hi", device=emulated(10**10))
    assert p.state == "red" and p.sentence.endswith("so fewer beams cannot help: pick a smaller model."), p.sentence
    assert "bfloat16" not in p.sentence and "lower the beams" not in p.sentence


def test_kv_over_free_memory_advises_fewer_beams():
    tiny, search = ModelSpec("synthetic:tiny-llama"), SearchConfig(beams=4, width=4, max_steps=4, step_tokens=32)
    roomy = plan(tiny, search, CacheConfig(), question="hi", device=emulated(16 * 10**9))
    memory = roomy.weights_bytes + roomy.activation_bytes + roomy.generator_kv_bytes // 2
    p = plan(tiny, search, CacheConfig(), question="hi", device=emulated(memory))
    assert p.state == "red" and p.sentence.endswith("of memory free: lower the beams, the width or the steps."), \
        p.sentence
    assert "weights alone" not in p.sentence and "bfloat16" not in p.sentence  # its weights are a small part


def test_weights_that_fit_beside_too_much_kv_advise_either():
    """The weights fit (under 90% of the memory free) but the search's KV does not, and the weights are most of it:
    fewer beams or bfloat16 both make it fit."""
    search = SearchConfig(beams=4, width=2, max_steps=16, step_tokens=64)
    roomy = plan(LLAMA7B, search, CacheConfig(), question="hi", device=emulated(10**12))
    memory = int(roomy.weights_bytes / 0.85)
    assert roomy.weights_bytes + roomy.generator_kv_bytes > memory and 2 * roomy.weights_bytes > memory
    p = plan(LLAMA7B, search, CacheConfig(), question="hi", device=emulated(memory))
    assert p.state == "red" and ": lower the beams, the width or the steps, or load the weights in bfloat16 " \
        "(--dtype bfloat16: about " in p.sentence, p.sentence


def test_weights_past_the_share_the_run_loads_into_are_red_though_the_search_fits():
    """The run refuses weights over 90% of the memory free before it builds them (engine.synthetic.check_fits):
    13.5 GB in 14.5 GB with a 0.3 GB search was amber, 95% of memory."""
    p = plan(ModelSpec(LLAMA7B.source, dtype="bfloat16"), SEARCH, CacheConfig(), question="hi",
             device=emulated(14_500_000_000))
    assert p.state == "red" and p.sentence == ("Its weights take 13.5 GB, more than 90% of the 14.5 GB of memory "
                                               "free, which the run refuses: pick a smaller model."), p.sentence


def test_a_prm_on_the_cpu_is_counted_in_float32_in_the_host_memory_it_takes():
    """--verifier-device cpu loads the PRM in float32 in host memory (engine.verifiers.make_verifier): the plan
    showed its weights in --dtype's size and left them out of the emulated search's need, so it called green a
    search whose PRM did not fit beside it."""
    tiny = ModelSpec("synthetic:tiny-llama", dtype="bfloat16")

    def search(device: str) -> SearchConfig:
        return SearchConfig(beams=2, width=2, max_steps=2, step_tokens=16, verifier="prm",
                            verifier_model="synthetic:tiny-qwen-prm", verifier_device=device)

    on_device = plan(tiny, search("auto"), CacheConfig(), question="hi", device=emulated(16 * 10**9))
    roomy = plan(tiny, search("cpu"), CacheConfig(), question="hi", device=emulated(16 * 10**9))
    assert roomy.verifier.weights_bytes == 2 * on_device.verifier.weights_bytes  # float32, not bfloat16
    assert roomy.host_verifier_weights_bytes == roomy.verifier.weights_bytes and roomy.verifier_weights_bytes == 0
    assert ("  verifier weights", f"{fmt.size(roomy.verifier.weights_bytes)} (on the CPU)") in roomy.rows()
    without_prm = roomy.weights_bytes + roomy.activation_bytes + roomy.generator_kv_bytes + roomy.verifier_kv_bytes
    tight = plan(tiny, search("cpu"), CacheConfig(), question="hi", device=emulated(without_prm + 1))
    assert tight.state == "red" and "more than the" in tight.sentence and "of memory free" in tight.sentence, \
        tight.sentence
    need = without_prm + roomy.verifier.weights_bytes
    assert f"needs about {fmt.size(need)}" in tight.sentence
    assert plan(tiny, search("cpu"), CacheConfig(), question="hi", device=emulated(need)).state != "red"
