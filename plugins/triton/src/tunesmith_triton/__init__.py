"""tunesmith-triton: Triton GEMM templates (mm, addmm, bmm, baddbmm, mm + mm) and an implicit-GEMM
2-D convolution template, with the Problem's epilogue compiled into the kernel, and a
flash-attention template (forward and backward, masks and biases fused), over device-aware sets
of tile configs.

On a GPU the kernels run compiled; with ``TRITON_INTERPRET=1`` they run in Triton's interpreter
on CPU tensors (tests), where bfloat16 is not offered: the interpreter has no bfloat16 ``tl.dot``.
Loading the plugin imports no Triton (a third of a second of every process that loads plugins,
a benchmark worker's too): the hooks import the templates for a Problem on the device they run on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import inspect
import os
from typing import Any

if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0") and importlib.util.find_spec("numpy") is None:
    # triton itself fails to import then, with no word of why
    raise ImportError("TRITON_INTERPRET=1 runs Triton's interpreter, which needs numpy: "
                      "pip install 'tunesmith-triton[interpret]'")  # fmt: skip

import torch

from tunesmith_hookspecs import Choice, ChoiceSpec, DeviceInfo, PluginStatus, Problem, hookimpl
from tunesmith_triton.served import ATTENTION_OP, CONV_TEMPLATE, NAME, SERVED, TEMPLATES

__all__ = [
    "ConvChoice",
    "TritonChoice",
    "tunesmith_choices",
    "tunesmith_estimate_runtime",
    "tunesmith_plugin_status",
    "tunesmith_rebuild_choice",
]


def __getattr__(name: str) -> Any:
    """The choice types, imported (with Triton) when first asked for."""
    if name == "TritonChoice":
        from tunesmith_triton.choice import TritonChoice

        return TritonChoice
    if name == "ConvChoice":
        from tunesmith_triton.conv import ConvChoice

        return ConvChoice
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _drop_unasserted_overflow_checks() -> None:
    """Triton's interpreter computes an int32 overflow check of every integer add, sub and mul and,
    unless debug is on, never asserts it: half a GEMM template's time there. A GPU compile drops
    the same dead check, so turning it off (debug off only) changes nothing but the time."""
    with contextlib.suppress(ImportError, AttributeError, TypeError):  # another Triton: left as it is
        from triton.runtime import interpreter

        builder = interpreter.interpreter_builder
        if not builder.options.debug:
            builder.options = dataclasses.replace(builder.options, sanitize_overflow=False)


def _patch_the_language_once_per_launch() -> None:
    """Triton's interpreter patches ``triton.language`` (an ``inspect.getmembers`` over it) again at
    every call of a ``@triton.jit`` helper, once per program: 40% of a GEMM template's time there.
    While a launch runs, the language modules that a helper sees are patched already, so its
    call skips that (the launch restores them, as before)."""
    with contextlib.suppress(ImportError, AttributeError):  # another Triton: left as it is
        import triton.language as tl
        from triton.language import core
        from triton.runtime import interpreter

        patch, empty = interpreter._patch_lang, interpreter._LangPatchScope
        langs_of: dict[Any, list[Any]] = {}  # a function's language modules, as _patch_lang finds them

        def patch_unless_patched(fn: Any) -> Any:
            if fn not in langs_of:
                langs_of[fn] = [v for v in fn.__globals__.values() if inspect.ismodule(v) and v in (tl, core)]
            langs = langs_of[fn]
            if langs and not any(core.is_builtin(lang.load) for lang in langs):
                return empty()
            return patch(fn)

        interpreter._patch_lang = patch_unless_patched


if interpreting():
    _drop_unasserted_overflow_checks()
    _patch_the_language_once_per_launch()


def _device() -> str | None:
    """Where the templates run here: "cuda", "cpu" (the interpreter), or None."""
    if interpreting():
        return "cpu"
    return "cuda" if torch.cuda.is_available() else None


def _dtypes() -> tuple[str, ...]:
    return ("float32", "float16") if interpreting() else ("float32", "float16", "bfloat16")


@hookimpl
def tunesmith_plugin_status() -> PluginStatus:
    device = _device()
    if device is None:
        return PluginStatus(
            False,
            "needs a CUDA GPU (or TRITON_INTERPRET=1 to run the templates in Triton's interpreter, "
            "which needs numpy: pip install 'tunesmith-triton[interpret]')",
        )
    reason = "interpreter mode: no bfloat16 (Triton's interpreter has no bfloat16 tl.dot)" if interpreting() else ""
    return PluginStatus(True, reason, ops=SERVED, dtypes=_dtypes(), devices=(device,))


def _offered(problem: Problem) -> bool:
    """Whether a template runs ``problem``: its device and dtypes first, which need no Triton."""
    if problem.op not in SERVED or problem.device != _device():
        return False
    if problem.op == ATTENTION_OP:
        from tunesmith_triton import attention

        return problem.inputs[0].dtype in _dtypes() and attention.serves(problem)
    from tunesmith_triton.choice import epilogue_plan

    op_inputs = problem.inputs[: problem.num_op_inputs]
    return (
        op_inputs[0].dtype in _dtypes()
        and all(m.dtype in _dtypes() for m in problem.inputs)
        and epilogue_plan(problem) is not None
    )


def _multiprocessors() -> int:
    """Programs of a persistent kernel: the GPU's SMs (2 in the interpreter, to test the loop)."""
    from tunesmith_triton.configs import multiprocessors

    return 2 if interpreting() else multiprocessors(torch.cuda.current_device())


