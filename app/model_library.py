"""The models on this machine: the bundled model, its converted cache, folders and .gguf files in Beamwise's
models folder, and folders the user added. Each entry says what it is (from its config alone) and whether
Beamwise downloaded it: only those can be removed by Beamwise."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from app.models_folder import (
    ADDED,
    MARKER,
    AddedListDamaged,
    added_folders,
    added_list_path,
    ambiguous,
    models_dir,
    named,
    runnable,
    write_added,
)
from app.options import UsageError
from engine.errors import BeamwiseError, ModelLoadError

if TYPE_CHECKING:  # app.model_facts imports torch: the window imports this module before torch is in
    from app.model_facts import ModelFacts


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
    """Bytes of the file, or of every file under the folder that can be read."""
    if path.is_file():
        return path.stat().st_size
    total = 0
    for file in path.rglob("*"):
        try:
            total += file.stat().st_size if file.is_file() else 0
        except OSError:  # unreadable, or gone while counting
            continue
    return total


def role_of(path: Path) -> str:
    """generator, or 'PRM (family)' when engine.prm_folders recognises the folder."""
    if path.suffix.lower() == ".gguf" or not (path / "config.json").is_file():
        return "generator"
    from engine.prm_folders import detect_family

    try:
        return f"PRM ({detect_family(path)})"
    except BeamwiseError:
        return "generator"


def entry_for(path: Path, where: str, name: str | None = None) -> ModelEntry:
    """`path` as a list entry, named `name` (default: its own name). Only a model in the models folder with
    Beamwise's marker counts as downloaded (the marker inside a copy the user added elsewhere does not make it
    Beamwise's to delete)."""
    from app.model_facts import facts_of

    home = home_of(path)
    marker = home / MARKER if home.is_dir() else home.parent / f"{home.name}{MARKER}"
    downloaded = where == "models folder" and marker.is_file()
    try:
        facts, problem = facts_of(str(path)), ""
    except Exception as error:  # a folder that is no model says so in the list instead of breaking it
        facts, problem = None, (error.user_message() if hasattr(error, "user_message") else str(error))
    if downloaded and not _download_complete(marker):  # its own reason, before what its missing files break
        problem = "the download did not finish; pull it again to resume it, or remove it."
    return ModelEntry(name or path.name, str(path), where, size_on_disk(home), downloaded, role_of(path), facts,
                      problem)


def home_of(path: Path) -> Path:
    """What in the models folder holds `path`: itself, or for the .gguf a `pull --file` put in a folder of its own,
    that folder (its marker, its size on disk, what remove deletes)."""
    folder = path.parent
    try:
        inside = path.is_file() and folder.parent.resolve() == models_dir().resolve()
    except OSError:
        inside = False
    return folder if inside else path


def _download_complete(marker: Path) -> bool:
    try:
        return json.loads(marker.read_text(encoding="utf-8")).get("complete", True) is not False
    except (OSError, ValueError, AttributeError):
        return False


WEIGHT_PATTERNS = ("*.safetensors", "*.bin")  # a transformers folder's weights, sharded or not


def add_folder(path: Path) -> Path:
    """Remember a model folder or .gguf file the user keeps elsewhere (Beamwise never deletes it); returns it
    resolved. Refused when it is no model Beamwise can read, and when the list cannot be read (never rewritten)."""
    from app.model_facts import facts_of
    from engine.models import check_tokenizer_files, checked_folder, checked_gguf

    checked = checked_gguf(str(path)) if path.suffix.lower() == ".gguf" else checked_folder(str(path))
    try:
        facts_of(str(checked))  # a config Beamwise cannot read: said now, not in every later list
    except BeamwiseError:
        raise
    except Exception as error:  # a config of the right form with values of the wrong kind
        raise ModelLoadError(f"{checked}'s config.json cannot be read as a model's ({type(error).__name__}: "
                             f"{error}).") from error
    if checked.is_dir():  # a config alone was listed as a model and failed only at `run`
        check_tokenizer_files(checked)
        if not any(next(checked.glob(pattern), None) for pattern in WEIGHT_PATTERNS):
            raise ModelLoadError(f"model folder {checked} has no weight files (*.safetensors, *.bin).",
                                 hint="The download may be incomplete: copy the weights from where the model came "
                                      "from, or pick another folder.")
    resolved = checked.resolve()
    if resolved.parent == models_dir().resolve():
        raise UsageError(f"{resolved} is in Beamwise's models folder, so it is listed already.")
    write_added([p for p in added_folders() if p != resolved] + [resolved])
    return resolved


def forget_folder(path: Path) -> None:
    """Take an added folder off the list; its files are not touched."""
    write_added([p for p in added_folders() if p != path])


