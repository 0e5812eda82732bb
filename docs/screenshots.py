"""Make the README's pictures of each view, headless: `python docs/screenshots.py` (Windows: `py docs\\screenshots.py`).

Each picture is the app's own `beamwise gui --question ... --screenshot PATH` on the bundled model, offscreen, with a
scratch session database and models folder (so the Sessions view lists the runs before it and the Models view a
model pulled from a hub on 127.0.0.1). Run it from the repository root with Beamwise installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
QUESTION = "A train travels 60 km in 45 minutes. What is its average speed in km/h?"
RUN = ["--beams", "3", "--width", "2", "--max-steps", "4", "--step-tokens", "40", "--policy", "lbs",
       "--kv-budget", "32MB"]
VIEWS = {  # file in docs/: extra options
    "screenshot.png": [],
    "screenshot-collapsed-dark.png": ["--collapse-pruned", "--theme", "dark"],
    "screenshot-sessions.png": ["--panel", "sessions"],
    "screenshot-models.png": ["--panel", "models"],
}
TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
        "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 4096,
        "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}


def beamwise(env: dict[str, str], *args: str) -> None:
    command = [sys.executable, "-m", "app.cli", *args]
    print("+ beamwise", " ".join(args), flush=True)
    subprocess.run(command, cwd=ROOT, env=env, check=True)


def pull_a_model(env: dict[str, str]) -> None:
    """`beamwise models pull` from a hub-layout server on 127.0.0.1, so the Models view shows a downloaded model:
    whole, as `models list` checks a model (its config, a safetensors file whose header names its tensors, and a
    tokenizer: without one it was a red problem row, and the table showed the Name column alone)."""
    from tests.hub_server import Hub, safetensors_of

    files = {"config.json": json.dumps(TINY).encode(), "model.safetensors": safetensors_of(4 << 20),
             **tokenizer_files(TINY["vocab_size"])}
    with Hub({"example/tiny-llama": files}) as hub:
        beamwise(env, "models", "pull", "example/tiny-llama", "--endpoint", hub.endpoint)


def tokenizer_files(vocab_size: int) -> dict[str, bytes]:
    """The synthetic models' tokenizer (engine/synthetic.py) as the files a model's folder holds."""
    from engine.synthetic import synthetic_tokenizer

    with tempfile.TemporaryDirectory(prefix="beamwise-tokenizer-") as folder:
        synthetic_tokenizer(vocab_size).save_pretrained(folder)
        return {path.name: path.read_bytes() for path in Path(folder).iterdir() if path.is_file()}


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="beamwise-shots-") as scratch:
        env = dict(os.environ, QT_QPA_PLATFORM="offscreen", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                   BEAMWISE_DATA_DIR=str(Path(scratch) / "data"))
        pull_a_model(env)
        db = str(Path(scratch) / "sessions.db")
        for name, extra in VIEWS.items():
            beamwise(env, "gui", "--question", QUESTION, *RUN, *extra, "--db", db,
                     "--screenshot", str(ROOT / "docs" / name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
