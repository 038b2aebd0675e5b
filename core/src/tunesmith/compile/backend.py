"""``torch.compile(model, backend="tunesmith", mode=..., options={...})``: the pipeline of DESIGN.md.

Pre-grad passes on the Dynamo graph, then its attention tuned and called (``attention.py``: before
AOTAutograd, which traces each attention kernel's forward and backward), then AOTAutograd
(forward and backward, so training GEMMs are tuned too) with the joint-graph passes on the
joint graph (or the inference graph), then the post-grad stage on each graph (passes,
compiled-graph cache, lowering, tuning), then the graph compiler for the rest: ``inductor`` (the
default) hands the whole pipeline to Inductor with tunesmith's stages as its custom passes, so
that Inductor compiles everything but tunesmith's GEMMs, which it calls as extern kernels;
``eager`` runs the lowered FX graph as is; a plugin's
``tunesmith_graph_compiler`` gets it to compile. torch's ``mode`` sets ``cudagraphs``: the
modes ``reduce-overhead`` and ``max-autotune`` run the compiled graphs under CUDA graphs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.fx as fx

from tunesmith import hooks
from tunesmith.cache import tally
from tunesmith.compile import attention, dispatch, install_keys
from tunesmith.compile.cudagraphs import Captured
from tunesmith.compile.stages import all_passes, post_grad, run_passes
from tunesmith.compile.swap import Background, compile_in_background
from tunesmith.config import Options
from tunesmith.errors import OptionError
from tunesmith.settings import current_options

log = logging.getLogger(__name__)


#: torch.compile's modes, and whether each runs compiled graphs under CUDA graphs
MODES = {"default": False, "reduce-overhead": True, "max-autotune": True, "max-autotune-no-cudagraphs": False}


def backend(
    gm: fx.GraphModule,
    example_inputs: Sequence[Any],
    mode: str | None = None,
    options: Mapping[str, Any] | None = None,
) -> Any:
    """The ``tunesmith`` backend of ``torch.compile`` (registered under ``torch_dynamo_backends``);
    torch passes ``mode`` and ``options`` as given to ``torch.compile``."""
    settings = current_options(with_mode(mode, options))
    memo = _remembered_install_keys(settings)
    if settings.graph_compiler == "inductor" and any(
        isinstance(t, torch.Tensor) and t.device.type == "cuda" for t in example_inputs
    ):
        _warm_compile_pool()
    try:
        if settings.tuning == "background":  # the tuner's first job starts the worker, after the first step
            return compile_in_background(gm, example_inputs, settings, _compile, all_passes(settings))
        compiled = _prepare_benchmarker(gm, example_inputs, settings)
        try:
            return _compile(gm, example_inputs, settings, None)
        finally:
            compiled()
    finally:
        if memo is not None:
            memo.store()


def _remembered_install_keys(settings: Options) -> install_keys.Memo | None:
    """Inductor's hashes of the torch and Triton installations, set from the local cache folder where
    an earlier process stored them (``remember_install_keys``); the rest stored after the compile."""
    if not settings.remember_install_keys or settings.graph_compiler != "inductor":
        return None
    return install_keys.remember(tally.local_root(hooks.cache_layers(settings)))


def _warm_compile_pool() -> None:
    """Start Inductor's compile workers now, while AOTAutograd traces, as torch's ``inductor``
    backend does: started at the first kernel instead, they are not up for the first graph's Triton
    kernels, which then compile one by one in this process (GPT-2's forward: 1.3 s against 0.7 s).
    Only for a graph on a GPU: on a CPU they would boot beside the compile, on the same cores."""
    from torch._inductor.async_compile import maybe_warm_pool

    maybe_warm_pool()


def _compile(
    gm: fx.GraphModule, example_inputs: Sequence[Any], settings: Options, background: Background | None
) -> Any:
    """The pipeline on one Dynamo graph; with ``background``, unknown Problems are queued on it for
    background tuning instead of tuned here."""
    run_passes("pre_grad", gm.graph, settings)
    gm.recompile()
    attention.rewrite(gm, settings, background)
    if settings.graph_compiler == "inductor":
        from tunesmith.compile.inductor import compile_with_inductor

        return compile_with_inductor(gm, example_inputs, settings, background)
    codegen = hooks.graph_compiler(settings)
    return _aot(gm, example_inputs, settings, codegen, background)


#: what a Dynamo graph calls where it may hold a GEMM-family op (by the callee's name)
GEMM_CALLS = frozenset(
    {"linear", "matmul", "__matmul__", "mm", "bmm", "addmm", "baddbmm", "einsum", "conv1d", "conv2d", "conv3d"}
    | {"conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "convolution", "scaled_dot_product_attention"}
)


def _prepare_benchmarker(gm: fx.GraphModule, example_inputs: Sequence[Any], settings: Options) -> Callable[[], None]:
    """Where the graph may hold a Problem, let the benchmarker get ready on the inputs' device
    (the default one starts its worker process) while the graph is traced and lowered; returns
    what to call once it is compiled."""
    device = next((t.device for t in example_inputs if isinstance(t, torch.Tensor)), None)
    calls = (n for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module"))
    if device is None or not any(n.op == "call_module" or _callee(n) in GEMM_CALLS for n in calls):
        return lambda: None
    prepare = getattr(hooks.benchmarker(settings), "prepare", None)
    try:
        done = prepare(device) if prepare is not None else None
    except Exception as exc:  # noqa: BLE001 - getting ready early is an optimisation only
        log.debug("the benchmarker could not get ready on %s: %s", device, exc)
        done = None
    return done or (lambda: None)


def _callee(node: fx.Node) -> str:
    target = node.target
    return target if isinstance(target, str) else getattr(target, "__name__", "")


def with_mode(mode: str | None, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The per-call settings of a compile: ``options`` over what ``mode`` sets."""
    if mode is not None and mode not in MODES:
        raise OptionError(f"torch.compile mode {mode!r} is not one of " + ", ".join(map(repr, MODES)))
    return ({"cudagraphs": MODES[mode]} if mode is not None else {}) | dict(options or {})


def _aot(
    gm: fx.GraphModule,
    example_inputs: Sequence[Any],
    settings: Options,
    codegen: Callable[..., Any],
    background: Background | None,
) -> Any:
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import default_partition

    captured = Captured(len(example_inputs)) if settings.cudagraphs else None

    def compiler(kind: str) -> Callable[..., Any]:
        def compile_graph(graph_module: fx.GraphModule, inputs: Sequence[Any]) -> Any:
            if kind == "inference":
                joint_passes(graph_module.graph, settings)
            post_grad(graph_module, settings, kind, background)
            compiled = codegen(graph_module, inputs)
            return captured.wrap(compiled, graph_module, inputs, kind) if captured else compiled

        return compile_graph

    def partition(joint: fx.GraphModule, joint_inputs: Sequence[Any], **kwargs: Any) -> Any:
        joint_passes(joint.graph, settings)
        joint.recompile()
        return default_partition(joint, joint_inputs, **kwargs)

    return aot_autograd(
        fw_compiler=compiler("forward"),
        bw_compiler=compiler("backward"),
        inference_compiler=compiler("inference"),
        partition_fn=partition,
    )(gm, example_inputs)


def joint_passes(graph: fx.Graph, settings: Options) -> None:
    run_passes("joint_pre", graph, settings)
    run_passes("joint_post", graph, settings)


def eager(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
    """The ``eager`` graph compiler: the lowered FX graph runs as it is, its ``tunesmith::gemm``
    calls going straight to the Python dispatch (the op's registration is for tracing)."""
    from torch._functorch.aot_autograd import make_boxed_func

    for node in gm.graph.find_nodes(op="call_function", target=dispatch.gemm):
        node.target = dispatch.run
    gm.recompile()
    return make_boxed_func(gm.forward)
