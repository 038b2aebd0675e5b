"""Build the shape corpus: GEMM-family problems of models people run, written to ``corpus.json``.

    python benchmarks/corpus/build.py            # rewrites benchmarks/corpus/corpus.json

The models' dimensions are written out below, from each model's published config, with the
model's name; each case says which model, layer, token count and pass it came from (``source``).
A linear layer ``y = x @ W.T + b`` (W stored ``[out, in]``) gives three GEMMs in training: the
forward (B is a transposed view of W: ``layout_b`` col), dX = dY @ W (both row-major) and
dW = dY.T @ X (A is a transposed view: ``layout_a`` col, K is the token count). GPT-2's Conv1D
stores W as ``[in, out]``, so its layouts are the other way round. Problems that are the same
GEMM (another model with the same dimensions) are kept once, under the first name.

The split into ``train`` and ``test`` is a hash of the name (:func:`split_of`), written into each
case: adding cases never moves an existing one. Anything fitted to the corpus (configs, pruning
constants, cost-model figures) is chosen on ``train`` and reported on ``test``.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from pathlib import Path
from typing import Any

OUT = Path(__file__).with_name("corpus.json")
#: part of every case's split hash; changing it reshuffles the whole split, so never change it
SPLIT_SEED = "tunesmith-corpus-v1"
#: the seed of the random odd sizes
RANDOM_SEED = 29
RANDOM_CASES = 22
#: the most bytes one problem's inputs and output may take (an 80 GB GPU holds copies of it)
MAX_BYTES = 4 * 2**30
SIZES = {"float32": 4, "float16": 2, "bfloat16": 2}
SHORT = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}

# ---------------------------------------------------------------- decoder language models
# hidden, ffn (per expert for MoE), heads, kv heads, head dim, vocab; act: the gate's activation;
# bias: q/k/v projections with bias (Qwen2), every linear layer with bias (Phi-2).
LLMS: dict[str, dict[str, Any]] = {
    "llama2-7b": dict(hidden=4096, ffn=11008, heads=32, kv=32, hd=128, vocab=32000, act="silu"),
    "llama2-13b": dict(hidden=5120, ffn=13824, heads=40, kv=40, hd=128, vocab=32000, act="silu"),
    "llama2-70b": dict(hidden=8192, ffn=28672, heads=64, kv=8, hd=128, vocab=32000, act="silu"),
    "llama3-8b": dict(hidden=4096, ffn=14336, heads=32, kv=8, hd=128, vocab=128256, act="silu"),
    "llama3-70b": dict(hidden=8192, ffn=28672, heads=64, kv=8, hd=128, vocab=128256, act="silu"),
    "llama3.2-1b": dict(hidden=2048, ffn=8192, heads=32, kv=8, hd=64, vocab=128256, act="silu"),
    "mistral-7b": dict(hidden=4096, ffn=14336, heads=32, kv=8, hd=128, vocab=32000, act="silu"),
    "mixtral-8x7b": dict(hidden=4096, ffn=14336, heads=32, kv=8, hd=128, vocab=32000, act="silu", experts=8, top=2),
    "qwen2-7b": dict(hidden=3584, ffn=18944, heads=28, kv=4, hd=128, vocab=152064, act="silu", bias="qkv"),
    "qwen2.5-0.5b": dict(hidden=896, ffn=4864, heads=14, kv=2, hd=64, vocab=151936, act="silu", bias="qkv"),
    "qwen2.5-14b": dict(hidden=5120, ffn=13824, heads=40, kv=8, hd=128, vocab=152064, act="silu", bias="qkv"),
    "qwen1.5-moe-a2.7b": dict(
        hidden=2048,
        ffn=1408,
        heads=16,
        kv=16,
        hd=128,
        vocab=151936,
        act="silu",
        experts=60,
        top=4,
        shared_ffn=5632,
        bias="qkv",
    ),
    "gemma-2b": dict(hidden=2048, ffn=16384, heads=8, kv=1, hd=256, vocab=256000, act="gelu_tanh"),
    "gemma-7b": dict(hidden=3072, ffn=24576, heads=16, kv=16, hd=256, vocab=256000, act="gelu_tanh"),
    "gemma2-9b": dict(
        hidden=3584,
        ffn=14336,
        heads=16,
        kv=8,
        hd=256,
        vocab=256000,
        act="gelu_tanh",
        final_softcap=30.0,
        attn_softcap=50.0,
    ),
    "phi-2": dict(hidden=2560, ffn=10240, heads=32, kv=32, hd=80, vocab=51200, act="gelu_tanh", bias="all"),
    "phi-3-mini": dict(hidden=3072, ffn=8192, heads=32, kv=32, hd=96, vocab=32064, act="silu", fused=True),
    "deepseek-v3": dict(
        hidden=7168, ffn=2048, heads=128, kv=128, hd=128, vocab=129280, act="silu", experts=256, top=8, router="sigmoid"
    ),
}

# (model, layer, pass, tokens, dtype): pass is fwd, dX or dW (module above); a layer of a MoE model
# named experts.* runs at the tokens one expert gets (given as the token count here)
LLM_CASES = [
    ("llama2-7b", "self_attn.q_proj", "fwd", 4096, "fp16"),
    ("llama2-7b", "mlp.gate_proj", "fwd", 16, "fp16"),
    ("llama2-7b", "mlp.down_proj", "dX", 4096, "bf16"),
    ("llama2-7b", "mlp.up_proj", "dW", 8192, "bf16"),
    ("llama2-7b", "lm_head", "fwd", 1, "fp16"),
    ("llama2-13b", "self_attn.o_proj", "fwd", 2048, "bf16"),
    ("llama2-13b", "mlp.gate_proj", "fwd", 512, "bf16"),
    ("llama2-13b", "mlp.down_proj", "dW", 4096, "bf16"),
    ("llama2-13b", "self_attn.q_proj", "fwd", 1, "fp16"),
    ("llama2-70b", "self_attn.k_proj", "fwd", 8192, "bf16"),
    ("llama2-70b", "mlp.down_proj", "fwd", 64, "bf16"),
    ("llama2-70b", "mlp.up_proj", "dX", 2048, "bf16"),
    ("llama2-70b", "self_attn.o_proj", "dW", 4096, "bf16"),
    ("llama3-8b", "self_attn.q_proj", "fwd", 16384, "bf16"),
    ("llama3-8b", "self_attn.k_proj", "fwd", 1, "bf16"),
    ("llama3-8b", "self_attn.o_proj", "dX", 8192, "bf16"),
    ("llama3-8b", "mlp.gate_proj", "fwd", 2048, "bf16"),
    ("llama3-8b", "mlp.down_proj", "dW", 2048, "bf16"),
    ("llama3-8b", "mlp.down_proj", "fwd", 16, "bf16"),
    ("llama3-8b", "mlp.up_proj", "dW", 16384, "bf16"),
    ("llama3-8b", "lm_head", "fwd", 4096, "bf16"),
    ("llama3-8b", "lm_head", "dX", 2048, "bf16"),
    ("llama3-70b", "self_attn.q_proj", "dW", 8192, "bf16"),
    ("llama3-70b", "mlp.gate_proj", "fwd", 4, "bf16"),
    ("llama3-70b", "mlp.down_proj", "fwd", 1024, "bf16"),
    ("llama3-70b", "mlp.down_proj", "dX", 16384, "bf16"),
    ("llama3-70b", "lm_head", "fwd", 64, "bf16"),
    ("llama3.2-1b", "self_attn.q_proj", "fwd", 1, "bf16"),
    ("llama3.2-1b", "self_attn.k_proj", "dW", 16384, "bf16"),
    ("llama3.2-1b", "mlp.gate_proj", "fwd", 8192, "bf16"),
    ("llama3.2-1b", "mlp.down_proj", "dX", 4096, "fp16"),
    ("llama3.2-1b", "lm_head", "fwd", 1024, "bf16"),
    ("mistral-7b", "self_attn.k_proj", "dX", 4096, "bf16"),
    ("mistral-7b", "mlp.gate_proj", "fwd", 1, "fp16"),
    ("mistral-7b", "mlp.down_proj", "fwd", 3000, "fp16"),
    ("mistral-7b", "self_attn.o_proj", "fwd", 128, "bf16"),
    ("mixtral-8x7b", "experts.w1", "fwd", 1013, "bf16"),
    ("mixtral-8x7b", "experts.w2", "fwd", 3, "bf16"),
    ("mixtral-8x7b", "experts.w2", "dW", 1187, "bf16"),
    ("mixtral-8x7b", "experts.w3", "dX", 4139, "bf16"),
    ("mixtral-8x7b", "block_sparse_moe.gate", "fwd", 4096, "bf16"),
    ("qwen2-7b", "self_attn.q_proj", "fwd", 2048, "bf16"),
    ("qwen2-7b", "self_attn.k_proj", "fwd", 16, "bf16"),
    ("qwen2-7b", "mlp.gate_proj", "fwd", 4096, "bf16"),
    ("qwen2-7b", "mlp.down_proj", "dW", 8192, "bf16"),
    ("qwen2-7b", "mlp.up_proj", "dX", 1024, "bf16"),
    ("qwen2-7b", "lm_head", "fwd", 1, "bf16"),
    ("qwen2.5-0.5b", "self_attn.q_proj", "fwd", 8192, "bf16"),
    ("qwen2.5-0.5b", "self_attn.k_proj", "dW", 4096, "bf16"),
    ("qwen2.5-0.5b", "mlp.gate_proj", "fwd", 64, "fp32"),
    ("qwen2.5-0.5b", "mlp.down_proj", "fwd", 16384, "bf16"),
    ("qwen2.5-0.5b", "lm_head", "fwd", 2048, "bf16"),
    ("qwen2.5-14b", "self_attn.o_proj", "dX", 4096, "bf16"),
    ("qwen2.5-14b", "mlp.gate_proj", "fwd", 1, "bf16"),
    ("qwen2.5-14b", "mlp.down_proj", "fwd", 8192, "bf16"),
    ("qwen1.5-moe-a2.7b", "experts.gate_proj", "fwd", 273, "bf16"),
    ("qwen1.5-moe-a2.7b", "experts.down_proj", "dW", 311, "bf16"),
    ("qwen1.5-moe-a2.7b", "shared_expert.gate_proj", "fwd", 4096, "bf16"),
    ("qwen1.5-moe-a2.7b", "mlp.gate", "fwd", 4096, "fp32"),
    ("gemma-2b", "self_attn.q_proj", "fwd", 4096, "bf16"),
    ("gemma-2b", "self_attn.k_proj", "fwd", 1, "bf16"),
    ("gemma-2b", "mlp.gate_proj", "fwd", 2048, "bf16"),
    ("gemma-2b", "mlp.down_proj", "dW", 4096, "bf16"),
    ("gemma-2b", "lm_head", "fwd", 16, "bf16"),
    ("gemma-7b", "self_attn.o_proj", "fwd", 1, "bf16"),
    ("gemma-7b", "mlp.gate_proj", "fwd", 8192, "bf16"),
    ("gemma-7b", "mlp.up_proj", "dW", 2048, "bf16"),
    ("gemma-7b", "mlp.down_proj", "dX", 2048, "bf16"),
    ("gemma2-9b", "self_attn.q_proj", "dX", 8192, "bf16"),
    ("gemma2-9b", "mlp.gate_proj", "fwd", 16, "bf16"),
    ("gemma2-9b", "mlp.down_proj", "fwd", 4096, "bf16"),
    ("gemma2-9b", "lm_head", "fwd", 1024, "bf16"),
    ("phi-2", "self_attn.q_proj", "fwd", 2048, "fp16"),
    ("phi-2", "mlp.fc1", "fwd", 4096, "fp16"),
    ("phi-2", "mlp.fc2", "fwd", 1, "fp16"),
    ("phi-2", "mlp.fc2", "dW", 2048, "bf16"),
    ("phi-2", "self_attn.dense", "dX", 8192, "bf16"),
    ("phi-3-mini", "self_attn.qkv_proj", "fwd", 4096, "bf16"),
    ("phi-3-mini", "mlp.gate_up_proj", "fwd", 16, "bf16"),
    ("phi-3-mini", "mlp.down_proj", "dW", 4096, "bf16"),
    ("phi-3-mini", "self_attn.o_proj", "fwd", 2048, "fp16"),
    ("phi-3-mini", "lm_head", "fwd", 8192, "bf16"),
    ("deepseek-v3", "mlp.gate", "fwd", 4096, "fp32"),
    ("deepseek-v3", "experts.gate_proj", "fwd", 131, "bf16"),
    ("deepseek-v3", "experts.down_proj", "fwd", 2, "bf16"),
]


def llm_layer(cfg: dict[str, Any], layer: str) -> tuple[int, int, list[Any], bool]:
    """One layer of a decoder model: (in, out, forward epilogue, bias)."""
    h, ffn, q, kv = cfg["hidden"], cfg["ffn"], cfg["heads"] * cfg["hd"], cfg["kv"] * cfg["hd"]
    bias = cfg.get("bias")
    act = [cfg["act"]]
    logits: list[Any] = [["cast", "float32"]]  # logits.float()
    if "final_softcap" in cfg:  # tanh(logits / cap) * cap, then float
        cap = cfg["final_softcap"]
        logits = [["mul", 1 / cap], "tanh", ["mul", cap], ["cast", "float32"]]
    router: list[Any] = ["sigmoid"] if cfg.get("router") == "sigmoid" else []
    shared = cfg.get("shared_ffn", ffn)
    table = {
        "self_attn.q_proj": (h, q, [], bias in ("qkv", "all")),
        "self_attn.k_proj": (h, kv, [], bias in ("qkv", "all")),
        "self_attn.o_proj": (q, h, [], bias == "all"),
        "self_attn.dense": (q, h, [], bias == "all"),
        "self_attn.qkv_proj": (h, q + 2 * kv, [], False),
        "mlp.gate_proj": (h, ffn, act, False),
        "mlp.up_proj": (h, ffn, [], False),
        "mlp.down_proj": (ffn, h, [], False),
        "mlp.gate_up_proj": (h, 2 * ffn, [], False),
        "mlp.fc1": (h, ffn, act, True),
        "mlp.fc2": (ffn, h, [], True),
        "experts.w1": (h, ffn, act, False),
        "experts.w3": (h, ffn, [], False),
        "experts.w2": (ffn, h, [], False),
        "experts.gate_proj": (h, ffn, act, False),
        "experts.down_proj": (ffn, h, [], False),
        "shared_expert.gate_proj": (h, shared, act, False),
        "block_sparse_moe.gate": (h, cfg.get("experts", 0), [], False),
        "mlp.gate": (h, cfg.get("experts", 0), router, False),
        "lm_head": (h, cfg["vocab"], logits, False),
    }
    return table[layer]


# ------------------------------------------------------------------- encoders and GPT-2
# hidden, ffn, heads; tokens = batch x sequence. GPT-2 and Phi use the tanh GELU, BERT and ViT
# the erf one, T5 relu (v1.0) or a tanh-GELU gate (v1.1, Flan-T5).
ENCODERS: dict[str, dict[str, Any]] = {
    "gpt2": dict(hidden=768, ffn=3072, heads=12, act="gelu_tanh", conv1d=True),
    "gpt2-xl": dict(hidden=1600, ffn=6400, heads=25, act="gelu_tanh", conv1d=True),
    "bert-base": dict(hidden=768, ffn=3072, heads=12, act="gelu"),
    "bert-large": dict(hidden=1024, ffn=4096, heads=16, act="gelu"),
    "vit-b16": dict(hidden=768, ffn=3072, heads=12, act="gelu", seq=197),
    "vit-l16": dict(hidden=1024, ffn=4096, heads=16, act="gelu", seq=197),
    "vit-h14": dict(hidden=1280, ffn=5120, heads=16, act="gelu", seq=257),
    "t5-base": dict(hidden=768, ffn=3072, heads=12, act="relu", bias=False),
    "t5-large": dict(hidden=1024, ffn=4096, heads=16, act="relu", bias=False),
    "flan-t5-xl": dict(hidden=2048, ffn=5120, heads=32, act="gelu_tanh", bias=False),
}

# (model, layer, pass, batch, sequence, dtype); layers: attn.qkv (fused, GPT-2 c_attn), attn.q,
# attn.out, mlp.fc1 (up, with the activation), mlp.fc2 (down), pooler (BERT: tanh)
ENCODER_CASES = [
    ("gpt2", "attn.c_attn", "fwd", 8, 1024, "fp16"),
    ("gpt2", "mlp.c_fc", "fwd", 8, 1024, "fp16"),
    ("gpt2", "mlp.c_proj", "dW", 8, 1024, "fp16"),
    ("gpt2", "mlp.c_fc", "dX", 16, 1024, "fp32"),
    ("gpt2", "lm_head", "fwd", 1, 1, "fp32"),
    ("gpt2-xl", "attn.c_attn", "fwd", 4, 1024, "bf16"),
    ("gpt2-xl", "mlp.c_fc", "dW", 4, 1024, "bf16"),
    ("gpt2-xl", "mlp.c_proj", "fwd", 1, 1, "fp16"),
    ("bert-base", "attention.self.query", "fwd", 32, 128, "fp32"),
    ("bert-base", "intermediate.dense", "fwd", 32, 128, "fp16"),
    ("bert-base", "output.dense", "dW", 32, 128, "fp16"),
    ("bert-base", "pooler.dense", "fwd", 32, 1, "fp32"),
    ("bert-large", "intermediate.dense", "fwd", 16, 512, "fp16"),
    ("bert-large", "attention.output.dense", "dX", 16, 512, "fp16"),
    ("bert-large", "pooler.dense", "fwd", 64, 1, "bf16"),
    ("vit-b16", "mlp.fc1", "fwd", 64, 197, "bf16"),
    ("vit-b16", "attn.qkv", "fwd", 1, 197, "fp32"),
    ("vit-b16", "mlp.fc2", "dW", 64, 197, "bf16"),
    ("vit-l16", "attn.qkv", "fwd", 32, 197, "bf16"),
    ("vit-l16", "mlp.fc1", "dX", 32, 197, "bf16"),
    ("vit-l16", "mlp.fc2", "fwd", 8, 197, "fp16"),
    ("vit-h14", "mlp.fc1", "fwd", 16, 257, "bf16"),
    ("vit-h14", "attn.proj", "dW", 16, 257, "bf16"),
    ("t5-base", "DenseReluDense.wi", "fwd", 16, 512, "fp32"),
    ("t5-base", "SelfAttention.q", "dW", 16, 512, "bf16"),
    ("t5-large", "DenseReluDense.wo", "fwd", 8, 512, "bf16"),
    ("t5-large", "DenseReluDense.wi", "dX", 8, 512, "bf16"),
    ("flan-t5-xl", "DenseReluDense.wi_0", "fwd", 4, 512, "bf16"),
    ("flan-t5-xl", "DenseReluDense.wo", "fwd", 1, 1, "bf16"),
    ("flan-t5-xl", "SelfAttention.o", "dW", 8, 512, "bf16"),
]


def encoder_layer(cfg: dict[str, Any], layer: str) -> tuple[int, int, list[Any], bool]:
    """One layer of an encoder (or GPT-2): (in, out, forward epilogue, bias)."""
    h, ffn, bias = cfg["hidden"], cfg["ffn"], cfg.get("bias", True)
    act = [cfg["act"]]
    short = layer.rsplit(".", 1)[-1]
    if short in ("c_attn", "qkv"):
        return h, 3 * h, [], bias
    if short in ("c_fc", "fc1", "wi", "wi_0") or layer == "intermediate.dense":
        return h, ffn, act, bias
    if short in ("fc2", "wo") or layer in ("mlp.c_proj", "output.dense"):
        return ffn, h, [], bias
    if short == "lm_head":
        return h, 50257, [], False
    if layer == "pooler.dense":
        return h, h, ["tanh"], True
    return h, h, [], bias  # query, q, o, proj, attention.output.dense


# ------------------------------------------------------------------------------ attention
# Eager attention as bmm: scores = Q @ K.T (K.T a transposed view: layout_b col), out = P @ V;
# the backward: dV = P.T @ dO (layout_a col), dP = dO @ V.T, dQ = dS @ K, dK = dS.T @ Q.
# (model, step, batch x heads, query length, key length, head dim, dtype, epilogue)
ATTENTION = [
    ("gpt2", "scores", 8 * 12, 1024, 1024, 64, "fp16", [["mul", 0.125]]),
    ("gpt2", "dV", 8 * 12, 1024, 1024, 64, "fp16", []),
    ("gpt2-xl", "scores", 4 * 25, 1024, 1024, 64, "bf16", [["mul", 0.125]]),
    ("gpt2-xl", "out", 4 * 25, 1024, 1024, 64, "bf16", []),
    ("bert-base", "scores", 32 * 12, 128, 128, 64, "fp16", [["mul", 0.125]]),
    ("bert-base", "dQ", 32 * 12, 128, 128, 64, "fp16", []),
    ("vit-l16", "scores", 8 * 16, 197, 197, 64, "bf16", [["mul", 0.125]]),
    ("vit-l16", "out", 8 * 16, 197, 197, 64, "bf16", []),
    ("t5-base", "scores+position_bias", 16 * 12, 512, 512, 64, "bf16", []),
    ("bloom-560m", "scores+alibi", 4 * 16, 1024, 1024, 64, "fp16", []),
    ("llama3-8b", "decode scores", 4 * 32, 1, 4097, 128, "bf16", [["mul", 128**-0.5]]),
    ("llama3-8b", "decode out", 4 * 32, 1, 4097, 128, "bf16", []),
    ("llama2-7b", "dK", 2 * 32, 4096, 4096, 128, "bf16", []),
    ("gemma2-9b", "scores", 2 * 16, 4096, 4096, 256, "bf16", [["mul", 1 / 16], ["mul", 1 / 50], "tanh", ["mul", 50.0]]),
    ("qwen2.5-0.5b", "out", 16 * 14, 512, 512, 64, "bf16", []),
    ("vit-h14", "dP", 16 * 16, 257, 257, 80, "fp32", []),
]


def attention_case(step: str, b: int, lq: int, lk: int, hd: int) -> dict[str, Any]:
    """The bmm (or baddbmm: a bias added to the scores) of one step of eager attention."""
    op = "baddbmm" if "+" in step else "bmm"
    if step.startswith(("scores", "decode scores", "dP")):  # Q @ K.T, dO @ V.T
        return dict(op=op, B=b, M=lq, N=lk, K=hd, layout_a="row", layout_b="col")
    if step in ("dV", "dK"):  # P.T @ dO, dS.T @ Q
        return dict(op=op, B=b, M=lk, N=hd, K=lq, layout_a="col", layout_b="row")
    return dict(op=op, B=b, M=lq, N=hd, K=lk, layout_a="row", layout_b="row")  # P @ V, dS @ K


# --------------------------------------------------------------------------- convolutions
# (model, layer, batch, in, out, size, kernel, stride, padding, groups, bias, layout, dtype)
CONVS = [
    ("resnet50", "conv1", 32, 3, 64, 224, 7, 2, 3, 1, False, "nchw", "fp32"),
    ("resnet50", "layer1.0.conv1", 32, 64, 64, 56, 1, 1, 0, 1, False, "nhwc", "fp16"),
    ("resnet50", "layer1.0.conv2", 32, 64, 64, 56, 3, 1, 1, 1, False, "nhwc", "fp16"),
    ("resnet50", "layer1.0.conv3", 32, 64, 256, 56, 1, 1, 0, 1, False, "nhwc", "bf16"),
    ("resnet50", "layer2.0.conv2", 64, 128, 128, 56, 3, 2, 1, 1, False, "nhwc", "bf16"),
    ("resnet50", "layer3.1.conv2", 64, 256, 256, 14, 3, 1, 1, 1, False, "nchw", "fp32"),
    ("resnet50", "layer4.0.downsample", 64, 1024, 2048, 14, 1, 2, 0, 1, False, "nhwc", "bf16"),
    ("resnet50", "layer4.2.conv2", 1, 512, 512, 7, 3, 1, 1, 1, False, "nchw", "fp16"),
    ("resnet50", "layer4.2.conv3", 128, 512, 2048, 7, 1, 1, 0, 1, False, "nhwc", "fp16"),
    ("convnext-t", "stem", 64, 3, 96, 224, 4, 4, 0, 1, True, "nhwc", "bf16"),
    ("convnext-t", "stages.0.dwconv", 64, 96, 96, 56, 7, 1, 3, 96, True, "nhwc", "bf16"),
    ("convnext-t", "stages.2.dwconv", 64, 384, 384, 14, 7, 1, 3, 384, True, "nchw", "fp32"),
    ("convnext-t", "downsample.1", 64, 96, 192, 56, 2, 2, 0, 1, True, "nhwc", "bf16"),
    ("convnext-t", "stages.3.dwconv", 8, 768, 768, 7, 7, 1, 3, 768, True, "nhwc", "fp16"),
    ("mobilenetv2", "features.0", 96, 3, 32, 224, 3, 2, 1, 1, False, "nchw", "fp16"),
    ("mobilenetv2", "features.2.dw", 96, 96, 96, 112, 3, 2, 1, 96, False, "nhwc", "fp16"),
    ("mobilenetv2", "features.3.expand", 96, 24, 144, 56, 1, 1, 0, 1, False, "nhwc", "fp16"),
    ("mobilenetv2", "features.3.project", 96, 144, 24, 56, 1, 1, 0, 1, False, "nhwc", "bf16"),
    ("mobilenetv2", "features.14.dw", 1, 576, 576, 14, 3, 2, 1, 576, False, "nchw", "fp32"),
    ("mobilenetv2", "features.18", 96, 320, 1280, 7, 1, 1, 0, 1, False, "nhwc", "bf16"),
    ("vit-b16", "patch_embed.proj", 64, 3, 768, 224, 16, 16, 0, 1, True, "nchw", "bf16"),
    ("sd1.5-unet", "down_blocks.1.resnets.0.conv1", 2, 320, 640, 32, 3, 1, 1, 1, True, "nchw", "fp16"),
]

# --------------------------------------------------------------- other real GEMMs, and known losers
# ConvNeXt's pointwise convs are linear layers over the pixels; Stable Diffusion's time embedding
# is a linear layer then SiLU; an LSTM cell's gates are x @ W_ih.T + h @ W_hh.T (mm + mm).
EXTRA = [
    dict(name="convnext-t.stages.0.pwconv1.fwd.t12544.bf16", op="addmm", M=4 * 3136, N=384, K=96,
         layout_b="col", dtype="bfloat16", epilogue=["gelu"],
         source="convnext-t stages.0 pwconv1 (linear over 4 x 56 x 56 pixels), forward"),
    dict(name="convnext-t.stages.2.pwconv2.dW.t6272.bf16", op="mm", M=384, N=1536, K=32 * 196,
         layout_a="col", dtype="bfloat16",
         source="convnext-t stages.2 pwconv2 (linear over 32 x 14 x 14 pixels), backward dW"),
    dict(name="sd1.5-unet.time_embedding.linear_1.fwd.t16.fp16", op="addmm", M=16, N=1280, K=320,
         layout_b="col", dtype="float16", epilogue=["silu"],
         source="sd1.5-unet time_embedding.linear_1 + SiLU, batch 16, forward"),
    dict(name="sd1.5-unet.time_embedding.linear_2.fwd.t16.fp16", op="addmm", M=16, N=1280, K=1280,
         layout_b="col", dtype="float16", epilogue=["silu"],
         source="sd1.5-unet time_embedding.linear_2 then the resnets' SiLU, batch 16, forward"),
    dict(name="lstm-1024.cell_gates.fwd.t64.fp32", op="mm_plus_mm", M=64, N=4096, K=1024,
         layout_b="col", dtype="float32",
         source="nn.LSTM(1024, 1024) cell gates x @ W_ih.T + h @ W_hh.T, batch 64, forward"),
    dict(name="lstm-1024.cell_gates.fwd.t512.bf16", op="mm_plus_mm", M=512, N=4096, K=1024,
         layout_b="col", dtype="bfloat16", epilogue=["sigmoid"],
         source="nn.LSTM(1024, 1024) cell gates + sigmoid (the cell's gate activation), batch 512, forward"),
    dict(name="loser.odd_fp16_3001x2999x501", op="mm", M=3001, N=2999, K=501, dtype="float16",
         source="known loser: float16 with every dimension odd (Triton cannot prove its loads aligned)"),
    dict(name="loser.odd_fp16_2047x4093x509.tanh", op="addmm", M=2047, N=4093, K=509, dtype="float16",
         layout_b="col", epilogue=["tanh"], source="known loser: odd float16 addmm + tanh (the KeyError: 'tanh' case)"),
    dict(name="loser.bmm_100heads_k64", op="bmm", B=100, M=577, N=577, K=64, dtype="bfloat16", layout_b="col",
         source="known loser: ~100 heads of attention scores, K = 64 (ViT-H/14 at 336 px: 577 tokens)"),
    dict(name="loser.fp32_tf32_odd_1000", op="mm", M=1000, N=1000, K=1000, dtype="float32",
         source="known loser: float32 (TF32) 1000 x 1000 x 1000"),
]  # fmt: skip


def split_of(name: str) -> str:
    """The committed split rule: the first byte of sha256(SPLIT_SEED + name) below 128 is test."""
    return "test" if hashlib.sha256((SPLIT_SEED + name).encode()).digest()[0] < 128 else "train"


def describe_steps(steps: list[Any]) -> str:
    """An epilogue in words: ``mul 0.125, tanh, cast float32``."""
    return ", ".join(
        s if isinstance(s, str) else f"{s[0]} {s[1]:.4g}" if s[0] != "cast" else f"cast {s[1]}" for s in steps
    )


def nbytes(case: dict[str, Any]) -> int:
    """Bytes of the problem's inputs and output."""
    size = SIZES[case["dtype"]]
    casts = [s[1] for s in case.get("epilogue", []) if isinstance(s, list) and s[0] == "cast"]
    out_size = SIZES[casts[-1]] if casts else size
    if case["op"] == "conv":
        c = case
        k, s, p, g = c["kernel_size"], c["stride"], c["padding"], c["groups"]
        out = (c["height"] + 2 * p - k) // s + 1
        x = c["batch"] * c["in_channels"] * c["height"] ** 2
        w = c["out_channels"] * c["in_channels"] // g * k * k
        return (x + w) * size + c["batch"] * c["out_channels"] * out * out * out_size
    b, m, n, k = case.get("B", 1), case["M"], case["N"], case["K"]
    inputs = b * (m * k + k * n) * (2 if case["op"] == "mm_plus_mm" else 1)
    inputs += {"addmm": n, "baddbmm": b * m * n}.get(case["op"], 0)
    return inputs * size + b * m * n * out_size