@hookimpl
def tunesmith_choices(problem: Problem, options: Any) -> list[Choice]:
    if not _offered(problem):
        return []
    if problem.op == "conv":
        from tunesmith_triton.conv import conv_choices

        return conv_choices(problem, interpreting())
    if problem.op == ATTENTION_OP:
        from tunesmith_triton import attention

        return list(attention.choices(NAME, problem, problem.device))
    from tunesmith_triton.choice import TritonChoice, precision
    from tunesmith_triton.configs import configs_for

    dot, sms = precision(problem), _multiprocessors()
    return [
        TritonChoice(ChoiceSpec(NAME, template, config.params()), problem, dot, sms)
        for template, config in configs_for(problem, interpreting())
    ]


@hookimpl
def tunesmith_rebuild_choice(spec: ChoiceSpec, problem: Problem) -> Choice | None:
    if spec.backend != NAME or not _offered(problem):
        return None
    if problem.op == ATTENTION_OP:
        from tunesmith_triton import attention

        return attention.rebuild(spec, problem)
    if (spec.template == CONV_TEMPLATE) != (problem.op == "conv"):
        return None
    from tunesmith_triton.choice import TritonChoice, precision

    if spec.template == CONV_TEMPLATE:
        from tunesmith_triton.conv import ConvChoice

        try:
            return ConvChoice(spec, problem, precision(problem))
        except (TypeError, ValueError):  # params of another version, or a problem the template declines
            return None
    if spec.template not in TEMPLATES:
        return None
    from tunesmith_triton.configs import tma_fits

    if spec.template == "gemm_tma" and not tma_fits(problem):
        return None
    try:
        return TritonChoice(spec, problem, precision(problem), _multiprocessors())
    except (TypeError, ValueError):  # params of another version of the plugin
        return None


@hookimpl
def tunesmith_estimate_runtime(node: Any, device: DeviceInfo) -> float | None:
    """Our choices' estimates (``cost.py``); anything else is left to other plugins."""
    if getattr(getattr(node, "spec", None), "backend", None) != NAME:
        return None
    from tunesmith_triton.choice import TritonChoice

    if not isinstance(node, TritonChoice):
        return None
    from tunesmith_triton.configs import multiprocessors, shared_memory
    from tunesmith_triton.cost import SHARED_MEMORY, estimate_ms, work_of

    on_gpu = _device() == "cuda"
    sms = device.multiprocessors or (multiprocessors(torch.cuda.current_device()) if on_gpu else 1)
    limit = shared_memory(torch.cuda.current_device()) if on_gpu else SHARED_MEMORY
    return estimate_ms(node.spec.template, node.config, work_of(node), node.problem, device, sms, limit)
