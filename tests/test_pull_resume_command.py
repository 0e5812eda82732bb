"""An unfinished download's marker records what was pulled (repository, hub, revision, one file), so the exact
command that resumes it can be given: `beamwise models pull tiny/llama --endpoint URL`."""

from __future__ import annotations

import json
from collections import namedtuple
from pathlib import Path

import pytest

from app import model_library, model_pull
from app.model_pull import PullError, pull
from app.pull_marker import resume_command, unfinished_pull
from tests.hub_server import REPO, Hub

pytestmark = pytest.mark.usefixtures("scratch_models")
Usage = namedtuple("Usage", "total used free")


def failed_pull(monkeypatch, hub: Hub, **asked) -> None:
    """A pull of tiny/llama that stops after its marker is written (the disk is full)."""
    with monkeypatch.context() as full:
        full.setattr(model_pull.shutil, "disk_usage", lambda path: Usage(10, 10, 1000))
        with pytest.raises(PullError, match="free some space"):
            pull("tiny/llama", endpoint=hub.endpoint, **asked)


def test_an_unfinished_download_gives_the_command_that_resumes_it(monkeypatch):
    with Hub(REPO) as hub:
        failed_pull(monkeypatch, hub)
        folder = model_pull.destination("tiny/llama")
        marker = json.loads((folder / model_library.MARKER).read_text(encoding="utf-8"))
        assert (marker["repo"], marker["endpoint"], marker["file"]) == ("tiny/llama", hub.endpoint, None)
        assert resume_command(folder) == f"beamwise models pull tiny/llama --endpoint {hub.endpoint}"
        pull("tiny/llama", endpoint=hub.endpoint)
    assert resume_command(folder) is None  # finished: nothing to resume


def test_the_command_names_the_one_file_and_the_revision_asked_for(monkeypatch):
    with Hub(REPO) as hub:
        failed_pull(monkeypatch, hub, filename="model.safetensors", revision="v1")
        assert resume_command(model_pull.destination("tiny/llama")) == (
            f"beamwise models pull tiny/llama --endpoint {hub.endpoint} --revision v1 --file model.safetensors")


def old_marker(repo: str, done: list[str], parts: tuple[str, ...] = ()) -> Path:
    """The folder of an unfinished pull of the release before: its marker (repo, commit, complete, done; no hub and
    no `--file`) and its partial files."""
    folder = model_pull.destination(repo)
    (folder / model_pull.PARTIAL).mkdir(parents=True)
    for name in parts:
        (folder / model_pull.PARTIAL / f"{name}.part").write_bytes(b"x" * 10)
    marker = {"repo": repo, "commit": "abc", "complete": False, "done": done}
    (folder / model_library.MARKER).write_text(json.dumps(marker), encoding="utf-8")
    return folder


def test_a_marker_of_an_older_beamwise_resumes_from_the_default_hub():
    folder = old_marker("tiny/llama", ["config.json"], ("model.safetensors",))  # two files: the whole repository
    assert resume_command(folder) == "beamwise models pull tiny/llama"
    assert unfinished_pull(folder).endpoint == model_pull.DEFAULT_ENDPOINT


@pytest.mark.parametrize("left", ["partial", "done"])
def test_an_older_pull_of_one_gguf_resumes_that_file_alone(left):
    """It was advertised as a pull of the whole repository: every quantisation, maybe hundreds of GB."""
    name = "Big.Q4_K_M.gguf"
    folder = old_marker("bartowski/Big-GGUF", [name] if left == "done" else [], (name,) if left == "partial" else ())
    assert resume_command(folder) == f"beamwise models pull bartowski/Big-GGUF --file {name}"
    assert unfinished_pull(folder).file == name
    entry = model_library.find("bartowski--Big-GGUF")
    assert f"(`beamwise models pull bartowski/Big-GGUF --file {name}`)" in entry.problem


@pytest.mark.parametrize("named", [[], ["config.json"]])
def test_an_older_pull_that_cannot_be_told_offers_no_command(named):
    """Nothing finished or partial, or one file that is no .gguf: a `--file` pull or the start of a whole one."""
    folder = old_marker("bartowski/Big-GGUF", named)
    assert unfinished_pull(folder) is None and resume_command(folder) is None
    problem = model_library.find("bartowski--Big-GGUF").problem
    assert problem.startswith("the download did not finish") and "beamwise models pull" not in problem
