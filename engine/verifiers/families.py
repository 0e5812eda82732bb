"""Which PRM family a folder holds (from its config, weight names and tokenizer), and loading it without
remote code: the body through transformers, the head from the checkpoint's own tensors."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase, Qwen2Model

from engine.errors import NotAPRM, PRMHeadMissing, load_errors
from engine.prm_folders import QWEN_HEAD_KEYS, VALUE_HEAD_KEYS, checked_prm_folder, detect_family, locate_prm
from engine.verifiers.heads import two_class_head, value_head
from engine.verifiers.parts import FAMILY_LABELS, PRMParts
from engine.verifiers.synthetic_prm import family_tokenizer, synthetic_prm, synthetic_prm_entry
from engine.verifiers.weights import read_tensors, weight_files

__all__ = ["check_head", "checked_prm_folder", "detect_family", "load_prm", "load_prm_tokenizer", "locate_prm"]


def load_prm(source: str, device: torch.device, dtype: torch.dtype) -> PRMParts:
    """`synthetic:NAME`, a PRM folder, or `FAMILY:FOLDER` to name the family of a folder detection misses."""
    if source.startswith("synthetic:"):
        return synthetic_prm(source.removeprefix("synthetic:"), device, dtype)
    folder, family = locate_prm(source)
    check_head(folder, family)
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


HEAD_KEYS = {"qwen-prm": QWEN_HEAD_KEYS, "skywork-prm": VALUE_HEAD_KEYS}  # the families that read a reward head


def check_head(folder: Path, family: str) -> None:
    """Refuse, before the body loads (and in a plan), a folder without the reward head of its family. Detection
    already requires it; a family named before the path (`qwen-prm:FOLDER`) is taken as the user's word and was not
    checked, so a plain causal LM named so failed on the first head tensor it lacked, as a fault."""
    keys = HEAD_KEYS.get(family, ())
    names = weight_files(folder) if keys else {}
    missing = [key for key in keys if key not in names]
    if not missing:
        return
    label = FAMILY_LABELS[family]
    error = NotAPRM if len(missing) == len(keys) else PRMHeadMissing  # no head at all: not that family
    raise error(f"{folder} has no {label} reward head, which the family {family} reads: its weights lack "
                f"{', '.join(missing)}.",
                hint=f"Check the family named before the path ({family}:), or give the folder alone to have its "
                     f"family read from its config; or check the folder: a {label} download may be incomplete.")


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
