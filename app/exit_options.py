"""The early exits' thresholds from the command line: as given, else the calibrated ones, else the defaults."""

from __future__ import annotations

import argparse
import math

from app.run_output import warn
from engine.config import SearchConfig
from engine.errors import ConfigError
from engine.prm_folders import exit_refusal

THRESHOLDS = ("tau_conf", "r_gap", "entropy_theta", "entropy_delta")  # the options' dests are the fields' names
RANGES = {  # SearchConfig's checks of the thresholds, said in the options' words (its own name the fields)
    "tau_conf": ("in (0, 1]", lambda value: 0 < value <= 1),
    "r_gap": ("in [0, 1)", lambda value: 0 <= value < 1),
    "entropy_theta": ("a positive number", lambda value: math.isfinite(value) and value > 0),
    "entropy_delta": ("a positive number", lambda value: math.isfinite(value) and value > 0),
}


def given_thresholds(args: argparse.Namespace) -> frozenset[str]:
    """The thresholds given on the command line (SearchConfig's names): they win over the calibrated ones, in `run`
    (`early_exit_thresholds`) and in the window (SearchControls.set_configs' `given`), which has no control to set
    them and laid the calibration over them."""
    return frozenset(name for name in THRESHOLDS if getattr(args, name, None) is not None)


def early_exit_thresholds(args: argparse.Namespace) -> dict[str, float | bool]:
    """--tau-conf, --r-gap, --entropy-theta and --entropy-delta as given, else the calibrated ones
    (beamwise eval --calibrate), else the defaults: as SearchConfig fields. The entropy exit refuses calibrated
    thresholds measured on another verifier (a ConfigError saying what to do) and says which ones it uses; where
    that calibration turned the exit off (no pair reached its target), "entropy_exit": False with a word on stderr,
    to be laid over --entropy-exit: the saved 1e-06 thresholds are met by a saturated lens (entropy 0.0). A PRM that
    reads a reward head (no logit lens) refuses the exit first, whatever the calibration file says (`gui` opens
    and its settings say it, as for such a PRM picked there)."""
    from app.early_exit import load_thresholds

    _check_ranges(args)
    no_lens = args.entropy_exit and (refusal := exit_refusal(args.verifier, args.verifier_model)) is not None
    if no_lens and getattr(args, "command", None) != "gui":  # the window says it in red by its checkbox
        raise refusal  # before the calibration's verifier is compared: no thresholds make this exit run
    d = SearchConfig()
    given = {"tau_conf": args.tau_conf, "r_gap": args.r_gap,
             "entropy_theta": args.entropy_theta, "entropy_delta": args.entropy_delta}
    uses_saved = (args.verify_skip and None in (args.tau_conf, args.r_gap)) or (
        args.entropy_exit and None in (args.entropy_theta, args.entropy_delta))
    saved = load_thresholds(warn=warn if uses_saved else None) if None in given.values() else None
    exit_off = False
    checked = args.entropy_exit and not no_lens and args.verifier != "logprob"  # logprob: SearchConfig refuses it
    if checked and saved is not None and saved.entropy_theta is not None \
            and None in (args.entropy_theta, args.entropy_delta):
        exit_off = _check_entropy_calibration(args, saved)
    if args.verify_skip and not getattr(args, "calibrate", False) and None in (args.tau_conf, args.r_gap):
        _note_skip_calibration(args, saved)
    chosen = {}
    for name, value in given.items():
        calibrated = getattr(saved, name) if saved is not None else None
        chosen[name] = value if value is not None else calibrated if calibrated is not None else getattr(d, name)
    return {**chosen, "entropy_exit": False} if exit_off else chosen


def _check_ranges(args: argparse.Namespace) -> None:
    """A threshold typed out of its range, refused as typed: SearchConfig said "tau_conf must be in (0, 1]" and
    "the entropy exit's theta and delta must be positive (got 0.0, 3.0)", names no option has (the window has no
    control for them, so the engine's words reach it from the command line alone)."""
    for name in THRESHOLDS:
        value = getattr(args, name, None)
        span, fits = RANGES[name]
        if value is not None and not fits(value):
            raise ConfigError(f"--{name.replace('_', '-')} must be {span} (got {value}).")


def _check_entropy_calibration(args: argparse.Namespace, saved) -> bool:
    """--entropy-exit with calibrated thresholds: refused when they come from another verifier, else named; True
    (said on stderr) when that calibration turned the exit off."""
    import sys

    from app.early_exit import entropy_calibrated_on, entropy_mismatch, entropy_off_text, nats_text, verifier_key

    verifier = verifier_key(args.model, args.verifier, args.verifier_model)
    mismatch = entropy_mismatch(saved, verifier)
    if mismatch is not None:
        raise ConfigError(f"{mismatch}. Calibrate them for this verifier (beamwise eval PROBLEMS --calibrate with the "
                         "same --model and --verifier), or give --entropy-theta and --entropy-delta.")
    if saved.entropy_off:
        print(f"beamwise: entropy exit: off ({entropy_calibrated_on(saved)}): {entropy_off_text(saved)}.",
              file=sys.stderr)
        return True
    print(f"beamwise: entropy exit: calibrated θ {nats_text(saved.entropy_theta)}, δ {nats_text(saved.entropy_delta)} "
          f"({entropy_calibrated_on(saved)}{'' if saved.verifier else ': calibrate again to record it'})",
          file=sys.stderr)
    return False


def _note_skip_calibration(args: argparse.Namespace, saved) -> None:
    """--verify-skip with calibrated thresholds from another model or verifier: said on stderr, as the entropy
    exit says which calibration its thresholds come from (they were used with no word)."""
    from app.early_exit import model_key, skip_mismatch, verifier_key

    mismatch = skip_mismatch(saved, model_key(args.model), verifier_key(args.model, args.verifier, args.verifier_model))
    if mismatch is not None:
        warn(f"{mismatch}; calibrate for this search (beamwise eval PROBLEMS --calibrate with the same --model and "
             "--verifier) or give --tau-conf and --r-gap.")
