"""The HTML export: one self-contained page (inline CSS, SVG tree, tiny script) with all model text escaped.

Everything a model wrote goes through `html.escape`; the embedded session JSON has `<`, `>` and
`&` written as JSON escapes, so no text can close the script element that carries it.
"""

from __future__ import annotations

import json
import re
from html import escape
from typing import Any

import app.formatting as fmt
from app.export.dump import finite
from app.export.markdown import TRAFFIC_HEADERS, memory_summary, no_path_chosen, traffic_rows
from app.export.md_escape import without_controls
from app.export.report import Report
from app.session.tree import ROOT_ID, SearchTree
from engine.text_cut import cut

ROW, COL, MARGIN = 16, 150, 24
STATE_COLOURS = {"final": "#d4a017", "kept": "#3573b9", "pruned": "#9aa0a6", "running": "#e07b39"}

STYLE = """
body{font:15px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1100px;padding:1em 2em;color:#1d1f21}
h1{font-size:1.5em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
pre{white-space:pre-wrap;overflow-wrap:anywhere;unicode-bidi:plaintext;
    background:#f6f8fa;padding:.6em .8em;border-radius:6px;margin:.3em 0}
table{border-collapse:collapse;font-size:.9em}
td,th{border:1px solid #ddd;padding:.2em .5em;text-align:start;overflow-wrap:anywhere}
.tree{overflow:auto;border:1px solid #ddd;border-radius:6px;max-height:70vh}
.tree circle{cursor:pointer;stroke:#fff;stroke-width:1}
#detail{min-height:2.5em}.meta td:first-child{font-weight:600}.small{color:#666;font-size:.85em}
.legend span{display:inline-block;margin-right:1em}
.legend i{display:inline-block;width:.8em;height:.8em;border-radius:50%}
"""

SCRIPT = """
(function(){
  var embedded = document.getElementById('beamwise-session');
  var data = JSON.parse(embedded.textContent);
  if (data.turns) { data = data.turns[+embedded.getAttribute('data-turn')]; }
  var byId = {};
  data.candidates.forEach(function(c){ byId[c.id] = c; });
  var detail = document.getElementById('detail');
  document.querySelectorAll('circle[data-id]').forEach(function(node){
    node.addEventListener('click', function(){
      var c = byId[node.getAttribute('data-id')];
      detail.textContent = 'Candidate ' + c.id + ', step ' + c.step + ', ' + c.state + ', score ' +
        (c.score === null ? '-' : c.score.toFixed(3)) + '\\n' + c.text;
    });
  });
})();
"""


def render_html(report: Report, dump: dict[str, Any], conversation: list[Report] | None = None,
                index: int = 0) -> str:
    """The page of `report`; `dump` (the lossless session data) is embedded for the page's script and for reuse.
    `conversation` holds the report of every turn when `report` is turn `index` of a longer conversation."""
    s = report.session
    path = report.path
    turns = conversation if conversation and len(conversation) > 1 else []
    title = (turns[0] if turns else report).session["title"]  # a conversation's: its first turn's
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)} · Beamwise</title><style>{STYLE}</style></head><body>",
        f"<h1 dir=\"auto\">{escape(title)}</h1>", *_conversation(turns, index),
        "<h2>Question" + (f" (turn {index + 1})" if turns else "") + "</h2>", _pre(s["question"]),
        _meta_table(report), *_error_details(s),
        "<h2>Search tree</h2>", _legend(), _tree_svg(report, {c["id"] for c in path}),
        '<pre id="detail" class="small" dir="auto">Click a node to read its text.</pre>',
        "<h2>Transcript</h2>", _transcript(report),
        "<h2>Answer</h2>", _pre(s["answer"] or f"({report.no_answer()})"),
        "<h2>Memory and PCIe</h2>", _memory_table(report),
        f'<script type="application/json" id="beamwise-session" data-turn="{index}">{embed_json(dump)}</script>',
        f"<script>{SCRIPT}</script>", "</body></html>",
    ]
    return without_controls("\n".join(parts) + "\n")  # a parse error in HTML (NUL: dropped unseen); JSON has none


def _pre(text: str) -> str:
    """Text a person or the model wrote, as written: its direction from its own first letter, line by line (the
    page's CSS), so a question in Arabic or Hebrew reads right to left with its '?' at its end, not its start."""
    return f'<pre dir="auto">{escape(text)}</pre>'


def embed_json(data: Any) -> str:
    """JSON safe inside <script>: no '<', '>' or '&' survive, so '</script>' cannot appear, and no control
    character (JSON writes C0's as escapes; DEL and C1's too here, a parse error in HTML)."""
    text = json.dumps(finite(data), ensure_ascii=False, allow_nan=False)
    text = re.sub(r"[\x7f-\x9f]", lambda m: f"\\u{ord(m.group()):04x}", text)
    for raw, escaped in (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e"), ("\u2028", "\\u2028"),
                         ("\u2029", "\\u2029")):
        text = text.replace(raw, escaped)
    return text


def _error_details(s: dict[str, Any]) -> list[str]:
    """A fault's traceback, folded: what a bug report needs (none for the user's own errors)."""
    details = s.get("error_details")
    return [f"<details><summary>Error details, for a report</summary><pre>{escape(details)}</pre></details>"] \
        if details else []


