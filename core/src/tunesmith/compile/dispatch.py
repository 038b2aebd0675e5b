"""The ``tunesmith::gemm`` custom op that lowered graphs call, and its run-time dispatch.

A call carries a *recipe* (JSON: the op, its scalars, the epilogue steps, the settings' id and,
where the shapes were known when compiling, the Problem's key) and the tensors (the op's, then
the epilogue operands). A recipe with a key is bound to its kernel when the graph is compiled:
each call is one dict look-up by the recipe. Without a key (``dynamic=True``), the first call
with a new layout (shapes, strides, dtypes, device) builds the Problem and selects its kernel,
through the caches or by tuning, and later calls with that layout find it by the layout. While a
CUDA graph is captured nothing is selected: a call whose kernel is not known yet runs torch's own
ops. The fake implementation is the eager semantics on fake tensors, so the graph stays
traceable (and Inductor treats the op as an extern call).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch

from tunesmith import ops
from tunesmith.capture import capturing
from tunesmith.config import Options
from tunesmith.problem import build_problem, is_empty
from tunesmith.selection import select
from tunesmith.settings import current_options
from tunesmith_hookspecs import EpilogueOp, Problem

Kernel = Callable[..., torch.Tensor]

log = logging.getLogger(__name__)


@attrs.frozen
class Recipe:
    """What one lowered call computes, apart from its tensors' layouts. ``order`` is the output's
    dims from outermost to innermost in memory (None: contiguous), as the graph expects it;
    ``key`` is the Problem's key where the shapes were known when compiling (the call's kernel is
    then bound to the recipe)."""

    op: str
    scalars: dict[str, Any]
    epilogue: tuple[EpilogueOp, ...]
    num_op_inputs: int
    options_id: str
    order: tuple[int, ...] | None = None
    key: str | None = None

    def to_json(self) -> str:
        steps = [attrs.asdict(s, filter=lambda _, v: v is not None) for s in self.epilogue]
        body = {"op": self.op, "scalars": self.scalars, "epilogue": steps, "n": self.num_op_inputs}
        body |= {"options": self.options_id, "order": list(self.order) if self.order else None}
        if self.key is not None:
            body["key"] = self.key
        return json.dumps(body, sort_keys=True, separators=(",", ":"))

    @staticmethod
    @functools.lru_cache(maxsize=4096)
    def from_json(text: str) -> Recipe:
        data = json.loads(text)
        steps = tuple(EpilogueOp(**s) for s in data["epilogue"])
        order = tuple(data["order"]) if data.get("order") else None
        return Recipe(data["op"], data["scalars"], steps, data["n"], data["options"], order, data.get("key"))

    def problem(self, tensors: Sequence[torch.Tensor]) -> tuple[Problem, list[torch.Tensor]]:
        """The Problem of these tensors, as ``tunesmith.tune`` would build it."""
        op_tensors, operands = tensors[: self.num_op_inputs], tensors[self.num_op_inputs :]
        items: list[Any] = []
        for step in self.epilogue:
            if step.input is not None:
                items.append((step.name, operands[step.input - self.num_op_inputs]))
            elif step.scalar is not None:
                items.append((step.name, step.scalar))
            elif step.dtype is not None:
                items.append((step.name, getattr(torch, step.dtype)))
            else:
                items.append(step.name)
        return build_problem(self.op, op_tensors, dict(self.scalars), items)


# --- settings by id: a recipe names the settings of the compile that made it ---

_options: dict[str, Options] = {}


def options_id(options: Options) -> str:
    """A short id of the settings that can change a result (the same in every process: a graph
    that Inductor serves from its cache carries it), remembered with the settings of the latest
    compile that had it, storage settings included, for the run-time dispatch of this process."""
    from tunesmith.compile.graphcache import result_settings

    settings = {k: v for k, v in result_settings(options).items() if k != "cache_secret"}
    ident = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]
    _options[ident] = options
    return ident


def _settings(ident: str) -> Options:
    return _options.get(ident) or current_options()  # a graph cached by another process


# --- the kernels: bound to a recipe with a key, else known per (recipe, layout) ---

_bound: dict[str, Kernel] = {}
_kernels: dict[tuple[Any, ...], Kernel] = {}
_lock = threading.Lock()
_capture_warned: set[str] = set()


def layout_key(recipe: str, tensors: Sequence[torch.Tensor]) -> tuple[Any, ...]:
    """What the kernel of a call depends on: the recipe, each tensor's layout, and the float32
    precision (matmul and cuDNN) that the selection's cache key also holds."""
    layouts = ((t.shape, t.stride(), t.dtype, t.device, t.storage_offset()) for t in tensors)
    return (recipe, torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32, *layouts)


