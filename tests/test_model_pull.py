"""Pulling a model with huggingface_hub's real client from a hub-layout server on 127.0.0.1: progress, the
free-disk check, cancel and resume by HTTP range, and a clear message when the hub cannot be reached."""

from __future__ import annotations

import threading
import time
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
    assert seen[-1][0] == sum(len(b) for b in REPO["tiny/llama"].values())
    assert "/s" in seen[-1][1] and "left" in seen[-1][1]
    entry = model_library.find("tiny--llama")
    assert entry.downloaded and entry.facts is not None and entry.facts.kv.num_layers == 2


def test_cancel_on_a_stalled_download_keeps_the_bytes_received_and_the_next_pull_resumes_by_range():
    cancel, hold = threading.Event(), threading.Event()

    def stop_midway(progress) -> None:
        if progress.done > 300_000:
            cancel.set()

    with Hub(REPO, hold=("model.safetensors", hold)) as hub:
        try:  # the hub sends half of the weights and then nothing: the cancel must not wait for more bytes
            with pytest.raises(PullCancelled, match="resumes"):
                pull("tiny/llama", endpoint=hub.endpoint, report=stop_midway, cancel=cancel)
        finally:
            hold.set()
        part = model_pull.destination("tiny/llama") / model_pull.PARTIAL / "model.safetensors.part"
        assert part.read_bytes() == WEIGHTS[: len(WEIGHTS) // 2]
        hub.hold = None
        folder = pull("tiny/llama", endpoint=hub.endpoint)
        assert f"bytes={len(WEIGHTS) // 2}-" in hub.ranges
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
    (mine / "tokenizer.json").write_text("{}", encoding="utf-8")  # `models add` takes a folder with both
    (mine / "model.safetensors").write_bytes(WEIGHTS)
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


def test_ctrl_d_at_the_remove_question_keeps_the_model(capsys, monkeypatch):
    """End of input (Ctrl+D) at "Delete ...? [y/N]" raised EOFError with a traceback: it is a no."""
    from app.cli import main

    with Hub(REPO) as hub:
        assert main(["models", "pull", "tiny/llama", "--endpoint", hub.endpoint]) == 0
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)

    def no_more_input(prompt: str) -> str:
        raise EOFError

    monkeypatch.setattr("builtins.input", no_more_input)
    assert main(["models", "remove", "tiny--llama"]) == 1
    assert "kept it" in capsys.readouterr().out
    assert main(["models", "info", "tiny--llama"]) == 0


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


@pytest.mark.parametrize("endpoint", ["notaurl", "huggingface.co", "ftp://example.org", "http://", "http://x:port"])
def test_a_malformed_endpoint_is_refused_without_asking_and_without_pull_again(endpoint):
    """It said "...missing an 'http://' or 'https://' protocol.); pull again to resume": no pull can mend it."""
    with pytest.raises(PullError, match=r"^--endpoint must be an http:// or https:// URL") as e:
        pull("a/b", endpoint=endpoint)
    assert "pull again" not in str(e.value) and repr(endpoint) in str(e.value)
    assert not model_library.models_dir().exists()


def test_an_endpoint_that_is_no_hub_is_named_so_without_pull_again():
    """A web server that answers every path with a page said "failed (JSONDecodeError ...); pull again to resume",
    with nothing to resume and no pull that could mend it."""
    from tests.test_pull_words import HtmlSite

    with HtmlSite() as site, pytest.raises(PullError) as e:
        pull("a/b", endpoint=site)
    assert "answered, but not as a model hub does" in str(e.value) and "pull again" not in str(e.value)


def test_the_cli_refuses_a_malformed_endpoint_in_one_line(capsys):
    from app.cli import main

    assert main(["models", "pull", "a/b", "--endpoint", "notaurl"]) == 2
    err = capsys.readouterr().err
    assert err == "beamwise: error: --endpoint must be an http:// or https:// URL, such as https://huggingface.co " \
                  "(got 'notaurl').\n"


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
        assert "did not finish" in model_library.find("tiny--llama").problem  # listed before any file arrived
        pull("tiny/llama", endpoint=hub.endpoint)
    entry = model_library.find("tiny--llama")
    assert entry.problem == "" and entry.downloaded
    model_library.remove(entry)
    assert not model_pull.destination("tiny/llama").exists()


def test_a_hub_whose_api_never_answers_ends_the_pull_as_silent_not_offline(monkeypatch):
    monkeypatch.setattr(model_pull, "TIMEOUT", 0.5)
    with Hub(REPO) as hub:
        hub.api_hold = threading.Event()
        try:
            with pytest.raises(PullError, match=r"answers but went silent: nothing came for 0\.5 s") as e:
                pull("tiny/llama", endpoint=hub.endpoint)
        finally:
            hub.api_hold.set()
    assert "offline" not in str(e.value)


