"""The window's Models list is read off the GUI thread (a GGUF's facts froze the window 9 s at every refresh), a
refresh asked meanwhile is coalesced, Cancel reports at once; Remove says what it did and tells the window; a .gguf
file can be added; an unfinished download offers Pull again; the window's pull messages use its own words."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from app import model_library as lib
from app import model_pull
from app.gui import models_page
from app.gui.models_page import ModelsPage
from app.pull_lock import LOCK
from tests.hub_server import CONFIG, REPO, WEIGHTS, Hub
from tests.lock_holder import held_elsewhere

pytestmark = pytest.mark.usefixtures("scratch_models")


def make_page(qtbot, confirm: bool = False, list_now: bool = True) -> ModelsPage:
    page = ModelsPage(confirm=lambda title, text: confirm, list_now=list_now)
    qtbot.addWidget(page)
    listed(qtbot, page)
    return page


def listed(qtbot, page: ModelsPage) -> None:
    qtbot.waitUntil(lambda: not page.listing, timeout=30000)


def pulled(qtbot, page: ModelsPage, endpoint: str) -> str:
    page.repo_edit.setText("tiny/llama")
    page.endpoint_edit.setText(endpoint)
    with qtbot.waitSignal(page.pull_ended, timeout=30000) as ended:
        assert page.start_pull()
    listed(qtbot, page)
    return ended.args[0]


class SlowList:
    """`model_library.list_models` held until `release` is set, counting its calls and the threads they run on."""

    def __init__(self, monkeypatch) -> None:
        self.release, self.threads, self.real = threading.Event(), [], lib.list_models
        monkeypatch.setattr(lib, "list_models", self)

    def __call__(self) -> list[lib.ModelEntry]:
        self.threads.append(threading.current_thread())
        self.release.wait(20)
        return self.real()


def test_the_list_is_read_off_the_gui_thread_and_a_refresh_meanwhile_is_coalesced(qtbot, monkeypatch):
    slow = SlowList(monkeypatch)
    page = make_page(qtbot, list_now=False)
    for _ in range(3):  # Refresh pressed three times while the first reading waits
        page.refresh()  # each returns at once: the reading is held until `release`, which only this test sets
    assert page.listing and page.table_model.rowCount() == 0
    qtbot.waitUntil(lambda: len(slow.threads) == 1)
    with qtbot.waitSignals([page.listed, page.listed], timeout=10000):
        slow.release.set()
    listed(qtbot, page)
    assert len(slow.threads) == 2  # the first reading, and one more for the two refreshes asked meanwhile
    assert threading.main_thread() not in slow.threads
    assert page.table_model.entries[0].source == "bundled"


def test_cancel_reports_at_once_while_the_list_is_slow(qtbot, monkeypatch):
    hold = threading.Event()
    page = make_page(qtbot)
    slow = SlowList(monkeypatch)
    with Hub(REPO, hold=("model.safetensors", hold)) as hub:
        try:
            page.repo_edit.setText("tiny/llama")
            page.endpoint_edit.setText(hub.endpoint)
            assert page.start_pull()
            qtbot.waitUntil(lambda: page.progress.value() > len(CONFIG), timeout=20000)
            with qtbot.waitSignal(page.pull_ended, timeout=3000) as ended:
                page.cancel_button.click()
            assert ended.args == ["cancelled"] and page.listing  # said while the list is still being read
            assert page.pull_status.text() == "The download was cancelled; pressing Pull again resumes it."
        finally:
            hold.set()
            slow.release.set()
    listed(qtbot, page)


def test_remove_says_what_it_did_and_tells_the_window(qtbot):
    page = make_page(qtbot, confirm=True)
    with Hub(REPO) as hub:
        assert pulled(qtbot, page, hub.endpoint) == "finished"
    page.select_name("tiny--llama")
    with qtbot.waitSignal(page.model_removed) as removed:
        page.remove_button.click()
    assert removed.args == [str(lib.models_dir() / "tiny--llama")]
    assert page.folder_status.text() == "Removed tiny--llama; its files were deleted."
    listed(qtbot, page)
    assert "tiny--llama" not in [e.name for e in page.table_model.entries]


def test_remove_is_refused_while_another_beamwise_downloads_the_model(qtbot):
    """Refused before "Delete ...? The files are deleted from the disk." is asked (it was asked, then refused)."""
    asked = []
    page = ModelsPage(confirm=lambda title, text: asked.append(text) or True)
    qtbot.addWidget(page)
    listed(qtbot, page)
    with Hub(REPO) as hub:
        pulled(qtbot, page, hub.endpoint)
    folder = model_pull.destination("tiny/llama")
    with held_elsewhere(folder) as other:
        page.select_name("tiny--llama")
        with qtbot.assertNotEmitted(page.model_removed):
            page.remove_button.click()
        assert asked == []
        assert (f"tiny--llama is being downloaded (process {other.pid}, which holds {folder / LOCK}); stop that "
                "download first" in page.folder_status.text())
        assert (folder / "model.safetensors").read_bytes() == WEIGHTS


def test_pull_again_on_another_row_while_a_pull_runs_leaves_its_fields(qtbot):
    """A double-click on an unfinished download wrote its repository into the pull box before the running pull
    refused it: the next Pull then downloaded the wrong repository."""
    hold = threading.Event()
    page = make_page(qtbot)
    other = lib.models_dir() / "tiny--other"
    other.mkdir(parents=True)
    (other / lib.MARKER).write_text(json.dumps({"repo": "tiny/other", "endpoint": "http://elsewhere:1",
                                                "revision": "main", "file": "x.gguf", "complete": False}))
    with Hub(REPO, hold=("model.safetensors", hold)) as hub:
        try:
            page.repo_edit.setText("tiny/llama")
            page.endpoint_edit.setText(hub.endpoint)
            assert page.start_pull()
            page.refresh()
            listed(qtbot, page)
            page.select_name("tiny--other")
            assert page.use_button.text() == "Pull again" and not page.use_button.isEnabled()
            with qtbot.assertNotEmitted(page.pull_ended):
                page.table.doubleClicked.emit(page.table.currentIndex())
            fields = (page.repo_edit.text(), page.file_edit.text(), page.endpoint_edit.text())
            assert fields == ("tiny/llama", "", hub.endpoint)
        finally:
            with qtbot.waitSignal(page.pull_ended, timeout=30000) as ended:
                hold.set()
    assert ended.args == ["finished"]
    assert (page.repo_edit.text(), page.file_edit.text()) == ("tiny/llama", "")
    listed(qtbot, page)


def test_add_gguf_file_offers_gguf_files_and_adds_the_one_chosen(qtbot, monkeypatch):
    page = make_page(qtbot)
    asked, added = [], []
    monkeypatch.setattr(models_page.QFileDialog, "getOpenFileName",
                        lambda *args: (asked.append(args[-1]), ("/models/smol.Q4_1.gguf", ""))[1])
    monkeypatch.setattr(page, "add_folder", added.append)
    page.add_gguf_button.click()
    assert "*.gguf" in asked[0] and added == [Path("/models/smol.Q4_1.gguf")]


def test_an_unfinished_download_offers_pull_again_which_resumes_it(qtbot, monkeypatch):
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    page = make_page(qtbot)
    with Hub(REPO) as hub:
        with monkeypatch.context() as full:  # the first pull stops once its marker is written
            full.setattr(model_pull.shutil, "disk_usage", lambda path: usage(10, 10, 1000))
            assert pulled(qtbot, page, hub.endpoint) == "failed"
        page.endpoint_edit.setText(model_pull.DEFAULT_ENDPOINT)  # the fields as the user left them
        page.repo_edit.clear()
        page.select_name("tiny--llama")
        assert page.use_button.text() == "Pull again" and page.use_button.isEnabled()
        assert "did not finish; pull it again to resume it (Pull again)" in page.problem_label.text()
        with qtbot.waitSignal(page.pull_ended, timeout=30000) as ended:
            page.use_button.click()
        assert ended.args == ["finished"] and page.endpoint_edit.text() == hub.endpoint
    listed(qtbot, page)
    page.select_name("tiny--llama")
    assert page.use_button.text() == "Use as generator"


def test_the_window_says_an_unreachable_hub_in_its_own_words(qtbot):
    page = make_page(qtbot)
    with Hub(REPO) as hub:
        endpoint = hub.endpoint  # closed once the block ends
    assert pulled(qtbot, page, endpoint) == "failed"
    said = page.pull_status.text()
    assert "type a mirror's address into Hub, and press Pull again" in said and "--endpoint" not in said


def test_a_download_in_progress_says_so_and_offers_no_pull_again(qtbot):
    """A model another Beamwise was still downloading read "the download did not finish; pull it again", in the list,
    `models info` and the window (its Pull again then only met the other pull's lock)."""
    folder = lib.models_dir() / "tiny--llama"
    folder.mkdir(parents=True)
    (folder / "config.json").write_bytes(CONFIG)
    marker = {"repo": "tiny/llama", "endpoint": "https://huggingface.co", "revision": "main", "file": None,
              "complete": False}
    (folder / lib.MARKER).write_text(json.dumps(marker), encoding="utf-8")
    with held_elsewhere(folder) as other:
        entry = lib.find("tiny--llama")
        assert entry.problem == f"it is being downloaded (process {other.pid}); use it once the pull has finished."
        page = make_page(qtbot)
        page.select_name("tiny--llama")
        assert not page.use_button.isEnabled() and page.use_button.text() != "Pull again"
    assert "pull it again to resume it" in lib.find("tiny--llama").problem  # stopped: Pull again again


def test_pull_again_takes_the_mirror_typed_into_hub_after_its_hub_failed(qtbot, monkeypatch):
    """"type a mirror's address into Hub, and press Pull again": Pull again put the marker's dead hub back into Hub
    and failed the same way."""
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    page = make_page(qtbot)
    with Hub(REPO) as gone:
        with monkeypatch.context() as full:  # a pull from `gone` stops once its marker is written
            full.setattr(model_pull.shutil, "disk_usage", lambda path: usage(10, 10, 1000))
            assert pulled(qtbot, page, gone.endpoint) == "failed"
    page.select_name("tiny--llama")
    with qtbot.waitSignal(page.pull_ended, timeout=30000) as ended:
        page.use_button.click()  # Pull again: its hub is closed now
    assert ended.args == ["failed"] and "type a mirror's address into Hub" in page.pull_status.text()
    with Hub(REPO) as mirror:
        page.endpoint_edit.setText(mirror.endpoint)
        listed(qtbot, page)
        page.select_name("tiny--llama")
        with qtbot.waitSignal(page.pull_ended, timeout=30000) as ended:
            page.use_button.click()
    assert ended.args == ["finished"] and page.endpoint_edit.text() == mirror.endpoint
