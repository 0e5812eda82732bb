"""A pull's messages in the words of where it was asked: the command line names --endpoint and `beamwise models
pull`, the window its Hub field and Pull button; a hub silent before it listed its files says nothing was
downloaded (there is nothing to resume)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app import model_pull
from app.model_pull import PullCancelled, PullError, pull
from app.pull_failures import WINDOW_WORDS
from tests.hub_server import CONFIG, REPO, Hub

pytestmark = pytest.mark.usefixtures("scratch_models")
CLI_ONLY = ("--endpoint", "beamwise models pull")


class HtmlSite:
    """A web server that answers every path with a page: no hub."""

    def __enter__(self) -> str:
        class Page(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # http.server's name for it
                body = b"<html><body>a blog</body></html>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def closed_port() -> str:
    with Hub(REPO) as hub:
        return hub.endpoint


def failure(endpoint: str, **words) -> str:
    with pytest.raises(PullError) as raised:
        pull("tiny/llama", endpoint=endpoint, **words)
    return str(raised.value)


def test_the_window_words_name_the_hub_field_and_the_pull_button():
    with HtmlSite() as site:
        not_a_hub = failure(site, words=WINDOW_WORDS)
    unreachable = failure(closed_port(), words=WINDOW_WORDS)
    bad_address = failure("notaurl", words=WINDOW_WORDS)
    assert "check the Hub address: it should be a Hugging Face hub" in not_a_hub
    assert "type a mirror's address into Hub, and press Pull again" in unreachable
    assert bad_address.startswith("the Hub address must be an http:// or https:// URL")
    for said in (not_a_hub, unreachable, bad_address):
        assert not any(option in said for option in CLI_ONLY), said


def test_the_command_line_keeps_its_words():
    with HtmlSite() as site:
        assert "check --endpoint: it should be" in failure(site)
    assert "pass --endpoint for a mirror, and pull again" in failure(closed_port())


@pytest.mark.parametrize(("words", "said"), [({}, "`beamwise models pull` again resumes it"),
                                             ({"words": WINDOW_WORDS}, "pressing Pull again resumes it")])
def test_a_cancel_says_how_to_resume_where_it_was_asked(words, said):
    cancel, hold = threading.Event(), threading.Event()
    with Hub(REPO, hold=("model.safetensors", hold)) as hub:
        try:
            with pytest.raises(PullCancelled) as raised:
                pull("tiny/llama", endpoint=hub.endpoint, cancel=cancel,
                     report=lambda p: cancel.set() if p.done > len(CONFIG) else None, **words)
        finally:
            hold.set()
    assert said in str(raised.value)


def test_a_hub_silent_before_listing_its_files_says_nothing_was_downloaded(monkeypatch):
    """It said "Pull again later (it resumes)" where no folder had been made."""
    monkeypatch.setattr(model_pull, "TIMEOUT", 0.5)
    with Hub(REPO) as hub:
        hub.api_hold = threading.Event()
        try:
            said = failure(hub.endpoint)
        finally:
            hub.api_hold.set()
    assert "after Beamwise asked for its files, so nothing was downloaded. Try again later" in said
    assert "resume" not in said and not model_pull.destination("tiny/llama").exists()
