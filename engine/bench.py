"""The policy comparison harness: one workload, every policy and the LBS ablation ladder, one run.

It reports bytes (exact), wall/copy/compute seconds, stall share and candidate-tokens/s per
policy, ratios to `layerwise` and `in_device`, and whether every policy produced the same
tokens. It asserts nothing about speed: that is for the reader of the table.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

import torch

from engine.auto_delimiter import AUTO_DELIMITER, most_sampled_text
from engine.baselines import BaselineRun, run_baseline, why_not
from engine.bench_results import BenchReport, PolicyResult, TimeLimit, planned
from engine.errors import ConfigError, InvalidPrompt, format_bytes
from engine.idle import release_cached_memory
from engine.kv.layer_budget import paper_h2d_bytes
from engine.kv.streams import host_allocator_stats
from engine.replay import Observed, Replay, max_logit_diff
from engine.workload import BASELINES, LADDER, Workload, check_names

REFERENCE = "in_device"  # the policy whose tokens every row is teacher-forced on (every block on the device)


def run_policy(
    loaded, workload: Workload, name: str, prompt_ids: Sequence[int], limit: TimeLimit | None = None
) -> PolicyResult:
    """One policy on the workload, timed; failures (such as a budget too small) become a result, not an error,
    and so does a run `limit` stops.

    Nothing observes the logits here (that would copy them to the host every token): the
    tokens' digest is taken from each candidate's text.
    """
    from engine.search import run

    limit = limit or TimeLimit()
    texts: dict[int, str] = {}
    rows: dict[int, int] = {}  # step: candidates its groups decoded
    pinned = host_allocator_stats(reset_peak=True)
    stats, selected, peak, budget, started = [], [], 0, None, time.perf_counter()
    question = workload.question or ""  # what a PRM reads as the question (the prompt is `prompt_ids`)
    events = run(question, loaded, workload.search(), workload.cache(name), prompt_ids=prompt_ids,
                 should_stop=limit.passed)  # fmt: skip
    for event in events:
        if event.type == "run_started":
            budget = event.kv_budget_bytes
        elif event.type == "transfer_stats":
            stats.append(event)
        elif event.type == "step_selected":
            selected.append(event)
        elif event.type == "candidate_text":
            texts[event.id] = event.text
        elif event.type == "group_scheduled":
            rows[event.step] = rows.get(event.step, 0) + len(event.candidates)
        elif event.type == "memory_snapshot":
            peak = max(peak, event.peak_device_bytes)
        elif event.type == "run_failed":
            return PolicyResult(name, False, event.message, kv_budget_bytes=budget)
        elif event.type == "run_cancelled":
            seconds = time.perf_counter() - started  # the whole run would have taken longer: a bound for a reader
            message = limit.stopped(seconds, f"--policies {name}")
            return PolicyResult(name, False, message, wall_seconds=seconds, timed_out=True)
        elif event.type == "run_finished":
            finished = event
    wall = time.perf_counter() - started
    pinned_after = host_allocator_stats()
    compute = sum(s.compute_seconds for s in stats)
    stall = sum(s.stall_share * s.compute_seconds / (1 - s.stall_share) for s in stats if s.stall_share < 1)
    last = stats[-1]
    decoded = [(rows.get(s.step, 0), s.forwards) for s in stats]
    return PolicyResult(
        name=name, ok=True, h2d_bytes=last.h2d_bytes, d2h_bytes=last.d2h_bytes, d2d_bytes=last.d2d_bytes,
        step_h2d_bytes=sum(s.step_h2d_bytes for s in stats) // len(stats),
        step_pcie_bytes=sum(s.step_h2d_bytes + s.step_d2h_bytes for s in stats) // len(stats),
        kv_budget_bytes=budget,
        peak_device_bytes=peak, max_groups=max(s.groups for s in stats), wall_seconds=wall,
        copy_seconds=sum(s.copy_seconds for s in stats), compute_seconds=compute,
        modelled_pcie_seconds=sum(s.modelled_pcie_seconds for s in stats), stall_seconds=stall,
        stall_share=stall / (stall + compute) if stall + compute else 0.0,
        candidate_tokens=finished.candidate_tokens, tokens_per_second=finished.candidate_tokens / wall,
        goodput=finished.goodput, idle_row_slots=sum(s.idle_row_slots for s in stats),
        h2d_calls=last.h2d_calls, d2h_calls=last.d2h_calls,
        forwards=sum(s.forwards for s in stats), speculative_tokens=finished.speculative_tokens,
        speculative_used=finished.speculative_used, speculative_discarded=finished.speculative_discarded,
        speculative_runs=finished.speculative_runs, speculative_lent_runs=finished.speculative_lent_runs,
        verifier_tokens=sum(s.verifier_tokens for s in selected),
        verifier_forwards=sum(s.verifier_forwards for s in selected),
        verifier_rows=sum(s.verifier_rows for s in selected),
        lookahead_verified=finished.lookahead_verified, lookahead_used=finished.lookahead_used,
        tokens_digest=hashlib.sha256(repr(sorted(texts.items())).encode()).hexdigest()[:16],
        pinned_peak_bytes=None if pinned_after is None else pinned_after.peak,
        pin_seconds=None if pinned is None or pinned_after is None else pinned_after.pin_seconds - pinned.pin_seconds,
        h2d_bytes_eq1=layerwise_eq1(workload, loaded, prompt_ids, decoded) if name == "layerwise" else None,
        timed_runs=1,
    )


def fastest_run(
    loaded, workload: Workload, name: str, prompt_ids: Sequence[int], repeats: int, limit: TimeLimit | None = None
) -> PolicyResult:
    """The fastest of `repeats` timed runs of one policy (a failed first run is returned at once; once `limit`
    has passed, the fastest of the runs finished). Pinned host memory the policy's first run left cached stays
    for its later runs, as it would for an app's next question."""
    runs = []
    for repeat in range(repeats):
        # each run starts with the device as the last one found it (a failed run's frames may hold tensors in
        # reference cycles; torch's allocators keep freed blocks cached); a policy's first run also without the
        # last policy's pinned blocks (their sizes seldom fit, and they stay locked in RAM)
        release_cached_memory(host=repeat == 0)
        result = run_policy(loaded, workload, name, prompt_ids, limit)
        if not result.ok:
            if runs and limit is not None and limit.passed():
                break
            return result
        runs.append(result)
    best = min(runs, key=lambda r: r.wall_seconds)
    best.timed_runs = len(runs)
    return best


