"""`beamwise bench --backend openai`: one search on a generator server beside the same search run here."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict

from app.options import DEFAULT_QUESTION
from app.server_options import server_from_args
from engine.config import CacheConfig
from engine.remote_bench import SearchCost, measure
from engine.workload import Workload


def remote_bench(args: argparse.Namespace, workload: Workload) -> tuple[list[SearchCost], str]:
    """The server's run (after a connection check that fails with the server's own error, retried as the run's
    requests are: it was tried once, where `run` tries three times), then the local one."""
    from engine import remote_search
    from engine.backends.openai import OpenAICompletions, check_connection

    server = server_from_args(args, endpoint_option="--server")  # its errors in bench's own word for the address
    question = workload.question or DEFAULT_QUESTION
    search = workload.search()
    _progress(f"checking {server.endpoint}")
    check_connection(server, retries=server.retries)
    _progress(f"searching on {server.served_model} at {server.endpoint}")
    backend = OpenAICompletions(server)
    costs = [measure("openai", remote_search.run(question, server, search, backend=backend), lambda: backend.requests)]
    if not args.no_local:
        costs.append(_local(question, workload))
    return costs, question


def _local(question: str, workload: Workload) -> SearchCost:
    from engine.config import ModelSpec
    from engine.errors import BeamwiseError
    from engine.models import load_model
    from engine.search import run

    _progress(f"loading {workload.model} for the same search here")
    try:
        loaded = load_model(ModelSpec(workload.model, dtype=workload.dtype))
    except BeamwiseError as error:
        return SearchCost("local", workload.model, message=error.user_message())
    _progress(f"searching on {loaded.name} here")
    return measure("local", run(question, loaded, workload.search(), local_cache(workload)))


def local_cache(workload: Workload) -> CacheConfig:
    """The search here beside a server's: the policy `run` picks (auto) with the bench's KV options. Before, it ran
    on CacheConfig()'s defaults whatever --kv-budget, --pcie-gbps, --block-size or the switches said, and --json
    recorded them in its workload as if used."""
    return workload.cache_for({})


LOCAL_OPTIONS = {  # the search here alone reads these (`local_cache`): bench's option, the Workload field it sets
    "--model": "model", "--dtype": "dtype", "--kv-budget": "kv_budget_bytes", "--pcie-gbps": "pcie_gbps",
    "--block-size": "block_size", "--prefix-order": "prefix_order", "--speculative": "speculative",
    "--speculative-continuations": "speculative_continuations",
}  # fmt: skip


def workload_record(workload: Workload, question: str, local: bool) -> dict:
    """The workload as --json records it: the fields the searches read, with the question asked. A random-token
    prompt's length, PRM and LookAhead switch (refused with a server), and with --no-local the search here's
    fields, were recorded as if used."""
    unread = {"prompt_tokens", "verifier_model", "lookahead_verify", *(() if local else LOCAL_OPTIONS.values())}
    return {name: value for name, value in {**asdict(workload), "question": question}.items() if name not in unread}


def format_costs(costs: list[SearchCost], workload: Workload, question: str) -> str:
    w = workload
    lines = [
        f"{w.beams}x{w.width} candidates, steps of {w.step_tokens} tokens, at most {w.search().max_steps} steps; "
        f"question {question[:50]!r}; seed {w.seed}",
        "",
        f"{'step':<7}{'backend':<9}{'model':<28}{'requests':>9}{'tokens':>8}{'seconds':>9}{'tok/s':>8}",
    ]
    for step in sorted({s.step for c in costs for s in c.steps}):
        for cost in costs:
            row = next((s for s in cost.steps if s.step == step), None)
            if row is not None:
                lines.append(_row(str(step), cost, row.requests, row.tokens, row.seconds))
    for cost in costs:
        if cost.steps:
            lines.append(_row("total", cost, cost.requests, cost.tokens, sum(s.seconds for s in cost.steps)))
    lines.append("")
    for cost in costs:
        state = f"answer {cost.answer[-60:]!r}" if cost.ok else f"did not finish: {cost.message.rstrip('.')}"
        lines.append(f"{cost.backend} ({cost.model}): {state}; {cost.seconds:.2f} s in all")
    lines.append(
        "note: the server runs its own weights and precision (a GGUF quantisation, bf16 on a GPU), so the trees "
        "differ; compare requests, tokens and seconds, not answers"
    )
    return "\n".join(lines)


def _row(step: str, cost: SearchCost, requests: int, tokens: int, seconds: float) -> str:
    shown = str(requests) if cost.backend == "openai" else "-"
    rate = tokens / seconds if seconds > 0 else 0.0
    return f"{step:<7}{cost.backend:<9}{cost.model[:27]:<28}{shown:>9}{tokens:>8}{seconds:>9.2f}{rate:>8.1f}"


def _progress(text: str) -> None:
    print(f"[bench] {text}", file=sys.stderr, flush=True)
