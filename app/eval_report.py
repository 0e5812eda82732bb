"""`beamwise eval` results: one problem's outcome from its run's events, per-method summaries, the table."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from app.eval_exit import ExitTally
from app.session import SearchTree, SessionModel
from engine import events as ev
from engine.answers import answer_key, extract_answer, same_answer
from engine.methods.selection import final_pool


@dataclass(frozen=True)
class ProblemResult:
    method: str
    line: int
    expected: str
    predicted: str | None
    correct: bool
    any_correct: bool  # some compared final path states the expected answer (pass@N)
    candidates: int  # final paths compared (N of pass@N): those the answer was chosen from, see `_final_texts`
    tokens: int  # generated tokens, every candidate (and lookahead roll-out) together
    verifier_tokens: int
    seconds: float
    steps: int
    skipped_steps: int  # steps whose verifier pass RKSC's verify-skip saved
    audited: int  # skipped steps the verifier ran anyway (--audit-early-exit)
    disagreed: int  # of those, steps where it would have ranked another child first
    status: str  # finished, failed or cancelled
    exit: ExitTally = field(default_factory=ExitTally)  # the layer-entropy exit (empty when it is off)
    agreement: float | None = None  # share of the compared final paths stating the answer given (None: no answer)
    error: str | None = None  # a failed run's reason, as its [eval] line says it (the JSON's rows had none)


def result_of(method: str, line: int, expected: str, events: Sequence) -> ProblemResult:
    """What one run answered and cost, from its events (the last one terminal), folded as the window folds them."""
    model = SessionModel(layout=False)
    model.apply_many(events)
    run, tree = model.run, model.tree
    selected = [record.selected for record in run.selected_steps if record.selected is not None]
    done = run.end if isinstance(run.end, ev.RunFinished) else None
    predicted = extract_answer(done.answer) if done else None
    finals = _final_texts(tree, selected[-1].kept if selected else ())
    answers = [extract_answer(text) for text in finals]
    audited = [e for e in selected if e.verify_skipped and e.verifier_agrees is not None]
    scored_tokens = sum(n.tokens for n in tree.candidates() if n.score is not None)
    status = run.status if run.status in ("finished", "cancelled") else "failed"  # no end at all counts as failed
    return ProblemResult(
        method, line, expected, predicted, same_answer(predicted, expected),
        any(same_answer(answer, expected) for answer in answers), len(finals) if done else 0,
        done.candidate_tokens if done else scored_tokens, sum(e.verifier_tokens for e in selected),
        done.seconds if done else 0.0, len(selected), sum(e.verify_skipped for e in selected), len(audited),
        sum(not e.verifier_agrees for e in audited), status, ExitTally.of_steps(selected),
        _agreement(predicted, answers) if done else None, _error(run.end) if status == "failed" else None,
    )


def _error(end: object) -> str:
    """Why a run failed: its RunFailed's message, or that it ended without a terminal event."""
    return end.message if isinstance(end, ev.RunFailed) else "the run ended without a result"


def _agreement(predicted: str | None, answers: Sequence[str | None]) -> float | None:
    """How one-sided the compared paths were: the share stating the answer given, compared as votes count them."""
    if predicted is None or not answers:
        return None
    return sum(a is not None and answer_key(a) == answer_key(predicted) for a in answers) / len(answers)


def _final_texts(tree: SearchTree, kept: Sequence[int]) -> list[str]:
    """The whole text (its steps joined) of each final path the answer was chosen from, by the engine's own rule
    (engine/methods/selection.py `final_pool`): the kept paths that finished (EOS, or the model's context filled:
    the step's `finished` flag, the tree's `eos`) when any did, else every kept path. pass@N and the vote's
    agreement count these paths, and their number is the N the table shows."""
    pool = final_pool([c for c in kept if c in tree], lambda cid: tree.node(cid).eos)
    return ["".join(tree.node(i).text for i in tree.path_to(cid)) for cid in pool]


