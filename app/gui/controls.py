"""The settings panel: model picker, search and KV-cache controls, validated live into frozen configs."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QGroupBox,
    QLabel,
    QLineEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

import app.formatting as fmt
from app.early_exit import calibrated_fields, load_thresholds, thresholds_text, verifier_key
from app.exit_options import THRESHOLDS
from app.gui.model_picker import ModelPicker
from app.gui.seed_box import SeedBox
from app.gui.slider_spin import QT_INT_MAX, SliderSpin, kept_setting
from app.gui.terms import commands_html, window_terms
from app.gui.verifier_picker import VerifierPicker
from app.options import format_delimiter, parse_delimiter
from engine.config import AGGREGATIONS, CacheConfig, ModelSpec, SearchConfig
from engine.prm_folders import exit_refusal

METHOD_LABELS = {"beam": "beam search", "dvts": "DVTS (N subtrees)", "best-of-n": "best-of-N (N×M samples)",
                 "greedy": "greedy (one pass)"}
SELECT_LABELS = {"best": "best path", "majority": "majority vote", "weighted": "score-weighted vote"}
POLICY_LABELS = {
    "auto": "auto",
    "in_device": "in-device",
    "layerwise": "layer-wise",
    "lbs": "locality-aware",
    "headwise": "head-wise",
}
MB = 1_000_000  # the CLI's 64MB means 64,000,000 bytes; the slider agrees with it
GB = 1_000_000_000
ERROR_STYLE = "color: #c62828;"
def narrow(combo: QComboBox) -> QComboBox:
    """A combo box that asks for 16 characters, not its longest item: the settings fit a laptop's dock."""
    combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
    combo.setMinimumContentsLength(16)
    return combo


def settings_form(box: QGroupBox) -> QFormLayout:
    """A form whose row too wide for the dock puts its field under its label (the checkboxes' sentences do not
    wrap), so the settings never scroll sideways on a laptop's 440 px dock or the window's narrowest."""
    form = QFormLayout(box)
    form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
    return form


def stacked(widgets: Iterable[QWidget]) -> QWidget:
    """`widgets` one under another in one form field."""
    block = QWidget()
    column = QVBoxLayout(block)
    column.setContentsMargins(0, 0, 0, 0)
    for widget in widgets:
        column.addWidget(widget)
    return block


def name_pairs(form: QFormLayout) -> None:
    """Give each slider-and-spin pair its row's label: the label is the pair's buddy, so a screen reader would
    otherwise meet an unnamed slider and an unnamed number."""
    for row in range(form.rowCount()):
        label, field = (form.itemAt(row, role) for role in (QFormLayout.ItemRole.LabelRole,
                                                            QFormLayout.ItemRole.FieldRole))
        if label is not None and field is not None and isinstance(field.widget(), SliderSpin):
            field.widget().set_name(label.widget().text())


