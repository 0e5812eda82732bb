"""`beamwise bench`: compare KV policies on one workload; prints a table and can write JSON."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from app.bench_checks import check, given_options, policy_choices, policy_names, refuse_models
from app.bench_table import format_report
from app.deferred_interrupt import import_torch
from app.formatting import size as format_bytes
from app.json_out import check_json_path, write_json
from app.models_folder import source_of
from app.options import (
    DEFAULT_QUESTION,
    SPECULATIVE_CONTINUATIONS_HELP,
    SPECULATIVE_HELP,
    UsageError,
    add_threads_option,
    lookahead_verify_help,
    parse_delimiter,
    size_type,
)
from app.server_options import add_backend_options, server_from_args
from engine.config import DTYPES
from engine.workload import ALIASES, BASELINES, LADDER, Workload, check_names

if TYPE_CHECKING:
    from engine.bench_results import BenchReport


def add_parser(sub: argparse._SubParsersAction) -> None:
    d = Workload()
    p = sub.add_parser("bench", help="compare KV offloading policies on one workload")
    p.add_argument("--model", default=d.model, type=source_of,
                   help="synthetic:NAME, bundled, a name from `beamwise models list`, a folder or a .gguf")
    p.add_argument("--dtype", default=None, choices=DTYPES,
                   help="weights' number format (default: float32, or bfloat16 with --plan-only)")
    p.add_argument("--beams", type=int, default=d.beams, help="kept beams N")
    p.add_argument("--width", type=int, default=d.width, help="children per beam M")
    p.add_argument("--step-tokens", type=int, default=d.step_tokens, help="most tokens in one step")
    p.add_argument("--prompt-tokens", type=int, default=d.prompt_tokens, help="length of a random-token prompt")
    p.add_argument(
        "--step-delimiter",
        default=None,
        help="end steps at this text (escapes like \\n allowed), or 'auto': the token the model samples most "
        "in an untimed warm-up run (printed and in the JSON as step_delimiter_auto); default: fixed-length steps",
    )
    p.add_argument("--question", default=None, help="use this question (chat template) as the prompt instead")
    p.add_argument("--gen-tokens", type=int, default=d.gen_tokens, help="tokens generated, in steps of --step-tokens")
    p.add_argument("--kv-budget", type=size_type, default=None, help="device KV budget, e.g. 64MB or 7GB")
    p.add_argument("--pcie-gbps", type=float, default=d.pcie_gbps, help="bandwidth of the emulated PCIe link")
    p.add_argument("--block-size", type=int, default=d.block_size, help="tokens per KV block")
    p.add_argument("--seed", type=int, default=d.seed, help="same seed and settings: the same tokens")
    add_threads_option(p)
    p.add_argument("--policies", default=",".join(LADDER),
                   help=f"comma-separated, from: {', '.join(LADDER)}; "
                   f"{', '.join(f'{alias} is {name}' for alias, name in ALIASES.items())} (every switch, as run's lbs)")
    p.add_argument("--speculative", action=argparse.BooleanOptionalAction, default=None,
                   help=f"force speculation on or off for every policy (default: as each policy's name says); "
                   f"{SPECULATIVE_HELP}")
    p.add_argument("--speculative-continuations", type=int, default=d.speculative_continuations, metavar="N",
                   help=SPECULATIVE_CONTINUATIONS_HELP)
    p.add_argument("--lookahead-verify", action=argparse.BooleanOptionalAction, default=None,
                   help=f"force LookAhead verification on or off (default: on); {lookahead_verify_help('--prm PATH')}")
    p.add_argument("--prm", dest="verifier_model", default=None, metavar="PATH", type=source_of,
                   help="score steps with this PRM (a folder or synthetic:tiny-qwen-prm and the like) instead of "
                   "the generator's log-probabilities; adds the verifier's columns")
    p.add_argument("--prefix-order", action=argparse.BooleanOptionalAction, default=None,
                   help="force lbs's prefix-aware group order on or off for every policy (default: as its name says)")
    p.add_argument("--plan-only", action="store_true", help="bytes and peaks from the scheduler alone: no weights")
    p.add_argument(
        "--max-context",
        action="store_true",
        help="with --plan-only: the longest prompt per method (standard, layer-wise, head-wise) on --gpu-memory "
        "and --host-ram",
    )
    p.add_argument("--gpu-memory", type=size_type, default=None, help="--max-context: device memory, e.g. 24GB")
    p.add_argument("--host-ram", type=size_type, default=None, help="--max-context: host RAM for offloaded KV")
    p.add_argument("--json", dest="json_path", default=None,
                   help="also write the report as JSON here (after every row, complete: false until the last; "
                   "into a FIFO or a device such as /dev/stdout once, at the end)")
    p.add_argument("--baselines", default=",".join(BASELINES), metavar="NAMES",
                   help=f"outside baselines (CUDA only), comma-separated, from: {', '.join(BASELINES)}; "
                   "--baselines= for none")
    p.add_argument("--time-limit", type=float, default=None, metavar="SECONDS",
                   help="stop the run this overtakes and start no more rows (each row says so); default: none")
    p.add_argument(
        "--versus-generate",
        action="store_true",
        help="instead: candidate-tokens/s of one engine step beside model.generate(num_return_sequences)",
    )
    add_backend_options(p, prm_server=False)  # --verifier-endpoint is parsed only to be refused (`_check`)
    p.add_argument("--no-local", action="store_true", help="--backend openai: do not run the same search here")
    p.set_defaults(handler=bench_command)


def bench_command(args: argparse.Namespace) -> int:
    """Exit 0 when a row produced a figure, 1 when none did (each row says why), 2 on settings it refuses, 130 on
    Ctrl+C (the finished rows' table printed first)."""
    check(args)
    try:
        import_torch()  # a Ctrl+C inside torch's import aborted the process
        refuse_models(args)  # reads configs and a PRM's tokenizer: a second or so
    except KeyboardInterrupt:  # before _ladder's own handler: a file already at --json is kept all the same
        return _interrupted(args, None, stream=False)
    check_json_path(args.json_path)  # before anything runs, writing nothing: bench has no --db, so the default one
    dtype = args.dtype or ("bfloat16" if args.plan_only else "float32")
    if args.max_context:
        return _max_context(args, dtype)
    workload = _workload(args, dtype)
    if args.plan_only and workload.step_delimiter is not None:  # after _workload: a broken escape is said first
        raise UsageError("--plan-only plans every step at its full --step-tokens: its stand-in model samples no "
                         "text, so neither --step-delimiter auto nor --step-delimiter TEXT can end a step there (its "
                         "figures with one were meaningless); leave --step-delimiter out.")
    if args.backend == "openai":
        return _remote(args, workload)
    server_from_args(args, endpoint_option="--server")  # a local bench: a server's options given are said
    if args.versus_generate:
        return _versus_generate(args, dtype)
    policies = policy_names(args)
    if not policies:  # it printed an empty table and exited 0
        raise UsageError(f"--policies names no policy (got {args.policies!r}); give one or more of: "
                         f"{policy_choices()}.")
    baselines = [b.strip() for b in args.baselines.split(",") if b.strip()]
    check_names(policies, baselines)  # before the JSON's placeholder: nothing is written for a typo
    if args.plan_only and baselines and given_options(args, ("--baselines",)):  # it ran none and said nothing (exit 0)
        raise UsageError(f"--plan-only loads no weights, so the outside baselines ({', '.join(baselines)}) cannot "
                         "run beside it: leave --baselines out, or leave out --plan-only.")
    return _ladder(args, workload, policies, baselines)


def _workload(args: argparse.Namespace, dtype: str) -> Workload:
    return Workload(
        model=args.model,
        dtype=dtype,
        beams=args.beams,
        width=args.width,
        step_tokens=args.step_tokens,
        prompt_tokens=args.prompt_tokens,
        gen_tokens=args.gen_tokens,
        kv_budget_bytes=args.kv_budget,
        pcie_gbps=args.pcie_gbps,
        block_size=args.block_size,
        seed=args.seed,
        question=args.question,
        step_delimiter=_delimiter(args.step_delimiter),
        prefix_order=args.prefix_order,
        speculative=args.speculative,
        speculative_continuations=args.speculative_continuations,
        lookahead_verify=args.lookahead_verify,
        verifier_model=args.verifier_model,
    )


def _delimiter(text: str | None) -> str | None:
    """--step-delimiter with its escapes read ('auto' stays as it is), None when not given: fixed-length steps.
    A broken escape (`\\x`) is the user's to fix, said in parse_delimiter's words."""
    if not text:
        return None
    try:
        return parse_delimiter(text)
    except ValueError as error:
        raise UsageError(str(error)) from error


def _ladder(args: argparse.Namespace, workload: Workload, policies: list[str], baselines: list[str]) -> int:
    """The policies and baselines on `workload`: the table, and the JSON after every row (`complete` false until
    the last). A file already at --json is replaced only once a row is in: a bench refused (or stopped) before its
    first row keeps the last run's report. A FIFO or a device (/dev/stdout) as --json takes the report once, whole,
    at the end: each version written into it would reach its reader as another document (a FIFO's reader takes
    the first and goes)."""
    from app.json_out import is_stream
    from engine.bench import run_bench  # torch: only a bench that runs imports it
    from engine.bench_results import TimeLimit

    stream = is_stream(args.json_path)
    finished: list[BenchReport] = []  # the report as its last finished row left it: what a Ctrl+C prints
    unwritten: list[UsageError] = []  # a write after a row that failed: the rows after it are not written either
    written = [0]  # rows the file holds

    def on_row(report: BenchReport) -> None:
        finished[:] = [report]
        if stream or unwritten:
            return
        try:
            write_json(args.json_path, report.to_dict(), announce=False)
            written[0] = len(report.results) + len(report.baselines)
        except UsageError as error:  # a full disk, a file that cannot be replaced: raised here, it ended the bench
            unwritten.append(error)  # and lost the row just measured, with no table

    progress = lambda text: print(f"[bench] {text}", file=sys.stderr, flush=True)  # noqa: E731
    try:
        report = run_bench(workload, policies, plan_only=args.plan_only, progress=progress, baselines=baselines,
                           time_limit=TimeLimit(args.time_limit), on_row=on_row)  # fmt: skip
    except KeyboardInterrupt:
        return _interrupted(args, finished[0] if finished else None, stream, unwritten, written[0])
    print(format_report(report))
    try:
        write_json(args.json_path, report.to_dict())  # tried again: room may have been made since
    except UsageError as error:
        print(f"beamwise: error: {error} The table above holds the rows measured.", file=sys.stderr)
        return 2
    return _measured(report)


def _interrupted(args: argparse.Namespace, report: BenchReport | None, stream: bool,
                 unwritten: Sequence[UsageError] = (), written: int = 0) -> int:  # fmt: skip
    """Ctrl+C: the finished rows' table (as a time limit prints it), where the JSON stands (`written`: the rows
    it holds, after a write that failed), and 130."""
    if report is None:
        print(f"\nbeamwise: interrupted before any row finished{_not_written(args.json_path)}", file=sys.stderr)
        return 130
    print(format_report(report))
    if stream:  # nothing was written into it yet (a FIFO with no reader waits here; a second Ctrl+C ends it)
        write_json(args.json_path, report.to_dict(), announce=False)
    rows = len(report.results) + len(report.baselines)
    kept = f"; {args.json_path} keeps them (complete: false)" if args.json_path else ""
    if unwritten:
        holds = f"holds the first {written} of them (complete: false)" if written else "holds none of them"
        kept = f"; {args.json_path} {holds}: {unwritten[0]}"
    print(f"beamwise: interrupted; the table above holds the {rows} finished row(s){kept}", file=sys.stderr)
    return 130


def _not_written(json_path: str | None) -> str:
    """Where --json stands when no row finished: not written, a file already there kept as it was."""
    from pathlib import Path

    if not json_path:
        return ""
    there = Path(json_path).is_file()
    return f", so {json_path} was not written" + ("; the file already there is kept" if there else "")


def _measured(report: BenchReport) -> int:
    """0 when some row produced a figure; else 1, said in one line (every row failed, was cut or did not run)."""
    if any(r.ok for r in report.results) or any(b.ok for b in report.baselines):
        return 0
    print(f"beamwise: error: none of the {len(report.results)} rows produced a figure; each says above why and what "
          "to change.", file=sys.stderr)
    return 1


def _remote(args: argparse.Namespace, workload: Workload) -> int:
    from app.bench_remote import format_costs, remote_bench, workload_record
    from app.run_cli import user_errors

    costs, question = remote_bench(args, workload)
    print(format_costs(costs, workload, question))
    record = workload_record(workload, question, local=not args.no_local)
    write_json(args.json_path, {"workload": record, "runs": [c.to_dict() for c in costs]})
    failed = [c for c in costs if not c.ok]
    if not failed:
        return 0
    return 2 if all(c.error in user_errors() for c in failed) else 1  # as `run`: the server's fault or the settings


def _versus_generate(args: argparse.Namespace, dtype: str) -> int:
    from engine.baselines import versus_generate
    from engine.config import ModelSpec
    from engine.models import load_model
    from engine.search import prompt_ids

    loaded = load_model(ModelSpec(args.model, dtype=dtype))
    question = args.question or DEFAULT_QUESTION
    prompt = prompt_ids(loaded.encode_chat, question)  # the prompt a search sends for it
    candidates = args.beams * args.width
    result = versus_generate(loaded, prompt, candidates, args.step_tokens, args.seed)
    print(f"{loaded.name}: {candidates} candidates x {args.step_tokens} tokens, question {question[:40]!r} "
          f"(prompt {len(prompt)} tokens), seed {args.seed}")
    print(f"engine step        {result['engine_tokens_per_second']:8.1f} candidate-tokens/s")
    print(f"model.generate     {result['generate_tokens_per_second']:8.1f} candidate-tokens/s")
    print(f"engine / generate  {result['engine_vs_generate']:8.2f}x")
    write_json(args.json_path, {"model": args.model, "dtype": dtype, "seed": args.seed, "question": question,
                                **result})  # fmt: skip
    return 0


def _max_context(args: argparse.Namespace, dtype: str) -> int:
    """One line per method: the longest context that fits, computed analytically (engine/context_plan.py)."""
    if not args.plan_only or args.gpu_memory is None or args.host_ram is None:
        raise UsageError("--max-context goes with --plan-only, --gpu-memory SIZE and --host-ram SIZE.")
    from engine.context_plan import max_context, model_facts, why_no_context
    from engine.models import model_config
    from engine.synthetic import parameter_count

    config = model_config(args.model)
    facts = model_facts(config, torch_bytes(dtype), parameter_count(config))
    print(
        f"{args.model} ({dtype}): weights {format_bytes(facts.weights)}, KV {format_bytes(facts.kv_token)} per token; "
        f"GPU {format_bytes(args.gpu_memory)}, host RAM {format_bytes(args.host_ram)}"
    )
    results = max_context(facts, args.gpu_memory, args.host_ram)
    for r in results:
        chunk = f" (prefill chunks of {r.chunk})" if r.chunk else ""
        print(f"{r.method}: {r.tokens:,} tokens{chunk}")
    if why := why_no_context(facts, args.gpu_memory, args.host_ram, results):
        print(f"note: {why}")
    if facts.context_window and any(r.tokens > facts.context_window for r in results):
        print(f"note: the model's context window is {facts.context_window:,} tokens; longer prompts are refused")
    write_json(args.json_path, {"model": args.model, "dtype": dtype, "results": [vars(r) for r in results]})
    return 0


def torch_bytes(dtype: str) -> int:
    """Bytes per element of a --dtype, which argparse has already checked against engine.config.DTYPES."""
    from engine.models import DTYPES as TORCH_DTYPES

    return TORCH_DTYPES[dtype].itemsize
