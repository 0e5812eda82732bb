"""Which speculation options would do nothing as given: the refusals app/options.py `_refuse_unused` adds."""

from __future__ import annotations

import argparse
from collections.abc import Collection

from engine.config import SPECULATING

SPECULATION_SHAPERS = ("speculative_ratio", "speculative_continuations", "lookahead_verify")  # refused typed unused


def speculation_refusals(args: argparse.Namespace, typed: Collection[str]) -> list[tuple[bool, str]]:
    """(does nothing as given, why and what to do) for --speculative and the options that shape it; `typed`: the
    option dests typed on the command line whatever their values (`--no-lookahead-verify` at its default too)."""
    ahead = _lookahead_verify_unused(args) if "lookahead_verify" in typed else ""
    return [
        (args.speculative and args.policy not in ("auto", *SPECULATING),
         f"--speculative extends beams with in_device and lbs (and auto, which picks them where they fit), not "
         f"with {args.policy}: pick one of those, or leave it out"),
        (not args.speculative and bool({"speculative_ratio", "speculative_continuations"} & set(typed)),
         "--speculative-continuations and --speculative-ratio size speculative beam extension, which is off: add "
         "--speculative, or leave them out"),
        (args.speculative and bool(args.lookahead),
         "--lookahead runs do not speculate, so --speculative would do nothing: leave out --speculative or "
         "--lookahead"),
        (bool(ahead), ahead),
    ]


def _lookahead_verify_unused(args: argparse.Namespace) -> str:
    """Why --lookahead-verify (or --no-lookahead-verify) changes nothing here, '' where it can: a look-ahead is a
    speculated next step that a PRM loaded on this machine scores in its row's pass (engine/search.py `_ahead_text`,
    engine/verifiers/path_kv.py `looks_ahead`); self-judge (a probe after the step), logprob, a served PRM and a
    pass cut short by the entropy exit never score one."""
    option = "--lookahead-verify" if args.lookahead_verify else "--no-lookahead-verify"
    served = getattr(args, "verifier_endpoint", None) is not None
    if not args.speculative:
        return (f"{option} switches the verifying of speculated next steps, and speculative extension is off: add "
                "--speculative, or leave it out")
    if args.verifier != "prm" or served:
        scorer = "a served PRM" if served else f"the {args.verifier} verifier"
        return (f"{option} switches the scoring of a speculated next step in its row's PRM pass, and {scorer} "
                "never scores one: pick --verifier prm with a --verifier-model on this machine, or leave it out")
    if args.entropy_exit:
        return (f"{option} switches the scoring of a speculated next step at the end of its row's PRM pass, and "
                "--entropy-exit stops that pass early, so none is scored: leave out one of them")
    return ""
