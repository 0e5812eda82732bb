"""app/json_types.py: the type check behind `sessions import` and the window's stored settings."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings

from app.gui import settings as saved
from app.gui.server_panel import SETTINGS_KEY, ServerChoice, load_choice
from app.json_types import conforms, described, field_types, typed_fields
from engine import events as ev
from engine.config import CacheConfig, ModelSpec, SearchConfig


def sample(hint: Any) -> Any:
    """A JSON value of type `hint`; raises for a kind of hint it does not know, as conforms must then learn it."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        return sample(args[0])
    if origin is tuple:
        return [sample(args[0])] if args[-1] is Ellipsis else [sample(a) for a in args]
    if origin is dict or hint is Any:
        return {"a": 1}
    if dataclasses.is_dataclass(hint):
        return {name: sample(kind) for name, kind in field_types(hint).items() if name != "type"}
    return {int: 3, float: 0.5, str: "a", bool: True, tuple: [1, "a"], type(None): None}[hint]


@pytest.mark.parametrize("kind", sorted(ev.EVENT_TYPES.values(), key=lambda k: k.type), ids=lambda k: k.type)
def test_every_field_of_every_event_is_a_type_the_check_reads(kind):
    for name, hint in field_types(kind).items():
        if name == "type":
            continue
        assert conforms(sample(hint), hint), (name, hint)
        assert not conforms(object(), hint) or hint is Any, (name, hint)
        assert described(hint)


def test_the_check_refuses_what_json_can_hold_but_the_field_cannot():
    assert not conforms(2**63, int) and conforms(2**63 - 1, int)  # SQLite's integers
    assert not conforms(True, float) and conforms(1, float)
    assert not conforms(2**63, float) and conforms(1e30, float)  # a huge integer is no REAL SQLite can store
    assert not conforms("\ud800", str)  # a lone surrogate: JSON reads it, UTF-8 cannot write it
    assert not conforms([1, "x"], tuple[int, ...]) and conforms([[1, 2, 0.5]], tuple[tuple[int, int, float], ...])
    assert not conforms({1: 2}, dict[str, Any])
    assert described(tuple[ev.CandidateMemory, ...]) == "a list of CandidateMemory"
    assert described(int | None) == "int or null"
    with pytest.raises(ValueError, match="SearchConfig's 'beams' should be int, not 'x'"):
        typed_fields(SearchConfig, {"beams": "x"})
    with pytest.raises(ValueError, match="'nonsense' should be no field"):
        typed_fields(SearchConfig, {"nonsense": 1})


@pytest.mark.parametrize("key, field, value", [
    ("model", "source", None), ("model", "source", 5), ("search", "beams", "x"), ("search", "step_delimiter", [1]),
    ("cache", "kv_budget_bytes", 10**30), ("cache", "pcie_gbps", {}), ("search", "verifier_model", 7),
])  # fmt: skip
def test_damaged_stored_settings_are_forgotten_and_the_window_starts_on_defaults(qtbot, tmp_path, key, field, value):
    """A stored model source of null stopped the window from opening (AttributeError in ModelSpec)."""
    from app.gui.bridge import SearchBridge
    from app.gui.main_window import MainWindow

    settings = QSettings(str(tmp_path / "b.ini"), QSettings.Format.IniFormat)
    saved.save_configs(settings, ModelSpec("synthetic:tiny-llama"), SearchConfig(beams=3), CacheConfig())
    settings.setValue(key, json.dumps({**json.loads(settings.value(key)), field: value}))
    assert saved.load_configs(settings) is None
    window = MainWindow(SearchBridge(), settings=settings, dialogs=False)
    qtbot.addWidget(window)
    try:
        assert window.controls.configs()[1].beams == SearchConfig().beams  # the defaults, not the damaged file
    finally:
        window.bridge.shutdown()


def test_a_damaged_stored_server_is_forgotten(tmp_path):
    settings = QSettings(str(tmp_path / "b.ini"), QSettings.Format.IniFormat)
    good = {"endpoint": "http://127.0.0.1:8000", "served_model": "m", "key_from": "none", "key_env": "",
            "timeout_s": 60.0, "one_request_per_path": False}
    settings.setValue(SETTINGS_KEY, json.dumps(good))
    assert load_choice(settings) == ServerChoice("http://127.0.0.1:8000", "m")
    for field, value in (("endpoint", 5), ("timeout_s", "soon"), ("served_model", None)):
        settings.setValue(SETTINGS_KEY, json.dumps({**good, field: value}))
        assert load_choice(settings) is None, field
