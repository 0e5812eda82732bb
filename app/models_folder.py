"""Where Beamwise's data lives (the data folder, its models folder, the list of folders the user added) and a
model's name from `models list` as a path: no torch, so the options every command parses can read them."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import platformdirs

from app.file_replace import replace_text
from engine.errors import BeamwiseError

MARKER = ".beamwise-download.json"  # written into every folder Beamwise downloads; remove needs it
ADDED = "added-models.json"


def data_folder() -> Path:
    """BEAMWISE_DATA_DIR when set (tests), else the user's data folder: the session database, the journals'
    fallback folder, the models folder and the list of added folders all live here."""
    return Path(os.environ.get("BEAMWISE_DATA_DIR") or platformdirs.user_data_dir("beamwise", appauthor=False))


def models_dir() -> Path:
    """The data folder's models/: what `models pull` downloads."""
    return data_folder() / "models"


class AddedListDamaged(BeamwiseError):
    """The file listing the folders the user added cannot be read as Beamwise writes it."""


def added_list_path() -> Path:
    return data_folder() / ADDED


def added_folders() -> list[Path]:
    """The folders the user added, as `add_folder` wrote them; AddedListDamaged when the file is not that."""
    path = added_list_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as error:
        raise AddedListDamaged(f"the list of added model folders {path} cannot be read ({error}).",
                               hint=ADDED_HINT) from error
    if not isinstance(data, list) or not all(isinstance(p, str) and p and Path(p).is_absolute() for p in data):
        raise AddedListDamaged(f"the list of added model folders {path} is not a list of folders.", hint=ADDED_HINT)
    return [Path(p) for p in data]


ADDED_HINT = ("It only names folders (no model is in it): fix it, or delete it and add the folders again with "
              "`beamwise models add PATH`.")


def write_added(folders: list[Path]) -> None:
    """The list of added folders replaced whole (a crash leaves the old list or the new one, never half of one);
    a data folder that takes no file is a BeamwiseError naming it, the old list kept."""
    target = added_list_path()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        replace_text(target, json.dumps([str(p) for p in folders], indent=1))
    except OSError as error:
        raise BeamwiseError(f"cannot save the list of added model folders {target} ({error.strerror or error}); "
                            "it was not changed.",
                            hint=f"Make {target.parent} writable, or set BEAMWISE_DATA_DIR to a folder you can "
                                 "write to.") from error


def runnable(path: Path) -> Path:
    """What the loader takes for `path`: a folder `models pull --file` filled holds one .gguf and no config.json, and
    it is that .gguf which runs; anything else is itself."""
    try:
        if not path.is_dir() or (path / "config.json").is_file():
            return path
        ggufs = [p for p in path.iterdir() if p.suffix.lower() == ".gguf" and p.is_file()]
    except OSError:
        return path
    return ggufs[0] if len(ggufs) == 1 else path


def named(name: str) -> list[Path]:
    """Every model here that `name` names: the models folder's entry of that name (as `runnable` gives it) and each
    added folder of that name. More than one is an ambiguous name, which callers refuse rather than take the first
    (`models remove` could otherwise delete a download the user meant to leave)."""
    own = models_dir() / name
    found = [runnable(own)] if own.exists() else []
    try:
        found += [p for p in added_folders() if p.name == name and p not in found]
    except AddedListDamaged:  # the list's own row says so; the models folder still answers
        pass
    return found


def ambiguous(name: str, paths: list[str]) -> str:
    """The refusal of a name that more than one model here has, with the paths that name each of them."""
    return (f"more than one model here is named {name!r} ({', '.join(paths)}); give the path of the one you mean "
            "instead of the name.")


def source_of(text: str) -> str:
    """What --model, --verifier-model and --prm take: a name `models list` shows (a downloaded or added model)
    becomes its path; anything else (bundled, synthetic:NAME, FAMILY:FOLDER, a path) is kept as given. A name two
    models share is refused (argparse.ArgumentTypeError), naming their paths."""
    if not text or ":" in text or "/" in text or "\\" in text or text in ("bundled", "default"):
        return text
    try:
        if Path(text).exists():
            return text
        found = named(text)
    except OSError:  # no such name: the loader says so for the text as given
        return text
    if len(found) > 1:
        raise argparse.ArgumentTypeError(ambiguous(text, [str(p) for p in found]))
    return str(found[0]) if found else text
