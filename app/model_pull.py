"""Downloading a model from a Hugging Face hub, only when the user asks: huggingface_hub's own client with the
endpoint passed per call, the app's offline switch lifted for that call alone, free disk checked first,
progress with speed and time left, cancel, and resume (a partial file is continued by HTTP range); each file's
size, and its sha256 where the listing gives one, checked before it is kept. One pull of a repository at a time
(app/pull_lock.py); its messages in the words of the command line or of the window (app/pull_failures.py)."""

from __future__ import annotations

import hashlib
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, TypeVar
from urllib.parse import urlsplit

import app.formatting as fmt
from app.model_library import MARKER, models_dir
from app.pull_failures import CLI_WORDS, PullCancelled, PullError, PullWords, explain
from app.pull_lock import LOCK, pull_lock
from app.pull_marker import DEFAULT_ENDPOINT, PARTIAL, PullAsked, finished_before, mark
from engine.abandon import abandonable

SPARE = 1.05  # free space wanted beyond the files' own size
TIMEOUT = 30.0  # seconds to connect, and to wait for the next bytes: a silent hub ends the pull instead of hanging it
COMMIT_STAMP = "COMMIT"  # in PARTIAL: the commit its partial files belong to
REPORT_EVERY = 0.25  # seconds between progress reports while a file downloads, stalled or not
HASH_CHUNK = 1 << 20  # bytes read at a time to hash a file on disk: memory stays flat whatever the file's size
T = TypeVar("T")


@dataclass
class PullProgress:
    """Bytes done of the total, with speed and time left: what the CLI prints and the window's bar shows."""

    total: int
    done: int = 0
    started: float = 0.0
    resumed: int = 0  # of `done`, the bytes an earlier pull left: they count towards the share, not the speed

    def line(self, now: float | None = None) -> str:
        took = max(1e-6, (now or time.monotonic()) - self.started)
        speed = (self.done - self.resumed) / took
        share = self.done / self.total if self.total else 1.0
        left = f"{fmt.seconds((self.total - self.done) / speed)} left" if speed > 0 else "time left not known yet"
        return f"{share:.0%} {fmt.size(self.done)} of {fmt.size(self.total)}, {fmt.size(speed)}/s, {left}"


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
         report: Callable[[PullProgress], None] = lambda p: None, cancel: threading.Event | None = None,
         words: PullWords = CLI_WORDS) -> Path:
    """Download `repo_id` (or only `filename`, e.g. one .gguf of a GGUF repo) into the models folder.
    `report` is also called from a helper thread while a file downloads (never two calls at once). Setting `cancel`
    ends the pull within about REPORT_EVERY while bytes are awaited, and within TIMEOUT while the hub is asked.
    A pull of a repository another pull (this process's or another's) is downloading is refused at once.
    `words`: how the messages name the hub's address and pulling again (the window passes its own)."""
    cancel = cancel or threading.Event()
    _check_repo_id(repo_id)
    _check_endpoint(endpoint, words)
    try:
        with online():
            return _pull(PullAsked(repo_id, endpoint, revision, filename), report, cancel, words)
    except PullError as error:
        if cancel.is_set() and not isinstance(error, PullCancelled):  # what failed was the cancel taking effect
            raise PullCancelled(words.cancelled) from error
        raise


def _pull(asked: PullAsked, report: Callable[[PullProgress], None], cancel: threading.Event,
          words: PullWords) -> Path:
    """The lock first, so that a second pull is refused before it asks the hub anything; the marker records what
    was asked from the start, so an unfinished download says the command that resumes it (pull_marker)."""
    target = destination(asked.repo)
    _refuse_foreign(target)
    with _writing(target, words), pull_lock(target, asked.repo, words):
        files, sha256, commit = _asked(lambda: _files(asked, words), cancel, words)
        done = finished_before(target, commit)
        unfinished = {**asked.record(), "commit": commit, "complete": False}
        mark(target, {**unfinished, "done": sorted(done)})
        _start_partial(target, commit)
        _check_disk(target, files, done, words)
        job = _Job(asked.repo, asked.endpoint, commit or asked.revision, target,
                   PullProgress(sum(files.values()), started=time.monotonic()), report, cancel, done, sha256, words)
        for name, size in files.items():
            if cancel.is_set():
                raise PullCancelled(words.cancelled)
            if _download(job, name, size):
                done.add(name)
                mark(target, {**unfinished, "done": sorted(done)})
        shutil.rmtree(target / PARTIAL, ignore_errors=True)
        mark(target, {**asked.record(), "commit": commit, "files": sorted(files), "complete": True})
    return target


