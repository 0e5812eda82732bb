"""The verifier picker: log-prob, self-judge, the tiny synthetic PRMs, and a PRM folder chosen with a dialog."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QFileDialog

from engine.errors import BeamwiseError
from engine.prm_folders import detect_family
from engine.prm_names import FAMILY_LABELS, SYNTHETIC_PRM_FAMILIES

PLAIN = {"logprob": "log-prob (fast)", "self-judge": "self-judge (asks the model)"}
FOLDER_CHOICE = "<prm-folder>"


class VerifierPicker(QComboBox):
    """Each item's data is 'logprob', 'self-judge' or 'prm:SOURCE'; a chosen folder is checked at once."""

    choice_changed = Signal()
    refused = Signal(str)  # a folder that is not a PRM Beamwise knows: the reason, for the user

    def __init__(self) -> None:
        super().__init__()
        self.setToolTip("How each step is scored: the generator's own token log-probabilities, the same "
                        "model asked whether the step is correct, or a process reward model (PRM).")
        for key, label in PLAIN.items():
            self.addItem(label, key)
        self.insertSeparator(self.count())
        for name, family in SYNTHETIC_PRM_FAMILIES.items():
            self.addItem(f"PRM synthetic:{name} ({FAMILY_LABELS[family]}, random)", f"prm:synthetic:{name}")
        self.addItem("PRM from a folder…", FOLDER_CHOICE)
        self._last = 0
        self.activated.connect(self._on_activated)

    def choice(self) -> tuple[str, str | None]:
        """(verifier, verifier_model) as SearchConfig takes them."""
        data = str(self.itemData(self._last))
        return ("prm", data.removeprefix("prm:")) if data.startswith("prm:") else (data, None)

    def set_choice(self, verifier: str, model: str | None) -> None:
        key = f"prm:{model}" if verifier == "prm" and model else verifier
        index = self.findData(key)
        if index < 0 and key.startswith("prm:"):
            index = self.findData(FOLDER_CHOICE)  # a folder goes just above "PRM from a folder…"
            self.insertItem(index, f"PRM {Path(model or '').name}", key)
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
            family = detect_family(Path(folder))
        except BeamwiseError as error:  # not a PRM, its head missing, or its config unreadable
            self.refused.emit(error.user_message())
            return
        self.set_choice("prm", folder)
        self.setItemText(self._last, f"PRM {Path(folder).name} ({FAMILY_LABELS[family]})")

    def _select(self, index: int) -> None:
        changed = index != self._last
        self._last = index
        self.setCurrentIndex(index)
        if changed:
            self.choice_changed.emit()
