"""The model benchmark, tunesmith's headline number: real models' step time, GPU time and first-step
time, compiled every way a user would, against Inductor ``max-autotune`` with CUDA graphs, in one
run on one machine.

    python benchmarks/models.py --json $OUT/models_h100.json --chart $OUT/models_h100.png
    python benchmarks/models.py --models mlp_decode --variants eager,tunesmith --json out.json
    python benchmarks/models.py --chart-only benchmarks/results/models_h100.json --chart out.png

Models (``MODELS``): ``gpt2`` (GPT-2 small, 2 blocks with SDPA, 8x1024 tokens, forward and
backward), ``llama`` (2 Llama-style layers: d 2048, GQA 16/4 heads, SwiGLU 5632, RMSNorm, RoPE,
SDPA; 4x1024 tokens, inference), ``mlp_decode`` (two Llama-7B MLPs on 16 tokens, inference),
``resnet50`` (torchvision, channels-last, batch 32, inference), ``bert`` (Hugging Face
``BertModel`` base built from its config, 16x128 tokens, inference), ``bert_train`` (the same
encoder at 16x512 tokens, forward and backward, without dropout so that it compares with eager)
and ``t5`` (a T5-base encoder, whose attention adds a relative position bias to the scores,
8x512 tokens, inference); all bfloat16, random weights.

Variants (``VARIANTS``): ``eager``; ``inductor`` (Inductor default); ``reduce_overhead``
(default with CUDA graphs); ``max_autotune`` (with CUDA graphs: the anchor); ``max_autotune_nocg``;
``tunesmith_default`` (``backend="tunesmith"``, no options); ``tunesmith`` (as docs/compile.md
tells users to run it for speed: ``mode="max-autotune"``); ``tunesmith_blocking`` (the same with
``tuning="blocking"``: every kernel tuned before the first step); ``tunesmith_aten_only``
(``backends=["aten"]``: tuning must never lose to it). Every tunesmith variant but the blocking
one tunes in the background (the default): its first step runs ATen where nothing is known; it
then steps until every tuned kernel is swapped in, ``tuned_after_s`` seconds after the first
step, and is timed after ``tunesmith.wait()``, its errors after tuning in ``tuned_*_rel_err``. tunesmith rows
record what their first step tuned, queued and found (``first_step_counters``, and
``warm_first_step_counters`` for the warm process), the specs of their winners that are not
ATen's (``winners``, by Problem), and for each Problem tuned in the process its three fastest
choices (``fastest``: spec, microseconds, noise), to tell a near tie from a clear win.

Every variant runs in processes of its own with empty tunesmith, Inductor and Triton caches of its
own. A process builds the model (seeded), runs one eager step for the reference, compiles, and
times the first step (``first_step_s``: ``torch.compile()`` itself, which loads the backend's
modules and is also given alone as ``compile_call_s``, then compile, tuning and one run, to the
GPU's last kernel; the clock starts after a garbage collection, and ``first_step_gc`` counts the
collections in it and their seconds); then the relative error by norm of the outputs (and,
training, of the input's and every weight's gradient: the largest) against eager; then ``step_ms``:
after a warm-up of at least 1 s (the GPU's steady state), the median of 5 rounds of 20 steps
enqueued back to back, timed with CUDA events; and ``gpu_ms``: the profiler's device time over 10
steps, per step. tunesmith and reduce-overhead rows run a second process on the warm caches
(``warm_first_step_s``).

How a run is split (max-autotune's compiles take minutes each, a device call at most ten, and a
session's device time thirty): ``benchmarks/models_gpu.sh`` runs this script once per GPU of a
two-GPU machine, each on half of the CPU cores, with all of a model's rows on one GPU, and merges
the rows (``--merge``). Within one run of this script, ``max_autotune_nocg`` after ``max_autotune``
starts on max-autotune's warm caches (the same autotuning, minutes saved; ``first_step_cache``
says so). Within one run that sees two GPUs, the second runs max-autotune's cold compiles one after
another on half of the cores (``first_step_s``, and the error), capped at ``--limit`` seconds
each, while the first runs every other row; then the first times ``max_autotune`` and
``max_autotune_nocg`` in fresh processes on max-autotune's warm caches. With one GPU every row runs
there, in turn. Rows are written to ``--json`` as they finish, so a stopped run keeps what it
measured; ``--resume`` skips the rows there.

Processes running the same plan differ in step time by a few percent (placement in memory, clock),
more than the 1% the bars allow: ``--processes N`` times each variant of ``--retime`` (default
``RETIMED``, those the bars compare) in N processes, the extra ones on the variant's warm caches
and in turns (one process of each variant a round, after all of a run's rows, the order reversed
every other round), and takes the medians; each process's times stay in the row
(``step_ms_processes``, ``gpu_ms_processes``); the extra processes' first steps are warm ones, and
``warm_first_step_s`` is their median. First steps vary more (a cold one by seconds, a warm one by
up to a second: ResNet-50's 2.0 to 3.2 s in one variant): for the variants of ``--warm`` each round
also runs a cold process on fresh caches and one more warm process (first step only), and
``first_step_s`` is a median as well (``*_processes``; 2N - 1 warm first steps).

Where the time goes: ``--kernels DIR`` writes each row's profiled kernels by name and its host
profile (cProfile of the profiled steps); ``--cold-profile DIR`` runs each warm-timed variant twice
more under cProfile, cold and then on the row's warm caches, and writes where each first step's
time went (``MODEL-VARIANT.cold.txt``, ``.warm.txt``); cProfile slows a first step 2 to 3
times, unevenly. ``--first-step-samples DIR`` instead samples the main thread's stack every 2 ms
of every process's first step, cold or warm, waits included (``MODEL-VARIANT-PID.txt``: the
functions by wall time within them and by their own, with the step's time and counters).

A model's rows are timed one after another, and an H100 under sustained load lowers its clock:
each row records the SM clock after its timing (``sm_clock_mhz``) and after each round
(``sm_clock_mhz_rounds``, beside ``step_ms_rounds``); differences of a few percent between rows of
one model, timed minutes apart, are not established by one run.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import gc
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gemm

WARMUP, ROUNDS, STEPS, PROFILED = 5, 5, 20, 10
#: warm-up lasts this long at least: an H200 running Llama's GEMMs slowed by 10% over its first
#: 0.1 s of steps (rounds of 1.32 to 1.45 ms), in every variant, so rounds are timed after it
WARMUP_S = 1.0
VARIANTS = (
    "eager",
    "inductor",
    "reduce_overhead",
    "max_autotune",
    "max_autotune_nocg",
    "tunesmith_default",
    "tunesmith",
    "tunesmith_blocking",
    "tunesmith_aten_only",
)
#: how long a background-tuning variant steps while it waits for its tuned kernels, at most
TUNED_WITHIN_S = 420.0
#: tunesmith's counters a row records after its first step (what it tuned, queued and found)
FIRST_STEP_COUNTERS = (
    "autotune_tuned",
    "background_queued",
    "background_graph_known",
    "compiled_graph_cache_hit",
    "install_keys_remembered",
)
#: variants whose first step is also measured in a second process on warm caches
WARM = ("reduce_overhead", "tunesmith_default", "tunesmith", "tunesmith_aten_only")
ANCHOR, FALLBACK_ANCHOR = "max_autotune", "reduce_overhead"
#: what a resumed run must share with the rows it keeps
RESUME_SAME = ("device", "torch", "triton", "small", "processes")
#: variants timed in several processes with ``--processes N`` (those the bars compare)
RETIMED = ("reduce_overhead", "max_autotune", "tunesmith", "tunesmith_blocking", "tunesmith_aten_only")
#: where measurement processes write their kernel tables (``--kernels``)
KERNELS_ENV = "MODELS_BENCH_KERNELS"
#: where a measurement process writes the profile of its first step (``--cold-profile``)
COLD_PROFILE_ENV = "MODELS_BENCH_PROFILE"
#: where every measurement process writes its first step's sampled stacks (``--first-step-samples``)
SAMPLES_ENV = "MODELS_BENCH_SAMPLES"


# --- the models (built in the child process) ---


def _gpt2(device: str, small: bool) -> tuple[Any, tuple[Any, ...], bool]:
    import torch
    import torch.nn.functional as F
    from torch import nn

    d, heads, batch, tokens = (64, 4, 2, 32) if small else (768, 12, 8, 1024)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            q, k, v = (z.view(b, t, heads, d // heads).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
            x = x + self.proj(y)
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    model = nn.Sequential(Block(), Block(), nn.LayerNorm(d))
    x = torch.randn(batch, tokens, d)
    return model, (x,), True


def _llama(device: str, small: bool) -> tuple[Any, tuple[Any, ...], bool]:
    import torch
    import torch.nn.functional as F
    from torch import nn

    d, heads, kv_heads, hidden, batch, tokens = (64, 4, 2, 160, 2, 32) if small else (2048, 16, 4, 5632, 4, 1024)
    head = d // heads

    class RMSNorm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            var = x.float().pow(2).mean(-1, keepdim=True)
            return (x.float() * torch.rsqrt(var + 1e-5)).to(x.dtype) * self.weight

    def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        a, b = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-b, a), dim=-1) * sin

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.norm2 = RMSNorm(), RMSNorm()
            self.q = nn.Linear(d, heads * head, bias=False)
            self.kv = nn.Linear(d, 2 * kv_heads * head, bias=False)
            self.o = nn.Linear(d, d, bias=False)
            self.gate, self.up = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
            self.down = nn.Linear(hidden, d, bias=False)

        def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
            b, t, _ = x.shape
            h = self.norm1(x)
            q = self.q(h).view(b, t, heads, head).transpose(1, 2)
            k, v = self.kv(h).view(b, t, 2, kv_heads, head).permute(2, 0, 3, 1, 4)
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            k, v = (
                z[:, :, None].expand(b, kv_heads, heads // kv_heads, t, head).reshape(b, heads, t, head) for z in (k, v)
            )
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
            x = x + self.o(y)
            h = self.norm2(x)
            return x + self.down(F.silu(self.gate(h)) * self.up(h))

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList([Layer(), Layer()])
            freq = 1.0 / (10000 ** (torch.arange(0, head, 2).float() / head))
            angles = torch.outer(torch.arange(tokens).float(), freq).repeat(1, 2)
            self.register_buffer("cos", angles.cos())
            self.register_buffer("sin", angles.sin())

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for layer in self.layers:
                x = layer(x, self.cos, self.sin)
            return x

    return Model(), (torch.randn(batch, tokens, d),), False


def _mlp_decode(device: str, small: bool) -> tuple[Any, tuple[Any, ...], bool]:
    import torch
    import torch.nn.functional as F
    from torch import nn

    d, hidden, tokens = (64, 172, 16) if small else (4096, 11008, 16)

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gate, self.up = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
            self.down = nn.Linear(hidden, d, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.down(F.silu(self.gate(x)) * self.up(x))

    return nn.Sequential(MLP(), MLP()), (torch.randn(tokens, d),), False


def _resnet50(device: str, small: bool) -> tuple[Any, tuple[Any, ...], bool]:
    import torch
    import torchvision

    model = torchvision.models.resnet18() if small else torchvision.models.resnet50()
    batch, size = (2, 64) if small else (32, 224)
    return model, (torch.randn(batch, 3, size, size),), False


def _bert(device: str, small: bool) -> tuple[Any, tuple[Any, ...], bool]:
    import torch
    from torch import nn
    from transformers import BertConfig, BertModel

    if small:
        config = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
    else:
        config = BertConfig()
    batch, tokens = (2, 16) if small else (16, 128)

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = BertModel(config, add_pooling_layer=False)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.bert(input_ids=ids).last_hidden_state

    return Encoder(), (torch.randint(0, config.vocab_size, (batch, tokens)),), False


def _bert_train(device: str, small: bool) -> tuple[Any, tuple[Any, ...], bool]:
    import torch
    from torch import nn
    from transformers import BertConfig, BertModel

    # no dropout, so that the compiled model's outputs and gradients compare with eager's
    quiet = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    if small:
        config = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, **quiet)
    else:
        config = BertConfig(**quiet)
    batch, tokens = (2, 16) if small else (16, 512)

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = BertModel(config, add_pooling_layer=False)
            self.bert.embeddings.word_embeddings.weight.requires_grad_(False)  # the input is embeddings
            for layer in self.bert.encoder.layer:  # its exact gradient is zero (the softmax ignores a
                layer.attention.self.key.bias.requires_grad_(False)  # constant per row): noise both ways

        def forward(self, embeds: torch.Tensor) -> torch.Tensor:
            return self.bert(inputs_embeds=embeds).last_hidden_state

    return Encoder(), (torch.randn(batch, tokens, config.hidden_size),), True


def _t5(device: str, small: bool) -> tuple[Any, tuple[Any, ...], bool]:
    import torch
    from torch import nn
    from transformers import T5Config, T5EncoderModel

    if small:
        config = T5Config(d_model=64, d_kv=16, num_heads=4, d_ff=128, num_layers=2, dropout_rate=0.0)
    else:
        config = T5Config(d_model=768, d_kv=64, num_heads=12, d_ff=3072, num_layers=12, dropout_rate=0.0)
    batch, tokens = (2, 16) if small else (8, 512)

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.t5 = T5EncoderModel(config)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.t5(input_ids=ids).last_hidden_state

    return Encoder(), (torch.randint(0, config.vocab_size, (batch, tokens)),), False


MODELS: dict[str, Callable[[str, bool], tuple[Any, tuple[Any, ...], bool]]] = {
    "gpt2": _gpt2,
    "llama": _llama,
    "mlp_decode": _mlp_decode,
    "resnet50": _resnet50,
    "bert": _bert,
    "bert_train": _bert_train,
    "t5": _t5,
}


def compiled(variant: str, model: Any) -> Any:
    import torch

    if variant == "eager":
        return model
    if variant in ("inductor", "reduce_overhead", "max_autotune", "max_autotune_nocg"):
        mode = {"inductor": None, "reduce_overhead": "reduce-overhead", "max_autotune": "max-autotune"}
        return torch.compile(model, mode=mode.get(variant, "max-autotune-no-cudagraphs"))
    if variant == "tunesmith_default":
        return torch.compile(model, backend="tunesmith")
    if variant == "tunesmith":
        return torch.compile(model, backend="tunesmith", mode="max-autotune")
    if variant == "tunesmith_blocking":
        return torch.compile(model, backend="tunesmith", options={"tuning": "blocking", "cudagraphs": True})
    if variant == "tunesmith_aten_only":
        return torch.compile(model, backend="tunesmith", options={"backends": ["aten"], "cudagraphs": True})
    raise SystemExit(f"unknown variant {variant!r}")


# --- one process: one model, one variant ---


def measure(
    model_name: str,
    variant: str,
    device: str,
    small: bool,
    timed: bool,
    plan: dict[str, Any] | None = None,
    ready: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """One process's row. ``plan`` collects each Problem's chosen specs (:func:`watch_choices`);
    ``ready`` is called just before the first step's clock starts (fleet.py: a barrier of the ranks)."""
    import torch

    torch.manual_seed(0)
    model, inputs, train = MODELS[model_name](device, small)
    dtype = torch.bfloat16
    model = model.to(device=device, dtype=dtype)
    if model_name == "resnet50":
        model = model.to(memory_format=torch.channels_last)
        inputs = tuple(x.to(memory_format=torch.channels_last) for x in inputs)
    inputs = tuple(x.to(device=device, dtype=dtype if x.is_floating_point() else x.dtype) for x in inputs)
    if train:
        inputs = tuple(x.requires_grad_() for x in inputs)
    else:
        model.eval()
    cuda = device.startswith("cuda")
    params = [p for p in model.parameters() if p.requires_grad] if train else []
    grad_out: list[Any] = []

    def step(fn: Any) -> Any:
        if cuda:
            torch.compiler.cudagraph_mark_step_begin()  # a new step: earlier outputs may be overwritten
        if train:
            for t in (*inputs, *params):
                t.grad = None
            out = fn(*inputs)
            if not grad_out:
                grad_out.append(torch.randn_like(out))
            out.backward(grad_out[0])
            return out
        with torch.no_grad():
            return fn(*inputs)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    def grads() -> list[Any]:
        return [t.grad.detach().clone() for t in (*inputs, *params)] if train else []

    ref_out = step(model).detach().clone()
    ref_grads = grads()
    winners: dict[str, Any] = {} if plan is None else plan
    chosen = watch_choices(winners) if variant.startswith("tunesmith") else None
    gc.collect()  # every variant's first step starts with the collector's state alike (GcMeter)
    if ready is not None:
        ready()
    sync()
    profiler = _cold_profiler()
    collector = GcMeter()
    sampler = StackSampler() if os.environ.get(SAMPLES_ENV) else contextlib.nullcontext()
    start = time.perf_counter()
    with collector, sampler:
        fn = compiled(variant, model)  # torch.compile() itself: it loads the backend's modules
        compile_call = time.perf_counter() - start
        out = step(fn)
        sync()
    if profiler is not None:
        profiler.disable()
        _write_profile(profiler, Path(os.environ[COLD_PROFILE_ENV]), "cumulative", 60, mine=True)
    first = time.perf_counter() - start
    row: dict[str, Any] = {
        "first_step_s": round(first, 3),
        "compile_call_s": round(compile_call, 3),
        "first_step_gc": collector.summary(),
        "out_rel_err": rel_err(out, ref_out),
    }
    if train:
        row["grad_rel_err"] = max(rel_err(g, r) for g, r in zip(grads(), ref_grads, strict=True))
    if chosen is not None:
        import tunesmith

        row["first_step_counters"] = {k: tunesmith.counters[k] for k in FIRST_STEP_COUNTERS}
    if isinstance(sampler, StackSampler):
        path = Path(os.environ[SAMPLES_ENV]) / f"{model_name}-{variant}-{os.getpid()}.txt"
        sampler.write(path, f"first_step_s {first:.3f} counters {row.get('first_step_counters')}")
    del out
    if not timed:
        return row
    if variant.startswith("tunesmith") and variant != "tunesmith_blocking":  # tuned in the background
        row |= _tuned(lambda: step(fn), sync, train, ref_out, ref_grads, grads)
    if chosen is not None:
        row["chosen"] = dict(chosen)
        # which template config won, where it was not ATen's (variants that tune apart can differ)
        row["winners"] = {e["problem"]: e["specs"] for e in winners.values() if any(_not_aten(s) for s in e["specs"])}
        row["fastest"] = {e["problem"]: e["fastest"] for e in winners.values() if "fastest" in e}
        row["launch_bound_to_aten"] = tunesmith.counters["launch_bound_to_aten"]
    warm_until = time.perf_counter() + WARMUP_S
    steps = 0
    while steps < WARMUP or time.perf_counter() < warm_until:
        step(fn)
        steps += 1
        if steps % WARMUP == 0:
            sync()
    sync()
    times, clocks = [], []
    for _ in range(ROUNDS):  # steps enqueued back to back, as a training or serving loop runs them
        if cuda:
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
        else:
            begin_s = time.perf_counter()
        for _ in range(STEPS):
            step(fn)
        if cuda:
            end.record()
            end.synchronize()
            times.append(begin.elapsed_time(end) / STEPS)
            with contextlib.suppress(Exception):  # without NVML the row goes without it
                clocks.append(torch.cuda.clock_rate())  # rounds that drift apart: the card's clock, or not
        else:
            times.append((time.perf_counter() - begin_s) * 1e3 / STEPS)
    row["step_ms"] = round(statistics.median(times), 4)
    row["step_ms_rounds"] = [round(t, 4) for t in times]
    if clocks:
        row["sm_clock_mhz_rounds"] = clocks
    if cuda:
        kernels = os.environ.get(KERNELS_ENV)
        table_path = Path(kernels) / f"{model_name}-{variant}.txt" if kernels else None
        row["gpu_ms"] = round(gpu_ms(lambda: step(fn), table_path), 4)
        if table_path is not None:
            host_profile(lambda: step(fn), table_path.with_suffix(".host.txt"))
        with contextlib.suppress(Exception):  # without NVML the row goes without it
            row["sm_clock_mhz"] = torch.cuda.clock_rate()  # a card slowed by sustained load shows here
    return row


