"""Why a run is on the emulated GPU although the machine has an NVIDIA GPU, and what to install (no Qt)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

CUDA_HINT = ("install the CUDA build of torch into Beamwise's environment: pip install torch==2.13.0 --index-url "
             "https://download.pytorch.org/whl/cuXXX (XXX from pytorch.org's selector; see README, An NVIDIA card)")


def nvidia_gpu_present() -> bool:
    """An NVIDIA driver is installed: its tool on PATH (Windows and Linux) or its kernel module (Linux)."""
    return shutil.which("nvidia-smi") is not None or (os.name != "nt" and Path("/proc/driver/nvidia").is_dir())


def emulated_reason(cuda_version: str | None, cuda_available: bool,
                    gpu_present: Callable[[], bool] = nvidia_gpu_present) -> str | None:
    """One sentence when an NVIDIA GPU is there but torch cannot use it; None when there is nothing to fix."""
    if cuda_available or not gpu_present():
        return None
    if cuda_version is None:
        return f"an NVIDIA GPU is present, but this torch is a CPU build; {CUDA_HINT}."
    return (f"an NVIDIA GPU is present and torch is built for CUDA {cuda_version}, but it cannot use the GPU: "
            "update the NVIDIA driver (or install a torch built for the CUDA your driver supports).")


def emulated_hint() -> str | None:
    """`emulated_reason` for the torch of this process."""
    import torch

    return emulated_reason(torch.version.cuda, torch.cuda.is_available())
