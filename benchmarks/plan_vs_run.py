"""Does the memory plan tell the truth? `beamwise plan` against `beamwise run` of the same drawn settings.

    python -m benchmarks.plan_vs_run [--seed 7] [--cases 160] [--examples 4]

Draws settings (synthetic models, every verifier and policy, budgets from 20 kB to 8 MB, lookahead, methods,
speculation, prefill chunks, a user's verifier share), runs `plan --json` and `run --json --no-save
--no-prefix-cache` of each in this process, and counts where they disagree: a red plan whose run ran, a
green or amber plan whose run refused, another policy, another PCIe figure than the run's per-step average.
A plan that exits 2 refuses settings the run refuses alike (lookahead with dvts). The closing note of the
fourteenth session quotes `--seed 7 --cases 160` (about a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import random
import traceback

from app.cli import main

QUESTIONS = [
    "What is 2+3?",
    "A train travels 60 km in 45 minutes. What is its average speed in km/h?",
    "Explain step by step: " + " ".join(["a shop sells apples at 3 dollars each and pears at 5 dollars each;"] * 12)
    + " how much for 7 apples and 4 pears?",
]
VERIFIERS = [["--verifier", "logprob"], ["--verifier", "self-judge"]] + [
    ["--verifier", "prm", "--verifier-model", f"synthetic:{name}"]
    for name in ("tiny-qwen-prm", "tiny-math-shepherd", "tiny-rlhflow-prm", "tiny-skywork-prm")
]


def call(argv: list[str]) -> tuple[int | str, str, str]:
    """`beamwise ARGV` in this process: its exit status ("traceback" for an exception), stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status: int | str = main(argv)
    except SystemExit as stop:
        status = stop.code if isinstance(stop.code, int) else 2
    except Exception:
        status = "traceback"
        err.write(traceback.format_exc())
    return status, out.getvalue(), err.getvalue()


def draw(r: random.Random) -> list[str]:
    """One set of drawn settings, the question first."""
    a = ["--model", r.choice(["synthetic:tiny-llama", "synthetic:tiny-qwen2", "synthetic:tiny-opt"])]
    a += r.choice(VERIFIERS) if r.random() < 0.5 else VERIFIERS[0]
    a += ["--policy", r.choice(["auto", "auto", "in_device", "layerwise", "lbs", "headwise"])]
    budget = r.choice([None, None, "20k", "50k", "100k", "200k", "500k", "1MB", "2MB", "8MB"])
    a += ["--kv-budget", budget] if budget else []
    a += ["--beams", str(r.choice([1, 2, 3, 4])), "--width", str(r.choice([1, 2, 3]))]
    a += ["--step-tokens", str(r.choice([4, 8, 16, 24])), "--max-steps", str(r.choice([1, 2, 3, 4]))]
    a += ["--lookahead", str(r.choice([1, 2]))] if r.random() < 0.2 else []
    a += ["--method", r.choice(["best-of-n", "dvts", "greedy", "beam"])] if r.random() < 0.25 else []
    a += ["--speculative"] if r.random() < 0.25 else []
    a += ["--prefill-chunk", str(r.choice([8, 32, 64]))] if r.random() < 0.15 else []
    a += ["--verifier-kv-share", str(r.choice([0.1, 0.25, 0.5]))] if r.random() < 0.15 else []
    return [r.choice(QUESTIONS), *a]


def verdicts(argv: list[str]) -> list[str]:
    """What kind of agreement or disagreement the plan and the run of `argv` show (one or more labels)."""
    status, out, _ = call(["plan", *argv, "--json"])
    if status == "traceback" or not out.strip():
        return ["plan traceback" if status == "traceback" else "plan refused the settings (exit 2)"]
    plan = json.loads(out)
    status, out, _ = call(["run", *argv, "--no-save", "--no-prefix-cache", "--json"])
    if status == "traceback":
        return ["run traceback"]
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    refused = status == 2 or any(e["type"] == "run_failed" for e in events)
    red = plan["state"] == "red"
    labels = [{(True, True): "red, refused", (True, False): "RED, BUT THE RUN RAN",
               (False, True): "GREEN/AMBER, BUT THE RUN REFUSED", (False, False): "green/amber, ran"}[red, refused]]
    started = next((e for e in events if e["type"] == "run_started"), None)
    if started is not None and started["policy"] != plan["policy"]:
        labels.append("ANOTHER POLICY")
    steps = [e["step_h2d_bytes"] + e["step_d2h_bytes"] for e in events if e["type"] == "transfer_stats"]
    if not red and not refused and steps and plan["step_pcie_bytes"] != sum(steps) // len(steps):
        source = plan["traffic_source"].split(";")[0].split(",")[0]  # its name, without its explanation
        labels.append(f"another PCIe figure ({source})")
    return labels


def main_cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--cases", type=int, default=160)
    parser.add_argument("--examples", type=int, default=4, help="settings shown for each disagreement")
    args = parser.parse_args()
    r = random.Random(args.seed)
    counts: collections.Counter[str] = collections.Counter()
    examples: dict[str, list[str]] = collections.defaultdict(list)
    for _ in range(args.cases):
        argv = draw(r)
        for label in verdicts(argv):
            counts[label] += 1
            examples[label].append(" ".join(repr(x) if " " in x else x for x in argv))
    print(f"{args.cases} drawn settings (seed {args.seed}):")
    for label, count in counts.most_common():
        print(f"  {count:4d}  {label}")
    for label, shown in examples.items():
        if label.isupper() or label.startswith(("another", "plan traceback", "run traceback")):
            print(f"\n{label}:")
            for line in shown[: args.examples]:
                print(f"  beamwise run {line}")


if __name__ == "__main__":
    main_cli()
