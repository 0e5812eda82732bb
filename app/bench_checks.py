"""What `beamwise bench` refuses before anything loads: options out of range, options the rest of the command line
leaves nothing to do (each was taken and ignored, exit 0, and the bench measured something other than what was
typed), and a model or PRM the run would refuse in its part."""

from __future__ import annotations

import argparse
import math

from app.models_folder import typo_of
from app.options import UsageError
from app.question import checked_argument, empty_message
from engine.auto_delimiter import AUTO_DELIMITER
from engine.blank_text import is_blank
from engine.workload import ALIASES, BASELINES, LADDER, Workload, ladder_names


def check(args: argparse.Namespace) -> None:
    """UsageError for settings the bench would refuse, or take without using, before anything loads."""
    if args.question is not None and is_blank(args.question):  # '' would bench the default question unasked
        raise UsageError(empty_message(command="bench"))  # in bench's own option: it reads no question file
    if args.question is not None:
        checked_argument(args.question, file_option=False)
    for name in ("beams", "width", "step_tokens", "prompt_tokens", "gen_tokens"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1 (got {getattr(args, name)}).")
    if args.speculative_continuations < 0:
        raise UsageError(f"--speculative-continuations must be 0 (FlashTTS's B - j + 1) or a count of 1 or more "
                         f"(got {args.speculative_continuations}).")
    if args.verifier_endpoint is not None:  # once ignored by --backend openai; a local bench sent it to --backend
        raise UsageError("bench scores steps with the generator's log-probabilities (the server's with --backend "
                         "openai) or with --prm PATH here, never on a PRM server; leave --verifier-endpoint out.")
    if args.no_local and args.backend != "openai":  # it was taken without a word, and the bench ran here
        raise UsageError("--no-local leaves out the run here beside a server's: add --backend openai (and --server, "
                         "--served-model), or leave --no-local out.")
    if args.time_limit is not None and not args.time_limit > 0:
        raise UsageError(f"--time-limit must be a positive number of seconds (got {args.time_limit:g}).")
    if args.time_limit is not None and math.isinf(args.time_limit):  # taken, and the JSON held Infinity
        raise UsageError("--time-limit must be a finite number of seconds (got inf); leave it out for no limit.")
    if args.versus_generate:
        _refuse_unused_by_versus_generate(args)
    elif args.backend == "openai":
        _refuse_unused_by_a_server(args)
    elif args.max_context:
        _refuse_unused_by_max_context(args)
    if not args.max_context and (args.gpu_memory is not None or args.host_ram is not None):  # they did nothing
        raise UsageError("--gpu-memory and --host-ram size the machine for --max-context; add --plan-only "
                         "--max-context, or leave them out.")
    for flag, text in (("--model", None if args.no_local else args.model), ("--prm", args.verifier_model)):
        if (typo := typo_of(text)) is not None:  # a close listed name, as run, plan and eval suggest it
            raise UsageError(f"{flag}: {typo}")
    _refuse_contradictions(args)


def policy_names(args: argparse.Namespace) -> list[str]:
    """The ladder's rungs --policies names, its aliases read (`lbs`). A name that is neither is refused naming the
    aliases too: the engine's refusal listed the rungs only, and `lbs`, which --policies takes, was not among them."""
    given = [name.strip() for name in args.policies.split(",") if name.strip()]
    unknown = sorted(set(given) - set(LADDER) - set(ALIASES))
    if unknown:
        raise UsageError(f"unknown policies {unknown}; choose from {policy_choices()}.")
    return ladder_names(given)


def policy_choices() -> str:
    """What --policies takes, in words: the ladder's rungs, then its aliases with the rung each stands for."""
    aliases = ", ".join(f"{alias} ({name})" for alias, name in ALIASES.items())
    return f"{', '.join(LADDER)}, or {aliases}"


def _refuse_contradictions(args: argparse.Namespace) -> None:
    """UsageError for a ladder option that the rest of the command line leaves nothing to do: each was taken and
    ignored (exit 0), so a bench measured something other than what was typed."""
    if args.question is not None and given_options(args, ("--prompt-tokens",)):
        raise UsageError("--prompt-tokens sets the length of a random-token prompt, and --question gives the prompt "
                         "instead: leave one of them out.")
    if args.lookahead_verify is not None:
        _refuse_idle_lookahead_verify(args)


def _refuse_idle_lookahead_verify(args: argparse.Namespace) -> None:
    """--lookahead-verify (or --no-) switches the scoring of a speculated next step in a PRM's pass: with no row
    that speculates, or no --prm to score it, it changes nothing, as `run` refuses it (app/speculation_options.py,
    in `run`'s options; said here in bench's)."""
    option = "--lookahead-verify" if args.lookahead_verify else "--no-lookahead-verify"
    policies = policy_names(args)
    speculating = args.speculative or (args.speculative is None and any(
        LADDER.get(name, {}).get("speculative") for name in policies))
    if not speculating:
        raise UsageError(f"{option} switches the verifying of speculated next steps, and no row speculates: add "
                         "--speculative or a :+speculative policy, or leave it out.")
    if args.verifier_model is None:
        raise UsageError(f"{option} switches the scoring of a speculated next step in its row's PRM pass, and "
                         "without --prm PATH the rows score steps with log-probabilities: add --prm PATH, or leave "
                         "it out.")


BENCH_WORDS = (  # run's and plan's words for the PRM, in the options bench takes (it has --prm, no --verifier)
    ("--verifier prm --verifier-model ", "--prm "), ("--verifier-model", "--prm"), (", or the window's Verifier", ""),
)


def refuse_models(args: argparse.Namespace) -> None:
    """UsageError, before any model loads, for a model the run refuses in its part, read as `plan` and `eval` read
    it (app/plan_roles.py, and the PRM's layout from its tokenizer): a PRM as --model, a missing --prm folder, a
    generator or a synthetic model that is no PRM as --prm. Each row failed on it in turn, after the model had
    loaded, and the bench exited 1, with advice in `run`'s options (--verifier-model, which bench refuses)."""
    from app.plan_roles import CANNOT_RUN_MODEL, laid_out, role_refusal
    from engine.config import SearchConfig
    from engine.errors import BeamwiseError

    if args.backend == "openai" and args.no_local:  # no model here
        return
    prm = args.verifier_model
    search = SearchConfig(verifier="prm", verifier_model=prm) if prm else SearchConfig()
    try:
        refused = role_refusal(args.model, search)
        if refused is None and prm:
            laid_out(prm)  # a synthetic name that is no PRM's, a tokenizer its family cannot use
    except BeamwiseError as error:
        refused = error.user_message()
    if refused is not None:
        said = refused.removeprefix(CANNOT_RUN_MODEL)
        for run_words, bench_words in BENCH_WORDS:
            said = said.replace(run_words, bench_words)
        raise UsageError(said)


VERSUS_GENERATE_UNUSED = (
    "--plan-only", "--max-context", "--gpu-memory", "--host-ram", "--policies", "--baselines", "--kv-budget",
    "--prompt-tokens", "--gen-tokens", "--time-limit", "--step-delimiter", "--pcie-gbps", "--block-size", "--prm",
    "--speculative", "--lookahead-verify", "--speculative-continuations", "--prefix-order", "--backend",
)  # fmt: skip
SERVER_UNUSED = (  # a server's bench runs one search there and the same search here, as `run` would (policy auto)
    "--plan-only", "--max-context", "--gpu-memory", "--host-ram", "--policies", "--baselines", "--prompt-tokens",
    "--time-limit", "--prm", "--lookahead-verify",
)  # fmt: skip
MAX_CONTEXT_UNUSED = (  # --max-context reads --model, --dtype, --gpu-memory and --host-ram (and writes --json)
    "--beams", "--width", "--step-tokens", "--question", "--seed", "--policies", "--baselines", "--kv-budget",
    "--prompt-tokens", "--gen-tokens", "--time-limit", "--step-delimiter", "--pcie-gbps", "--block-size", "--prm",
    "--speculative", "--lookahead-verify", "--speculative-continuations", "--prefix-order",
)  # fmt: skip
def given_options(args: argparse.Namespace, flags: tuple[str, ...]) -> list[str]:
    """Of bench's options `flags`, those given, as typed (`--backend openai`). An option given at its default value
    cannot be told from one left out: it does what leaving it out does."""
    d = Workload()
    options = (
        ("--model", args.model, d.model), ("--dtype", args.dtype, None),
        ("--plan-only", args.plan_only, False), ("--max-context", args.max_context, False),
        ("--gpu-memory", args.gpu_memory, None), ("--host-ram", args.host_ram, None),
        ("--policies", args.policies, ",".join(LADDER)), ("--baselines", args.baselines, ",".join(BASELINES)),
        ("--kv-budget", args.kv_budget, None), ("--prompt-tokens", args.prompt_tokens, d.prompt_tokens),
        ("--gen-tokens", args.gen_tokens, d.gen_tokens), ("--time-limit", args.time_limit, None),
        ("--step-delimiter", args.step_delimiter, None), ("--pcie-gbps", args.pcie_gbps, d.pcie_gbps),
        ("--block-size", args.block_size, d.block_size), ("--prm", args.verifier_model, None),
        ("--speculative", args.speculative, None), ("--lookahead-verify", args.lookahead_verify, None),
        ("--speculative-continuations", args.speculative_continuations, d.speculative_continuations),
        ("--prefix-order", args.prefix_order, None), ("--backend", args.backend, "local"),
        ("--beams", args.beams, d.beams), ("--width", args.width, d.width),
        ("--step-tokens", args.step_tokens, d.step_tokens), ("--question", args.question, None),
        ("--seed", args.seed, d.seed),
    )  # fmt: skip
    return [f"{flag} {value}" if flag == "--backend" else flag for flag, value, default in options
            if flag in flags and value != default]


def _them(given: list[str]) -> str:
    return "it" if len(given) == 1 else "them"


def _refuse_unused_by_versus_generate(args: argparse.Namespace) -> None:
    """--versus-generate times one engine step beside model.generate: --beams x --width candidates of --step-tokens
    tokens on --question (or the default one), with --model, --dtype and --seed. Every other bench option was taken
    without a word (a misspelt --policies too); refused, as `run` refuses an option that would do nothing
    (app/options.py `_refuse_unused`, whose checks are `run`'s)."""
    if given := given_options(args, VERSUS_GENERATE_UNUSED):
        raise UsageError(f"--versus-generate times one engine step beside model.generate on --beams x --width "
                         f"candidates of --step-tokens tokens, and does not use {', '.join(given)}: leave "
                         f"{_them(given)} out, or leave out --versus-generate.")


def _refuse_unused_by_max_context(args: argparse.Namespace) -> None:
    """--max-context computes the longest prompt per method from --model's shapes in --dtype on --gpu-memory and
    --host-ram: the workload's options (--beams, --kv-budget, --policies...) were taken without a word. Refused, as
    --versus-generate's unused options are."""
    if given := given_options(args, MAX_CONTEXT_UNUSED):
        raise UsageError(f"--max-context computes the longest prompt per method from --model in --dtype on "
                         f"--gpu-memory and --host-ram, and does not use {', '.join(given)}: leave {_them(given)} "
                         f"out, or leave out --max-context to bench that workload.")


def _refuse_unused_by_a_server(args: argparse.Namespace) -> None:
    """`--backend openai` runs one search on the server and the same search here, scored with log-probabilities, on
    --model with the KV options a bench gives (--kv-budget, --pcie-gbps, --block-size and the speculation and
    prefix-order switches) and the policy `run` picks (auto). The ladder's options were taken without a word
    (--plan-only still ran both searches, --policies and --time-limit were ignored) and are refused; with
    --no-local, so are the options of the search here."""
    if given := given_options(args, SERVER_UNUSED):
        raise UsageError(f"--backend openai benches one search on the server beside the same search here, as `run` "
                         f"runs it, and does not use {', '.join(given)}: leave {_them(given)} out, or leave out "
                         f"--backend openai to compare the policies here.")
    from app.bench_remote import LOCAL_OPTIONS  # the search here beside a server's reads these

    if args.no_local and (given := given_options(args, tuple(LOCAL_OPTIONS))):
        raise UsageError(f"{', '.join(given)} {'sets' if len(given) == 1 else 'set'} the search here, and --no-local "
                         f"leaves it out: leave {_them(given)} out, or leave out --no-local.")
    if args.step_delimiter == AUTO_DELIMITER:  # it was sent to the server as the text "auto" to stop at
        raise UsageError("--step-delimiter auto takes the token a warm-up run here samples most, which a server's "
                         "bench does not run: give the delimiter itself with --backend openai, such as \"\\n\\n\".")