def _tuned(
    step: Callable[[], Any], sync: Callable[[], None], train: bool, ref_out: Any, ref_grads: list[Any], grads: Any
) -> dict[str, Any]:
    """A tunesmith variant after its first step: steps until background tuning has swapped every
    tuned kernel in (``tuned_after_s``: seconds from the end of the first step), then one more,
    whose errors against eager are ``tuned_*_rel_err`` (the row's ``*_rel_err`` are the first
    step's, ATen's kernels where nothing was known yet)."""
    import tunesmith

    begun = time.perf_counter()
    steps = 0
    while not tunesmith.status().idle and time.perf_counter() - begun < TUNED_WITHIN_S:
        step()
        steps += 1
    done = tunesmith.wait(timeout=max(1.0, TUNED_WITHIN_S - (time.perf_counter() - begun)))
    sync()
    row: dict[str, Any] = {"tuned_after_s": round(time.perf_counter() - begun, 3), "tuned_after_steps": steps}
    if not done:
        row["tuning_unfinished"] = str(tunesmith.status())
    row["background_counters"] = {
        k: v for k, v in tunesmith.counters.items() if k.startswith("background_") and k != "background_gap"
    }
    out = step()
    row["tuned_out_rel_err"] = rel_err(out, ref_out)
    if train:
        row["tuned_grad_rel_err"] = max(rel_err(g, r) for g, r in zip(grads(), ref_grads, strict=True))
    return row


