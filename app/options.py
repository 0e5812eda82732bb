"""Command-line options shared by `run`, `gui` and `bench`, and the text parsers the window shares with them.

The parser itself is app/parser.py; the early exits' thresholds, given or calibrated, app/exit_options.py.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import NoReturn

from app.exit_options import early_exit_thresholds
from app.models_folder import source_of, typo_of
from app.parser import OneLineParser
from app.speculation_options import SPECULATION_SHAPERS, speculation_refusals
from app.usage_error import UsageError
from engine.config import (
    AGGREGATIONS,
    DEVICES,
    DTYPES,
    MAX_LOOKAHEAD,
    METHODS,
    POLICIES,
    SELECTIONS,
    VERIFIER_DEVICES,
    VERIFIERS,
    CacheConfig,
    ModelSpec,
    SearchConfig,
    parse_bytes,
)

DEFAULT_QUESTION = "A train travels 60 km in 45 minutes. What is its average speed in km/h?"


def parse_delimiter(text: str) -> str | None:
    """'\\n\\n' (as typed, with backslashes) -> two newlines; '', 'none' or 'off' -> None (cut steps by length).
    Whitespace is a delimiter like any other text: argparse passes the default (two real newlines) through here.

    Characters outside Latin-1 stay as typed ('→\\n' is an arrow and a newline), which a plain
    `unicode_escape` decode would turn into mojibake.
    """
    if text == "" or text.strip().lower() in ("none", "off"):
        return None
    try:
        return text.encode("latin-1", "backslashreplace").decode("unicode_escape")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"the step delimiter \"{text}\" has a broken escape ({error.reason}); write it like \\n\\n, "
            "or give 'none' to cut steps by length only."
        ) from error


def format_delimiter(delimiter: str | None) -> str:
    """Inverse of parse_delimiter for display: control characters as escapes."""
    if delimiter is None:
        return ""
    return delimiter.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")


def _argument_type(parse):
    """An argparse type from a parser that raises ValueError: its message is what the user reads."""

    def convert(text: str):
        try:
            return parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from error

    convert.__name__ = parse.__name__
    return convert


def parse_size(text: str) -> int:
    """A size option's bytes: '64MB' -> 64_000_000; a negative one is refused as negative, not as no size."""
    if text.strip().startswith("-"):
        raise ValueError(f"{text!r} is negative; a size must be positive, such as 512MB, 7GB or 1.5GiB.")
    return parse_bytes(text)


size_type = _argument_type(parse_size)  # sizes such as 64MB or 7GB
delimiter_type = _argument_type(parse_delimiter)


def add_threads_option(group) -> None:
    """--threads: torch's CPU thread count, else it follows the free cores (app/threads.py)."""
    group.add_argument("--threads", type=int, default=None, metavar="N",
                       help="torch's CPU threads (default: the cores free at start, or BEAMWISE_THREADS); the "
                       "count moves float sums, so an exact rerun of a seed gives the same N")


