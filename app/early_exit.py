"""RKSC verify-skip thresholds saved by `beamwise eval --calibrate`, shared by the CLI and the window.

The file is `early_exit.json` in the user config folder (platformdirs; `BEAMWISE_CONFIG_DIR`
overrides it): {"tau_conf": 0.93, "r_gap": 0.12, "steps": 180, "agreement": 0.95, ...}.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import platformdirs

FILE_NAME = "early_exit.json"


@dataclass(frozen=True)
class Thresholds:
    tau_conf: float
    r_gap: float
    steps: int = 0  # calibration steps the thresholds come from
    skip_rate: float = 0.0  # share of those steps they skip
    agreement: float = 1.0  # share of skipped steps where the verifier would have ranked the same child first

    def __post_init__(self) -> None:
        if not 0 < self.tau_conf <= 1 or not 0 <= self.r_gap < 1:
            raise ValueError(f"thresholds out of range: tau_conf {self.tau_conf} must be in (0, 1], "
                             f"r_gap {self.r_gap} in [0, 1); run beamwise eval --calibrate again.")


def thresholds_path() -> Path:
    folder = os.environ.get("BEAMWISE_CONFIG_DIR") or platformdirs.user_config_dir("beamwise", appauthor=False)
    return Path(folder) / FILE_NAME


def load_thresholds(path: Path | None = None) -> Thresholds | None:
    """The calibrated thresholds, or None when none were saved (or the file is unreadable)."""
    path = path or thresholds_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Thresholds(**{k: data[k] for k in ("tau_conf", "r_gap", "steps", "skip_rate", "agreement") if k in data})
    except (OSError, ValueError, TypeError, KeyError):
        return None


def save_thresholds(thresholds: Thresholds, path: Path | None = None) -> Path:
    path = path or thresholds_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(thresholds), indent=2) + "\n", encoding="utf-8")
    return path
