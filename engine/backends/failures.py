"""What a request that failed says: each way a request to the server fails, as the RemoteError the user reads.

The hints name the options the server was given by as {endpoint} and {model} (RemoteError.advice fills them);
the window rewrites the options into its own words (app/gui/terms.py).
"""

from __future__ import annotations

import http.client
import ssl
from typing import Protocol

from engine.backends.addresses import ADDRESS_HINT, masked
from engine.backends.replies import one_line
from engine.errors import RemoteError, ServedModelNotFound, ServerError, ServerUnreachable

NOT_TLS = frozenset({"WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG", "UNKNOWN_PROTOCOL"})
# OpenSSL's reasons (by version) for a handshake answered by something that is not TLS: a plain http server
NO_API = (404, 405, 501)  # not found, and a route that takes no POST: what a web server answers the API's paths
NO_API_HINT = ("Check the address: the OpenAI-compatible API of vLLM, SGLang or llama.cpp's server is at "
               "http://host:port or http://host:port/v1, not another program's port.")


KEY_NEEDED_HINT = "Give the server's API key with --api-key-env NAME, the environment variable that holds it."


class ServerSettings(Protocol):
    """What the messages name of a server's settings: engine/backends/openai.py ServerConfig (which imports this)."""

    endpoint: str
    served_model: str
    endpoint_option: str
    prm_endpoint: str | None
    api_key_env: str | None  # the variable that holds the key, or
    api_key: str | None  # the key itself (the window's keyring); neither: no key is sent
    retries: int
    timeout_s: float


def bad_address(cfg: ServerSettings, error: Exception) -> RemoteError:
    """An address http.client cannot ask (its own InvalidURL): the address's fault, found before anything was
    sent. Before, an InvalidURL raised by the request was said as the server's answer ('not HTTP')."""
    return RemoteError(
        f"the {cfg.endpoint_option} {masked(cfg.endpoint)!r} is not a URL like http://host:8000 ({error}).",
        hint=ADDRESS_HINT,
    )


def not_http(cfg: ServerSettings, error: http.client.HTTPException) -> RemoteError:
    """Bytes that are not an HTTP answer (another program on that port, TLS where http:// was written): the
    server was reached. Before, it was 'cannot reach the server' with the bytes, a NUL and a CR among them,
    printed raw over two lines. Not retried: the next answer would be the same."""
    came = one_line(str(error))[:60]
    shown = f" (it began {came!r})" if came else ""
    return RemoteError(
        f"the server at {cfg.endpoint} answered with something that is not HTTP{shown}.",
        hint="Check that {endpoint} is the address of an OpenAI-compatible server (https:// if it wants TLS), "
        "not another program's port.",
    )


def tls_failed(cfg: ServerSettings, error: ssl.SSLError, reason: str) -> RemoteError:
    """A TLS failure: a certificate this machine does not trust, or https:// to a server that speaks plain http
    (both reached the server, are not retried, and the next try would fail the same; before, the second was
    'cannot reach the server ... WRONG_VERSION_NUMBER' after three tries, with the hint to check that it runs).
    Any other (a handshake cut off) is the server unreachable, retried."""
    if isinstance(error, ssl.SSLCertVerificationError):
        return RemoteError(
            f"the server at {cfg.endpoint} showed a certificate this machine does not trust ({error.verify_message}).",
            hint="Point the SSL_CERT_FILE environment variable to that certificate (or its authority's), "
            "or use http:// on a network you trust.",
        )
    if getattr(error, "reason", None) in NOT_TLS:
        return RemoteError(
            f"the server at {cfg.endpoint} was reached but does not speak TLS (https://): {error.reason}.",
            hint="Write the address with http:// in {endpoint} (a server started without a certificate speaks "
            "plain http), or give the server a certificate.",
        )
    return ServerUnreachable(f"cannot reach the server at {cfg.endpoint}: {reason}.")


def timed_out(cfg: ServerSettings) -> ServerUnreachable:
    tries = f" ({cfg.retries + 1} tries)" if cfg.retries else ""  # the connection check tries once
    return ServerUnreachable(f"the server at {cfg.endpoint} did not answer within {cfg.timeout_s:g} s{tries}.")


def cut_off(
    cfg: ServerSettings, error: http.client.IncompleteRead | http.client.RemoteDisconnected
) -> ServerUnreachable:
    """The server took the request and closed the connection before its answer was whole (a crash, a restart,
    a proxy's limit): not 'cannot reach the server', which sends the user to check an address that works."""
    if isinstance(error, http.client.RemoteDisconnected):
        return ServerUnreachable(f"the server at {cfg.endpoint} closed the connection without answering.")
    due = f", {error.expected} more were due" if error.expected else ""
    return ServerUnreachable(
        f"the server at {cfg.endpoint} closed the connection in the middle of its answer "
        f"({len(error.partial)} bytes came{due})."
    )


def http_error(cfg: ServerSettings, status: int, detail: str, method: str, url: str) -> RemoteError:
    """An HTTP error status as what it means for the run (after the retries, for those retried)."""
    model_missing = "model" in detail.lower() and ("not found" in detail.lower() or "does not exist" in detail)
    if model_missing or (status == 404 and "model" in detail.lower()):
        return ServedModelNotFound(
            f"the server at {cfg.endpoint} has no model {cfg.served_model!r} (HTTP {status}: {detail})."
        )
    if status in NO_API:  # a 404 that names no model, a POST refused: a wrong path prefix, another program's port
        what = f"nothing is served at {url}" if status == 404 else f"{url} takes no {method} request"
        return ServerError(status, f"{what} ({detail or 'no details'}): there is no OpenAI-compatible API at this "
                                   "address", hint=NO_API_HINT)
    if status in (401, 403) and cfg.api_key is None and cfg.api_key_env is None:  # not refused: none was sent
        both = " It goes to both servers." if cfg.prm_endpoint else ""
        return ServerError(status, f"it needs an API key, and none was sent ({detail or 'no details'})",
                           hint=KEY_NEEDED_HINT + both, endpoint=cfg.endpoint)
    if status in (401, 403):  # said with the address and its option: a PRM server's said neither
        both = "; it goes to both servers" if cfg.prm_endpoint else ""
        return ServerError(
            status,
            f"the API key was refused ({detail or 'no details'})",
            hint=f"Check the API key of the {{endpoint}} server (--api-key-env NAME: the variable that holds "
            f"it{both}).",
            endpoint=cfg.endpoint,
        )
    if status == 429:  # still too many after the retries: the server is busy, not down or misaddressed
        tries = f" (asked {cfg.retries + 1} times)" if cfg.retries else ""
        return ServerError(status, detail or "too many requests", endpoint=cfg.endpoint,
                           hint=f"The server is busy{tries}: run again later, or ask the server's owner about "
                                "its limits.")
    return ServerError(status, detail, endpoint=cfg.endpoint)