def linear_case(
    model: str, layer: str, kind: str, tokens: int, dtype: str, dims: tuple[int, int, list[Any], bool], conv1d: bool
) -> dict[str, Any]:
    """One GEMM of a linear layer: the forward (with bias and epilogue), dX or dW."""
    fan_in, fan_out, epilogue, bias = dims
    w_fwd, w_dx = ("row", "col") if conv1d else ("col", "row")  # W is [in, out] in a Conv1D
    if kind == "fwd":
        gemm = dict(op="addmm" if bias else "mm", M=tokens, N=fan_out, K=fan_in, layout_a="row", layout_b=w_fwd)
    elif kind == "dX":
        gemm = dict(op="mm", M=tokens, N=fan_in, K=fan_out, layout_a="row", layout_b=w_dx)
    else:  # dW = dY.T @ X, or X.T @ dY for a Conv1D's [in, out] weight
        m, n = (fan_in, fan_out) if conv1d else (fan_out, fan_in)
        gemm = dict(op="mm", M=m, N=n, K=tokens, layout_a="col", layout_b="row")
    steps = epilogue if kind == "fwd" else []
    what = {"fwd": "forward", "dX": "backward dX", "dW": "backward dW"}[kind]
    count = f"{tokens} token{'s' if tokens > 1 else ''}" + (
        " routed to one expert" if ".experts." in f".{layer}" else ""
    )
    extra = f" + {describe_steps(steps)}" if steps else ""
    return {
        "name": f"{model}.{layer}.{kind}.t{tokens}.{dtype}",
        **gemm,
        "dtype": SHORT[dtype],
        **({"epilogue": steps} if steps else {}),
        "source": f"{model} {layer}{' (bias)' if bias and kind == 'fwd' else ''}{extra}, {count}, {what}",
    }