def observe_run(
    loaded, workload: Workload, name: str, prompt_ids: Sequence[int], replay: Replay | None = None,
    should_stop: Callable[[], bool] = lambda: False,
):  # fmt: skip
    """An untimed run that records every position's logits (and, with `replay`, is teacher-forced); None when it
    did not finish."""
    from engine.search import run

    observed = Observed()
    events = observed.take(
        run("", loaded, workload.search(), workload.cache(name), observe_logits=observed.observe,
            prompt_ids=prompt_ids, replay=replay, should_stop=should_stop)
    )  # fmt: skip
    return observed if events and events[-1].type == "run_finished" else None


def layerwise_eq1(
    workload: Workload, loaded, prompt_ids: Sequence[int], decoded: Sequence[tuple[int, int]]
) -> int | None:
    """The paper's Eq. 1-3 (no staging layers held back) over what the run decoded, or None without a budget.

    `decoded` is each step's (rows, tokens): the candidates its group ran and its forward calls, the KV length
    growing by one a token from the prompt's. Rows fall as candidates end (EOS): a figure that assumed every step
    had all `candidates_per_step` rows was twice the measured bytes on tiny-llama 8x4, though Eq. 1, holding no
    staging layers back, keeps more layers resident and can only copy less for the same rows."""
    if workload.kv_budget_bytes is None:
        return None
    shape, total = loaded.kv_shape, 0
    length = len(prompt_ids) - 1  # the last prompt token is fed by the first step
    for rows, tokens in decoded:
        total += paper_h2d_bytes(workload.kv_budget_bytes, rows, shape.layer_token_bytes(), shape.num_layers,
                                 length, tokens)  # fmt: skip
        length += tokens
    return total


def add_ratios(results: list[PolicyResult]) -> None:
    by_name = {r.name: r for r in results if r.ok}
    layerwise, in_device = by_name.get("layerwise"), by_name.get("in_device")
    for r in results:
        if not r.ok:
            continue
        if layerwise and layerwise.h2d_bytes:
            r.h2d_vs_layerwise = r.h2d_bytes / layerwise.h2d_bytes
        if r.wall_seconds is None:  # a plan's row: nothing timed
            continue
        if layerwise and layerwise.wall_seconds:
            r.wall_vs_layerwise = r.wall_seconds / layerwise.wall_seconds
        if in_device and in_device.wall_seconds:
            r.wall_vs_in_device = r.wall_seconds / in_device.wall_seconds


