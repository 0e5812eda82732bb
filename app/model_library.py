"""The models on this machine: the bundled model, its converted cache, folders and .gguf files in Beamwise's
models folder, and folders the user added. Each entry says what it is (from its config alone) and whether
Beamwise downloaded it: only those can be removed by Beamwise."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from app.model_facts import ModelFacts, config_json, facts_of

MARKER = ".beamwise-download.json"  # written into every folder Beamwise downloads; remove needs it
ADDED = "added-models.json"


def models_dir() -> Path:
    """BEAMWISE_DATA_DIR/models when set (tests), else the user data folder's models/."""
    base = os.environ.get("BEAMWISE_DATA_DIR") or platformdirs.user_data_dir("beamwise", appauthor=False)
    return Path(base) / "models"


@dataclass(frozen=True)
class ModelEntry:
    """One model on disk; `facts` is None when its config cannot be read (`problem` says why)."""

    name: str
    source: str  # what --model / --verifier-model take
    where: str  # bundled, cache, models folder, added
    size_bytes: int
    downloaded: bool
    role: str  # generator, or "PRM (family)"
    facts: ModelFacts | None = None
    problem: str = ""


def size_on_disk(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def role_of(path: Path) -> str:
    """generator, or 'PRM (family)' when engine.verifiers.families recognises the folder."""
    if path.suffix.lower() == ".gguf" or not (path / "config.json").is_file():
        return "generator"
    from engine.errors import BeamwiseError
    from engine.verifiers.families import detect_family

    try:
        return f"PRM ({detect_family(path)})"
    except BeamwiseError:
        return "generator"


def entry_for(path: Path, where: str) -> ModelEntry:
    downloaded = (path / MARKER).is_file() if path.is_dir() else (path.parent / f"{path.name}{MARKER}").is_file()
    try:
        facts, problem = facts_of(str(path)), ""
    except Exception as error:  # a folder that is no model says so in the list instead of breaking it
        facts, problem = None, (error.user_message() if hasattr(error, "user_message") else str(error))
    return ModelEntry(path.name, str(path), where, size_on_disk(path), downloaded, role_of(path), facts, problem)


def added_folders() -> list[Path]:
    try:
        data = json.loads((models_dir().parent / ADDED).read_text(encoding="utf-8"))
        return [Path(p) for p in data]
    except (OSError, ValueError):
        return []


def add_folder(path: Path) -> None:
    """Remember a folder the user keeps elsewhere (Beamwise never removes it)."""
    folders = [p for p in added_folders() if p != path.resolve()] + [path.resolve()]
    target = models_dir().parent / ADDED
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps([str(p) for p in folders], indent=1), encoding="utf-8")


def list_models() -> list[ModelEntry]:
    """Everything Beamwise can run here, bundled first."""
    entries = [_bundled_entry()]
    folder = models_dir()
    if folder.is_dir():
        for path in sorted(folder.iterdir()):
            if (path.is_dir() and (path / "config.json").is_file()) or path.suffix.lower() == ".gguf":
                entries.append(entry_for(path, "models folder"))
    entries += [entry_for(p, "added") for p in added_folders() if p.exists()]
    return entries


def _bundled_entry() -> ModelEntry:
    from engine.bundled import BUNDLED_NAME, bundled_cache_folder, bundled_gguf_path, cache_is_valid

    cache = bundled_cache_folder()
    try:
        size, problem = size_on_disk(bundled_gguf_path()), ""
    except Exception as error:
        size, problem = 0, error.user_message() if hasattr(error, "user_message") else str(error)
    if cache_is_valid(cache):
        size += size_on_disk(cache)
    where = "bundled (converted cache: " + (str(cache) if cache_is_valid(cache) else "not yet made") + ")"
    return ModelEntry(BUNDLED_NAME, "bundled", where, size, False, "generator", facts_of("bundled"), problem)


def find(name: str) -> ModelEntry:
    """The entry named `name` (its folder name or its source); ValueError listing the names otherwise."""
    entries = list_models()
    for entry in entries:
        if name in (entry.name, entry.source):
            return entry
    known = ", ".join(e.name for e in entries)
    raise ValueError(f"no model named {name!r} here; `beamwise models list` shows them ({known}).")


def remove(entry: ModelEntry) -> None:
    """Delete a model Beamwise downloaded; refuses anything else (bundled, added, or copied in by hand)."""
    if not entry.downloaded:
        raise ValueError(f"{entry.source} was not downloaded by Beamwise, so Beamwise will not delete it; "
                         "remove it yourself if you are sure.")
    path = Path(entry.source)
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()
        (path.parent / f"{path.name}{MARKER}").unlink(missing_ok=True)


def describe(entry: ModelEntry) -> list[tuple[str, str]]:
    """(label, value) rows of `models info` and the window's Models page."""
    import app.formatting as fmt

    f = entry.facts
    rows = [("name", entry.name), ("use as", entry.source), ("where", entry.where), ("role", entry.role),
            ("size on disk", fmt.size(entry.size_bytes)), ("downloaded by Beamwise", "yes" if entry.downloaded
                                                            else "no")]
    if f is not None:
        rows += [("architecture", f.architecture),
                 ("parameters", "-" if f.parameters is None else f"{f.parameters / 1e6:,.1f} M"),
                 ("dtype", _dtype(Path(entry.source)) if entry.source != "bundled" else "Q4_1 GGUF, run as float32"),
                 ("context length", "-" if f.context_length is None else f"{f.context_length:,} tokens"),
                 ("KV per token", f"{fmt.size(f.kv_token_bytes)} (float32; half in bfloat16)")]
    if entry.problem:
        rows.append(("problem", entry.problem))
    return rows


def _dtype(path: Path) -> str:
    if path.suffix.lower() == ".gguf":
        return "GGUF (dequantised on load)"
    return str(config_json(path).get("torch_dtype") or config_json(path).get("dtype") or "-")
