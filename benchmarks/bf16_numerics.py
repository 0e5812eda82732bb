"""Is a policy's teacher-forced logit difference in bf16 rounding, or a bug? Measure it against float32.

Every policy is teacher-forced on `in_device`'s bf16 tokens, in bf16, and the same weights
(the bf16 ones, widened) are run in float32 through `in_device` on the same tokens: that run
is the reference "truth". A bug shows as one path far from the truth while the others are
near it; rounding shows as every bf16 path about equally far from the truth, with the
differences between paths of the same size as each path's own error.

    python -m benchmarks.bf16_numerics                         # synthetic:tiny-llama
    python -m benchmarks.bf16_numerics --model numerics-llama  # head dim 128, vocab 32000 (slower)
    python -m benchmarks.bf16_numerics --model numerics-llama --layers 16 --hidden 256  # deeper
    python -m benchmarks.bf16_numerics --json numerics.json

(Windows: the same, with `py -m` if `python` is not on PATH.)
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import replace

import torch
from transformers import LlamaConfig

from engine.bench import Workload, observe_run
from engine.config import ModelSpec
from engine.models import load_model
from engine.synthetic import _SPECIAL_IDS, SYNTHETIC_MODELS, SyntheticModel

POLICIES = ("in_device", "lbs:inter_token", "lbs:+inter_beam", "layerwise")
STREAMING_LAYERS = 2.5  # the budget, in layers' worth of KV: layer-wise streams, LBS splits groups


def numerics_llama(layers: int, hidden: int) -> Callable[[], LlamaConfig]:
    """Llama-2-7B's head size (128) and vocabulary on a shape small enough for a CPU."""
    return lambda: LlamaConfig(
        vocab_size=32000, hidden_size=hidden, intermediate_size=hidden * 11008 // 4096, num_hidden_layers=layers,
        num_attention_heads=hidden // 128, num_key_value_heads=hidden // 128, max_position_embeddings=4096,
        rms_norm_eps=1e-5, tie_word_embeddings=False, **_SPECIAL_IDS,
    )  # fmt: skip


def compare(reference, other) -> dict[str, float]:
    """Largest and mean |logit difference| over the positions both runs decoded."""
    diffs = [
        (want - got).abs()
        for candidate, logits in reference.logits.items()
        for want, got in zip(logits, other.logits.get(candidate, ()), strict=False)
    ]
    stacked = torch.stack(diffs)
    return {"max": float(stacked.max()), "mean": float(stacked.mean())}


def measure(workload: Workload) -> dict:
    name = workload.model
    bf16 = load_model(ModelSpec(name, dtype="bfloat16"), device="cpu")
    longest = workload.prompt_tokens + workload.gen_tokens
    layers_worth = int(STREAMING_LAYERS * workload.search().candidates_per_step * longest)
    workload = replace(workload, kv_budget_bytes=layers_worth * bf16.kv_shape.layer_token_bytes())
    prompt = workload.prompt_ids(bf16)
    tokens = observe_run(bf16, workload, "in_device", prompt)
    forced = {p: observe_run(bf16, workload, p, prompt, tokens.replay()) for p in POLICIES}
    fp32 = load_model(ModelSpec(name, dtype="float32"), device="cpu")
    fp32.model.load_state_dict({k: v.float() for k, v in bf16.model.state_dict().items()})
    truth = observe_run(fp32, workload, "in_device", prompt, tokens.replay())
    largest = max(float(t.abs().max()) for logits in truth.logits.values() for t in logits)
    return {
        "model": name,
        "layers": bf16.kv_shape.num_layers,
        "kv_budget_bytes": workload.kv_budget_bytes,
        "largest_abs_logit_float32": largest,
        "bf16_spacing_at_largest_logit": float(torch.finfo(torch.bfloat16).eps) * largest,
        "vs_float32": {p: compare(truth, run) for p, run in forced.items()},
        "vs_in_device_bf16": {p: compare(forced["in_device"], run) for p, run in forced.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="synthetic:tiny-llama", help="synthetic:NAME or numerics-llama")
    parser.add_argument("--layers", type=int, default=4, help="numerics-llama only")
    parser.add_argument("--hidden", type=int, default=512, help="numerics-llama only (a multiple of 128)")
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args()
    model = args.model
    if model == "numerics-llama":
        recipe = numerics_llama(args.layers, args.hidden)
        SYNTHETIC_MODELS["numerics-llama"] = SyntheticModel(recipe, "Llama, head dim 128, vocab 32000")
        model = "synthetic:numerics-llama"
    workload = replace(Workload(), model=model, beams=4, width=4, step_tokens=16, prompt_tokens=128,
                       gen_tokens=32, kv_budget_bytes=None, dtype="bfloat16")  # fmt: skip
    result = measure(workload)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json_path:
        with open(args.json_path, "w", encoding="utf-8") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
