"""RKSC thresholds saved by `beamwise eval --calibrate`, shared by the CLI and the window.

The file is `early_exit.json` in the user config folder (platformdirs; `BEAMWISE_CONFIG_DIR`
overrides it): verify-skip's {"tau_conf": 0.93, "r_gap": 0.12, "steps": 180, "agreement": 0.95, ...}
and, when the calibration's verifier has a logit lens, the layer-entropy exit's {"entropy_theta": 3.1,
"entropy_delta": 0.4, ...} (on the paper's ~150k-vocabulary scale, as --entropy-theta takes them).
It names the generator and the verifier the calibration ran on ({"generator": "synthetic:tiny-llama",
"verifier": "self-judge on synthetic:tiny-llama"}): an entropy threshold is a property of one verifier's
layers and vocabulary, so the exit refuses (command line) or sets aside (window) thresholds calibrated on
another. A calibration replaces only the thresholds it measured: one with no logit lens (logprob) keeps the
entropy exit's from an earlier one, with the verifier they came from ("entropy_verifier"). Files written before
these fields load as "verifier not recorded" and are used as they are. A calibration where no threshold pair
reached its target agreement saves the exit as off ("entropy_missed": the strictest pair's agreement): `run
--entropy-exit` then runs every layer and says why, and the window says so. Files written before it (1e-06 for
both thresholds, no "entropy_missed") load and are used as they are. Verify-skip's fallback (no pair reached the
target) saves "agreement": null, as it skips no step, with the closest pair's "missed_skip_rate" and
"missed_agreement"; files written before it ("agreement": 1.0 beside "skip_rate": 0.0) load as they are, and
`skip_text` says no agreement for thresholds that skip nothing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import platformdirs

from app import formatting
from app.file_replace import replace_text
from engine.config import SearchConfig
from engine.errors import BeamwiseError
from engine.prm_names import named_family

FILE_NAME = "early_exit.json"


class ThresholdsNotSaved(BeamwiseError, ValueError):
    """The thresholds cannot be written in the config folder: the user's to fix, and the message says how. A
    BeamwiseError as app/store.py's StoreError is (app/options.py's UsageError would close an import circle:
    app.options -> app.exit_options -> this module), and a ValueError as it was."""


@dataclass(frozen=True)
class Thresholds:
    tau_conf: float
    r_gap: float
    steps: int = 0  # calibration steps the thresholds come from
    skip_rate: float = 0.0  # share of those steps they skip
    # share of skipped steps where the verifier would have ranked the same child first; None where they skip none
    # (files written before it say 1.0 there: `skip_text` says no agreement where nothing was skipped)
    agreement: float | None = None
    entropy_theta: float | None = None  # the entropy exit's, on the paper's scale (None: not calibrated)
    entropy_delta: float | None = None
    entropy_vocab: int = 0  # the vocabulary of the verifier they were measured on
    entropy_layers: int = 0  # its decoder layers
    entropy_steps: int = 0  # calibration steps with a recorded verifier pass
    entropy_mean_layer: float | None = None  # mean exit layer they give on those steps
    entropy_agreement: float | None = None  # share of exiting steps where the early choice is the full pass's
    # no pair reached the target: the strictest pair's agreement, and the exit is off (entropy_theta is NEVER then)
    entropy_missed: float | None = None
    generator: str | None = None  # the calibration's generator (`model_key`), None in files written before it
    verifier: str | None = None  # its verifier (`verifier_key`), None in files written before it
    entropy_verifier: str | None = None  # the verifier the entropy thresholds came from (None: `verifier`)
    # verify-skip's fallback (no pair reached the target): the closest pair's skip rate and agreement (None: no pair
    # skipped a step, or a file written before them)
    missed_skip_rate: float | None = None
    missed_agreement: float | None = None
    target_agreement: float | None = None  # the --target-agreement calibrated for (None: a file written before it)

    def __post_init__(self) -> None:
        if not 0 < self.tau_conf <= 1 or not 0 <= self.r_gap < 1:
            raise ValueError(f"thresholds out of range: tau_conf {self.tau_conf} must be in (0, 1], "
                             f"r_gap {self.r_gap} in [0, 1); run beamwise eval --calibrate again.")
        if (self.entropy_theta is None) != (self.entropy_delta is None) or (
                self.entropy_theta is not None and not (self.entropy_theta > 0 and self.entropy_delta > 0)):
            raise ValueError(f"entropy exit thresholds out of range: theta {self.entropy_theta} and delta "
                             f"{self.entropy_delta} must both be positive; run beamwise eval --calibrate again.")
        if self.entropy_missed is not None and (self.entropy_theta is None or not 0 <= self.entropy_missed <= 1):
            raise ValueError(f"entropy_missed {self.entropy_missed} must be a share in [0, 1] beside the entropy "
                             "exit's thresholds; run beamwise eval --calibrate again.")

    @property
    def entropy_off(self) -> bool:
        """The calibration turned the entropy exit off: no threshold pair reached its target agreement."""
        return self.entropy_missed is not None


def thresholds_path() -> Path:
    folder = os.environ.get("BEAMWISE_CONFIG_DIR") or platformdirs.user_config_dir("beamwise", appauthor=False)
    return Path(folder) / FILE_NAME


def load_thresholds(path: Path | None = None, warn: Callable[[str], None] | None = None) -> Thresholds | None:
    """The calibrated thresholds, or None when none were saved or the file cannot be used; `warn` (the command
    line's, which then runs on the defaults) is told why it cannot, in one line saying what to do."""
    path = path or thresholds_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:  # ValueError: not UTF-8
        problem = f"cannot be read ({getattr(error, 'strerror', None) or error})"
    else:
        try:
            return _thresholds_of(json.loads(text))
        except ValueError as error:  # json's JSONDecodeError is one
            problem = f"is damaged ({str(error).removesuffix('; run beamwise eval --calibrate again.')})"
    if warn is not None:
        warn(f"{path}, the calibrated thresholds, {problem}; run beamwise eval --calibrate again. Using the "
             "default thresholds meanwhile.")
    return None


def _thresholds_of(data: object) -> Thresholds:
    """Thresholds from the saved JSON; a ValueError naming what is wrong (a TypeError from comparing a string)."""
    if not isinstance(data, dict):
        raise ValueError(f"not a JSON object of thresholds: {type(data).__name__}")
    missing = [name for name in ("tau_conf", "r_gap") if name not in data]
    if missing:
        raise ValueError(f"no {' or '.join(missing)}")
    for f in fields(Thresholds):
        value = data.get(f.name)
        if f.name not in data or (value is None and "None" in f.type):
            continue
        text = f.type.startswith("str")
        if isinstance(value, bool) or not isinstance(value, str if text else int | float):
            raise ValueError(f"{f.name} is {json.dumps(value)}, not {'text' if text else 'a number'}")
    return Thresholds(**{f.name: data[f.name] for f in fields(Thresholds) if f.name in data})


def save_thresholds(thresholds: Thresholds, path: Path | None = None) -> Path:
    """Write the thresholds whole (a temporary file moved over the old one); ThresholdsNotSaved says why it
    cannot."""
    path = path or thresholds_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_text(path, json.dumps(asdict(thresholds), indent=2) + "\n")
    except OSError as error:
        raise ThresholdsNotSaved(f"cannot save the thresholds to {path} ({error.strerror or error}); make "
                                 f"{path.parent} writable or set BEAMWISE_CONFIG_DIR to a folder you can write "
                                 "to.") from error
    return path


def check_thresholds_writable(path: Path | None = None) -> None:
    """ThresholdsNotSaved before a calibration runs when its result could not be saved."""
    path = path or thresholds_path()
    folder = path.parent
    if path.is_dir():  # found only at the end, after every problem ran, the calibration was lost
        raise ThresholdsNotSaved(f"cannot save thresholds to {path}: a folder has that name; move it away or set "
                                 "BEAMWISE_CONFIG_DIR to another folder.")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ThresholdsNotSaved(f"cannot save thresholds in {folder} ({error.strerror or error}); set "
                                 "BEAMWISE_CONFIG_DIR to a folder you can write to.") from error
    if not os.access(folder, os.W_OK):
        raise ThresholdsNotSaved(f"cannot save thresholds in {folder}: it is read-only; set BEAMWISE_CONFIG_DIR "
                                 "to a folder you can write to.")


ENTROPY_FIELDS = ("entropy_theta", "entropy_delta", "entropy_vocab", "entropy_layers", "entropy_steps",
                  "entropy_mean_layer", "entropy_agreement", "entropy_missed")


def keep_entropy_of(found: Thresholds, earlier: Thresholds | None) -> Thresholds:
    """`found` (a calibration without a logit lens) with `earlier`'s entropy exit thresholds, which it did not
    measure: a logprob calibration wrote "entropy_theta": null over a self-judge one's, and said nothing."""
    if earlier is None or earlier.entropy_theta is None:
        return found
    kept = {name: getattr(earlier, name) for name in ENTROPY_FIELDS}
    return replace(found, **kept, entropy_verifier=earlier.entropy_verifier or earlier.verifier)


def model_key(source: str) -> str:
    """A model source as a calibration records it: a folder or file as its absolute path (FAMILY:FOLDER keeps its
    family), so the same model named two ways is the same; bundled, synthetic:NAME and the like as given."""
    family, rest = named_family(source)
    if family is not None and not Path(source).expanduser().exists() and Path(rest).expanduser().exists():
        return f"{family}:{Path(rest).expanduser().resolve()}"
    path = Path(source).expanduser()
    if path.exists():
        return str(path.resolve())
    return "bundled" if source == "default" else source


def verifier_key(model: str, verifier: str, verifier_model: str | None = None) -> str:
    """The verifier a search's step scores come from: the PRM's model, or the generator for self-judge and
    logprob (the same LM judges its own steps)."""
    if verifier == "prm":
        return f"prm {model_key(verifier_model or '')}"
    return f"{verifier} on {model_key(model)}"


def calibrated_on(saved: Thresholds) -> str:
    """Which verifier (and generator) the saved thresholds were calibrated on, as the window and the CLI say it."""
    if saved.verifier is None:
        return "verifier not recorded"
    text = f"verifier {saved.verifier}, generator {saved.generator or 'not recorded'}"
    if saved.entropy_verifier not in (None, saved.verifier):  # kept from an earlier calibration
        text += f"; entropy exit on {saved.entropy_verifier}"
    return text


def skip_text(saved: Thresholds) -> str:
    """What verify-skip's calibrated thresholds did on their steps, in the words eval and the window share.
    Thresholds that skip no step have no agreement to say: the fallback was shown as "skips 0%, verifier agrees
    100%" in the window, and eval said "no pair skipped any step" where some had, below the target. A fallback
    that skips steps the model is certain of, below the target too, says both."""
    steps = formatting.steps(saved.steps)
    target = saved.target_agreement
    skipped = saved.skip_rate > 0 and saved.agreement is not None
    if skipped and (target is None or saved.agreement >= target):
        return f"skips {saved.skip_rate:.0%} of {steps}, verifier agrees on {saved.agreement:.0%}"
    aim = "the target agreement" if target is None else f"{target:.0%} agreement"
    closest = "" if saved.missed_skip_rate is None or saved.missed_agreement is None else (
        f", the closest skipping {saved.missed_skip_rate:.0%} of them at {saved.missed_agreement:.0%} agreement")
    rest = "the verifier scores every step" if not skipped else (
        f"only steps the model is certain of skip ({saved.skip_rate:.0%}, verifier agrees on {saved.agreement:.0%})")
    return f"no threshold pair reached {aim} on {steps}{closest}: {rest}"


def nats_text(value: float) -> str:
    """An entropy threshold as the CLI and the window show it: 3.500, and calibration's fallback 1e-06 (not 0.000)."""
    return f"{value:.3f}" if value >= 0.001 else f"{value:.0e}"


def entropy_calibrated_on(saved: Thresholds) -> str:
    """Which verifier the saved entropy exit thresholds were measured on, as `run --entropy-exit` says it: their own
    verifier, which is not `calibrated_on`'s first (verify-skip's) when they were kept from an earlier calibration."""
    if saved.verifier is None:
        return "verifier not recorded"
    if saved.entropy_verifier in (None, saved.verifier):
        return calibrated_on(saved)
    return f"verifier {saved.entropy_verifier}, kept when verify-skip was calibrated on {saved.verifier}"


def entropy_off_text(saved: Thresholds) -> str:
    """Why a calibration turned the entropy exit off and how to retry, as `run --entropy-exit` and the window say it."""
    return (f"its calibration on {formatting.steps(saved.entropy_steps)} found no thresholds that reached the "
            f"target agreement (the strictest agreed on {saved.entropy_missed:.0%} of the steps it exits), so every "
            "layer runs; calibrate on more problems or with a lower --target-agreement, or give --entropy-theta and "
            "--entropy-delta")


def entropy_mismatch(saved: Thresholds | None, verifier: str) -> str | None:
    """Why the saved entropy thresholds do not fit `verifier` (a `verifier_key`); None when they fit, when none
    are saved, or when the file does not say which verifier they came from."""
    measured_on = None if saved is None else saved.entropy_verifier or saved.verifier
    if saved is None or saved.entropy_theta is None or measured_on is None or measured_on == verifier:
        return None
    return (f"the calibrated entropy exit thresholds (θ {nats_text(saved.entropy_theta)}, "
            f"δ {nats_text(saved.entropy_delta)} in "
            f"{thresholds_path()}) were measured on {measured_on}, not on this search's {verifier}")


def skip_mismatch(saved: Thresholds | None, generator: str, verifier: str) -> str | None:
    """A warning naming the calibration verify-skip's saved thresholds come from, when it ran on another generator
    (`model_key`) or verifier (`verifier_key`) than this search: a confidence of one model says little of another's.
    None when they match, when none are saved, or when the file does not say."""
    if saved is None or saved.verifier is None or (saved.generator, saved.verifier) == (generator, verifier):
        return None
    return (f"the calibrated verify-skip thresholds (tau_conf {saved.tau_conf:.3f}, r_gap {saved.r_gap:.3f} in "
            f"{thresholds_path()}) were measured on verifier {saved.verifier}, generator {saved.generator}, not on "
            f"this search's verifier {verifier}, generator {generator}")


def calibrated_fields(saved: Thresholds | None, verifier: str, given: Collection[str] = ()) -> dict:
    """The SearchConfig fields the calibration sets in the window, `run`'s rule (app/exit_options.py): each threshold
    not `given` on the command line is the calibrated one; the entropy exit's, where not both are given, are the
    paper's when calibrated on another `verifier` (a `verifier_key`; `run` refuses them) and turn the exit off where
    the calibration saved it off."""
    if saved is None:
        return {}
    fields: dict = {name: getattr(saved, name) for name in ("tau_conf", "r_gap") if name not in given}
    entropy = [name for name in ENTROPY_THRESHOLDS if name not in given]
    if not entropy:
        return fields
    if entropy_mismatch(saved, verifier) is not None:  # another verifier's: the paper's instead
        fields.update({name: getattr(SearchConfig(), name) for name in entropy})
    elif saved.entropy_off:  # its calibration missed the target: off, as the thresholds text says
        fields["entropy_exit"] = False
    elif saved.entropy_theta is not None:
        fields.update({name: getattr(saved, name) for name in entropy})
    return fields


def kept_entropy_text(saved: Thresholds) -> str:
    """The entropy exit a calibration without a logit lens keeps from an earlier one, as eval says it: thresholds,
    or the exit saved as off (its NEVER thresholds are no numbers to show: they printed as "θ 0.0000, δ 0.0000")."""
    measured_on = saved.entropy_verifier or "a verifier not recorded"
    if saved.entropy_off:
        return f"the entropy exit saved as off for {measured_on} stays off"
    return (f"the saved θ {nats_text(saved.entropy_theta)}, δ {nats_text(saved.entropy_delta)} measured on "
            f"{measured_on} are kept")


GIVEN = "given on the command line"
ENTROPY_THRESHOLDS = ("entropy_theta", "entropy_delta")


def thresholds_text(saved: Thresholds | None, search, verifier: str | None = None,
                    given: Collection[str] = ()) -> str:
    """What the window shows of the thresholds a run will use: the calibrated ones, else `search`'s (a SearchConfig).
    `verifier` (a `verifier_key`) is the search's: entropy thresholds calibrated on another are set aside. `given`:
    the thresholds typed on the command line (SearchConfig's names), `search`'s, which win over the calibration."""
    text, typed = _skip_text(saved, search, given), [name for name in ENTROPY_THRESHOLDS if name in given]
    if len(typed) == 2:
        return text + f"\nentropy exit θ {nats_text(search.entropy_theta)}, δ {nats_text(search.entropy_delta)} " \
                      f"({GIVEN})"
    mismatch = entropy_mismatch(saved, verifier) if verifier is not None else None
    if mismatch is not None:
        theta, delta = (getattr(search if name in typed else SearchConfig(), name) for name in ENTROPY_THRESHOLDS)
        return text + (f"\nentropy exit θ {theta:.3f}, δ {delta:.3f} (the paper's: "
                       f"{mismatch}; run `beamwise eval PROBLEMS --calibrate` in a terminal with this verifier)")
    if saved is not None and saved.entropy_off:
        return text + f"\nentropy exit off for this verifier: {entropy_off_text(saved)}"
    if saved is not None and saved.entropy_theta is not None:
        layer = "-" if saved.entropy_mean_layer is None else f"{saved.entropy_mean_layer:.1f}"
        agrees = "-" if saved.entropy_agreement is None else f"{saved.entropy_agreement:.0%}"
        theta, delta = (getattr(search if name in typed else saved, name) for name in ENTROPY_THRESHOLDS)
        mixed = f"{'θ' if typed == ['entropy_theta'] else 'δ'} {GIVEN}; the other " if typed else ""
        return text + (f"\nentropy exit θ {nats_text(theta)}, δ {nats_text(delta)} ({mixed}calibrated on "
                       f"{formatting.steps(saved.entropy_steps)} of a {saved.entropy_layers}-layer verifier: exits "
                       f"at layer {layer} on average, full pass agrees {agrees})")
    return text + (f"\nentropy exit θ {search.entropy_theta:.3f}, δ {search.entropy_delta:.3f} "
                   "(the paper's; not calibrated)")


def _skip_text(saved: Thresholds | None, search, given: Collection[str]) -> str:
    """Verify-skip's thresholds as the window shows them: given (`search`'s), calibrated, or the defaults."""
    typed = [name for name in ("tau_conf", "r_gap") if name in given]
    if typed:
        source = search if saved is None else saved
        tau, gap = (getattr(search if name in typed else source, name) for name in ("tau_conf", "r_gap"))
        rest = "" if len(typed) == 2 else (
            f"; {'r_gap' if typed == ['tau_conf'] else 'τ_conf'} {'calibrated' if saved else 'not calibrated'}")
        shown = "τ_conf" if typed == ["tau_conf"] else "r_gap" if typed == ["r_gap"] else "both"
        return f"τ_conf {tau:.3f}, r_gap {gap:.3f} ({'' if shown == 'both' else shown + ' '}{GIVEN}{rest})"
    if saved is not None:
        return (f"τ_conf {saved.tau_conf:.3f}, r_gap {saved.r_gap:.3f} (calibrated: {skip_text(saved)}; "
                f"{calibrated_on(saved)})")
    return (f"τ_conf {search.tau_conf:.3f}, r_gap {search.r_gap:.3f} (not calibrated: run `beamwise eval PROBLEMS "
            "--calibrate` in a terminal)")
