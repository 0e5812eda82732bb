"""The window's "Server…" generator against the fake server on 127.0.0.1: the dialog and its connection test,
the key in the keyring (never in the settings or the session database), a run, and Stop of a request in flight."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")

import keyring
from keyring.backend import KeyringBackend
from keyring.backends.fail import Keyring as NoKeyring
from PySide6.QtCore import QCoreApplication, QEvent, QSettings
from PySide6.QtWidgets import QDialog

from app.gui.bridge import SearchBridge
from app.gui.main_window import MainWindow
from app.gui.model_picker import SERVER_CHOICE, SERVER_SOURCE
from app.gui.server_panel import ServerChoice, ServerDialog, load_choice
from app.store import SessionStore
from engine import events as ev
from engine.config import CacheConfig, ModelSpec, SearchConfig
from tests.fake_openai import MODEL, FakeServer, closed_port
from tests.test_gui_bridge import CountingLoader, run_fake

KEY = "sk-window-key-42"


class MemoryKeyring(KeyringBackend):
    """The system keyring as a dict (keyring's own backend API)."""

    priority = 1

    def __init__(self) -> None:
        super().__init__()
        self.saved: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.saved.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.saved[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        self.saved.pop((service, username), None)


@pytest.fixture(autouse=True)
def memory_keyring():
    """Never the user's keyring: every test here gets an empty one of its own."""
    before = keyring.get_keyring()
    backend = MemoryKeyring()
    keyring.set_keyring(backend)
    yield backend
    keyring.set_keyring(before)


@pytest.fixture
def qsettings(tmp_path: Path) -> QSettings:
    return QSettings(str(tmp_path / "beamwise.ini"), QSettings.Format.IniFormat)


def dialog_for(qtbot, url: str, model: str = MODEL, key_from: str = "none", env: str = "") -> ServerDialog:
    dialog = ServerDialog(None)
    qtbot.addWidget(dialog)
    dialog.endpoint.setText(url)
    dialog.model.setText(model)
    dialog.key_from.setCurrentIndex(dialog.key_from.findData(key_from))
    dialog.key_env.setText(env)
    return dialog


def ask_server(qtbot, dialog: ServerDialog) -> tuple[bool, str]:
    with qtbot.waitSignal(dialog.tested, timeout=10000) as blocker:
        dialog.test_button.click()
    return tuple(blocker.args)


def test_the_connection_test_says_what_it_found(qtbot, monkeypatch) -> None:
    monkeypatch.setenv("BEAMWISE_TEST_KEY", "sk-wrong")
    with FakeServer(key="sk-right") as server:
        ok, text = ask_server(qtbot, dialog_for(qtbot, server.url))
        assert not ok and "needs an API key (it answered HTTP 401 to a request without one)" in text  # No key
        ok, text = ask_server(qtbot, dialog_for(qtbot, server.url, key_from="env", env="BEAMWISE_TEST_KEY"))
        assert not ok and "API key was refused" in text
        monkeypatch.setenv("BEAMWISE_TEST_KEY", "sk-right")
        dialog = dialog_for(qtbot, server.url, key_from="env", env="BEAMWISE_TEST_KEY")
        ok, text = ask_server(qtbot, dialog)
        assert ok and text.startswith(f"Connected: {MODEL} at {server.url}")
        assert dialog.answer.text().startswith("Connected") and dialog.test_button.isEnabled()
        ok, text = ask_server(
            qtbot, dialog_for(qtbot, server.url, model="llama-70b", key_from="env", env="BEAMWISE_TEST_KEY")
        )
        assert not ok and "serves fake-model, not 'llama-70b'" in text and "--served-model" not in text
    ok, text = ask_server(qtbot, dialog_for(qtbot, f"http://127.0.0.1:{closed_port()}"))
    assert not ok and "cannot reach the server" in text and text.endswith("that the server is running.")


def test_a_fault_during_the_connection_test_is_said_not_left_asking(qtbot, monkeypatch) -> None:
    """Before, an error other than the engine's own (a server's odd answer met a TypeError) ended the test's thread:
    the dialog said "Asking…" with the button off for ever."""

    def broken(config, **_):
        raise TypeError("'int' object is not iterable")

    monkeypatch.setattr("app.gui.server_panel.check_connection", broken)
    dialog = dialog_for(qtbot, "http://127.0.0.1:8000")
    ok, text = ask_server(qtbot, dialog)
    assert not ok and text.startswith("TypeError: 'int' object is not iterable") and "fault in Beamwise" in text
    assert dialog.test_button.isEnabled() and "Asking" not in dialog.answer.text()


def test_closing_the_dialog_ends_a_test_that_waits_on_a_silent_server(qtbot) -> None:
    """Before, a server that took the request and never answered held the test for its whole timeout after the
    dialog closed, and its answer then landed in the closed dialog. Closing now drops the connection at once and
    nothing arrives later."""
    from app.gui import background

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        dialog = dialog_for(qtbot, f"http://127.0.0.1:{silent.getsockname()[1]}")
        dialog.timeout.setValue(30)
        dialog.show()
        answers: list[tuple] = []
        dialog.tested.connect(lambda *answer: answers.append(answer))
        dialog.test_button.click()
        connection, _ = silent.accept()
        with connection:
            connection.settimeout(5)
            assert connection.recv(4096).startswith(b"GET /v1/models")  # the test is waiting for the answer
            dialog.reject()
            while connection.recv(4096):  # TimeoutError if the client keeps waiting: it must hang up, not time out
                pass
        qtbot.waitUntil(lambda: background._RELAY.pending == 0)  # the test's thread ended and its answer was handed on
        assert answers == [] and "Asking" in dialog.answer.text()  # no late result in the closed dialog


@pytest.mark.parametrize("address", ["http://127.0.0.1:abc", "http://127.0.0.1:99999", "http://127.0.0.1:8000/v1?x=1"])
def test_an_address_the_engine_would_refuse_is_refused_by_the_dialog(qtbot, address: str) -> None:
    """Before, OK kept a port that is not a number (or a query) and the run then failed naming '--endpoint',
    an option of the command line, not of the window."""
    dialog = dialog_for(qtbot, address)
    ok, text = ask_server(qtbot, dialog)
    assert not ok and f"the server address {address!r} is not a URL (" in text and "--endpoint" not in text
    dialog.accept()
    assert dialog.result() != QDialog.DialogCode.Accepted and dialog.choice is None


def test_bad_fields_are_said_without_asking_the_server(qtbot) -> None:
    dialog = dialog_for(qtbot, "gpu-box:8000")
    ok, text = ask_server(qtbot, dialog)
    assert not ok and "is not a URL" in text
    dialog = dialog_for(qtbot, "http://127.0.0.1:8000", model="")
    dialog.accept()
    assert dialog.result() != QDialog.DialogCode.Accepted and "Name the served model" in dialog.answer.text()


def test_a_typed_key_goes_to_the_keyring_and_nowhere_else(qtbot, qsettings, memory_keyring, tmp_path) -> None:
    dialog = dialog_for(qtbot, "http://127.0.0.1:8000", key_from="keyring")
    dialog.key.setText(KEY)
    dialog.accept()
    assert dialog.result() == QDialog.DialogCode.Accepted
    assert memory_keyring.saved == {("beamwise", "http://127.0.0.1:8000"): KEY}
    assert dialog.key.text() == "" and "sk-" not in repr(dialog.choice)


def test_without_a_keyring_the_dialog_says_so_and_stays_open(qtbot) -> None:
    before = keyring.get_keyring()
    keyring.set_keyring(NoKeyring())
    try:
        dialog = dialog_for(qtbot, "http://127.0.0.1:8000", key_from="keyring")
        dialog.key.setText(KEY)
        dialog.accept()
    finally:
        keyring.set_keyring(before)
    assert dialog.result() != QDialog.DialogCode.Accepted
    assert "system keyring cannot be used" in dialog.answer.text() and "Environment variable" in dialog.answer.text()


@pytest.fixture
def window_for(qtbot, qsettings, tmp_path):
    made: list[MainWindow] = []

    def make() -> MainWindow:
        db = tmp_path / "sessions.db"
        bridge = SearchBridge(loader=CountingLoader(), run=run_fake, store_factory=lambda: SessionStore(db))
        window = MainWindow(bridge, settings=qsettings, dialogs=False)
        qtbot.addWidget(window)
        made.append(window)
        window.controls.set_configs(ModelSpec(), SearchConfig(beams=2, width=2, max_steps=4), CacheConfig())
        window.question.setPlainText("A train travels 60 km in 45 minutes. What is its average speed in km/h?")
        return window

    yield make
    for window in made:
        window.bridge.shutdown()


def choose_server(window: MainWindow, url: str, monkeypatch, key_from: str = "keyring", batched: bool = False) -> None:
    """Pick "Server…" in the generator list and fill the dialog as a user would."""

    def fill_and_accept(dialog: ServerDialog) -> int:
        dialog.endpoint.setText(url)
        dialog.model.setText(MODEL)
        dialog.key_from.setCurrentIndex(dialog.key_from.findData(key_from))
        dialog.key.setText(KEY if key_from == "keyring" else "")
        dialog.batched.setChecked(batched)
        dialog.accept()
        return dialog.result()

    monkeypatch.setattr(ServerDialog, "exec", fill_and_accept)
    picker = window.controls.model_picker
    picker.activated.emit(picker.findData(SERVER_CHOICE))



def test_the_server_dialog_is_not_kept_once_answered(window_for, monkeypatch, qsettings) -> None:
    """Each "Server…" made a dialog, a child of the window kept for its life after its OK or Cancel."""
    window = window_for()
    for url in ("http://127.0.0.1:1", "http://127.0.0.1:2"):
        choose_server(window, url, monkeypatch, key_from="none")
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    assert window.findChildren(ServerDialog) == []
    assert load_choice(qsettings).endpoint == "http://127.0.0.1:2"  # what the last one said was kept

def test_a_run_through_the_server_from_the_window(
    qtbot, window_for, qsettings, memory_keyring, monkeypatch, tmp_path
) -> None:
    window = window_for()
    with FakeServer(key=KEY) as server:
        choose_server(window, server.url, monkeypatch)
        assert window.controls.configs()[0].source == SERVER_SOURCE
        assert window.controls.model_picker.currentText() == f"Server: {MODEL} at {server.url[7:]}"
        with qtbot.waitSignal(window.run_ended, timeout=20000) as blocker:
            assert window.start_run()
    terminal = blocker.args[0]
    assert isinstance(terminal, ev.RunFinished) and "The answer is" in terminal.answer
    assert server.headers and all(h["Authorization"] == f"Bearer {KEY}" for h in server.headers)
    assert window.status.device.text() == "device: remote: KV is managed by the server"
    assert "KV: remote: KV is managed by the server" in window.panels.tree.legend.plain_text()
    assert "remote: KV is managed by the server" in window.panels.charts.plots["device"].titleLabel.text
    qtbot.waitUntil(lambda: "Remote: the server holds the model" in window.plan_bar.sentence.text(), timeout=3000)
    qsettings.sync()
    assert KEY.encode() not in Path(qsettings.fileName()).read_bytes()
    assert load_choice(qsettings) == ServerChoice(server.url, MODEL, "keyring")
    window.bridge.shutdown()  # closes the session database
    assert KEY.encode() not in (tmp_path / "sessions.db").read_bytes()
    store = SessionStore(tmp_path / "sessions.db")
    assert store.get_session(1)["status"] == "finished"


def test_stop_ends_the_request_in_flight(qtbot, window_for, memory_keyring, monkeypatch) -> None:
    window = window_for()
    with FakeServer(mode="slow", delay=15.0) as server:
        choose_server(window, server.url, monkeypatch, key_from="none")
        with qtbot.waitSignal(window.run_ended, timeout=10000) as blocker:
            assert window.start_run()
            qtbot.waitUntil(lambda: len(server.requests) == 1, timeout=5000)  # the first answer is being made
            pressed = time.monotonic()
            window.stop_action.trigger()
        stopped = time.monotonic() - pressed
        qtbot.waitUntil(lambda: len(server.abandoned) == 1, timeout=5000)
    assert isinstance(blocker.args[0], ev.RunCancelled)
    assert stopped < 5.0  # not the 15 s the answer would take


def test_a_missing_keyring_key_is_said_before_the_run(
    qtbot, window_for, qsettings, memory_keyring, monkeypatch
) -> None:
    window = window_for()
    choose_server(window, "http://127.0.0.1:8000", monkeypatch)
    memory_keyring.saved.clear()  # say the user removed it from the keyring since
    errors = []
    window.error_reported.connect(lambda title, text: errors.append((title, text)))
    assert not window.start_run()
    assert errors and errors[0][0] == "Cannot use the server" and "no API key for http://127.0.0.1:8000" in errors[0][1]


def test_run_again_of_a_server_session_picks_the_server_again(
    qtbot, window_for, memory_keyring, monkeypatch, tmp_path
) -> None:
    window = window_for()
    with FakeServer(key=KEY) as server:
        choose_server(window, server.url, monkeypatch, batched=True)
        window.controls.set_configs(
            ModelSpec(source=SERVER_SOURCE), SearchConfig(beams=3, width=2, max_steps=4), CacheConfig()
        )
        with qtbot.waitSignal(window.run_ended, timeout=20000):
            assert window.start_run()
        window.controls.model_picker.set_source("bundled")
        window.controls.set_configs(ModelSpec(), SearchConfig(), CacheConfig())
        window.store = SessionStore(tmp_path / "sessions.db")
        window.load_session_settings(1)
        model, search, _ = window.controls.configs()
        assert model.source == SERVER_SOURCE and (search.beams, search.width) == (3, 2)
        assert window.server.run_config().api_key == KEY  # the key from the keyring, as recorded: keyring
        assert window.server.run_config().one_request_per_path
        with qtbot.waitSignal(window.run_ended, timeout=20000) as blocker:
            assert window.start_run()
    window.store.close()
    assert isinstance(blocker.args[0], ev.RunFinished)
    assert server.requests[0]["n"] == 6 and all(r["n"] in (2, 6) for r in server.requests)  # n=M per path