def _in_order(recipe: str, kernel: Kernel) -> Kernel:
    """``kernel``, wrapped once (not per call) so that a result laid out otherwise than the recipe's
    memory order (the Problem's layout: row-major, or torch's for a conv) is copied into it."""
    order = Recipe.from_json(recipe).order
    return kernel if order is None else functools.partial(_laid_out, kernel, order)


def remember(recipe: str, tensors: Sequence[torch.Tensor], kernel: Kernel, problem: Problem | None = None) -> Kernel:
    """Keep the kernel of this layout, bound to the recipe itself where the recipe names this
    Problem (``problem``: the Problem of ``tensors``, when the caller has it); returns what was kept."""
    kernel = _in_order(recipe, kernel)
    wanted = Recipe.from_json(recipe).key
    with _lock:
        _kernels[layout_key(recipe, tensors)] = kernel
        if wanted is not None and problem is not None and problem.key() == wanted:
            _bound[recipe] = kernel
    return kernel


def clear() -> None:
    with _lock:
        _bound.clear()
        _kernels.clear()
        _capture_warned.clear()


def select_kernel(recipe: str, tensors: Sequence[torch.Tensor]) -> Kernel:
    """The kernel for tensors of this layout: selected (cached or tuned) at first sight; during a
    CUDA graph's capture, torch's own ops, not remembered, so that the next call selects."""
    parsed = Recipe.from_json(recipe)
    problem, inputs = parsed.problem(tensors)
    if is_empty(problem):
        return remember(recipe, tensors, functools.partial(_eager, problem))
    if capturing():
        if problem.key() not in _capture_warned:
            _capture_warned.add(problem.key())
            log.warning(
                "tunesmith: %s first ran while a CUDA graph was captured, so torch's own kernel was "
                "captured for it; a warm-up run before capture selects the tuned one",
                parsed.op,
            )
        return _in_order(recipe, functools.partial(_eager, problem))
    with torch.no_grad():
        kernel = select(problem, inputs, _settings(parsed.options_id)).kernel
    return remember(recipe, tensors, kernel, problem)


def _eager(problem: Problem, *tensors: torch.Tensor) -> torch.Tensor:
    return ops.run(problem, tensors)


def run(recipe: str, tensors: list[torch.Tensor]) -> torch.Tensor:
    """One lowered GEMM-family op with its epilogue (see the module docstring)."""
    kernel = _bound.get(recipe) or _kernels.get(layout_key(recipe, tensors)) or select_kernel(recipe, tensors)
    return kernel(*tensors)


def _laid_out(kernel: Kernel, order: tuple[int, ...], *tensors: torch.Tensor) -> torch.Tensor:
    """``kernel``'s result in the memory order the graph expects (channels-last, say) where it is not."""
    out = kernel(*tensors)
    wanted = torch.empty_permuted(out.shape, order, dtype=out.dtype, device=out.device)
    return out if out.stride() == wanted.stride() else wanted.copy_(out)


def _fake(recipe: str, tensors: list[torch.Tensor]) -> torch.Tensor:
    parsed = Recipe.from_json(recipe)
    out = ops.compute(parsed.op, parsed.scalars, tensors[: parsed.num_op_inputs])
    out = ops.apply_steps(parsed.epilogue, out, tensors)
    if parsed.order is None:
        return out.contiguous()
    return torch.empty_permuted(out.shape, parsed.order, dtype=out.dtype, device=out.device)


# A plain library op rather than torch.library.custom_op: its Python kernel is reached in about
# 5.5 us more than a direct call, against about 25 us through custom_op's wrappers
# (benchmarks/results/dispatch_overhead_cpu.json), and a step calls it once per GEMM.
_library = torch.library.Library("tunesmith", "DEF")
_library.define("gemm(str recipe, Tensor[] tensors) -> Tensor")
_library.impl("gemm", run, "CompositeExplicitAutograd")
torch.library.register_fake("tunesmith::gemm", _fake, lib=_library)
gemm = torch.ops.tunesmith.gemm.default
