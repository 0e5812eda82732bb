"""A server's API key: read from the environment variable the user names (or given, from the window's keyring) and
checked as an HTTP header can carry it. A refusal names where the key came from and what is wrong, never the key."""

from __future__ import annotations

import os

from engine.errors import RemoteError

KEYRING_DIALOG = 'Settings > Model > Generator > "Server (vLLM, SGLang, llama.cpp)…"'  # where a keyring key is typed


class KeyUnusable(RemoteError):
    """The API key cannot be sent: its variable is unnamed, unset or empty, or the key holds what an HTTP header
    cannot carry. Before, a key ending in a CR failed the request as a fault in Beamwise whose message held the
    key ("Invalid header value b'Bearer ...'")."""


def api_key(given: str | None, variable: str | None, source: str | None = None) -> str | None:
    """The key to send as `Authorization: Bearer KEY`, or None for none: `given` (the window's keyring, `source`
    "keyring") or the value of the environment variable `variable` (--api-key-env). Spaces and line breaks around
    the key are dropped: a bearer token holds none, and a key read by `$(cat key.txt)` from a file saved on
    Windows ends in a CR, as one set by `set NAME=KEY ` ends in a space."""
    if given:
        where = "the API key from the system keyring" if source == "keyring" else "the API key given"
        again = (f"Type the key again without it under {KEYRING_DIALOG} and press OK." if source == "keyring"
                 else "Give the key again without it.")
        return _checked(given.strip(), where, again)
    if variable is None:
        return None
    if not variable.strip():
        raise KeyUnusable("--api-key-env needs a variable name: the name given is empty.",
                          hint="Name the environment variable that holds the server's API key (--api-key-env "
                               "BEAMWISE_SERVER_KEY), or leave out --api-key-env.")
    key = os.environ.get(variable, "").strip()
    if not key:
        raise KeyUnusable(f"the environment variable {variable} (--api-key-env) is not set or is empty.",
                          hint=f"Set {variable} to the server's API key ({set_variable(variable)}), or leave out "
                               "--api-key-env.")
    where = f"the API key in the environment variable {variable} (--api-key-env)"
    return _checked(key, where, f"Copy the key again without it and set {variable} again ({set_variable(variable)}).")


def set_variable(variable: str) -> str:
    """How each shell sets `variable` to a key, for the advice: it said `export`, which Windows shells have not."""
    return f'bash or zsh: export {variable}=KEY; PowerShell: $env:{variable} = "KEY"; cmd: set {variable}=KEY'


def _checked(key: str, where: str, again: str) -> str:
    """`key` if an HTTP header can carry it as it is meant; else KeyUnusable saying what it holds. A line break
    would end the header (http.client refuses it), a character past Latin-1 cannot be encoded in one (a
    typographic quote pasted from a document), and a control or invisible character is no part of a key."""
    if not key:
        raise KeyUnusable(f"{where} is empty.", hint=again.replace(" without it", ""))
    if any(c in "\r\n" for c in key):
        what = "a line break (CR or LF)"
    elif any(ord(c) > 0xFF for c in key):
        what = "a character beyond Latin-1 (such as a typographic quote or a letter of another alphabet)"
    elif not key.isprintable():
        what = "a control or invisible character (such as a tab, a NUL or a no-break space)"
    else:
        return key
    raise KeyUnusable(f"{where} holds {what}, which cannot be sent in an HTTP header.", hint=again)
