"""The window's server use in the window's own words: the Server dialog's "Test connection" and the Transcript say
what to check by the dialog's fields (Server… > Address), never by the command line's options (--endpoint), as the
run-error dialog already did; a Stop while the server is still being checked says that nothing was recorded; and
the dialog grows for a long message instead of squashing its fields."""

from __future__ import annotations

import itertools
import re

import pytest

pytest.importorskip("pytestqt")

import keyring
from keyring.backends.fail import Keyring as NoKeyring
from PySide6.QtWidgets import QApplication

from app.store import SessionStore
from engine import events as ev
from tests.fake_openai import FakeServer
from tests.test_gui_server import (  # noqa: F401  (fixtures: every test here gets an empty keyring of its own)
    KEY,
    ask_server,
    choose_server,
    dialog_for,
    memory_keyring,
    qsettings,
    window_for,
)

OPTION = re.compile(r"--[a-z]")  # a command-line option, as --endpoint or --api-key-env


@pytest.mark.parametrize(
    ("server", "said"),
    [
        ({"mode": "500"}, "internal error. Check Server… > Address and Server… > Served model"),
        ({"mode": "not-http"}, "Check that Server… > Address is the address of an OpenAI-compatible server"),
        ({"mode": "nested"}, "check that Server… > Address is its OpenAI-compatible API"),
        ({"key": "sk-right"}, "needs an API key (it answered HTTP 401 to a request without one). Choose 'Environment "
                              "variable' or 'System keyring' as the API key"),  # the dialog's No key sends none
        ({"busy": ("60",)}, "HTTP 429: Too many requests. The server is busy and asks to wait 60 s: test again"),
        ({"busy": (None,)}, "HTTP 429: Too many requests. The server is busy: test again later"),
    ],
)
def test_the_connection_test_says_what_to_check_in_the_dialogs_words(qtbot, server: dict, said: str) -> None:
    """Before, every answer but three kinds passed the engine's hint through: "Check --endpoint and
    --served-model…"; a 429 asking to wait 60 s said to check the address; the 401 lacked its full stop."""
    with FakeServer(**server) as fake:
        ok, text = ask_server(qtbot, dialog_for(qtbot, fake.url))
    assert not ok and said in text, text
    assert not OPTION.search(text), text


def test_an_unset_key_variable_is_said_in_the_dialogs_words(qtbot, monkeypatch) -> None:
    """Before: "The environment variable UNSET_VAR (--api-key-env) is not set… or leave out --api-key-env."."""
    monkeypatch.delenv("BEAMWISE_UNSET_VAR", raising=False)
    dialog = dialog_for(qtbot, "http://127.0.0.1:1", key_from="env", env="BEAMWISE_UNSET_VAR")
    ok, text = ask_server(qtbot, dialog)
    assert not ok and "the environment variable BEAMWISE_UNSET_VAR is not set or is empty." in text, text
    assert "before starting Beamwise" in text and "'System keyring'" in text and not OPTION.search(text), text


def test_a_run_with_an_unset_key_variable_is_refused_before_it_starts(window_for, monkeypatch) -> None:  # noqa: F811
    """As a key missing from the keyring: said at Run, in the window's words, and no run starts."""
    monkeypatch.delenv("BEAMWISE_UNSET_VAR", raising=False)
    window = window_for()
    choose_server(window, "http://127.0.0.1:1", monkeypatch, key_from="none")
    choice = window.server.choice
    window.server.use(type(choice)(choice.endpoint, choice.served_model, "env", "BEAMWISE_UNSET_VAR"))
    errors: list[tuple[str, str]] = []
    window.error_reported.connect(lambda title, text: errors.append((title, text)))
    assert not window.start_run() and not window.running
    assert errors and errors[0][0] == "Cannot use the server", errors
    assert "BEAMWISE_UNSET_VAR is not set" in errors[0][1] and not OPTION.search(errors[0][1]), errors


