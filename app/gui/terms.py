"""The engine's messages say what to change in the command line's words (`--kv-budget`); the window says it
in its own: the label of the control that makes the same change."""

from __future__ import annotations

import html
import math
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
    "--verifier-device",  # derived from "run the PRM on the CPU"; a plan's advice to use it is reworded (_REWORDED)
    "--device", "--dtype",  # the window loads on the default device and dtype; a plan's advice to load bfloat16 is
    # left out of its sentence (_REWORDED)
    "--calibrate", "--question", "--prompt-tokens", "--policies", "--baselines", "--runner", "--backend", "--server",
    "--time-limit",
    "--no-deps",  # eval, bench and packaging
    "--session",  # its message names the window's way too (Ctrl+N)
    "--verifier-endpoint",  # a PRM server: the window loads the PRM itself
}

MB = 1_000_000  # the unit of the window's size sliders (app/gui/controls.py)
SERVER_DIALOG = KEYRING_DIALOG  # where the Server dialog opens (the engine names it for a keyring key)
KEY_REFUSED_HINT = "Check the API key and where it comes from."  # the dialog's own advice for a 401 or 403

KEY_NEEDED_HINT = ("Choose 'Environment variable' or 'System keyring' as the API key (Server… > API key), and "
                   "name the variable or type the key.")  # where the engine's KEY_NEEDED_HINT names --api-key-env

_PREFIX_RAM = re.compile(r"Use --prefix-cache-ram (\d+) or more, or run with --no-prefix-cache\.")
_REWORDED = (  # advice whose option the window sets another way, or cannot set: said as the window can act on it
    # the plan's host-memory advice (app/plan_advice.py): "...: load the weights in bfloat16 (--dtype bfloat16:
    # about 1.2 GB in all) or pick a smaller model." and "..., or load the weights in bfloat16 (...)."
    (re.compile(r"(?:, or )?load the weights in bfloat16 \(--dtype bfloat16: [^)]*\)(?: or )?"), ""),
    # two models' weights on a GPU (engine/verifiers/fit.py WeightsDoNotFit)
    (re.compile(r"\(--verifier-device cpu; in the window: ([^)]*)\)"), r"(\1)"),
    (re.compile(r", load the models in bfloat16 \(--dtype bfloat16\)"), ""),
)

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
    text = _PREFIX_RAM.sub(lambda m: _prefix_ram_advice(int(m.group(1))), text)
    for pattern, replacement in _REWORDED:
        text = pattern.sub(replacement, text)
    return _OPTION.sub(label, text)


def _prefix_ram_advice(needed_bytes: int) -> str:
    """The prefix cache's refusal in the window's terms: its slider is in whole MB, so `--prefix-cache-ram 110592`
    read as "Prefix cache RAM" 110592, a value the slider cannot take (and it means 110,592 MB there)."""
    return (f'Set {WINDOW_LABELS["--prefix-cache-ram"]} to {math.ceil(needed_bytes / MB)} MB or more (or auto), or '
            f'turn {WINDOW_LABELS["--no-prefix-cache"]}.')


_COMMAND = re.compile(r"`?(beamwise eval(?: PROBLEMS)? --calibrate)`?")


def commands_html(text: str) -> str:
    """`text` as Qt rich text in which each `beamwise eval PROBLEMS --calibrate` is one unbreakable span: the
    thresholds note wrapped it as 'beamwise eval --' / 'calibrate)' when the panel narrowed. `<nobr>` keeps its
    spaces; Qt still breaks after a '-', so its hyphens are non-breaking ones (U+2011: the note and the tooltips
    that show this are not selectable, so no one copies them into a terminal)."""
    escaped = html.escape(text, quote=False).replace("\n", "<br>")
    return _COMMAND.sub(lambda m: f"<nobr>{m.group(1).replace('-', chr(0x2011))}</nobr>", escaped)
