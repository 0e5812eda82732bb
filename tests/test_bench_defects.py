"""`beamwise bench` defects a tester found: --json over FIFOs, devices and links, options --versus-generate ignored,
Ctrl+C losing the finished rows, runs that measured nothing exiting 0, time-limit wording, a zero KV budget,
--gpu-memory without --max-context, the layer-wise Eq. 1-3 figure, and in_device replayed against itself."""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
from pathlib import Path

import pytest

from app.cli import main
from engine.bench import BenchReport, PolicyResult, TimeLimit, Workload, run_bench
from engine.kv.layer_budget import resident_layers
from tests.test_sessions_defects import _release, posix_only

TINY = ["--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2", "--step-tokens", "4", "--gen-tokens", "8",
        "--prompt-tokens", "20"]  # fmt: skip
PLAN = ["--plan-only", *TINY, "--kv-budget", "60KB", "--policies", "layerwise,lbs:inter_token"]  # no weights: fast
TINY_WORKLOAD = Workload(model="synthetic:tiny-llama", beams=2, width=2, step_tokens=4, gen_tokens=8, prompt_tokens=20,
                         kv_budget_bytes=60_000)  # fmt: skip


def bench(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(["bench", *argv])
    except SystemExit as stop:  # argparse's refusals
        code = stop.code
    out, err = capsys.readouterr()
    return code, out, err


def error_line(err: str) -> str:
    """The one `beamwise: error:` line (progress lines may come before it)."""
    (line,) = [line for line in err.splitlines() if line.startswith("beamwise: error: ")]
    return line


# ---------------------------------------------------------------- 1: --json over what is not a plain file


@posix_only
def test_json_into_a_fifo_is_written_once_whole_and_it_stays_a_fifo(tmp_path: Path, capsys) -> None:
    """The placeholder and every row's save renamed a plain file over the FIFO: its reader got a placeholder (or
    nothing) and the FIFO was gone. A FIFO takes the final report once."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    read: list[bytes] = []
    reader = threading.Thread(target=lambda: read.append(fifo.read_bytes()), daemon=True)
    reader.start()
    code, out, _ = bench(capsys, *PLAN, "--json", str(fifo))
    _release(fifo)
    reader.join(timeout=10)
    assert code == 0 and f"wrote {fifo}" in out
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    data = json.loads(read[0])  # one document: not a placeholder followed by each row's version
    assert data["complete"] is True and [r["name"] for r in data["results"]] == ["layerwise", "lbs:inter_token"]


@posix_only
def test_json_into_a_character_device_writes_into_it_and_a_full_one_is_an_error(device_nodes, capsys) -> None:
    """As root, `--json /dev/null` replaced /dev/null with a plain file. Nodes of the same devices made under the
    test's folder (never /dev itself): null takes the JSON, full says there is no space, both stay devices."""
    null, full = device_nodes
    code, out, _ = bench(capsys, *PLAN, "--json", str(null))
    assert code == 0 and f"wrote {null}" in out and stat.S_ISCHR(os.lstat(null).st_mode)
    code, _, err = bench(capsys, *PLAN, "--json", str(full))
    line = error_line(err)
    assert code == 2 and f"cannot write {full}" in line and "No space left on device" in line
    assert "pick a writable --json path" in line.lower()
    assert stat.S_ISCHR(os.lstat(null).st_mode) and stat.S_ISCHR(os.lstat(full).st_mode)


def test_json_through_a_symlink_replaces_the_file_it_names_and_keeps_the_link(tmp_path: Path, capsys) -> None:
    """The link was replaced by a plain file, and the file it named kept the last run's results."""
    target, link = tmp_path / "target.json", tmp_path / "link.json"
    target.write_text('{"earlier": true}', encoding="utf-8")
    link.symlink_to(target.name)
    code, _, _ = bench(capsys, *PLAN, "--json", str(link))
    assert code == 0 and link.is_symlink() and os.readlink(link) == target.name
    assert json.loads(target.read_text(encoding="utf-8"))["complete"] is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "target.json"]  # no temporary file left


