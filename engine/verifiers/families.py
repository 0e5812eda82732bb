"""Which PRM family a folder holds (from its config, weight names and tokenizer), and loading it without
remote code: the body through transformers, the head from the checkpoint's own tensors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase, Qwen2Model

from engine.errors import NotAPRM, PRMHeadMissing, load_errors
from engine.verifiers.heads import QWEN_HEAD_KEYS, VALUE_HEAD_KEYS, two_class_head, value_head
from engine.verifiers.parts import FAMILY_LABELS, PRMParts, named_family
from engine.verifiers.synthetic_prm import family_tokenizer, synthetic_prm, synthetic_prm_entry
from engine.verifiers.weights import read_tensors, weight_files

CAUSAL_HINTS = {"math-shepherd": ("shepherd",), "rlhflow-prm": ("rlhflow",)}


def load_prm(source: str, device: torch.device, dtype: torch.dtype) -> PRMParts:
    """`synthetic:NAME`, a PRM folder, or `FAMILY:FOLDER` to name the family of a folder detection misses."""
    if source.startswith("synthetic:"):
        return synthetic_prm(source.removeprefix("synthetic:"), device, dtype)
    folder, family = locate_prm(source)
    tokenizer = load_prm_tokenizer(source)
    body, head = _load_body_and_head(family, folder, dtype)
    return PRMParts(family, str(folder), body.to(device).eval().requires_grad_(False),
                    head.to(device=device, dtype=dtype).eval().requires_grad_(False), tokenizer, device)


def load_prm_tokenizer(source: str) -> PreTrainedTokenizerBase:
    """The tokenizer `load_prm` gives the PRM at `source`, without its weights (a plan reads it)."""
    if source.startswith("synthetic:"):
        return family_tokenizer(synthetic_prm_entry(source.removeprefix("synthetic:")).family)
    folder, family = locate_prm(source)
    with load_errors(folder, f"the {FAMILY_LABELS[family]} tokenizer"):
        return AutoTokenizer.from_pretrained(folder, local_files_only=True)


def locate_prm(source: str) -> tuple[Path, str]:
    """The folder and family key of a PRM folder source (`FOLDER` or `FAMILY:FOLDER`)."""
    forced, rest = named_family(source)
    folder = _checked_folder(rest)
    return folder, forced or detect_family(folder)


def checked_prm_folder(source: str) -> Path:
    """The folder of a PRM folder source (`FOLDER` or `FAMILY:FOLDER`), refused when it is missing or has no
    config.json; what a plan reads (a config is enough to plan a PRM not yet downloaded whole)."""
    return _checked_folder(named_family(source)[1])


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
    raise NotAPRM(
        f"{folder} holds a causal LM ({', '.join(architectures)}) with no reward head and no name of a PRM "
        "family (Math-Shepherd, RLHFlow).",
        hint="If it is one, name the family before the path: math-shepherd:PATH or rlhflow-prm:PATH.",
    )


def _checked_folder(source: str) -> Path:
    folder = Path(source).expanduser()
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


def _load_body_and_head(family: str, folder: Path, dtype: torch.dtype) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The base model (returns `last_hidden_state`) and the head the family reads."""
    with load_errors(folder, f"the {FAMILY_LABELS[family]} weights"):
        if family in ("qwen-prm", "skywork-prm"):
            body = Qwen2Model.from_pretrained(folder, dtype=dtype, local_files_only=True)
        else:
            lm = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, local_files_only=True)
            return lm.base_model, lm.get_output_embeddings()
    files = weight_files(folder)
    if family == "qwen-prm":
        return body, two_class_head(read_tensors(files, list(QWEN_HEAD_KEYS)))
    head = value_head(read_tensors(files, list(VALUE_HEAD_KEYS)))
    return body, head
