"""What moves a seeded run's logits on the CPU: torch's thread count, and a prompt prefix loaded instead of computed.

    python -m benchmarks.seed_numerics                     # the bundled model
    python -m benchmarks.seed_numerics --model synthetic:tiny-llama

Prints the largest logit difference for: one row decoded at 1 and 2 threads (greedy's case), four rows
decoded together at 1 and 2 threads (beam's), and at each thread count the whole prompt prefilled against
its first blocks prefilled apart and the rest after them (the prefix cache's case). 0 means bit-equal.
"""

from __future__ import annotations

import argparse

import torch
from transformers import DynamicCache

from engine.config import ModelSpec
from engine.hf_compat import cache_kwargs
from engine.models import load_model
from engine.runner import prefill
from engine.search import prompt_ids

QUESTION = "Gus has 2 pens. He buys 6 more and gives away 1. How many pens does he have?"


def decode_logits(model, ids: list[int], rows: int, tokens: int = 8) -> torch.Tensor:
    """`rows` copies of `ids` decoding `tokens` tokens one at a time over their KV cache, as a step does:
    every decode position's logits `[rows, tokens, V]` (row r is fed tokens 100 + r, 101 + r, ...)."""
    prompt = torch.tensor([ids] * rows)  # [rows, T]
    cache = DynamicCache(config=model.config)
    out = []
    with torch.inference_mode():
        model(input_ids=prompt, **cache_kwargs(model, cache), use_cache=True)
        for j in range(tokens):
            fed = torch.tensor([[100 + r + j] for r in range(rows)])  # [rows, 1]
            out.append(model(input_ids=fed, **cache_kwargs(model, cache), use_cache=True).logits[:, -1].float())
    return torch.stack(out, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="bundled")
    parser.add_argument("--cached", type=int, default=64, help="prompt tokens taken as cached (whole blocks)")
    args = parser.parse_args()
    loaded = load_model(ModelSpec(args.model))
    ids = prompt_ids(loaded.encode_chat, QUESTION)
    before = torch.get_num_threads()
    decoded, prompts = {}, {}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        decoded[threads] = {rows: decode_logits(loaded.model, ids, rows) for rows in (1, 4)}
        _, whole = prefill(loaded.model, ids, loaded.device)
        cache, _ = prefill(loaded.model, ids[: args.cached], loaded.device)
        _, split = prefill(loaded.model, ids[args.cached :], loaded.device, cache=cache)
        prompts[threads] = (whole - split).abs().max().item()
    torch.set_num_threads(before)
    print(f"{loaded.name}, prompt {len(ids)} tokens, torch {torch.__version__}")
    for rows in (1, 4):
        gap = (decoded[1][rows] - decoded[2][rows]).abs().max().item()
        print(f"decode {rows} row(s), 1 vs 2 threads: logits max |diff| {gap:.2e}")
    for threads, gap in prompts.items():
        print(f"prompt whole vs {args.cached} cached + rest, {threads} thread(s): logits max |diff| {gap:.2e}")


if __name__ == "__main__":
    main()
