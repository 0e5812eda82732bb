"""The window's "Server…" generator: an OpenAI-compatible server (vLLM, SGLang, llama.cpp's server), its model,
where its API key comes from, and a connection test.

The choice is remembered in the window's settings without the key: a key typed here goes to the system
keyring (app/server_keys.py), or the user names an environment variable that holds it. The key is read
when a run starts and travels only inside the ServerConfig handed to the engine thread.
"""

from __future__ import annotations

import json
import os
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import asdict, dataclass

from PySide6.QtCore import QObject, QSettings, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

import app.formatting as fmt
from app.gui.background import run_in_background
from app.gui.controls import ERROR_STYLE
from app.gui.model_picker import SERVER_SOURCE, ModelPicker
from app.gui.terms import KEY_REFUSED_HINT, SERVER_DIALOG, window_terms
from app.json_types import typed_fields
from app.server_keys import has_key, load_key, save_key
from engine.backends.addresses import address_problem, masked
from engine.backends.openai import MAX_TIMEOUT_S, RequestCancelled, ServerConfig, check_connection
from engine.errors import BeamwiseError, ServedModelNotFound, ServerError, ServerUnreachable, failure

KEY_SOURCES = {"none": "No key", "env": "Environment variable", "keyring": "System keyring"}
SETTINGS_KEY = "server/choice"
OK_STYLE = "color: #2f8a57;"
TIMEOUT_LEAST_S = 0.01  # the Timeout field's least value: its two decimals' smallest above 0
NEW_CHOICE = {
    "endpoint": "http://127.0.0.1:8000",
    "served_model": "",
    "key_from": "none",
    "key_env": "",
    "timeout_s": 60.0,
    "one_request_per_path": False,
}  # the dialog's fields before any server was chosen
NO_KEY_HINT = "Choose 'Environment variable' or 'System keyring' as the API key, and name the variable or type the key."
UNSET_KEY_HINT = ("Set it to the server's API key before starting Beamwise, or choose 'System keyring' as the API key "
                  f"under {SERVER_DIALOG} and type the key there.")  # a key variable the window lacks


@dataclass(frozen=True)
class ServerChoice:
    """What the dialog edits and the settings keep: never the key itself."""

    endpoint: str
    served_model: str
    key_from: str = "none"  # one of KEY_SOURCES
    key_env: str = ""  # the variable's name when key_from == "env"
    timeout_s: float = 60.0
    one_request_per_path: bool = False  # n=M in one request per kept path (vLLM, SGLang)

    def __post_init__(self) -> None:
        why = address_problem(self.endpoint)  # the engine's own check, said here in the dialog's words
        if why:
            raise ValueError(f"the server address {masked(self.endpoint)!r} is not a URL ({why}); write it like "
                             "http://gpu-box:8000.")
        if not self.served_model.strip():
            raise ValueError("name the served model (as the server lists it at /v1/models).")
        if self.key_from not in KEY_SOURCES:
            raise ValueError(f"the key source must be one of {', '.join(KEY_SOURCES)}.")
        if self.key_from == "env" and not self.key_env.strip():
            raise ValueError("name the environment variable that holds the API key.")
        if not 0 < self.timeout_s <= MAX_TIMEOUT_S:  # a saved one past the field's range came back cut to it
            raise ValueError(f"the timeout must be more than 0 seconds and at most {MAX_TIMEOUT_S:,.0f} (a day).")

    def label(self) -> str:
        return f"Server: {self.served_model} at {urllib.parse.urlsplit(self.endpoint).netloc}"

    def config(self, typed_key: str = "") -> ServerConfig:
        """The engine's config. A keyring key is read now (KeyringUnavailable / KeyMissing say why not) and a key
        variable checked now, said in the window's words (the engine's own message names --api-key-env)."""
        variable = self.key_env.strip()
        if self.key_from == "env" and not os.environ.get(variable, "").strip():  # as the engine reads it
            raise BeamwiseError(f"the environment variable {variable} is not set or is empty.", hint=UNSET_KEY_HINT)
        key = typed_key or (load_key(self.endpoint) if self.key_from == "keyring" else None)
        return ServerConfig(
            self.endpoint.strip(),
            self.served_model.strip(),
            self.key_env.strip() if self.key_from == "env" else None,
            timeout_s=self.timeout_s,
            api_key=key if self.key_from == "keyring" else None,
            key_source="keyring" if self.key_from == "keyring" else None,
            one_request_per_path=self.one_request_per_path,
        )


def save_choice(settings: QSettings, choice: ServerChoice) -> None:
    settings.setValue(SETTINGS_KEY, json.dumps(asdict(choice)))


def load_choice(settings: QSettings) -> ServerChoice | None:
    value = settings.value(SETTINGS_KEY)
    try:
        return ServerChoice(**typed_fields(ServerChoice, json.loads(value))) if isinstance(value, str) else None
    except (TypeError, ValueError):  # a missing or renamed field, a value of another type, or one this version refuses
        return None


