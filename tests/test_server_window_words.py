"""The window's words about a server: a refused key during a run is advised as the Server dialog advises it, the
hints name the way to the dialog as the window lays it out (Settings > Model > Generator > "Server (vLLM, SGLang,
llama.cpp)…"), and the dialog's Timeout takes what --request-timeout takes."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtWidgets import QFormLayout, QGroupBox

from app.gui.server_panel import ServerChoice, ServerDialog
from app.gui.terms import KEY_NEEDED_HINT, window_terms
from engine import events as ev
from engine.backends.openai import MAX_TIMEOUT_S, ServerConfig
from engine.config import SearchConfig
from engine.remote_search import run
from tests.fake_openai import MODEL, PRM, FakeServer
from tests.test_gui_server import (  # noqa: F401  (fixtures: every test here gets an empty keyring of its own)
    KEY,
    ask_server,
    dialog_for,
    memory_keyring,
    qsettings,
    window_for,
)
from tests.test_gui_server_words import run_failing

QUESTION = "A train travels 60 km in 45 minutes. What is its average speed in km/h?"
DIALOGS = "Check the API key and where it comes from."
WINDOWS = "Check the API key and where it comes from (Server… > API key)."


def refused_key_message(on_prm_server: bool) -> str:
    """The engine's own words for a 401, as a run's RunFailed carries them (from the generator's server, or from a
    PRM server beside it)."""
    search = SearchConfig(beams=1, width=2, step_tokens=16, max_steps=1,
                          **({"verifier": "prm", "verifier_model": PRM} if on_prm_server else {}))
    with FakeServer(key=None if on_prm_server else KEY) as generator, FakeServer(mode="prm", key=KEY) as prm:
        server = ServerConfig(generator.url, MODEL, prm_endpoint=prm.url if on_prm_server else None, backoff_s=0.0,
                              timeout_s=2.0, api_key="sk-wrong")  # sent and refused (none sent: it needs one)
        failed = list(run(QUESTION, server, search))[-1]
    assert isinstance(failed, ev.RunFailed) and "HTTP 401" in failed.message, failed
    return failed.message


@pytest.mark.parametrize("on_prm_server", [False, True])
def test_a_refused_keys_advice_reads_as_the_dialogs(on_prm_server: bool) -> None:
    """Before: "Check the API key of the Server… > Address server (Server… > API key: the variable that holds it)."
    which named a variable where the key was in the keyring, or where there was none."""
    said = window_terms(refused_key_message(on_prm_server))
    assert said.endswith(f"the API key was refused (Invalid API key). {WINDOWS}"), said
    assert "Address server" not in said and "variable" not in said and "--" not in said


@pytest.mark.parametrize("key_from", ["none", "keyring"])
def test_a_run_on_a_server_that_refuses_the_key_says_the_dialogs_advice(
        qtbot, window_for, monkeypatch, key_from: str) -> None:  # noqa: F811
    """With API key "No key" the run said "the API key was refused ... Check the API key" of a key never sent: it
    now says the server needs one, and where to give it."""
    window = window_for()
    with FakeServer(key=KEY + "-other") as server:  # the keyring's key (KEY) is refused too
        failed, reported = run_failing(qtbot, window, server, monkeypatch, key_from=key_from)
    advice = KEY_NEEDED_HINT if key_from == "none" else WINDOWS
    assert "HTTP 401" in failed.message and advice in reported, reported
    assert ("needs an API key, and none was sent" in reported) == (key_from == "none"), reported
    assert ("refused" in reported) == (key_from != "none"), reported
    assert "Address server" not in reported and "--" not in reported
    shown = window.panels.transcript.plain_text()
    assert advice in shown and "Address server" not in shown, shown


def test_the_connection_tests_advice_is_the_same_sentence(qtbot, monkeypatch) -> None:
    monkeypatch.setenv("BEAMWISE_TEST_KEY", KEY + "-other")  # a key sent and refused (No key: it needs one)
    with FakeServer(key=KEY) as server:
        ok, text = ask_server(qtbot, dialog_for(qtbot, server.url, key_from="env", env="BEAMWISE_TEST_KEY"))
    assert not ok and text.endswith(DIALOGS) and WINDOWS.startswith(DIALOGS[:-1]), text


PATH = re.compile(r'Settings > (\w+) > (\w+) > "([^"]+)"')


def the_path_in(text: str, window) -> None:
    """`text` names the way to the Server dialog as the window lays it out: the tab, the group, the row, the item."""
    found = PATH.search(text)
    assert found, text
    group, row, item = found.groups()
    picker = window.controls.model_picker
    box = picker.parentWidget()
    assert isinstance(box, QGroupBox) and box.title() == group, (box, group)
    form = box.layout()
    assert isinstance(form, QFormLayout) and form.labelForField(picker).text() == row
    assert picker.findText(item) >= 0, [picker.itemText(i) for i in range(picker.count())]
    assert "settings" in window.docks and window.docks["settings"].windowTitle() == "Settings"


def test_the_hints_name_the_real_way_to_the_server_dialog(window_for, monkeypatch) -> None:  # noqa: F811
    """Before: "Settings > Generator > Server…", a path with no Model group and an item the list does not hold."""
    from app.gui.model_picker import SERVER_SOURCE
    from app.gui.server_panel import UNSET_KEY_HINT
    from engine.errors import BeamwiseError

    window = window_for()
    the_path_in(UNSET_KEY_HINT, window)
    window.server.choice = None
    monkeypatch.setattr(window.server.picker, "source", lambda: SERVER_SOURCE)
    with pytest.raises(BeamwiseError) as caught:
        window.server.run_config()
    the_path_in(caught.value.user_message(), window)


def test_the_timeout_field_takes_what_request_timeout_takes(qtbot) -> None:
    """Before: 1 to 3,600 s, where --request-timeout takes up to a day; a saved 7,200 s came back as 3,600."""
    dialog = ServerDialog(ServerChoice("http://127.0.0.1:8000", MODEL, timeout_s=7200.0))
    qtbot.addWidget(dialog)
    assert dialog.timeout.maximum() == MAX_TIMEOUT_S and 0 < dialog.timeout.minimum() < 1
    assert dialog.edited().timeout_s == 7200.0
    dialog.timeout.setValue(MAX_TIMEOUT_S)
    assert dialog.edited().config().timeout_s == MAX_TIMEOUT_S  # the engine takes the largest too
    with pytest.raises(ValueError, match="at most 86,400"):
        ServerChoice("http://127.0.0.1:8000", MODEL, timeout_s=MAX_TIMEOUT_S + 1)
