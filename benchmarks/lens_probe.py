"""The self-judge verifier's logit lens layer by layer: entropy and P(yes) at the judge position.

    python -m benchmarks.lens_probe                       # the bundled model
    python -m benchmarks.lens_probe --model synthetic:tiny-qwen2

Shows whether the layer-entropy exit's signal (entropy low and steady) marks a settled judgement
for a model: each line is one step, one column per decoder layer.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import torch

from engine.config import ModelSpec
from engine.models import load_model
from engine.verifiers import StepToScore, make_verifier
from engine.verifiers.entropy_exit import lens_entropy

QUESTION = "Tom has 3 apples and buys 4 more. How many apples does he have?"
STEPS = ("He buys 4 more, so 3 + 4 = 7 apples.\n\n", "3 times 4 is 12, so he has 12 apples.\n\n",
         "The answer is: 7\n\n")


@torch.inference_mode()
def probe(verifier, lm_head, step: str) -> tuple[list[float], list[float]]:
    """(entropy, lens P(yes)) after each decoder layer, at the last token of the self-judge prompt."""
    ids = torch.tensor([verifier.path_ids(StepToScore(QUESTION, (), step, ()))])
    states = verifier.body(input_ids=ids, output_hidden_states=True).hidden_states[1:]
    lenses = [verifier.body.norm(h[:, -1]) for h in states[:-1]] + [states[-1][:, -1]]  # the last is normed
    return ([float(lens_entropy(lm_head(h))[0]) for h in lenses], [float(verifier.readout(h)[0]) for h in lenses])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="bundled")
    args = parser.parse_args(argv)
    loaded = load_model(ModelSpec(args.model))
    verifier = make_verifier("self-judge", loaded)
    for step in STEPS:
        entropy, p_yes = probe(verifier, loaded.model.get_output_embeddings(), step)
        print(f"{step.strip()!r}")
        print("  entropy:", " ".join(f"{e:.1f}" for e in entropy))
        print("  P(yes): ", " ".join(f"{p:.2f}" for p in p_yes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