class ServerDialog(QDialog):
    """Edits a ServerChoice; "Test connection" asks the server in a thread. `tested(ok, text)` follows each test
    finished while the dialog is open: closing it hangs up on a test still waiting, whose answer is dropped."""

    tested = Signal(bool, str)

    def __init__(self, choice: ServerChoice | None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Generator server")
        self.choice: ServerChoice | None = choice
        self._tests = 0
        self._hang_up = threading.Event()  # set when the dialog closes: the test in flight stops waiting
        self._build(asdict(choice) if choice is not None else NEW_CHOICE)

    def _build(self, values: dict) -> None:
        form = QFormLayout()
        self.endpoint = QLineEdit(values["endpoint"])
        self.endpoint.setToolTip("The server's address, e.g. http://gpu-box:8000 (with or without /v1).")
        self.model = QLineEdit(values["served_model"])
        self.model.setToolTip("The model name the server serves (GET /v1/models lists them).")
        self.key_from = QComboBox()
        for value, label in KEY_SOURCES.items():
            self.key_from.addItem(label, value)
        self.key_from.setCurrentIndex(max(0, self.key_from.findData(values["key_from"])))
        self.key_env = QLineEdit(values["key_env"])
        self.key_env.setPlaceholderText("e.g. VLLM_API_KEY")
        self.key = QLineEdit()
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.key.setToolTip("Saved in the system keyring when you press OK; never in Beamwise's files.")
        self.timeout = QDoubleSpinBox()
        self.timeout.setRange(TIMEOUT_LEAST_S, MAX_TIMEOUT_S)  # --request-timeout's: more than 0, at most a day
        self.timeout.setSuffix(" s")
        self.timeout.setValue(values["timeout_s"])
        self.timeout.setToolTip("How long one request may take before it is retried (twice), then reported.")
        self.batched = QCheckBox("one request with n = M per kept path")
        self.batched.setChecked(bool(values["one_request_per_path"]))
        self.batched.setToolTip(
            "Ask for a path's M children in one request (vLLM and SGLang honour n); "
            "otherwise M requests with n = 1, which every server answers."
        )
        for label, widget in (
            ("Address", self.endpoint),
            ("Served model", self.model),
            ("API key", self.key_from),
            ("Variable", self.key_env),
            ("Key", self.key),
            ("Timeout", self.timeout),
            ("Requests", self.batched),
        ):
            form.addRow(label, widget)
        self.test_button = QPushButton("Test connection")
        self.test_button.clicked.connect(self.test_connection)
        self.answer = QLabel()
        self.answer.setObjectName("serverTestResult")
        self.answer.setWordWrap(True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.test_button)
        layout.addWidget(self.answer)
        layout.addWidget(buttons)
        self.key_from.currentIndexChanged.connect(self._show_key_fields)
        self._show_key_fields()

    def _show_key_fields(self) -> None:
        source = self.key_from.currentData()
        self.key_env.setEnabled(source == "env")
        self.key.setEnabled(source == "keyring")
        endpoint = self.endpoint.text().strip()
        stored = source == "keyring" and endpoint and has_key(endpoint)
        self.key.setPlaceholderText("a key is saved in the keyring (type to replace it)" if stored else "")

    def edited(self) -> ServerChoice:
        """The fields as a choice; ValueError says what to fix."""
        return ServerChoice(
            self.endpoint.text().strip(),
            self.model.text().strip(),
            self.key_from.currentData(),
            self.key_env.text().strip(),
            float(self.timeout.value()),
            self.batched.isChecked(),
        )

    def test_connection(self) -> None:
        """Ask the server for its models and one token, in a thread; the answer arrives as `tested`."""
        self._tests += 1
        try:
            config = self.edited().config(self.key.text())
        except (ValueError, BeamwiseError) as error:
            self._show_answer(self._tests, False, _message(error))
            return
        self.answer.setStyleSheet("")
        self.answer.setText(f"Asking {config.endpoint}…")
        self.test_button.setEnabled(False)
        number, hang_up = self._tests, self._hang_up
        run_in_background(self, "beamwise-server-test", lambda: (number, *_test(config, hang_up.is_set)),
                          self._show_answer)

    def done(self, result: int) -> None:
        """Closed by OK, Cancel, Esc or the title bar: a test still waiting on a silent server ends now (its
        connection closed, not held for the timeout) and says nothing later."""
        self._hang_up.set()
        self._hang_up = threading.Event()  # a test started if the dialog is shown again
        self._tests += 1  # the test in flight is now an older one: _show_answer drops it
        self.test_button.setEnabled(True)
        super().done(result)

    def _show_answer(self, number: int, ok: bool, text: str) -> None:
        if number != self._tests:
            return  # an older test, overtaken by a newer one
        self.test_button.setEnabled(True)
        self.answer.setStyleSheet(OK_STYLE if ok else ERROR_STYLE)
        self.answer.setText(fmt.sentence(text))
        self._grow()
        self.tested.emit(ok, text)

    def _grow(self) -> None:
        """At least as large as the fields and the message now need: a message wrapped over several lines (the
        keyring unavailable) squashed the fields of a dialog sized for none, Address over Timeout."""
        need = self.sizeHint()
        self.resize(max(self.width(), need.width()), max(self.height(), need.height()))

    def accept(self) -> None:
        """Keep the choice; a typed key goes to the keyring first (the dialog stays open if it cannot)."""
        try:
            choice = self.edited()
            if choice.key_from == "keyring" and self.key.text():
                save_key(choice.endpoint, self.key.text())
                self.key.clear()
            elif choice.key_from == "keyring":
                load_key(choice.endpoint)  # says now, not at the first run, that there is no key
        except (ValueError, BeamwiseError) as error:
            self._show_answer(self._tests, False, _message(error))
            return
        self.choice = choice
        super().accept()


class ServerPicker(QObject):
    """Adds the server to the window's model picker and answers "Server…" with the dialog."""

    def __init__(self, picker: ModelPicker, settings: QSettings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.picker, self.settings, self.window = picker, settings, parent
        self.choice = load_choice(settings)
        if self.choice is not None:
            picker.name_source(SERVER_SOURCE, self.choice.label())
        picker.server_requested.connect(self.edit)

    def edit(self) -> ServerDialog:
        """Show the dialog (modal); on OK the server becomes the generator. The dialog, the window's child, is
        deleted once answered: each one was kept for the window's life."""
        dialog = ServerDialog(self.choice, self.window)
        if dialog.exec() == QDialog.DialogCode.Accepted and dialog.choice is not None:
            self.use(dialog.choice)
        dialog.deleteLater()
        return dialog

    def use(self, choice: ServerChoice) -> None:
        self.choice = choice
        save_choice(self.settings, choice)
        self.picker.name_source(SERVER_SOURCE, choice.label(), select=True)

    def recorded(self, cache: dict) -> bool:
        """Make a session's recorded server (ServerConfig.to_dict, no key) the generator; False for a local run."""
        if cache.get("backend") != "openai":
            return False
        env = cache.get("api_key_env") or ""
        key_from = "keyring" if cache.get("key_source") == "keyring" else ("env" if env else "none")
        timeout = self.choice.timeout_s if self.choice is not None else NEW_CHOICE["timeout_s"]
        batched = bool(cache.get("one_request_per_path"))
        self.use(ServerChoice(cache["endpoint"], cache["served_model"], key_from, env, timeout, batched))
        return True

    def run_config(self) -> ServerConfig | None:
        """The server of the next run, or None when the generator is a local model."""
        if self.picker.source() != SERVER_SOURCE:
            return None
        if self.choice is None:
            raise BeamwiseError("no server is set.", hint=f"Choose {SERVER_DIALOG} first.")
        return self.choice.config()


def _message(error: Exception) -> str:
    return error.user_message() if isinstance(error, BeamwiseError) else str(error)


def _window_message(error: BeamwiseError, config: ServerConfig | None = None) -> str:
    """A server's error with advice in the dialog's words: the engine's hints name command-line options
    (--endpoint), which the window names by its fields (Server… > Address), as its run-error dialog does. A 401
    or 403 to a `config` that sends no key (API key: No key) says the server needs one: "the API key was
    refused ... Check the API key" sent the user to a key there was none of."""
    if isinstance(error, ServedModelNotFound):
        hint = "Type the served model's name as the server lists it."
    elif isinstance(error, ServerError) and error.status in (401, 403):
        if config is not None and config.api_key is None and config.api_key_env is None:
            return BeamwiseError(f"the server at {config.endpoint} needs an API key (it answered HTTP "
                                 f"{error.status} to a request without one)", hint=NO_KEY_HINT).user_message()
        hint = KEY_REFUSED_HINT
    elif isinstance(error, ServerError) and (error.status == 429 or error.retry_after is not None):
        wait = f" and asks to wait {error.retry_after:.0f} s" if error.retry_after is not None else ""
        hint = f"The server is busy{wait}: test again later, or ask the server's owner about its limits."
    elif isinstance(error, ServerUnreachable):
        hint = "Check the address and that the server is running."
    else:
        return window_terms(error.user_message())
    return BeamwiseError(str(error), hint=hint).user_message()  # with its full stop before the hint


def _test(config: ServerConfig, should_stop: Callable[[], bool]) -> tuple[bool, str]:
    """Whether the server answered as the search needs, and the sentence that says so (or what to do); the
    request waits in slices and ends when `should_stop()` (the dialog closed)."""
    try:
        return True, check_connection(config, should_stop=should_stop).sentence(config)
    except RequestCancelled:
        return False, "the test was cancelled."  # dropped: only a closed dialog cancels
    except BeamwiseError as error:
        return False, _window_message(error, config)
    except Exception as error:  # a fault in Beamwise: said, or the thread ends and the dialog says "Asking…" for ever
        return False, failure(error).message
