"""What a pull that cannot go on tells the user, in the words of where it was asked: the command line names its
options (`--endpoint`, `beamwise models pull`), the window its Models tab's fields and buttons (Hub, Pull)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import app.formatting as fmt
from app.usage_error import UsageError


class PullError(UsageError):
    """A download that could not start or finish; the message says what to do (exit 2). A UsageError (so a
    ValueError, as the window catches it): the network, the hub or the disk are the user's to fix, not Beamwise."""


class PullCancelled(PullError):
    """The user cancelled; the partial files stay so the next pull resumes."""


@dataclass(frozen=True)
class PullWords:
    """How a pull's messages name what the user changes. The window cannot take the command line's words through
    `terms.window_terms`: there `--endpoint` is the Server dialog's address (`run --endpoint`), not the hub's."""

    hub: str  # what sets the hub's address
    mirror: str  # how to use another hub
    again: str  # how to pull again (a partial download resumes)
    cancelled: str  # PullCancelled's message


CLI_WORDS = PullWords(
    hub="--endpoint",
    mirror="pass --endpoint for a mirror",
    again="pull again",
    cancelled="the download was cancelled; `beamwise models pull` again resumes it.",
)
WINDOW_WORDS = PullWords(
    hub="the Hub address",
    mirror="type a mirror's address into Hub",
    again="press Pull again",
    cancelled="the download was cancelled; pressing Pull again resumes it.",
)


def explain(error: Exception, endpoint: str, repo_id: str, words: PullWords, timeout: float,
            part: Path | None = None) -> PullError:
    """One sentence for the user: offline, a hub that took the connection but went silent, a connection that broke,
    not found (by the hub's own word: a plain 404 is an address that is no hub), or what the hub said. `part` is the
    file being downloaded, whose bytes are kept; None: the hub was asked for the list of files, and nothing was
    written yet, so there is nothing to resume."""
    kinds = {kind.__name__ for kind in type(error).__mro__}  # httpx's classes, by name: huggingface_hub 1.x and 2.x
    text = f"{type(error).__name__}: {error}"
    name = "" if part is None else part.name.removesuffix(".part")
    kept = "" if part is None else f"; the {fmt.size(_have(part))} of {name} received are kept"
    if kinds & {"ConnectError", "ConnectTimeout", "PoolTimeout", "OfflineModeIsEnabled"}:
        return PullError(f"cannot reach {endpoint} (offline?); connect to the network, or {words.mirror}, and "
                         f"{words.again} (a partial download resumes).")
    if kinds & {"ReadTimeout", "WriteTimeout"}:
        if part is None:
            return PullError(f"{endpoint} answers but went silent: nothing came for {timeout:g} s after Beamwise "
                             f"asked for its files, so nothing was downloaded. Try again later, or {words.mirror}.")
        return PullError(f"{endpoint} answers but went silent: nothing came for {timeout:g} s in the middle of a "
                         f"file{kept}. {fmt.sentence(words.again)} later (it resumes), or {words.mirror}.")
    if kinds & {"RemoteProtocolError", "ReadError", "NetworkError"}:
        return PullError(f"the connection to {endpoint} broke off{kept}; {words.again} to resume.")
    status = getattr(getattr(error, "response", None), "status_code", None)
    if part is not None and (status == 404 or "EntryNotFound" in text):  # the listing named it a moment ago
        return PullError(f"the file {name} of {repo_id} was not found on {endpoint}, though its list of files names "
                         f"it: the listing and the files disagree. Try again later, or {words.mirror}.")
    if kinds & {"RepositoryNotFoundError", "RevisionNotFoundError"}:  # the hub's own answer (its X-Error-Code)
        return PullError(f"the repository {repo_id} was not found on {endpoint}; check the repository id "
                         "(owner/name).")
    if status == 404:  # any web server's answer to a path it has no page for, which blamed the repository id
        return _no_hub(endpoint, "its reply to the file list was a plain 404 Not Found, where a hub says the "
                                 "repository is missing", words)
    if kinds & {"JSONDecodeError", "DecodingError"}:  # it said "pull again to resume", with nothing to resume
        return _no_hub(endpoint, "its reply to the file list was not JSON", words)
    again = "try again later" if part is None else f"{words.again} to resume"  # before the listing nothing was written
    return PullError(f"the download from {endpoint} failed ({text.splitlines()[0][:200]}); {again}.")


def _no_hub(endpoint: str, why: str, words: PullWords) -> PullError:
    """An address that answers, but not as a hub: no repository id and no pull again mends it, only another address."""
    return PullError(f"{endpoint} answered, but not as a model hub does ({why}); check {words.hub}: it should be a "
                     "Hugging Face hub or a mirror of one.")


def _have(path: Path) -> int:
    return path.stat().st_size if path.is_file() else 0