def _not_aten(spec: str) -> bool:
    return not spec.startswith("aten:")


def watch_choices(plan: dict[str, Any] | None = None) -> Any:
    """A count of the kernels tunesmith chooses in this process, by backend and template; with
    ``plan``, also each Problem's chosen specs by its key (what fleet.py compares across ranks)."""
    from collections import Counter

    import tunesmith
    from tunesmith.selection import describe

    chosen: Counter[str] = Counter()

    class Watch:
        @tunesmith.hookimpl
        def tunesmith_selection_done(self, report: Any) -> None:
            chosen[f"{report.chosen.backend}:{report.chosen.template}"] += 1
            if plan is not None:
                entry = plan.setdefault(report.problem.key(), {"problem": describe(report.problem), "specs": []})
                if str(report.chosen) not in entry["specs"]:
                    entry["specs"].append(str(report.chosen))
                if report.source == "tuned":  # its three fastest: how far the winner was from the next
                    fastest = sorted((t for t in report.timings if t.ok), key=lambda t: t.ms)[:3]
                    entry["fastest"] = [[str(t.spec), round(t.ms * 1e3, 2), round(t.noise, 3)] for t in fastest]

    tunesmith.register(Watch(), "models_watch")
    return chosen


def gpu_ms(run: Callable[[], Any], table_path: Path | None = None) -> float:
    """Device time per step by the profiler: every kernel, copy and memset of ``PROFILED`` steps;
    with ``table_path``, their table by name is written there (where the time goes)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(PROFILED):
            run()
        torch.cuda.synchronize()
    total_us = sum(e.self_device_time_total for e in prof.key_averages())
    if table_path is not None:
        table_path.parent.mkdir(parents=True, exist_ok=True)
        table_path.write_text(prof.key_averages().table(sort_by="self_device_time_total", row_limit=40) + "\n")
    return total_us / 1e3 / PROFILED


def host_profile(run: Callable[[], Any], path: Path) -> None:
    """Where the host's time goes over ``PROFILED`` steps (cProfile, by own time, and the whole
    profile beside it, to compare two rows call by call): a row whose step time exceeds its GPU
    time is bound by it."""
    import cProfile

    import torch

    torch.cuda.synchronize()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(PROFILED):
        run()
    torch.cuda.synchronize()
    profiler.disable()
    _write_profile(profiler, path, "tottime", 40, mine=True)


class GcMeter:
    """Python's garbage collections while it is entered: how many of each generation, and their
    seconds. A full collection of a process holding torch takes 0.2 to 0.4 s, and it comes once
    enough objects have survived since the last one, so whether it falls in a first step depends
    on what the process allocated before it: each variant's first step starts after a collection."""

    def __init__(self) -> None:
        self.counts = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self._began = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.counts[info["generation"]] += 1
            self.seconds[info["generation"]] += time.perf_counter() - self._began

    def __enter__(self) -> GcMeter:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)

    def summary(self) -> dict[str, Any]:
        return {"collections": self.counts, "s": [round(t, 3) for t in self.seconds]}