def _refuse_foreign(target: Path) -> None:
    """A folder of that name that Beamwise did not download (copied in by hand: no marker) is never written into:
    the pull took it over, its marker then made `remove` delete the user's own files with it."""
    try:
        foreign = target.is_dir() and not (target / MARKER).is_file() and any(
            entry.name not in (LOCK, PARTIAL) for entry in target.iterdir())  # a pull killed before its marker
    except OSError:  # the write says why
        return
    if foreign:
        raise PullError(f"{target} holds files Beamwise did not download, so the pull will not write into it; "
                        "move that folder elsewhere (and add it with `beamwise models add`), then pull again.")


def _asked(question: Callable[[], T], cancel: threading.Event, words: PullWords) -> T:
    """`question()` on a daemon thread, so that a cancel (or the window closing) ends the wait for a slow hub at once
    rather than after TIMEOUT; the abandoned request ends on its own within TIMEOUT."""
    def check() -> None:
        if cancel.is_set():
            raise PullCancelled(words.cancelled)

    return abandonable(question, "beamwise-pull-ask", check, REPORT_EVERY)


def _start_partial(target: Path, commit: str | None) -> None:
    """Partial files are continued only by a pull of the commit they came from: a repository updated between two
    pulls would otherwise join the start of one version of a file to the end of another."""
    partial, stamp = target / PARTIAL, target / PARTIAL / COMMIT_STAMP
    if partial.exists() and (commit is None or not stamp.is_file() or stamp.read_text(encoding="utf-8") != commit):
        shutil.rmtree(partial)
    partial.mkdir(exist_ok=True)
    if commit is not None:
        stamp.write_text(commit, encoding="utf-8")


def _check_repo_id(repo_id: str) -> None:
    """The hub's own rule, checked before any request: a retry cannot mend a malformed id."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        raise PullError(f"{repo_id!r} is not a valid repository id; give it as owner/name, e.g. "
                        "HuggingFaceTB/SmolLM2-360M-Instruct.") from error


def _check_endpoint(endpoint: str, words: PullWords) -> None:
    """An address the hub's client can ask, checked before any request: a retry cannot mend a malformed one."""
    try:
        parts = urlsplit(endpoint)
        fine = parts.scheme in ("http", "https") and bool(parts.hostname) and (parts.port or 0) >= 0
    except ValueError:  # a bracketed host that is no IPv6 address, a port that is no number
        fine = False
    if not fine:
        raise PullError(f"{words.hub} must be an http:// or https:// URL, such as {DEFAULT_ENDPOINT} "
                        f"(got {endpoint!r}).")


@contextmanager
def _writing(path: Path, words: PullWords) -> Iterator[None]:
    """Folder and file errors of the pull as one PullError naming the path, instead of a traceback."""
    try:
        yield
    except OSError as error:
        raise PullError(f"cannot write {error.filename or path} ({error.strerror or error}); the models folder "
                        f"{models_dir()} must be a folder you can write to, with space free (set BEAMWISE_DATA_DIR "
                        f"to choose another data folder), then {words.again}.") from error


def _files(asked: PullAsked, words: PullWords) -> tuple[dict[str, int], dict[str, str], str | None]:
    """Each file's size, the sha256 of those the listing gives one for (the hub's LFS files: the weights), and the
    commit the revision names now: every file of the pull is fetched from it."""
    from huggingface_hub import HfApi

    repo_id, filename = asked.repo, asked.file
    try:
        info = HfApi(endpoint=asked.endpoint).model_info(repo_id, revision=asked.revision, files_metadata=True,
                                                          timeout=TIMEOUT)
    except Exception as error:
        raise explain(error, asked.endpoint, repo_id, words, TIMEOUT) from error
    files = {s.rfilename: int(s.size or 0) for s in info.siblings or []}
    sha256 = {s.rfilename: s.lfs.sha256.lower() for s in info.siblings or []
              if s.lfs is not None and isinstance(getattr(s.lfs, "sha256", None), str)}
    if filename is not None:
        if filename not in files:
            raise PullError(f"{repo_id} has no file {filename}; it has: {', '.join(sorted(files))}.")
        files = {filename: files[filename]}
    for name in files:
        _refuse_outside(name, repo_id, words)
    return files, {name: digest for name, digest in sha256.items() if name in files}, info.sha


