"""The attention benchmark: the attention shapes of the models people run, each timed through
torch's own pick, every backend tunesmith can choose, tunesmith's pick, and Inductor's
``flex_attention`` (compiled) as the peer.

    python benchmarks/attention.py --json $OUT/attention_h100.json
    python benchmarks/attention.py --only bert_train,t5_bias --json out.json

Each shape is a ``tunesmith.tune("attention", ...)`` problem (bf16; ``train`` rows time forward and
backward for one random output gradient, and check the three gradients too). Every column is
timed the same way: the call's kernels captured in a CUDA graph, its replays timed (the median of
``REPEAT``), over input copies that do not fit in L2 together (``tunesmith.bench``'s own timing).
``torch_ms`` is ``F.scaled_dot_product_attention`` as torch dispatches it; ``flash_ms``,
``efficient_ms``, ``cudnn_ms`` and ``math_ms`` force one of torch's backends (empty where it cannot
run the shape, with torch's reason in ``errors``); ``triton_ms`` is the best config of tunesmith's
Triton template; ``tunesmith_ms`` is the kernel ``tunesmith.tune`` picks (tuned in this process, in
a cache folder of the run's own; its choice in ``chosen``, every time it measured in
``tunesmith_timings``); ``flex_ms`` is ``torch.compile(flex_attention)`` with the shape's mask
as a block mask and its bias as a score modification. TFLOP/s count the attended pairs only (half
the square for causal); ``roofline`` is the fraction of the device's bf16 peak and memory floor.
Every kernel is checked against a float64 reference (``rel_err``, the largest over the output and
gradients).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
from collections.abc import Callable
from typing import Any

import torch

#: name: (kind, batch, query heads, kv heads, query length, key length, head dim, causal, mask, train)
#: mask is "", "padding" (a boolean (B, 1, 1, S) mask, up to a quarter of each batch's keys padding),
#: "causal_padding" (causal and that padding in one boolean (B, 1, L, S) tensor, as transformers
#: builds a padded decoder batch's), "static_cache" (a boolean (B, 1, 1, S) mask keeping the first
#: quarter of the keys: a static KV cache that far into generation, as transformers masks one for
#: compiled decoding) or "bias" (an additive (1, H, L, S) relative position bias)
SHAPES: dict[str, tuple[str, int, int, int, int, int, int, bool, str, bool]] = {
    "gpt2_prefill": ("causal", 8, 12, 12, 1024, 1024, 64, True, "", False),
    "gpt2_train": ("train", 8, 12, 12, 1024, 1024, 64, True, "", True),
    "causal_train_4x512": ("train", 4, 12, 12, 512, 512, 64, True, "", True),
    "bert_train_16x512": ("train", 16, 12, 12, 512, 512, 64, False, "", True),
    "distilbert_train_16x256": ("train", 16, 12, 12, 256, 256, 64, False, "", True),
    "bert_infer_8x512": ("plain", 8, 12, 12, 512, 512, 64, False, "", False),
    "bert_padding_8x512": ("mask", 8, 12, 12, 512, 512, 64, False, "padding", False),
    "bert_padding_train_16x512": ("train", 16, 12, 12, 512, 512, 64, False, "padding", True),
    "t5_bias_8x512": ("bias", 8, 12, 12, 512, 512, 64, False, "bias", False),
    "llama8b_padded_prefill_1k": ("mask", 4, 32, 8, 1024, 1024, 128, False, "causal_padding", False),
    "gpt2_padded_train": ("train", 8, 12, 12, 1024, 1024, 64, False, "causal_padding", True),
    "llama8b_prefill_4k": ("gqa", 1, 32, 8, 4096, 4096, 128, True, "", False),
    "llama8b_decode_8k": ("decode", 16, 32, 8, 1, 8192, 128, False, "", False),
    "llama8b_decode_static_cache": ("decode", 16, 32, 8, 1, 8192, 128, False, "static_cache", False),
    "vit_b16": ("plain", 64, 12, 12, 197, 197, 64, False, "", False),
    "whisper_encoder": ("plain", 8, 20, 20, 1500, 1500, 64, False, "", False),
    "unet_self_64x64": ("plain", 4, 8, 8, 4096, 4096, 40, False, "", False),
    "unet_cross_64x64": ("plain", 4, 8, 8, 4096, 77, 40, False, "", False),
}
TORCH_BACKENDS = ("flash", "efficient", "cudnn", "math")
WARMUP, REPEAT = 5, 15


def make(name: str, device: str, seed: int = 0) -> tuple[list[torch.Tensor], dict[str, Any]]:
    """The shape's q, k, v (and mask) as random bf16 tensors, with its ``tune`` scalars."""
    _, b, hq, hkv, length, s, d, causal, mask, train = SHAPES[name]
    gen = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=gen, device=device, dtype=torch.bfloat16)

    # q, k, v as a projection leaves them: (B, L, H, D) memory, (B, H, L, D) views
    q = randn(b, length, hq, d).transpose(1, 2)
    k, v = randn(b, s, hkv, d).transpose(1, 2), randn(b, s, hkv, d).transpose(1, 2)
    tensors = [q, k, v]
    if mask in ("padding", "causal_padding"):
        keep = torch.arange(s, device=device)[None, :] < torch.randint(
            s * 3 // 4, s + 1, (b, 1), generator=gen, device=device
        )
        keep = keep[:, None, None, :]
        if mask == "causal_padding":
            keep = keep & torch.ones(length, s, dtype=torch.bool, device=device).tril()
        tensors.append(keep)
    elif mask == "static_cache":
        tensors.append((torch.arange(s, device=device) < s // 4)[None, None, None, :].expand(b, 1, 1, s))
    elif mask == "bias":
        tensors.append(randn(1, hq, length, s))
    return tensors, {"is_causal": causal, "grad": train}


def time_ms(call: Callable[..., Any], sets: list[tuple[torch.Tensor, ...]]) -> float:
    from tunesmith.bench.timing import time_callable, time_in_graph

    device = sets[0][0].device
    calls = [lambda each=each: call(*each) for each in sets]
    measured = time_in_graph(calls, device, WARMUP, REPEAT)
    if measured is None:  # not capturable: timed launch by launch
        measured = time_callable(lambda: call(*sets[0]), device, WARMUP, REPEAT)
    return measured.ms


def flex(problem: Any, tensors: list[torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``flex_attention`` compiled, with the shape's causal or padding mask as a block mask and
    its bias as a score modification."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    b, _hq, length, _ = tensors[0].shape
    s = tensors[1].shape[2]
    causal, scale = problem.scalar("is_causal"), problem.scalar("scale")
    gqa = tensors[0].shape[1] != tensors[1].shape[1]
    mask = tensors[3] if len(tensors) > 3 else None
    torch._dynamo.reset()  # a fresh compile per shape: recompiles across shapes would hit Dynamo's limit
    compiled = torch.compile(flex_attention, dynamic=False)
    block_mask, score_mod = None, None
    if causal:
        block_mask = create_block_mask(lambda b, h, q, kv: q >= kv, None, None, length, s, device="cuda")
    elif mask is not None and mask.dtype == torch.bool and mask.shape[2] > 1:  # causal and padding
        keep = mask[:, 0, -1, :]  # the last query's row: every key the batch keeps
        block_mask = create_block_mask(lambda b, h, q, kv: (q >= kv) & keep[b, kv], b, None, length, s, device="cuda")
    elif mask is not None and mask.dtype == torch.bool:
        keep = mask[:, 0, 0, :]
        block_mask = create_block_mask(lambda b, h, q, kv: keep[b, kv], b, None, length, s, device="cuda")
    elif mask is not None:
        bias = mask

        def score_mod(score: torch.Tensor, b: Any, h: Any, q: Any, kv: Any) -> torch.Tensor:
            return score + bias[0, h, q, kv]

    def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *_: torch.Tensor) -> torch.Tensor:
        return compiled(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale, enable_gqa=gqa)

    return call


def measure(name: str) -> dict[str, Any]:
    """One shape's row."""
    import tunesmith
    from tunesmith.bench.timing import rotating_inputs
    from tunesmith.cost.profiles import preset_for
    from tunesmith.cost.roofline import problem_cost
    from tunesmith.ops import measured, reference, relative_error
    from tunesmith.problem import build_problem, flops
    from tunesmith_aten.attention import sdpa

    kind, *_rest = SHAPES[name]
    tensors, scalars = make(name, "cuda")
    problem, inputs = build_problem("attention", tensors, scalars)
    sets = rotating_inputs(problem, inputs)
    ref = reference(problem, inputs)
    row: dict[str, Any] = {"name": name, "kind": kind, "train": bool(scalars["grad"]), "problem": describe(problem)}
    errors: dict[str, str] = {}
    worst: dict[str, float] = {}

    def column(label: str, kernel: Callable[..., torch.Tensor]) -> None:
        call = measured(problem, kernel)
        try:
            worst[label] = relative_error(call(*inputs), ref)
            row[f"{label}_ms"] = round(time_ms(call, sets), 5)
        except Exception as exc:  # noqa: BLE001 - a backend that cannot run the shape leaves its column empty
            errors[label] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
            row[f"{label}_ms"] = None

    column("torch", sdpa("default", problem))
    for backend in TORCH_BACKENDS:
        column(backend, sdpa(backend, problem))
    triton = _triton_best(problem, inputs, sets, ref)
    row.update(triton["row"])
    worst.update(triton["worst"])
    errors.update(triton["errors"])
    tunesmith.reset()
    selection = tunesmith.tune("attention", *tensors, **scalars)
    row["chosen"], row["tunesmith_cached"] = str(selection.spec), selection.cached
    row["tunesmith_timings"] = {str(spec): round(ms, 5) for spec, ms in selection.timings.items()}
    column("tunesmith", selection.kernel)
    column("flex", flex(problem, inputs))
    work = flops(problem)
    profile = preset_for(torch.cuda.get_device_name())
    floor_ms = problem_cost(problem, profile).ms if profile is not None else None
    row["flops"] = work
    for label in ("torch", "tunesmith", "flex", "math"):
        ms = row.get(f"{label}_ms")
        if ms:
            row[f"{label}_tflops"] = round(work / ms / 1e9, 1)
            if floor_ms:
                row[f"{label}_roofline"] = round(floor_ms / ms, 3)
    row["rel_err"] = {k: float(f"{v:.3g}") for k, v in worst.items()}
    row["errors"] = errors
    return row


def _triton_best(
    problem: Any, inputs: list[torch.Tensor], sets: list[tuple[torch.Tensor, ...]], ref: Any
) -> dict[str, Any]:
    """The best of the Triton plugin's attention configs, and its errors."""
    from tunesmith import hooks
    from tunesmith.ops import measured, relative_error
    from tunesmith.settings import current_options

    out: dict[str, Any] = {"row": {"triton_ms": None}, "worst": {}, "errors": {}}
    try:
        choices = hooks.choices(problem, current_options({"backends": ["triton"]}))[0]
    except Exception as exc:  # noqa: BLE001
        out["errors"]["triton"] = f"{type(exc).__name__}: {exc}"
        return out
    best = math.inf
    for choice in choices:
        try:
            choice.precompile()
            call = measured(problem, choice.kernel())
            err = relative_error(call(*inputs), ref)
            ms = time_ms(call, sets)
        except Exception as exc:  # noqa: BLE001 - a config that fails is reported, not fatal
            out["errors"][f"triton {choice.spec}"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            continue
        if ms < best:
            best = ms
            out["row"] = {"triton_ms": round(ms, 5), "triton_config": str(choice.spec)}
            out["worst"]["triton"] = err
    if not choices:
        out["errors"]["triton"] = "the Triton plugin offered no choice"
    return out


def describe(problem: Any) -> str:
    shapes = " ".join("x".join(map(str, m.shape)) for m in problem.inputs)
    flags = [f for f in ("is_causal", "grad") if problem.scalar(f)]
    return f"{shapes} {problem.inputs[0].dtype}" + (f" ({', '.join(flags)})" if flags else "")


def table(rows: list[dict[str, Any]]) -> str:
    cols = ("torch", "flash", "efficient", "cudnn", "math", "triton", "tunesmith", "flex")
    lines = ["shape | kind | " + " | ".join(f"{c} ms" for c in cols) + " | tunesmith/torch | math/tunesmith | chosen"]
    for row in rows:
        ms = [row.get(f"{c}_ms") for c in cols]
        torch_ms, mine, math_ms = row.get("torch_ms"), row.get("tunesmith_ms"), row.get("math_ms")
        speed = f"{mine / torch_ms:.3f}" if mine and torch_ms else "-"
        over_math = f"{math_ms / mine:.2f}x" if mine and math_ms else "-"
        cells = " | ".join(f"{m:.4f}" if m else "-" for m in ms)
        lines.append(f"{row['name']} | {row['kind']} | {cells} | {speed} | {over_math} | {row.get('chosen', '')}")
    ratios = [r["tunesmith_ms"] / r["torch_ms"] for r in rows if r.get("tunesmith_ms") and r.get("torch_ms")]
    if ratios:
        lines.append(f"geomean tunesmith/torch: {statistics.geometric_mean(ratios):.3f} "
                     f"({1 / statistics.geometric_mean(ratios):.3f}x faster), worst {max(ratios):.3f}")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated shape names (default: all)")
    parser.add_argument("--json", default=os.path.join(os.environ.get("OUT", "."), "attention.json"))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("the attention benchmark needs a CUDA GPU")
    names = [n for n in args.only.split(",") if n] or list(SHAPES)
    unknown = sorted(set(names) - set(SHAPES))
    if unknown:
        raise SystemExit(f"unknown shapes {unknown}; known: {', '.join(SHAPES)}")
    import tempfile

    import triton

    # tune in a cache folder of this run's own: an entry from an earlier run would answer instead
    os.environ["TUNESMITH_CACHE_DIR"] = tempfile.mkdtemp(prefix="tunesmith-attention-")
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}
    rows = []
    for name in names:
        rows.append(measure(name))
        print(json.dumps(rows[-1]), flush=True)
        with open(args.json, "w") as f:
            json.dump({**meta, "rows": rows}, f, indent=1)
    print(table(rows))


if __name__ == "__main__":
    main()