def run_bench(
    workload: Workload,
    policies: Sequence[str] = tuple(LADDER),
    *,
    plan_only: bool = False,
    baselines: Sequence[str] = BASELINES,
    teacher_forcing: bool = True,
    progress: Callable[[str], None] = lambda _: None,
    repeats: int = 1,
    time_limit: TimeLimit | None = None,
    on_row: Callable[[BenchReport], None] = lambda _: None,
    baselines_after: str | None = None,
) -> BenchReport:
    """Every policy on one workload in one process; on CUDA after a warm-up, beside the outside baselines.

    With `repeats` > 1 each policy is timed that many times and its fastest run is kept (the work
    and bytes of every run are the same; run order and a busy host only add time). `time_limit` (its
    clock starts when it is made) stops the run it overtakes and the rows after it; `on_row` gets the
    report as it stands after each row (`complete` False), e.g. to save it, so a bench killed from
    outside keeps every finished row. The outside baselines run after the policies, or right after the row of
    `baselines_after` (one of `policies`): a time limit then reaches the policies after it first."""
    limit = time_limit or TimeLimit()
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1 (got {repeats}).")
    check_names(policies, baselines)
    if baselines_after is not None and baselines_after not in policies:
        raise ValueError(f"the baselines are to run after {baselines_after!r}, which is not one of the policies "
                         f"({', '.join(policies)}).")
    split = len(policies) if baselines_after is None else list(policies).index(baselines_after) + 1
    for name in policies:  # settings every row would refuse (a zero KV budget): said once, before the model loads
        workload.search(), workload.cache(name)
    loaded = _load(workload, plan_only)
    if plan_only and workload.question is not None:
        raise ConfigError("a plan has no tokenizer to read a question; give --prompt-tokens instead of --question.")
    if plan_only and workload.step_delimiter == AUTO_DELIMITER:
        raise ConfigError("a plan samples no tokens to pick a step delimiter from; give --step-delimiter TEXT.")
    prompt = workload.prompt_ids(loaded)
    if len(prompt) > loaded.context_length - workload.step_tokens:  # every row would fail as the search does
        raise InvalidPrompt(f"the workload's prompt is {len(prompt):,} tokens; the model's context holds "
                            f"{loaded.context_length:,} and a step needs {workload.step_tokens:,} more.",
                            hint="Lower --prompt-tokens or --step-tokens, or use a model with a longer context.")
    emulated = loaded.device.type != "cuda"
    device = "meta (plan only)" if plan_only else ("cpu (emulated GPU)" if emulated else str(loaded.device))
    report = BenchReport(workload, device, emulated, plan_only, time_limit_seconds=limit.seconds,
                         path_tokens=workload.search().max_steps * workload.step_tokens)  # fmt: skip
    reference = _before_rows(loaded, prompt, policies, baselines, limit, report, teacher_forcing, progress)
    workload = report.workload  # with --step-delimiter auto: the delimiter picked
    forced = reference is not None or not teacher_forcing or plan_only

    def row_done(report: BenchReport) -> None:
        on_row(_settled(report, forced))

    for index, name in enumerate(policies):
        if index == split and not plan_only:
            _baselines(loaded, workload, prompt, baselines, progress, limit, report, row_done)
        row = _policy_row(loaded, workload, name, prompt, repeats, limit, reference, progress)
        row = planned(row) if plan_only else row
        progress(f"{name}: {_row_line(row, plan_only)}")
        report.results.append(row)
        add_ratios(report.results)
        row_done(report)
    if split == len(policies) and not plan_only:
        _baselines(loaded, workload, prompt, baselines, progress, limit, report, row_done)
    _settled(report, forced).complete = True
    return report


