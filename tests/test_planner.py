"""The memory planner: figures from configs and the engine's plan-only run, a state and one sentence."""

from __future__ import annotations

import json

from app.cli import main
from app.planner import DeviceInfo, plan, prompt_tokens_of
from engine.bench import Workload, run_bench
from engine.config import CacheConfig, ModelSpec, SearchConfig
from engine.kv.cache import whole_search_bytes

TINY = ModelSpec("synthetic:tiny-llama")
EMULATED = DeviceInfo("cpu (emulated GPU)", True, 16_000_000_000)
SMALL_GPU = DeviceInfo("cuda (8 GB card)", False, 8_000_000_000)


def test_a_search_that_fits_is_green_and_moves_nothing():
    search = SearchConfig(beams=2, width=2, max_steps=2, step_tokens=8)
    p = plan(TINY, search, CacheConfig(), question="What is 2+3?", device=EMULATED)
    assert p.state == "green" and p.policy == "in_device" and p.step_pcie_bytes == 0
    assert p.generator_kv_bytes == whole_search_bytes(p.prompt_tokens, search, p.generator.kv_token_bytes, 16)
    assert "no KV crosses PCIe" in p.sentence


def test_offloading_is_amber_with_the_plan_only_runs_bytes():
    search = SearchConfig(beams=4, width=2, max_steps=2, step_tokens=8)
    cache = CacheConfig(kv_budget_bytes=400_000)
    p = plan(TINY, search, cache, device=EMULATED)
    bench = run_bench(Workload(model=TINY.source, dtype="float32", beams=4, width=2, step_tokens=8,
                               prompt_tokens=p.prompt_tokens, gen_tokens=16, kv_budget_bytes=400_000),
                      ["lbs:+prefix_order"], plan_only=True).results[0]
    assert p.state == "amber" and p.policy == "lbs"
    assert p.step_pcie_bytes == (bench.h2d_bytes + bench.d2h_bytes) // 2 > 0
    assert p.sentence.startswith("8 candidates will move ") and "per step over PCIe: about" in p.sentence


def test_weights_larger_than_the_card_are_red():
    p = plan(ModelSpec("synthetic:llama2-7b", dtype="bfloat16"), SearchConfig(), CacheConfig(), device=SMALL_GPU)
    assert p.state == "red" and "weights alone (13.5 GB)" in p.sentence


def test_a_prm_adds_its_weights_and_kv():
    search = SearchConfig(beams=2, width=2, max_steps=2, step_tokens=8, verifier="prm",
                          verifier_model="synthetic:tiny-qwen-prm")
    with_prm = plan(TINY, search, CacheConfig(), device=EMULATED)
    without = plan(TINY, SearchConfig(beams=2, width=2, max_steps=2, step_tokens=8), CacheConfig(), device=EMULATED)
    assert with_prm.verifier_kv_bytes > 0 and with_prm.weights_bytes > without.weights_bytes


def test_prompt_length_is_estimated_without_a_tokenizer():
    assert prompt_tokens_of(None) == 128
    assert prompt_tokens_of("x" * 350) == 160


def test_plan_command_prints_the_sentence_and_json(capsys):
    assert main(["plan", "What is 2+3?", "--model", "synthetic:tiny-llama", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "weights" in out and "generator KV" in out and "[green]" in out
    assert main(["plan", "--model", "synthetic:tiny-llama", "--device", "cpu", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["state"] == "green" and data["policy"] == "in_device"


def test_the_window_plan_bar_shows_state_and_sentence(qtbot):
    from app.gui.plan_bar import PlanBar

    configs = (TINY, SearchConfig(beams=4, width=2, max_steps=2, step_tokens=8),
               CacheConfig(kv_budget_bytes=400_000, device="cpu"))
    bar = PlanBar(lambda: configs, lambda: "")
    qtbot.addWidget(bar)
    with qtbot.waitSignal(bar.planned, timeout=10_000) as blocker:
        bar.refresh_now()
    assert blocker.args[0].state == "amber"
    assert bar.sentence.text().startswith("8 candidates will move") and "PCIe per step" in bar.toolTip()


def test_the_plan_bar_says_what_to_fix(qtbot):
    from app.gui.plan_bar import PlanBar

    def broken():
        raise ValueError("beams must be at least 1")

    bar = PlanBar(broken, lambda: "")
    qtbot.addWidget(bar)
    with qtbot.waitSignal(bar.planned, timeout=5_000):
        bar.refresh_now()
    assert "beams must be at least 1" in bar.sentence.text()


def test_the_plan_bar_says_why_a_plan_failed_in_its_thread(qtbot, tmp_path):
    from app.gui.plan_bar import PlanBar
    from engine.config import ModelSpec

    configs = (ModelSpec(str(tmp_path / "no-such-model")), SearchConfig(beams=2, width=2), CacheConfig(device="cpu"))
    bar = PlanBar(lambda: configs, lambda: "")
    qtbot.addWidget(bar)
    with qtbot.waitSignal(bar.planned, timeout=10_000) as blocker:
        bar.refresh_now()
    assert blocker.args[0] is None and bar.sentence.text().startswith("No plan: ")
