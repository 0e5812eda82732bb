"""`beamwise plan [QUESTION] [search options]`: will these settings fit? Printed before any weights load."""

from __future__ import annotations

import argparse
import json

from app.deferred_interrupt import import_torch
from app.options import add_search_options, configs_from_args
from app.question import add_question_file_option, add_question_option, read_question, take_question_option
from app.sessions_cli import session_id

EXIT_BY_STATE = {"green": 0, "amber": 0, "red": 3}  # red: the run refuses it, or may at a later step; scripts test it


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="will it fit? weights, KV, activations and PCIe traffic, without loading weights")
    p.add_argument("question", nargs="?", default=None,
                   help="the question (its tokens are counted with the model's tokenizer, else estimated); - reads "
                        "it from standard input")
    add_question_option(p)
    add_question_file_option(p)
    add_search_options(p)
    p.add_argument("--session", type=session_id, default=None, metavar="ID",
                   help="plan a follow-up in the conversation of session ID: the prompt holds its earlier turns, "
                        "as `beamwise run --session ID` sends them")
    p.add_argument("--db", default=None, help="session database for --session (default: in the user data folder)")
    p.add_argument("--json", action="store_true", help="print the plan as one JSON object")
    p.set_defaults(handler=plan_command)


def plan_command(args: argparse.Namespace) -> int:
    import_torch()  # a Ctrl+C inside torch's import aborted the process
    from app.planner import plan
    from app.run_cli import conversation_of

    question = _question(args)
    model, search, cache = configs_from_args(args)
    _, history = conversation_of(args)
    result = plan(model, search, cache, question=question, history=history)
    if args.json:
        print(json.dumps(plan_dict(result)))
    else:
        print(f"plan for {model.source} ({model.dtype}), {result.candidates} candidates per step, "
              f"{result.prompt_tokens} prompt tokens")
        print("\n".join(result.lines()))
    return EXIT_BY_STATE[result.state]


def _question(args: argparse.Namespace) -> str | None:
    """The question as `beamwise run` reads it (quotes, --question, - for standard input, --question-file), or
    None when none is given: a plan without one plans a typical question."""
    take_question_option(args)
    if args.question is None and args.question_file is None:
        return None
    return read_question(args.question, args.question_file, command="plan")


def plan_dict(result) -> dict:
    """The plan's figures as plain JSON values (the PCIe figures null where red settings were not planned)."""
    from app.planner import NOT_PLANNED

    planned = result.traffic_source != NOT_PLANNED

    return {
        "state": result.state, "sentence": result.sentence, "device": result.device, "emulated": result.emulated,
        "memory_bytes": result.memory_bytes, "weights_bytes": result.weights_bytes,
        "generator_weights_bytes": result.generator.weights_bytes,
        "verifier_weights_bytes": result.verifier_weights_bytes,
        "generator_kv_bytes": result.generator_kv_bytes, "verifier_kv_bytes": result.verifier_kv_bytes,
        "activation_bytes": result.activation_bytes, "kv_budget_bytes": result.kv_budget_bytes,
        "policy": result.policy, "candidates": result.candidates, "prompt_tokens": result.prompt_tokens,
        "prompt_counted": result.prompt.how if result.prompt else None,
        "prompt_turns": result.prompt.turns if result.prompt else 0,
        "step_pcie_bytes": result.step_pcie_bytes if planned else None,
        "step_pcie_seconds": result.step_pcie_seconds if planned else None,
        "traffic_source": result.traffic_source,
    }