def random_cases(count: int) -> list[dict[str, Any]]:
    """Seeded odd sizes: every dimension odd, drawn log-uniform from 1 to 8192, under the byte cap."""
    rng = random.Random(RANDOM_SEED)
    out: list[dict[str, Any]] = []
    while len(out) < count:

        def dim(hi: int = 8192) -> int:
            return int(math.exp(rng.uniform(0, math.log(hi)))) | 1

        op = rng.choice(["mm", "mm", "mm", "addmm", "bmm"])
        dtype = rng.choice(["bf16", "bf16", "fp16", "fp32"])
        case: dict[str, Any] = dict(op=op, M=dim(), N=dim(), K=dim(), dtype=SHORT[dtype])
        if op == "bmm":
            case["B"] = dim(128)
        case["layout_a"], case["layout_b"] = rng.choice(["row", "col"]), rng.choice(["row", "col"])
        if rng.random() < 0.25:
            case["epilogue"] = [rng.choice(["relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh"])]
        if nbytes(case) > MAX_BYTES or (op == "bmm" and case["B"] * case["M"] * case["N"] * case["K"] > 2**38):
            continue
        b = f"{case['B']}x" if op == "bmm" else ""
        i = len(out)
        case["name"] = f"random.{i:02d}.{op}.{b}{case['M']}x{case['N']}x{case['K']}.{dtype}"
        case["source"] = f"random odd size (seed {RANDOM_SEED}, draw {i})"
        out.append(case)
    return out


