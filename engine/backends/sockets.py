"""The client's socket: connecting, TLS and reading, each waiting in POLL_S slices.

A request to a generator server must end when the user presses Stop and when its timeout passes, whatever the
network does: a host that drops the connection request, a name server or a TLS handshake that never answers, a
server that sends a byte a second. A socket's own timeout bounds each call only, so every wait here is cut into
POLL_S slices that ask `should_stop` and check the deadline between them.
"""

from __future__ import annotations

import errno
import io
import ipaddress
import os
import select
import socket
import ssl
import time
from collections.abc import Callable

from engine.abandon import abandonable

POLL_S = 0.05  # how often a waiting request asks `should_stop`: a Stop takes effect within this
StopFn = Callable[[], bool]


def never() -> bool:
    return False


class AnswerTooLarge(Exception):
    """More bytes arrived for one answer than the reader's limit; the client names the server."""


class RequestCancelled(Exception):  # a cancellation, not an error: the search yields RunCancelled
    """The user stopped the run while a request was in flight; the connection was closed."""


IN_PROGRESS = {0, errno.EINPROGRESS, errno.EWOULDBLOCK, getattr(errno, "WSAEWOULDBLOCK", 0)}  # (Windows)


def connect(
    address: tuple[str, int], timeout: float, deadline: float, should_stop: StopFn, tls: bool
) -> socket.socket:
    """socket.create_connection (and TLS on it for https), waiting in POLL_S slices: a host that drops the
    connection request (a box that went away, a firewall), or takes it and never answers the TLS handshake, held
    a Stop for the whole timeout. Each of the host's addresses is tried in turn."""
    error = OSError(f"no address for {address[0]}")
    for family, kind, proto, _, where in _resolve(address, deadline, should_stop):
        sock = socket.socket(family, kind, proto)
        try:
            code = _wait_connected(sock, where, deadline, should_stop)
            if code == 0 and tls:
                sock = _handshake(sock, address[0], deadline, should_stop)
            if code == 0:
                sock.settimeout(timeout)  # inside: a timeout too large for the system (1e10 s) left it open
                return sock
        except BaseException:  # a Stop, the deadline, a certificate refused
            sock.close()
            raise
        sock.close()
        error = OSError(code, os.strerror(code))
    raise error


def _resolve(address: tuple[str, int], deadline: float, should_stop: StopFn) -> list:
    """socket.getaddrinfo on a daemon thread, waited in POLL_S slices: a name server that does not answer held
    a Stop, and the request's timeout, for as long as the system's resolver waits (tens of seconds)."""
    look_up = lambda: socket.getaddrinfo(*address, type=socket.SOCK_STREAM)  # noqa: E731
    try:
        ipaddress.ip_address(address[0])
        return look_up()  # an address, not a name: nothing to wait on
    except ValueError:
        pass

    def check() -> None:
        if should_stop():
            raise RequestCancelled
        if time.monotonic() > deadline:
            raise TimeoutError

    return abandonable(look_up, "beamwise-resolve", check, POLL_S)


def _wait_connected(sock: socket.socket, where: tuple, deadline: float, should_stop: StopFn) -> int:
    """Start connecting, then wait in POLL_S slices: 0 once connected, else the error number."""
    sock.setblocking(False)
    code = sock.connect_ex(where)
    if code not in IN_PROGRESS:
        return code
    _wait(sock, True, deadline, should_stop)
    return sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)


def _handshake(sock: socket.socket, host: str, deadline: float, should_stop: StopFn) -> ssl.SSLSocket:
    """TLS on the connected, non-blocking `sock` (the system's certificates, the host's name checked)."""
    tls = ssl.create_default_context().wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False)
    try:
        while True:
            try:
                tls.do_handshake()
                return tls
            except ssl.SSLWantReadError:
                _wait(tls, False, deadline, should_stop)
            except ssl.SSLWantWriteError:
                _wait(tls, True, deadline, should_stop)
    except BaseException:
        tls.close()
        raise


def _wait(sock: socket.socket, write: bool, deadline: float, should_stop: StopFn) -> None:
    """Until `sock` can be read (or written), asking `should_stop` every POLL_S; TimeoutError past `deadline`.
    The third list: Windows says there that a connection failed."""
    while not any(select.select([] if write else [sock], [sock] if write else [], [sock], POLL_S)):
        if should_stop():
            raise RequestCancelled
        if time.monotonic() > deadline:
            raise TimeoutError


class SlicedSocket(io.RawIOBase):
    """The socket as HTTPResponse reads it: each read waits in POLL_S slices, asking `should_stop` between them,
    and fails past `deadline`, so the whole answer comes within the timeout. A socket timeout alone bounds each
    read: a server (or proxy) that sends a byte a second never trips it, and a Stop would wait for the end."""

    def __init__(self, sock, deadline: float, should_stop: StopFn, limit: int) -> None:
        super().__init__()
        self.sock, self.deadline, self.should_stop = sock, deadline, should_stop
        self.left = limit  # a body without end would fill the memory before the deadline

    def makefile(self, mode: str) -> io.BufferedReader:  # what HTTPResponse asks its socket for
        return io.BufferedReader(self)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        pending = getattr(self.sock, "pending", None)  # TLS: bytes already decrypted are not seen by select
        if not (pending and pending()):
            _wait(self.sock, False, self.deadline, self.should_stop)
        count = self.sock.recv_into(buffer)
        self.left -= count
        if self.left < 0:
            raise AnswerTooLarge
        return count
