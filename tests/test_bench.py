"""`bench`: one workload under every policy; plan-only agrees with a real run's counters."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from app.cli import main
from engine.baselines import BASELINES
from engine.bench import LADDER, BenchReport, TimeLimit, Workload, _notes, run_bench
from engine.config import ModelSpec
from engine.kv.layer_budget import STAGING_LAYERS, paper_h2d_bytes
from engine.models import load_model

SMALL = Workload(
    model="synthetic:tiny-qwen2",
    beams=3,
    width=2,
    step_tokens=8,
    prompt_tokens=40,
    gen_tokens=24,
    kv_budget_bytes=900_000,
    seed=2,
)  # layerwise: 2 of 6 layers resident; lbs: 2 groups


@pytest.fixture(scope="module")
def real_report():
    return run_bench(SMALL)


def by_name(report):
    return {r.name: r for r in report.results}


def test_every_policy_runs_with_the_same_tokens(real_report):
    results = by_name(real_report)
    assert set(results) == set(LADDER) and all(r.ok for r in results.values())
    assert real_report.same_tokens and len({r.tokens_digest for r in results.values()}) == 1
    assert results["layerwise"].h2d_vs_layerwise == 1.0
    assert results["lbs:inter_token"].h2d_bytes < results["layerwise"].h2d_bytes
    assert results["lbs:+inter_beam"].h2d_bytes < results["lbs:inter_token"].h2d_bytes
    assert results["in_device"].h2d_bytes == 0


def eq_1_to_3(workload: Workload, held_back: int) -> int:
    """The paper's Eq. 1-3 for the workload, with `held_back` layers of the budget kept for staging
    when not every layer fits (0: the paper's figure; 2: what the real baseline does)."""
    shape = load_model(ModelSpec(workload.model)).kv_shape
    rows, total = workload.beams * workload.width, 0
    for s in range(workload.prompt_tokens - 1, workload.prompt_tokens - 1 + workload.gen_tokens):
        kv_layer = rows * s * shape.layer_token_bytes()
        fit = min(shape.num_layers, workload.kv_budget_bytes // kv_layer)
        fit = fit if fit == shape.num_layers else max(0, fit - held_back)
        total += (shape.num_layers - fit) * kv_layer
    return total


def test_layerwise_row_reports_the_papers_bytes_beside_the_real_ones(real_report):
    """h2d_bytes_eq1 is Eq. 1-3 as the paper writes them; the real baseline holds two staging layers back
    from the budget (README), so it streams two more layers per token and copies more."""
    layerwise = by_name(real_report)["layerwise"]
    shape = load_model(ModelSpec(SMALL.model)).kv_shape
    rows, first = SMALL.beams * SMALL.width, SMALL.prompt_tokens - 1  # the last prompt token is fed by step 1
    layer_bytes, tokens = shape.layer_token_bytes(), SMALL.gen_tokens
    paper = paper_h2d_bytes(SMALL.kv_budget_bytes, rows, layer_bytes, shape.num_layers, first, tokens)
    assert layerwise.h2d_bytes_eq1 == paper == eq_1_to_3(SMALL, 0)
    assert layerwise.h2d_bytes == eq_1_to_3(SMALL, STAGING_LAYERS) > layerwise.h2d_bytes_eq1
    assert all(r.h2d_bytes_eq1 is None for r in real_report.results if r.name != "layerwise")


def test_on_the_cpu_the_outside_baselines_say_why_they_did_not_run(real_report):
    assert [b.name for b in real_report.baselines] == list(BASELINES)
    assert all(not b.ok and "only on CUDA" in b.message for b in real_report.baselines)


def test_the_report_says_the_in_device_rows_ran_without_the_budget(real_report):
    """Their peak passes the budget the header names: the reference keeps every block on the device."""
    in_device = by_name(real_report)["in_device"]
    assert in_device.peak_device_bytes > SMALL.kv_budget_bytes
    note = next(n for n in real_report.notes if "ran without the KV budget" in n)
    assert note.startswith("in_device")
    unbudgeted = BenchReport(Workload(kv_budget_bytes=None), "cpu", emulated=True, plan_only=False)
    unbudgeted.results = real_report.results
    assert not any("without the KV budget" in n for n in _notes(unbudgeted, forced=True))


def test_the_bf16_note_on_cuda_says_sampled_tokens_may_differ():
    bf16 = Workload(dtype="bfloat16")
    on_cuda = _notes(BenchReport(bf16, "cuda:0", emulated=False, plan_only=False), forced=True)
    assert any("sampled tokens may differ" in note and "bfloat16" in note for note in on_cuda)
    for report in (BenchReport(bf16, "cpu", emulated=True, plan_only=False),
                   BenchReport(Workload(), "cuda:0", emulated=False, plan_only=False)):  # fmt: skip
        assert not any("sampled tokens may differ" in note for note in _notes(report, forced=True))


@pytest.mark.parametrize("policy", ["in_device", "layerwise", "lbs:inter_token"])
def test_plan_only_agrees_with_the_real_counters(real_report, policy):
    """Selection-independent policies must match to the byte; the plan runs the same scheduler code on meta tensors."""
    planned = by_name(run_bench(SMALL, [policy], plan_only=True))[policy]
    real = by_name(real_report)[policy]
    counters = lambda r: (r.h2d_bytes, r.d2h_bytes, r.d2h_calls, r.max_groups)  # noqa: E731
    assert counters(planned) == counters(real)
    if policy != "lbs:inter_token":  # lbs copies a run of consecutive slots in one call, and whether a kept
        assert planned.h2d_calls == real.h2d_calls  # candidate's tail shares a run follows the selection
    if policy != "in_device":  # in_device reads the candidates' common prefix in place: its depth follows selection
        assert planned.peak_device_bytes == real.peak_device_bytes


def test_plan_only_sharing_lowers_bytes_and_keeps_peak_under_budget():
    offloading = [name for name in LADDER if not name.startswith("in_device")]  # in_device's budget: the whole search
    report = by_name(run_bench(SMALL, offloading, plan_only=True))
    assert report["lbs:+inter_beam"].h2d_bytes < report["lbs:inter_token"].h2d_bytes
    assert all(r.peak_device_bytes <= SMALL.kv_budget_bytes for r in report.values())


def test_speculative_rungs_make_the_same_tokens_with_fewer_idle_slots():
    workload = Workload(model="synthetic:tiny-llama", beams=6, width=1, step_tokens=10, prompt_tokens=30,
                        gen_tokens=30, step_delimiter="c", seed=0)  # fmt: skip  # one child a beam: all adopt
    names = ["in_device", "in_device:+speculative"]
    report = run_bench(workload, names, baselines=(), teacher_forcing=False)
    plain, speculative = (by_name(report)[name] for name in names)
    assert report.same_tokens and plain.tokens_digest == speculative.tokens_digest
    assert plain.speculative_tokens == 0 < speculative.speculative_used < speculative.speculative_tokens
    assert speculative.forwards <= plain.forwards and speculative.idle_row_slots < plain.idle_row_slots
    forced = run_bench(replace(workload, speculative=False), names, baselines=(), teacher_forcing=False)
    assert by_name(forced)["in_device:+speculative"].speculative_tokens == 0  # --no-speculative wins


TINY_BENCH = ["bench", "--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2", "--step-tokens", "4",
              "--gen-tokens", "8"]  # fmt: skip


def test_bench_cli_prints_a_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main([*TINY_BENCH, "--prompt-tokens", "20", "--kv-budget", "60KB", "--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert "layerwise" in table and "lbs:+balanced_prefetch" in table and "same tokens" in table
    assert "lbs:+speculative" in table and "kept" in table.splitlines()[2]
    data = json.loads(out.read_text())
    assert [r["name"] for r in data["results"]] == list(LADDER) and data["same_tokens"] is True
    assert all(r["ok"] for r in data["results"]), [r["message"] for r in data["results"] if not r["ok"]]
    for name in BASELINES:  # the CPU cannot run them: the table and the JSON say why
        assert any(line.startswith(name + " ") and "not run: outside baselines run only on CUDA" in line
                   for line in table.splitlines()), name  # fmt: skip
    assert [(b["name"], b["ok"]) for b in data["baselines"]] == [(name, False) for name in BASELINES]
    assert all("only on CUDA" in b["message"] for b in data["baselines"])


def test_bench_cli_rejects_unknown_policy_and_unwritable_json(tmp_path, capsys):
    assert main(["bench", "--plan-only", "--policies", "fastest"]) == 2
    assert "unknown policies" in capsys.readouterr().err
    blocker = tmp_path / "file"
    blocker.write_text("x")
    args = ["bench", "--plan-only", "--gen-tokens", "4", "--prompt-tokens", "8", "--json", str(blocker / "x.json")]
    assert main(args) == 2
    assert "cannot write" in capsys.readouterr().err


@pytest.mark.parametrize("flags, said", [
    (["--prompt-tokens", "5000"], "the workload's prompt is 5,000 tokens; the model's context holds 2,048"),
    (["--step-tokens", "4096"], "a step needs 4,096 more"),
    (["--kv-budget", "0"], "the KV budget must be a positive size"),
])  # fmt: skip
def test_a_workload_every_row_would_refuse_is_refused_once_before_any_row(capsys, flags, said):
    """Each policy used to run (or load the model) and fail on its own row, and the bench exited 0."""
    assert main(["bench", "--model", "synthetic:tiny-llama", "--gen-tokens", "4", *flags]) == 2
    err = capsys.readouterr().err
    assert said in err and "[bench] running" not in err


def test_bench_runs_a_question_and_reports_stall_seconds(capsys):
    question = ["--kv-budget", "400KB", "--question", "What is 2+3?", "--policies", "layerwise,lbs:inter_token"]
    assert main([*TINY_BENCH, *question]) == 0
    table = capsys.readouterr().out
    assert "question 'What is 2+3?'" in table and "stall s" in table and "same tokens" in table
    assert "failed" not in table


@pytest.mark.parametrize("question", ["", "   "])
def test_an_empty_question_is_refused_as_run_refuses_it(capsys, question):
    """The bench ran on the question '   ' (and '' on the default question) and exited 0."""
    assert main(["run", question, "--model", "synthetic:tiny-llama", "--no-save"]) == 2
    refusal = capsys.readouterr().err
    argv = ["bench", "--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2", "--step-tokens", "8",
            "--gen-tokens", "16", "--question", question, "--policies", "lbs:inter_token"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert refusal.startswith("beamwise: error: the question is empty") and "[bench]" not in err
    assert err == 'beamwise: error: the question is empty; pass one in quotes, e.g. beamwise bench --question "What ' \
                  'is 12*7?".\n'  # bench reads no question file: run's hint named --question-file


def test_plan_only_refuses_a_question(capsys):
    assert main(["bench", "--plan-only", "--question", "What is 2+3?"]) == 2
    assert "--prompt-tokens" in capsys.readouterr().err


def test_bf16_teacher_forced_differences_are_a_few_rounding_steps_and_the_note_says_why():
    """In bf16 the SDPA paths (lbs:inter_token, layerwise) and the cascade paths round differently;
    the difference must stay within a few bf16 steps of the largest logit (a wrong KV row would not)."""
    workload = Workload(model="synthetic:tiny-llama", dtype="bfloat16", beams=2, width=3, step_tokens=8,
                        prompt_tokens=40, gen_tokens=16, kv_budget_bytes=100_000, seed=1)  # fmt: skip
    report = run_bench(workload, ["in_device", "layerwise", "lbs:inter_token", "lbs:+inter_beam"], baselines=())
    results = by_name(report)
    assert all(r.ok for r in results.values()), [r.message for r in results.values()]
    spacing = torch.finfo(torch.bfloat16).eps * report.reference_max_abs_logit
    assert results["lbs:+inter_beam"].teacher_forced_max_logit_diff == 0.0  # the same cascade attention
    for name in ("layerwise", "lbs:inter_token"):
        assert results[name].teacher_forced_max_logit_diff <= 4 * spacing, name
    assert any("rounding steps are not a policy error" in note for note in report.notes)


def test_repeats_keep_the_fastest_of_identical_runs(monkeypatch):
    import engine.bench as bench

    walls = iter([3.0, 2.0, 2.5])
    real = bench.run_policy

    def timed(*args):
        return replace(real(*args), wall_seconds=next(walls))

    monkeypatch.setattr(bench, "run_policy", timed)
    report = run_bench(SMALL, ["lbs:inter_token"], repeats=3, teacher_forcing=False, baselines=())
    (result,) = report.results
    assert result.ok and result.timed_runs == 3 and result.wall_seconds == 2.0
    with pytest.raises(ValueError, match="repeats"):
        run_bench(SMALL, ["lbs:inter_token"], repeats=0, teacher_forcing=False, baselines=())


def test_a_baseline_reports_candidate_tokens_per_second_in_its_json(monkeypatch, tiny):
    """Timed here on the CPU (the check that it runs only on CUDA set aside): the rate is tokens over wall."""
    import engine.baselines as baselines
    from app.bench_table import format_report
    from engine.baselines import run_baseline

    monkeypatch.setattr(baselines, "why_not", lambda name, device: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    run = run_baseline(tiny, "generate", [5, 6, 7, 8], rows=2, gen_tokens=4, seed=0)
    assert run.ok and run.candidate_tokens == 8 and run.wall_seconds > 0
    assert run.tokens_per_second == pytest.approx(8 / run.wall_seconds)
    report = BenchReport(Workload(), "cpu", emulated=True, plan_only=False, baselines=[run])
    assert report.to_dict()["baselines"][0]["tokens_per_second"] == run.tokens_per_second
    assert f"{run.tokens_per_second:.1f} candidate-tokens/s" in format_report(report)


def test_the_auto_delimiter_is_the_most_sampled_token_that_can_end_a_step():
    from engine.auto_delimiter import most_sampled_text

    texts = {2: "", 5: "x", 7: "c", 8: "\ufffd", 9: "E"}
    decode = lambda ids: "".join(texts[i] for i in ids)  # noqa: E731
    assert most_sampled_text([5, 7, 7, 9, 9, 9, 2, 2, 2, 2, 8, 8, 8, 8, 8], decode, eos_ids=[9]) == "c"
    assert most_sampled_text([5, 7, 5, 7], decode) == "x"  # a tie: the one sampled first
    assert most_sampled_text([2, 8], decode) is None and most_sampled_text([], decode) is None


def test_bench_picks_the_step_delimiter_the_tiny_model_samples_most_and_its_steps_end_on_it(tiny):
    from collections import Counter

    from engine.bench import observe_run
    from engine.search import run

    workload = Workload(model="synthetic:tiny-llama", beams=3, width=2, step_tokens=10, prompt_tokens=30,
                        gen_tokens=30, step_delimiter="auto", seed=1)  # fmt: skip
    report = run_bench(workload, ["in_device", "in_device:+speculative"], baselines=(), teacher_forcing=False)
    chosen = report.step_delimiter_auto
    assert chosen and report.workload.step_delimiter == chosen and report.to_dict()["step_delimiter_auto"] == chosen
    prompt = workload.prompt_ids(tiny)
    first_step = observe_run(tiny, replace(workload, gen_tokens=10, step_delimiter=None), "in_device", prompt)
    counts = Counter(t for tokens in first_step.tokens.values() for t in tokens)
    (token,) = [t for t in counts if tiny.decode([t]) == chosen]  # one token the model did sample
    can_end = lambda t: tiny.decode([t]) and "\ufffd" not in tiny.decode([t]) and t not in tiny.eos_token_ids  # noqa: E731
    assert all(n <= counts[token] for t, n in counts.items() if can_end(t))
    texts = [e for e in run("", tiny, report.workload.search(), report.workload.cache("in_device"),
                            prompt_ids=prompt) if e.type == "candidate_text"]  # fmt: skip
    assert all(e.text.endswith(chosen) or e.tokens == workload.step_tokens or e.finished for e in texts)
    assert any(e.text.endswith(chosen) and e.tokens < workload.step_tokens for e in texts), "steps end on it"
    results = by_name(report)
    assert report.same_tokens and results["in_device"].idle_row_slots > 0
    assert results["in_device:+speculative"].speculative_tokens > 0


def test_bench_cli_prints_and_stores_the_auto_delimiter_and_a_plan_refuses_it(tmp_path, capsys):
    out = tmp_path / "auto.json"
    args = [*TINY_BENCH, "--prompt-tokens", "20", "--policies", "in_device", "--step-delimiter", "auto"]
    assert main([*args, "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    chosen = data["step_delimiter_auto"]
    assert chosen and data["workload"]["step_delimiter"] == chosen
    assert f"ending at {chosen!r} (auto: the warm-up's most sampled token)" in capsys.readouterr().out
    assert main(["bench", "--plan-only", "--step-delimiter", "auto"]) == 2
    assert "--step-delimiter TEXT" in capsys.readouterr().err


class SteppedClock:
    """A clock that stands still until armed, then jumps past any limit after `calls` more readings."""

    def __init__(self) -> None:
        self.now, self.left = 0.0, None

    def arm(self, calls: int) -> None:
        self.left = calls

    def __call__(self) -> float:
        if self.left is not None:
            self.left -= 1
            if self.left < 0:
                self.now = 1e9
        return self.now


def test_a_time_limit_stops_the_run_it_overtakes_and_starts_no_more_rows_and_each_row_says_so():
    clock, seen = SteppedClock(), []

    def progress(text):
        if text == "running lbs:inter_token":
            clock.arm(6)  # a few steps' and forward calls' readings into its run

    def on_row(report):
        seen.append(([r.name for r in report.results], [b.name for b in report.baselines], report.complete))

    policies = ["in_device", "lbs:inter_token", "layerwise"]
    report = run_bench(SMALL, policies, time_limit=TimeLimit(60, clock), progress=progress, on_row=on_row)
    first, stopped, skipped = report.results
    assert first.ok and not first.timed_out and first.teacher_forced_max_logit_diff == 0
    assert not stopped.ok and stopped.timed_out and stopped.candidate_tokens is None and stopped.wall_seconds > 0
    assert stopped.message.startswith("stopped by the bench's time limit (60 s) after ")
    assert stopped.message.endswith("time it alone (--policies lbs:inter_token)")
    assert not skipped.ok and skipped.timed_out
    assert skipped.message == "not run: the bench's time limit (60 s) had passed; time it alone (--policies layerwise)"
    # on the CPU the baselines' own reason comes first: the time limit did not keep them from running
    assert [(b.name, b.ok, b.timed_out) for b in report.baselines] == [(name, False, False) for name in BASELINES]
    assert all(b.message.startswith("outside baselines run only on CUDA") for b in report.baselines)
    assert seen == [
        (policies[:1], [], False), (policies[:2], [], False), (policies, [], False),
        (policies, list(BASELINES[:1]), False), (policies, list(BASELINES), False),
    ]  # fmt: skip
    assert report.complete and report.time_limit_seconds == 60 and report.to_dict()["complete"] is True
    cut = ", ".join(["lbs:inter_token", "layerwise"])
    assert f"the time limit (60 s) stopped or did not start: {cut}; each row says how to time it alone" in report.notes


def test_no_time_limit_stops_nothing_and_a_limit_must_be_positive():
    assert not TimeLimit().passed() and not TimeLimit(None, lambda: 1e12).passed()
    for seconds in (0, -5):
        with pytest.raises(ValueError, match="positive number of seconds"):
            TimeLimit(seconds)
    report = run_bench(SMALL, ["in_device"], teacher_forcing=False, baselines=())
    assert report.time_limit_seconds is None and report.complete and not report.results[0].timed_out


def test_a_baseline_the_time_limit_overtakes_ends_early_and_says_so(monkeypatch, tiny):
    import engine.baselines as baselines
    from engine.baselines import _AskedToStop, _generate, run_baseline

    monkeypatch.setattr(baselines, "why_not", lambda name, device: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    readings = iter(range(100))
    run = run_baseline(tiny, "generate", [5, 6, 7, 8], rows=2, gen_tokens=12, seed=0,
                       should_stop=lambda: next(readings) >= 3)  # fmt: skip
    assert not run.ok and run.timed_out and run.candidate_tokens is None and run.wall_seconds > 0
    assert run.message == "stopped before its last token"
    stop = _AskedToStop(lambda: True)
    assert _generate(tiny, "generate", [5, 6, 7, 8], 2, 12, 0, stop) == 2 and stop.asked  # one token a row, not 12
    assert _generate(tiny, "generate", [5, 6, 7, 8], 2, 12, 0, _AskedToStop(lambda: False)) == 24


def test_bench_cli_refuses_a_time_limit_that_is_not_positive(capsys):
    assert main(["bench", "--plan-only", "--gen-tokens", "4", "--prompt-tokens", "8", "--time-limit", "0"]) == 2
    assert "--time-limit must be a positive number of seconds (got 0)" in capsys.readouterr().err


def test_the_table_shows_rows_the_time_limit_cut_in_its_own_words():
    from app.bench_table import format_report
    from engine.baselines import BaselineRun
    from engine.bench import PolicyResult

    limit = TimeLimit(30)
    report = BenchReport(Workload(), "cuda:0", emulated=False, plan_only=False, time_limit_seconds=30)
    report.results = [PolicyResult("layerwise", False, limit.stopped(31.4, "--policies layerwise"), timed_out=True),
                      PolicyResult("lbs:inter_token", False, "budget too small")]  # fmt: skip
    report.baselines = [BaselineRun("generate", False, limit.not_run("--baselines generate"), timed_out=True)]
    table = format_report(report).splitlines()
    assert "layerwise               stopped by the bench's time limit (30 s) after 31 s of this run; time it alone " \
           "(--policies layerwise)" in table
    assert "lbs:inter_token         failed: budget too small" in table
    assert "generate                not run: the bench's time limit (30 s) had passed; time it alone " \
           "(--baselines generate)" in table


def test_bench_cli_times_the_baselines_it_is_given(tmp_path, capsys):
    """`--baselines` picks the outside baselines (what a row the time limit cut tells the user to give)."""
    out = tmp_path / "bench.json"
    base = ["bench", "--model", "synthetic:tiny-llama", "--policies", "in_device", "--gen-tokens", "8",
            "--prompt-tokens", "16", "--step-tokens", "4", "--beams", "2", "--width", "2",
            "--json", str(out)]  # fmt: skip
    assert main([*base, "--baselines", ""]) == 0
    assert json.loads(out.read_text())["baselines"] == []
    assert main([*base, "--baselines", "generate:offloaded"]) == 0
    assert [b["name"] for b in json.loads(out.read_text())["baselines"]] == ["generate:offloaded"]
    capsys.readouterr()
    assert main([*base, "--baselines", "vllm"]) == 2
    assert "unknown baselines ['vllm']; choose from generate, generate:offloaded" in capsys.readouterr().err


def test_on_cuda_every_policy_and_baseline_is_warmed_up_untimed_on_the_workloads_rows(tiny, monkeypatch):
    """Only the first policy and a one-row `generate` were warmed up, so later rows (layer-wise, the offloaded
    cache, generate on 64 rows) paid their first run's costs in their timed wall. Each now runs one short step
    first, the baselines on every row."""
    from engine import bench

    ran = []
    monkeypatch.setattr(bench, "release_cached_memory", lambda host=False: None)
    monkeypatch.setattr(bench, "run_policy", lambda loaded, workload, name, prompt, limit=None: ran.append(
        (name, workload.step_tokens, workload.gen_tokens)))  # fmt: skip
    monkeypatch.setattr(bench, "run_baseline", lambda loaded, name, prompt, rows, tokens, seed, stop: ran.append(
        (name, rows, tokens)))  # fmt: skip
    workload = Workload(beams=4, width=4, step_tokens=32, gen_tokens=128, prompt_tokens=16)
    bench.warm_up(tiny, workload, [1, 2, 3], ["in_device", "layerwise", "lbs:+prefix_order"], list(BASELINES))
    assert ran == [("in_device", 4, 4), ("layerwise", 4, 4), ("lbs:+prefix_order", 4, 4),
                   ("generate", 16, 4), ("generate:offloaded", 16, 4)]  # fmt: skip


def test_a_workloads_question_is_the_prompt_a_search_sends_for_it(tiny):
    """The workload built its own chat prompt and kept the spaces the search strips from a question."""
    from engine.search import prompt_ids

    question = "  What is 2+3?\n"
    assert Workload(question=question).prompt_ids(tiny) == prompt_ids(tiny.encode_chat, question)
    assert Workload(question=question).prompt_ids(tiny) == Workload(question=question.strip()).prompt_ids(tiny)
