"""Where Beamwise's data lives (the data folder, its models folder, the list of folders the user added) and a
model's name from `models list` as a path: no torch, so the options every command parses can read them."""

from __future__ import annotations

import argparse
import difflib
import json
import os
from pathlib import Path

import platformdirs

from app.file_replace import replace_text
from app.pull_lock import being_pulled
from engine.errors import BeamwiseError

MARKER = ".beamwise-download.json"  # written into every folder Beamwise downloads; remove needs it
ADDED = "added-models.json"
BUNDLED_NAME = "SmolLM2-135M-Instruct"  # engine.bundled's (which imports torch): what `models list` calls it
KEYWORDS = ("bundled", "default")  # what --model takes for the bundled model besides its name (engine/models.py)


def data_folder() -> Path:
    """BEAMWISE_DATA_DIR when set (tests), else the user's data folder: the session database, the journals'
    fallback folder, the models folder and the list of added folders all live here."""
    return Path(os.environ.get("BEAMWISE_DATA_DIR") or platformdirs.user_data_dir("beamwise", appauthor=False))


def models_dir() -> Path:
    """The data folder's models/: what `models pull` downloads."""
    return data_folder() / "models"


def home_of(path: Path) -> Path:
    """What in the models folder holds `path`: itself, or for the .gguf a `pull --file` put in a folder of its own,
    that folder (its marker, its size on disk, what remove deletes)."""
    folder = path.parent
    try:
        inside = path.is_file() and folder.parent.resolve() == models_dir().resolve()
    except OSError:
        inside = False
    return folder if inside else path


class AddedListDamaged(BeamwiseError):
    """The file listing the folders the user added cannot be read as Beamwise writes it."""


def added_list_path() -> Path:
    return data_folder() / ADDED


def added_folders() -> list[Path]:
    """The folders the user added, as `add_folder` wrote them; AddedListDamaged when the file is not that, and
    DataFolderNotAFolder when the data folder it lives in is a file."""
    path = added_list_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as error:
        refuse_file_as_data_folder()
        raise AddedListDamaged(f"the list of added model folders {path} cannot be read ({error}).",
                               hint=ADDED_HINT) from error
    if not isinstance(data, list) or not all(isinstance(p, str) and p and Path(p).is_absolute() for p in data):
        raise AddedListDamaged(f"the list of added model folders {path} is not a list of folders.", hint=ADDED_HINT)
    return [Path(p) for p in data]


class DataFolderNotAFolder(AddedListDamaged):
    """The data folder, or a folder above it, is a file: nothing of Beamwise's can be kept in it."""


def refuse_file_as_data_folder() -> None:
    """DataFolderNotAFolder when the data folder or a folder above it is a file (reading the list of added folders
    said "Not a directory" about a list that was never there)."""
    folder = data_folder()
    file = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if file is None or file.is_dir():
        return
    where = "" if file == folder else f" ({file} is a file)"
    told = os.environ.get("BEAMWISE_DATA_DIR")
    hint = (f"Set BEAMWISE_DATA_DIR to a folder (it is {told} now), or move the file {file} away." if told else
            f"Move the file {file} away: Beamwise keeps its data in the folder {folder}.")
    raise DataFolderNotAFolder(f"the data folder {folder} is not a folder{where}.", hint=hint)


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


def downloads() -> list[tuple[str, Path]]:
    """(name, what the loader takes) of each model in the models folder, as `models list` shows them, read from
    names alone: a folder with config.json or a download marker (a pull that failed early is listed too), a .gguf,
    or a folder of one .gguf (`pull --file`), which is that .gguf by the folder's name."""
    folder = models_dir()
    try:
        children = sorted(folder.iterdir()) if folder.is_dir() else []
    except OSError:
        return []
    found = []
    for path in children:
        model = runnable(path)
        if ((path.is_dir() and any((path / name).is_file() for name in ("config.json", MARKER)))
                or path.suffix.lower() == ".gguf" or model != path):
            found.append((path.name, model))
    return found


def named(name: str) -> list[Path]:
    """Every model `models list` shows under `name` (the bundled model aside): the models folder's entry (as
    `runnable` gives it) and each added folder of that name. More than one is an ambiguous name, which callers
    refuse rather than take the first (`models remove` could otherwise delete a download the user meant to leave)."""
    found = [model for listed, model in downloads() if listed == name]
    try:
        found += [p for p in added_folders() if p.name == name and p not in found]
    except AddedListDamaged:  # the list's own row says so; the models folder still answers
        pass
    return found


