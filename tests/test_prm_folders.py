"""A PRM folder's family, and the entropy exit's refusal, read without torch: the window checks them before PyTorch
has loaded, and must not import it on its own thread to do so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from safetensors import safe_open

from engine.prm_folders import tensor_names
from engine.verifiers.synthetic_prm import SYNTHETIC_PRMS, save_synthetic_prm

ROOT = Path(__file__).resolve().parent.parent

DETECT = """
import json, sys
from pathlib import Path
from engine.prm_folders import detect_family, exit_refusal
folders = json.loads(sys.argv[1])
families = {name: detect_family(Path(folder)) for name, folder in folders.items()}
refusals = {name: exit_refusal("prm", folder) is not None for name, folder in folders.items()}
synthetic = {name: exit_refusal("prm", "synthetic:" + name) is not None for name in folders}
heavy = sorted(m for m in ("torch", "transformers", "safetensors") if m in sys.modules)
print(json.dumps({"families": families, "refusals": refusals, "synthetic": synthetic, "heavy": heavy}))
"""


def test_families_and_exit_refusals_are_read_without_importing_torch(tmp_path):
    folders = {name: str(save_synthetic_prm(name, tmp_path / name)) for name in SYNTHETIC_PRMS}
    done = subprocess.run([sys.executable, "-c", DETECT, json.dumps(folders)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["families"] == {name: entry.family for name, entry in SYNTHETIC_PRMS.items()}, done.stderr[-2000:]
    lens = {"tiny-math-shepherd", "tiny-rlhflow-prm"}
    assert seen["synthetic"] == {name: name not in lens for name in SYNTHETIC_PRMS}
    assert seen["refusals"] == seen["synthetic"]
    assert seen["heavy"] == []


def test_tensor_names_are_the_header_safetensors_reads(tmp_path):
    folder = save_synthetic_prm("tiny-qwen-prm", tmp_path / "prm")
    for file in folder.glob("*.safetensors"):
        with safe_open(str(file), framework="pt") as handle:
            assert sorted(tensor_names(file)) == sorted(handle.keys())
