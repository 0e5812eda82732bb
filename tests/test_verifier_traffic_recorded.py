"""`sessions show` and the exports gave the session's H2D and D2H, the generator's alone, though `run` printed the
verifier's own traffic each step ("verifier KV: ... H2D 0 B, D2H 38,400 B"); and neither said that a PRM ran on the
CPU. Both are now said, with the figures `run` printed."""

from __future__ import annotations

import re

from app.cli import main

RUN = ["--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2", "--max-steps", "2", "--step-tokens", "8",
       "--verifier", "prm", "--verifier-model", "synthetic:tiny-qwen-prm"]


def printed_verifier_bytes(out: str) -> tuple[int, int]:
    """The sums of the per-step "verifier KV ... H2D X B, D2H Y B" lines `run` prints."""
    pairs = re.findall(r"verifier KV.*H2D ([\d,]+) B, D2H ([\d,]+) B", out)
    return tuple(sum(int(p[i].replace(",", "")) for p in pairs) for i in (0, 1))


def test_show_and_markdown_carry_the_verifiers_traffic(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    db = str(tmp_path / "s.db")
    assert main(["run", "What is 2+3?", *RUN, "--db", db]) == 0
    h2d, d2h = printed_verifier_bytes(capsys.readouterr().out)
    assert h2d + d2h > 0
    assert main(["sessions", "show", "1", "--db", db]) == 0
    shown = capsys.readouterr().out
    assert f"verifier KV traffic H2D {h2d:,} B, D2H {d2h:,} B (apart from the generator's)" in shown, shown
    assert "on the CPU" not in shown
    assert main(["sessions", "export", "1", "--db", db, "--format", "md"]) == 0
    assert f"The verifier KV traffic H2D {h2d:,} B, D2H {d2h:,} B" in capsys.readouterr().out


def test_a_prm_on_the_cpu_is_said_by_run_and_show(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    db = str(tmp_path / "s.db")
    assert main(["run", "What is 2+3?", *RUN, "--verifier-device", "cpu", "--db", db]) == 0
    assert "(on the CPU, its KV in CPU memory); method beam" in capsys.readouterr().out
    assert main(["sessions", "show", "1", "--db", db]) == 0
    assert "the PRM ran on the CPU, its KV in CPU memory" in capsys.readouterr().out


def test_a_logprob_run_shows_no_verifier_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    db = str(tmp_path / "s.db")
    assert main(["run", "What is 2+3?", *RUN[:10], "--db", db]) == 0
    capsys.readouterr()
    assert main(["sessions", "show", "1", "--db", db]) == 0
    assert "verifier KV traffic" not in capsys.readouterr().out
