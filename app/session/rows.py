"""A `SessionModel` read as the session store's rows: one per candidate, one per finished step, the session's facts.

The recorder writes exactly these rows and the exports render them, so the database, the
exports and the window read one fold of the events. Plain dicts keyed by column name; lists
stay lists (the store encodes them).
"""

from __future__ import annotations

from typing import Any

from app.session.model import SessionModel
from app.session.steps import StepRecord
from app.session.tree import ROOT_ID, Node
from engine import events as ev

MEMORY_FIELDS = ("budget_bytes", "device_bytes", "host_bytes", "peak_device_bytes")
TRANSFER_FIELDS = (
    "groups",
    "h2d_bytes",
    "d2h_bytes",
    "d2d_bytes",
    "step_h2d_bytes",
    "step_d2h_bytes",
    "step_d2d_bytes",
    "copy_seconds",
    "modelled_pcie_seconds",
    "compute_seconds",
    "stall_share",
)
SETTINGS_FIELDS = ("question", "model", "verifier", "device", "policy", "kv_budget_bytes", "search", "cache")


def row_state(node: Node, model: SessionModel) -> str:
    """The stored state: running (its step never finished), kept, pruned or final (on the answer's path).

    The window draws the candidates of a step cut short by a cancel as pruned; the store keeps
    them `running`, the state that says their step was never selected.
    """
    record = model.run.steps.get(node.step)
    if record is None or record.selected is None:
        return "running"
    if node.state == "final":
        return "final"
    return "kept" if node.state in ("kept", "finished") else "pruned"


def candidate_row(node: Node, model: SessionModel) -> dict[str, Any]:
    """One candidate as stored; KV figures are those of the end of its own step (None when none were reported)."""
    kv = node.own_kv
    return {
        "id": node.id,
        "parent": None if node.parent == ROOT_ID else node.parent,
        "step": node.step,
        "text": node.text,
        "tokens": node.tokens,
        "finished": int(node.eos),
        "group": node.group,
        "state": row_state(node, model),
        "score": node.score,
        "aggregate": node.aggregate,
        "device_bytes": kv[0] if kv else None,
        "host_bytes": kv[1] if kv else None,
        "h2d_bytes": node.h2d_bytes if kv else None,
        "d2h_bytes": node.d2h_bytes if kv else None,
    }


def candidate_rows(model: SessionModel) -> list[dict[str, Any]]:
    """Every candidate, by step then id (the store's order)."""
    nodes = sorted(model.tree.candidates(), key=lambda n: (n.step, n.id))
    return [candidate_row(node, model) for node in nodes]


def step_row(record: StepRecord) -> dict[str, Any]:
    """One finished step: the beams it expanded, what it kept and pruned, its memory and transfers."""
    selected, memory, transfer = record.selected, record.memory, record.transfer
    assert selected is not None, "only a selected step has a row"
    row: dict[str, Any] = {
        "step": record.step,
        "beams": list(record.beams),
        "kept": list(selected.kept),
        "pruned": list(selected.pruned),
    }
    row.update({name: getattr(memory, name) if memory else None for name in MEMORY_FIELDS})
    row.update({name: getattr(transfer, name) if transfer else None for name in TRANSFER_FIELDS})
    return row


def step_rows(model: SessionModel) -> list[dict[str, Any]]:
    return [step_row(record) for record in model.run.selected_steps]


def session_facts(model: SessionModel) -> dict[str, Any]:
    """What the events say about the session as a whole: status, sizes, totals, traffic, answer or error.

    Candidates and their tokens count the steps that finished; a finished run's own token count
    wins when it is larger (it counts roll-outs the tree does not hold).
    """
    run = model.run
    selected = run.selected_steps
    finished_steps = {record.step for record in selected}
    counted = [n for n in model.tree.candidates() if n.step in finished_steps]  # the rows not `running`
    facts: dict[str, Any] = {
        "status": run.status,
        "prompt_tokens": run.prompt_tokens,
        "steps": selected[-1].step if selected else 0,
        "candidates": len(counted),
        "candidate_tokens": sum(n.tokens for n in counted),
        "error": run.error,
    }
    if run.traffic is not None:  # and the prefix cache's copies of the run's blocks at its end (not in a step)
        kept = run.end.prefix_kept_d2h_bytes if isinstance(run.end, ev.RunFinished) else 0
        facts.update(h2d_bytes=run.traffic.h2d_bytes, d2h_bytes=run.traffic.d2h_bytes + kept)
    elif run.prefill is not None:  # no step finished (cancelled in step 1): the question's traffic is all it moved
        facts.update(h2d_bytes=run.prefill.h2d_bytes, d2h_bytes=run.prefill.d2h_bytes)
    if run.policy_changes and run.started is not None:
        facts["policy"] = policy_label(run.started.policy, run.policy_changes)
    end = run.end
    if isinstance(end, ev.RunFinished):
        facts.update(
            answer=end.answer,
            score=end.score,
            path=list(end.path),
            seconds=end.seconds,
            candidate_tokens=max(facts["candidate_tokens"], end.candidate_tokens),
        )
    return facts


def policy_label(started: str, changes: list[ev.PolicyChanged]) -> str:
    """The policy a run started with, and each one `auto` went on with: 'in_device, then lbs from step 3'."""
    return ", ".join([started, *(f"then {c.policy} from step {c.step} (GPU memory fell)" for c in changes)])


def session_settings(model: SessionModel) -> dict[str, Any]:
    """The run's settings from its start event: question, model, verifier, device, policy, budget, search, cache."""
    started = model.run.started
    if started is None:
        raise ValueError("the model holds no run: apply the run's events, starting with run_started.")
    return {**{name: getattr(started, name) for name in SETTINGS_FIELDS}, "emulated": started.emulated}