def list_models() -> list[ModelEntry]:
    """Everything Beamwise can run here, bundled first; a damaged list of added folders is an entry that says so."""
    entries = [_bundled_entry()]
    folder = models_dir()
    if folder.is_dir():
        for path in sorted(folder.iterdir()):
            model = runnable(path)  # a folder of one .gguf (`pull --file`) is that .gguf, listed by the folder's name
            if ((path.is_dir() and any((path / name).is_file() for name in ("config.json", MARKER)))
                    or path.suffix.lower() == ".gguf" or model != path):  # a pull that failed early is listed too
                entries.append(entry_for(model, "models folder", path.name))
    try:
        entries += [entry_for(p, "added") if p.exists() else _gone(p) for p in added_folders()]
    except AddedListDamaged as error:
        entries.append(ModelEntry(ADDED, str(added_list_path()), "added", 0, False, "-", None, error.user_message()))
    return entries


def _gone(path: Path) -> ModelEntry:
    """An added folder that is no longer there: listed with the problem (it was left out, and then no name could
    take it off the list)."""
    return ModelEntry(path.name, str(path), "added", 0, False, "-", None,
                      f"the folder {path} is not there any more (moved or deleted): add it again where it is now, or "
                      "take it off the list (`beamwise models remove NAME`, the window's Remove from list).")


def _bundled_entry() -> ModelEntry:
    from app.model_facts import facts_of
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


def synthetic_entry(source: str) -> ModelEntry:
    """`synthetic:NAME` as an entry: a config built in code with seeded random weights, nothing on disk. An unknown
    NAME is refused in the words `--model` uses."""
    from app.model_facts import facts_of
    from engine.prm_folders import SYNTHETIC_PRM_FAMILIES

    name = source.removeprefix("synthetic:")
    family = SYNTHETIC_PRM_FAMILIES.get(name)
    role = "generator" if family is None else f"PRM ({family})"
    return ModelEntry(source, source, "built in code (seeded random weights, nothing on disk)", 0, False, role,
                      facts_of(source))


def source_of_name(name: str) -> str | None:
    """The `--model` source of the model name a session recorded (a run records its model's name, not its path):
    the bundled model, a synthetic one (`synthetic:tiny-llama (random weights)`), or the listed model of that
    name (a folder's name, a GGUF file's name without `.gguf`); None when no model here has it, or several do
    (the first of them could be another model than the one that ran)."""
    from engine.bundled import BUNDLED_NAME
    from engine.synthetic import SYNTHETIC_MODELS

    if name == BUNDLED_NAME:
        return "bundled"
    bare = name.removeprefix("synthetic:").removesuffix(" (random weights)")
    if bare in SYNTHETIC_MODELS:
        return f"synthetic:{bare}"
    sources = {entry.source for entry in list_models()[1:]  # a GGUF's name is its file's, as the engine records it
               if name in (entry.name, Path(entry.name).stem, _gguf_stem(entry)) and not entry.problem}
    return sources.pop() if len(sources) == 1 else None


def _gguf_stem(entry: ModelEntry) -> str | None:
    return Path(entry.source).stem if entry.source.lower().endswith(".gguf") else None


def find(name: str) -> ModelEntry:
    """The entry named `name` (its folder name or its source); UsageError listing the names otherwise, and listing
    the paths when several models have that name (taking the first could remove the wrong one)."""
    if name.startswith("synthetic:"):
        return synthetic_entry(name)
    entries = list_models()
    exact = [e for e in entries if e.source == name]  # a path names one model
    same = exact or [e for e in entries if e.name == name]
    if len(same) > 1:
        raise UsageError(ambiguous(name, [e.source for e in same]))
    if same:
        return same[0]
    known = ", ".join(e.name for e in entries)
    raise UsageError(f"no model named {name!r} here; `beamwise models list` shows them ({known}).")


def namesakes(path: Path) -> list[str]:
    """The sources of the other models here named as `path` is (so its name alone would be refused)."""
    from engine.bundled import BUNDLED_NAME

    others = [str(p) for p in named(path.name) if p != path]
    return (["bundled"] if path.name == BUNDLED_NAME else []) + others


def remove(entry: ModelEntry) -> None:
    """Delete a model Beamwise downloaded into its models folder; refuses anything else (bundled, added, or
    copied in by hand). An added folder is taken off the list with `forget_folder`, never deleted."""
    path = home_of(Path(entry.source))
    inside = path.resolve().parent == models_dir().resolve()
    if not (entry.downloaded and inside):
        raise UsageError(f"{entry.source} was not downloaded by Beamwise into its models folder, so Beamwise will "
                         "not delete it.")
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
    from app.model_facts import config_json

    if path.suffix.lower() == ".gguf":
        return "GGUF (dequantised on load)"
    if str(path).startswith("synthetic:"):
        return "as --dtype asks (float32 by default)"
    return str(config_json(path).get("torch_dtype") or config_json(path).get("dtype") or "-")


__all__ = ["ADDED", "MARKER", "AddedListDamaged", "ModelEntry", "add_folder", "added_folders", "added_list_path",
           "describe", "entry_for", "find", "forget_folder", "home_of", "list_models", "models_dir", "namesakes",
           "remove", "role_of", "runnable", "size_on_disk", "synthetic_entry"]
