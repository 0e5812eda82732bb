"""The GPU ladder: one workload per invocation (each finishes within 10 minutes on an H100), JSON out.

    python -m benchmarks.gpu_ladder w16 --json bench-results/w16.json
    python -m benchmarks.gpu_ladder w64 --json bench-results/w64.json
    python -m benchmarks.gpu_ladder w32x128 --json bench-results/w32x128.json
    python -m benchmarks.gpu_ladder w64 --policies layerwise --baselines generate:offloaded  # split a long one
    python -m benchmarks.gpu_ladder w16 --repeat 3  # time each policy 3 times, keep the fastest
    python -m benchmarks.gpu_ladder spec --json bench-results/spec.json  # goodput with and without speculation
    python -m benchmarks.gpu_ladder long --json bench-results/long.json  # a 16k prompt: head-wise, layer-wise
    python -m benchmarks.gpu_ladder w64 --time-limit 540 --json w64.json  # end by itself within the device's 10 min
    python -m benchmarks.gpu_ladder w64 --baselines-after lbs:+prefix_order  # outside baselines before the slow rows

Every workload is `synthetic:llama2-7b` in bf16 with a 512-token random prompt and EOS disabled
(random weights rarely sample it; a fixed step length makes the rows comparable with
`generate`). `bench` warms up first, runs each policy, teacher-forces it against `in_device`,
then runs plain `generate` and transformers' offloaded cache on the same rows. Without CUDA the
baseline rows say why they did not run (use `--plan-only` for the bytes alone).

`spec` (issue 14) compares speculative beam extension and prefix-aware order on delimiter-ended
steps: a random-weight model rarely samples "\n\n", so its step delimiter is picked automatically,
the token the model samples most in the untimed warm-up (`bench --step-delimiter auto`), printed and
stored in the JSON as `step_delimiter_auto`. Steps of 64 give a rarely sampled token room to end
some of them early; the step lengths are a random model's, not a trained one's. It runs its four
policies and no outside baselines unless told otherwise.

The JSON is written after every row (with `"complete": false` until the last), so a ladder killed
from outside keeps what it finished. `--time-limit SECONDS` ends the ladder by itself: the run the
limit overtakes is stopped and later rows are not started, each row saying so and how to time it alone.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from app.bench_table import format_report
from app.json_out import is_stream, write_json
from app.options import parse_delimiter
from engine.auto_delimiter import AUTO_DELIMITER
from engine.baselines import BASELINES
from engine.bench import LADDER, TimeLimit, Workload, check_names, run_bench

BASE = Workload(model="synthetic:llama2-7b", dtype="bfloat16", prompt_tokens=512, seed=0)
WORKLOADS = {
    "w16": replace(BASE, beams=4, width=4, step_tokens=32, gen_tokens=64, kv_budget_bytes=2 * 10**9),
    "w64": replace(BASE, beams=16, width=4, step_tokens=32, gen_tokens=128, kv_budget_bytes=8 * 10**9),
    "w32x128": replace(BASE, beams=8, width=4, step_tokens=128, gen_tokens=256, kv_budget_bytes=8 * 10**9),
    "spec": replace(BASE, beams=16, width=4, step_tokens=64, gen_tokens=256, kv_budget_bytes=8 * 10**9,
                    step_delimiter=AUTO_DELIMITER),
    "long": replace(BASE, prompt_tokens=16384, beams=2, width=2, step_tokens=32, gen_tokens=64,
                    kv_budget_bytes=4 * 10**9),  # one candidate's 8 GB of KV does not fit: head-wise's ground
}
POLICIES = {  # else LADDER
    "spec": ("in_device", "in_device:+speculative", "lbs:+prefix_order", "lbs:+speculative"),
    "long": ("headwise", "layerwise"),
}
OUTSIDE = {"spec": (), "long": ("generate:offloaded",)}  # outside baselines a workload runs by default (else every one)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", choices=sorted(WORKLOADS))
    parser.add_argument("--policies", default=None, help="comma-separated subset of the ladder (default: the "
                        "workload's; spec: its four)")
    parser.add_argument("--baselines", default=None, help="comma-separated; empty for none (default: all; spec: none)")
    parser.add_argument("--baselines-after", default=None, metavar="POLICY",
                        help="run the outside baselines right after this policy's row (default: after the last)")
    parser.add_argument("--step-delimiter", default=None, metavar="TEXT",
                        help="replace the workload's step delimiter (spec: auto); e.g. a fixed one for --plan-only")
    parser.add_argument("--plan-only", action="store_true", help="bytes and peaks only, no weights (any machine)")
    parser.add_argument("--repeat", type=int, default=1, help="time each policy this many times, keep the fastest")
    parser.add_argument("--json", dest="json_path", default=None, help="write the report here (after every row)")
    parser.add_argument("--time-limit", type=float, default=None, metavar="SECONDS",
                        help="stop the run this overtakes and start no more rows (each says so); default: none")
    args = parser.parse_args(argv)
    workload = WORKLOADS[args.workload]
    if args.step_delimiter is not None:
        workload = replace(workload, step_delimiter=parse_delimiter(args.step_delimiter))
    policies_given = args.policies if args.policies is not None else ",".join(POLICIES.get(args.workload, LADDER))
    baselines_given = args.baselines if args.baselines is not None else ",".join(OUTSIDE.get(args.workload, BASELINES))
    policies = [p for p in policies_given.split(",") if p]
    baselines = [b for b in baselines_given.split(",") if b]
    progress = lambda text: print(f"[ladder {args.workload}] {text}", file=sys.stderr, flush=True)  # noqa: E731
    once = is_stream(args.json_path)  # a FIFO or a device takes the whole report once, as bench's --json does
    save = (lambda _: None) if once else (
        lambda report: write_json(args.json_path, _named(args.workload, report), announce=False))
    try:
        check_names(policies, baselines)  # an unknown baseline would otherwise run as plain generate under its name
        if not once:
            write_json(args.json_path, {"workload_name": args.workload, "complete": False}, announce=False)  # fail now
        report = run_bench(
            workload, policies, plan_only=args.plan_only, baselines=baselines, progress=progress, repeats=args.repeat,
            time_limit=TimeLimit(args.time_limit), on_row=save, baselines_after=args.baselines_after,
        )  # fmt: skip
        print(format_report(report))
        write_json(args.json_path, _named(args.workload, report))
    except ValueError as error:  # what to change, in the user's words (an unknown policy, an unwritable --json)
        print(f"gpu_ladder: error: {error}", file=sys.stderr)
        return 2
    return 0


def _named(workload_name: str, report) -> dict:
    return {"workload_name": workload_name, **report.to_dict()}


if __name__ == "__main__":
    sys.exit(main())