class SearchControls(QWidget):
    """All settings of a run. `configs()` builds validated configs; invalid input is shown in red here."""

    changed = Signal()  # any setting changed (validity may have changed too)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._model, self._search, self._cache = ModelSpec(), SearchConfig(), CacheConfig(prefix_cache=True)
        self._error = ""
        self._lens: tuple[tuple[str, str | None], str] | None = None  # the last verifier asked and its refusal
        self._given: frozenset[str] = frozenset()  # the thresholds given on the command line (set_configs)
        self._continuations = (0, 0)  # the spin box's value when set, and the count set then (past 2**31-1)
        self._build()
        self.set_configs(self._model, self._search, self._cache)

    # ------------------------------------------------------------ public

    def configs(self) -> tuple[ModelSpec, SearchConfig, CacheConfig]:
        """The settings as configs; raises ValueError with a message for the user when they are invalid."""
        model = dataclasses.replace(self._model, source=self.model_picker.source())
        verifier, verifier_model = self.verifier.choice()
        search = dataclasses.replace(
            self._search, beams=int(self.beams.number()), width=int(self.width.number()),
            step_tokens=int(self.step_tokens.number()), step_delimiter=parse_delimiter(self.delimiter.text()),
            max_steps=int(self.max_steps.number()), **self._sampling_fields(),
            seed=self.seed.value(), aggregation=self.aggregation.currentData(), verifier=verifier,
            verifier_model=verifier_model, verifier_device=self._verifier_device(verifier), **self._method_fields(),
        )
        share = int(self.verifier_share.value())  # none for a PRM on the CPU: its KV is outside the budget
        share = None if search.verifier_device == "cpu" else self.verifier_share.kept(share / 100 if share else None)
        switches = {name: box.isChecked() for name, box in self.switches.items()}
        cache = dataclasses.replace(self._cache, policy=self.policy.currentData(),
                                    kv_budget_bytes=self._bytes("kv_budget", MB),
                                    pcie_gbps=float(self.pcie_gbps.number()),
                                    prefill_chunk=int(self.prefill_chunk.number()) or None,
                                    speculative_continuations=self._continuations_set(),
                                    verifier_kv_share=share,
                                    **switches,
                                    prefix_cache_ram_bytes=self._bytes("prefix_ram", MB),
                                    prefix_cache_disk_bytes=self._bytes("prefix_disk", GB))
        return model, search, cache

    def _show_size(self, name: str, nbytes: int | None, unit: int) -> None:
        """Show a size on its slider in `unit`s (a set size under one unit as one, never as "auto")."""
        control = getattr(self, name)
        shown = min(max(1, round(nbytes / unit)), control.spin.maximum()) if nbytes else 0
        control.show_setting(shown, fmt.size(nbytes) if nbytes and nbytes != shown * unit else None, nbytes)

    def _bytes(self, name: str, unit: int) -> int | None:
        """A size slider's bytes (None: auto): the exact bytes last set while it still shows them, else its own."""
        value = int(getattr(self, name).value())
        return getattr(self, name).kept(value * unit if value else None)

    def _verifier_device(self, verifier: str) -> str:
        return "cpu" if verifier == "prm" and self.verifier_on_cpu.isChecked() else "auto"

    def _sampling_fields(self) -> dict:
        """Temperature and top-p; greedy takes the most likely token, so it runs (and records) the defaults, as
        `run --method greedy` refuses them typed: the sliders, greyed, keep their values for the other methods."""
        if self.method.currentData() == "greedy":
            return {"temperature": SearchConfig().temperature, "top_p": SearchConfig().top_p}
        return {"temperature": self.temperature.number(), "top_p": self.top_p.number()}

    def _method_fields(self) -> dict:
        """Method, lookahead, selection and the early exits (thresholds given on the command line, else calibrated
        ones where there are any, app/early_exit.py `calibrated_fields`, `run`'s rule); greedy's one
        path needs no vote, so it runs the default selection, as lookahead is 0 for all but beam."""
        method = self.method.currentData()
        select = self.select.currentData() if method != "greedy" else SearchConfig().select
        fields = {"method": method, "lookahead": self.lookahead.value() if method == "beam" else 0,
                  "select": select, "verify_skip": self.verify_skip.isChecked(),
                  "entropy_exit": self.entropy_exit.isChecked()}
        return {**fields, **calibrated_fields(load_thresholds(), self._verifier_key(), self._given)}

    def _verifier_key(self) -> str:
        """The chosen verifier as a calibration names it (the PRM, or the generator judging itself)."""
        return verifier_key(self.model_picker.source(), *self.verifier.choice())

    def set_configs(self, model: ModelSpec, search: SearchConfig, cache: CacheConfig,
                    given: Collection[str] = ()) -> None:
        """Show these settings (e.g. "Run again" of a stored session); fields without a control are kept. `given`:
        the thresholds typed on the command line (app/exit_options.py `given_thresholds`): `search`'s win over the
        calibrated ones, as in `run`; the others (a session's, the remembered ones) follow the calibration."""
        self._model, self._search, self._cache = model, search, cache
        self._given = frozenset(given) & frozenset(THRESHOLDS)
        self.blockSignals(True)
        self.model_picker.set_source(model.source)
        for control, value in ((self.beams, search.beams), (self.width, search.width),
                               (self.step_tokens, search.step_tokens), (self.max_steps, search.max_steps),
                               (self.temperature, search.temperature), (self.top_p, search.top_p),
                               (self.pcie_gbps, cache.pcie_gbps)):
            control.show_number(value)  # the command line's and a session's every value, the range grown to it
        self.seed.set_value(search.seed)
        self.delimiter.setText(format_delimiter(search.step_delimiter))
        self._show_size("kv_budget", cache.kv_budget_bytes, MB)
        self.prefill_chunk.show_number(cache.prefill_chunk or 0)
        self._show_continuations(cache.speculative_continuations)
        self._show_share(cache.verifier_kv_share)
        self._show_size("prefix_ram", cache.prefix_cache_ram_bytes, MB)
        self._show_size("prefix_disk", cache.prefix_cache_disk_bytes, GB)
        self.verifier_on_cpu.setChecked(search.verifier_device == "cpu")
        for name, box in self.switches.items():
            box.setChecked(getattr(cache, name))
        self.verifier.set_choice(search.verifier, search.verifier_model)
        self.lookahead.setValue(search.lookahead)
        self.verify_skip.setChecked(search.verify_skip)
        self.entropy_exit.setChecked(search.entropy_exit)
        for combo, value in ((self.policy, cache.policy), (self.aggregation, search.aggregation),
                             (self.method, search.method), (self.select, search.select)):
            combo.setCurrentIndex(max(0, combo.findData(value)))
        self.blockSignals(False)
        self._revalidate()

    def _show_share(self, share: float | None) -> None:
        """The verifier's KV share in whole percent, a set share never as 0 ("auto") nor as 100 (all of it)."""
        percent = share * 100 if share else 0
        shown = min(max(1, self.verifier_share.nearest(percent)), 99) if share else 0
        exact = None if not share or shown / 100 == share else f"{percent:g} %"
        self.verifier_share.show_setting(shown, exact, share)

    def _show_continuations(self, count: int) -> None:
        """A plain spin box: its range grows to hold a larger count, as a slider's does."""
        box = self.continuations
        box.setMaximum(max(box.maximum(), min(count, QT_INT_MAX)))
        box.setValue(min(count, box.maximum()))
        self._continuations = (box.value(), count)  # past 2**31-1 (no row has so many children): run as set

    def _continuations_set(self) -> int:
        """The count last set while the box still shows it (SliderSpin.kept's rule), else the box's value."""
        return kept_setting(self._continuations, self.continuations.value(), self.continuations.value())

    def is_valid(self) -> bool:
        return not self._error

    def error_text(self) -> str:
        return self._error

    # ------------------------------------------------------------ building

    def _build(self) -> None:
        layout = QVBoxLayout(self)
        layout.addWidget(self._model_box())
        layout.addWidget(self._search_box())
        layout.addWidget(self._cache_box())
        self.error_label = QLabel()
        self.error_label.setObjectName("settingsError")
        self.error_label.setStyleSheet(ERROR_STYLE)
        self.error_label.setWordWrap(True)
        self.error_label.hide()
        layout.addWidget(self.error_label)
        layout.addStretch(1)

    def _model_box(self) -> QGroupBox:
        box = QGroupBox("Model")
        form = settings_form(box)
        self.model_picker = ModelPicker()
        self.model_picker.source_changed.connect(self._revalidate)
        form.addRow("Generator", self.model_picker)
        self.verifier = narrow(VerifierPicker())
        self.verifier.choice_changed.connect(self._revalidate)
        self.verifier.refused.connect(self._show_refusal)
        form.addRow("Verifier", self.verifier)
        return box

    def _search_box(self) -> QGroupBox:
        box = QGroupBox("Search")
        form = settings_form(box)
        self.beams = self._slider(1, 64, tooltip="Kept beams N: how many partial answers survive each step.")
        self.width = self._slider(1, 16, tooltip="Children per beam M: how many continuations each kept "
                                  "beam tries per step. Every step scores N×M candidates.")
        self.candidates_label = QLabel()
        self.candidates_label.setObjectName("candidatesPerStep")
        self.step_tokens = self._slider(1, 512, tooltip="Most tokens in one step; a step also ends at the "
                                        "delimiter or at the end of the answer.")
        self.delimiter = QLineEdit()
        self.delimiter.setPlaceholderText("empty: cut steps by length only")
        self.delimiter.setToolTip("Text that ends a step, with escapes: \\n\\n is a blank line. "
                                  "Leave empty to cut steps by token count only.")
        self.delimiter.textChanged.connect(self._revalidate)
        self.max_steps = self._slider(1, 64, tooltip="The search stops after this many steps at most.")
        self.temperature = self._slider(0, 2, decimals=2, step=0.05,
                                        tooltip="Sampling temperature; 0 is greedy (children then repeat).")
        self.top_p = self._slider(0, 1, decimals=2, step=0.01,
                                  tooltip="Nucleus sampling: sample from the smallest set of tokens whose "
                                  "probability adds up to top-p; must be above 0.")
        self.seed = SeedBox()
        self.seed.setToolTip("Random seed, 0 to 2**63-1: the same seed and settings give the same search.")
        self.seed.value_changed.connect(self._revalidate)
        self.aggregation = self._combo({a: a for a in AGGREGATIONS},
                                       "How a path's step scores combine into its ranking score.")
        self._method_controls()
        for label, widget in (("Method", self.method), ("Kept beams N", self.beams),
                              ("Children per beam M", self.width),
                              ("", self.candidates_label), ("Step tokens", self.step_tokens),
                              ("Step delimiter", self.delimiter), ("Max steps", self.max_steps),
                              ("Temperature", self.temperature), ("Top-p", self.top_p), ("Seed", self.seed),
                              ("Path score", self.aggregation), ("Lookahead", self.lookahead),
                              ("Final answer", self.select), ("Verify-skip", self.verify_skip),
                              ("", self.thresholds_label), ("Entropy exit", self.entropy_exit)):
            form.addRow(label, widget)
        name_pairs(form)
        return box

    def _method_controls(self) -> None:
        self.method = self._combo(METHOD_LABELS, "Beam keeps the best N of N×M each step; DVTS splits them into "
                                  "N subtrees that each keep their best child; best-of-N samples N×M whole "
                                  "answers and the verifier picks; greedy is one pass at temperature 0.")
        self.lookahead = QSpinBox()
        self.lookahead.setRange(0, 16)
        self.lookahead.setToolTip("Beam search only: roll each child out this many greedy steps and score the "
                                  "end of the roll-out (search-and-learn's lookahead).")
        self.lookahead.valueChanged.connect(self._revalidate)
        self.select = self._combo(SELECT_LABELS, "How the final answer is chosen among the finished paths.")
        self.verify_skip = QCheckBox("skip when the generator is decisive")
        self.verify_skip.setToolTip("RKSC: when one candidate's confidence is at least tau_conf and leads the "
                                    "next by r_gap, rank by confidence and skip the verifier for the step.")
        self.verify_skip.toggled.connect(self._revalidate)
        self.entropy_exit = QCheckBox("stop at the layer its judgement settled")
        self.entropy_exit.setToolTip("RKSC: the verify pass stops at the first layer where every candidate's "
                                     "logit-lens entropy is low and steady (self-judge, Math-Shepherd, RLHFlow).")
        self.entropy_exit.toggled.connect(self._revalidate)
        self.thresholds_label = QLabel()
        self.thresholds_label.setObjectName("earlyExitThresholds")
        self.thresholds_label.setWordWrap(True)
        self.thresholds_label.setTextFormat(Qt.TextFormat.RichText)  # a command is one unbreakable span: commands_html

    def _show_thresholds(self) -> None:
        """The thresholds a run would use; a damaged thresholds file said above them while an exit that reads it
        is on, as `run` warns (the run goes on with the defaults, which showed as merely "not calibrated")."""
        problems: list[str] = []
        uses_saved = self.verify_skip.isChecked() or self.entropy_exit.isChecked()
        saved = load_thresholds(warn=problems.append if uses_saved else None)
        text = thresholds_text(saved, self._search, self._verifier_key(), self._given)
        shown = "\n".join([*(f"⚠ {problem}" for problem in problems), text])  # seen first
        self.thresholds_label.setText(commands_html(shown))

    def _cache_box(self) -> QGroupBox:
        box = QGroupBox("KV cache")
        form = settings_form(box)
        self.kv_budget = self._slider(0, 16384, step=16, suffix=" MB", special="auto",
                                      tooltip="Device memory for the KV cache, in MB. 0 = auto: free GPU "
                                      "memory on CUDA, or a budget that fits the search on the emulated GPU.")
        self.policy = self._combo(POLICY_LABELS, "How beams share the device budget: in-device keeps all KV "
                                  "on the GPU; layer-wise reloads offloaded layers for every token; "
                                  "locality-aware (LBS) runs groups of beams through a whole step at once; "
                                  "auto picks one from the budget, and moves the KV to the CPU and goes on "
                                  "with locality-aware if free GPU memory falls mid-run.")
        form.addRow("KV budget", self.kv_budget)
        form.addRow("Policy", self.policy)
        self.switches = {
            "inter_beam": self._switch("inter-beam sharing", "LBS: group candidates that share blocks; a shared "
                                       "prefix crosses PCIe once and is read in place by every member."),
            "balanced_prefetch": self._switch("balanced groups + prefetch", "LBS: groups of even size, with room "
                                              "to load the next group while this one computes."),
            "prefix_order": self._switch("prefix-aware order", "LBS: run groups that share blocks back to back and "
                                         "keep their shared prefix on the device (FlashTTS)."),
            "speculative": self._switch("speculative extension", "In-device and LBS: a candidate that ends its "
                                        "step before the slowest of its group keeps decoding its children's "
                                        "steps in the idle slots, more for better-ranked beams (FlashTTS's "
                                        "B - j + 1). Kept candidates' children start their step with those "
                                        "tokens, pruned ones drop them. Same answer either way."),
            "lookahead_verify": self._switch("look-ahead verification", "Speculative extension with a PRM: when a "
                                             "row speculated its first child's whole next step, the PRM scores it "
                                             "in the same pass as the candidate's own step, and the child's score "
                                             "is not computed again (FlashTTS). Same scores either way."),
            "prefix_cache": self._switch("prefix cache", "Keep the KV of prompts and chosen answers in RAM and in "
                                         "the user cache folder: Run again, a follow-up or a longer question that "
                                         "starts the same computes only its new tokens (same answer)."),
        }
        form.addRow("", stacked(self.switches.values()))  # one block: on a narrow dock they move under as one
        self.continuations = QSpinBox()
        self.continuations.setRange(0, 64)
        self.continuations.setSpecialValueText("B - j + 1")
        self.continuations.setToolTip("Speculative extension: how many children's steps a row may speculate. "
                                      "B - j + 1 (0): FlashTTS's rule, more for better-ranked beams; 1: only "
                                      "the first child's. Same answer either way.")
        self.continuations.valueChanged.connect(self._revalidate)
        form.addRow("Speculated children", self.continuations)
        self.pcie_gbps = self._slider(1, 128, step=1, suffix=" GB/s",
                                      tooltip="PCIe bandwidth the emulated GPU models (no effect on CUDA, "
                                      "where copies are real and timed).")
        form.addRow("PCIe (emulated)", self.pcie_gbps)
        self.prefill_chunk = self._slider(0, 32768, step=128, suffix=" tokens", special="auto",
                                          tooltip="Prompt tokens per prefill pass. Smaller passes keep the "
                                          "activations of a long prompt small (head-wise offloading runs a "
                                          "context larger than the GPU); auto sizes them to the KV budget.")
        form.addRow("Prefill chunk", self.prefill_chunk)
        self.verifier_share = self._slider(0, 90, step=1, suffix=" %", special="auto",
                                           tooltip="The verifier's part of the device KV budget (the generator "
                                           "gets the rest). auto: what one verification batch needs, since "
                                           "verifying is compute-bound and decoding gains from every byte "
                                           "(FlashTTS). Only a PRM or self-judge keeps KV; a PRM on the CPU keeps it "
                                           "in CPU memory, outside the budget.")
        form.addRow("Verifier KV share", self.verifier_share)
        self.prefix_ram = self._slider(0, 65536, step=64, suffix=" MB", special="auto",
                                       tooltip="Most host RAM for the prefix cache. auto: a quarter of the free "
                                       "RAM, at most 4 GiB. Past it, the blocks least worth keeping go first.")
        form.addRow("Prefix cache RAM", self.prefix_ram)
        self.prefix_disk = self._slider(0, 1000, step=1, suffix=" GB", special="auto",
                                        tooltip="Most disk for the prefix cache (in the user cache folder). auto: "
                                        "a tenth of the free disk, at most 8 GiB.")
        form.addRow("Prefix cache disk", self.prefix_disk)
        self.verifier_on_cpu = self._switch("run the PRM on the CPU", "Load the PRM on the CPU in float32 and keep "
                                            "its KV in CPU memory: for when its weights do not fit on the GPU "
                                            "beside the generator's. Slower, but the generator keeps the GPU.")
        form.addRow("", self.verifier_on_cpu)
        name_pairs(form)
        return box

    def _switch(self, label: str, tooltip: str) -> QCheckBox:
        box = QCheckBox(label)
        box.setToolTip(tooltip)
        box.toggled.connect(self._revalidate)
        return box

    def _slider(self, low: float, high: float, **kwargs: object) -> SliderSpin:
        control = SliderSpin(low, high, **kwargs)
        control.value_changed.connect(self._revalidate)
        return control

    def _combo(self, labels: dict[str, str], tooltip: str) -> QComboBox:
        combo = narrow(QComboBox())
        for value, label in labels.items():
            combo.addItem(label, value)
        combo.setToolTip(tooltip)
        combo.currentIndexChanged.connect(self._revalidate)
        return combo

    # ------------------------------------------------------------ validation

    def _show_refusal(self, message: str) -> None:
        """A folder picked as PRM is not one: say why here; the previous verifier stays."""
        self.error_label.setText(message)
        self.error_label.setVisible(True)

    def _revalidate(self, *_args: object) -> None:
        if self.signalsBlocked():
            return
        n, m = int(self.beams.number()), int(self.width.number())
        self.candidates_label.setText(f"{n * m} candidates per step (N {n} × M {m})")
        self.lookahead.setEnabled(self.method.currentData() == "beam")
        for control in (self.temperature, self.top_p, self.select):  # greedy: one path at temperature 0
            control.setEnabled(self.method.currentData() != "greedy")
        self.verifier_on_cpu.setEnabled(self.verifier.choice()[0] == "prm")
        self.verifier_share.setEnabled(self._verifier_device(self.verifier.choice()[0]) != "cpu")  # as run refuses
        self.continuations.setEnabled(self.switches["speculative"].isChecked())
        scored_ahead = self.verifier.choice()[0] == "prm" and not self.entropy_exit.isChecked()  # as run refuses
        self.switches["lookahead_verify"].setEnabled(self.switches["speculative"].isChecked() and scored_ahead)
        self._show_thresholds()
        try:
            _, search, _ = self.configs()
            self._error = self._exit_refusal() if search.entropy_exit else ""
        except ValueError as error:
            message = str(error)
            self._error = fmt.sentence(message)
        self.error_label.setText(self._error)
        self.error_label.setVisible(bool(self._error))
        self.changed.emit()

    def _exit_refusal(self) -> str:
        """The run's refusal of the entropy exit on a PRM with a reward head, said before the run (read once for
        each verifier chosen: its config and weight names, not its weights)."""
        choice = self.verifier.choice()
        if self._lens is None or self._lens[0] != choice:
            refusal = exit_refusal(*choice)
            text = window_terms(refusal.user_message()) if refusal else ""
            self._lens = (choice, fmt.sentence(text))
        return self._lens[1]