@posix_only
def test_json_to_a_socket_is_refused_before_any_row_and_left_alone(tmp_path: Path, capsys) -> None:
    path = tmp_path / "sock"
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(path))
        code, _, err = bench(capsys, *PLAN, "--json", str(path))
        assert code == 2 and "[bench] running" not in err
        line = error_line(err)
        assert f"cannot write {path}: it is a socket" in line and "Pick a writable --json path" in line
        assert stat.S_ISSOCK(os.lstat(path).st_mode)


# ---------------------------------------------------------------- 2: --versus-generate and the options it ignored


@pytest.mark.parametrize("given, named", [
    (["--plan-only"], "--plan-only"),
    (["--policies", "fastest"], "--policies"),
    (["--kv-budget", "1MB"], "--kv-budget"),
    (["--prompt-tokens", "9"], "--prompt-tokens"),
    (["--gen-tokens", "9"], "--gen-tokens"),
    (["--time-limit", "5"], "--time-limit"),
    (["--baselines", ""], "--baselines"),
    (["--gen-tokens", "9", "--kv-budget", "1MB"], "--kv-budget, --gen-tokens"),
    (["--backend", "openai"], "--backend openai"),
])  # fmt: skip
def test_versus_generate_refuses_the_options_it_does_not_use(capsys, given, named) -> None:
    """Each was taken without a word (an unknown policy too) and the comparison ran on the default question."""
    code, out, err = bench(capsys, "--versus-generate", "--model", "synthetic:tiny-llama", *given)
    line = error_line(err)
    assert code == 2 and out == "" and err == line + "\n"
    assert f"does not use {named}: leave" in line and "or leave out --versus-generate" in line


def test_versus_generate_runs_on_the_question_and_its_json_names_the_model_and_seed(tmp_path, capsys, tiny) -> None:
    from engine.search import SYSTEM_PROMPT

    out = tmp_path / "vg.json"
    question = "What is 7 x 8?"
    code, printed, _ = bench(capsys, "--versus-generate", "--model", "synthetic:tiny-llama", "--beams", "1",
                             "--width", "2", "--step-tokens", "4", "--seed", "3", "--question", question,
                             "--json", str(out))  # fmt: skip
    assert code == 0 and f"question {question!r}" in printed and "seed 3" in printed
    data = json.loads(out.read_text(encoding="utf-8"))
    assert (data["model"], data["seed"], data["question"]) == ("synthetic:tiny-llama", 3, question)
    assert data["prompt_tokens"] == len(tiny.encode_chat(question, system=SYSTEM_PROMPT))
    assert data["candidates"] == 2 and data["tokens"] == 4


def test_versus_generate_rates_no_engine_step_that_failed(tmp_path, capsys, tiny) -> None:
    """The search never raises: its RunFailed was thrown away, and the failed step's tokens/s and its ratio to
    model.generate were printed and written with exit 0."""
    from engine.baselines import EngineStepFailed, versus_generate

    eos = tiny.eos_token_ids
    with pytest.raises(EngineStepFailed, match=r"did not finish.*context holds 2,048"):
        versus_generate(tiny, [5] * tiny.context_length, candidates=2, tokens=4)  # no room for a step
    assert tiny.eos_token_ids == eos
    out = tmp_path / "vg.json"
    code, printed, err = bench(capsys, "--versus-generate", "--model", "synthetic:tiny-llama", "--beams", "1",
                               "--width", "2", "--step-tokens", "4", "--question", "7 " * 2100,
                               "--json", str(out))  # fmt: skip
    assert code == 2 and "candidate-tokens/s" not in printed and not out.exists()
    assert "the engine step did not finish" in error_line(err) and "context holds" in error_line(err)


# ---------------------------------------------------------------- 3: Ctrl+C keeps the finished rows


