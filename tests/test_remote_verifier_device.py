"""--verifier-device with --backend openai: a PRM loaded here goes where the option says (before, always on CUDA
where there was one: beside a llama.cpp server on the same GPU, `--verifier-device cpu` was not honoured), and the
option is refused beside --verifier-endpoint, whose PRM runs on its server."""

from __future__ import annotations

import pytest
import torch

import engine.verifiers.families as families
from app.cli import main
from engine.backends.openai import OpenAICompletions, ServerConfig
from engine.config import SearchConfig
from engine.remote_search import make_verifier
from tests.fake_openai import MODEL, PRM, FakeServer
from tests.test_server_as_a_user import one_error, server_run


class Placed(Exception):
    """Raised by the stand-in loader with where the PRM was asked to go."""


@pytest.mark.parametrize(("device", "placed"), [("auto", ("cuda", torch.bfloat16)), ("cpu", ("cpu", torch.float32))])
def test_a_prm_loaded_here_goes_where_verifier_device_says(monkeypatch, device, placed):
    def load_prm(source, where, dtype):
        raise Placed(where.type, dtype)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU here, beside the server
    monkeypatch.setattr(families, "load_prm", load_prm)
    search = SearchConfig(verifier="prm", verifier_model="synthetic:tiny-qwen-prm", verifier_device=device)
    with pytest.raises(Placed) as asked:
        make_verifier(search, OpenAICompletions(ServerConfig("http://127.0.0.1:9", MODEL)))
    assert asked.value.args == placed


def test_verifier_device_beside_a_prm_server_is_refused(capsys):
    with FakeServer() as server:
        code = main(server_run(server.url, "--verifier", "prm", "--verifier-endpoint", server.url, "--verifier-model",
                               PRM, "--verifier-device", "cpu"))
        assert not server.requests
    line = one_error(capsys)
    assert code == 2 and "--verifier-device cpu places a PRM loaded on this machine" in line, line
    assert "leave one of them out" in line
