"""Reading a few named tensors (a reward head) from a folder's safetensors files, without the rest."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open

from engine.errors import PRMHeadMissing, load_errors
from engine.prm_folders import weight_files

__all__ = ["read_tensors", "weight_files"]


def read_tensors(files: dict[str, Path], names: list[str]) -> dict[str, torch.Tensor]:
    """The tensors `names`, read on the CPU; PRMHeadMissing names those no file holds (engine/verifiers/families.py
    checks a head before its body loads: this is the last word, not a KeyError)."""
    missing = [name for name in names if name not in files]
    if missing:
        raise PRMHeadMissing(f"the weights lack {', '.join(missing)}.")
    found: dict[str, torch.Tensor] = {}
    for name in names:
        with load_errors(files[name], f"the tensor {name}"), safe_open(str(files[name]), framework="pt") as handle:
            found[name] = handle.get_tensor(name)
    return found
