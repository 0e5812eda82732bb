"""The prefix cache's disk tier: one file per block in the user cache folder, written atomically.

A block's file is `<folder>/d<depth>-<key>.kv`: `torch.save` of its token ids, its KV
`[L, 2, H, block_size, D]` on the CPU and the CRC-32 of the KV's bytes. It is written to a temporary file in
the same folder and moved into place with `os.replace`, so a reader sees a whole file or none, and two
processes writing the same block both leave a whole file (the same bytes). A file that cannot be read, has the
wrong shape or dtype, holds other tokens, or whose KV bytes are not the ones written (damaged on the disk: a
few flipped bytes still load, and would feed every later run that shares the block) is removed and counted as
a miss. Another
process may remove a file at any time (its own eviction): that is a miss too, never an error. A temporary file
that a process killed mid-write left is removed by the next `scan` (each eviction's) once an hour old.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import time
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.bundled import cache_root

FOLDER_ENV = "BEAMWISE_PREFIX_CACHE_DIR"  # overrides <user cache>/prefix-kv (tests, portable installs)
SUFFIX = ".kv"
_NAME = re.compile(r"^d(\d+)-([0-9a-f]+)\.kv$")
_TEMP = re.compile(r"^\.(?:d\d+-[0-9a-f]+|probe)\.\d+\.[0-9a-f]+\.tmp$")  # write_block's and unwritable's
STALE_TEMP_S = 3600.0  # a temporary file this old is a killed process's: no write of a block takes that long


def prefix_root() -> Path:
    """$BEAMWISE_PREFIX_CACHE_DIR, else `prefix-kv` in Beamwise's cache folder (platformdirs)."""
    override = os.environ.get(FOLDER_ENV, "").strip()
    return Path(override).expanduser() if override else cache_root() / "prefix-kv"


@dataclass(frozen=True)
class DiskBlock:
    key: bytes
    depth: int
    size: int  # bytes of the file
    mtime: float  # last write or hit (recency shared by every process)
    path: Path


def block_path(folder: Path, key: bytes, depth: int) -> Path:
    return folder / f"d{depth}-{key.hex()}{SUFFIX}"


def write_block(folder: Path, key: bytes, depth: int, tokens: tuple[int, ...], kv: torch.Tensor) -> int:
    """Write the block atomically; returns the file's size (0 when the folder cannot be written: the
    disk tier is a cache, so a full or read-only disk loses nothing but speed)."""
    target = block_path(folder, key, depth)
    temp = folder / f".{target.stem}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        kv = kv.contiguous()
        torch.save({"tokens": list(tokens), "kv": kv, "crc32": checksum(kv)}, temp)
        os.replace(temp, target)
        return target.stat().st_size
    except OSError:
        with contextlib.suppress(OSError):
            temp.unlink()
        return 0


def unwritable(folder: Path) -> str | None:
    """Why no block can be written in `folder` (the OS's reason, with the path), or None when a file can be:
    `write_block` says nothing of a failed write (the disk tier is a cache), so a run asks once."""
    probe = folder / f".probe.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        return f"{error.filename or folder}: {error.strerror or error}"
    return None


def read_block(
    folder: Path, key: bytes, depth: int, tokens: tuple[int, ...], shape: tuple[int, ...], dtype: torch.dtype
) -> torch.Tensor | None:
    """The block's KV if its file is whole and holds exactly `tokens`; a damaged file is removed."""
    path = block_path(folder, key, depth)
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        return None
    except Exception:  # truncated, corrupt or from another torch: recompute it
        remove(path)
        return None
    kv = data.get("kv") if isinstance(data, dict) else None
    ok = (
        isinstance(kv, torch.Tensor) and tuple(kv.shape) == tuple(shape) and kv.dtype == dtype
        and list(data.get("tokens", ())) == list(tokens) and data.get("crc32") == checksum(kv)
    )
    if not ok:
        remove(path)
        return None
    with contextlib.suppress(OSError):
        os.utime(path)  # a hit makes it recent for every process's eviction
    return kv


def checksum(kv: torch.Tensor) -> int:
    """CRC-32 of a contiguous CPU tensor's bytes (damage on the disk, not tampering, is what it finds)."""
    return zlib.crc32(kv.reshape(-1).view(torch.uint8).numpy())


def scan(folder: Path, stale_after_s: float = STALE_TEMP_S) -> list[DiskBlock]:
    """Every block file in `folder` (strangers are skipped). A temporary file older than `stale_after_s` is what a
    process killed mid-write left: it is removed (else it would stay forever, outside the disk cap); a younger one
    may be a write under way, and is skipped."""
    found, now = [], time.time()  # file times are wall-clock
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    for entry in entries:
        match = _NAME.match(entry.name)
        if not match:
            if _TEMP.match(entry.name):
                _remove_if_stale(entry, now - stale_after_s)
            continue
        try:
            stat = entry.stat()
        except OSError:  # removed by another process meanwhile
            continue
        found.append(DiskBlock(bytes.fromhex(match.group(2)), int(match.group(1)), stat.st_size, stat.st_mtime,
                               Path(entry.path)))
    return found


def _remove_if_stale(entry: os.DirEntry, before: float) -> None:
    with contextlib.suppress(OSError):  # gone already: its write ended, or another process cleaned it
        if entry.stat().st_mtime < before:
            Path(entry.path).unlink()


def remove(path: Path) -> None:
    with contextlib.suppress(OSError):  # gone already, or open in another process on Windows
        path.unlink()


def model_key(source: str, dtype: torch.dtype, model: torch.nn.Module, block_size: int) -> str:
    """A folder name that separates models: the source, dtype, block size, the config, the weight files'
    sizes and mtimes (a folder or a .gguf) and the first values of the first weight (any source,
    synthetic ones included: their weights follow their seed)."""
    digest = hashlib.blake2b(digest_size=10)
    config = getattr(model, "config", None)
    parts = [source, str(dtype), str(block_size), config.to_json_string() if config is not None else ""]
    path = Path(source)
    files = [path] if path.is_file() else sorted(path.glob("*")) if path.is_dir() else []
    parts += [f"{f.name}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in files if f.is_file()]
    for part in parts:
        digest.update(part.encode("utf-8", "surrogatepass") + b"\0")
    first = next(iter(model.parameters()), None)
    if first is not None and not first.is_meta:
        digest.update(first.detach().flatten()[:256].float().cpu().numpy().tobytes())
    slug = re.sub(r"[^A-Za-z0-9]+", "-", Path(source).name or source).strip("-")[:40] or "model"
    return f"{slug}-{digest.hexdigest()}"
