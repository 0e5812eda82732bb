"""What the window remembers between launches (QSettings): search settings, model, question, layout."""

from __future__ import annotations

import json
import os
from typing import Any

from PySide6.QtCore import QByteArray, QSettings
from PySide6.QtWidgets import QMainWindow

from app.early_exit import thresholds_path
from app.json_types import typed_fields
from engine.config import CacheConfig, ModelSpec, SearchConfig

ORGANIZATION = "Beamwise"
APPLICATION = "Beamwise"
FORMAT_VERSION = 1  # bump when the stored shape changes; older values are then ignored
WINDOW_FILE = "window.ini"  # in BEAMWISE_CONFIG_DIR, beside early_exit.json


def default_settings() -> QSettings:
    """The user's settings. With BEAMWISE_CONFIG_DIR set, window.ini in that folder, beside early_exit.json (the
    variable moved the thresholds, and a test's or a second profile's window still read and wrote the user's
    settings). Without it, where they have always been, so that none are lost: the registry on Windows, a plist
    on macOS, ~/.config/Beamwise/Beamwise.conf elsewhere."""
    if os.environ.get("BEAMWISE_CONFIG_DIR"):  # set and not empty, as thresholds_path reads it
        return QSettings(str(thresholds_path().parent / WINDOW_FILE), QSettings.Format.IniFormat)
    return QSettings(ORGANIZATION, APPLICATION)


def save_configs(settings: QSettings, model: ModelSpec, search: SearchConfig, cache: CacheConfig) -> None:
    settings.setValue("format", FORMAT_VERSION)
    settings.setValue("model", json.dumps({"source": model.source, "dtype": model.dtype}))
    settings.setValue("search", json.dumps(search.to_dict()))
    settings.setValue("cache", json.dumps(cache.to_dict()))


def load_configs(settings: QSettings) -> tuple[ModelSpec, SearchConfig, CacheConfig] | None:
    """The stored configs, or None when there are none or they no longer validate (defaults then apply)."""
    if _int(settings.value("format")) != FORMAT_VERSION:
        return None
    try:
        model = ModelSpec(**typed_fields(ModelSpec, _json(settings, "model")))
        search = SearchConfig(**typed_fields(SearchConfig, _json(settings, "search")))
        cache = CacheConfig(**{"prefix_cache": True, **typed_fields(CacheConfig, _json(settings, "cache"))})
    except (TypeError, ValueError):  # a renamed field, a value of another type (a damaged file), or one a newer
        # version allowed
        return None
    return model, search, cache


def save_question(settings: QSettings, question: str) -> None:
    settings.setValue("question", question)


def load_question(settings: QSettings) -> str:
    value = settings.value("question", "")
    return value if isinstance(value, str) else ""


def save_window(settings: QSettings, window: QMainWindow) -> None:
    settings.setValue("window/geometry", window.saveGeometry())
    settings.setValue("window/state", window.saveState(FORMAT_VERSION))


def restore_window(settings: QSettings, window: QMainWindow) -> bool:
    """Restore size, position, docks and toolbars; False when nothing usable was stored."""
    geometry, state = settings.value("window/geometry"), settings.value("window/state")
    restored = isinstance(geometry, QByteArray) and window.restoreGeometry(geometry)
    if isinstance(state, QByteArray):
        restored = window.restoreState(state, FORMAT_VERSION) and restored
    return bool(restored)


def _json(settings: QSettings, key: str) -> dict[str, Any]:
    value = settings.value(key)
    data = json.loads(value) if isinstance(value, str) else None
    if not isinstance(data, dict):
        raise ValueError(f"stored {key} settings are not an object")
    return data


def _int(value: object) -> int | None:
    try:
        return int(value)  # ini files give strings back
    except (TypeError, ValueError):
        return None