def test_a_stalled_file_ends_with_a_message_and_the_bytes_received_are_resumed(monkeypatch):
    monkeypatch.setattr(model_pull, "TIMEOUT", 0.5)
    hold = threading.Event()
    with Hub(REPO, hold=("model.safetensors", hold)) as hub:
        try:
            with pytest.raises(PullError, match=r"middle of a file; the 524\.3 kB of model\.safetensors received"):
                pull("tiny/llama", endpoint=hub.endpoint)
        finally:
            hold.set()
        hub.hold = None
        folder = pull("tiny/llama", endpoint=hub.endpoint)
        assert hub.ranges == [f"bytes={len(WEIGHTS) // 2}-"]
    assert (folder / "model.safetensors").read_bytes() == WEIGHTS


def test_a_connection_cut_midway_keeps_every_byte_that_arrived():
    with Hub(REPO) as hub:
        hub.cut = {"model.safetensors"}
        with pytest.raises(PullError, match=r"broke off; the 524\.3 kB of model\.safetensors received are kept"):
            pull("tiny/llama", endpoint=hub.endpoint)
        part = model_pull.destination("tiny/llama") / model_pull.PARTIAL / "model.safetensors.part"
        assert part.read_bytes() == WEIGHTS[: len(WEIGHTS) // 2]
        hub.cut, seen = set(), []
        folder = pull("tiny/llama", endpoint=hub.endpoint, report=seen.append)
    assert (folder / "model.safetensors").read_bytes() == WEIGHTS
    assert seen[-1].resumed == len(CONFIG) + len(WEIGHTS) // 2  # the speed counts only what came this time


def test_progress_is_reported_while_a_file_is_still_arriving():
    hold, midway = threading.Event(), []

    def report(progress) -> None:  # the hub holds the weights at half until a report shows that half
        if len(CONFIG) < progress.done < progress.total:
            midway.append(progress.done)
            hold.set()

    with Hub(REPO, hold=("model.safetensors", hold)) as hub:
        try:
            pull("tiny/llama", endpoint=hub.endpoint, report=report)
        finally:
            hold.set()
    assert midway[0] == len(CONFIG) + len(WEIGHTS) // 2


def test_files_come_from_the_commit_listed_and_a_new_version_is_not_joined_to_the_old_partial():
    old, new = dict(REPO["tiny/llama"]), {"config.json": CONFIG, "model.safetensors": WEIGHTS[::-1]}
    with Hub({"tiny/llama": old}) as hub:
        hub.cut = {"model.safetensors"}
        with pytest.raises(PullError, match="broke off"):
            pull("tiny/llama", endpoint=hub.endpoint)
        assert set(hub.revisions) == {hub.commit}  # not "main", which can move between two files
        hub.repos["tiny/llama"], hub.commit, hub.cut = new, "f" * 40, set()
        folder = pull("tiny/llama", endpoint=hub.endpoint)
        assert hub.ranges == []  # the old half was dropped, not continued
    assert (folder / "model.safetensors").read_bytes() == WEIGHTS[::-1]


def test_a_finished_model_is_fetched_again_when_the_repository_has_a_new_commit():
    changed = CONFIG.replace(b'"hidden_size": 64', b'"hidden_size": 32')  # the same size, other bytes
    with Hub({"tiny/llama": dict(REPO["tiny/llama"])}) as hub:
        folder = pull("tiny/llama", endpoint=hub.endpoint)
        asked = len(hub.revisions)
        assert pull("tiny/llama", endpoint=hub.endpoint) == folder and len(hub.revisions) == asked  # nothing new
        hub.repos["tiny/llama"]["config.json"], hub.commit = changed, "e" * 40  # same size as before
        pull("tiny/llama", endpoint=hub.endpoint)
    assert (folder / "config.json").read_bytes() == changed


def test_cancel_while_the_hub_has_not_answered_the_listing_ends_at_once():
    cancel = threading.Event()
    with Hub(REPO) as hub:
        hub.api_hold = threading.Event()
        threading.Timer(0.3, cancel.set).start()
        started = time.monotonic()
        try:
            with pytest.raises(PullCancelled, match="resumes"):
                pull("tiny/llama", endpoint=hub.endpoint, cancel=cancel)
        finally:
            hub.api_hold.set()
    assert time.monotonic() - started < model_pull.TIMEOUT / 2


def test_a_new_commits_pull_that_failed_early_does_not_keep_the_old_commits_files_on_resume():
    with Hub({"tiny/llama": dict(REPO["tiny/llama"])}) as hub:
        folder = pull("tiny/llama", endpoint=hub.endpoint)
        hub.repos["tiny/llama"]["model.safetensors"], hub.commit = WEIGHTS[::-1], "d" * 40  # same size, new bytes
        hub.cut = {"config.json"}  # the new commit's pull breaks off before it reaches the weights
        with pytest.raises(PullError, match="broke off"):
            pull("tiny/llama", endpoint=hub.endpoint)
        hub.cut = set()
        pull("tiny/llama", endpoint=hub.endpoint)
    assert (folder / "model.safetensors").read_bytes() == WEIGHTS[::-1]
