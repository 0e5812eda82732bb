"""The Server dialog's advice names its own fields for every hint the engine gives about a server: the redirect's
hint said "Give the address the server redirects to as the endpoint", the command line's word, which the
dialog's translation (--endpoint -> Server… > Address) missed. Every hint is walked, so a new one cannot miss it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")

from app.gui.server_panel import _window_message
from engine.errors import RemoteError
from tests.fake_openai import FakeServer
from tests.test_gui_server import (  # noqa: F401  (fixtures: every test here gets an empty keyring of its own)
    ask_server,
    dialog_for,
    memory_keyring,
    qsettings,
)

ENGINE = Path(__file__).resolve().parents[1] / "engine"
ENDPOINT = re.compile(r"(?<![\w-])endpoint\b", re.IGNORECASE)  # the word alone, or --endpoint: not the window's


def _text(node: ast.expr) -> str | None:
    """A hint's text as written: an f-string's fields as X, a sum of texts joined."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(part.value if isinstance(part, ast.Constant) else "X" for part in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left), _text(node.right)
        return None if left is None or right is None else left + right
    return None


def engine_hints() -> list[str]:
    """Every hint the server's code and the engine's errors give: `hint=` arguments, *_HINT constants and the
    `hint` of error classes."""
    found = []
    for path in [*sorted((ENGINE / "backends").glob("*.py")), ENGINE / "errors.py"]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.keyword) and node.arg == "hint":
                found.append(_text(node.value))
            elif isinstance(node, ast.Assign) and any(isinstance(target, ast.Name) and
                                                      (target.id == "hint" or target.id.endswith("_HINT"))
                                                      for target in node.targets):
                found.append(_text(node.value))
    return [hint for hint in found if hint]


def test_the_walk_finds_the_hints_that_name_the_address() -> None:
    hints = engine_hints()
    assert len(hints) > 20 and sum("{endpoint}" in hint for hint in hints) >= 4, hints


@pytest.mark.parametrize("hint", engine_hints())
def test_no_hint_names_the_address_in_the_command_lines_words_in_the_dialog(hint: str) -> None:
    said = _window_message(RemoteError("the server at http://127.0.0.1:8000 failed", hint=hint))
    assert not ENDPOINT.search(said) and "{endpoint}" not in said, said


def test_the_test_connection_of_a_redirecting_server_names_the_dialogs_field(qtbot) -> None:
    with FakeServer(mode="redirect") as server:
        ok, text = ask_server(qtbot, dialog_for(qtbot, server.url))
    assert not ok and "Give the address the server redirects to as Server… > Address (https://" in text, text
    assert not ENDPOINT.search(text), text