def _refuse_outside(name: str, repo_id: str, words: PullWords) -> None:
    """A listed name is joined to the model's folder, so one that is absolute, climbs out with '..' (with either
    separator) or takes Beamwise's bookkeeping names would write where the user never agreed to."""
    parts = PureWindowsPath(name).parts  # splits on / and \ alike
    if (not name or PurePosixPath(name).is_absolute() or PureWindowsPath(name).anchor or ".." in parts
            or parts[0] in (PARTIAL, MARKER, LOCK)):
        raise PullError(f"{repo_id} lists a file named {name!r}, which is no plain path inside its model folder "
                        "(absolute, with '..', or a name Beamwise keeps for itself); Beamwise does not download from "
                        f"such a listing: check the repository and {words.hub}.")


def _check_disk(target: Path, files: dict[str, int], done: set[str], words: PullWords) -> None:
    need = sum(size - min(size, _have(target / PARTIAL / f"{name}.part")) for name, size in files.items()
               if not (name in done and _have(target / name) == size))
    free = shutil.disk_usage(target).free
    if need * SPARE > free:
        raise PullError(f"the download needs {fmt.size(need)} but only {fmt.size(free)} is free on the disk of "
                        f"{target}; free some space and {words.again} (it resumes).")


def _have(path: Path) -> int:
    return path.stat().st_size if path.is_file() else 0


@dataclass
class _Job:
    """What the files of one pull share."""

    repo_id: str
    endpoint: str
    revision: str
    target: Path
    progress: PullProgress
    report: Callable[[PullProgress], None]
    cancel: threading.Event
    done: set[str]  # files an earlier pull of this commit finished
    sha256: dict[str, str]  # of the files the listing gives one for
    words: PullWords


def _download(job: _Job, name: str, size: int) -> bool:
    """One file by a ranged GET: a partial `.part` file is continued, never restarted. False: it was there."""
    from huggingface_hub import hf_hub_url

    base, final = job.progress.done, job.target / name
    if name in job.done and _intact(job, name, final, size):  # finished in an earlier pull of the same commit
        job.progress.done = base + size
        job.progress.resumed += size
        job.report(job.progress)
        return False
    job.done.discard(name)
    part = job.target / PARTIAL / f"{name}.part"
    part.parent.mkdir(parents=True, exist_ok=True)
    if _have(part) > size:  # longer than the file: it cannot be a start of it
        part.unlink()
    job.progress.resumed += min(_have(part), size)
    digest = None  # the sha256 of the bytes in `part`, where the listing gives one to check
    if not part.exists() or _have(part) < size:
        digest = _transfer(job, hf_hub_url(job.repo_id, name, revision=job.revision, endpoint=job.endpoint), part,
                           base, name in job.sha256)
    if _have(part) != size:
        got = _have(part)
        if got > size:
            part.unlink()
        said = (fmt.size(got), fmt.size(size))
        if said[0] == said[1]:  # "sent 3.5 MB ... where it lists 3.5 MB"
            said = (f"{got:,} bytes", f"{size:,} bytes")
        raise PullError(f"{job.endpoint} sent {said[0]} of {name} where it lists {said[1]}; {job.words.again} "
                        f"to {'resume' if got < size else 'download it afresh'}.")
    _check_sha256(job, name, part, digest)
    final.parent.mkdir(parents=True, exist_ok=True)
    part.replace(final)
    job.progress.done = base + size
    job.report(job.progress)
    return True


def _intact(job: _Job, name: str, final: Path, size: int) -> bool:
    """Whether a file an earlier pull finished is still the listed one: its size, and its sha256 where the listing
    gives one (hashed from the disk: a folder marked complete by a pull that did not check, or changed since, is
    mended by pulling again). One that is not is deleted, to be fetched again."""
    if _have(final) != size or (name in job.sha256 and _sha256_of(final, size).hexdigest() != job.sha256[name]):
        final.unlink(missing_ok=True)
        return False
    return True


