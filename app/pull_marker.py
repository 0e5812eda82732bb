"""Beamwise's marker in a model it downloads: what the pull was (repository, hub, revision, one file), which files
it finished, whether it is complete, and so the exact pull that resumes an unfinished download."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from app.file_replace import replace_text
from app.models_folder import MARKER, home_of
from app.shell_words import quoted

DEFAULT_ENDPOINT = "https://huggingface.co"
PARTIAL = ".partial"  # in the model's folder: the files a pull has not finished, as NAME.part


@dataclass(frozen=True)
class PullAsked:
    """The arguments of a pull, as its marker records them: the same ones resume it."""

    repo: str
    endpoint: str = DEFAULT_ENDPOINT
    revision: str = "main"
    file: str | None = None  # `--file`: one file of the repository

    def record(self) -> dict[str, str | None]:
        return {"repo": self.repo, "endpoint": self.endpoint, "revision": self.revision, "file": self.file}

    def command(self) -> str:
        """The command line that pulls it again: options at their default are left out."""
        words = ["beamwise", "models", "pull", self.repo]
        if self.endpoint != DEFAULT_ENDPOINT:
            words += ["--endpoint", self.endpoint]
        if self.revision != "main":
            words += ["--revision", self.revision]
        if self.file is not None:
            words += ["--file", self.file]
        return " ".join(quoted(word) for word in words)


def mark(target: Path, marker: dict) -> None:
    """Written whole and then renamed, so that a crash never leaves a half-written marker behind."""
    replace_text(target / MARKER, json.dumps(marker))


def read_marker(target: Path) -> dict | None:
    """The marker in the folder `target`, or None (none there, or unreadable)."""
    return read_marker_file(target / MARKER)


def read_marker_file(marker: Path) -> dict | None:
    """A marker file's record, or None when it is missing or is no marker's JSON."""
    try:
        record = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def finished_before(target: Path, commit: str | None) -> set[str]:
    """The files an earlier pull of this very commit finished, as its marker lists them: only these are kept.
    A file of another commit is fetched again even when its size is the same (a changed config.json)."""
    marker = read_marker(target)
    if marker is None or marker.get("commit") != commit:
        return set()
    names = marker.get("files" if marker.get("complete") else "done")
    return {name for name in names if isinstance(name, str)} if isinstance(names, list) else set()


def unfinished_pull(source: str | Path) -> PullAsked | None:
    """The pull that resumes the unfinished download holding model `source` (a folder in the models folder, or the
    .gguf a `pull --file` put in one), or None when it is no unfinished download or its marker names no repository.
    A marker of a Beamwise before 2026-11 records no hub (the default one is given then) and no `--file`, which is
    read from the files it names (`_old_pull`): None where it cannot be told."""
    home = home_of(Path(source))
    marker = read_marker(home) if home.is_dir() else None  # a lone .gguf was added, never pulled
    if marker is None or marker.get("complete", True) is not False or not isinstance(marker.get("repo"), str):
        return None
    texts = {key: value for key in ("endpoint", "revision", "file") if isinstance(value := marker.get(key), str)}
    asked = PullAsked(marker["repo"], **texts)
    return _old_pull(home, marker, asked) if "file" not in marker else asked


def _old_pull(home: Path, marker: dict, asked: PullAsked) -> PullAsked | None:
    """The pull a marker of a Beamwise before 2026-11 was, which did not say whether one file (`--file`) was
    asked: read from the files it finished (`done`) and left partial (PARTIAL). Two names or more: the whole
    repository (a `--file` pull names one file); one .gguf: that file; else None, as it cannot be told, and a pull
    of the whole repository could fetch every quantisation of a GGUF repository (hundreds of GB)."""
    done = marker.get("done")
    names = {name for name in done if isinstance(name, str)} if isinstance(done, list) else set()
    partial = home / PARTIAL
    try:
        names |= {p.relative_to(partial).as_posix().removesuffix(".part") for p in partial.rglob("*.part")
                  if p.is_file()}
    except OSError:
        return None
    if len(names) > 1:
        return asked
    name = next(iter(names), "")
    return replace(asked, file=name) if name.lower().endswith(".gguf") else None


def resume_command(source: str | Path) -> str | None:
    """`beamwise models pull tiny/gen --endpoint URL` for an unfinished download (see `unfinished_pull`), or None."""
    asked = unfinished_pull(source)
    return None if asked is None else asked.command()