def run_failing(qtbot, window, server: FakeServer, monkeypatch, key_from: str = "none") -> tuple[ev.RunFailed, str]:
    """A window run on `server` that fails: its event and the text of the error the window reported."""
    choose_server(window, server.url, monkeypatch, key_from=key_from)
    errors: list[str] = []
    window.error_reported.connect(lambda _title, text: errors.append(text))
    with qtbot.waitSignal(window.run_ended, timeout=20000) as blocker:
        assert window.start_run()
    assert isinstance(blocker.args[0], ev.RunFailed) and len(errors) == 1, (blocker.args, errors)
    return blocker.args[0], errors[0]


@pytest.mark.parametrize(
    ("server", "said"),
    [
        ({"mode": "500"}, "Check Server… > Address and Server… > Served model"),  # the server fails at once
        ({"key": KEY}, "Server… > API key"),  # the key server, and no key given
        ({"mode": "cut"}, "Check Server… > Address and Server… > Served model"),  # it drops the answer midway
    ],
)
def test_the_transcript_says_a_failure_in_the_words_of_the_error_dialog(
    qtbot, window_for, monkeypatch, server: dict, said: str  # noqa: F811
) -> None:
    """Before, the dialog said "Check Server… > Address…" and the Transcript, under it, "Check --endpoint and
    --served-model…" and "Check the API key (--api-key-env NAME…)"."""
    window = window_for()
    with FakeServer(**server) as fake:
        failed, reported = run_failing(qtbot, window, fake, monkeypatch)
    shown = window.panels.transcript.plain_text()
    assert OPTION.search(failed.message)  # the engine's words, which the window translates
    assert said in reported and reported.split("\n\n")[0] in shown, (reported, shown)
    assert not OPTION.search(shown), shown


def test_a_stop_while_the_server_is_checked_says_nothing_was_recorded(
    qtbot, window_for, monkeypatch, tmp_path  # noqa: F811
) -> None:
    """Before, Esc while a silent server was being checked said "Stopped before step 1 finished; no step was
    chosen", though no search began and no session was stored; the CLI says nothing was recorded."""
    window = window_for()
    with FakeServer(mode="silent", delay=60) as server:
        choose_server(window, server.url, monkeypatch, key_from="none")
        with qtbot.waitSignal(window.run_ended, timeout=10000) as blocker:
            assert window.start_run()
            assert server.asked.wait(10)  # the model listing is waiting on the server
            window.stop_action.trigger()
    assert isinstance(blocker.args[0], ev.RunCancelled)
    said = "Stopped before the search started: nothing was recorded"
    assert window.statusBar().currentMessage() == f"{said}."
    assert said in window.panels.transcript.plain_text()
    assert "Stopped before step 1" not in window.panels.transcript.plain_text()
    assert window.status.step.text() == "step -"
    window.bridge.shutdown()  # closes the session database
    assert SessionStore(tmp_path / "sessions.db").list_sessions() == []


def test_the_dialog_grows_for_a_long_message_and_nothing_overlaps(qtbot) -> None:
    """Before, a wrapped message (the keyring unavailable) squashed the fields of a 362x286 dialog whose size hint
    was 500x328: Address and Timeout overlapped."""
    dialog = dialog_for(qtbot, "http://127.0.0.1:8000", key_from="keyring")
    dialog.show()
    qtbot.waitExposed(dialog)
    before = keyring.get_keyring()
    keyring.set_keyring(NoKeyring())
    try:
        dialog.key.setText(KEY)
        dialog.accept()
    finally:
        keyring.set_keyring(before)
    QApplication.processEvents()
    assert "system keyring cannot be used" in dialog.answer.text()
    hint = dialog.sizeHint()
    assert dialog.width() >= hint.width() and dialog.height() >= hint.height(), (dialog.size(), hint)
    rows = [dialog.endpoint, dialog.model, dialog.key_from, dialog.key_env, dialog.key, dialog.timeout,
            dialog.batched, dialog.test_button, dialog.answer]
    for upper, lower in itertools.pairwise(rows):
        assert upper.geometry().bottom() < lower.geometry().top(), (upper, lower)
    for widget in rows:
        assert widget.height() >= widget.minimumSizeHint().height(), widget
