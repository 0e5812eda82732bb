"""The memory planner: figures from configs and the engine's plan-only run, a state and one sentence."""

from __future__ import annotations

import io
import json
import sys

import pytest

from app import planner
from app.cli import main
from app.planner import DeviceInfo, plan
from app.prompt_size import estimated_tokens, prompt_size
from engine import events as ev
from engine.bench import Workload, run_bench
from engine.config import CacheConfig, ModelSpec, SearchConfig
from engine.errors import SearchTooLarge
from engine.kv.sizing import search_kv_bytes
from engine.models import load_model
from engine.search import run

TINY = ModelSpec("synthetic:tiny-llama")
EMULATED = DeviceInfo("cpu (emulated GPU)", True, 16_000_000_000)
SMALL_GPU = DeviceInfo("cuda (8 GB card)", False, 8_000_000_000)


@pytest.fixture(autouse=True)
def patient_plans(monkeypatch):
    """A busy machine must not stop the plan-only run and turn its exact bytes into the Eq. 4-5 estimate."""
    monkeypatch.setattr(planner, "PLAN_SECONDS", 120.0)


def test_a_search_that_fits_is_green_and_moves_nothing():
    search = SearchConfig(beams=2, width=2, max_steps=2, step_tokens=8)
    p = plan(TINY, search, CacheConfig(), question="What is 2+3?", device=EMULATED)
    assert p.state == "green" and p.policy == "in_device" and p.step_pcie_bytes == 0
    kv = search_kv_bytes(p.prompt_tokens, search, CacheConfig(), p.generator.kv_token_bytes, cascade=True)
    assert p.generator_kv_bytes == kv  # a loaded model attends through cascade attention (engine.models)
    assert "no KV crosses PCIe" in p.sentence


def test_offloading_is_amber_with_the_plan_only_runs_bytes():
    """A step's bytes are the plan-only run's per-step counters: the question's offload before step 1 is no step's."""
    search = SearchConfig(beams=4, width=2, max_steps=2, step_tokens=8)
    cache = CacheConfig(kv_budget_bytes=400_000)
    p = plan(TINY, search, cache, device=EMULATED)
    bench = run_bench(Workload(model=TINY.source, dtype="float32", beams=4, width=2, step_tokens=8,
                               prompt_tokens=p.prompt_tokens, gen_tokens=16, kv_budget_bytes=400_000),
                      ["lbs:+prefix_order"], plan_only=True).results[0]
    assert p.state == "amber" and p.policy == "lbs"
    assert 0 < p.step_pcie_bytes < (bench.h2d_bytes + bench.d2h_bytes) // 2  # the bench's totals hold the offload
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


def test_prompt_length_is_estimated_without_a_tokenizer(tmp_path):
    assert estimated_tokens(None) == 128
    assert estimated_tokens("x" * 350) == 160
    assert estimated_tokens("x" * 350, [("y" * 35, "z" * 70)]) == 160 + 10 + 30  # a turn's text and its markers
    unreadable = prompt_size(str(tmp_path / "no-such-model"), "x" * 350, [("y" * 35, "z" * 70)])
    assert (unreadable.tokens, unreadable.how, unreadable.turns) == (200, "estimated from its length", 1)


FIRST, SECOND = "What is 2+3?", "And times 4?"
CONVERSATION_SEARCH = SearchConfig(beams=2, width=2, max_steps=2, step_tokens=4)


@pytest.fixture(scope="module")
def tiny_conversation():
    """synthetic:tiny-llama, and a first turn's (question, chosen path) from a real run."""
    loaded = load_model(TINY)
    finished = [e for e in run(FIRST, loaded, CONVERSATION_SEARCH, CacheConfig()) if e.type == "run_finished"]
    return loaded, ((FIRST, finished[0].answer),)


def _prefill_tokens(loaded, question, history) -> int:
    events = run(question, loaded, CONVERSATION_SEARCH, CacheConfig(), history=history)
    return next(e for e in events if isinstance(e, ev.PrefillDone)).prompt_tokens


def test_a_follow_ups_plan_counts_the_whole_conversation_as_the_run_sends_it(tiny_conversation):
    loaded, history = tiny_conversation
    bare = plan(TINY, CONVERSATION_SEARCH, CacheConfig(), question=SECOND, device=EMULATED)
    follow_up = plan(TINY, CONVERSATION_SEARCH, CacheConfig(), question=SECOND, history=history, device=EMULATED)
    assert bare.prompt_tokens == _prefill_tokens(loaded, SECOND, ())  # the system prompt and template counted
    assert follow_up.prompt_tokens == _prefill_tokens(loaded, SECOND, history) > bare.prompt_tokens
    assert follow_up.generator_kv_bytes > bare.generator_kv_bytes
    assert dict(follow_up.rows())["prompt"] == (f"{follow_up.prompt_tokens:,} tokens (counted by the model's "
                                                "tokenizer, 1 earlier turn of the conversation)")