def _before_rows(loaded, prompt, policies: Sequence[str], baselines: Sequence[str], limit: TimeLimit,
                 report: BenchReport, teacher_forcing: bool, progress) -> Observed | None:  # fmt: skip
    """What runs before the first row, after the model's load: the automatic delimiter's pick (into
    `report.workload`), the warm-up on CUDA and in_device's untimed reference run, which it returns (None when it
    did not run or finish). `limit` (and the report) learn what took its time when none is left for the rows."""
    workload, plan_only = report.workload, report.plan_only
    done = ["reading the model's shapes" if plan_only else "loading the model"]

    def began(what: str) -> None:  # a part that started with time left on the limit: it used some of it
        if not limit.passed():
            done.append(what)

    if workload.step_delimiter == AUTO_DELIMITER:
        progress("picking the step delimiter: the token a short untimed run samples most")
        began("picking the step delimiter")
        report.step_delimiter_auto = pick_delimiter(loaded, workload, prompt)
        workload = report.workload = replace(workload, step_delimiter=report.step_delimiter_auto)
        progress(f"step delimiter {report.step_delimiter_auto!r}")
    if not report.emulated and not plan_only:
        progress("warming up (not timed)")
        began("the untimed warm-up")
        warm_up(loaded, workload, prompt, policies, baselines, limit)
    reference = None
    if teacher_forcing and not plan_only:
        progress(f"recording {REFERENCE}'s tokens for teacher forcing")
        began(f"{REFERENCE}'s untimed reference run")
        reference = observe_run(loaded, workload, REFERENCE, prompt, should_stop=limit.passed)
        report.reference_max_abs_logit = largest_abs_logit(reference) if reference else None
    limit.rows_start(", ".join(done[:-1]) + f" and {done[-1]}" if len(done) > 1 else done[0])
    report.time_limit_before_rows = limit.before_rows
    return reference


def _settled(report: BenchReport, forced: bool) -> BenchReport:
    """`report` with its token check and notes over the rows in it so far: what `on_row` saves (and what a Ctrl+C
    prints) reads as a report of the finished rows, not of a bench that had none."""
    digests = {r.tokens_digest for r in report.results if r.ok}
    report.same_tokens = report.plan_only or len(digests) <= 1
    report.notes = _notes(report, forced)
    return report


def _policy_row(loaded, workload: Workload, name: str, prompt, repeats: int, limit: TimeLimit,
                reference: Observed | None, progress) -> PolicyResult:  # fmt: skip
    """One policy's row: its fastest run, then its teacher-forced replay of `reference` (in_device's tokens)."""
    if limit.passed():
        return PolicyResult(name, False, limit.not_run(f"--policies {name}"), timed_out=True)
    progress(f"running {name}")
    result = fastest_run(loaded, workload, name, prompt, repeats, limit)
    if result.ok and reference is not None and name == REFERENCE:
        # 0.0 by definition: `reference` is this policy's own run, and replaying it on its own tokens computes the
        # same logits (always 0 on the CPU); on a GPU the replay cost a whole extra in_device run
        result.teacher_forced_max_logit_diff = 0.0
    elif result.ok and reference is not None and not limit.passed():
        progress(f"teacher-forcing {name}")
        release_cached_memory()
        forced = observe_run(loaded, workload, name, prompt, reference.replay(), limit.passed)
        result.teacher_forced_max_logit_diff = max_logit_diff(reference, forced) if forced else None
    return result


def _row_line(result: PolicyResult, plan_only: bool) -> str:
    """A finished row in a few words, for the progress lines (a bench killed from outside still printed them)."""
    if not result.ok:
        return result.message.splitlines()[0] if result.message else "failed"
    if plan_only:
        return f"H2D {format_bytes(result.h2d_bytes)}, peak {format_bytes(result.peak_device_bytes)} on the device"
    line = f"{result.wall_seconds:.2f} s, {result.tokens_per_second:,.0f} candidate-tokens/s"
    diff = result.teacher_forced_max_logit_diff
    return line if diff is None else f"{line}, teacher-forced logit diff {diff:.3g}"


def pick_delimiter(loaded, workload: Workload, prompt: Sequence[int]) -> str:
    """The text of the token the workload's first step samples most (an untimed, observed run of it with
    fixed-length steps: the timed runs sample the same tokens until their first delimiter)."""
    short = replace(workload, gen_tokens=workload.step_tokens, step_delimiter=None)
    observed = observe_run(loaded, short, "in_device", prompt)
    sampled = [t for tokens in (observed.tokens.values() if observed else ()) for t in tokens]
    text = most_sampled_text(sampled, loaded.decode, loaded.eos_token_ids)
    if text is None:
        raise ConfigError("the warm-up sampled no token that can end a step; give --step-delimiter TEXT.")
    return text


WARM_UP_TOKENS = 4  # each policy's and baseline's untimed run: one step of this many tokens


