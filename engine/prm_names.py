"""The PRM families Beamwise knows by name, and a source that names its family (`FAMILY:FOLDER`); no torch, so
the store's and the CLI's light paths can read them."""

from __future__ import annotations

FAMILY_LABELS = {
    "qwen-prm": "Qwen2.5-Math-PRM",
    "skywork-prm": "Skywork-o1-Open-PRM",
    "math-shepherd": "Math-Shepherd",
    "rlhflow-prm": "RLHFlow PRM",
}


def named_family(source: str) -> tuple[str | None, str]:
    """`FAMILY:FOLDER` as (FAMILY, FOLDER); any other source, a Windows path such as C:\\PRMs\\x among them,
    as (None, source)."""
    family, _, rest = source.partition(":")
    return (family, rest) if rest and family in FAMILY_LABELS else (None, source)

SYNTHETIC_PRM_FAMILIES = {  # the tiny random PRMs (engine/verifiers/synthetic_prm.py builds them) and their families
    "tiny-qwen-prm": "qwen-prm",
    "tiny-skywork-prm": "skywork-prm",
    "tiny-math-shepherd": "math-shepherd",
    "tiny-rlhflow-prm": "rlhflow-prm",
}
LENS_FAMILIES = ("math-shepherd", "rlhflow-prm")  # read labels through the LM head: the entropy exit applies
