"""The verifier picker: log-prob, self-judge, the tiny synthetic PRMs, and a PRM folder chosen with a dialog."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QPaintEvent, QResizeEvent
from PySide6.QtWidgets import (
    QDialog,
    QFileDialog,
    QInputDialog,
    QLabel,
    QStyle,
    QStyleOptionComboBox,
    QStylePainter,
)

from app.gui.model_picker import DialogChoicesCombo, offer_dialog_items
from engine.errors import BeamwiseError, PRMFamilyUnnamed
from engine.prm_folders import detect_family
from engine.prm_names import FAMILY_LABELS, LENS_FAMILIES, SYNTHETIC_PRM_FAMILIES, named_family

PLAIN = {"logprob": "log-prob (fast)", "self-judge": "self-judge (asks the model)"}
FOLDER_CHOICE = "<prm-folder>"
FAMILY_DIALOG_PX = 460  # the family question's width: its words wrap in it
NAMEABLE = LENS_FAMILIES  # plain causal LMs (Math-Shepherd, RLHFlow): only a name can tell one from any chat model
TIP = ("How each step is scored: the generator's own token log-probabilities, the same model asked whether the step "
       "is correct, or a process reward model (PRM). The arrow keys and the wheel move among the verifiers listed; "
       "Alt+Down (or a click) opens the list, which also has a PRM folder to choose.")


class VerifierPicker(DialogChoicesCombo):
    """Each item's data is 'logprob', 'self-judge' or 'prm:SOURCE'; a chosen folder is checked at once."""

    choice_changed = Signal()
    refused = Signal(str)  # a folder that is not a PRM Beamwise knows: the reason, for the user
    dialog_keys = (FOLDER_CHOICE,)

    def __init__(self) -> None:
        super().__init__()
        self.setToolTip(TIP)
        for key, label in PLAIN.items():
            self.addItem(label, key)
        self.insertSeparator(self.count())
        for name, family in SYNTHETIC_PRM_FAMILIES.items():
            self.addItem(f"PRM synthetic:{name} ({FAMILY_LABELS[family]}, random)", f"prm:synthetic:{name}")
        self.addItem("PRM from a folder…", FOLDER_CHOICE)
        self._last = 0
        offer_dialog_items(self, self.dialog_keys, False)
        self.activated.connect(self._on_activated)
        self.currentIndexChanged.connect(self._fit_tip)

    def shown_text(self) -> str:
        """The current item as drawn: cut in the middle with '…' where the box is narrower than it (Qt cut a PRM's
        name mid-word with no mark: 'PRM synthetic:tiny-qwen-prm (Qwen2.5-Math-PF')."""
        option = QStyleOptionComboBox()
        self.initStyleOption(option)
        room = self.style().subControlRect(QStyle.ComplexControl.CC_ComboBox, option,
                                           QStyle.SubControl.SC_ComboBoxEditField, self).width()
        return self.fontMetrics().elidedText(self.currentText(), Qt.TextElideMode.ElideMiddle, room)

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QStylePainter(self)
        option = QStyleOptionComboBox()
        self.initStyleOption(option)
        painter.drawComplexControl(QStyle.ComplexControl.CC_ComboBox, option)
        option.currentText = self.shown_text()
        painter.drawControl(QStyle.ControlElement.CE_ComboBoxLabel, option)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit_tip()

    def _fit_tip(self, *_args: object) -> None:
        """The whole current item under the tooltip's words while the box shows it cut."""
        whole = self.currentText()
        self.setToolTip(TIP if self.shown_text() == whole else f"{TIP}\n\nChosen: {whole}")

    def choice(self) -> tuple[str, str | None]:
        """(verifier, verifier_model) as SearchConfig takes them."""
        data = str(self.itemData(self._last))
        return ("prm", data.removeprefix("prm:")) if data.startswith("prm:") else (data, None)

    def set_choice(self, verifier: str, model: str | None) -> None:
        key = f"prm:{model}" if verifier == "prm" and model else verifier
        index = self.findData(key)
        if index < 0 and key.startswith("prm:"):
            index = self.findData(FOLDER_CHOICE)  # a folder goes just above "PRM from a folder…"
            self.insertItem(index, folder_label(model or ""), key)
            self.setItemData(index, model, Qt.ItemDataRole.ToolTipRole)
        self._select(max(0, index))

    def _on_activated(self, index: int) -> None:
        if self.itemData(index) != FOLDER_CHOICE:
            self._select(index)
            return
        folder = QFileDialog.getExistingDirectory(self, "Choose a PRM folder (config.json, tokenizer, weights)")
        self.setCurrentIndex(self._last)  # cancelled or refused: keep the previous verifier
        if not folder:
            return
        try:
            detect_family(Path(folder))
            source: str | None = folder
        except PRMFamilyUnnamed:  # a causal LM whose name says no family: the user may know
            source = self._named_by_user(Path(folder))
        except BeamwiseError as error:  # not a PRM, its head missing, or its config or weights unreadable
            self.refused.emit(error.user_message())
            return
        if source is not None:
            self.set_choice("prm", source)

    def _named_by_user(self, folder: Path) -> str | None:
        """`FAMILY:FOLDER` for a causal LM the user says is a PRM of FAMILY (as the command line's
        `rlhflow-prm:PATH`); None when they cancel, and the previous verifier stays."""
        labels = [FAMILY_LABELS[family] for family in NAMEABLE]
        dialog = QInputDialog(self)
        dialog.setWindowTitle("Which PRM family is it?")
        dialog.setLabelText(f"{folder.name} is a causal language model with no reward head, and neither its folder "
                            "nor its config names a PRM family. Math-Shepherd and RLHFlow PRMs are such models: if "
                            "it is one, choose its family (Beamwise reads its step labels as that family writes "
                            "them). If it is not a PRM, cancel and choose another verifier.")
        dialog.findChild(QLabel).setWordWrap(True)  # QInputDialog.getItem's one line was 1,874 px wide
        dialog.setMinimumWidth(FAMILY_DIALOG_PX)
        dialog.setComboBoxItems(labels)
        dialog.setComboBoxEditable(False)
        accepted = dialog.exec() == QDialog.DialogCode.Accepted
        label = dialog.textValue()
        dialog.deleteLater()
        return f"{NAMEABLE[labels.index(label)]}:{folder}" if accepted and label in labels else None

    def _select(self, index: int) -> None:
        changed = index != self._last
        self._last = index
        self.setCurrentIndex(index)
        if changed:
            self.choice_changed.emit()


def folder_label(source: str) -> str:
    """A PRM folder's item: `PRM NAME (FAMILY)`, the family named in `FAMILY:FOLDER` or read from the folder
    (its config and weight names, no weights); `PRM NAME` when it cannot be read (the run then says why)."""
    family, rest = named_family(source)
    if family is None:
        try:
            family = detect_family(Path(rest).expanduser())
        except BeamwiseError:
            family = None
    name = Path(rest).expanduser().name or rest
    return f"PRM {name} ({FAMILY_LABELS[family]})" if family else f"PRM {name}"
