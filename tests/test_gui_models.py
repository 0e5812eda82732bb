"""The window's Models page against a hub on 127.0.0.1: the list with each model's facts, pull with a progress bar
(speed, time left), cancel and resume, remove after asking, and "Use" putting a model into the settings."""

from __future__ import annotations

import threading
import time

import pytest

from app import model_library
from app.gui.models_page import COLUMNS, ModelsPage
from tests.hub_server import CONFIG, REPO, WEIGHTS, Hub

pytestmark = pytest.mark.usefixtures("scratch_models")


def page_with(qtbot, answers: list[bool] | None = None) -> tuple[ModelsPage, list[str]]:
    asked: list[str] = []

    def confirm(title: str, text: str) -> bool:
        asked.append(text)
        return answers.pop(0) if answers else False

    page = ModelsPage(confirm=confirm)
    qtbot.addWidget(page)
    listed(qtbot, page)
    return page, asked


def listed(qtbot, page: ModelsPage) -> None:
    """Wait until the list shows the models folder as it is now: it is read off the GUI thread."""
    qtbot.waitUntil(lambda: not page.listing, timeout=30000)


def row_of(page: ModelsPage, name: str) -> dict[str, str]:
    model = page.table_model
    for row in range(model.rowCount()):
        cells = {COLUMNS[c]: model.data(model.index(row, c)) for c in range(model.columnCount())}
        if cells["name"] == name:
            return cells
    raise AssertionError(f"{name} is not listed: {[e.name for e in model.entries]}")


def pull_and_wait(qtbot, page: ModelsPage, endpoint: str, repo: str = "tiny/llama") -> str:
    page.repo_edit.setText(repo)
    page.endpoint_edit.setText(endpoint)
    with qtbot.waitSignal(page.pull_ended, timeout=30000) as ended:
        assert page.start_pull()
    listed(qtbot, page)
    return ended.args[0]


def test_lists_the_bundled_model_with_its_facts(qtbot):
    page, _ = page_with(qtbot)
    row = row_of(page, "SmolLM2-135M-Instruct")
    assert row["role"] == "generator" and row["architecture"] == "LlamaForCausalLM"
    assert row["parameters"].endswith(" M") and row["context length"] == "8,192"
    assert row["KV per token"] == "46.1 kB"  # 2 x 30 layers x 3 heads x 64 x 4 bytes = 46,080


def test_pull_shows_progress_then_lists_the_model(qtbot):
    page, _ = page_with(qtbot)
    seen: list[str] = []
    page.progress.valueChanged.connect(lambda value: seen.append(page.progress.format()))
    with Hub(REPO) as hub:
        assert pull_and_wait(qtbot, page, hub.endpoint) == "finished"
    assert any("/s" in line and "left" in line for line in seen), seen
    assert page.progress.value() == page.progress.maximum()
    row = row_of(page, "tiny--llama  (downloaded)")
    assert row["architecture"] == "LlamaForCausalLM" and row["dtype"] == "bfloat16"
    assert row["KV per token"] == "512 B"  # K and V x 2 layers x 2 KV heads x 16 dims x 4 bytes
    assert "Downloaded to" in page.pull_status.text() and page.pull_button.isEnabled()


def start_stalled_pull(qtbot, page: ModelsPage, hub: Hub) -> None:
    """Start pulling tiny/llama from `hub`, made with hold on the weights, and wait for the half it sends."""
    page.repo_edit.setText("tiny/llama")
    page.endpoint_edit.setText(hub.endpoint)
    assert page.start_pull()
    qtbot.waitUntil(lambda: page.progress.value() > len(CONFIG), timeout=20000)


def test_cancel_while_the_hub_is_silent_ends_at_once_then_pull_again_resumes(qtbot):
    hold = threading.Event()
    page, _ = page_with(qtbot)
    with Hub(REPO, hold=("model.safetensors", hold)) as hub:
        try:  # the hub sends half of the weights and then nothing
            start_stalled_pull(qtbot, page, hub)
            assert page.pull_status.text().startswith("Downloading tiny/llama") and page.cancel_button.isEnabled()
            with qtbot.waitSignal(page.pull_ended, timeout=10000) as ended:
                page.cancel_button.click()
        finally:
            hold.set()
        assert ended.args == ["cancelled"] and "resumes" in page.pull_status.text()
        hub.hold = None
        assert pull_and_wait(qtbot, page, hub.endpoint) == "finished"
        assert hub.ranges == [f"bytes={len(WEIGHTS) // 2}-"]
    assert (model_library.models_dir() / "tiny--llama" / "model.safetensors").read_bytes() == WEIGHTS


def test_closing_the_window_during_a_stalled_download_stops_it_without_waiting(qtbot):
    hold = threading.Event()
    page, _ = page_with(qtbot)
    with Hub(REPO, hold=("model.safetensors", hold)) as hub:
        try:
            start_stalled_pull(qtbot, page, hub)
            thread, started = page._thread, time.monotonic()
            page.shutdown()
            assert not thread.isRunning() and time.monotonic() - started < 3
        finally:
            hold.set()


