"""An OpenAI-compatible /v1/completions server in a thread on 127.0.0.1, deterministic, that can be told to fail.

Each answer is a function of the prompt and the seed (choice i of a request with n > 1 uses seed + i):
the third step of a path states the answer and ends (EOS), earlier steps stop at the delimiter.
A prompt ending in "Answer:" with max_tokens 1 is a self-judge question, answered with top log-probabilities.
Mode "llama.cpp" answers in the shape llama.cpp's server uses (log-probabilities under "content", no
"stop_reason"). Other modes fail: "404" (no such model), "500", "no-logprobs", "no-top-logprobs" (none for
the self-judge), "n-ignored" (one choice whatever n asks), "no-text" (choices without their text), "slow"
(answers after `delay` seconds, or notes in `abandoned` a client that left first), "trickle" (sends the
headers at once, then the answer one byte every `delay` seconds, as a stalled proxy can).
"odd-shapes" answers in shapes a proxy may send: `usage` a list, each choice's index text, and a model
listing whose "data" is not a list.
"cut" sends half of each completion's answer and closes the connection (a crash, a proxy's limit).
"nested" answers each completion with 100,000 nested JSON lists (valid JSON, deeper than Python's stack).
"long" answers each completion with 16 MB of spaces before its JSON (valid, and far larger than an answer).
"redirect" answers every request 301 to https://elsewhere.example (as a proxy that wants TLS does).
"prm" also lists the PRM in /v1/models, as the PRM's own vLLM server does (it serves /pooling in every mode).
"silent" takes every request, the model listing too, and answers nothing for `delay` seconds or until the client
leaves (a server stuck under load); `asked` is set at the first. "not-http" answers bytes that are not HTTP, a NUL
and a CR among them (another program on the port).
`tls` = (certificate file, key file) serves https with that certificate.
`key` makes it answer 401 to a request without that bearer key; `fail_after` answers 500 from that
many completions on (a server that dies in the middle of a run); `busy` answers the first completions 429,
one for each of its Retry-After values (None: no header), as a server under load does.
"""

from __future__ import annotations

import json
import math
import select
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "fake-model"
PRM = "fake-prm"  # served on /pooling (vLLM's route for reward models): [P(-), P(+)] at each <extra_0>


