"""Whether a model folder's safetensors weights are whole, read from their headers and sizes alone (no tensor is
loaded): a weight file cut short was added and listed as fine, and only `run` said "incomplete metadata, file not
fully covered"."""

from __future__ import annotations

import struct
from pathlib import Path

from engine.errors import ModelLoadError
from engine.prm_folders import INDEX, HeaderPastEnd, safetensors_header, weight_map

HINT = "The download may be incomplete or the copy cut short: copy the weights again from where the model came from."
LONG_HINT = ("The file is damaged or is not the one its folder was made with: copy the weights again from where the "
             "model came from.")

_whole: set[tuple[str, int, int]] = set()  # (path, size, mtime) of weight files found whole in this process


WEIGHT_PATTERNS = ("*.safetensors", "*.bin")  # a transformers folder's weights, sharded or not


def check_weights(folder: Path) -> None:
    """ModelLoadError where `folder` has no weight files (a config alone was listed as a model and failed only at
    `run`), or names the first safetensors file that is missing (named by the index of sharded weights) or whose
    header does not cover the file exactly, as safetensors itself requires when it loads. PyTorch .bin files are
    left to the load."""
    if not any(next(folder.glob(pattern), None) for pattern in WEIGHT_PATTERNS):
        raise ModelLoadError(f"model folder {folder} has no weight files (*.safetensors, *.bin).",
                             hint="The download may be incomplete: copy the weights from where the model came "
                                  "from, or pick another folder.")
    for file in _weight_files(folder):
        _check_file(file)


def _weight_files(folder: Path) -> list[Path]:
    index = folder / INDEX
    if not index.is_file():
        return sorted(folder.glob("*.safetensors"))
    try:
        shards = sorted(set(weight_map(index).values()))
    except (OSError, ValueError, AttributeError) as error:
        raise ModelLoadError(f"the weight index {index} cannot be read ({type(error).__name__}: {error}).",
                             hint=HINT) from error
    missing = [name for name in shards if not (folder / name).is_file()]
    if missing:
        raise ModelLoadError(f"model folder {folder} lacks weight files its index names ({', '.join(missing[:3])}).",
                             hint=HINT)
    return [folder / name for name in shards]


def _check_file(file: Path) -> None:
    stat = file.stat()
    key = (str(file.resolve()), stat.st_size, stat.st_mtime_ns)
    if key in _whole:
        return
    needed = _bytes_named(file)
    if needed != stat.st_size:
        short = needed > stat.st_size
        cut = "is cut short" if short else "holds bytes its header does not name"
        raise ModelLoadError(f"the weight file {file} {cut}: its header names {needed:,} bytes, the file has "
                             f"{stat.st_size:,}.", hint=HINT if short else LONG_HINT)
    _whole.add(key)


def _bytes_named(file: Path) -> int:
    """The file size a safetensors header promises: the header, then its last tensor's end."""
    try:
        header, start = safetensors_header(file)
        ends = [int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"]
    except HeaderPastEnd as cut:
        return cut.needed
    except (OSError, struct.error, ValueError, KeyError, TypeError, IndexError, AttributeError) as error:
        raise ModelLoadError(f"the weight file {file} has no header safetensors can read ({type(error).__name__}: "
                             f"{error}).", hint=HINT) from error
    return start + max(ends, default=0)


__all__ = ["check_weights"]
