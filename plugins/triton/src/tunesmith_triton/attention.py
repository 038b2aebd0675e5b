"""Attention choices: the plugin's flash-attention template (``flash.py``), one choice per tile config.

The template runs what torch's fused backends refuse as one kernel too: a boolean mask or an
additive bias of any broadcast (padding, relative position bias, ALiBi) read in the loop,
grouped-query heads, causal masking, and the backward of each (not the bias's own gradient). It
skips the key blocks a boolean mask masks whole, and decodes (few queries, many keys) split-KV.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import torch

from tunesmith.plugin import scratch_like, torch_dtype
from tunesmith_hookspecs import ChoiceSpec, Problem, TensorMeta
from tunesmith_triton import flash
from tunesmith_triton.served import ATTENTION_OP as OP

TEMPLATE = "flash_attention"
#: the widest head the template's tiles are planned for
MAX_HEAD_DIM = 256
#: (spec, problem) pairs compiled in this process: a repeated precompile is free
_compiled: set[tuple[ChoiceSpec, Problem]] = set()


def serves(problem: Problem) -> bool:
    """An attention Problem the template runs: heads up to ``MAX_HEAD_DIM`` wide."""
    q, _, v = problem.inputs[:3]
    return problem.op == OP and q.shape[3] <= MAX_HEAD_DIM and v.shape[3] <= MAX_HEAD_DIM


@attrs.frozen
class FlashChoice:
    """The flash-attention template with one tile config."""

    spec: ChoiceSpec
    problem: Problem
    config: flash.FlashConfig = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "config", flash.FlashConfig.from_params(dict(self.spec.params)))

    def precompile(self) -> None:
        """Compile the forward (and for training the backward) on scratch tensors on the GPU."""
        if self.problem.device != "cuda" or not torch.cuda.is_available():
            return
        if (self.spec, self.problem) in _compiled:
            return
        device = torch.device("cuda", torch.cuda.current_device())
        tensors = [scratch_like(m, device) for m in self.problem.inputs]
        for t in tensors:
            if t.is_floating_point():
                t.normal_()
        q, k, v = tensors[:3]
        bias = tensors[3] if len(tensors) > 3 else None
        causal, scale = bool(self.problem.scalar("is_causal")), float(self.problem.scalar("scale"))
        with torch.no_grad():
            out, lse = flash.forward(q, k, v, bias, causal, scale, self.config)
            if self.problem.scalar("grad"):
                flash.backward(torch.randn_like(out), q, k, v, bias, out, lse, causal, scale, self.config)
        torch.cuda.synchronize(device)
        _compiled.add((self.spec, self.problem))

    def kernel(self) -> Callable[..., torch.Tensor]:
        causal, scale, config = bool(self.problem.scalar("is_causal")), float(self.problem.scalar("scale")), self.config

        def attention(
            q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None
        ) -> torch.Tensor:
            if mask is not None and mask.requires_grad and not torch.is_grad_enabled():
                mask = mask.detach()  # no gradient is taken: a learned bias at inference
            return flash.attention(q, k, v, mask, causal, scale, config)

        return attention


def _tma_fits(problem: Problem) -> bool:
    """Whether the forward reads this Problem's q, k and v through TMA on the current GPU (as
    ``flash._tma_reads`` decides at the call, from the strides the kernel sees and aligned starts)."""
    if not torch.cuda.is_available() or not flash.tma_device(torch.device("cuda", torch.cuda.current_device())):
        return False
    for meta in problem.inputs[:3]:
        size = torch_dtype(meta.dtype).itemsize
        unit_last = meta.stride[-1] == 1 or meta.shape[-1] <= 1  # else the launcher reads a contiguous copy
        stride = meta.stride if unit_last else TensorMeta.contiguous(meta.shape, meta.dtype).stride
        if not flash.tma_layout(meta.shape, stride, meta.storage_offset * size, size):
            return False
    return True


def choices(name: str, problem: Problem, device_type: str) -> list[FlashChoice]:
    q, k, v = problem.inputs[:3]
    dtype = torch_dtype(q.dtype)
    head, train = max(q.shape[3], v.shape[3]), bool(problem.scalar("grad"))
    rows = q.shape[1] // k.shape[1] * q.shape[2]  # the queries of a kv head's group
    tma = device_type == "cuda" and _tma_fits(problem)
    configs = flash.configs(head, dtype, train, device_type, tma=tma, rows=rows, keys=k.shape[2])
    return [FlashChoice(ChoiceSpec(name, TEMPLATE, c.params()), problem) for c in configs]


def rebuild(spec: ChoiceSpec, problem: Problem) -> FlashChoice | None:
    if spec.template != TEMPLATE or not serves(problem):
        return None
    try:
        return FlashChoice(spec, problem)
    except (TypeError, ValueError):  # params of another version of the plugin
        return None
