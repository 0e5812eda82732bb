"""An unfinished download's marker records what was pulled (repository, hub, revision, one file), so the exact
command that resumes it can be given: `beamwise models pull tiny/llama --endpoint URL`."""

from __future__ import annotations

import json
from collections import namedtuple

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


def test_a_marker_of_an_older_beamwise_resumes_from_the_default_hub():
    folder = model_pull.destination("tiny/llama")
    folder.mkdir(parents=True)
    (folder / model_library.MARKER).write_text(json.dumps({"repo": "tiny/llama", "complete": False}),
                                               encoding="utf-8")
    assert resume_command(folder) == "beamwise models pull tiny/llama"
    assert unfinished_pull(folder).endpoint == model_pull.DEFAULT_ENDPOINT
