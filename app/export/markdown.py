"""The Markdown transcript of a session report: settings, the chosen path with its alternatives, memory and PCIe."""

from __future__ import annotations

import re

import app.formatting as fmt
from app.export.md_escape import literal_line, literal_text, without_controls
from app.export.report import Report
from app.session.steps import failure_point


def render_conversation(reports: list[Report], index: int = 0) -> str:
    """The Markdown of a conversation: each turn's transcript in turn, headings one level down under the
    conversation's title (its first turn's, renamed or not: the title the Sessions tab, the window's export name
    and the HTML page show, whichever turn `index` was asked for); one turn is `render_markdown` itself."""
    if len(reports) == 1:
        return render_markdown(reports[0])
    lines = [f"# {literal_line(reports[0].session['title'])}", "", f"A conversation of {len(reports)} turns.", ""]
    for turn, report in enumerate(reports, 1):
        body = render_markdown(report).split("\n")
        lines.append(f"## Turn {turn}: {body[0].removeprefix('# ')}")
        lines += [f"#{line}" if line.startswith("#") else line for line in body[1:]]
    return "\n".join(lines).rstrip("\n") + "\n"


def render_markdown(report: Report) -> str:
    s = report.session
    lines = [f"# {literal_line(s['title'])}", "", "## Question", "", *_quote(s["question"]), ""]
    lines += ["## Run", "", f"- Model: {literal_line(s['model'])}", f"- Verifier: {literal_line(s['verifier'])}",
              f"- Device: {literal_line(s['device'])}",
              f"- Policy: {s['policy']}, KV budget {report.kv_budget()}",
              f"- Status: {s['status']}" + (f" ({literal_line(s['error'])})" if s.get("error") else ""),
              f"- Started: {s['created']}; {fmt.steps(s['steps'])}, {s['candidates']} candidates, "
              f"{s['candidate_tokens']} candidate tokens, {s['seconds'] or 0:.2f} s",
              f"- Search: {literal_line(fmt.settings(s['search']))}",
              f"- Cache: {literal_line(fmt.settings(s['cache']))}", ""]
    path, unchosen = report.path, no_path_chosen(report)
    lines += ["## Chosen path" if unchosen is None else "## Best beam so far", ""]
    lines += [] if unchosen is None else [literal_line(unchosen), ""]
    lines += [f"{fmt.sentence(s['context_note'])}.", ""] if s.get("context_note") else []
    for node in path:
        lines += [f"### Step {node['step']} (candidate {node['id']}, score {fmt.score(node['score'])}, "
                  f"path {fmt.score(node['aggregate'])})", "", *_quote(node["text"]), ""]
        others = report.alternatives(node)
        if others:
            lines.append("Alternatives:")
            lines += [f"- {c['id']} ({c['state']}, {fmt.score(c['score'])}): {literal_line(fmt.brief(c['text']))}"
                      for c in others[:6]]
            if len(others) > 6:
                lines.append(f"- … and {len(others) - 6} more")
            lines.append("")
    if not path:
        lines += ["No step finished.", ""]
    lines += ["## Answer", "", *(_quote(s["answer"]) if s.get("answer") else [f"({report.no_answer()})"]),
              "", *_error_details(s), "## Memory and PCIe", "", *memory_summary(report)]
    return "\n".join(lines) + "\n"


def no_path_chosen(report: Report) -> str | None:
    """What the path a run that did not finish shows is, said: no path was chosen, why, and that it follows the best
    beam so far (the exports and `sessions show` titled it "chosen path", also for a run that failed); None for a
    finished run, whose path is its answer's."""
    status, tree = report.session.get("status"), report.tree
    if status == "finished":
        return None
    if status == "failed":
        why = f"the run failed {failure_point(tree.current_step, tree.last_selected_step)}"
    elif status == "cancelled":
        why = f"the run was cancelled after step {tree.last_selected_step}"
    elif status == "interrupted":
        why = f"the run was interrupted (its process ended) after step {tree.last_selected_step}"
    else:
        why = "the run has not finished"
    return f"No path was chosen: {why}" + ("; the best beam so far:" if report.path else ".")


def memory_summary(report: Report) -> list[str]:
    s, steps = report.session, report.timeline
    peak = max((t["peak_device_bytes"] or 0 for t in steps), default=0)
    lines = [f"Host to device {fmt.size(s['h2d_bytes'])}, device to host {fmt.size(s['d2h_bytes'])}, "
             f"peak KV on the device {fmt.size(peak)} of {fmt.size(s['kv_budget_bytes'])}"
             + (" (emulated device)" if s.get("emulated") else "") + ".", ""]
    if verifier := report.verifier_traffic():  # the figures above and the table below are the generator's
        lines[1:1] = [f"The {verifier}."]  # the same paragraph
    rows = traffic_rows(report)
    if rows:
        lines += [f"| {' | '.join(TRAFFIC_HEADERS)} |", "|---" * len(TRAFFIC_HEADERS) + "|"]
        lines += [f"| {' | '.join(row)} |" for row in rows]
    return lines


TRAFFIC_HEADERS = ("step", "groups", "H2D", "D2H", "KV on device", "KV on host", "stall")


def traffic_rows(report: Report) -> list[tuple[str, ...]]:
    """The memory table's cells, a row per step, so that they add up to the totals above them: first a `prompt` row
    when the question's KV moved bytes before step 1 (a prefix-cache load, an offload), which the cumulative figures
    hold and no step's own does (`Report.before_step_1`: a run cancelled in step 1 has this row alone); last a
    `prefix cache` row for its copies of the run's kept blocks to the host after the last step
    (`RunFinished.prefix_kept_d2h_bytes`), which the session's D2H total holds and no step does."""
    timeline = report.timeline
    rows = [(str(t["step"]), str(t["groups"]), fmt.size(t["step_h2d_bytes"]), fmt.size(t["step_d2h_bytes"]),
             fmt.size(t["device_bytes"]), fmt.size(t["host_bytes"]), f"{(t['stall_share'] or 0) * 100:.0f}%")
            for t in timeline]
    before = report.before_step_1
    if any(before):
        rows.insert(0, ("prompt", "", fmt.size(before[0]), fmt.size(before[1]), "", "", ""))
    kept = report.session.get("prefix_kept_d2h_bytes") or 0
    if kept:
        rows.append(("prefix cache", "", fmt.size(0), fmt.size(kept), "", "", ""))
    return rows


def _error_details(s: dict) -> list[str]:
    """A fault's traceback in a code block longer than any run of backticks in it (none for the user's errors)."""
    details = without_controls(s.get("error_details") or "")
    if not details:
        return []
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall("`+", details)), default=0))
    return ["## Error details, for a report", "", fence, details.rstrip("\n"), fence, ""]


def _quote(text: str) -> list[str]:
    lines = literal_text(text).strip("\n").split("\n")
    return [f"> {line}".rstrip() for line in lines] if text.strip() else ["> (empty)"]
