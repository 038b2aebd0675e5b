"""A GPT-2-small transformer block (d=768, 12 heads, bf16, batch 8 x 1024 tokens), forward and
backward, compiled several ways: step time and first-step (compile and tune) time.

    python benchmarks/gpt2_block.py --variants eager,inductor,tunesmith_eager,tunesmith_inductor \
        --json $OUT/gpt2_block.json
    python benchmarks/gpt2_block.py --variants max_autotune --json $OUT/gpt2_block_max_autotune.json

Variants: ``eager``; ``inductor`` (Inductor default); ``max_autotune`` (Inductor
``max-autotune-no-cudagraphs``); ``tunesmith_eager`` and ``tunesmith_inductor`` (backend
``tunesmith`` with the ``eager`` or ``inductor`` graph compiler, each on a cold cache of its own,
then once more in a fresh process on that warm cache: ``warm_first_step_s``). Each compiled
variant is checked against eager (relative error by norm of the output and the input's
gradient). Step times: after warm-up, 5 rounds of 20 steps enqueued back to back (as a training
loop runs them), each timed with CUDA events; the median round over 20.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

D, HEADS, BATCH, TOKENS = 768, 12, 8, 1024
WARMUP, REPEATS, ROUNDS = 10, 20, 5


class Block(nn.Module):
    """Pre-norm GPT-2 block as GPT-2 wrote it (dropout left out, so that runs compare): attention
    with explicit matmuls, causal mask and softmax, and a GELU(tanh) MLP, each with a residual."""

    def __init__(self) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc, self.out = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)
        self.register_buffer("mask", torch.tril(torch.ones(TOKENS, TOKENS, dtype=torch.bool)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=2)
        q, k, v = (z.view(b, t, HEADS, D // HEADS).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D // HEADS))
        att = F.softmax(att.masked_fill(~self.mask[:t, :t], float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, D)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


def make() -> tuple[Block, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = Block().cuda().to(torch.bfloat16)
    x = torch.randn(BATCH, TOKENS, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(BATCH, TOKENS, D, device="cuda", dtype=torch.bfloat16)
    return model, x, grad


def compiled(variant: str, model: nn.Module) -> Any:
    if variant == "eager":
        return model
    if variant == "inductor":
        return torch.compile(model)
    if variant == "max_autotune":
        return torch.compile(model, mode="max-autotune-no-cudagraphs")
    compiler = variant.removeprefix("tunesmith_")
    return torch.compile(model, backend="tunesmith", options={"graph_compiler": compiler})


def step(fn: Any, x: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    x.grad = None
    out = fn(x)
    out.backward(grad)
    return out


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def measure(variant: str) -> dict[str, Any]:
    torch._dynamo.reset()
    model, x, grad = make()
    ref_out = step(model, x, grad).detach().clone()
    ref_grad = x.grad.detach().clone()
    fn = compiled(variant, model)
    torch.cuda.synchronize()
    start = time.perf_counter()
    out = step(fn, x, grad)
    torch.cuda.synchronize()
    first = time.perf_counter() - start
    errors = {"out_rel_err": rel_err(out, ref_out), "grad_rel_err": rel_err(x.grad, ref_grad)}
    for _ in range(WARMUP):
        step(fn, x, grad)
    times = []
    for _ in range(ROUNDS):  # steps enqueued back to back, as a training loop runs them
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(REPEATS):
            step(fn, x, grad)
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end) / REPEATS)
    return {"variant": variant, "step_ms": statistics.median(times), "first_step_s": first, **errors}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="eager,inductor,tunesmith_eager,tunesmith_inductor")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a fresh process measuring one variant
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one)))
        return
    rows = []
    for variant in args.variants.split(","):
        env = dict(os.environ)
        if variant.startswith("tunesmith"):
            env["TUNESMITH_CACHE_DIR"] = tempfile.mkdtemp(prefix="tunesmith-gpt2-")
        runs = ["cold", "warm"] if variant.startswith("tunesmith") else ["cold"]
        row: dict[str, Any] = {}
        for run in runs:
            proc = subprocess.run(
                [sys.executable, __file__, "--one", variant], env=env, capture_output=True, text=True, check=False
            )
            if proc.returncode != 0:
                row = {"variant": variant, "error": proc.stderr[-3000:]}
                break
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            if run == "cold":
                row = result
            else:
                row["warm_first_step_s"] = result["first_step_s"]
                row["warm_step_ms"] = result["step_ms"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    eager = next((r["step_ms"] for r in rows if r.get("variant") == "eager" and "step_ms" in r), None)
    print(f"{'variant':<20} {'step ms':>8} {'vs eager':>8} {'first step s':>12} {'warm first s':>12} {'out err':>9}")
    for r in rows:
        if "error" in r:
            print(f"{r['variant']:<20} failed: {r['error'].strip().splitlines()[-1]}")
            continue
        ratio = f"{eager / r['step_ms']:.2f}x" if eager else "-"
        warm = f"{r['warm_first_step_s']:.2f}" if "warm_first_step_s" in r else "-"
        print(
            f"{r['variant']:<20} {r['step_ms']:>8.3f} {ratio:>8} {r['first_step_s']:>12.2f} {warm:>12} "
            f"{r['out_rel_err']:>9.2e}"
        )
    if args.json:
        import triton

        result = {
            "benchmark": "gpt2_block",
            "device": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "triton": triton.__version__,
            "config": {"d": D, "heads": HEADS, "batch": BATCH, "tokens": TOKENS, "dtype": "bfloat16"},
            "timing": f"median over {ROUNDS} rounds of {REPEATS} forward+backward steps enqueued back to back "
            f"(CUDA events), per step, after {WARMUP} warm-up steps",
            "rows": rows,
        }
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
