"""The model and verifier pickers by keyboard: on the closed box the arrow, Page, Home and End keys, the wheel and
typed letters move among the real choices only and open no dialog (each Down past the last synthetic model opened
"Choose a transformers model folder", so "GGUF file…" and "Server…" could not be reached); the items that open a
dialog are chosen from the open list (Alt+Down, F4, Space, then arrows and Enter) or with a click."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

from app.gui import model_picker, verifier_picker
from app.gui.model_picker import FOLDER_CHOICE, GGUF_CHOICE, SERVER_CHOICE, ModelPicker
from app.gui.verifier_picker import VerifierPicker

MODELS = ["bundled", "synthetic:tiny-llama", "synthetic:tiny-qwen2", "synthetic:tiny-opt"]
VERIFIERS = ["logprob", "self-judge", "prm:synthetic:tiny-qwen-prm", "prm:synthetic:tiny-skywork-prm",
             "prm:synthetic:tiny-math-shepherd", "prm:synthetic:tiny-rlhflow-prm"]


@pytest.fixture
def asked(monkeypatch) -> list[str]:
    """The dialogs the pickers opened (stand-ins, each cancelled), by title; "server" for the server dialog."""
    titles: list[str] = []
    for module in (model_picker, verifier_picker):
        monkeypatch.setattr(module.QFileDialog, "getExistingDirectory",
                            lambda parent, title, *rest: titles.append(title) or "")
    monkeypatch.setattr(model_picker.QFileDialog, "getOpenFileName",
                        lambda parent, title, *rest: titles.append(title) or ("", ""))
    return titles


@pytest.fixture
def models(qtbot, asked) -> ModelPicker:
    picker = ModelPicker()
    qtbot.addWidget(picker)
    picker.server_requested.connect(lambda: asked.append("server"))
    picker.show()
    picker.setFocus()
    return picker


@pytest.fixture
def verifiers(qtbot, asked) -> VerifierPicker:
    picker = VerifierPicker()
    qtbot.addWidget(picker)
    picker.show()
    picker.setFocus()
    return picker


def walked(picker, key: Qt.Key, presses: int) -> list[str]:
    """The current item's data after each of `presses` presses of `key` on the closed box."""
    seen = []
    for _ in range(presses):
        QTest.keyClick(picker, key)
        seen.append(picker.currentData())
    return seen


def wheeled(picker, notches: int) -> list[str]:
    """The current item's data after each wheel notch on the closed box (down for a negative count)."""
    seen = []
    for _ in range(abs(notches)):
        delta = QPoint(0, 120 if notches > 0 else -120)
        centre = QPointF(picker.rect().center())
        QApplication.sendEvent(picker, QWheelEvent(centre, picker.mapToGlobal(centre), QPoint(), delta,
                                                   Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier,
                                                   Qt.ScrollPhase.NoScrollPhase, False))
        seen.append(picker.currentData())
    return seen


def test_arrows_on_the_closed_model_picker_move_among_the_models_and_open_no_dialog(models, asked):
    changed = []
    models.source_changed.connect(changed.append)
    assert walked(models, Qt.Key.Key_Down, 8) == [*MODELS[1:], *[MODELS[-1]] * 5]
    assert changed == MODELS[1:] and models.source() == MODELS[-1]  # each move chose that model, as before
    assert walked(models, Qt.Key.Key_Up, 5) == [*MODELS[-2::-1], MODELS[0], MODELS[0]]
    assert walked(models, Qt.Key.Key_End, 1) == [MODELS[-1]]
    assert walked(models, Qt.Key.Key_PageDown, 2) == [MODELS[-1]] * 2
    assert walked(models, Qt.Key.Key_Home, 1) == [MODELS[0]]
    assert walked(models, Qt.Key.Key_PageUp, 1) == [MODELS[0]]
    assert asked == []


