"""`beamwise bench`'s table: one row per policy (bytes, peak, groups, times, ratios, the teacher-forced logit
difference), the outside baselines' rows, the footnotes that say what the columns hold, and whether the policies'
tokens agree."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import app.formatting as fmt
from app.formatting import size as format_bytes

if TYPE_CHECKING:
    from engine.bench_results import BenchReport, PolicyResult


def _ratio(value: float | None) -> str:
    return fmt.ratio(value)  # one format in a column: 0.0012x beside 0.98x, never a percentage


def _share(part: int | None, whole: int | None) -> str:
    """Speculated tokens (or look-aheads) kept, as a share of those made ('-' when none were made, or not measured)."""
    return f"{part / whole:.0%}" if whole and part is not None else "-"


def _diff(value: float | None) -> str:
    return _cell(value, ".2e")


def _cell(value: float | None, spec: str) -> str:
    """A figure as `spec` formats it, '-' where no run measured it (None, null in the JSON)."""
    return "-" if value is None else format(value, spec)


def _bytes(value: int | None) -> str:
    return "-" if value is None else format_bytes(value)


def _baseline_rows(report: BenchReport) -> list[str]:
    rows = []
    for b in report.baselines:
        if not b.ok:
            rows.append(f"{b.name:<24}{'' if b.timed_out else 'not run: '}{b.message}")  # the limit's words say it
            continue
        in_device = next((r for r in report.results if r.name == "in_device" and r.ok), None)
        versus = f"; in_device is {b.wall_seconds / in_device.wall_seconds:.2f}x faster" if in_device else ""
        rows.append(f"{b.name:<24}wall {b.wall_seconds:.2f} s, {_cell(b.tokens_per_second, '.1f')} candidate-tokens/s"
                    f"{versus}")
    return rows


TRAFFIC_NOTE = (
    "H2D, D2H and D2D: each run's totals, the prompt's prefill included; the JSON's step_pcie_bytes is H2D + D2H "
    "per search step (the prefill left out), as `beamwise plan` gives PCIe per step"
)


def _footnotes(report: BenchReport) -> list[str]:
    lines = [TRAFFIC_NOTE] if any(r.ok for r in report.results) else []
    how = "planned" if report.plan_only else "measured"  # a plan's meta-tensor run measures nothing
    for r in report.results:
        if r.ok and r.h2d_bytes_eq1 is not None:
            lines.append(
                f"{r.name}: H2D {format_bytes(r.h2d_bytes)} {how}, {format_bytes(r.h2d_bytes_eq1)} by the paper's "
                "Eq. 1-3 over the rows it decoded (which holds no staging layers back from the budget)"
            )
        if r.ok and r.pinned_peak_bytes is not None:
            lines.append(
                f"{r.name}: pinned host memory {format_bytes(r.pinned_peak_bytes)} at most; "
                f"{r.pin_seconds:.2f} s of its wall time pinning new blocks (a first use in the process)"
            )
    return lines + [f"note: {note}" for note in report.notes]


def _budget(report: BenchReport) -> str:
    """The KV budget the rows ran with: --kv-budget's, or the automatic one each row started with (the most
    common, then the rows that differ); "auto" alone only when no row ran."""
    if report.workload.kv_budget_bytes:
        return format_bytes(report.workload.kv_budget_bytes)
    ran = [(r.name, r.kv_budget_bytes) for r in report.results if r.kv_budget_bytes is not None]
    if not ran:
        return "auto"
    common = Counter(budget for _, budget in ran).most_common(1)[0][0]
    others = "".join(f", {name} {format_bytes(budget)}" for name, budget in ran if budget != common)
    return f"auto: {format_bytes(common)}{others}"


def _generated(report: BenchReport) -> str:
    """--gen-tokens as the paths decode it, in whole steps: 20 in steps of 16 decoded 32 (the header said 20)."""
    w, tokens = report.workload, report.path_tokens
    if tokens is None or tokens == w.gen_tokens:
        return f"{w.gen_tokens} generated"
    return f"{tokens} generated (--gen-tokens {w.gen_tokens} in whole steps of {w.step_tokens})"


def format_report(report: BenchReport) -> str:
    w = report.workload
    steps = f"steps of {w.step_tokens}" + (f" ending at {w.step_delimiter!r}" if w.step_delimiter else "")
    steps += " (auto: the warm-up's most sampled token)" if report.step_delimiter_auto is not None else ""
    prompt = f"question {w.question[:40]!r}" if w.question else f"prompt {w.prompt_tokens} random tokens"
    lines = [
        f"model {w.model} ({w.dtype}) on {report.device}; {w.beams}x{w.width} candidates, {steps}, "
        f"{prompt}, {_generated(report)}; KV budget {_budget(report)}; PCIe {w.pcie_gbps} GB/s"
        + (" (modelled)" if report.emulated else "") + (f"; verifier {w.verifier_model}" if w.verifier_model else ""),
        "",
    ]
    header = f"{'policy':<24}{'H2D':>11}{'D2H':>11}{'D2D':>11}{'H2D ops':>9}{'vs layerwise':>13}"
    header += f"{'peak dev':>11}{'groups':>7}"
    if not report.plan_only:
        header += f"{'wall s':>9}{'copy s':>8}{'compute s':>10}{'pcie s':>8}{'stall s':>8}{'stall':>7}"
        header += f"{'tok/s':>8}{'goodput':>8}{'fwd':>6}{'idle':>6}{'spec':>6}{'runs':>6}{'kept':>6}{'drop':>6}"
        header += f"{'/in_dev':>8}{'/layerw':>8}{'TF logit diff':>14}"
        header += f"{'v.tok':>7}{'v.fwd':>6}{'v.rows':>7}{'ahead':>6}{'used':>6}" if w.verifier_model else ""
    lines.append(header)
    for r in report.results:
        if not r.ok:
            lines.append(f"{r.name:<24}{'' if r.timed_out else 'failed: '}{r.message}")  # the limit's words say it
            continue
        lines.append(_row(r, report.plan_only, bool(w.verifier_model)))
    lines += _baseline_rows(report)
    lines += _footnotes(report)
    if not report.plan_only and sum(r.ok for r in report.results) > 1:
        lines += ["", _tokens_line(report)]
        if not report.same_tokens:
            lines.append(DIFFERENT_TOKENS_NOTE)
    return "\n".join(lines)


def _row(r: PolicyResult, plan_only: bool, verifier: bool) -> str:
    """A row that ran, '-' for each figure it did not measure."""
    row = (f"{r.name:<24}{_bytes(r.h2d_bytes):>11}{_bytes(r.d2h_bytes):>11}{_bytes(r.d2d_bytes):>11}"
           f"{_cell(r.h2d_calls, 'd'):>9}{_ratio(r.h2d_vs_layerwise):>13}{_bytes(r.peak_device_bytes):>11}"
           f"{_cell(r.max_groups, 'd'):>7}")
    if plan_only:
        return row
    row += (
        f"{_cell(r.wall_seconds, '.2f'):>9}{_cell(r.copy_seconds, '.3f'):>8}{_cell(r.compute_seconds, '.2f'):>10}"
        f"{_cell(r.modelled_pcie_seconds, '.3f'):>8}{_cell(r.stall_seconds, '.3f'):>8}{_cell(r.stall_share, '.1%'):>7}"
        f"{_cell(r.tokens_per_second, '.1f'):>8}{_cell(r.goodput, '.1f'):>8}{_cell(r.forwards, 'd'):>6}"
        f"{_cell(r.idle_row_slots, 'd'):>6}{_cell(r.speculative_tokens, 'd'):>6}{_cell(r.speculative_runs, 'd'):>6}"
        f"{_share(r.speculative_used, r.speculative_tokens):>6}"
        f"{_share(r.speculative_discarded, r.speculative_tokens):>6}"
        f"{_ratio(r.wall_vs_in_device):>8}{_ratio(r.wall_vs_layerwise):>8}{_diff(r.teacher_forced_max_logit_diff):>14}"
    )
    if verifier:
        row += (f"{_cell(r.verifier_tokens, 'd'):>7}{_cell(r.verifier_forwards, 'd'):>6}"
                f"{_cell(r.verifier_rows, 'd'):>7}{_cell(r.lookahead_verified, 'd'):>6}"
                f"{_share(r.lookahead_used, r.lookahead_verified):>6}")
    return row


DIFFERENT_TOKENS_NOTE = (
    "(in_device and lbs with inter-beam sharing attend through cascade attention, the other policies through SDPA: "
    "their logits differ in the last bits, and a token sampled near a tie may then differ; the teacher-forced "
    "column replays in_device's tokens through each policy, and a difference of that size is rounding)")


def _tokens_line(report: BenchReport) -> str:
    """Whether the policies' tokens agree, over the rows that ran: it said "every policy" when a time limit (or
    Ctrl+C) had kept some from running."""
    ran = sum(r.ok for r in report.results)
    if ran == len(report.results) and report.complete:
        return "every policy produced the same tokens" if report.same_tokens else (
            "WARNING: the policies produced different tokens")
    line = f"the {ran} policies that ran produced {'the same' if report.same_tokens else 'different'} tokens"
    line = line if report.same_tokens else f"WARNING: {line}"
    others = len(report.results) - ran
    left = f"; {others} did not run or did not finish" if others else ""
    left += "" if report.complete else "; the bench was interrupted before the rest"
    return f"{line} (the check covers only them{left})"
