"""Downloading a model from a Hugging Face hub, only when the user asks: huggingface_hub's own client with the
endpoint passed per call, the app's offline switch lifted for that call alone, free disk checked first,
progress with speed and time left, cancel, and resume (the client continues a partial file by HTTP range)."""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath

import app.formatting as fmt
from app.model_library import MARKER, models_dir

DEFAULT_ENDPOINT = "https://huggingface.co"
SPARE = 1.05  # free space wanted beyond the files' own size
PARTIAL = ".partial"  # unfinished files wait here; the next pull continues them


class PullError(ValueError):
    """A download that could not start or finish; the message says what to do (exit 2)."""


class PullCancelled(PullError):
    """The user cancelled; the partial files stay so the next pull resumes."""


@dataclass
class PullProgress:
    """Bytes done of the total, with speed and time left: what the CLI prints and the window's bar shows."""

    total: int
    done: int = 0
    started: float = 0.0

    def line(self, now: float | None = None) -> str:
        took = max(1e-6, (now or time.monotonic()) - self.started)
        speed = self.done / took
        left = (self.total - self.done) / speed if speed > 0 else 0.0
        share = self.done / self.total if self.total else 1.0
        return (f"{share:.0%} {fmt.size(self.done)} of {fmt.size(self.total)}, {fmt.size(speed)}/s, "
                f"{fmt.seconds(left)} left")


@contextmanager
def online() -> Iterator[None]:
    """Lift HF_HUB_OFFLINE (which Beamwise sets for itself) for this call only."""
    from huggingface_hub import constants

    before = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = False
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = before


def destination(repo_id: str) -> Path:
    return models_dir() / repo_id.replace("/", "--")


def pull(repo_id: str, *, filename: str | None = None, endpoint: str = DEFAULT_ENDPOINT, revision: str = "main",
         report: Callable[[PullProgress], None] = lambda p: None, cancel: threading.Event | None = None) -> Path:
    """Download `repo_id` (or only `filename`, e.g. one .gguf of a GGUF repo) into the models folder."""
    cancel = cancel or threading.Event()
    _check_repo_id(repo_id)
    with online():
        files = _files(repo_id, filename, endpoint, revision)
        target = destination(repo_id)
        with _writing(target):
            target.mkdir(parents=True, exist_ok=True)
            _mark(target, {"repo": repo_id, "complete": False})
            _check_disk(target, files)
            progress = PullProgress(sum(files.values()), started=time.monotonic())
            for name, size in files.items():
                _download(repo_id, name, size, target, endpoint, revision, progress, report, cancel)
            shutil.rmtree(target / PARTIAL, ignore_errors=True)
            _mark(target, {"repo": repo_id, "endpoint": endpoint, "revision": revision, "files": sorted(files),
                           "complete": True})
    return target


def incomplete(folder: Path) -> bool:
    """True for a folder whose pull started and has not finished (failed, cancelled, or still running): its marker
    says `"complete": false`. Markers from before this flag, and folders Beamwise did not download, are False."""
    try:
        marker = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(marker, dict) and marker.get("complete") is False


def _check_repo_id(repo_id: str) -> None:
    """The hub's own rule, checked before any request: a retry cannot mend a malformed id."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        raise PullError(f"{repo_id!r} is not a valid repository id; give it as owner/name, e.g. "
                        "HuggingFaceTB/SmolLM2-360M-Instruct.") from error


@contextmanager
def _writing(target: Path) -> Iterator[None]:
    """Folder and file errors of the pull as one PullError naming the path, instead of a traceback."""
    try:
        yield
    except OSError as error:
        path = error.filename or target
        raise PullError(f"cannot write {path} ({error.strerror or error}); the models folder {models_dir()} must be "
                        "a folder you can write to, with space free (set BEAMWISE_DATA_DIR to choose another "
                        "data folder), then pull again.") from error


def _mark(target: Path, marker: dict) -> None:
    """Written whole and then renamed, so that a crash never leaves a half-written marker behind."""
    draft = target / f"{MARKER}.new"
    draft.write_text(json.dumps(marker), encoding="utf-8")
    draft.replace(target / MARKER)


def _files(repo_id: str, filename: str | None, endpoint: str, revision: str) -> dict[str, int]:
    from huggingface_hub import HfApi

    try:
        info = HfApi(endpoint=endpoint).model_info(repo_id, revision=revision, files_metadata=True)
    except Exception as error:
        raise _explain(error, endpoint, repo_id) from error
    files = {s.rfilename: int(s.size or 0) for s in info.siblings or []}
    if filename is not None:
        if filename not in files:
            raise PullError(f"{repo_id} has no file {filename}; it has: {', '.join(sorted(files))}.")
        files = {filename: files[filename]}
    for name in files:
        _refuse_outside(name, repo_id)
    return files


def _refuse_outside(name: str, repo_id: str) -> None:
    """A listed name is joined to the model's folder, so one that is absolute, climbs out with '..' (with either
    separator) or takes Beamwise's bookkeeping names would write where the user never agreed to."""
    parts = PureWindowsPath(name).parts  # splits on / and \ alike
    if (not name or PurePosixPath(name).is_absolute() or PureWindowsPath(name).anchor or ".." in parts
            or parts[0] in (PARTIAL, MARKER)):
        raise PullError(f"{repo_id} lists a file named {name!r}, which is no plain path inside its model folder "
                        "(absolute, with '..', or a name Beamwise keeps for itself); Beamwise does not download from "
                        "such a listing: check the repository and the --endpoint.")


