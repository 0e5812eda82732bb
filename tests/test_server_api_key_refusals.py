"""An API key that an HTTP header cannot carry, and an --api-key-env without a name, are refused on one line that
names where the key came from and what is wrong, never the key (README: the key is never written anywhere).

Before, a key with a CR or LF (`export KEY="$(cat key.txt)"` of a file saved on Windows) or a typographic quote
failed the run as a fault in Beamwise, exit 1, with the key in the traceback's last line ("ValueError: Invalid
header value b'Bearer ...'", or a UnicodeEncodeError); the window's "Test connection" showed the same text."""

from __future__ import annotations

import pytest

from app.cli import main
from engine.backends.keys import KeyUnusable
from engine.backends.openai import OpenAICompletions, ServerConfig
from tests.fake_openai import MODEL, FakeServer

QUESTION = "What is 2+3?"
SECRET = "zq9-s3cret"  # every test's key begins with it: no message may hold it


def cli_run(url: str, *extra: str) -> list[str]:
    return ["run", QUESTION, "--backend", "openai", "--endpoint", url, "--served-model", MODEL, "--no-save",
            "--beams", "1", "--width", "2", "--max-steps", "1", "--step-tokens", "8", "--request-timeout", "5",
            *extra]


def one_error(capsys) -> str:
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.startswith("beamwise: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert SECRET not in out + err, out + err
    return lines[0]


@pytest.mark.parametrize(("key", "said"), [
    (f"{SECRET}\r\nX-Other: 1", "holds a line break (CR or LF)"),
    (f"{SECRET}\rmore", "holds a line break (CR or LF)"),
    (f"sk-\u201c{SECRET}\u201d", "holds a character beyond Latin-1 (such as a typographic quote"),
    (f"{SECRET}\x01tail", "holds a control or invisible character"),
])  # fmt: skip
def test_a_key_a_header_cannot_carry_is_one_user_error_that_names_the_variable_not_the_key(
        capsys, monkeypatch, key: str, said: str) -> None:
    monkeypatch.setenv("BEAMWISE_TEST_KEY", key)
    with FakeServer() as server:
        code = main(cli_run(server.url, "--api-key-env", "BEAMWISE_TEST_KEY"))
        assert not server.requests and not server.headers  # refused before any request
    line = one_error(capsys)
    assert code == 2, line
    assert "the API key in the environment variable BEAMWISE_TEST_KEY (--api-key-env)" in line, line
    assert said in line and "cannot be sent in an HTTP header" in line, line
    assert ("Copy the key again without it and set BEAMWISE_TEST_KEY again (bash or zsh: export "
            'BEAMWISE_TEST_KEY=KEY; PowerShell: $env:BEAMWISE_TEST_KEY = "KEY"; cmd: set BEAMWISE_TEST_KEY=KEY).'
            in line), line
    assert "fault in Beamwise" not in line


@pytest.mark.parametrize("around", [("", "\r"), ("", "\r\n"), ("  ", "\n"), ("\t", " ")])
def test_spaces_and_line_breaks_around_a_key_are_dropped_as_a_bearer_token_holds_none(
        monkeypatch, around: tuple[str, str]) -> None:
    """A key read by `$(cat key.txt)` from a file saved on Windows ends in a CR; `set NAME=KEY ` keeps a space."""
    monkeypatch.setenv("BEAMWISE_TEST_KEY", f"{around[0]}{SECRET}{around[1]}")
    with FakeServer(key=SECRET) as server:  # 401 unless the header is exactly "Bearer <key>"
        backend = OpenAICompletions(ServerConfig(server.url, MODEL, "BEAMWISE_TEST_KEY", retries=0))
        assert backend.check_model() == (MODEL,)
        backend.complete("2+3=", max_tokens=2, stop=[], temperature=0.0, top_p=1.0, seed=0)
    assert [h.get("Authorization") for h in server.headers] == [f"Bearer {SECRET}"]


def test_a_keyring_key_a_header_cannot_carry_says_where_to_type_it_again() -> None:
    """The window's keyring hands the key to the engine directly: the same check, in words that fit it."""
    config = ServerConfig("http://127.0.0.1:1", MODEL, api_key=f"{SECRET}\u2019", key_source="keyring")
    with pytest.raises(KeyUnusable) as refused:
        OpenAICompletions(config)
    message = refused.value.user_message()
    assert message.startswith("the API key from the system keyring holds a character beyond Latin-1"), message
    assert "Type the key again without it under Settings > Model > Generator" in message and SECRET not in message
    assert SECRET not in repr(refused.value.args)


def test_the_windows_connection_test_says_the_key_is_unusable_in_its_own_words(monkeypatch) -> None:
    server_panel = pytest.importorskip("app.gui.server_panel")
    monkeypatch.setenv("BEAMWISE_TEST_KEY", f"{SECRET}\r\nmore")
    choice = server_panel.ServerChoice("http://127.0.0.1:1", MODEL, "env", "BEAMWISE_TEST_KEY")
    ok, text = server_panel._test(choice.config(), lambda: False)
    assert not ok and "holds a line break (CR or LF)" in text and SECRET not in text, text
    assert "(Server… > API key)" in text and "--" not in text and "fault in Beamwise" not in text, text
    keyring = server_panel.ServerChoice("http://127.0.0.1:1", MODEL, "keyring")
    ok, text = server_panel._test(keyring.config(typed_key=f"sk-\u201c{SECRET}\u201d"), lambda: False)
    assert not ok and "from the system keyring holds a character beyond Latin-1" in text and SECRET not in text


@pytest.mark.parametrize("name", ["", "  "])
def test_an_api_key_env_without_a_name_says_it_needs_one(capsys, name: str) -> None:
    """Before: "the environment variable  (--api-key-env) is not set or is empty. Export  with ..."."""
    with FakeServer() as server:
        code = main(cli_run(server.url, "--api-key-env", name))
        assert not server.requests
    line = one_error(capsys)
    assert code == 2 and "--api-key-env needs a variable name" in line, line
    assert "Export  " not in line and "variable  (" not in line, line


def test_a_whitespace_only_key_is_said_empty(capsys, monkeypatch) -> None:
    monkeypatch.setenv("BEAMWISE_TEST_KEY", " \r\n")
    with FakeServer() as server:
        code = main(cli_run(server.url, "--api-key-env", "BEAMWISE_TEST_KEY"))
    line = one_error(capsys)
    assert code == 2 and "the environment variable BEAMWISE_TEST_KEY (--api-key-env) is not set or is empty" in line
