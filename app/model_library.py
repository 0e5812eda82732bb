"""The models on this machine: the bundled model, its converted cache, folders and .gguf files in Beamwise's
models folder, and folders the user added. Each entry says what it is (from its config alone) and whether
Beamwise downloaded it: only those can be removed by Beamwise."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from app.models_folder import (
    ADDED,
    BUNDLED_NAME,
    MARKER,
    AddedListDamaged,
    DataFolderNotAFolder,
    added_folders,
    added_list_path,
    ambiguous,
    close_name,
    data_folder,
    downloads,
    home_of,
    listed_names,
    models_dir,
    named,
    runnable,
    sources_named,
    write_added,
)
from app.options import UsageError
from app.pull_lock import LOCK, being_pulled, holder
from app.pull_marker import PullAsked, read_marker_file, unfinished_pull
from app.shell_words import quoted
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
    resume: PullAsked | None = None  # the pull that finishes an unfinished download no pull is at now


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
    Beamwise's to delete). What is no model (its config or header unreadable) claims no role."""
    from app.model_facts import facts_of

    home = home_of(path)
    marker = home / MARKER if home.is_dir() else home.parent / f"{home.name}{MARKER}"
    downloaded = where == "models folder" and marker.is_file()
    try:
        facts, problem = facts_of(str(path)), _files_problem(path)
    except Exception as error:  # a folder that is no model says so in the list instead of breaking it
        facts, problem = None, _said(error)
    resume = None
    if downloaded and not _download_complete(marker):  # its own reason, before what its missing files break
        if (pulling := being_pulled(home)) is not None:
            problem = f"it is {pulling}"
        else:
            resume = unfinished_pull(path)
            again = f" (`{resume.command()}`)" if resume else ""
            problem = f"the download did not finish; pull it again to resume it{again}, or remove it."
    role = role_of(path) if facts is not None else "-"
    return ModelEntry(name or path.name, str(path), where, size_on_disk(home), downloaded, role, facts, problem,
                      resume)


def _said(error: Exception) -> str:
    return error.user_message() if isinstance(error, BeamwiseError) else str(error)


def _files_problem(path: Path) -> str:
    """Why a folder cannot load, by the checks `add_folder` makes (no tokenizer files; its weights: none there, a
    shard missing, a safetensors file cut short), or "". File names and headers only: a list stays cheap."""
    from app.model_weights import check_weights
    from engine.models import check_tokenizer_files

    try:
        if path.is_dir():
            check_tokenizer_files(path)
            check_weights(path)
    except (BeamwiseError, OSError) as error:
        return _said(error)
    return ""


def entry_at(path: Path) -> ModelEntry:
    """`models info PATH`: the listed entry of a model in the models folder or on the list of added folders, by the
    model's path or the folder holding it (its name, where and whether Beamwise downloaded it, as `models info
    NAME` says them); any other path as itself, a folder of one .gguf as that .gguf."""
    wanted = path.resolve()
    for name, model, where in _rows():
        if wanted in (model.resolve(), home_of(model).resolve()):
            return entry_for(model, where, name)
    return entry_for(runnable(path), "path")


def _download_complete(marker: Path) -> bool:
    """Whether the marker says its download finished (an unreadable marker does not)."""
    record = read_marker_file(marker)
    return record is not None and record.get("complete", True) is not False


ADD_HINT = "Give the path of an existing model folder (with config.json, weights and tokenizer) or .gguf file."


def add_folder(path: Path) -> Path:
    """Remember a model folder or .gguf file the user keeps elsewhere (Beamwise never deletes it); returns it
    resolved. Refused when it is no model Beamwise can read, when it is in the models folder (listed already), and
    when the list cannot be read (never rewritten)."""
    from app.model_facts import facts_of
    from app.model_weights import check_weights
    from engine.models import check_tokenizer_files, checked_folder, checked_gguf

    _refuse_listed(path)
    try:
        checked = checked_gguf(str(path)) if path.suffix.lower() == ".gguf" else checked_folder(str(path))
    except ModelLoadError as error:
        if error.hint == ModelLoadError.hint:  # the advice for --model (a listed name, synthetic:NAME) fits no add
            error.hint = ADD_HINT
        raise
    try:
        facts_of(str(checked))  # a config Beamwise cannot read: said now, not in every later list
    except BeamwiseError:
        raise
    except Exception as error:  # a config of the right form with values of the wrong kind
        raise ModelLoadError(f"{checked}'s config.json cannot be read as a model's ({type(error).__name__}: "
                             f"{error}).") from error
    if checked.is_dir():  # a config alone, or weights cut short, were listed as a model and failed only at `run`
        check_tokenizer_files(checked)
        check_weights(checked)
    resolved = checked.resolve()
    folders = added_folders()
    if _added_as(resolved, folders) is None:  # listed already: the list stays as it is, in its order
        write_added([*folders, resolved])
    return resolved