def test_the_preflight_counts_a_follow_ups_whole_prompt(tiny_conversation):
    from app.preflight import check_memory, needed_bytes

    loaded, history = tiny_conversation
    prompt = _prefill_tokens(loaded, SECOND, history)
    search = SearchConfig(beams=512, width=2, step_tokens=4, max_steps=2)
    with pytest.raises(SearchTooLarge) as refused:
        check_memory(loaded, SECOND, search, CacheConfig(), free=lambda: 1_000_000, history=history)
    assert refused.value.needed_bytes == needed_bytes(loaded, prompt, search, CacheConfig())


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
    bar = PlanBar(lambda: configs, lambda: ("", ()))
    qtbot.addWidget(bar)
    with qtbot.waitSignal(bar.planned, timeout=10_000) as blocker:
        bar.refresh_now()
    assert blocker.args[0].state == "amber"
    assert bar.sentence.text().startswith("8 candidates will move") and "PCIe per step" in bar.toolTip()


def test_the_plan_bar_waits_while_a_run_is_on_and_plans_what_was_asked_meanwhile_after_it(qtbot):
    """Planning mid-run (a tokenizer read, a plan-only run) took Python's lock from the search and the window."""
    from app.gui import plan_bar
    from app.gui.plan_bar import PlanBar

    configs = (TINY, SearchConfig(beams=2, width=2, max_steps=2, step_tokens=8), CacheConfig(device="cpu"))
    planned: list[object] = []
    bar = PlanBar(lambda: configs, lambda: ("", ()))
    qtbot.addWidget(bar)
    bar.planned.connect(planned.append)
    bar.schedule()
    bar.set_paused(True)  # a run began before the settings settled
    bar.schedule()  # and they changed during it
    qtbot.wait(plan_bar.DEBOUNCE_MS * 2)
    assert planned == [] and bar.sentence.text() == plan_bar.UNPLANNED_RUN  # not a plan of other settings
    with qtbot.waitSignal(bar.planned, timeout=10_000):
        bar.set_paused(False)
    assert len(planned) == 1 and planned[0].state == "green"
    bar.set_paused(True)
    bar.set_paused(False)  # nothing was asked meanwhile: no plan
    qtbot.wait(plan_bar.DEBOUNCE_MS * 2)
    assert len(planned) == 1


def test_the_plan_bar_says_what_to_fix(qtbot):
    from app.gui.plan_bar import PlanBar

    def broken():
        raise ValueError("beams must be at least 1")

    bar = PlanBar(broken, lambda: ("", ()))
    qtbot.addWidget(bar)
    with qtbot.waitSignal(bar.planned, timeout=5_000):
        bar.refresh_now()
    assert "beams must be at least 1" in bar.sentence.text()


def test_the_plan_bar_says_why_a_plan_failed_in_its_thread(qtbot, tmp_path):
    from app.gui.plan_bar import PlanBar
    from engine.config import ModelSpec

    configs = (ModelSpec(str(tmp_path / "no-such-model")), SearchConfig(beams=2, width=2), CacheConfig(device="cpu"))
    bar = PlanBar(lambda: configs, lambda: ("", ()))
    qtbot.addWidget(bar)
    with qtbot.waitSignal(bar.planned, timeout=10_000) as blocker:
        bar.refresh_now()
    assert blocker.args[0] is None and bar.sentence.text().startswith("No plan: ")


