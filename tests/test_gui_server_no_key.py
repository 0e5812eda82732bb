"""The Server dialog's words about the key: a server that needs a key, tested with API key "No key", says it needs
one (it said "the API key was refused ... Check the API key", though none was sent), and a missing keyring key names
the way to the dialog as the window lays it out."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from app.server_keys import KeyMissing, load_key
from engine.backends.keys import KEYRING_DIALOG
from tests.fake_openai import FakeServer
from tests.test_gui_server import (  # noqa: F401  (fixtures: every test here gets an empty keyring of its own)
    KEY,
    ask_server,
    dialog_for,
    memory_keyring,
    qsettings,
    window_for,
)
from tests.test_server_window_words import the_path_in


def test_no_key_to_a_server_that_needs_one_says_it_needs_one(qtbot) -> None:
    with FakeServer(key=KEY) as server:
        ok, text = ask_server(qtbot, dialog_for(qtbot, server.url, key_from="none"))
    assert not ok and f"the server at {server.url} needs an API key" in text, text
    assert "Choose 'Environment variable' or 'System keyring' as the API key" in text, text
    assert "refused" not in text and "Check the API key" not in text, text


def test_a_key_sent_and_refused_is_still_said_refused(qtbot, monkeypatch) -> None:
    monkeypatch.setenv("BEAMWISE_TEST_KEY", "sk-wrong")
    with FakeServer(key=KEY) as server:
        ok, text = ask_server(qtbot, dialog_for(qtbot, server.url, key_from="env", env="BEAMWISE_TEST_KEY"))
    assert not ok and "HTTP 401: the API key was refused" in text and text.endswith("where it comes from."), text


def test_a_missing_keyring_key_names_the_dialog_as_the_window_lays_it_out(window_for) -> None:  # noqa: F811
    """It named "Settings > Generator > Server…", a path with no Model group and an item the list does not hold."""
    with pytest.raises(KeyMissing) as caught:
        load_key("http://127.0.0.1:9")
    said = caught.value.user_message()
    assert KEYRING_DIALOG in said and "Settings > Generator" not in said, said
    the_path_in(said, window_for())