def warm_up(loaded, workload: Workload, prompt: Sequence[int], policies: Sequence[str], baselines: Sequence[str],
            limit: TimeLimit | None = None) -> None:  # fmt: skip
    """An untimed run of one short step of each policy, and of each outside baseline on all the workload's rows, in
    this process: a first run's costs (kernels loaded and tuned for its shapes, cuBLAS handles, allocator and pinned
    blocks) are not in any timed row. Only the first policy warmed up before: later rows paid theirs. Run on CUDA
    only, after `check_names`: every baseline can run (`why_not` is None)."""
    limit = limit or TimeLimit()
    tokens = min(WARM_UP_TOKENS, workload.step_tokens)
    short = replace(workload, step_tokens=tokens, gen_tokens=tokens)
    for name in policies or ("in_device",):
        release_cached_memory()
        run_policy(loaded, short, name, prompt, limit)
    rows = workload.search().candidates_per_step
    for name in baselines or ("generate",):
        release_cached_memory()
        run_baseline(loaded, name, prompt, rows, tokens, workload.seed, limit.passed)


def _baselines(
    loaded, workload: Workload, prompt, names: Sequence[str], progress, limit: TimeLimit, report: BenchReport, on_row
) -> None:
    """Each outside baseline on the workload's rows, appended to `report.baselines` as it ends."""
    rows = workload.search().candidates_per_step
    tokens = workload.search().max_steps * workload.step_tokens
    for name in names:
        reason = why_not(name, loaded.device)  # first: on the CPU no time limit would have let it run
        if reason is not None:
            run = BaselineRun(name, False, reason)
        elif limit.passed():
            run = BaselineRun(name, False, limit.not_run(f"--baselines {name}"), timed_out=True)
        else:
            progress(f"running {name} ({rows} rows)")
            release_cached_memory()
            run = run_baseline(loaded, name, prompt, rows, tokens, workload.seed, limit.passed)
            if run.timed_out:
                run = replace(run, message=limit.stopped(run.wall_seconds, f"--baselines {name}"))
            progress(f"{name}: {f'{run.wall_seconds:.2f} s' if run.ok else run.message}")
        report.baselines.append(run)
        on_row(report)


def largest_abs_logit(observed: Observed) -> float:
    return max((float(t.abs().max()) for logits in observed.logits.values() for t in logits), default=0.0)


def _notes(report: BenchReport, forced: bool) -> list[str]:
    notes = []
    dtype = report.workload.dtype
    if not report.emulated and dtype != "float32":
        notes.append(
            f"sampled tokens may differ between policies in {dtype} on CUDA: a different batch "
            "composition changes low bits of the logits; teacher_forced_max_logit_diff compares them on the same tokens"
        )
    forced_rows = any(r.ok and r.teacher_forced_max_logit_diff is not None for r in report.results)
    if dtype != "float32" and report.reference_max_abs_logit and forced_rows:
        spacing = torch.finfo(getattr(torch, dtype)).eps * report.reference_max_abs_logit
        notes.append(
            f"teacher-forced logit differences in {dtype} of a few rounding steps are not a policy error: "
            "in_device and lbs with inter_beam read the shared prefix through cascade attention (float32 scores, "
            "one softmax over the parts), lbs:inter_token and layerwise through SDPA over padded rows, so "
            "their sums are rounded differently, and each layer passes the difference on. The largest |logit| is "
            f"{report.reference_max_abs_logit:.3g}, where one {dtype} step is {spacing:.3g}; on the CPU every path is "
            "about equally far from a float32 run of the same weights (python -m benchmarks.bf16_numerics)"
        )
    if not forced:
        notes.append("in_device's reference run did not finish, so no policy was teacher-forced against it")
    unbounded = [r.name for r in report.results if r.name.startswith("in_device") and r.ok]  # rows that ran
    if unbounded and report.workload.kv_budget_bytes is not None:
        notes.append(f"{', '.join(unbounded)} ran without the KV budget: every block on the device, the reference "
                     "the other rows are compared with (its peak is what the whole search takes)")
    cut = [r.name for r in [*report.results, *report.baselines] if r.timed_out]
    if cut:
        how = (f"it had passed before the first row ({report.time_limit_before_rows}): give a larger --time-limit"
               if report.time_limit_before_rows else "each row says how to time it alone")
        notes.append(f"the time limit ({report.time_limit_seconds:g} s) stopped or did not start: {', '.join(cut)}; "
                     f"{how}")
    return notes


def _load(workload: Workload, plan_only: bool):
    if plan_only:
        from engine.plan_only import planned_model

        return planned_model(workload.model, workload.dtype)
    from engine.config import ModelSpec
    from engine.models import load_model

    device = "cuda" if torch.cuda.is_available() else "cpu"
    return load_model(ModelSpec(workload.model, dtype=workload.dtype), device=device)