def _meta_table(report: Report) -> str:
    s = report.session
    rows = [("Model", s["model"]), ("Verifier", s["verifier"]), ("Device", s["device"]), ("Policy", s["policy"]),
            ("KV budget", report.kv_budget()), ("Status", s["status"] + (f": {s['error']}" if s.get("error")
                                                                                    else "")),
            ("Started", s["created"]), ("Steps", s["steps"]), ("Candidates", s["candidates"]),
            *([("Context", fmt.sentence(s["context_note"]))] if s.get("context_note") else []),
            ("Seconds", f"{s['seconds'] or 0:.2f}"), ("Search", json.dumps(s["search"])),
            ("Cache", json.dumps(s["cache"]))]
    body = "".join(f"<tr><td>{escape(k)}</td><td>{escape(str(v))}</td></tr>" for k, v in rows)
    return f'<table class="meta">{body}</table>'


def _legend() -> str:
    items = "".join(f'<span><i style="background:{c}"></i> {escape(state)}</span>'
                    for state, c in STATE_COLOURS.items())
    return f'<p class="legend small">{items}</p>'


def layout(tree: SearchTree) -> dict[int, tuple[float, float]]:
    """Node positions in pixels, the prompt under ROOT_ID: the window's tree layout, from the margin down."""
    top = min(node.y for node in tree.nodes.values())
    return {cid: (MARGIN + node.step * COL, MARGIN + (node.y - top) * ROW) for cid, node in tree.nodes.items()}


def _tree_svg(report: Report, on_path: set[int]) -> str:
    candidates = report.candidates
    if not candidates:
        return "<p>No candidates were recorded.</p>"
    pos = layout(report.tree)
    width = max(x for x, _ in pos.values()) + 2 * MARGIN + 60
    height = max(y for _, y in pos.values()) + 2 * MARGIN
    root = pos.pop(ROOT_ID)
    prompt = f'<circle cx="{root[0]}" cy="{root[1]}" r="6" fill="#3d4a5c"><title>the prompt</title></circle>'
    lines, nodes = [], [prompt]
    for c in candidates:
        if c["id"] not in pos:
            continue
        x, y = pos[c["id"]]
        if c["parent"] in pos or c["parent"] is None:
            px, py = pos.get(c["parent"], root)
            on = c["id"] in on_path and (c["parent"] in on_path or c["parent"] is None)
            stroke = 'stroke="#d4a017" stroke-width="2.5"' if on else 'stroke="#c8ccd0" stroke-width="1"'
            lines.append(f'<line x1="{px}" y1="{py}" x2="{x}" y2="{y}" {stroke}/>')
        colour = STATE_COLOURS.get(c["state"], "#555")
        tip = escape(f"#{c['id']} step {c['step']} {c['state']} score {fmt.score(c['score'])}: {cut(c['text'], 200)}")
        nodes.append(f'<circle cx="{x}" cy="{y}" r="5" fill="{colour}" data-id="{int(c["id"])}">'
                     f"<title>{tip}</title></circle>")
        if len(candidates) <= 300:
            nodes.append(f'<text x="{x + 8}" y="{y + 4}" font-size="10" fill="#444">{fmt.score(c["score"])}</text>')
    return (f'<div class="tree"><svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}">'
            + "".join(lines) + "".join(nodes) + "</svg></div>")


def _conversation(turns: list[Report], index: int) -> list[str]:
    """Each turn of a conversation: its question, chosen path and answer; the page's own turn is drawn below."""
    if not turns:
        return []
    out = ["<h2>Conversation</h2>", f"<p>{len(turns)} turns; the search tree below is turn {index + 1}'s.</p>"]
    for turn, report in enumerate(turns, 1):
        s = report.session
        here = " (this page)" if turn == index + 1 else ""
        out += [f"<h3>Turn {turn}{here}</h3>", _pre(s["question"]),
                f"<details><summary>{_path_title(report)} ({fmt.steps(len(report.path))})</summary>"
                f"{_transcript(report)}</details>",
                _pre(s["answer"] or f"({report.no_answer()})")]
    return out


def _path_title(report: Report) -> str:
    return "Chosen path" if no_path_chosen(report) is None else "Best beam so far"


def _transcript(report: Report) -> str:
    """The path step by step with each step's alternatives; a run that chose none says so first (its best beam)."""
    unchosen = no_path_chosen(report)
    note = [] if unchosen is None else [f'<p class="unchosen">{escape(unchosen)}</p>']
    if not report.path:
        return "\n".join([*note, "<p>No step finished.</p>"])
    out = note
    for node in report.path:
        out.append(f"<h3>Step {node['step']} <span class='small'>candidate {node['id']}, score "
                   f"{fmt.score(node['score'])}, path {fmt.score(node['aggregate'])}</span></h3>")
        out.append(_pre(node["text"]))
        others = report.alternatives(node)
        if others:
            rows = "".join(f"<tr><td>{c['id']}</td><td>{escape(c['state'])}</td><td>{fmt.score(c['score'])}</td>"
                           f"<td dir=\"auto\">{escape(fmt.brief(c['text'], 120))}</td></tr>" for c in others[:8])
            more = f"<p class='small'>… and {len(others) - 8} more</p>" if len(others) > 8 else ""
            out.append(f"<details><summary>{len(others)} alternatives</summary><table><tr><th>id</th><th>state"
                       f"</th><th>score</th><th>text</th></tr>{rows}</table>{more}</details>")
    return "\n".join(out)


def _memory_table(report: Report) -> str:
    summary = memory_summary(report)
    head = f"<p>{escape(summary[0])}</p>"
    cells = traffic_rows(report)
    if not cells:
        return head
    headers = "".join(f"<th>{escape(h)}</th>" for h in TRAFFIC_HEADERS)
    rows = "".join("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>" for row in cells)
    return f"{head}<table><tr>{headers}</tr>{rows}</table>"