class FakeServer:
    def __init__(self, mode: str = "ok", delay: float = 1.0, key: str | None = None,
                 fail_after: int | None = None, tls: tuple[str, str] | None = None,
                 busy: tuple[str | None, ...] = ()) -> None:
        self.mode, self.delay, self.key, self.fail_after, self.tls = mode, delay, key, fail_after, tls
        self.busy = list(busy)
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.abandoned: list[float] = []  # "slow": when a client closed its connection before the answer
        self.pooled: list[dict] = []  # /pooling requests
        self.asked = threading.Event()  # any request came
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> FakeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def refuses(self, authorization: str | None) -> bool:
        return self.key is not None and authorization != f"Bearer {self.key}"

    def answer(self, body: dict) -> tuple[int, dict]:
        """The answer to a completion request already appended to `requests`."""
        if self.mode == "500" or (self.fail_after is not None and len(self.requests) > self.fail_after):
            return 500, {"error": {"message": "internal error"}}
        if self.mode == "404" or body.get("model") != MODEL:
            return 404, {"error": {"message": f"The model `{body.get('model')}` does not exist."}}
        if body["prompt"].endswith("\nAnswer:") and body["max_tokens"] == 1 and body.get("logprobs", 0) > 1:
            counted = "many" if self.mode == "odd-shapes" else len(body["prompt"])
            return 200, {"choices": [self._judgement(body["prompt"])], "usage": {"prompt_tokens": counted}}
        n = 1 if self.mode == "n-ignored" else body.get("n", 1)
        choices = [self._choice(body["prompt"], body.get("seed", 0) + index, body["max_tokens"]) for index in range(n)]
        for index, choice in enumerate(choices):
            choice["index"] = index
        words = sum(len(c["text"].split()) for c in choices)
        for choice in choices if self.mode == "no-text" else ():
            del choice["text"]
        if self.mode == "odd-shapes":
            return 200, {"choices": [dict(c, index=str(c["index"])) for c in choices], "usage": [words]}
        return 200, {"choices": choices, "usage": {"prompt_tokens": len(body["prompt"].split()),
                                                   "completion_tokens": words}}

    def pool(self, body: dict) -> tuple[int, dict]:
        """A step with "idea 0" is judged wrong (P(+) 0.2), others right (0.9)."""
        self.pooled.append(body)
        if body.get("model") != PRM:
            return 404, {"error": {"message": f"The model `{body.get('model')}` does not exist."}}
        steps = body["messages"][-1]["content"].split("<extra_0>")[:-1]
        data = [[0.8, 0.2] if "idea 0" in step else [0.1, 0.9] for step in steps]
        return 200, {"object": "list", "data": [{"index": 0, "object": "pooling", "data": data}]}

    def _judgement(self, prompt: str) -> dict:
        """The self-judge's one token: a last step with "idea 0" is judged wrong (P(yes) 0.2), others right (0.9)."""
        last = prompt.rsplit("\n\nIs the last step", 1)[0].rsplit("\n\n", 1)[-1]
        p_yes = 0.2 if "idea 0" in last else 0.9
        top = {" Yes": math.log(p_yes * 0.9), " No": math.log((1 - p_yes) * 0.9), " Maybe": math.log(0.1)}
        choice = {"index": 0, "text": " Yes" if p_yes > 0.5 else " No", "finish_reason": "length"}
        if self.mode in ("no-logprobs", "no-top-logprobs"):
            choice["logprobs"] = None
        elif self.mode == "llama.cpp":
            items = [{"token": t, "logprob": v} for t, v in top.items()]
            choice["logprobs"] = {"content": [{"token": choice["text"], "logprob": 0.0, "top_logprobs": items}]}
        else:
            choice["logprobs"] = {"tokens": [choice["text"]], "token_logprobs": [0.0], "top_logprobs": [top]}
        return choice

    def _choice(self, prompt: str, seed: int, max_tokens: int) -> dict:
        done = prompt.split("Solution:\n", 1)[-1].count("\n\n")
        if done >= 2:
            text, stop_reason = f"The answer is: {80 + seed % 2} km/h", None
        else:
            text, stop_reason = f"Step {done + 1}: idea {seed % 5}.", "\n\n"
        words = text.split()
        cut = len(words) > max_tokens
        words, reason = words[:max_tokens], "length" if cut else "stop"
        stop_reason = None if cut else stop_reason
        logprobs = [-((seed + i) % 7 + 1) / 10 for i in range(len(words))]
        choice = {"index": 0, "text": " ".join(words), "finish_reason": reason, "stop_reason": stop_reason}
        if self.mode == "no-logprobs":
            choice["logprobs"] = None
        elif self.mode == "llama.cpp":
            del choice["stop_reason"]
            choice["logprobs"] = {"content": [{"token": w, "logprob": v} for w, v in zip(words, logprobs, strict=True)]}
        else:
            choice["logprobs"] = {"tokens": words, "token_logprobs": logprobs}
        return choice


