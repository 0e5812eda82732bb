"""The `beamwise` command: run (headless search), bench, gui, sessions. No Qt is imported here."""

from __future__ import annotations

import argparse
import codecs
import os
import sys
from collections.abc import Sequence

from engine.config import POLICIES, VERIFIERS, CacheConfig, ModelSpec, SearchConfig, parse_bytes
from engine.errors import BeamwiseError

DEFAULT_QUESTION = "A train travels 60 km in 45 minutes. What is its average speed in km/h?"


class UsageError(ValueError):
    """Bad command-line input: printed as one line, exit status 2."""


def _delimiter(text: str) -> str | None:
    if text.lower() in ("none", "off", ""):
        return None
    return codecs.decode(text, "unicode_escape")


def size_type(text: str) -> int:
    """argparse type for sizes such as 64MB or 7GB."""
    try:
        return parse_bytes(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def add_search_options(parser: argparse.ArgumentParser) -> None:
    """Options shared by run, gui and bench: model, search and cache settings."""
    d = SearchConfig()
    g = parser.add_argument_group("model and search")
    g.add_argument("--model", default="bundled", help="bundled, a transformers folder, a .gguf file or synthetic:NAME")
    g.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    g.add_argument("--verifier", default=d.verifier, choices=VERIFIERS)
    g.add_argument("--beams", type=int, default=d.beams, help="kept beams N")
    g.add_argument("--width", type=int, default=d.width, help="children per beam M")
    g.add_argument("--step-tokens", type=int, default=d.step_tokens, help="most tokens in one step")
    g.add_argument("--step-delimiter", type=_delimiter, default=d.step_delimiter,
                   help=r"text that ends a step, with escapes (default '\n\n'); 'none' for length only")
    g.add_argument("--max-steps", type=int, default=d.max_steps)
    g.add_argument("--temperature", type=float, default=d.temperature)
    g.add_argument("--top-p", type=float, default=d.top_p)
    g.add_argument("--seed", type=int, default=d.seed)
    g.add_argument("--aggregation", default=d.aggregation, choices=("last", "min", "prod", "mean"))
    c = parser.add_argument_group("KV cache")
    c.add_argument("--policy", default="auto", choices=POLICIES)
    c.add_argument("--kv-budget", type=size_type, default=None, help="device KV budget, e.g. 64MB or 7GB")
    c.add_argument("--block-size", type=int, default=16)
    c.add_argument("--no-inter-beam", action="store_true", help="lbs: do not share prefix blocks in a group")
    c.add_argument("--no-prefetch", action="store_true", help="lbs: no balanced groups, no prefetch")
    c.add_argument("--pcie-gbps", type=float, default=25.0, help="bandwidth of the emulated PCIe link")
    c.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))


def configs_from_args(args: argparse.Namespace) -> tuple[ModelSpec, SearchConfig, CacheConfig]:
    """Build the validated configs; a ValueError here is the user's to fix."""
    model = ModelSpec(source=args.model, dtype=args.dtype)
    search = SearchConfig(
        beams=args.beams, width=args.width, step_tokens=args.step_tokens, step_delimiter=args.step_delimiter,
        max_steps=args.max_steps, temperature=args.temperature, top_p=args.top_p, seed=args.seed,
        aggregation=args.aggregation, verifier=args.verifier,
    )
    cache = CacheConfig(
        policy=args.policy, kv_budget_bytes=args.kv_budget, block_size=args.block_size,
        inter_beam=not args.no_inter_beam, balanced_prefetch=not args.no_prefetch,
        pcie_gbps=args.pcie_gbps, device=args.device,
    )
    return model, search, cache


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="beamwise", description=__doc__)
    sub = parser.add_subparsers(dest="command")

    run = sub.add_parser("run", help="answer a question headless, printing the search as it goes")
    run.add_argument("question", nargs="?", default=None, help="the question (default: a sample question)")
    add_search_options(run)
    run.add_argument("--json", action="store_true", help="print JSON Lines, one object per event")
    run.add_argument("--db", default=None, help="session database (default: in the user data folder)")
    run.add_argument("--no-save", action="store_true", help="do not record this run")

    from app import bench_cli, sessions_cli  # here, not at the top: keeps `run` startup light

    bench_cli.add_parser(sub, add_search_options)
    sessions_cli.add_parser(sub)

    gui = sub.add_parser("gui", help="open the window (the default with no command)")
    gui.add_argument("--question", default=None, help="run this question at start")
    gui.add_argument("--screenshot", default=None, help="after the run, save a PNG of the window here and exit")
    gui.add_argument("--db", default=None)
    add_search_options(gui)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv or ["gui"])
    try:
        if args.command == "run":
            from app.run_cli import run_command

            return run_command(args)
        if args.command == "gui":
            from app.gui.launch import main as gui_main

            return gui_main(args)
        return args.handler(args)
    except (UsageError, ValueError, BeamwiseError) as error:
        message = error.user_message() if isinstance(error, BeamwiseError) else str(error)
        print(f"beamwise: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("beamwise: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `beamwise ... | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit flush cannot fail again
        return 0


if __name__ == "__main__":
    sys.exit(main())