@pytest.mark.parametrize("with_json", [False, True])
def test_ctrl_c_prints_the_finished_rows_and_says_where_the_json_stands(tmp_path, capsys, monkeypatch,
                                                                        with_json) -> None:
    """Ctrl+C printed only "beamwise: interrupted" and exit 130: every finished row was lost from the screen."""
    import engine.bench as engine_bench

    real = engine_bench.fastest_run

    def interrupted_at_the_third(loaded, workload, name, *args, **kwargs):
        if name == "lbs:inter_token":
            raise KeyboardInterrupt
        return real(loaded, workload, name, *args, **kwargs)

    monkeypatch.setattr(engine_bench, "fastest_run", interrupted_at_the_third)
    out = tmp_path / "b.json"
    json_args = ["--json", str(out)] if with_json else []
    code, printed, err = bench(capsys, *TINY, "--kv-budget", "60KB", "--policies",
                               "in_device,layerwise,lbs:inter_token,headwise", *json_args)  # fmt: skip
    assert code == 130
    rows = [line.split()[0] for line in printed.splitlines()[3:] if line and not line.startswith(("note", "the "))]
    assert rows[:2] == ["in_device", "layerwise"] and "lbs:inter_token" not in printed and "headwise" not in printed
    assert "the 2 policies that ran produced the same tokens (the check covers only them; the bench was " \
           "interrupted before the rest)" in printed
    last = err.strip().splitlines()[-1]
    assert last.startswith("beamwise: interrupted; the table above holds the 2 finished row(s)")
    if with_json:
        assert last.endswith(f"{out} keeps them (complete: false)")
        data = json.loads(out.read_text(encoding="utf-8"))
        assert data["complete"] is False and [r["name"] for r in data["results"]] == ["in_device", "layerwise"]
    else:
        assert "keeps them" not in last


# ---------------------------------------------------------------- 4: runs that measure nothing


@pytest.mark.parametrize("policies", ["", " , "])
def test_an_empty_policy_list_is_refused(capsys, policies) -> None:
    """It printed an empty table and exited 0."""
    code, out, err = bench(capsys, *PLAN[:-2], "--policies", policies)
    assert code == 2 and out == ""
    assert "--policies names no policy" in error_line(err) and "give one or more of: in_device" in err
    assert "lbs:+speculative, or lbs (lbs:+prefix_order)." in err  # the alias --policies takes too


def test_a_bench_whose_every_row_failed_exits_1_and_says_so(capsys) -> None:
    code, out, err = bench(capsys, "--plan-only", *TINY, "--kv-budget", "1", "--policies", "lbs:+inter_beam")
    assert code == 1 and "lbs:+inter_beam         failed: KV budget 1 B is too small" in out
    assert "none of the 1 rows produced a figure; each says above why and what to change" in error_line(err)


# ---------------------------------------------------------------- 5: time-limit wording


def test_on_the_cpu_a_baseline_past_the_time_limit_gives_the_cuda_reason_not_the_limit() -> None:
    """They said "time it alone (--baselines generate)", which can never run on a CPU."""
    readings = iter([0.0])  # the limit's start; every later reading is past it
    limit = TimeLimit(60, lambda: next(readings, 1e9))
    report = run_bench(TINY_WORKLOAD, ["in_device"], time_limit=limit)
    assert report.results[0].timed_out
    assert [(b.ok, b.timed_out) for b in report.baselines] == [(False, False)] * len(report.baselines)
    assert all(b.message.startswith("outside baselines run only on CUDA") for b in report.baselines)
    cut = next(n for n in report.notes if n.startswith("the time limit"))
    assert "stopped or did not start: in_device;" in cut


def test_the_same_tokens_line_says_it_covers_only_the_rows_that_ran() -> None:
    """It said "every policy produced the same tokens" when the time limit had kept some from running."""
    from app.bench_table import format_report

    ran = [PolicyResult(name, True, tokens_digest="d", wall_seconds=1.0) for name in ("in_device", "layerwise")]
    cut = PolicyResult("headwise", False, TimeLimit(30).not_run("--policies headwise"), timed_out=True)
    report = BenchReport(Workload(), "cpu", emulated=True, plan_only=False, results=[*ran, cut], complete=True)
    assert format_report(report).splitlines()[-1] == (
        "the 2 policies that ran produced the same tokens (the check covers only them; 1 did not run or did not "
        "finish)")
    report.results, report.same_tokens = ran, False
    warned = format_report(report).splitlines()
    assert warned[-2] == "WARNING: the policies produced different tokens"
    assert warned[-1].startswith("(in_device and lbs with inter-beam sharing attend through cascade attention")
    report.same_tokens = True
    assert format_report(report).splitlines()[-1] == "every policy produced the same tokens"


# ---------------------------------------------------------------- 6, 7: settings that did nothing


