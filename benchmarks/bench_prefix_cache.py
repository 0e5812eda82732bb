"""The prefix KV cache on one model: prefill seconds and computed tokens of a "Run again" and of a follow-up.

    python -m benchmarks.bench_prefix_cache                       # the bundled model, float32, on the CPU
    python -m benchmarks.bench_prefix_cache --model synthetic:tiny-llama --document-words 200

The prompt is a long question (a generated report of `--document-words` words, then a question
about it). Each case runs the same search (same seed) with the prefix cache off and on:

- first run: the cache is empty (a cold start), so it computes everything and keeps its blocks;
- run again: the same prompt; with the cache only the last partial block is computed;
- run again, new process: the RAM tier is dropped first, so the blocks come from the disk tier;
- follow-up: the first prompt, the chosen answer's tokens and a second question (a conversation's
  next turn); with the cache only the blocks after the kept path are computed.

The disk tier lives in a temporary folder, so the user's cache is untouched and every start is
cold. Each figure is the fastest of `--repeat` runs (a shared machine is noisy); the tokens are
exact and the answers with and without the cache must be equal.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence

from engine.config import CacheConfig, ModelSpec, SearchConfig
from engine.kv import prefix_cache
from engine.models import load_model
from engine.search import SYSTEM_PROMPT, run

QUESTION = "Which quarter had the highest revenue, and by how much did it beat the lowest one?"
FOLLOW_UP = "Now give the same figure as a percentage of the lowest quarter."
WORDS = ("revenue", "quarter", "growth", "cost", "margin", "region", "north", "south", "units", "price")


def document(words: int) -> str:
    """A deterministic report of about `words` words (no randomness: every run reads the same text)."""
    lines = []
    for i in range(0, words, 12):
        quarter, value = i // 12 % 4 + 1, 100 + (37 * i) % 90
        filler = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(6))
        lines.append(f"Q{quarter} line {i // 12}: revenue {value} million, {filler}.")
    return "\n".join(lines)


def measure(loaded, prompt: Sequence[int], search: SearchConfig, cached: bool, forget: bool = False) -> dict:
    """One search; the prefill's seconds and tokens, the answer, and the chosen path's tokens."""
    if forget:
        prefix_cache.forget_shared()  # as a new process: the RAM tier is empty, the disk tier is not
    observed = defaultdict(list)
    events = list(run("", loaded, search, CacheConfig(policy="in_device", prefix_cache=cached), prompt_ids=prompt,
                      observe_logits=lambda cid, logits, token: observed[cid].append(token)))
    if events[-1].type != "run_finished":
        raise SystemExit(f"the search failed: {events[-1]}")
    done = next(e for e in events if e.type == "prefill_done")
    print(f"  ran: {len(prompt)} tokens, cache {'on' if cached else 'off'}, prefill {done.seconds:.3f} s",
          file=sys.stderr, flush=True)
    path = [t for cid in events[-1].path for t in observed[cid]]
    return {"seconds": done.seconds, "cached": done.cached_tokens, "computed": done.computed_tokens,
            "answer": events[-1].answer, "path": path}


def fastest(repeat: int, case) -> dict:
    runs = [case() for _ in range(repeat)]
    return min(runs, key=lambda m: m["seconds"])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_prefix_cache", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="bundled")
    parser.add_argument("--document-words", type=int, default=900)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = parser.parse_args(argv)
    os.environ["BEAMWISE_PREFIX_CACHE_DIR"] = tempfile.mkdtemp(prefix="beamwise-bench-prefix-")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    loaded = load_model(ModelSpec(args.model, "float32"))
    search = SearchConfig(beams=2, width=2, step_tokens=16, max_steps=1, step_delimiter=None, seed=1)
    prompt = loaded.encode_chat(f"{document(args.document_words)}\n\n{QUESTION}", system=SYSTEM_PROMPT)

    started = time.perf_counter()
    off = fastest(args.repeat, lambda: measure(loaded, prompt, search, cached=False))
    cold = measure(loaded, prompt, search, cached=True)  # the only cold run: it fills the cache
    again = fastest(args.repeat, lambda: measure(loaded, prompt, search, cached=True))
    disk = fastest(args.repeat, lambda: measure(loaded, prompt, search, cached=True, forget=True))
    turn = loaded.tokenizer.encode(f"<|im_end|>\n<|im_start|>user\n{FOLLOW_UP}<|im_end|>\n<|im_start|>assistant\n",
                                   add_special_tokens=False)
    follow = [*prompt, *cold["path"], *turn]
    follow_off = fastest(args.repeat, lambda: measure(loaded, follow, search, cached=False))
    follow_on = measure(loaded, follow, search, cached=True)  # the first time: the kept path is all it reuses

    print(f"model {loaded.name}, float32 on the CPU; prompt {len(prompt)} tokens, follow-up {len(follow)} tokens; "
          f"block size {CacheConfig().block_size}; fastest of {args.repeat} (cold and first follow-up: one run)")
    print(f"{'case':<34} {'cache':<6} {'prefill s':>10} {'cached':>7} {'computed':>9} {'answer':>8}")
    rows = [("first run (cold)", "off", off, off), ("first run (cold)", "on", cold, off),
            ("run again", "on", again, off), ("run again, new process (disk)", "on", disk, off),
            ("follow-up", "off", follow_off, follow_off), ("follow-up", "on", follow_on, follow_off)]
    for label, cache, m, reference in rows:
        same = "same" if m["answer"] == reference["answer"] else "DIFFERS"
        print(f"{label:<34} {cache:<6} {m['seconds']:>10.3f} {m['cached']:>7,} {m['computed']:>9,} {same:>8}")
    print(f"({time.perf_counter() - started:.0f} s in all)")
    return 0 if all(m["answer"] == ref["answer"] for _, _, m, ref in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
