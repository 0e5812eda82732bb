"""Kernels launched per decode token, by policy, beside plain `model.generate` (CPU; deterministic counts).

On a GPU in eager mode the host launches every kernel of a forward call one by one, a few microseconds
each, and a decode step of a 7B model on an H100 is a few milliseconds of device work: the launches
alone can set the pace. Their number does not depend on the machine, so it is counted here, on the
CPU, with the real engine (`engine.bench.run_policy`) and the baseline's own `generate` call:

    python -m benchmarks.kernel_counts                  # synthetic:tiny-llama in bf16, 4 x 4
    python -m benchmarks.kernel_counts --products widened

A kernel is a dispatched aten op that writes memory: one whose output is new storage, or an in-place op.
Views (reshape without a copy, transpose, slice, ...) and no-op casts are dispatched but launch nothing.
Prefill (forward calls of more than one token) is left out. `--products cuda` (the default) counts
cascade attention's products as CUDA runs them, one `torch.bmm(..., out_dtype=torch.float32)` each, which
the CPU lacks: it is stood in for by the same product of widened operands, counted as one kernel.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
from dataclasses import dataclass, replace

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import engine.kv.attention as attention
from engine.baselines import _generate
from engine.bench import _load, run_policy
from engine.workload import Workload

WORKLOAD = Workload(model="synthetic:tiny-llama", dtype="bfloat16", beams=4, width=4, step_tokens=8, gen_tokens=16,
                    prompt_tokens=64)  # fmt: skip
POLICIES = ("in_device", "lbs:+prefix_order", "lbs:inter_token", "layerwise")
BUDGET = 2_000_000  # bytes: offloading policies split the 16 candidates into groups


@dataclass(frozen=True)
class KernelCount:
    name: str
    tokens: int  # decode forward calls (one token per row each)
    in_forward: float  # kernels per decode token inside the model's forward calls
    outside: float  # kernels per decode token outside them (sampling, KV bookkeeping), prefill excluded


class KernelCounter(TorchDispatchMode):
    """Counts the aten ops that write memory, by phase: "forward" (a one-token forward call), "prefill", "outside"."""

    def __init__(self) -> None:
        super().__init__()
        self.phase = "outside"
        self.kernels: collections.Counter = collections.Counter()
        self.paused = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not self.paused and _writes_memory(str(func.overloadpacket), out, (args, kwargs)):
            self.kernels[self.phase] += 1
        return out


def _storages(tree) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)}


def _writes_memory(name: str, out, inputs) -> bool:
    written = _storages(out)
    return name.endswith("_") or "out" in inputs[1] or bool(written - _storages(inputs))


@contextlib.contextmanager
def cuda_products(counter: KernelCounter):
    """`product` as on CUDA: one float32-writing batched product of bf16 operands, counted as one kernel."""
    bmm = torch.bmm

    def float32_bmm(a, b, out_dtype=None, **kwargs):
        if out_dtype is None:
            return bmm(a, b, **kwargs)
        counter.paused = True
        try:
            out = bmm(a.float(), b.float())
        finally:
            counter.paused = False
        counter.kernels[counter.phase] += 1
        return out

    original = attention._float32_products
    attention._float32_products = lambda device, dtype: dtype in (torch.bfloat16, torch.float16)
    torch.bmm = float32_bmm
    try:
        yield
    finally:
        torch.bmm, attention._float32_products = bmm, original


def count(loaded, workload: Workload, names, products: str = "cuda") -> list[KernelCount]:
    """Kernels per decode token of plain `generate` on the workload's rows and of each policy."""
    counter, tokens = KernelCounter(), [0]

    def before(_module, _args, kwargs):
        width = kwargs["input_ids"].shape[1]
        counter.phase = "forward" if width == 1 else "prefill"
        tokens[0] += width == 1

    def after(_module, _args, _kwargs, _out):
        counter.phase = "outside"

    hooks = [loaded.model.register_forward_pre_hook(before, with_kwargs=True),
             loaded.model.register_forward_hook(after, with_kwargs=True)]  # fmt: skip
    prompt, rows = workload.prompt_ids(loaded), workload.search().candidates_per_step
    results = []
    try:
        for name in names:
            counter.kernels.clear()
            tokens[0] = 0
            with counter, cuda_products(counter) if products == "cuda" else contextlib.nullcontext():
                if name == "generate":
                    _generate(loaded, "generate", prompt, rows, workload.gen_tokens, workload.seed)
                else:
                    run = replace(workload, kv_budget_bytes=None if name == "in_device" else BUDGET)
                    result = run_policy(loaded, run, name, prompt)
                    if not result.ok:
                        raise SystemExit(f"{name} did not run: {result.message}")
            per = lambda phase: counter.kernels[phase] / tokens[0]  # noqa: E731
            results.append(KernelCount(name, tokens[0], per("forward"), per("outside")))
    finally:
        for hook in hooks:
            hook.remove()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--products", choices=("cuda", "widened"), default="cuda",
                        help="cascade attention's products as on CUDA (default) or with widened operands (CPU)")
    parser.add_argument("--dtype", default=WORKLOAD.dtype, help="the model's dtype (default bfloat16, as on a GPU)")
    args = parser.parse_args(argv)
    workload = replace(WORKLOAD, dtype=args.dtype)
    loaded = _load(workload, plan_only=False)
    layers = loaded.model.config.num_hidden_layers
    rows = count(loaded, workload, ("generate", *POLICIES), args.products)
    base = rows[0].in_forward
    print(f"{workload.model} ({layers} layers), {args.dtype}, products {args.products}: kernels per decode token")
    print(f"{'':20s} {'forward':>8s} {'per layer vs generate':>22s} {'outside':>8s}")
    for row in rows:
        print(f"{row.name:20s} {row.in_forward:8.1f} {(row.in_forward - base) / layers:+22.1f} {row.outside:8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