def _check_sha256(job: _Job, name: str, part: Path, digest: str | None) -> None:
    """A file of the right size with other bytes (a server or proxy that sent something else) is refused and
    deleted, so that the next pull fetches it again instead of keeping it as finished."""
    expected = job.sha256.get(name)
    if expected is None:
        return
    got = digest if digest is not None else _sha256_of(part, _have(part)).hexdigest()  # left whole by an earlier pull
    if got != expected:
        part.unlink(missing_ok=True)
        raise PullError(f"{name} from {job.endpoint} is not the file the listing describes: its sha256 is {got}, "
                        f"where the listing gives {expected}. It was deleted; {job.words.again} to fetch it afresh (if "
                        f"it happens again, the hub or a proxy on the way sends other bytes: {job.words.mirror}).")


def _sha256_of(path: Path, length: int) -> Any:
    """A sha256 of the first `length` bytes of `path`, read in HASH_CHUNK pieces; go on updating it with the rest."""
    digest = hashlib.sha256()
    if length <= 0:  # nothing kept: a file not yet begun
        return digest
    with path.open("rb") as file:
        while length > 0 and (chunk := file.read(min(HASH_CHUNK, length))):
            digest.update(chunk)
            length -= len(chunk)
    return digest


def _transfer(job: _Job, url: str, part: Path, base: int, hashed: bool) -> str | None:
    """Append the rest of `url` to `part` through huggingface_hub's HTTP session, with TIMEOUT for connecting and for
    each read. The session has no retries of its own here: the next pull is the retry, and it resumes. `hashed`:
    returns the sha256 of the whole of `part` (the part an earlier pull kept hashed first), else None."""
    from huggingface_hub.utils import get_session, hf_raise_for_status

    have = _have(part)
    headers = {"Accept-Encoding": "identity"}  # the bytes stored are the bytes sent, so a range continues them
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        with get_session().stream("GET", url, headers=headers, timeout=TIMEOUT) as response:
            hf_raise_for_status(response)
            start = have if response.status_code == 206 else 0
            digest = _sha256_of(part, start) if hashed else None
            _receive(job, response, part, base, start, digest)
            return None if digest is None else digest.hexdigest()
    except PullError:
        raise
    except Exception as error:
        raise explain(error, job.endpoint, job.repo_id, job.words, TIMEOUT, part) from error


def _receive(job: _Job, response: Any, part: Path, base: int, start: int, digest: Any) -> None:
    """Write the body into `part` from byte `start` (0: the server ignored the range and sends the whole file). Each
    piece is written unbuffered as it arrives, not in the client's 10 MiB chunks, so what came before a cancel, a
    stall, a broken connection or Ctrl-C stays for the next pull. Only the disk raises OSError here (httpx's errors
    are not OSErrors), and _writing names it. `digest` (a sha256 of the first `start` bytes, or None) takes in each
    piece as it is written."""
    with _writing(part, job.words), part.open("ab" if start else "wb", buffering=0) as file, _watched(job, response):
        done = start
        for piece in response.iter_raw():
            file.write(piece)
            if digest is not None:
                digest.update(piece)
            done += len(piece)
            job.progress.done = base + done
            if job.cancel.is_set():
                raise PullCancelled(job.words.cancelled)


@contextmanager
def _watched(job: _Job, response: Any) -> Iterator[None]:
    """A clock beside the transfer: every REPORT_EVERY it reports progress (a slow or stalled download shows its speed
    falling instead of an old figure) and, once cancelled, shuts the connection so that a read waiting on a silent
    server returns at once instead of after TIMEOUT."""
    ended = threading.Event()

    def watch() -> None:
        while not ended.wait(REPORT_EVERY):
            job.report(job.progress)
            if job.cancel.is_set():
                _shut(response)
                return

    watcher = threading.Thread(target=watch, name="beamwise-pull-watch", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        ended.set()
        watcher.join()


def _shut(response: Any) -> None:
    """Shut the socket under a streaming httpx response; where there is none (another transport), TIMEOUT ends it."""
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if sock is not None:
        with suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
