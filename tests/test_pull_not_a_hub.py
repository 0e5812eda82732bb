"""A pull from an address that answers 404 as any web server does is told to check the address, not the repository
id: only a hub's own answer for a missing repository (X-Error-Code: RepoNotFound, as huggingface.co sends it, with
a 404 or, to a caller without a token, a 401) says the repository was not found."""

from __future__ import annotations

import json
from http.server import SimpleHTTPRequestHandler
from urllib.error import HTTPError
from urllib.request import urlopen

import pytest

from app.cli import main
from app.model_pull import PullError, pull
from tests.hub_server import REPO, Hub
from tests.plain_web import plain_files, serving

pytestmark = pytest.mark.usefixtures("scratch_models")


class HubWithoutToken(SimpleHTTPRequestHandler):
    """huggingface.co's answer to a caller without a token asking for a repository that is not there."""

    def do_GET(self) -> None:
        body = b'{"error": "Repository not found"}'
        self.send_response(401)
        self.send_header("X-Error-Code", "RepoNotFound")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def test_a_plain_web_server_is_said_to_be_no_hub_not_the_repository_missing(tmp_path, capsys):
    """It said "the repository me/tinyllama was not found on ...; check the repository id", for any id."""
    with serving(plain_files(tmp_path)) as site:
        with pytest.raises(PullError) as raised:
            pull("me/tinyllama", endpoint=site)
        assert main(["models", "pull", "me/tinyllama", "--endpoint", site]) == 2
    said = str(raised.value)
    assert said.startswith(f"{site} answered, but not as a model hub does")
    assert "check --endpoint" in said and "repository id" not in said and "pull again" not in said
    assert "but not as a model hub does" in capsys.readouterr().err


def test_the_test_hub_answers_a_missing_repository_as_a_real_hub_does():
    """The fake hub sent a bare 404 body, which a plain web server sends too: the tests could not tell them apart."""
    with Hub(REPO) as hub, pytest.raises(HTTPError) as answer:
        urlopen(f"{hub.endpoint}/api/models/nobody/nothing/revision/main", timeout=30)
    assert answer.value.code == 404 and answer.value.headers["X-Error-Code"] == "RepoNotFound"
    assert json.loads(answer.value.read()) == {"error": "Repository not found"}
    answer.value.close()


def test_a_hub_that_asks_for_a_token_still_says_check_the_repository_id():
    with serving(HubWithoutToken) as hub, pytest.raises(PullError, match=r"^the repository nobody/nothing was not "
                                                                         r"found on .*; check the repository id"):
        pull("nobody/nothing", endpoint=hub)