def sources_named(name: str) -> list[str]:
    """What --model would take for each model `models list` shows as `name`: "bundled" for the bundled model's name,
    and the paths `named` gives. `source_of` (the options) and `model_library.find` (models info, remove) both
    read names here, so a name the list shows means the same model everywhere."""
    return (["bundled"] if name == BUNDLED_NAME else []) + [str(p) for p in named(name)]


def ambiguous(name: str, paths: list[str]) -> str:
    """The refusal of a name that more than one model here has, with the paths that name each of them."""
    return (f"more than one model here is named {name!r} ({', '.join(paths)}); give the path of the one you mean "
            "instead of the name.")


def listed_names() -> list[str]:
    """The names `models list` shows, bundled first, read from names alone."""
    try:
        added = [p.name for p in added_folders()]
    except AddedListDamaged:
        added = []
    return [BUNDLED_NAME, *(name for name, _ in downloads()), *added]


def close_name(name: str) -> str | None:
    """The listed name or keyword (`bundled`, `default`) closest to `name` where one is close enough to be a typo
    of it (difflib's ratio >= 0.6, case aside): `bundle`, the README's own `--model bundled` mistyped, got no
    guess, and neither did `BUNDLED`."""
    names = {known.lower(): known for known in reversed([*KEYWORDS, *listed_names()])}  # the first of a spelling
    close = difflib.get_close_matches(name.lower(), names, n=1)
    return names[close[0]] if close else None


def source_of(text: str) -> str:
    """What --model, --verifier-model and --prm take: a name `models list` shows becomes its source (the bundled
    model's name "bundled", a downloaded or added model's name its path), a folder of one .gguf that .gguf;
    anything else (bundled, synthetic:NAME, FAMILY:FOLDER, a path, a server's model name) is kept as given. A name
    two models share is refused (argparse.ArgumentTypeError), naming their paths. A name close to a listed one is
    not refused here: with --backend openai or --verifier-endpoint it names a model a server serves, and
    `typo_of` says it only where it is to load here (app/options.py)."""
    if kept_as_given(text):
        return text
    try:
        path = Path(text).expanduser()
        if "/" in text or "\\" in text or path.exists():
            model = runnable(path)
            return text if model == path else str(model)
        found = sources_named(text)
    except OSError:  # no such name: the loader says so for the text as given
        return text
    if len(found) > 1:
        raise argparse.ArgumentTypeError(ambiguous(text, found))
    return found[0] if found else text


def kept_as_given(text: str) -> bool:
    """Whether `source_of` keeps `text` as it is without looking at the disk: nothing, bundled, default, and
    PREFIX:REST (synthetic:NAME, FAMILY:FOLDER). A Windows path (C:\\models, C:/models) has a colon after its
    drive letter and is a path all the same."""
    drive = len(text) >= 3 and text[0].isalpha() and text[1] == ":" and text[2] in "/\\"
    return not text or text in KEYWORDS or (":" in text and not drive)


def typo_of(text: str | None) -> str | None:
    """The refusal of a model to load here where the loader's own words would mislead; None otherwise. A model a
    pull is writing now (the loader said "not whole: pull it again", and that pull met the other's lock). A name no
    model has and no path is: while the list of added folders cannot be read, that list (the name may be on it),
    else a listed name close to it (difflib's ratio >= 0.6: a typo)."""
    if text is None or kept_as_given(text):
        return None
    try:
        path = Path(text).expanduser()
        if path.exists():
            return _being_pulled(path)
        if "/" in text or "\\" in text or sources_named(text):
            return None
        added_folders()
    except OSError:
        return None
    except AddedListDamaged as error:  # in the words `models add` and `models list` use
        return error.user_message()
    close = close_name(text)
    return (f"no model here is named {text!r} and no such path exists; did you mean {close}? `beamwise models "
            "list` shows the names.") if close else None


def _being_pulled(path: Path) -> str | None:
    """The refusal "FOLDER is being downloaded (process N); ..." where a pull holds the folder `path` is (or is in,
    for the .gguf of `pull --file`); None otherwise."""
    home = home_of(path)
    pulling = being_pulled(home) if home.is_dir() else None
    return None if pulling is None else f"{home} is {pulling}"