def add_search_options(parser: argparse.ArgumentParser, prefix_cache: bool = True) -> None:
    """Options shared by run and gui: model, search and cache settings (`prefix_cache`: the cache's default)."""
    d, c = SearchConfig(), CacheConfig()
    g = parser.add_argument_group("model and search")
    g.add_argument("--model", default="bundled", type=source_of,
                   help="bundled, a name from `beamwise models list`, a transformers folder, a .gguf file or "
                        "synthetic:NAME")
    g.add_argument("--dtype", default=ModelSpec().dtype, choices=DTYPES, help="weights' number format")
    g.add_argument("--verifier", default=d.verifier, choices=VERIFIERS,
                   help="logprob, self-judge, or prm (a process reward model, see --verifier-model)")
    g.add_argument("--verifier-model", default=None, metavar="PATH", type=source_of,
                   help="the PRM for --verifier prm: a folder, FAMILY:FOLDER or synthetic:tiny-qwen-prm and the like")
    g.add_argument("--verifier-device", default=d.verifier_device, choices=VERIFIER_DEVICES,
                   help="auto: the PRM on the generator's device; cpu: on the CPU in float32 (when both do not fit)")
    g.add_argument("--beams", type=int, default=d.beams, help="kept beams N")
    g.add_argument("--width", type=int, default=d.width, help="children per beam M")
    g.add_argument("--max-candidates", type=int, default=d.max_candidates,
                   help="refuse more candidates (beams x width) per step than this")
    g.add_argument("--step-tokens", type=int, default=d.step_tokens, help="most tokens in one step")
    g.add_argument("--step-delimiter", type=delimiter_type, default=d.step_delimiter,
                   help=rf"text that ends a step, with escapes; 'none' for length only "
                        f"(default: {format_delimiter(d.step_delimiter)})")
    g.add_argument("--max-steps", type=int, default=d.max_steps, help="most reasoning steps")
    g.add_argument("--temperature", type=float, default=d.temperature, help="sampling temperature")
    g.add_argument("--top-p", type=float, default=d.top_p, help="nucleus sampling mass")
    g.add_argument("--seed", type=int, default=d.seed, help="same seed and settings: the same tree")
    add_threads_option(g)
    g.add_argument("--aggregation", default=d.aggregation, choices=AGGREGATIONS,
                   help="how a path's step scores make its score")
    _add_method_options(parser)
    k = parser.add_argument_group("KV cache")
    k.add_argument("--policy", default=c.policy, choices=POLICIES, help="how KV is placed and moved (see README)")
    k.add_argument("--kv-budget", type=size_type, default=None,
                   help="device KV budget, e.g. 64MB or 7GB (default: free GPU memory, or what fits when emulated)")
    k.add_argument("--block-size", type=int, default=c.block_size, help="tokens per KV block")
    k.add_argument(
        "--prefill-chunk", type=int, default=c.prefill_chunk, help="prompt tokens per prefill call (default: by budget)"
    )
    k.add_argument("--no-inter-beam", action="store_true", help="lbs: do not share prefix blocks in a group")
    k.add_argument("--no-prefetch", action="store_true", help="lbs: no balanced groups, no prefetch")
    k.add_argument(
        "--prefix-order",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="lbs: order groups so consecutive ones share the most blocks, and keep a shared prefix on the device",
    )
    add_speculation_options(k, c.speculative)
    k.add_argument("--pcie-gbps", type=float, default=c.pcie_gbps, help="bandwidth of the emulated PCIe link")
    k.add_argument("--verifier-kv-share", type=float, default=None, metavar="FRACTION",
                   help="the verifier's part of the device KV budget, e.g. 0.25 (default: what one verification "
                   "batch needs; the generator gets the rest)")
    k.add_argument("--device", default=c.device, choices=DEVICES, help="auto: CUDA when there is one")
    add_prefix_cache_options(k, prefix_cache)


def add_prefix_cache_options(group, default: bool = True) -> None:
    """--prefix-cache/--no-prefix-cache and its RAM and disk caps (run, gui, bench, eval)."""
    group.add_argument("--prefix-cache", action=argparse.BooleanOptionalAction, default=default,
                       help="keep the KV of prompts and chosen answers (RAM and the user cache folder), so a run "
                       "whose prompt starts the same prefills only the rest (default: "
                       + ("on)" if default else "off: a cached prompt's logits differ in the last bits, so a "
                          "problem's samples would depend on what ran before it)"))
    group.add_argument("--prefix-cache-ram", type=size_type, default=None, metavar="SIZE",
                       help="most host RAM for cached prefix blocks, e.g. 2GB (default: a quarter of the free "
                       "RAM, at most 4 GiB)")
    group.add_argument("--prefix-cache-disk", type=size_type, default=None, metavar="SIZE",
                       help="most disk for cached prefix blocks, e.g. 5GB (default: a tenth of the free disk, "
                       "at most 8 GiB)")


SPECULATIVE_HELP = (
    "in_device, lbs: a candidate that ends its step before its group's longest keeps decoding its children's "
    "steps in the idle slots (see --speculative-continuations); kept if the candidate is kept, freed if pruned "
    "(same answer either way)"
)


SPECULATIVE_CONTINUATIONS_HELP = (
    "children's steps a row that ended its step early may speculate, one after another: 0 (default) FlashTTS's "
    "B - j + 1 for a candidate whose parent ranks j-th of B beams by path score; N: at most N (1: the first child only)"
)


def lookahead_verify_help(prm_option: str = "--verifier prm") -> str:
    """--lookahead-verify's help, naming the PRM as the command takes it (`bench --prm PATH` has no --verifier)."""
    return (f"with --speculative and a PRM ({prm_option}): a candidate whose row speculated its first child's whole "
            "next step has that step verified in the same pass as its own, and the child's score is not computed "
            "again (FlashTTS's LookAhead verification; the same scores either way)")


