"""Removing, on the Models page, the model the settings use: the generator fell to nothing (the plan bar said "model
path ... does not exist") and nothing said why. The bundled model (or the default verifier) takes its place, said."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from tests.test_gui_server import memory_keyring, qsettings, window_for  # noqa: F401  (fixtures)


def test_a_removed_generator_and_prm_give_way_to_the_defaults(window_for, tmp_path) -> None:  # noqa: F811
    window = window_for()
    folder = str(tmp_path / "models" / "gone")
    window.controls.model_picker.set_source(folder)
    window.controls.verifier.set_choice("prm", folder)
    assert window.controls.verifier.choice() == ("prm", folder)
    window.models.model_removed.emit(folder)
    assert window.controls.model_picker.source() == "bundled"
    assert window.controls.verifier.choice() == ("logprob", None)
    said = window.statusBar().currentMessage()
    assert "the generator is the bundled model" in said and "the verifier is logprob" in said, said


def test_removing_another_model_changes_nothing(window_for, tmp_path) -> None:  # noqa: F811
    window = window_for()
    window.controls.model_picker.set_source("synthetic:tiny-llama")
    window.models.model_removed.emit(str(tmp_path / "other"))
    assert window.controls.model_picker.source() == "synthetic:tiny-llama"
    assert "Removed" not in window.statusBar().currentMessage()