class StackSampler:
    """The main thread's stack, sampled from a thread every ``interval`` seconds while entered:
    where a first step's wall time goes, waits on other processes and the GPU included, at a cost
    of a few percent (cProfile's is 2 to 3 times the step, unevenly spread)."""

    def __init__(self, interval: float = 0.002) -> None:
        self.interval = interval
        self.stacks: collections.Counter[tuple[str, ...]] = collections.Counter()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self, main: int) -> None:
        while not self._stop.wait(self.interval):
            frame, stack = sys._current_frames().get(main), []
            while frame is not None:
                code = frame.f_code
                where = code.co_filename.split("site-packages/")[-1]
                stack.append(f"{where}:{code.co_firstlineno}({code.co_name})")
                frame = frame.f_back
            self.stacks[tuple(reversed(stack))] += 1

    def __enter__(self) -> StackSampler:
        self._thread = threading.Thread(target=self._sample, args=(threading.get_ident(),), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def write(self, path: Path, header: str, rows: int = 150) -> None:
        """The functions by the share of samples they were on the stack in, then by their own."""
        total = sum(self.stacks.values()) or 1
        within: collections.Counter[str] = collections.Counter()
        own: collections.Counter[str] = collections.Counter()
        for stack, n in self.stacks.items():
            within.update(dict.fromkeys(stack, n))
            if stack:
                own[stack[-1]] += n
        lines = [header, f"{total} samples, every {self.interval * 1e3:.0f} ms", "", "within (share, function):"]
        lines += [f"{n / total:6.1%}  {f}" for f, n in within.most_common(rows)]
        lines += ["", "own:"] + [f"{n / total:6.1%}  {f}" for f, n in own.most_common(rows // 2)]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")


def _cold_profiler() -> Any:
    """A running cProfile of the first step where ``COLD_PROFILE_ENV`` asks for one, else None."""
    if not os.environ.get(COLD_PROFILE_ENV):
        return None
    import cProfile

    profiler = cProfile.Profile()
    profiler.enable()
    return profiler


def _write_profile(profiler: Any, path: Path, order: str, rows: int, mine: bool = False) -> None:
    """The ``rows`` costliest functions by ``order``; ``mine``: then tunesmith's own and the costliest
    by own time too, and the whole profile beside it (``.prof``, for ``pstats``)."""
    import io
    import pstats

    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text).sort_stats(order)
    stats.print_stats(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    if mine:
        stats.print_stats("tunesmith", rows)
        stats.sort_stats("tottime").print_stats(rows // 2)
        profiler.dump_stats(str(path.with_suffix(".prof")))
    path.write_text(text.getvalue())


def rel_err(a: Any, b: Any) -> float:
    diff = (a.double() - b.double()).norm().item()
    scale = b.double().norm().item()
    value = diff / scale if scale else diff
    return float(f"{value:.3e}") if math.isfinite(value) else math.inf


def child(args: argparse.Namespace) -> None:
    row = measure(args.model, args.variant, args.device, args.small, not args.untimed)
    print("ROW " + json.dumps(row), flush=True)
    os._exit(0)  # the row is out and every cache written: skip the compile pools' slow teardown


# --- the run: processes, GPUs and CPU cores ---


def cpu_halves() -> tuple[list[int], list[int]]:
    """This process's CPUs in two halves of whole cores (hyperthread siblings kept together)."""
    cpus = sorted(os.sched_getaffinity(0))
    cores: dict[tuple[str, str], list[int]] = {}
    for cpu in cpus:
        base = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            ident = ((base / "physical_package_id").read_text().strip(), (base / "core_id").read_text().strip())
        except OSError:
            ident = ("0", str(cpu))
        cores.setdefault(ident, []).append(cpu)
    groups = list(cores.values())
    half = len(groups) // 2
    return [c for g in groups[half:] for c in g], [c for g in groups[:half] for c in g]


class Runner:
    """Runs measurement processes and collects their rows into the JSON file as they finish."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rows: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.root = Path(tempfile.mkdtemp(prefix="tunesmith-models-"))
        self.meta: dict[str, Any] = {}
        self.cold: dict[str, dict[str, Any]] = {}  # max-autotune's cold compile per model (two GPUs)
        if args.resume and args.json and Path(args.json).exists():
            self.rows = json.loads(Path(args.json).read_text())["rows"]

    def done(self, model: str, variant: str) -> bool:
        return any(r["model"] == model and r["variant"] == variant for r in self.rows)

    def caches(self, model: str, variant: str) -> dict[str, str]:
        base = self.root / f"{model}-{variant}"
        return {
            "TUNESMITH_CACHE_DIR": str(base / "tunesmith"),
            "TORCHINDUCTOR_CACHE_DIR": str(base / "inductor"),
            "TRITON_CACHE_DIR": str(base / "triton"),
        }

    def caches_of(self, model: str, variant: str) -> bool:
        """Whether this run holds the caches of ``model``'s ``variant`` (a resumed row's are gone)."""
        return (self.root / f"{model}-{variant}").exists()

    def process(
        self,
        model: str,
        variant: str,
        gpu: int | None,
        cpus: list[int] | None,
        caches: dict[str, str],
        timed: bool,
        kernels: bool = True,
    ) -> dict[str, Any]:
        """One measurement process; its row, or an error (a timeout says how long it ran). Without
        ``kernels`` it writes no kernel table (the first process's stays)."""
        env = {**os.environ, **caches, "PYTHONUNBUFFERED": "1"}
        if not kernels:
            env.pop(KERNELS_ENV, None)
        if gpu is not None:  # the gpu-th of the GPUs this process sees
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            env["CUDA_VISIBLE_DEVICES"] = visible.split(",")[gpu] if visible else str(gpu)
        device = "cuda" if gpu is not None else "cpu"
        cmd = [sys.executable, __file__, "--child", "--model", model, "--variant", variant, "--device", device]
        cmd += ["--small"] if self.args.small else []
        cmd += [] if timed else ["--untimed"]
        limit = self.args.limit if variant.startswith("max_autotune") else self.args.limit_other
        start = time.monotonic()
        proc = subprocess.Popen(
            cmd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )
        try:
            output, _ = proc.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.communicate()
            return {"error": f"did not finish in {limit:.0f} s", "over_s": limit}
        rows = [line[4:] for line in output.splitlines() if line.startswith("ROW ")]
        wall = round(time.monotonic() - start, 1)
        if proc.returncode != 0 or not rows:
            tail = "\n".join(output.strip().splitlines()[-12:])
            return {"error": f"exit {proc.returncode}: {tail}", "process_s": wall}
        return {**json.loads(rows[-1]), "process_s": wall, "gpu": env.get("CUDA_VISIBLE_DEVICES")}

    def record(self, row: dict[str, Any]) -> None:
        with self.lock:
            self.rows = [r for r in self.rows if (r["model"], r["variant"]) != (row["model"], row["variant"])]
            self.rows.append(row)
            self.save()
        status = row.get("error", "").splitlines()[0] if "error" in row else ""
        shown = {k: row.get(k) for k in ("step_ms", "gpu_ms", "first_step_s", "warm_first_step_s", "out_rel_err")}
        print(f"{row['model']:<11} {row['variant']:<20} {status or shown}", flush=True)

    def save(self) -> None:
        if self.args.json:
            body = {**self.meta, "rows": sorted(self.rows, key=order)}
            Path(self.args.json).write_text(json.dumps(body, indent=1) + "\n")

    def row(self, model: str, variant: str, gpu: int | None, cpus: list[int] | None, **extra: Any) -> None:
        """Cold, timed, and (tunesmith) warm: one row on one GPU. ``max_autotune_nocg`` after
        ``max_autotune`` in this run starts on its warm caches: the same autotuning, minutes saved."""
        caches = self.caches(model, variant)
        anchor = next((r for r in self.rows if (r["model"], r["variant"]) == (model, ANCHOR)), None)
        if variant == "max_autotune_nocg" and anchor and "error" not in anchor and self.caches_of(model, ANCHOR):
            caches, extra = self.caches(model, ANCHOR), {**extra, "first_step_cache": f"{ANCHOR}'s (warm)"}
        row = {"model": model, "variant": variant, **self.process(model, variant, gpu, cpus, caches, True), **extra}
        if variant in self.args.warm and "error" not in row:
            warm = self.process(model, variant, gpu, cpus, caches, False)
            row["warm_first_step_s"] = warm.get("first_step_s")
            row["warm_process_s"] = warm.get("process_s")
            row["warm_first_step_gc"] = warm.get("first_step_gc")
            if "first_step_counters" in warm:
                row["warm_first_step_counters"] = warm["first_step_counters"]
            if "error" in warm:
                row["warm_error"] = warm["error"]
        if self.args.cold_profile and variant in self.args.warm and "error" not in row:
            # one more cold process, under cProfile: where a cold first step's time goes (its
            # time, slowed by the profiler, is not the row's)
            path = Path(self.args.cold_profile).resolve() / f"{model}-{variant}.cold.txt"
            profiled = {**self.caches(model, f"{variant}-profiled"), COLD_PROFILE_ENV: str(path)}
            self.process(model, variant, gpu, cpus, profiled, False)
            # and one more warm process, on the row's caches: where a warm first step's time goes
            warm_path = {COLD_PROFILE_ENV: str(path.with_name(f"{model}-{variant}.warm.txt"))}
            self.process(model, variant, gpu, cpus, {**caches, **warm_path}, False)
        self.record(row)

    def retime(self, model: str, variants: list[str], gpu: int | None, cpus: list[int] | None) -> None:
        """``--processes N``: N - 1 more timed processes of each of ``model``'s ``variants``, on the
        variant's warm caches, in turns (a process of each variant a round, the order reversed every
        other round), so that the spread between processes and over time falls on every variant
        alike; a row's ``step_ms`` and ``gpu_ms`` become the medians over its processes (each kept
        in ``*_processes``). The timed processes' first steps are warm ones: ``warm_first_step_s`` is
        their median. A variant of ``--warm`` also gets N - 1 more cold processes (first step only,
        on fresh caches) and N - 1 more warm ones in the same turns: ``first_step_s`` is a median too."""
        todo = []
        for variant in variants:
            row = next((r for r in self.rows if (r["model"], r["variant"]) == (model, variant)), None)
            cache = ANCHOR if row and row.get("first_step_cache") else variant
            # the plan must be the first process's: its caches are needed (a resumed row's are gone)
            warm = variant == "eager" or self.caches_of(model, cache)
            if row and "step_ms" in row and "step_ms_processes" not in row and warm:
                row["step_ms_processes"], row["gpu_ms_processes"] = [row["step_ms"]], [row.get("gpu_ms")]
                row["warm_first_step_s_processes"] = [row.get("warm_first_step_s")]
                if variant in self.args.warm:
                    row["first_step_s_processes"] = [row["first_step_s"]]
                todo.append((row, cache))

        def ran(row: dict[str, Any], result: dict[str, Any]) -> bool:
            """Whether a process of the turns ran; where it did not, its error goes to the row."""
            if "error" in result:
                row.setdefault("retime_errors", []).append(result["error"].splitlines()[0])
            return "error" not in result

        for turn in range(1, self.args.processes):
            for row, cache in todo if turn % 2 else todo[::-1]:
                variant = row["variant"]
                if variant in self.args.warm:
                    fresh = self.caches(model, f"{variant}-cold{turn}")
                    cold = self.process(model, variant, gpu, cpus, fresh, False, False)
                    if ran(row, cold):
                        row["first_step_s_processes"].append(cold["first_step_s"])
                timed = self.process(model, variant, gpu, cpus, self.caches(model, cache), True, False)
                if not ran(row, timed):
                    continue
                row["step_ms_processes"].append(timed["step_ms"])
                row["gpu_ms_processes"].append(timed.get("gpu_ms"))
                row["warm_first_step_s_processes"].append(timed["first_step_s"])
                if variant in self.args.warm:
                    again = self.process(model, variant, gpu, cpus, self.caches(model, cache), False, False)
                    if ran(row, again):
                        row["warm_first_step_s_processes"].append(again["first_step_s"])
        for row, _ in todo:
            row["step_ms"] = round(statistics.median(row["step_ms_processes"]), 4)
            gpu_times = [t for t in row.pop("gpu_ms_processes") if t is not None]
            if gpu_times:
                row["gpu_ms"], row["gpu_ms_processes"] = round(statistics.median(gpu_times), 4), gpu_times
            for key in ("first_step_s", "warm_first_step_s"):
                values = [t for t in row.get(f"{key}_processes", []) if t is not None]
                if values:
                    row[key], row[f"{key}_processes"] = round(statistics.median(values), 3), values
            self.record(row)


def order(row: dict[str, Any]) -> tuple[int, int]:
    models = list(MODELS)
    return (models.index(row["model"]) if row["model"] in models else 99, VARIANTS.index(row["variant"]))


def run(args: argparse.Namespace, meta: dict[str, Any]) -> list[dict[str, Any]]:
    runner = Runner(args)
    runner.meta = meta
    if runner.rows:  # resumed: the rows kept must compare with those to come
        gemm.refuse_unlike(args.json, json.loads(Path(args.json).read_text()), meta, RESUME_SAME)
    models = [m for m in args.models.split(",") if m]
    variants = [v for v in args.variants.split(",") if v]
    gpus = args.gpus if args.device == "cuda" else [None]
    main_gpu = gpus[0]
    todo = [(m, v) for m in models for v in variants if not runner.done(m, v)]
    split = len(gpus) > 1 and "max_autotune" in variants
    main_cpus, anchor_cpus = cpu_halves() if split else (None, None)
    anchors_ready = {m: threading.Event() for m in models}

    def anchor_stream() -> None:
        for m in models:
            if (m, "max_autotune") in todo or (m, "max_autotune_nocg") in todo:
                caches = runner.caches(m, "max_autotune")
                runner.cold[m] = runner.process(m, "max_autotune", gpus[1], anchor_cpus, caches, False)
            anchors_ready[m].set()

    thread = threading.Thread(target=anchor_stream, daemon=True) if split else None
    if thread:
        thread.start()
    for m, v in todo:
        if split and v in ("max_autotune", "max_autotune_nocg"):
            continue
        runner.row(m, v, main_gpu, main_cpus)
    if split:
        for m in models:
            anchors_ready[m].wait()
            cold = runner.cold.get(m)
            if cold is None:
                continue
            for v in ("max_autotune", "max_autotune_nocg"):
                if (m, v) not in todo:
                    continue
                if "error" in cold:
                    runner.record({"model": m, "variant": v, **cold})
                    continue
                timed = runner.process(m, v, main_gpu, main_cpus, runner.caches(m, "max_autotune"), True)
                if v == "max_autotune":
                    row = {**timed, **cold, "warm_first_step_s": timed.get("first_step_s")}
                else:
                    row = {**timed, "first_step_cache": "max_autotune's (warm)"}
                runner.record({"model": m, "variant": v, **row})
    if args.processes > 1:
        for m in models:
            runner.retime(m, [v for v in args.retime if v in variants], main_gpu, main_cpus)
    shutil.rmtree(runner.root, ignore_errors=True)
    return runner.rows


def describe(args: argparse.Namespace) -> dict[str, Any]:
    """The machine and software of the run (asked of a child-free ``python -c``: no CUDA here)."""
    probe = (
        "import json, os, torch, triton; d = torch.cuda.is_available();"
        "print(json.dumps({'device': torch.cuda.get_device_name() if d else 'cpu', 'torch': torch.__version__,"
        "'triton': triton.__version__, 'gpus': torch.cuda.device_count(), 'cpus': len(os.sched_getaffinity(0))}))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False).stdout
    meta = json.loads(out.strip().splitlines()[-1]) if out.strip() else {"device": "unknown"}
    meta["benchmark"] = "models"
    meta["timing"] = (
        f"step_ms: median of {ROUNDS} rounds of {STEPS} steps enqueued back to back (CUDA events) after "
        f"at least {WARMUP} warm-up steps and {WARMUP_S} s of them; gpu_ms: profiler device time over "
        f"{PROFILED} steps, per step; first_step_s: the first call in a fresh process on empty caches, to the "
        "last kernel, after a garbage collection"
    )
    processes = getattr(args, "processes", 1)  # fleet.py describes its run with its own arguments
    if processes > 1:
        meta["timing"] += (
            f"; for {', '.join(args.retime)}: step_ms and gpu_ms are medians over {processes} processes "
            "(the first cold, the others on its warm caches, the variants in turns) where a row has "
            "step_ms_processes (a row resumed from an earlier run has one process); for those of "
            f"{', '.join(getattr(args, 'warm', []))} also first_step_s (over {processes} cold processes, "
            "on fresh caches) and "
            f"warm_first_step_s (over {2 * processes - 1} processes on warm caches: the warm one, the timed "
            "ones and one more a turn), where a row has first_step_s_processes"
        )
    meta["processes"] = processes
    meta["small"] = bool(args.small)
    return meta


# --- the report ---


def anchor_of(rows: list[dict[str, Any]], model: str) -> tuple[str, float] | None:
    for name in (ANCHOR, FALLBACK_ANCHOR):
        row = next((r for r in rows if r["model"] == model and r["variant"] == name and "step_ms" in r), None)
        if row:
            return name, row["step_ms"]
    return None


def table(rows: list[dict[str, Any]]) -> str:
    def num(value: Any, fmt: str) -> str:
        return format(value, fmt) if isinstance(value, int | float) else "-"

    head = f"{'model':<11} {'variant':<20} {'step ms':>8} {'GPU ms':>7} {'/anchor':>8} {'first s':>8} "
    head += f"{'warm s':>7} {'err':>9}"
    lines = [head]
    for row in sorted(rows, key=order):
        anchor = anchor_of(rows, row["model"])
        if "error" in row:
            said = [line for line in row["error"].splitlines() if line.strip()]
            last = next((line for line in reversed(said) if "Error" in line), said[-1])
            lines.append(f"{row['model']:<11} {row['variant']:<20} failed: {last.strip()[:80]}")
            continue
        ratio = row["step_ms"] / anchor[1] if anchor and "step_ms" in row else None
        err = max(row.get("out_rel_err", 0), row.get("grad_rel_err", 0))
        lines.append(
            f"{row['model']:<11} {row['variant']:<20} {num(row.get('step_ms'), '8.3f')} "
            f"{num(row.get('gpu_ms'), '7.3f')} "
            f"{num(ratio, '8.3f')} {num(row.get('first_step_s'), '8.1f')} {num(row.get('warm_first_step_s'), '7.1f')} "
            f"{num(err, '9.2e')}"
        )
    lines.append(f"/anchor: step time over {ANCHOR}'s (or {FALLBACK_ANCHOR}'s where it has none) of the same model")
    return "\n".join(lines)


def chart(rows: list[dict[str, Any]], device: str, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = [m for m in MODELS if any(r["model"] == m for r in rows)]
    shown = [v for v in VARIANTS if any(r["variant"] == v for r in rows)]
    fig, ax = plt.subplots(figsize=(2.2 * len(models) + 3, 4.5))
    width = 0.8 / len(shown)
    for i, variant in enumerate(shown):
        values = []
        for m in models:
            anchor = anchor_of(rows, m)
            row = next((r for r in rows if r["model"] == m and r["variant"] == variant and "step_ms" in r), None)
            values.append(anchor[1] / row["step_ms"] if anchor and row else 0)
        ax.bar([x + i * width for x in range(len(models))], values, width, label=variant)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(models))], models)
    ax.set_ylabel(f"speed over {ANCHOR} ({FALLBACK_ANCHOR} where it has none)")
    ax.set_title(f"Step time, {device}: higher is faster")
    ax.legend(fontsize=7, ncol=len(shown), loc="upper center", bbox_to_anchor=(0.5, -0.08))
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--gpus", type=lambda s: [int(x) for x in s.split(",")], default=None, help="default: all")
    parser.add_argument("--small", action="store_true", help="tiny versions of the models (a smoke test)")
    parser.add_argument("--limit", type=float, default=600.0, help="seconds a max-autotune process may take")
    parser.add_argument("--limit-other", type=float, default=300.0, help="seconds any other process may take")
    parser.add_argument("--warm", type=lambda s: s.split(","), default=list(WARM), help="variants timed warm too")
    parser.add_argument("--json", help="write the rows here (as they finish)")
    parser.add_argument("--processes", type=int, default=1, help="time --retime's variants in this many processes")
    parser.add_argument(
        "--retime", type=lambda s: s.split(","), default=list(RETIMED), help="variants --processes applies to"
    )
    parser.add_argument(
        "--kernels", help="write each row's profiled kernels, by name, and its host profile to tables in this folder"
    )
    parser.add_argument(
        "--cold-profile",
        help="run each warm-timed variant once more cold and once warm under cProfile; the profiles to this folder",
    )
    parser.add_argument(
        "--first-step-samples", help="sample every process's first step's stack; the samples to this folder"
    )
    parser.add_argument("--resume", action="store_true", help="keep the rows already in --json, run the others")
    parser.add_argument("--chart", help="draw the step-time chart (PNG) here")
    parser.add_argument("--chart-only", help="redraw the chart and table from this JSON file, measure nothing")
    parser.add_argument("--merge", nargs="+", help="merge these JSON files (runs on other GPUs) into --json")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    parser.add_argument("--untimed", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if args.merge:  # rows of runs on the GPUs of one machine, one model's rows on one GPU
        parts = [json.loads(Path(p).read_text()) for p in args.merge]
        rows = [r for part in parts for r in part["rows"]]
        merged = {**parts[0], "gpus": sum(p.get("gpus", 1) for p in parts), "rows": sorted(rows, key=order)}
        Path(args.json).write_text(json.dumps(merged, indent=1) + "\n")
        args.chart_only = args.json
    if args.chart_only:
        data = json.loads(Path(args.chart_only).read_text())
        print(table(data["rows"]))
        if args.chart:
            chart(data["rows"], data.get("device", "?"), args.chart)
        return
    if args.kernels:
        os.environ[KERNELS_ENV] = str(Path(args.kernels).resolve())
    if args.first_step_samples:
        os.environ[SAMPLES_ENV] = str(Path(args.first_step_samples).resolve())
    meta = describe(args)
    if args.gpus is None:
        args.gpus = list(range(meta.get("gpus", 0))) or [0]
    rows = run(args, meta)
    print(table(rows))
    if args.chart:
        device = json.loads(Path(args.json).read_text())["device"] if args.json else "?"
        chart(rows, device, args.chart)


if __name__ == "__main__":
    main()