def _handler(server: FakeServer):
    class Handler(BaseHTTPRequestHandler):
        def handle_one_request(self) -> None:
            server.asked.set()
            if server.mode == "silent":
                self.raw_requestline = self.rfile.readline(65537)
                if self.parse_request():  # the request read whole, so that a hang-up is what the socket shows
                    self.rfile.read(int(self.headers.get("Content-Length", 0)))
                    self._client_left_within(server.delay)
                self.close_connection = True
            elif server.mode == "not-http":
                self.rfile.readline()
                self.wfile.write(b"\x00\xffTHIS IS NOT HTTP\r\n\r\ngarbage\n")
                self.close_connection = True
            else:
                super().handle_one_request()

        def do_GET(self) -> None:
            if server.mode == "redirect":
                self._redirect()
            elif server.refuses(self.headers.get("Authorization")):
                self._send(401, {"error": {"message": "Invalid API key", "type": "invalid_request_error"}})
            elif self.path == "/v1/models" and server.mode == "odd-shapes":
                self._send(200, {"object": "list", "data": {"id": MODEL}})
            elif self.path == "/v1/models" and server.mode != "404":
                served = [MODEL, PRM] if server.mode == "prm" else [MODEL]
                self._send(200, {"object": "list", "data": [{"id": name, "object": "model"} for name in served]})
            else:
                self._send(404, {"error": {"message": "not found"}})

        def do_POST(self) -> None:
            server.headers.append(dict(self.headers))
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length))
            if server.mode == "redirect":
                self._redirect()
                return
            if server.refuses(self.headers.get("Authorization")):
                self._send(401, {"error": {"message": "Invalid API key", "type": "invalid_request_error"}})
                return
            if self.path == "/pooling":
                self._send(*server.pool(body))
                return
            if self.path != "/v1/completions":
                self._send(404, {"error": {"message": "not found"}})
                return
            server.requests.append(body)
            if server.busy:
                self._too_many(server.busy.pop(0))
                return
            if server.mode == "slow" and self._client_left_within(server.delay):
                server.abandoned.append(time.monotonic())
                return
            if server.mode == "trickle":
                self._trickle(*server.answer(body))
                return
            if server.mode == "long":
                self._send_raw(200, b" " * 16_000_000 + json.dumps(server.answer(body)[1]).encode())
                return
            if server.mode == "nested":
                self._send_raw(200, b"[" * 100_000 + b"]" * 100_000)
                return
            if server.mode == "cut":
                self._cut(*server.answer(body))
                return
            self._send(*server.answer(body))

        def _client_left_within(self, seconds: float) -> bool:
            """Compute for `seconds`, noticing (as vLLM and llama.cpp's server do) a client that hangs up."""
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                if not select.select([self.connection], [], [], 0.01)[0]:
                    continue
                try:
                    if self.connection.recv(1, socket.MSG_PEEK) == b"":
                        return True
                except ConnectionError:
                    return True
                time.sleep(0.01)  # bytes waiting (not a hang-up): keep computing
            return False

        def _send(self, status: int, data: dict) -> None:
            self._send_raw(status, json.dumps(data).encode())

        def _send_raw(self, status: int, raw: bytes) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)
            except (BrokenPipeError, ConnectionResetError):  # the client timed out and left
                pass

        def _cut(self, status: int, data: dict) -> None:
            raw = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw[: len(raw) // 2])
            self.close_connection = True

        def _too_many(self, retry_after: str | None) -> None:
            raw = json.dumps({"error": {"message": "Too many requests"}}).encode()
            self.send_response(429)
            if retry_after is not None:
                self.send_header("Retry-After", retry_after)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def _redirect(self) -> None:
            self.send_response(301)
            self.send_header("Location", f"https://elsewhere.example{self.path}")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _trickle(self, status: int, data: dict) -> None:
            raw = json.dumps(data).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.flush()
                for byte in raw:
                    time.sleep(server.delay)
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):  # the client left
                server.abandoned.append(time.monotonic())

        def log_message(self, *args) -> None:
            pass

    return Handler


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def unanswered_port() -> Iterator[int | None]:
    """A port on 127.0.0.1 whose listen queue is full, so that a new connection request goes unanswered, as to a
    box that went away; None where this system refuses such a request at once instead of dropping it."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        held: list[socket.socket] = []
        try:
            for _ in range(8):  # fill the queue until a request waits
                probe = socket.socket()
                probe.settimeout(0.2)
                try:
                    probe.connect(("127.0.0.1", port))
                except TimeoutError:
                    probe.close()
                    yield port
                    return
                except OSError:
                    probe.close()
                    break
                held.append(probe)
            yield None
        finally:
            for sock in held:
                sock.close()
