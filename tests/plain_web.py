"""A web server on 127.0.0.1 for the tests of addresses that are not what they should be: `serving(handler)` runs
any handler on a free port; `plain_files(folder)` is `python -m http.server` on `folder` (an HTML 404 page for a
path it has no file for, 501 to every POST)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """The server's address while the block runs; shut down after it."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def plain_files(folder: Path) -> type[SimpleHTTPRequestHandler]:
    class Files(SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, directory=str(folder), **kwargs)

        def log_message(self, *args) -> None:
            pass

    return Files
