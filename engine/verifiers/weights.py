"""Reading a few named tensors (a reward head) from a folder's safetensors files, without the rest."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open

from engine.errors import load_errors
from engine.prm_folders import weight_files

__all__ = ["read_tensors", "weight_files"]


def read_tensors(files: dict[str, Path], names: list[str]) -> dict[str, torch.Tensor]:
    """The tensors `names` (each must be in `files`), read on the CPU."""
    found: dict[str, torch.Tensor] = {}
    for name in names:
        with load_errors(files[name], f"the tensor {name}"), safe_open(str(files[name]), framework="pt") as handle:
            found[name] = handle.get_tensor(name)
    return found
