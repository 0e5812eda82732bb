"""API keys of generator servers in the system keyring (Windows Credential Manager, macOS Keychain, Secret Service).

A key is stored under the service "beamwise" and the server's address, and read only when a run starts or a
connection is tested. It never goes into the settings file, the session database or an export: those keep
where the key comes from ("keyring" or the name of an environment variable), not the key.
"""

from __future__ import annotations

from engine.backends.keys import KEYRING_DIALOG
from engine.errors import BeamwiseError

SERVICE = "beamwise"


class KeyringUnavailable(BeamwiseError):
    """This machine has no system keyring Beamwise can use."""

    hint = "Put the key in an environment variable and choose 'Environment variable' with its name instead."


class KeyMissing(BeamwiseError):
    """The keyring holds no key for this server."""

    hint = f"Type the key under {KEYRING_DIALOG} and press OK: it is saved in the system keyring."


def load_key(endpoint: str) -> str:
    """The key saved for `endpoint`; KeyMissing when there is none."""
    key = _call("get_password", SERVICE, _user(endpoint))
    if not key:
        raise KeyMissing(f"the system keyring has no API key for {endpoint}.")
    return key


def save_key(endpoint: str, key: str) -> None:
    _call("set_password", SERVICE, _user(endpoint), key)


def has_key(endpoint: str) -> bool:
    try:
        return bool(_call("get_password", SERVICE, _user(endpoint)))
    except KeyringUnavailable:
        return False


def _user(endpoint: str) -> str:
    return endpoint.strip().rstrip("/")


def _call(name: str, *args: str):
    try:
        import keyring
        from keyring.errors import KeyringError
    except ImportError as error:  # an install without the dependency
        raise KeyringUnavailable(
            "the keyring package is not installed, so the system keyring cannot be used."
        ) from error
    try:
        return getattr(keyring, name)(*args)
    except KeyringError as error:
        raise KeyringUnavailable(f"the system keyring cannot be used here ({_reason(error)}).") from error


def _reason(error: Exception, limit: int = 200) -> str:
    """The keyring's own words (their first line) without a final full stop, cut after the last whole sentence
    within `limit` characters, else after a whole word: a cut at 160 characters ended mid-word ("non-recommend")."""
    line = (str(error).strip().splitlines() or [""])[0].strip() or type(error).__name__
    if len(line) <= limit:
        return line.removesuffix(".")
    sentence = line[: limit + 1].rfind(". ")
    if sentence > 0:
        return line[:sentence]
    return line[:limit].rsplit(" ", 1)[0] + "…"