def add_speculation_options(group, default: bool | None) -> None:
    """--speculative/--no-speculative, --speculative-ratio, --speculative-continuations and
    --lookahead-verify/--no-lookahead-verify (run and gui)."""
    group.add_argument("--speculative", action=argparse.BooleanOptionalAction, default=default, help=SPECULATIVE_HELP)
    group.add_argument("--speculative-ratio", type=float, default=CacheConfig().speculative_ratio, metavar="R",
                       help="speculate at most R x the mean step length so far (FlashTTS's truncation rule)")
    group.add_argument("--speculative-continuations", type=int, default=CacheConfig().speculative_continuations,
                       metavar="N", help=SPECULATIVE_CONTINUATIONS_HELP)
    group.add_argument("--lookahead-verify", action=argparse.BooleanOptionalAction,
                       default=CacheConfig().lookahead_verify, help=lookahead_verify_help())


def _add_method_options(parser: argparse.ArgumentParser) -> None:
    d = SearchConfig()
    g = parser.add_argument_group("search method and early exit")
    g.add_argument("--method", default=None, choices=METHODS,  # None: not given (eval --compare refuses it then)
                   help="beam (N best of N x M each step), dvts (N subtrees, each keeps its best of M), "
                   f"best-of-n (N x M complete samples), greedy (one pass at temperature 0; ignores N, M) "
                   f"(default: {d.method})")
    g.add_argument("--lookahead", type=int, default=d.lookahead, metavar="K",
                   help="beam: roll each child out K greedy steps and score the end of the roll-out")
    g.add_argument("--select", default=d.select, choices=SELECTIONS,
                   help="final answer: the best path, a majority vote over answers, or a score-weighted vote")
    g.add_argument("--verify-skip", action="store_true",
                   help="RKSC: skip the verifier on steps where the generator is decisive (see --tau-conf)")
    g.add_argument("--tau-conf", type=float, default=None,
                   help="verify-skip: lowest top confidence (default: calibrated, else 0.9)")
    g.add_argument("--r-gap", type=float, default=None,
                   help="verify-skip: lowest lead over the next candidate (default: calibrated, else 0.1)")
    g.add_argument("--audit-early-exit", action="store_true",
                   help="verify-skip, entropy exit: also run the full verifier pass; report how often it disagrees")
    g.add_argument("--entropy-exit", action="store_true",
                   help="RKSC: stop the verifier's pass at the layer where its judgement settled (self-judge, "
                   "Math-Shepherd and RLHFlow PRMs)")
    g.add_argument("--entropy-theta", type=float, default=None,
                   help="entropy exit: every candidate's logit-lens entropy under this (nats for a ~150k vocabulary, "
                   f"scaled to the verifier's; default: calibrated, else {d.entropy_theta})")
    g.add_argument("--entropy-delta", type=float, default=None,
                   help="entropy exit: and changed by less than this since the previous layer (scaled the same way; "
                   f"default: calibrated, else {d.entropy_delta})")


# the model and its KV cache here, by dest (--kv-budget: kv_budget): `--backend openai` reads none (a server holds
# both); --threads sizes torch's pool, which only a PRM loaded here beside the server uses
LOCAL_ONLY = ("model", "dtype", "device", "policy", "kv_budget", "block_size", "prefill_chunk", "no_inter_beam",
              "no_prefetch", "prefix_order", "speculative", "speculative_ratio", "speculative_continuations",
              "lookahead_verify", "pcie_gbps", "verifier_kv_share", "prefix_cache", "prefix_cache_ram",
              "prefix_cache_disk", "threads")


class NotACommandLine(Exception):
    """What `search_parser`'s parser raises where `beamwise` would print its error and exit."""


def search_parser() -> OneLineParser:
    """The model, search and cache options alone, parsed as the commands parse them (no abbreviations), raising
    NotACommandLine where `beamwise` would print an error and exit."""
    def refuse(message: str) -> NoReturn:
        raise NotACommandLine(message)

    parser = OneLineParser(add_help=False)
    add_search_options(parser)
    parser.error = refuse
    return parser


def typed_options(argv: Sequence[str]) -> frozenset[str] | None:
    """The dests of the model, search and cache options typed in `argv` (what follows the command), whatever their
    values: a parse with every default left out (the command's other options are left over). None when `argv`
    holds no such options as the commands take them."""
    parser = search_parser()
    for action in parser._actions:  # argparse keeps no public list of them
        action.default = argparse.SUPPRESS
    try:
        return frozenset(vars(parser.parse_known_args(argv)[0]))
    except NotACommandLine:
        return None


def _typed(args: argparse.Namespace, names: Sequence[str]) -> frozenset[str]:
    """Of the option dests `names`, those typed on the command line (app/cli.py keeps it as `args.argv`), whatever
    their values: `--temperature 0.8` typed at its default is given. For `args` built otherwise (what was typed is
    not known): those that differ from their defaults."""
    argv = getattr(args, "argv", None)
    typed = typed_options(argv[1:]) if argv else None  # argv[0]: the command
    if typed is None:
        default = search_parser().parse_args([])
        typed = frozenset(name for name in names if getattr(args, name) != getattr(default, name))
    return typed & frozenset(names)


