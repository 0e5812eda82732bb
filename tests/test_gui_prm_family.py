"""A PRM in the window whose family must be named: asked for after the folder dialog (the refusal told the user to
type `rlhflow-prm:PATH`, which a folder dialog has nowhere to take), named in the picker's item, and kept in the
status bar at the default 1400 px (it was the first field dropped, so a PRM was never named there)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PySide6.QtWidgets import QApplication, QDialog, QFileDialog, QInputDialog, QMainWindow

from app.gui.status_line import StatusLine
from app.gui.verifier_picker import VerifierPicker
from engine import events as ev
from engine.prm_folders import locate_prm
from engine.verifiers.synthetic_prm import save_synthetic_prm


def unnamed_causal_lm(folder: Path) -> Path:
    """An RLHFlow-shaped PRM whose folder and config name no family: detection cannot tell it from a chat model."""
    save_synthetic_prm("tiny-rlhflow-prm", folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config["_name_or_path"] = "someone/my-lm"
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


@pytest.fixture
def picker(qtbot) -> VerifierPicker:
    made = VerifierPicker()
    qtbot.addWidget(made)
    return made


def choose_folder(picker: VerifierPicker, monkeypatch, folder: Path, answer: tuple[str, bool] | None) -> list:
    """Pick "PRM from a folder…" with the dialog returning `folder`; the family dialog answers `answer` (the family's
    label, and whether OK was pressed). The family dialog's (text, labels, width) and the refusals come back."""
    asked: list = []
    refusals: list[str] = []
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(folder))

    def exec_(dialog: QInputDialog) -> int:
        if answer is None:
            pytest.fail("the family was asked for a folder whose family is known, or that is no causal LM")
        dialog.adjustSize()
        asked.append((dialog.labelText(), dialog.comboBoxItems(), dialog.width()))
        dialog.setTextValue(answer[0])
        return QDialog.DialogCode.Accepted if answer[1] else QDialog.DialogCode.Rejected

    monkeypatch.setattr(QInputDialog, "exec", exec_)
    picker.refused.connect(refusals.append)
    picker.activated.emit(picker.findData("<prm-folder>"))
    return [asked, refusals]


def test_a_causal_lm_folder_gets_the_family_the_user_names(picker, monkeypatch, tmp_path):
    folder = unnamed_causal_lm(tmp_path / "my-lm")
    asked, refusals = choose_folder(picker, monkeypatch, folder, ("RLHFlow PRM", True))
    assert refusals == []  # was: "...name the family before the path: math-shepherd:PATH or rlhflow-prm:PATH."
    (text, labels, width), = asked
    assert labels == ["Math-Shepherd", "RLHFlow PRM"] and "my-lm" in text and "PATH" not in text
    assert width < 800  # its words wrap: QInputDialog.getItem put them in one line 1,874 px wide
    assert picker.choice() == ("prm", f"rlhflow-prm:{folder}")
    assert locate_prm(picker.choice()[1]) == (folder, "rlhflow-prm")  # what the run loads
    assert picker.currentText() == "PRM my-lm (RLHFlow PRM)"


def test_cancelling_the_family_keeps_the_verifier_before_and_says_nothing(picker, monkeypatch, tmp_path):
    folder = unnamed_causal_lm(tmp_path / "my-lm")
    picker.set_choice("prm", "synthetic:tiny-qwen-prm")
    asked, refusals = choose_folder(picker, monkeypatch, folder, ("Math-Shepherd", False))
    assert len(asked) == 1 and refusals == []
    assert picker.choice() == ("prm", "synthetic:tiny-qwen-prm")
    assert picker.findData(f"prm:math-shepherd:{folder}") < 0 and picker.findData(f"prm:{folder}") < 0


@pytest.mark.parametrize("architectures", [["BertForSequenceClassification"], "LlamaForCausalLM", None])
def test_a_folder_that_is_no_causal_lm_is_refused_without_asking(picker, monkeypatch, tmp_path, architectures):
    folder = tmp_path / "other"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": architectures}), encoding="utf-8")
    asked, refusals = choose_folder(picker, monkeypatch, folder, None)
    assert asked == [] and len(refusals) == 1 and "PATH" not in refusals[0]
    assert picker.choice() == ("logprob", None)


