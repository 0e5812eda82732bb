"""Which PRM family a folder holds (from its config, weight names and tokenizer), and loading it without
remote code: the body through transformers, the head from the checkpoint's own tensors."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase, Qwen2Model

import engine.verifiers.math_shepherd as math_shepherd
import engine.verifiers.qwen_prm as qwen_prm
import engine.verifiers.rlhflow_prm as rlhflow_prm
import engine.verifiers.skywork_prm as skywork_prm
from engine.errors import ModelLoadError, NotAPRM, PRMHeadMissing, load_errors
from engine.prm_folders import QWEN_HEAD_KEYS, VALUE_HEAD_KEYS, checked_prm_folder, detect_family, locate_prm
from engine.verifiers.heads import two_class_head, value_head
from engine.verifiers.parts import FAMILY_LABELS, PRMParts
from engine.verifiers.path_kv import Layout, format_tokens
from engine.verifiers.synthetic_prm import family_tokenizer, synthetic_prm, synthetic_prm_entry
from engine.verifiers.weights import read_tensors, weight_files

__all__ = ["FAMILY_MODULES", "check_head", "checked_prm_folder", "detect_family", "load_prm", "load_prm_tokenizer",
           "locate_prm", "prm_layout", "weights_missing"]

# Each PRM family's module: its `verifier(parts)` wires a loaded PRM, its `LAYOUT` lays a path out from the
# tokenizer alone (what a plan reads without weights).
FAMILY_MODULES = {"qwen-prm": qwen_prm, "skywork-prm": skywork_prm, "math-shepherd": math_shepherd,
                  "rlhflow-prm": rlhflow_prm}


def load_prm(source: str, device: torch.device, dtype: torch.dtype) -> PRMParts:
    """`synthetic:NAME`, a PRM folder, or `FAMILY:FOLDER` to name the family of a folder detection misses."""
    if source.startswith("synthetic:"):
        return synthetic_prm(source.removeprefix("synthetic:"), device, dtype)
    folder, family = locate_prm(source)
    check_head(folder, family)
    tokenizer = load_prm_tokenizer(source)
    prm_layout(family, tokenizer)  # a tokenizer the family cannot write its format with, refused before the weights
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


def prm_layout(family: str, tokenizer: PreTrainedTokenizerBase) -> Layout:
    """The layout the family's verifier builds on `tokenizer`, refused where its run refuses the tokenizer: a step
    tag that is no single token, no chat template where the format is one, a template that drops a step or rewrites
    earlier turns (a first and a later step are laid out here). `load_prm` and `plan` (engine.verifiers
    `verifier_layout`) read the refusal the same way."""
    layout = FAMILY_MODULES[family].LAYOUT(tokenizer)
    format_tokens(layout, "")
    return layout


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


class PRMBody(Qwen2Model):
    """Qwen2.5-Math-PRM's and Skywork's body. The checkpoint's other tensors are no body weights: Qwen's `score.*`
    and Skywork's `v_head.*` are the heads Beamwise reads itself (heads.py), Skywork's `lm_head` goes unused. Named
    here, transformers' load report leaves them out (it listed them as UNEXPECTED, "not ok if you expect identical
    arch", on every load) and still tells a real problem."""

    _keys_to_ignore_on_load_unexpected = (r"^score\.", r"^v_head\.", r"^lm_head\.")  # regexes, searched in names


def _load_body_and_head(family: str, folder: Path, dtype: torch.dtype) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The base model (returns `last_hidden_state`) and the head the family reads."""
    if family in ("qwen-prm", "skywork-prm"):
        body = _loaded(PRMBody, family, folder, dtype)
    else:
        lm = _loaded(AutoModelForCausalLM, family, folder, dtype)
        return lm.base_model, lm.get_output_embeddings()
    files = weight_files(folder)
    if family == "qwen-prm":
        return body, two_class_head(read_tensors(files, list(QWEN_HEAD_KEYS)))
    head = value_head(read_tensors(files, list(VALUE_HEAD_KEYS)))
    return body, head


def _loaded(loader: type, family: str, folder: Path, dtype: torch.dtype) -> torch.nn.Module:
    """`loader.from_pretrained(folder)`, refused where the weights lack some the config names: transformers fills
    those with random numbers and only logs a table, and the PRM would score at random (the generator's load refuses
    them alike: engine.models)."""
    with load_errors(folder, f"the {FAMILY_LABELS[family]} weights"):
        model, info = loader.from_pretrained(folder, dtype=dtype, local_files_only=True, output_loading_info=True)
    missing = sorted(info["missing_keys"])
    if missing:
        raise weights_missing(folder, family, missing)
    return model


def weights_missing(folder: Path, family: str, missing: list[str]) -> ModelLoadError:
    """What the run says of a PRM folder that lacks weights its family's model names (`plan` says it alike, from
    the safetensors headers, of an LM head missing: app/plan_roles.py)."""
    named = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
    return ModelLoadError(f"{folder} lacks {FAMILY_LABELS[family]} weights its config.json names ({named}); the "
                          "verifier would score steps with random numbers.",
                          hint=f"Check the family named before the path ({family}:), or give the folder alone to have "
                               "its family read from its config; or the download may be incomplete: download the PRM "
                               "again.")