def _local_only_given(args: argparse.Namespace) -> list[str]:
    """The options of LOCAL_ONLY typed on the command line (app/cli.py keeps it as `args.argv`), whatever their
    values, named as typed (`--no-prefix-cache` for a switch turned off): `--model bundled` or `--policy auto` was
    taken as its default and did nothing. For `args` built otherwise (what was typed is not known): those that
    differ from their defaults. --threads only where no PRM is loaded here (--verifier prm without
    --verifier-endpoint uses it)."""
    if getattr(args, "backend", "local") != "openai":
        return []
    typed = _typed(args, LOCAL_ONLY)
    prm_here = args.verifier == "prm" and getattr(args, "verifier_endpoint", None) is None
    given = [name for name in LOCAL_ONLY if name in typed and not (name == "threads" and prm_here)]
    return [f"--{'no-' if getattr(args, name) is False else ''}{name.replace('_', '-')}" for name in given]


def _refuse_unused(args: argparse.Namespace) -> None:
    """An option that would do nothing as given is refused, as --verifier-model without --verifier prm is: each of
    these was taken without a word, and the search ran as if it had not been given."""
    d = SearchConfig()
    local = _local_only_given(args)
    compare = getattr(args, "compare", None)  # eval's methods, where it compares several
    greedy = ({m.strip() for m in compare.split(",")} - {""} if compare else {args.method or d.method}) == {"greedy"}
    other = "add beam, dvts or best-of-n to --compare" if compare else "pick --method beam, dvts or best-of-n"
    unused = [
        (local, _local_only_refusal(local)),
        ((args.tau_conf, args.r_gap) != (None, None) and not args.verify_skip,
         "--tau-conf and --r-gap set verify-skip's thresholds: add --verify-skip, or leave them out"),
        ((args.entropy_theta, args.entropy_delta) != (None, None) and not args.entropy_exit,
         "--entropy-theta and --entropy-delta set the entropy exit's thresholds: add --entropy-exit, or leave them "
         "out"),
        (args.audit_early_exit and not (args.verify_skip or args.entropy_exit),
         "--audit-early-exit audits an early exit: add --verify-skip or --entropy-exit, or leave it out"),
        (args.verifier_kv_share is not None and args.verifier == "logprob",
         "--verifier-kv-share gives the verifier part of the KV budget, and logprob keeps no KV: pick --verifier "
         "self-judge or prm, or leave it out"),
        (args.verifier_kv_share is not None and args.verifier == "prm" and args.verifier_device == "cpu",
         "--verifier-kv-share gives the verifier part of the device KV budget, and --verifier-device cpu keeps the "
         "PRM's KV in CPU memory, outside that budget: leave out one of them"),
        *speculation_refusals(args, _typed(args, SPECULATION_SHAPERS)),
        (args.verifier_device == "cpu" and getattr(args, "verifier_endpoint", None) is not None,
         "--verifier-device cpu places a PRM loaded on this machine, and --verifier-endpoint scores the steps on the "
         "PRM server: leave one of them out"),
        (getattr(args, "no_save", False) and getattr(args, "db", None) is not None  # with --session, --db is read
         and getattr(args, "session", None) is None,
         "--db names the database to record in, and --no-save records nothing: give one of them"),
        (args.policy not in ("lbs", "auto") and (args.no_inter_beam or args.no_prefetch or not args.prefix_order),
         f"--no-inter-beam, --no-prefetch and --no-prefix-order switch parts of lbs off, and --policy {args.policy} "
         "has none of them: pick --policy lbs (or auto), or leave them out"),
        (not args.prefix_cache and (args.prefix_cache_ram, args.prefix_cache_disk) != (None, None),
         "--prefix-cache-ram and --prefix-cache-disk size the prefix cache, which is off (--no-prefix-cache, or "
         "eval's default): add --prefix-cache, or leave them out"),
        (greedy and bool(_typed(args, ("temperature", "top_p"))),  # typed at its default value too
         f"--temperature and --top-p shape sampling, and greedy takes the most likely token: {other} to sample, "
         "or leave them out"),
        (greedy and args.select != d.select,  # a vote of one path picks that path
         f"--select {args.select} votes among the final paths, and greedy has one: {other} to vote, or leave it "
         "out"),
    ]
    why = next((why for given, why in unused if given), None)
    if why is not None:
        raise UsageError(f"{why}.")