def test_unreachable_hub_and_bad_repo_say_what_to_do(qtbot):
    page, _ = page_with(qtbot)
    page.repo_edit.setText("not a repo")
    assert not page.start_pull() and "owner/name" in page.pull_status.text()
    with Hub(REPO) as hub:
        endpoint = hub.endpoint
    assert pull_and_wait(qtbot, page, endpoint) == "failed"
    assert "offline" in page.pull_status.text() and page.progress.format() == "failed"


def test_remove_asks_first_and_only_offers_downloaded_models(qtbot):
    page, asked = page_with(qtbot, answers=[False, True])
    with Hub(REPO) as hub:
        pull_and_wait(qtbot, page, hub.endpoint)
    page.select_name("SmolLM2-135M-Instruct")
    assert not page.remove_button.isEnabled()  # bundled: never deleted by Beamwise
    page.select_name("tiny--llama")
    assert page.remove_button.isEnabled()
    page.remove_button.click()
    assert "tiny--llama" in asked[0] and row_of(page, "tiny--llama  (downloaded)")  # answered No: kept
    page.select_name("tiny--llama")
    page.remove_button.click()
    listed(qtbot, page)
    assert len(asked) == 2 and "tiny--llama" not in [e.name for e in page.table_model.entries]
    assert not (model_library.models_dir() / "tiny--llama").exists()


def test_use_puts_the_model_into_the_window_settings(qtbot, tmp_path):
    from PySide6.QtCore import QSettings

    from app.gui.bridge import SearchBridge
    from app.gui.main_window import MainWindow

    window = MainWindow(SearchBridge(), settings=QSettings(str(tmp_path / "w.ini"), QSettings.Format.IniFormat),
                        dialogs=False)
    qtbot.addWidget(window)
    with Hub(REPO) as hub:
        pull_and_wait(qtbot, window.models, hub.endpoint)
    window.models.select_name("tiny--llama")
    assert window.models.use_button.text() == "Use as generator"
    window.models.use_button.click()
    model, _, _ = window.controls.configs()
    assert model.source == str(model_library.models_dir() / "tiny--llama")
    window.close()


def test_a_prm_is_listed_with_its_family_and_used_as_the_verifier(qtbot, tmp_path):
    from PySide6.QtCore import QSettings

    from app.gui.bridge import SearchBridge
    from app.gui.main_window import MainWindow
    from engine.verifiers.synthetic_prm import save_synthetic_prm

    folder = save_synthetic_prm("tiny-qwen-prm", model_library.models_dir() / "tiny-qwen-prm")
    window = MainWindow(SearchBridge(), settings=QSettings(str(tmp_path / "w.ini"), QSettings.Format.IniFormat),
                        dialogs=False)
    qtbot.addWidget(window)
    window.models.refresh()
    listed(qtbot, window.models)
    assert row_of(window.models, "tiny-qwen-prm")["role"] == "PRM (qwen-prm)"
    window.models.select_name("tiny-qwen-prm")
    assert window.models.use_button.text() == "Use as verifier"
    window.models.use_button.click()
    _, search, _ = window.controls.configs()
    assert (search.verifier, search.verifier_model) == ("prm", str(folder))
    window.close()


def test_the_progress_of_a_download_past_2_gb_is_shown_whole(qtbot):
    """Byte counts cross threads as objects: a C int signal wrapped 3 GB to -1.3 GB."""
    from app.gui.models_page import PullWorker
    from app.model_pull import PullProgress

    page, _ = page_with(qtbot)
    worker = PullWorker("owner/big", None, "http://127.0.0.1:9")
    page._worker = worker
    worker._report(PullProgress(15_000_000_000, 3_000_000_000, started=time.monotonic()))
    page._show_progress()
    page._worker = None
    assert page.progress.value() / page.progress.maximum() == pytest.approx(0.2)
    assert page.progress.format().startswith("20% 3.0 GB of 15.0 GB")


def test_progress_reported_from_a_plain_thread_reaches_the_page_on_its_timer(qtbot):
    """The clock beside a transfer is a Python thread: its reports wait in the worker, and the page's timer takes
    them on the GUI thread (no Qt call from that thread)."""
    from app.gui.models_page import PullWorker
    from app.model_pull import PullProgress

    page, _ = page_with(qtbot)
    page._worker = PullWorker("owner/name", None, "http://127.0.0.1:9")
    page._progress_timer.start()
    clock = threading.Thread(target=page._worker._report, args=(PullProgress(400, 100, started=time.monotonic()),))
    clock.start()
    clock.join()
    qtbot.waitUntil(lambda: page.progress.format().startswith("25% 100 B of 400 B"), timeout=2000)
    assert page._worker.take_report() is None  # taken once
    page._progress_timer.stop()
    page._worker = None
