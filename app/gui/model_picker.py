"""The generator picker: the bundled model, tiny synthetic models, a folder or GGUF file, or a server."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import cast

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import QComboBox, QFileDialog

# Only the tiny synthetic models: the 7B-shaped ones are for benchmarks and need tens of GB.
SYNTHETIC_CHOICES = ("tiny-llama", "tiny-qwen2", "tiny-opt")
FOLDER_CHOICE, GGUF_CHOICE, SERVER_CHOICE = "<folder>", "<gguf>", "<server>"
DIALOG_CHOICES = (FOLDER_CHOICE, GGUF_CHOICE, SERVER_CHOICE)  # each opens a dialog: chosen from the open list only
SERVER_SOURCE = "server:openai"  # the generator is the server chosen with "Server…" (app/gui/server_panel.py)
TIP = ("The generator: the bundled SmolLM2-135M, a local transformers folder, a .gguf file, or a tiny random-weight "
       "synthetic model for a quick look. The arrow keys and the wheel move among the models listed; Alt+Down (or a "
       "click) opens the list, which also has a folder, a GGUF file or a server to choose.")


def offer_dialog_items(combo: QComboBox, keys: Iterable[str], offered: bool) -> None:
    """Enable the items of `combo` whose data is in `keys` (each opens a dialog) while its list is open, and disable
    them while it is closed: there the arrow, Page, Home and End keys, the wheel and typed letters move among the
    other items only (Qt's own moves skip a disabled item). A closed QComboBox emits `activated` for each of those
    moves, and one Down past the last model opened "Choose a transformers model folder" again and again: the items
    after it could not be reached. In the open list (Alt+Down, F4, Space or a click) they are chosen as any other."""
    model = cast(QStandardItemModel, combo.model())  # QComboBox's own: neither picker sets another
    for key in keys:
        item = model.item(combo.findData(key))
        if item is not None:
            item.setEnabled(offered)


class DialogChoicesCombo(QComboBox):
    """A picker whose items with data in `dialog_keys` open a dialog: offered only while its list is open
    (`offer_dialog_items`)."""

    dialog_keys: tuple[str, ...] = ()

    def showPopup(self) -> None:
        offer_dialog_items(self, self.dialog_keys, True)
        super().showPopup()

    def hidePopup(self) -> None:
        super().hidePopup()
        offer_dialog_items(self, self.dialog_keys, False)


class ModelPicker(DialogChoicesCombo):
    """Bundled model, synthetic models, local folders / GGUF files chosen with a file dialog, and a server."""

    source_changed = Signal(str)
    server_requested = Signal()  # "Server…" was picked: the server panel asks where (then calls name_source)
    dialog_keys = DIALOG_CHOICES

    def __init__(self) -> None:
        super().__init__()
        self.setToolTip(TIP)
        self.addItem("Bundled (SmolLM2-135M-Instruct)", "bundled")
        for name in SYNTHETIC_CHOICES:
            self.addItem(f"synthetic:{name}", f"synthetic:{name}")
        self.insertSeparator(self.count())
        self.addItem("Transformers folder…", FOLDER_CHOICE)
        self.addItem("GGUF file…", GGUF_CHOICE)
        self.addItem("Server (vLLM, SGLang, llama.cpp)…", SERVER_CHOICE)
        self._last = 0
        offer_dialog_items(self, self.dialog_keys, False)
        self.activated.connect(self._on_activated)

    def source(self) -> str:
        return str(self.itemData(self._last))

    def set_source(self, source: str) -> None:
        index = self.findData(source)
        if index < 0:
            index = self.findData(FOLDER_CHOICE) - 1  # custom paths go just above the separator
            self.insertItem(index, Path(source).name or source, source)
            self.setItemData(index, source, Qt.ItemDataRole.ToolTipRole)
        self._select(index)

    def name_source(self, source: str, label: str, *, select: bool = False) -> None:
        """Show `source` as `label` (a new entry goes just above the separator), selecting it when asked."""
        index = self.findData(source)
        if index < 0:
            index = self.findData(FOLDER_CHOICE) - 1
            self.insertItem(index, label, source)
            self._last += int(self._last >= index)  # the selected entry moved down by one
            self.setCurrentIndex(self._last)
        self.setItemText(index, label)
        self.setItemData(index, label, Qt.ItemDataRole.ToolTipRole)
        if select:
            self._select(index)

    def _on_activated(self, index: int) -> None:
        data = self.itemData(index)
        if data == SERVER_CHOICE:
            self.setCurrentIndex(self._last)  # until the server dialog is accepted
            self.server_requested.emit()
            return
        if data in (FOLDER_CHOICE, GGUF_CHOICE):
            path = self._ask_path(data)
            if not path:
                self.setCurrentIndex(self._last)  # cancelled: keep the previous model
                return
            self.set_source(path)
            return
        self._select(index)

    def _ask_path(self, kind: str) -> str:
        if kind == FOLDER_CHOICE:
            return QFileDialog.getExistingDirectory(self, "Choose a transformers model folder (with config.json)")
        path, _ = QFileDialog.getOpenFileName(self, "Choose a GGUF model file", str(Path.home()),
                                              "GGUF models (*.gguf);;All files (*)")
        return path

    def _select(self, index: int) -> None:
        changed = index != self._last
        self._last = index
        self.setCurrentIndex(index)
        if changed:
            self.source_changed.emit(self.source())