def test_plan_session_counts_the_follow_up_that_run_session_sends(tmp_path, capsys):
    tiny = ["--model", "synthetic:tiny-llama", "--device", "cpu", "--beams", "2", "--width", "2", "--step-tokens",
            "4", "--max-steps", "2", "--db", str(tmp_path / "s.db")]
    assert main(["run", FIRST, *tiny]) == 0
    capsys.readouterr()
    assert main(["plan", SECOND, *tiny, "--json"]) == 0
    bare = json.loads(capsys.readouterr().out)
    assert main(["plan", SECOND, "--session", "1", *tiny, "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert main(["run", SECOND, "--session", "1", *tiny, "--json"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    prefill = next(e for e in events if e["type"] == "prefill_done")
    assert planned["prompt_tokens"] == prefill["prompt_tokens"] > bare["prompt_tokens"]
    assert (planned["prompt_counted"], planned["prompt_turns"]) == ("counted by the model's tokenizer", 1)


@pytest.mark.parametrize("policy", ["auto", "lbs", "layerwise"])
def test_the_emulated_plans_automatic_budget_is_the_runs(tiny, policy):
    """Layer-wise's rows hold the question in every layer: its automatic budget is larger, in the plan as in the run."""
    question, search = "y " * 300, SearchConfig(beams=3, width=2, max_steps=2, step_tokens=8)
    cache = CacheConfig(policy=policy, prefix_cache=False)
    p = plan(TINY, search, cache, question=question, device=EMULATED)
    started = next(run(question, tiny, search, cache))
    assert p.kv_budget_bytes == started.kv_budget_bytes and p.state != "red"


@pytest.mark.parametrize("flags, message", [
    (["--model", "{tmp}/missing"], "model path {tmp}/missing does not exist"),
    (["--model", "{tmp}/missing.gguf"], "GGUF file {tmp}/missing.gguf does not exist"),
    (["--model", "{tmp}"], "model folder {tmp} has no config.json"),
    (["--model", "synthetic:tiny-llama", "--verifier", "prm", "--verifier-model", "{tmp}/missing"],
     "the PRM folder {tmp}/missing does not exist"),
    (["--model", "synthetic:tiny-llama", "--verifier", "prm", "--verifier-model", "math-shepherd:{tmp}"],
     "{tmp} has no config.json, so it is not a transformers PRM folder"),
])  # fmt: skip
def test_plan_refuses_a_missing_model_or_prm_as_a_run_does(tmp_path, capsys, flags, message):
    """It said the hub's "Repo id must be in the form ..." for a folder that is not there."""
    assert main(["plan", "q", *(flag.format(tmp=tmp_path) for flag in flags)]) == 2
    assert message.format(tmp=tmp_path) in capsys.readouterr().err


@pytest.mark.parametrize(("given", "message"), [
    ("{tmp}/prm.gguf", "{tmp}/prm.gguf is a file; a PRM is a transformers folder"),
    ("bogus-family:{tmp}", "'bogus-family' in bogus-family:{tmp} is no PRM family Beamwise knows"),
])  # fmt: skip
def test_a_prm_file_or_an_unknown_family_is_named_as_such(tmp_path, capsys, given, message):
    """Both said "the PRM folder ... does not exist": a file that exists, and a family that does not."""
    (tmp_path / "prm.gguf").write_bytes(b"GGUF")
    flags = ["--model", "synthetic:tiny-llama", "--verifier", "prm", "--verifier-model", given.format(tmp=tmp_path)]
    assert main(["plan", "q", *flags]) == 2
    assert message.format(tmp=tmp_path) in capsys.readouterr().err


def test_a_windows_path_is_no_prm_family(tmp_path, monkeypatch):
    from app.early_exit import model_key
    from engine.prm_names import named_family

    assert named_family("C:\\PRMs\\shepherd") == (None, "C:\\PRMs\\shepherd")
    assert named_family("math-shepherd:C:\\PRMs\\x") == ("math-shepherd", "C:\\PRMs\\x")
    assert named_family("synthetic:tiny-llama") == (None, "synthetic:tiny-llama")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "\\PRMs\\missing").mkdir()  # on Windows: the folder \\PRMs\\missing of the current drive
    assert model_key("C:\\PRMs\\missing") == "C:\\PRMs\\missing"  # not family "C" of that folder


def test_on_a_gpu_the_automatic_budget_leaves_the_prefill_the_prompts_kv_twice():
    """The run's automatic budget leaves its prefill the prompt's KV twice beside the pool (engine.context_plan
    .prefill_reserve); the plan's does the same, beside the activations it counts."""
    card = DeviceInfo("cuda (24 GB card)", False, 24_000_000_000)
    model, search = ModelSpec("synthetic:llama2-7b", dtype="bfloat16"), SearchConfig(beams=2, width=2)
    short, long = (plan(model, search, CacheConfig(), question=q, device=card) for q in ("Hi?", "word " * 500))
    kv_token = short.generator.kv_token_bytes
    grown = long.prompt_tokens - short.prompt_tokens
    assert grown > 1000
    assert short.kv_budget_bytes - long.kv_budget_bytes == 2 * grown * kv_token + (
        long.activation_bytes - short.activation_bytes)


PLAN_TINY = ["--model", "synthetic:tiny-llama", "--device", "cpu", "--beams", "2", "--width", "2", "--max-steps", "2",
             "--step-tokens", "8"]


def test_a_question_longer_than_the_context_is_red_in_the_runs_words(capsys):
    """The run refuses a question its model's context cannot hold (exit 2): the plan says so, red, exit 3."""
    long = "What is 2+2? " * 400
    assert main(["run", long, *PLAN_TINY, "--no-save"]) == 2
    refusal = capsys.readouterr().err.strip().splitlines()[-1].removeprefix("beamwise: error: ")
    assert refusal.startswith("The prompt is ") and "the model's context holds 2,048" in refusal
    assert main(["plan", long, *PLAN_TINY]) == 3
    said = f"[red] It cannot run with these settings: t{refusal[1:]}"  # no capital after the colon
    assert said in capsys.readouterr().out
    assert main(["plan", "What is 2+2?", *PLAN_TINY]) == 0


def test_a_model_folder_without_a_tokenizer_is_red_in_the_runs_words(tiny, tmp_path, capsys):
    """`plan` counted a tokenizer-less folder's prompt by estimate and said it fits, where `run` refuses it (exit 2):
    the plan is red in the run's words, for the generator's folder and for a PRM's."""
    tiny.model.save_pretrained(tmp_path / "weights")  # config.json and the weights, no tokenizer files
    folder = tmp_path / "weights"
    flags = [*PLAN_TINY[2:], "--no-save"]
    assert main(["run", "What is 2+2?", "--model", str(folder), *flags]) == 2
    refusal = capsys.readouterr().err.strip().splitlines()[-1].removeprefix("beamwise: error: ")
    assert refusal.startswith(f"model folder {folder} has no tokenizer"), refusal
    assert main(["plan", "What is 2+2?", "--model", str(folder), *PLAN_TINY[2:]]) == 3
    assert f"[red] It cannot run with this model: {refusal}" in capsys.readouterr().out
    as_prm = ["--verifier", "prm", "--verifier-model", f"math-shepherd:{folder}"]
    assert main(["plan", "What is 2+2?", *PLAN_TINY, *as_prm]) == 3
    assert f"[red] It cannot run with this model: {refusal}" in capsys.readouterr().out


def test_a_prefix_cache_ram_cap_below_the_prompts_blocks_is_red_in_the_runs_words(capsys):
    """`plan --prefix-cache-ram 1kB` said green where `run` refuses the cap (exit 2); the smallest cap the refusal
    names is the one that plans green."""
    assert main(["run", "What is 2+2?", *PLAN_TINY, "--no-save", "--prefix-cache-ram", "1kB"]) == 2
    refusal = capsys.readouterr().err.strip().splitlines()[-1].removeprefix("beamwise: error: ")
    assert refusal.startswith("the prefix cache's RAM cap 1,000 bytes (1.0 kB) is too small"), refusal
    assert main(["plan", "What is 2+2?", *PLAN_TINY, "--prefix-cache-ram", "1kB"]) == 3
    assert f"[red] It cannot run with these settings: {refusal}" in capsys.readouterr().out
    smallest = refusal.split("Use --prefix-cache-ram ")[1].split()[0]
    assert main(["plan", "What is 2+2?", *PLAN_TINY, "--prefix-cache-ram", smallest]) == 0
    assert main(["plan", "What is 2+2?", *PLAN_TINY, "--prefix-cache-ram", str(int(smallest) - 1)]) == 3
    capsys.readouterr()
    assert main(["plan", "What is 2+2?", *PLAN_TINY, "--prefix-cache-ram", "1kB", "--no-prefix-cache"]) == 2
    assert "--prefix-cache-ram and --prefix-cache-disk size the prefix cache, which is off" in capsys.readouterr().err


def test_plan_reads_the_question_as_run_does(tmp_path, capsys, monkeypatch):
    """Standard input (`-`), --question-file and --question plan the same prompt as the question in quotes."""
    question = "What is 17 * 23? Show each step."
    assert main(["plan", question, *PLAN_TINY, "--json"]) == 0
    quoted = json.loads(capsys.readouterr().out)["prompt_tokens"]
    path = tmp_path / "q.txt"
    path.write_text(question, encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(question.encode("utf-8"))))
    assert main(["plan", "-", *PLAN_TINY, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["prompt_tokens"] == quoted
    for given in (["--question-file", str(path)], ["--question", question]):
        assert main(["plan", *given, *PLAN_TINY, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["prompt_tokens"] == quoted
    assert main(["plan", "q", "--question-file", str(path), *PLAN_TINY]) == 2
    assert "not both" in capsys.readouterr().err
    assert main(["plan", "   ", *PLAN_TINY]) == 2
    assert "the question is empty" in capsys.readouterr().err
