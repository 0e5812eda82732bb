"""An address that is not the server's OpenAI-compatible API, and a server too busy to answer, each said as what it
is: an address a request cannot carry is refused before any request, https:// to a plain-http server is said to
need http:// (once, not three times as 'cannot reach'), a web server that is not the API is named as one, and a
429 after the retries says the server is busy rather than to check the address."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.cli import main
from engine.backends.addresses import address_problem
from engine.backends.openai import OpenAICompletions, ServerConfig, check_connection
from engine.errors import RemoteError, ServerError, ServerUnreachable
from tests.fake_openai import MODEL, FakeServer
from tests.plain_web import plain_files, serving
from tests.test_server_as_a_user import one_error

ASK = {"max_tokens": 4, "stop": [], "temperature": 0.0, "top_p": 1.0, "seed": 0}


def cli_run(url: str) -> list[str]:
    return ["run", "What is 2+3?", "--backend", "openai", "--endpoint", url, "--served-model", MODEL, "--no-save",
            "--beams", "1", "--width", "2", "--max-steps", "1", "--step-tokens", "8", "--request-timeout", "5"]


# 3. a path with a space or a character beyond ASCII
@pytest.mark.parametrize(("path", "said"), [
    ("/\u0432\u0445\u043e\u0434", "its path holds characters beyond ASCII (write them percent-encoded"),
    ("/a b", "it holds a space or a control character (write a space in its path as %20)"),
    ("/a\u00a0b", "it holds a space or a control character"),
    ("/a\x7fb", "it holds a space or a control character"),
])  # fmt: skip
def test_an_address_a_request_line_cannot_carry_is_refused_before_any_request(capsys, path: str, said: str) -> None:
    """Before: '/вход' failed as a fault in Beamwise (UnicodeEncodeError), and '/a b' was said as the server
    answering 'something that is not HTTP (it began "URL can't contain control characters...")' though nothing
    had been sent."""
    with FakeServer() as server:
        assert said in address_problem(server.url + path)
        code = main(cli_run(server.url + path))
        assert not server.requests and not server.asked.is_set()
    line = one_error(capsys)
    assert code == 2 and "is not a server address like http://gpu-box:8000" in line and said in line, line
    assert "not HTTP" not in line and "answered" not in line, line


def test_the_percent_encoded_path_and_a_host_beyond_ascii_are_still_taken() -> None:
    assert address_problem("http://127.0.0.1:8000/%D0%B2%D1%85/v1") == ""
    assert address_problem("http://\u043f\u0440\u0438\u043c\u0435\u0440.\u0440\u0444:8000") == ""  # a name (IDNA)


def test_an_invalid_url_from_http_client_is_said_as_the_address_not_as_the_servers_answer() -> None:
    """The address check keeps such a path out; should one reach the request, http.client's InvalidURL (raised
    before anything is sent) is the address's fault."""
    backend = OpenAICompletions(ServerConfig("http://127.0.0.1:1", MODEL, retries=2))
    with pytest.raises(RemoteError) as refused:
        backend._send("GET", "http://127.0.0.1:1/a\x01b/v1/models", None)
    message = refused.value.user_message()
    assert "is not a URL like http://host:8000" in message and "not HTTP" not in message, message


# 4. https:// to a server that speaks plain http
def test_https_to_a_plain_http_server_says_to_use_http_once() -> None:
    """Before: 'cannot reach the server ... [SSL: WRONG_VERSION_NUMBER] ... Check --endpoint and that the server
    is running', after three tries."""
    with FakeServer() as server:
        backend = OpenAICompletions(ServerConfig(server.url.replace("http://", "https://"), MODEL, retries=2,
                                                 backoff_s=0.0))
        with pytest.raises(RemoteError) as refused:
            backend.check_model()
    assert not isinstance(refused.value, ServerUnreachable) and backend.requests == 1
    message = refused.value.user_message()
    assert "was reached but does not speak TLS (https://)" in message, message
    assert "Write the address with http:// in --endpoint" in message and "cannot reach" not in message, message


# 6. 429 after the retries
def test_too_many_requests_after_the_retries_says_the_server_is_busy() -> None:
    """Before: 'answered HTTP 429: Too many requests. Check --endpoint and --served-model, and that the server is
    running', though the server ran at that address and answered."""
    with FakeServer(busy=(None, None, None)) as server:
        backend = OpenAICompletions(ServerConfig(server.url, MODEL, retries=2), sleep=lambda seconds: None)
        with pytest.raises(ServerError) as refused:
            backend.complete("2+3=", **ASK)
    assert refused.value.status == 429 and backend.requests == 3
    message = refused.value.user_message()
    assert message.endswith("Too many requests. The server is busy (asked 3 times): run again later, or ask the "
                            "server's owner about its limits."), message
    assert "--served-model" not in message and "that the server is running" not in message, message


# 7. a web server that is not the API
def test_a_web_server_that_is_not_the_api_is_said_to_be_no_openai_compatible_api(capsys, tmp_path: Path) -> None:
    """Before: 'answered HTTP 501: Error response. Check --endpoint and --served-model, and that the server is
    running': the page's title, and a hint that fits a server that is down. Its 404 page for /v1/models now
    refuses it at the check, before a run records anything; a completion sent there still says what it answered."""
    with serving(plain_files(tmp_path)) as url:
        code = main(cli_run(url))
        with pytest.raises(ServerError) as refused:
            check_connection(ServerConfig(url, MODEL))
        with pytest.raises(ServerError) as posted:
            OpenAICompletions(ServerConfig(url, MODEL, retries=0)).complete("2+3=", **ASK)
    line = one_error(capsys)
    assert code == 2, line
    assert f"HTTP 404: nothing is served at {url}/v1/models (Error response: " in line, line
    assert "there is no OpenAI-compatible API at this address" in line
    assert "Check the address" in line and "--served-model" not in line, line
    assert refused.value.status == 404 and "no OpenAI-compatible API" in refused.value.user_message()
    said = posted.value.user_message()
    assert posted.value.status == 501 and f"{url}/v1/completions takes no POST request (Error response: " in said
    assert "Unsupported method ('POST')" in said


def test_a_404_that_names_the_model_is_still_the_model() -> None:
    with FakeServer(mode="404") as server:
        with pytest.raises(RemoteError) as refused:
            OpenAICompletions(ServerConfig(server.url, MODEL, retries=0)).complete("2+3=", **ASK)
    message = refused.value.user_message()
    assert "has no model 'fake-model'" in message and "OpenAI-compatible API at this address" not in message


def test_an_html_error_page_is_said_by_its_title_and_its_message() -> None:
    from engine.backends.replies import error_detail

    page = (b"<html><head><meta charset='utf-8'><title>Error response</title></head><body><h1>Error response</h1>"
            b"<p>Message: Unsupported method ('POST').</p></body></html>")
    assert error_detail(page) == "Error response: Message: Unsupported method ('POST')."
    nginx = b"<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1><hr>nginx</body></html>"
    assert error_detail(nginx) == "502 Bad Gateway: nginx"
    login = b"<html><head><title>Sign in</title><script>var a = '<b>';</script></head><body>" + b"<a>Menu</a>" * 60
    assert error_detail(login + b"</body></html>") == "Sign in"  # a whole page's text is its menus