def _check_disk(target: Path, files: dict[str, int]) -> None:
    need = sum(max(0, size - _have(target / name) - _have(target / PARTIAL / f"{name}.part"))
               for name, size in files.items())
    free = shutil.disk_usage(target).free
    if need * SPARE > free:
        raise PullError(f"the download needs {fmt.size(need)} but only {fmt.size(free)} is free on the disk of "
                        f"{target}; free some space and pull again (it resumes).")


def _have(path: Path) -> int:
    return path.stat().st_size if path.is_file() else 0


def _download(repo_id: str, name: str, size: int, target: Path, endpoint: str, revision: str,
              progress: PullProgress, report: Callable[[PullProgress], None], cancel: threading.Event) -> None:
    """One file through the client's own ranged GET: a partial `.part` file is continued, never restarted."""
    from huggingface_hub import hf_hub_url
    from huggingface_hub.file_download import http_get

    base, final = progress.done, target / name
    if _have(final) == size:  # finished in an earlier pull
        progress.done = base + size
        report(progress)
        return
    part = target / PARTIAL / f"{name}.part"
    part.parent.mkdir(parents=True, exist_ok=True)
    url = hf_hub_url(repo_id, name, revision=revision, endpoint=endpoint)
    try:
        with part.open("ab") as file:
            http_get(url, file, resume_size=file.tell(), expected_size=size,
                     tqdm_class=_bar_class(progress, report, cancel, base))
    except PullCancelled:
        raise
    except Exception as error:
        raise _explain(error, endpoint, repo_id) from error
    final.parent.mkdir(parents=True, exist_ok=True)
    part.replace(final)
    progress.done = base + size
    report(progress)


def _bar_class(progress: PullProgress, report: Callable[[PullProgress], None], cancel: threading.Event, base: int):
    """A tqdm stand-in the client drives: it feeds PullProgress and stops the download when cancelled."""
    from tqdm.auto import tqdm

    class Bar(tqdm):
        def __init__(self, *args, **kwargs) -> None:
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)
            self.done_here = int(kwargs.get("initial") or 0)  # a resumed file starts at its partial size

        def update(self, n: float | None = 1) -> bool | None:
            self.done_here += int(n or 0)
            progress.done = base + self.done_here
            report(progress)
            if cancel.is_set():
                raise PullCancelled("the download was cancelled; `beamwise models pull` again resumes it.")
            return None

    return Bar


def _explain(error: Exception, endpoint: str, repo_id: str) -> PullError:
    """One sentence for the user: offline, not found, or what the hub said."""
    text = f"{type(error).__name__}: {error}"
    if any(word in text for word in ("ConnectError", "ConnectionError", "Connection refused", "Name or service",
                                     "OfflineModeIsEnabled", "timed out", "ConnectTimeout")):
        return PullError(f"cannot reach {endpoint} (offline?); connect to the network, or pass --endpoint for a "
                         "mirror, and pull again (a partial download resumes).")
    if "404" in text or "RepositoryNotFound" in text or "EntryNotFound" in text:
        return PullError(f"{repo_id} was not found on {endpoint}; check the repository id (owner/name).")
    return PullError(f"the download from {endpoint} failed ({text.splitlines()[0][:200]}); pull again to resume.")
