"""The engine's messages say what to change in the command line's words (`--kv-budget`); the window says it
in its own: the label of the control that makes the same change."""

from __future__ import annotations

import html
import re

from engine.backends.failures import KEY_NEEDED_HINT as ENGINE_KEY_NEEDED
from engine.backends.keys import KEYRING_DIALOG

WINDOW_LABELS = {  # option -> the control that sets it, as the settings panel and the Server dialog label it
    "--beams": '"Kept beams N"',
    "--width": '"Children per beam M"',
    "--max-steps": '"Max steps"',
    "--step-tokens": '"Step tokens"',
    "--step-delimiter": '"Step delimiter"',
    "--verifier": '"Verifier"',
    "--verifier-model": "the Verifier's PRM folder",
    "--verifier-kv-share": '"Verifier KV share"',
    "--entropy-exit": '"Entropy exit"',
    "--kv-budget": '"KV budget"',
    "--prefix-cache-ram": '"Prefix cache RAM"',
    "--no-prefix-cache": 'the "prefix cache" switch off',
    "--speculative": 'the "speculative extension" switch',
    "--endpoint": "Server… > Address",
    "--served-model": "Server… > Served model",
    "--api-key-env": "Server… > API key",
    "--one-request-per-path": "Server… > Requests: one per path",
}

CLI_ONLY = {  # options whose messages the window never shows: it has no such setting, or cannot get it wrong
    "--max-candidates",  # its sliders stop at 64 x 16, the default cap of 1,024
    "--verifier-device",  # derived from "run the PRM on the CPU"
    "--device", "--dtype",  # the window loads on the default device and dtype
    "--calibrate", "--question", "--prompt-tokens", "--policies", "--baselines", "--runner", "--backend", "--server",
    "--time-limit",
    "--no-deps",  # eval, bench and packaging
    "--session",  # its message names the window's way too (Ctrl+N)
    "--verifier-endpoint",  # a PRM server: the window loads the PRM itself
}

SERVER_DIALOG = KEYRING_DIALOG  # where the Server dialog opens (the engine names it for a keyring key)
KEY_REFUSED_HINT = "Check the API key and where it comes from."  # the dialog's own advice for a 401 or 403

KEY_NEEDED_HINT = ("Choose 'Environment variable' or 'System keyring' as the API key (Server… > API key), and "
                   "name the variable or type the key.")  # where the engine's KEY_NEEDED_HINT names --api-key-env

_OPTION = re.compile(r"--[a-z][a-z-]*(?: (?:PATH|NAME|TEXT)\b)?")
# The engine's advice for a refused key (HTTP 401 or 403, engine/backends): "Check the API key of the
# --endpoint server (--api-key-env NAME: the variable that holds it)." Its options' labels made it "...of the Server…
# > Address server (Server… > API key: ...)", and it named a variable where the key was in the keyring or none.
_KEY_REFUSED = re.compile(r"Check the API key (?!and where)[^()\n]*(?:\([^()\n]*\))?[^.()\n]*\.")


def window_terms(text: str) -> str:
    """`text` with each option the window has a control for replaced by that control's label (and a
    placeholder after it, `--verifier-model PATH`, dropped); other text, `--` included, is left alone. A refused
    key's advice is the Server dialog's, with the field that says where the key comes from."""

    def label(match: re.Match[str]) -> str:
        option = match.group(0).split(" ")[0]
        return WINDOW_LABELS.get(option, match.group(0))

    text = text.replace(ENGINE_KEY_NEEDED, KEY_NEEDED_HINT)
    text = _KEY_REFUSED.sub(f"{KEY_REFUSED_HINT[:-1]} ({WINDOW_LABELS['--api-key-env']}).", text)
    return _OPTION.sub(label, text)


_COMMAND = re.compile(r"`?(beamwise eval(?: PROBLEMS)? --calibrate)`?")


def commands_html(text: str) -> str:
    """`text` as Qt rich text in which each `beamwise eval PROBLEMS --calibrate` is one unbreakable span: the
    thresholds note wrapped it as 'beamwise eval --' / 'calibrate)' when the panel narrowed. `<nobr>` keeps its
    spaces; Qt still breaks after a '-', so its hyphens are non-breaking ones (U+2011: the note and the tooltips
    that show this are not selectable, so no one copies them into a terminal)."""
    escaped = html.escape(text, quote=False).replace("\n", "<br>")
    return _COMMAND.sub(lambda m: f"<nobr>{m.group(1).replace('-', chr(0x2011))}</nobr>", escaped)