def test_the_wheel_and_typed_letters_on_the_closed_model_picker_open_no_dialog(models, asked):
    assert wheeled(models, -6) == [*MODELS[1:], *[MODELS[-1]] * 3]
    assert wheeled(models, 6) == [*MODELS[-2::-1], *[MODELS[0]] * 3]
    walked(models, Qt.Key.Key_S, 1)  # "s": the synthetic models, and "Server…" below them
    assert models.source().startswith("synthetic:")
    QTest.keyClicks(models, "g")  # "GGUF file…"
    QTest.keyClicks(models, "t")  # "Transformers folder…"
    assert asked == [] and models.source().startswith("synthetic:")


def choose_from_the_open_list(picker, opener: Qt.Key, modifier: Qt.KeyboardModifier, data: str) -> None:
    """Open the list with `opener` (and `modifier`), walk down to the item holding `data`, press Enter."""
    QTest.keyClick(picker, opener, modifier)
    assert picker.view().isVisible()
    view = picker.view()
    while view.currentIndex().row() != picker.findData(data):
        before = view.currentIndex().row()
        QTest.keyClick(view, Qt.Key.Key_Down)
        assert view.currentIndex().row() != before, f"the open list's arrows cannot reach {data}"
    QTest.keyClick(view, Qt.Key.Key_Return)


@pytest.mark.parametrize(("opener", "modifier"), [(Qt.Key.Key_Down, Qt.KeyboardModifier.AltModifier),
                                                  (Qt.Key.Key_F4, Qt.KeyboardModifier.NoModifier),
                                                  (Qt.Key.Key_Space, Qt.KeyboardModifier.NoModifier)],
                         ids=["Alt+Down", "F4", "Space"])
def test_the_open_model_list_reaches_every_item_and_opens_its_dialog(models, asked, opener, modifier):
    models.set_source("synthetic:tiny-qwen2")
    for data in (GGUF_CHOICE, SERVER_CHOICE, FOLDER_CHOICE):
        choose_from_the_open_list(models, opener, modifier, data)
        assert not models.view().isVisible()
    assert asked == ["Choose a GGUF model file", "server", "Choose a transformers model folder (with config.json)"]
    assert models.source() == "synthetic:tiny-qwen2"  # each cancelled: the model before stays
    assert walked(models, Qt.Key.Key_Down, 2) == [MODELS[-1]] * 2 and len(asked) == 3  # closed again: no dialog


def test_a_click_on_a_dialog_item_of_the_open_list_opens_its_dialog(models, asked):
    QTest.mouseClick(models, Qt.MouseButton.LeftButton)
    view = models.view()
    assert view.isVisible()
    item = view.visualRect(view.model().index(models.findData(GGUF_CHOICE), 0)).center()
    QTest.mouseMove(view.viewport(), item)  # the pointer goes to the item, then clicks it
    QTest.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=item)
    assert asked == ["Choose a GGUF model file"] and not view.isVisible()


def test_arrows_on_the_closed_verifier_picker_open_no_prm_folder_dialog(verifiers, asked):
    assert walked(verifiers, Qt.Key.Key_Down, 8) == [*VERIFIERS[1:], *[VERIFIERS[-1]] * 3]
    assert verifiers.choice() == ("prm", "synthetic:tiny-rlhflow-prm")
    assert walked(verifiers, Qt.Key.Key_End, 1) == [VERIFIERS[-1]]
    assert wheeled(verifiers, -2) == [VERIFIERS[-1]] * 2
    QTest.keyClicks(verifiers, "p")
    assert asked == []
    choose_from_the_open_list(verifiers, Qt.Key.Key_Down, Qt.KeyboardModifier.AltModifier,
                              verifier_picker.FOLDER_CHOICE)
    assert asked == ["Choose a PRM folder (config.json, tokenizer, weights)"]
    assert verifiers.choice()[1] is not None and verifiers.choice()[1].startswith("synthetic:")  # cancelled: kept


def test_the_pickers_say_how_to_reach_their_dialog_items(models, verifiers):
    assert "Alt+Down" in models.toolTip() and "GGUF" in models.toolTip() and "server" in models.toolTip()
    assert "Alt+Down" in verifiers.toolTip() and "PRM folder" in verifiers.toolTip()