def build() -> list[dict[str, Any]]:
    """Every case, deduplicated, each with its split."""
    cases: list[dict[str, Any]] = []
    for model, layer, kind, tokens, dtype in LLM_CASES:
        cases.append(linear_case(model, layer, kind, tokens, dtype, llm_layer(LLMS[model], layer), False))
    for model, layer, kind, batch, seq, dtype in ENCODER_CASES:
        cfg = ENCODERS[model]
        conv1d = cfg.get("conv1d", False) and layer != "lm_head"  # GPT-2's lm_head is the embedding, [vocab, hidden]
        case = linear_case(model, layer, kind, batch * seq, dtype, encoder_layer(cfg, layer), conv1d)
        case["source"] = case["source"].replace(" token", f" ({batch} x {seq}) token")
        cases.append(case)
    for model, step, b, lq, lk, hd, dtype, epilogue in ATTENTION:
        gemm = attention_case(step, b, lq, lk, hd)
        scale = f" + {describe_steps(epilogue)}" if epilogue else ""
        cases.append({
            "name": f"{model}.attn.{step.replace(' ', '_').replace('+', '_plus_')}.b{b}.q{lq}.k{lk}.{dtype}",
            **gemm,
            "dtype": SHORT[dtype],
            **({"epilogue": epilogue} if epilogue else {}),
            "source": f"{model} eager attention {step}{scale}: {b} batch x heads, {lq} x {lk} queries x keys, "
                      f"head dim {hd}",
        })  # fmt: skip
    for model, layer, batch, cin, cout, size, k, s, p, g, bias, layout, dtype in CONVS:
        cases.append({
            "name": f"{model}.{layer}.b{batch}.{dtype}",
            "op": "conv", "batch": batch, "in_channels": cin, "out_channels": cout, "height": size, "width": size,
            "kernel_size": k, "stride": s, "padding": p, "dilation": 1, "groups": g, "bias": bias, "layout": layout,
            "dtype": SHORT[dtype],
            "source": f"{model} {layer}: {cin} -> {cout} channels, {k}x{k} stride {s}"
                      f"{f', groups {g}' if g > 1 else ''} at {size}x{size}, batch {batch}, {layout}, forward",
        })  # fmt: skip
    cases += [dict(c) for c in EXTRA]
    cases += random_cases(RANDOM_CASES)
    out, seen = [], set()
    for case in cases:
        if case["op"] != "conv":
            case.setdefault("layout_a", "row")
            case.setdefault("layout_b", "row")
        key = json.dumps({k: v for k, v in case.items() if k not in ("name", "source")}, sort_keys=True)
        if key in seen:
            continue
        if nbytes(case) > MAX_BYTES:
            raise ValueError(f"{case['name']} takes {nbytes(case) / 2**30:.1f} GiB, over the cap")
        seen.add(key)
        case["split"] = split_of(case["name"])
        out.append(case)
    names = [c["name"] for c in out]
    if len(set(names)) != len(names):
        raise ValueError("case names are not unique")
    return out


def main() -> None:
    cases = build()
    body = {
        "about": "The shape corpus of tunesmith (issue 29): GEMM-family problems of real models at 1 to 16k "
        "tokens, forward and backward layouts, bf16/fp16/fp32, epilogue chains, and seeded random odd sizes. "
        "Written by benchmarks/corpus/build.py; do not edit by hand.",
        "split_rule": f"test when sha256('{SPLIT_SEED}' + name)[0] < 128, else train",
        "cases": cases,
    }
    OUT.write_text(json.dumps(body, indent=1) + "\n")
    splits = {s: sum(c["split"] == s for c in cases) for s in ("train", "test")}
    print(f"{OUT}: {len(cases)} cases, {splits['train']} train, {splits['test']} test")


if __name__ == "__main__":
    main()