def test_a_causal_lm_missing_its_value_head_is_refused_as_such(picker, monkeypatch, tmp_path):
    """Skywork's name with a causal LM's architecture and no v_head: the download is incomplete, no family to ask."""
    folder = save_synthetic_prm("tiny-skywork-prm", tmp_path / "skywork-prm", drop_head=True)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    (folder / "config.json").write_text(json.dumps({**config, "architectures": ["Qwen2ForCausalLM"]}),
                                        encoding="utf-8")
    asked, refusals = choose_folder(picker, monkeypatch, folder, None)
    assert asked == [] and len(refusals) == 1 and "value head (v_head.summary) is missing" in refusals[0]
    assert picker.choice() == ("logprob", None)


def test_a_detected_folder_is_not_asked_about(picker, monkeypatch, tmp_path):
    folder = save_synthetic_prm("tiny-math-shepherd", tmp_path / "shepherd-prm")
    asked, refusals = choose_folder(picker, monkeypatch, folder, None)
    assert asked == [] and refusals == [] and picker.currentText() == "PRM shepherd-prm (Math-Shepherd)"


def test_a_family_named_on_the_command_line_shows_in_the_item(picker, tmp_path):
    """`gui --verifier prm --verifier-model rlhflow-prm:PATH` showed "PRM my-lm", no family."""
    folder = unnamed_causal_lm(tmp_path / "my-lm")
    picker.set_choice("prm", f"rlhflow-prm:{folder}")
    assert picker.currentText() == "PRM my-lm (RLHFlow PRM)"
    picker.set_choice("prm", str(save_synthetic_prm("tiny-qwen-prm", tmp_path / "q")))
    assert picker.currentText() == "PRM q (Qwen2.5-Math-PRM)"
    picker.set_choice("prm", str(tmp_path / "gone"))  # unreadable: named without a family, the run says why
    assert picker.currentText() == "PRM gone"


def started(verifier: str) -> ev.RunStarted:
    return ev.RunStarted("What is 2+3?", "synthetic:tiny-llama (random weights)", verifier, "cpu (emulated GPU)",
                         True, "in_device", 495_400, {"max_steps": 2}, {})


@pytest.mark.parametrize(("verifier", "field"), [
    ("Qwen2.5-Math-PRM (synthetic:tiny-qwen-prm)", "verifier: Qwen2.5-Math-PRM (synthetic:tiny-qwen-prm)"),
    ("RLHFlow PRM (rlhflow-prm:/home/me/models/downloaded/from-the-hub/smollm2-135m-instruct-v1)",
     "verifier: RLHFlow PRM (smollm2-135m-instruct-v1)"),
    ("Math-Shepherd (C:\\Users\\me\\models\\shepherd-7b)", "verifier: Math-Shepherd (shepherd-7b)"),
])
def test_the_status_bar_names_the_prm_at_the_default_width(qtbot, verifier, field):
    """The screenshot's fields at 1400 px beside "Done: …": the verifier was last in the fields' worth and never
    shown with a PRM; a PRM folder's whole path made it wider still."""
    window = QMainWindow()
    qtbot.addWidget(window)
    status = StatusLine(window)
    window.resize(1400, 900)
    window.show()
    status.apply(started(verifier), live=False)
    status.apply(ev.PrefillDone(151, 0.1, cached_tokens=144, computed_tokens=7), live=False)
    status.idle.setText("idle 0 slots")
    status.idle.show()
    status.step.setText("step 2/2")
    status.speed.setText("179.9 cand-tok/s")
    status.bar.showMessage("Done: 2 steps, score 0.632, goodput 45.0 tok/s")
    QApplication.processEvents()
    assert status.verifier in status.shown_fields(), [f.text() for f in status.shown_fields()]
    assert status.verifier.text() == field
    assert (verifier in status.verifier.toolTip()) is (field != f"verifier: {verifier}")  # the whole path there
    left = min(f.mapTo(status.bar, f.rect().topLeft()).x() for f in status.shown_fields())
    assert status.bar.fontMetrics().horizontalAdvance(status.bar.currentMessage()) + 12 <= left  # still readable
