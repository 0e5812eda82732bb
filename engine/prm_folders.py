"""Which PRM family a source names, read from a folder's config.json and safetensors headers alone: no torch, so
the window checks a picked folder, and the entropy exit's refusal, before PyTorch has loaded (and never waits on
its import)."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

from engine.errors import BeamwiseError, LayersUnavailable, NotAPRM, PRMFamilyUnnamed, PRMHeadMissing, load_errors
from engine.prm_names import FAMILY_LABELS, LENS_FAMILIES, SYNTHETIC_PRM_FAMILIES, named_family

INDEX = "model.safetensors.index.json"  # a sharded model's: which file holds each tensor
CAUSAL_HINTS = {"math-shepherd": ("shepherd",), "rlhflow-prm": ("rlhflow",)}
QWEN_HEAD_KEYS = ("score.0.weight", "score.0.bias", "score.2.weight", "score.2.bias")
VALUE_HEAD_KEYS = ("v_head.summary.weight", "v_head.summary.bias")


def synthetic_prm_family(name: str) -> str:
    """The family of the synthetic PRM `name` (without `synthetic:`); NotAPRM names the known ones."""
    if name not in SYNTHETIC_PRM_FAMILIES:
        known = ", ".join(f"synthetic:{key}" for key in SYNTHETIC_PRM_FAMILIES)
        raise NotAPRM(f"synthetic:{name} is not a synthetic PRM.", hint=f"Use one of: {known}.")
    return SYNTHETIC_PRM_FAMILIES[name]


def prm_family(verifier_model: str) -> str:
    """The family key of the PRM at `verifier_model`, from its config and weight names (no weights loaded)."""
    if verifier_model.startswith("synthetic:"):
        return synthetic_prm_family(verifier_model.removeprefix("synthetic:"))
    return locate_prm(verifier_model)[1]


def no_lens(name: str) -> LayersUnavailable:
    """The refusal for a verifier that reads a reward head (Qwen2.5-Math-PRM, Skywork): nothing to exit on."""
    return LayersUnavailable(f"the {name} verifier reads a reward head on its last layer, not label tokens through "
                             "its LM head, so there is no logit lens to exit on.")


def exit_refusal(verifier: str, verifier_model: str | None) -> LayersUnavailable | None:
    """Why the layer-entropy exit cannot run on this PRM, read from its config and weight names (no weights
    loaded), as the run would refuse it; None for the other verifiers and for a PRM it cannot read (the run says)."""
    if verifier != "prm" or not verifier_model:
        return None
    try:
        family = prm_family(verifier_model)
    except BeamwiseError:
        return None
    return None if family in LENS_FAMILIES else no_lens(f"{FAMILY_LABELS[family]} ({verifier_model})")


def locate_prm(source: str) -> tuple[Path, str]:
    """The folder and family key of a PRM folder source (`FOLDER` or `FAMILY:FOLDER`)."""
    forced, folder = _family_and_folder(source)
    return folder, forced or detect_family(folder)


def checked_prm_folder(source: str) -> Path:
    """The folder of a PRM folder source (`FOLDER` or `FAMILY:FOLDER`), refused when it is missing or has no
    config.json; what a plan reads (a config is enough to plan a PRM not yet downloaded whole)."""
    return _family_and_folder(source)[1]


def _family_and_folder(source: str) -> tuple[str | None, Path]:
    """`FAMILY:FOLDER` or `FOLDER` as (the family named or None, the checked folder). A prefix before a colon that
    names no family, where no such path exists, is refused as a family (it said the folder did not exist)."""
    forced, rest = named_family(source)
    prefix, colon, tail = source.partition(":")
    if (forced is None and colon and tail and len(prefix) > 1 and not any(c in prefix for c in "/\\.~")
            and not Path(source).expanduser().exists()):  # C:\PRMs (a drive), ./a:b and ~/a:b are paths
        raise NotAPRM(f"{prefix!r} in {source} is no PRM family Beamwise knows.",
                      hint=f"Name one of {', '.join(FAMILY_LABELS)} before the colon (FAMILY:FOLDER), or give the "
                           "folder alone and its family is read from its config.")
    return forced, _checked_folder(rest)


def detect_family(folder: Path) -> str:
    """The family key of the PRM in `folder`; NotAPRM says why a folder is none Beamwise knows."""
    folder = _checked_folder(str(folder))
    config = _config(folder)
    names = set(weight_files(folder))
    architectures = [str(a) for a in config.get("architectures") or []]
    hint = f"{folder.name} {config.get('_name_or_path', '')}".lower()
    if "Qwen2ForProcessRewardModel" in architectures or any(n.startswith("score.") for n in names):
        _require_head(names, QWEN_HEAD_KEYS, "Qwen2.5-Math-PRM", "two-class head (score.0, score.2)")
        return "qwen-prm"
    if "v_head.summary.weight" in names or "skywork" in hint:
        _require_head(names, VALUE_HEAD_KEYS, "Skywork-o1-Open-PRM", "value head (v_head.summary)")
        return "skywork-prm"
    if not any(a.endswith("ForCausalLM") for a in architectures):
        found = ", ".join(architectures) or "no architecture"
        raise NotAPRM(f"{folder} is not a PRM Beamwise knows: its config.json names {found}.")
    for family, words in CAUSAL_HINTS.items():
        if any(word in hint for word in words):
            return family
    raise PRMFamilyUnnamed(
        f"{folder} holds a causal LM ({', '.join(architectures)}) with no reward head and no name of a PRM "
        "family (Math-Shepherd, RLHFlow).",
        hint="If it is one, name the family before the path: math-shepherd:PATH or rlhflow-prm:PATH.",
    )


def weight_files(folder: Path) -> dict[str, Path]:
    """Tensor name -> the safetensors file holding it (single file or sharded with an index)."""
    index = folder / INDEX
    if index.is_file():
        with load_errors(index, "the weight index"):
            mapping = weight_map(index)
        return {name: folder / file for name, file in mapping.items()}
    names: dict[str, Path] = {}
    for file in sorted(folder.glob("*.safetensors")):
        with load_errors(file, "the weight names"):
            names.update(dict.fromkeys(tensor_names(file), file))
    return names


def weight_map(index: Path) -> dict[str, str]:
    """Tensor name -> shard file name, as a sharded model's index (model.safetensors.index.json) gives them;
    OSError, ValueError where it cannot be read as one."""
    read = json.loads(index.read_text(encoding="utf-8"))
    mapping = read.get("weight_map") if isinstance(read, dict) else None
    if not isinstance(mapping, dict) or not all(isinstance(v, str) for v in mapping.values()):
        raise ValueError("it has no weight_map of tensor names to file names")
    return mapping


class HeaderPastEnd(ValueError):
    """A safetensors header longer than its file: the file is cut short within it."""

    def __init__(self, needed: int, size: int) -> None:
        super().__init__(f"its header names {needed:,} bytes, the file has {size:,}")
        self.needed = needed


def safetensors_header(file: Path) -> tuple[dict[str, Any], int]:
    """A safetensors file's header and where its data begins (8 + the header's length): an 8-byte little-endian
    length, then that many bytes of JSON (safetensors' own reader would import torch for this). HeaderPastEnd where
    the file ends within its header; ValueError, struct.error, OSError where it cannot be read."""
    with file.open("rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        size = os.fstat(handle.fileno()).st_size
        if 8 + length > size:
            raise HeaderPastEnd(8 + length, size)
        header = json.loads(handle.read(length).decode("utf-8"))
    if not isinstance(header, dict):
        raise ValueError("its header is not a JSON object")
    return header, 8 + length


def tensor_names(file: Path) -> list[str]:
    """The tensor names in a safetensors file, from its header (`safetensors_header`)."""
    return [name for name in safetensors_header(file)[0] if name != "__metadata__"]


def _checked_folder(source: str) -> Path:
    folder = Path(source).expanduser()
    if folder.is_file():
        raise NotAPRM(f"{folder} is a file; a PRM is a transformers folder (config.json and its weights).",
                      hint="Give the folder that holds it (a GGUF file can be the generator, not the PRM).")
    if not folder.is_dir():
        raise NotAPRM(f"the PRM folder {folder} does not exist.")
    if not (folder / "config.json").is_file():
        raise NotAPRM(f"{folder} has no config.json, so it is not a transformers PRM folder.")
    return folder


def _config(folder: Path) -> dict[str, Any]:
    with load_errors(folder / "config.json", "the PRM config"):
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    if not isinstance(config, dict) or not isinstance(config.get("architectures") or [], list):
        raise NotAPRM(f"{folder}'s config.json is not a transformers config (an object whose architectures are a "
                      "list).")
    return config


def _require_head(names: set[str], keys: tuple[str, ...], family: str, what: str) -> None:
    missing = [k for k in keys if k not in names]
    if missing:
        raise PRMHeadMissing(f"this looks like a {family} but its {what} is missing ({', '.join(missing)}).")