def _local_only_refusal(flags: list[str]) -> str:
    """Why the local model's `flags` are refused with --backend openai ('' for none): before, `--policy lbs
    --kv-budget 1MB` ran as "policy remote" without a word."""
    if not flags:
        return ""
    named = flags[0] if len(flags) == 1 else f"{', '.join(flags[:-1])} and {flags[-1]}"
    verb, them = ("applies", "it") if len(flags) == 1 else ("apply", "them")
    return (f"{named} {verb} to a model run on this machine, and --backend openai runs the search on the server: "
            f"leave {them} out, or leave out --backend openai to run --model here")


def configs_from_args(args: argparse.Namespace) -> tuple[ModelSpec, SearchConfig, CacheConfig]:
    """Build the validated configs; every refusal is the user's to fix and says what to change: a UsageError here,
    a ConfigError from the configs' checks (engine/config.py) and the calibrated thresholds' (exit_options.py)."""
    if args.verifier_model is not None and args.verifier != "prm":  # it used to be ignored: a logprob run
        raise UsageError(f"--verifier-model names a PRM, but the verifier is {args.verifier}: add --verifier prm to "
                         "score the steps with it, or leave --verifier-model out.")
    if (args.verifier == "prm" and not (args.verifier_model or "").strip() and getattr(args, "backend", "") == "openai"
            and getattr(args, "verifier_endpoint", None) is not None):  # the config's words ask for a PRM's folder
        raise UsageError("the prm verifier needs a PRM: name the one the PRM server at --verifier-endpoint serves "
                         "(--verifier-model NAME, its served name).")
    _refuse_unused(args)
    here = (("--model", args.model, getattr(args, "backend", "local") != "openai"),  # a typo only where loaded here:
            ("--verifier-model", args.verifier_model, getattr(args, "verifier_endpoint", None) is None))  # else served
    for flag, text, loaded_here in here:
        if loaded_here and (typo := typo_of(text)) is not None:
            raise UsageError(f"{flag}: {typo}")
    return _configs(args)


def _configs(args: argparse.Namespace) -> tuple[ModelSpec, SearchConfig, CacheConfig]:
    """The configs as the options give them; each checks itself as it is made (engine/config.py: a ConfigError)."""
    model = ModelSpec(source=args.model, dtype=args.dtype)
    search = SearchConfig(
        beams=args.beams, width=args.width, max_candidates=args.max_candidates, step_tokens=args.step_tokens,
        step_delimiter=args.step_delimiter,
        max_steps=args.max_steps, temperature=args.temperature, top_p=args.top_p, seed=args.seed,
        aggregation=args.aggregation, verifier=args.verifier, verifier_model=args.verifier_model,
        verifier_device=args.verifier_device, **_method_fields(args),
    )
    cache = CacheConfig(
        policy=args.policy, kv_budget_bytes=args.kv_budget, block_size=args.block_size,
        inter_beam=not args.no_inter_beam, balanced_prefetch=not args.no_prefetch, prefix_order=args.prefix_order,
        pcie_gbps=args.pcie_gbps, device=args.device, prefill_chunk=args.prefill_chunk,
        verifier_kv_share=args.verifier_kv_share, speculative=args.speculative,
        speculative_ratio=args.speculative_ratio, speculative_continuations=args.speculative_continuations,
        lookahead_verify=args.lookahead_verify, prefix_cache=args.prefix_cache,
        prefix_cache_ram_bytes=args.prefix_cache_ram, prefix_cache_disk_bytes=args.prefix_cache_disk,
    )
    return model, search, cache


def check_lookahead(lookahead: int, method: str | None = None) -> None:
    """--lookahead refused in the option's words, its range and (given `method`) its method: SearchConfig names its
    field ("lookahead must be 0..16", "set lookahead to 0 for dvts"), which no option or control is called."""
    if not 0 <= lookahead <= MAX_LOOKAHEAD:
        raise UsageError(f"--lookahead must be 0..{MAX_LOOKAHEAD} greedy steps (got {lookahead}).")
    if lookahead and method is not None and method != "beam":
        raise UsageError(f"--lookahead works with the beam method only, not --method {method}: pick --method beam, "
                         "or leave --lookahead out.")


def _method_fields(args: argparse.Namespace) -> dict:
    check_lookahead(args.lookahead, args.method or SearchConfig().method)
    return {"method": args.method or SearchConfig().method, "lookahead": args.lookahead, "select": args.select,
            "verify_skip": args.verify_skip, "audit_early_exit": args.audit_early_exit,
            "entropy_exit": args.entropy_exit, **early_exit_thresholds(args)}