def test_a_zero_kv_budget_is_refused_with_in_device_too(capsys) -> None:
    """With in_device alone it ran, and the header said "KV budget auto"."""
    code, out, err = bench(capsys, *TINY, "--kv-budget", "0", "--policies", "in_device")
    assert code == 2 and out == "" and "[bench]" not in err
    assert "the KV budget must be a positive size such as 64MB, or unset for automatic." in error_line(err)
    with pytest.raises(ValueError, match="positive size"):
        Workload(kv_budget_bytes=0)


@pytest.mark.parametrize("given", [["--gpu-memory", "24GB"], ["--host-ram", "64GB"]])
def test_gpu_memory_and_host_ram_without_max_context_are_refused(capsys, given) -> None:
    code, out, err = bench(capsys, *PLAN, *given)
    assert code == 2 and out == "" and "[bench]" not in err
    assert "--gpu-memory and --host-ram size the machine for --max-context" in error_line(err)


# ---------------------------------------------------------------- 8: layer-wise Eq. 1-3 over the rows decoded


def test_the_layerwise_eq1_figure_counts_the_rows_the_run_decoded(tiny) -> None:
    """Eq. 1-3 assumed all 16 rows for every token; here the last step has 12 (candidates ended), and on
    tiny-llama 8x4 that made the paper's figure twice the measured one, against the footnote's reason. Per step,
    the same rows and tokens with two staging layers held back give the measured bytes to the byte, and with none
    held back (the paper) the footnote's figure, which can then only be lower."""
    from app.bench_table import format_report
    from engine.search import run

    workload = Workload(model="synthetic:tiny-llama", beams=4, width=4, step_tokens=16, prompt_tokens=24,
                        gen_tokens=64, seed=1, kv_budget_bytes=600_000)  # fmt: skip
    report = run_bench(workload, ["layerwise"], baselines=(), teacher_forcing=False)
    (row,) = report.results
    prompt = workload.prompt_ids(tiny)
    rows, tokens = {}, {}
    for event in run("", tiny, workload.search(), workload.cache("layerwise"), prompt_ids=prompt):
        if event.type == "group_scheduled":
            rows[event.step] = rows.get(event.step, 0) + len(event.candidates)
        elif event.type == "transfer_stats":
            tokens[event.step] = event.forwards
    assert min(rows.values()) < workload.search().candidates_per_step  # rows did fall: the case the figure missed

    def eq_1_to_3(held_back: int, every_row: bool = False) -> int:
        shape, length, total = tiny.kv_shape, len(prompt) - 1, 0
        for step in sorted(tokens):
            for _ in range(tokens[step]):
                kv_layer = (16 if every_row else rows[step]) * length * shape.layer_token_bytes()
                fit = min(shape.num_layers, workload.kv_budget_bytes // kv_layer)
                fit = resident_layers(workload.kv_budget_bytes, kv_layer, shape.num_layers) if held_back else fit
                total += (shape.num_layers - fit) * kv_layer
                length += 1
        return total

    assert row.ok and row.h2d_bytes == eq_1_to_3(held_back=2)
    assert row.h2d_bytes_eq1 == eq_1_to_3(held_back=0) < row.h2d_bytes
    assert row.h2d_bytes_eq1 != eq_1_to_3(held_back=0, every_row=True)
    assert "by the paper's Eq. 1-3 over the rows it decoded (which holds no staging layers back" in \
        format_report(report)


# ---------------------------------------------------------------- in_device is not replayed against itself


def test_in_device_is_not_teacher_forced_against_its_own_run(monkeypatch) -> None:
    """The replay cost a whole extra in_device run (~24 s of a GPU loan) to report 0; its field stays, 0.0."""
    import engine.bench as engine_bench

    observed = []
    real = engine_bench.observe_run

    def recorded(loaded, workload, name, prompt, replay=None, *args, **kwargs):
        observed.append((name, replay is not None))
        return real(loaded, workload, name, prompt, replay, *args, **kwargs)

    monkeypatch.setattr(engine_bench, "observe_run", recorded)
    report = run_bench(TINY_WORKLOAD, ["in_device", "layerwise"], baselines=())
    assert observed == [("in_device", False), ("layerwise", True)]  # the reference, then layerwise's replay
    in_device, layerwise = report.results
    assert in_device.teacher_forced_max_logit_diff == 0.0 and layerwise.teacher_forced_max_logit_diff is not None
    assert report.to_dict()["results"][0]["teacher_forced_max_logit_diff"] == 0.0