def listed_already(path: Path) -> str | None:
    """What `models add` says of a path the list of added folders holds already (itself, or a link to it), changing
    nothing; None for any other path, and for one that is not there (`add_folder` says so). Added again, it was
    said as new and moved to the end of the list. AddedListDamaged where the list cannot be read."""
    try:
        listed = _added_as(path.resolve(), added_folders()) if path.exists() else None
    except OSError:  # a name too long for the file system: `add_folder` says it
        return None
    if listed is None:
        return None
    use = listed.name if named(listed.name) == [listed] else quoted(str(listed))  # a name two models share is refused
    return f"{listed} is listed already (as {listed.name}); use it with --model {use}."


def _added_as(resolved: Path, folders: list[Path]) -> Path | None:
    """The entry of `folders` that is the resolved path `resolved` (the entries resolved too: a list written by
    hand, or a link that now points elsewhere)."""
    return next((folder for folder in folders if folder.resolve() == resolved), None)


def _refuse_listed(path: Path) -> None:
    """What lies in the models folder is listed by it (a folder, or the .gguf of a `pull --file` folder): added as
    well, it was listed twice. The listed name is offered only where it names this very model: the name of a
    folder of several .gguf files names no model that loads, so one of its files is given by its path."""
    inside = [(home, p) for home in _places(models_dir()) for p in _places(path) if home in p.parents]
    if not inside:
        return
    home, resolved = inside[0]
    top = home / resolved.relative_to(home).parts[0]
    model = next((model for name, model in downloads() if name == top.name), None)
    if (model is not None and resolved in (model.resolve(), home_of(model).resolve())
            and (model.is_file() or (model / "config.json").is_file())):
        raise UsageError(f"{resolved} is in Beamwise's models folder, so it is listed already (as {top.name}); use "
                         f"it with --model {top.name}.")
    ggufs = sorted(resolved.glob("*.gguf")) if resolved.is_dir() else []
    use = (f"one of its .gguf files by its path, e.g. --model {ggufs[0]}" if ggufs else
           f"it by its path: --model {resolved}")
    raise UsageError(f"{resolved} is in Beamwise's models folder, which Beamwise lists by itself, so it is not "
                     f"added; use {use}.")


def forget_folder(path: Path) -> None:
    """Take an added folder off the list; its files are not touched."""
    write_added([p for p in added_folders() if p != path])


def _places(path: Path) -> tuple[Path, Path]:
    """Where a path points (links followed) and where it is (as given, made absolute)."""
    return path.resolve(), Path(os.path.abspath(path))


def list_models() -> list[ModelEntry]:
    """Everything Beamwise can run here, bundled first; a damaged list of added folders is an entry that says so."""
    entries = [_bundled_entry()] + [entry_for(model, "models folder", name) for name, model in downloads()]
    try:
        entries += [entry_for(p, "added") if p.exists() else _gone(p) for p in added_folders()]
    except AddedListDamaged as error:
        entries.append(_damaged(error))
    return entries


def _rows() -> list[tuple[str, Path, str]]:
    """(name, path, where) of every listed model but the bundled one, read from names alone (no model's files):
    what a lookup of one name searches before it reads that one model's facts."""
    rows = [(name, model, "models folder") for name, model in downloads()]
    try:
        rows += [(p.name, p, "added") for p in added_folders()]
    except AddedListDamaged:  # `models list` says so in a row of its own
        pass
    return rows


def _damaged(error: AddedListDamaged) -> ModelEntry:
    if isinstance(error, DataFolderNotAFolder):
        return ModelEntry(data_folder().name, str(data_folder()), "data folder", 0, False, "-", None,
                          error.user_message())
    return ModelEntry(ADDED, str(added_list_path()), "added", 0, False, "-", None, error.user_message())


def _gone(path: Path) -> ModelEntry:
    """An added folder that is no longer there: listed with the problem (it was left out, and then no name could
    take it off the list)."""
    return ModelEntry(path.name, str(path), "added", 0, False, "-", None,
                      f"the folder {path} is not there any more (moved or deleted): add it again where it is now, or "
                      "take it off the list (`beamwise models remove NAME`, the window's Remove from list).")


