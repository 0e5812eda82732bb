"""A follow-up to a server's run: its hint names the server, and a follow-up given without it says it runs on a
local model (it switched to the bundled model unsaid)."""

from __future__ import annotations

from pathlib import Path

from app.cli import main
from tests.fake_openai import MODEL, FakeServer

SMALL = ["--beams", "2", "--width", "2", "--max-steps", "2", "--step-tokens", "8"]


def test_a_server_runs_follow_up_hint_names_the_server_and_a_local_follow_up_says_it_switched(capsys, tmp_path: Path,
                                                                                               monkeypatch):
    monkeypatch.setenv("BEAMWISE_TEST_KEY", "sk-secret-123")
    db = str(tmp_path / "s.db")
    with FakeServer() as server:
        assert main(["run", "What is 2+3?", "--backend", "openai", "--endpoint", server.url, "--served-model", MODEL,
                     "--api-key-env", "BEAMWISE_TEST_KEY", *SMALL, "--db", db]) == 0
        said = capsys.readouterr().err
        again = f"--backend openai --endpoint {server.url} --served-model {MODEL} --api-key-env BEAMWISE_TEST_KEY"
        assert f"ask a follow-up with: beamwise run --session 1 --db {db} {again} \"...\"" in said, said
        assert "sk-secret-123" not in said

        assert main(["run", "--session", "1", "And times 4?", "--model", "synthetic:tiny-llama", *SMALL,
                     "--db", db]) == 0
        said = capsys.readouterr().err
        assert f"session 1 ran on the server at {server.url}; this follow-up runs on synthetic:tiny-llama here" in said
        assert f"To go on there, add {again}." in said
        assert f"ask a follow-up with: beamwise run --session 2 --db {db} --model synthetic:tiny-llama \"...\"" \
            in said  # a local turn: no server to repeat



def test_a_prm_servers_follow_up_hint_names_it_too(capsys, tmp_path: Path):
    """The hint repeated the generator's server only: a pasted follow-up scored with the default verifier unsaid."""
    from tests.fake_openai import PRM

    db = str(tmp_path / "s.db")
    with FakeServer(mode="prm") as server:
        assert main(["run", "What is 2+3?", "--backend", "openai", "--endpoint", server.url, "--served-model", MODEL,
                     "--verifier", "prm", "--verifier-endpoint", server.url, "--verifier-model", PRM,
                     "--beams", "1", "--width", "2", "--max-steps", "2", "--step-tokens", "16", "--db", db]) == 0
    said = capsys.readouterr().err
    assert (f"--session 1 --db {db} --backend openai --endpoint {server.url} --served-model {MODEL} --verifier prm "
            f"--verifier-endpoint {server.url} --verifier-model {PRM} \"...\"") in said, said