@dataclass(frozen=True)
class MethodSummary:
    method: str
    problems: int
    accuracy: float | None  # fraction of finished runs answered correctly (None: no problem finished)
    pass_at_n: float | None  # fraction of finished runs where some final candidate is correct (None: none finished)
    n: int  # the most final paths a finished run compared (pass@N's N; see `_final_texts`)
    mean_tokens: float | None  # generated tokens a finished run cost (None: no problem finished)
    mean_verifier_tokens: float | None  # verifier tokens a finished run cost (None: none finished)
    seconds: float  # wall seconds, all problems: every run's, a failed one's too (what the eval took)
    skip_rate: float | None  # share of the finished runs' steps the verifier was skipped (None: no step finished)
    audit_disagreement: float | None  # share of audited skipped steps where the verifier disagreed
    failed: int
    mean_exit_layer: float | None = None  # layer-entropy exit: mean verifier layers run per step's candidates
    verifier_layers: int = 0  # the verifier's decoder layers
    verifier_compute_saved: float | None = None  # share of the verifier's layer work (tokens x layers) saved
    exit_disagreement: float | None = None  # share of audited exits where the full pass picks another child
    no_answer: int = 0  # finished runs whose answer states nothing the reader takes for an answer
    agreement: float | None = None  # mean share of a run's compared paths stating its answer (how split the vote was)
    n_min: int = 0  # the fewest final paths a finished run compared: N varies between problems when it is below `n`

    def to_dict(self) -> dict:
        return asdict(self)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def summarize(method: str, results: Sequence[ProblemResult], seconds: float) -> MethodSummary:
    """One method's figures. Every figure of a run is over its finished runs, as accuracy and pass@N are: a failed
    run gave no answer to be wrong (it was averaged in as wrong, 0.0% when every run failed), and its tokens, 0 or
    a part, made a failing method look cheaper. It is counted in `failed` instead; `seconds` is the method's whole
    wall time, a failed run's too."""
    finished = [r for r in results if r.status == "finished"]
    steps = sum(r.steps for r in finished)
    audited = sum(r.audited for r in finished)
    exits = sum((r.exit for r in finished), ExitTally())
    compared = [r.candidates for r in finished]  # pass@N is over the finished runs, so N is too
    return MethodSummary(
        method, len(results), _mean_or_none([r.correct for r in finished]),
        _mean_or_none([r.any_correct for r in finished]), max(compared, default=0),
        _mean_or_none([r.tokens for r in finished]), _mean_or_none([r.verifier_tokens for r in finished]), seconds,
        sum(r.skipped_steps for r in finished) / steps if steps else None,  # a rate of no step is no 0%
        sum(r.disagreed for r in finished) / audited if audited else None,
        sum(r.status == "failed" for r in results),
        exits.mean_layer, exits.layers, exits.saved, exits.disagreement,
        sum(r.predicted is None for r in finished),
        _mean_or_none([r.agreement for r in finished if r.agreement is not None]), min(compared, default=0),
    )


def _mean_or_none(values: Sequence[float]) -> float | None:
    return _mean(values) if values else None


def _compared(s: MethodSummary) -> str:
    """pass@N's N: the final paths a finished run compared, as a range when problems differ ('-': none finished)."""
    if s.pass_at_n is None:
        return "-"
    return str(s.n) if s.n_min == s.n else f"{s.n_min}-{s.n}"


_ANSWER_ROWS = (  # pass@N's N used to read as "(N=2)" beside best-of-n's 4 samples: it counts the paths compared
    ("problems", lambda s: str(s.problems)),
    ("accuracy", lambda s: "-" if s.accuracy is None else f"{s.accuracy:.1%}"),
    ("pass@N", lambda s: "-" if s.pass_at_n is None else f"{s.pass_at_n:.1%}"),
    ("N: final paths compared", _compared),
)
_ROWS = (
    ("mean tokens", lambda s: "-" if s.mean_tokens is None else f"{s.mean_tokens:,.0f}"),  # a finished run's
    ("mean verifier tokens", lambda s: "-" if s.mean_verifier_tokens is None else f"{s.mean_verifier_tokens:,.0f}"),
    ("wall seconds, all runs", lambda s: "-" if not s.problems else f"{s.seconds:,.1f}"),  # failed ones too
    ("verify-skip rate", lambda s: "-" if s.skip_rate is None else f"{s.skip_rate:.1%}"),
    ("audit: verifier differs", lambda s: "-" if s.audit_disagreement is None else f"{s.audit_disagreement:.1%}"),
    ("no answer found", lambda s: str(s.no_answer)),
    ("failed runs", lambda s: str(s.failed)),
)
_VOTE_ROWS = (  # shown when the answer is a vote (--select majority or weighted): a share of the N paths compared
    ("vote: paths agreeing", lambda s: "-" if s.agreement is None else f"{s.agreement:.0%}"),
)
_EXIT_ROWS = (  # shown when some method ran with the layer-entropy exit
    ("entropy exit: mean layer", lambda s: "-" if s.mean_exit_layer is None
     else f"{s.mean_exit_layer:.1f} of {s.verifier_layers}"),
    ("entropy exit: verifier work saved", lambda s: "-" if s.verifier_compute_saved is None
     else f"{s.verifier_compute_saved:.1%}"),
    ("audit: exit differs", lambda s: "-" if s.exit_disagreement is None else f"{s.exit_disagreement:.1%}"),
)


def table(summaries: Sequence[MethodSummary], vote: bool = False) -> str:
    """Methods side by side, one row per measure; `vote` adds how split the compared paths' answers were (under
    the row that says how many paths were compared)."""
    head = ["", *(s.method for s in summaries)]
    measures = _ANSWER_ROWS + (_VOTE_ROWS if vote else ()) + _ROWS
    measures += _EXIT_ROWS if any(s.mean_exit_layer is not None for s in summaries) else ()
    rows = [head] + [[name, *(cell(s) for s in summaries)] for name, cell in measures]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = []
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [text.rjust(w) for text, w in zip(row[1:], widths[1:], strict=True)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