def _bundled_entry() -> ModelEntry:
    from app.model_facts import facts_of
    from engine.bundled import bundled_cache_folder, bundled_gguf_path, cache_is_valid

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
    (the first of them could be another model than the one that ran). Only the models of that name are read."""
    from engine.synthetic import SYNTHETIC_MODELS

    if name in (BUNDLED_NAME, f"{BUNDLED_NAME} (bundled)"):  # the engine records the latter (engine/models.py)
        return "bundled"
    bare = name.removeprefix("synthetic:").removesuffix(" (random weights)")
    if bare in SYNTHETIC_MODELS:
        return f"synthetic:{bare}"
    rows = [row for row in _rows()  # a GGUF's name is its file's, as the engine records it
            if name in (row[0], Path(row[0]).stem, row[1].stem if row[1].suffix.lower() == ".gguf" else None)]
    sources = {str(path) for listed, path, where in rows if path.exists()
               and not entry_for(path, where, listed).problem}
    return sources.pop() if len(sources) == 1 else None


def find(name: str) -> ModelEntry:
    """The entry named `name` (a name `models list` shows, read as --model reads it, or a listed model's path);
    UsageError listing the names otherwise, and listing the paths when several models have that name (taking the
    first could remove the wrong one); AddedListDamaged for a name found nowhere while the list of added folders
    cannot be read (the name may be on it: "no model named" and a guess at another one misled). Only the model
    found is read."""
    if name.startswith("synthetic:"):
        return synthetic_entry(name)
    rows = {str(path): (listed, path, where) for listed, path, where in _rows()}
    found = [name] if name in rows or name == "bundled" else sources_named(name)
    if len(found) > 1:
        raise UsageError(ambiguous(name, found))
    if not found:
        added_folders()  # a damaged list raises, in the words `models add` and `models list` use
        close = close_name(name)
        guess = f"did you mean {close}? " if close else ""
        raise UsageError(f"no model named {name!r} here; {guess}`beamwise models list` shows them "
                         f"({', '.join(listed_names())}).")
    if found[0] == "bundled":
        return _bundled_entry()
    listed, path, where = rows[found[0]]
    return entry_for(path, where, listed) if path.exists() or where != "added" else _gone(path)


def namesakes(path: Path) -> list[str]:
    """The sources of the other models here named as `path` is (so its name alone would be refused)."""
    return [source for source in sources_named(path.name) if source != str(path)]


def remove(entry: ModelEntry) -> None:
    """Delete a model Beamwise downloaded into its models folder (what `removable` allows). An added folder is
    taken off the list with `forget_folder`, never deleted."""
    path = removable(entry)
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()
        (path.parent / f"{path.name}{MARKER}").unlink(missing_ok=True)


def removable(entry: ModelEntry) -> Path:
    """What `remove` deletes for `entry`; UsageError for anything but a model Beamwise downloaded into its models
    folder (bundled, added, or copied in by hand), and for one a pull (this process's or another's) is
    downloading. The command line asks this before its question, and `remove` again."""
    path = home_of(Path(entry.source))
    inside = path.resolve().parent == models_dir().resolve()
    if not (entry.downloaded and inside):
        raise UsageError(f"{entry.source} was not downloaded by Beamwise into its models folder, so Beamwise will "
                         "not delete it.")
    pulling = holder(path) if path.is_dir() else None
    if pulling is not None:  # deleted under it, the download failed blaming the disk
        raise UsageError(f"{entry.name} is being downloaded ({pulling}, which holds {path / LOCK}); stop that "
                         "download first (Cancel in the window's pull box, Ctrl+C where `beamwise models pull` "
                         "runs), then remove it.")
    return path


def describe(entry: ModelEntry) -> list[tuple[str, str]]:
    """(label, value) rows of `models info` and the window's Models page."""
    import app.formatting as fmt

    f = entry.facts
    rows = [("name", entry.name), ("use as", entry.source), ("where", entry.where), ("role", entry.role),
            ("size on disk", fmt.size(entry.size_bytes)), ("downloaded by Beamwise", "yes" if entry.downloaded
                                                            else "no")]
    if f is not None:
        rows += [("architecture", f.architecture),
                 ("parameters", parameters_text(f)),
                 ("dtype", _dtype(Path(entry.source)) if entry.source != "bundled" else "Q4_1 GGUF, run as float32"),
                 ("context length", "-" if f.context_length is None else f"{f.context_length:,} tokens"),
                 ("KV per token", f"{fmt.size(f.kv_token_bytes)} (float32; half in bfloat16)")]
    if entry.problem:
        rows.append(("problem", entry.problem))
    return rows


def parameters_text(facts: ModelFacts | None) -> str:
    """A model's parameters in millions, as `models list`, `models info` and the window show them: '0.1 M'."""
    if facts is None or facts.parameters is None:
        return "-"
    return f"{facts.parameters / 1e6:,.1f} M"


def _dtype(path: Path) -> str:
    from app.model_facts import config_json

    if path.suffix.lower() == ".gguf":
        return "GGUF (dequantised on load)"
    if str(path).startswith("synthetic:"):
        return "as --dtype asks (float32 by default)"
    return str(config_json(path).get("torch_dtype") or config_json(path).get("dtype") or "-")


__all__ = ["ADDED", "MARKER", "AddedListDamaged", "ModelEntry", "add_folder", "added_folders", "added_list_path",
           "describe", "entry_at", "entry_for", "find", "forget_folder", "home_of", "list_models", "listed_already",
           "models_dir", "namesakes", "parameters_text", "removable", "remove", "role_of", "runnable", "size_on_disk",
           "synthetic_entry"]
