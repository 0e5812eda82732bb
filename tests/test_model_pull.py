"""Pulling a model with huggingface_hub's real client from a hub-layout server on 127.0.0.1: progress, the
free-disk check, cancel and resume by HTTP range, and a clear message when the hub cannot be reached."""

from __future__ import annotations

import threading
from collections import namedtuple

import pytest

from app import model_library, model_pull
from app.model_pull import PullCancelled, PullError, pull
from tests.hub_server import CONFIG, REPO, WEIGHTS, Hub

pytestmark = pytest.mark.usefixtures("scratch_models")


def test_pull_downloads_with_progress_and_lists_the_model():
    seen = []
    with Hub(REPO) as hub:
        folder = pull("tiny/llama", endpoint=hub.endpoint, report=lambda p: seen.append((p.done, p.line())))
    assert (folder / "model.safetensors").read_bytes() == WEIGHTS
    assert seen[-1][0] == len(CONFIG) + len(WEIGHTS) and "/s" in seen[-1][1] and "left" in seen[-1][1]
    entry = model_library.find("tiny--llama")
    assert entry.downloaded and entry.facts is not None and entry.facts.kv.num_layers == 2


def test_cancel_keeps_the_partial_file_and_the_next_pull_resumes_by_range():
    cancel = threading.Event()

    def stop_midway(progress) -> None:
        if progress.done > 300_000:
            cancel.set()

    with Hub(REPO) as hub:
        with pytest.raises(PullCancelled, match="resumes"):
            pull("tiny/llama", endpoint=hub.endpoint, report=stop_midway, cancel=cancel)
        folder = pull("tiny/llama", endpoint=hub.endpoint)
        assert any(r.startswith("bytes=") and not r.startswith("bytes=0-") for r in hub.ranges)
    assert (folder / "model.safetensors").read_bytes() == WEIGHTS


def test_not_enough_disk_is_refused_before_downloading(monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(model_pull.shutil, "disk_usage", lambda path: usage(10, 10, 1000))
    with Hub(REPO) as hub, pytest.raises(PullError, match="free some space"):
        pull("tiny/llama", endpoint=hub.endpoint)


def test_unreachable_hub_says_offline():
    with Hub(REPO) as hub:
        endpoint = hub.endpoint
    with pytest.raises(PullError, match="offline"):
        pull("tiny/llama", endpoint=endpoint)


def test_unknown_repo_is_named():
    with Hub(REPO) as hub, pytest.raises(PullError, match="not found"):
        pull("nobody/nothing", endpoint=hub.endpoint)


def test_remove_only_touches_what_beamwise_downloaded(tmp_path):
    with Hub(REPO) as hub:
        pull("tiny/llama", endpoint=hub.endpoint)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_bytes(CONFIG)
    model_library.add_folder(mine)
    with pytest.raises(ValueError, match="not downloaded by Beamwise"):
        model_library.remove(model_library.find("mine"))
    model_library.remove(model_library.find("tiny--llama"))
    assert not model_pull.destination("tiny/llama").exists() and mine.is_dir()


def test_models_cli_pull_list_info_remove(capsys):
    from app.cli import main

    with Hub(REPO) as hub:
        assert main(["models", "pull", "tiny/llama", "--endpoint", hub.endpoint]) == 0
    assert "downloaded tiny/llama" in capsys.readouterr().out
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert "SmolLM2-135M-Instruct" in out and "tiny--llama" in out and "(downloaded)" in out
    assert main(["models", "info", "tiny--llama"]) == 0
    info = capsys.readouterr().out
    assert "KV per token" in info and "context length" in info and "2,048 tokens" in info
    assert main(["models", "remove", "tiny--llama"]) == 2  # no terminal to ask: needs --yes
    assert main(["models", "remove", "tiny--llama", "--yes"]) == 0


def test_a_prm_folder_is_listed_as_a_prm_with_its_family():
    from engine.verifiers.synthetic_prm import save_synthetic_prm

    folder = model_library.models_dir() / "tiny-qwen-prm"
    folder.mkdir(parents=True)
    save_synthetic_prm("tiny-qwen-prm", folder)
    entry = model_library.find("tiny-qwen-prm")
    assert entry.role == "PRM (qwen-prm)" and not entry.downloaded


@pytest.mark.parametrize("name", ["../../../escaped.txt", "ABSOLUTE", "sub\\..\\..\\escaped.txt", ".partial/x.part"])
def test_a_listed_name_outside_the_model_folder_is_refused_before_anything_is_written(tmp_path, name):
    name = str(tmp_path / "abs" / "escaped.txt") if name == "ABSOLUTE" else name
    repos = {"tiny/evil": {"config.json": CONFIG, name: b"ESCAPED"}}
    with Hub(repos) as hub, pytest.raises(PullError, match="no plain path inside its model folder"):
        pull("tiny/evil", endpoint=hub.endpoint)
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []
    assert not model_pull.destination("tiny/evil").exists()


@pytest.mark.parametrize("repo", ["../x", "a/b/c", "", "has space/x", "x/.."])
def test_a_malformed_repo_id_is_named_without_asking_the_hub(repo):
    with Hub(REPO) as hub, pytest.raises(PullError, match=r"not a valid repository id; give it as owner/name") as e:
        pull(repo, endpoint=hub.endpoint)
    assert "pull again" not in str(e.value)
    assert not model_library.models_dir().exists()


def test_a_data_folder_that_is_a_file_is_named_with_what_to_do(monkeypatch, tmp_path):
    data = tmp_path / "not-a-folder"
    data.write_text("x")
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(data))
    with Hub(REPO) as hub, pytest.raises(PullError, match=r"cannot write .*not-a-folder.*a folder you can write to"):
        pull("tiny/llama", endpoint=hub.endpoint)


def test_a_failed_pull_leaves_the_folder_marked_incomplete_until_a_pull_finishes(monkeypatch):
    usage = namedtuple("usage", "total used free")
    with Hub(REPO) as hub:
        with monkeypatch.context() as full:
            full.setattr(model_pull.shutil, "disk_usage", lambda path: usage(10, 10, 1000))
            with pytest.raises(PullError, match="free some space"):
                pull("tiny/llama", endpoint=hub.endpoint)
        folder = model_pull.destination("tiny/llama")
        assert model_pull.incomplete(folder)
        assert pull("tiny/llama", endpoint=hub.endpoint) == folder
    assert not model_pull.incomplete(folder) and not model_pull.incomplete(folder.parent)
