"""A tiny Hugging Face hub on 127.0.0.1 for tests: the model-info API and `resolve` files with HTTP ranges."""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMMIT = "0123456789abcdef0123456789abcdef01234567"
CONFIG = json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
                     "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                     "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 2048,
                     "torch_dtype": "bfloat16"}).encode()


def safetensors_of(size: int) -> bytes:
    """A whole safetensors file of `size` bytes (one uint8 tensor after its header), as `models list` checks them."""
    header = b""
    for _ in range(2):  # the header's length names the tensor's, which names the header's
        data = size - 8 - len(header)
        header = json.dumps({"w": {"dtype": "U8", "shape": [data], "data_offsets": [0, data]}}).encode()
        header += b" " * (-len(header) % 8)
    return len(header).to_bytes(8, "little") + header + (bytes(range(256)) * (size // 256 + 1))[:data]


WEIGHTS = safetensors_of(1 << 20)  # 1 MiB
REPO = {"tiny/llama": {"config.json": CONFIG, "model.safetensors": WEIGHTS,  # a tiny model the tests pull
                      "tokenizer.json": b"{}"}}  # a listed model must have a tokenizer, as `add` and `run` ask


class Hub:
    """Serves `repos` ({repo_id: {filename: bytes}}); `ranges` records every Range header it was sent.
    With `hold=(filename, event)`, that file's body stops halfway until the event is set (a test cancels there);
    `commit` is the commit the repository is at (a test changes it with the files to publish a new version);
    with `api_hold`, the model-info API answers only once that event is set; a file named in `cut` ends halfway
    with the connection closed."""

    def __init__(self, repos: dict[str, dict[str, bytes]], hold: tuple[str, threading.Event] | None = None) -> None:
        self.repos, self.ranges, self.hold, self.commit = repos, [], hold, COMMIT
        self.api_hold: threading.Event | None = None
        self.cut: set[str] = set()
        self.revisions: list[str] = []  # the revision of every file asked for
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_HEAD(self) -> None:
                hub.serve(self, body=False)

            def do_GET(self) -> None:
                hub.serve(self, body=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Hub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def serve(self, request: BaseHTTPRequestHandler, body: bool) -> None:
        path = request.path.split("?")[0]
        if path.startswith("/api/models/"):
            repo = path.removeprefix("/api/models/").split("/revision/")[0]
            if self.api_hold is not None:
                self.api_hold.wait(30)
            if repo not in self.repos:
                return self._send(request, 404, b'{"error": "Repository not found"}', body,  # as huggingface.co
                                  {"Content-Type": "application/json", "X-Error-Code": "RepoNotFound"})
            siblings = [{"rfilename": n, "size": len(d), "blobId": hashlib.sha1(d).hexdigest()}
                        for n, d in self.repos[repo].items()]
            data = json.dumps({"id": repo, "modelId": repo, "sha": self.commit, "siblings": siblings}).encode()
            return self._send(request, 200, data, body, {"Content-Type": "application/json"})
        repo, _, rest = path.lstrip("/").partition("/resolve/")
        revision, _, name = rest.partition("/")
        self.revisions.append(revision)
        data = self.repos.get(repo, {}).get(name)
        if data is None:
            return self._send(request, 404, b"not found", body, {"X-Error-Code": "EntryNotFound"})
        headers = {"X-Repo-Commit": self.commit, "ETag": f'"{hashlib.sha1(data).hexdigest()}"',
                   "Accept-Ranges": "bytes"}
        wanted = request.headers.get("Range")
        if wanted and body:
            self.ranges.append(wanted)
            start = int(wanted.removeprefix("bytes=").split("-")[0])
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
            return self._send(request, 206, data[start:], body, headers)
        hold = self.hold[1] if self.hold is not None and self.hold[0] == name else None
        return self._send(request, 200, data, body, headers, hold, cut=name in self.cut)

    @staticmethod
    def _send(request, status: int, data: bytes, body: bool, headers: dict | None = None,
              hold: threading.Event | None = None, cut: bool = False) -> None:
        request.send_response(status)
        for key, value in (headers or {}).items():
            request.send_header(key, value)
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        if not body:
            return
        half = len(data) // 2 if hold is not None or cut else len(data)
        request.wfile.write(data[:half])
        if cut:
            request.close_connection = True
            return
        if hold is not None:
            request.wfile.flush()
            hold.wait(30)
        try:
            request.wfile.write(data[half:])
        except OSError:  # the client cancelled and closed the connection
            pass
