"""A server's address as the user gives it: refused before any request when the client cannot ask it, and shown
without the user name or password it may hold."""

from __future__ import annotations

import re
import urllib.parse

from engine.errors import RemoteError

ADDRESS_HINT = "Write the scheme, the host and the port, e.g. http://127.0.0.1:8000 (or .../v1)."
CREDENTIALS_HINT = (
    "Leave user:password@ out of the address; give the server's API key by the environment variable that holds "
    "it (--api-key-env NAME)."
)
USER_INFO = re.compile(r"^(\s*(?:[A-Za-z][A-Za-z0-9+.-]*:)?//)?[^/?#]*@")  # [scheme://]user:password@
API_ROUTES = ("/completions", "/chat/completions", "/models")  # routes of the API users copy with its address


def api_base(url: str) -> str:
    """The API's base, .../v1, of an address as users give it: http://host:port, .../v1, or one of the API's routes
    after /v1 copied whole from a curl line or a server's log (.../v1/completions). Such a route was asked with
    /v1/completions added again, and the 404 that came was said as no API at the address."""
    base = url.rstrip("/")
    route = next((route for route in API_ROUTES if base.endswith("/v1" + route)), "")
    base = base.removesuffix(route)
    return base if base.endswith("/v1") else f"{base}/v1"


def check_address(url: str, flag: str) -> None:
    """Refuse an address the client cannot ask, before any request. Before, 'gpu-box:8000' (no scheme) read as
    host '' and failed three times with 'Name or service not known', and 'ftp://...' was asked over http."""
    why = address_problem(url)
    if why:
        raise RemoteError(f"the {flag} {masked(url)!r} is not a server address like http://gpu-box:8000: {why}.",
                          hint=CREDENTIALS_HINT if _credentials(url) else ADDRESS_HINT)


def address_problem(url: str) -> str:
    """What keeps `url` from being http://host:port[/path] or https://host[:port][/path], or ''. An http address
    names its port: without one it was asked on port 80, where a local server rarely listens (https means 443).
    A user name or password in it (user:password@host) is refused: http.client never sends it, so a server that
    wants a key said 401, and the address with its password went into the session database and exports. Its
    characters are ones a request line carries (`_unsendable`)."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
    except ValueError as error:  # a bracket left open in an IPv6 host
        return str(error)
    if port := _port_problem(parts):
        return port
    if parts.scheme not in ("http", "https"):
        return "it must begin with http:// or https://"
    if _credentials(url):
        return ("it holds a user name or password before the host (user:password@), which Beamwise does not send "
                "but would save with the address")
    if not parts.hostname:
        return "it names no host"
    if parts.scheme == "http" and parts.port is None:
        return "it names no port (write :80 for a server on http's default port)"
    if parts.query or parts.fragment:
        return "a query (?...) or fragment (#...) cannot be part of it"
    return _unsendable(url.strip(), parts.path)


def _port_problem(parts: urllib.parse.SplitResult) -> str:
    """Why the port written in the address is none a server listens on, or ''. Python's own words were printed
    as they came ("Port out of range 0-65535.", "Port could not be cast to integer value as 'x'")."""
    try:
        port = parts.port
    except ValueError:
        port = None
    else:
        if port is None or port > 0:
            return ""
    written = parts.netloc.rpartition("]")[2].rpartition(":")[2]  # after an IPv6 host's brackets
    return f"its port {written!r} is not a port number (one from 1 to 65535)"


def _unsendable(url: str, path: str) -> str:
    """What in `url` a request line cannot carry, or '': a space or a control character anywhere (urlsplit drops
    tabs and line breaks without a word), a character beyond ASCII in the path. Before, '/a b' was said as the
    server answering something that is not HTTP, with no request sent, and '/вход' failed as a fault in Beamwise.
    A host beyond ASCII is left to the name lookup, which encodes it (IDNA)."""
    if any(c.isspace() or not c.isprintable() for c in url):
        return "it holds a space or a control character (write a space in its path as %20)"
    if not path.isascii():
        return "its path holds characters beyond ASCII (write them percent-encoded, as a browser copies the address)"
    return ""


def _credentials(url: str) -> bool:
    """Whether the address `url` holds user information (user@ or user:password@) before its host."""
    return USER_INFO.match(url) is not None


def masked(url: str) -> str:
    """The address `url` with its user information as ***: a refusal is printed, and may be recorded."""
    return USER_INFO.sub(lambda found: f"{found.group(1) or ''}***@", url)
