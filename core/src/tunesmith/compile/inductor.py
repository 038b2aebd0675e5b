"""``graph_compiler="inductor"``: Inductor runs the pipeline, with tunesmith's stages as its custom
passes (joint-graph "pre" and "post", post-grad "pre" with lowering and tuning, post-grad "post"),
and with ``cudagraphs`` its own CUDA graphs (``triton.cudagraphs``).

The passes are Inductor ``CustomGraphPass`` objects whose uuid covers the settings, the user's
passes and the plugins' versions, so Inductor's own FX graph cache keys on them; a graph it serves from that
cache still calls ``tunesmith::gemm``, whose kernels then come from tunesmith's caches.

A graph served so (a warm start: by Inductor's FX graph cache, or by AOTAutograd's cache, which
loads its graphs from the former) runs no tunesmith stage, so it is counted here instead: each one
is a ``compiled_graph_cache_hit`` and a ``compiled_graph_inductor_hit``, told apart from the graphs
that tunesmith's stage saw by Inductor's own counters, read around each compile (the whole compile,
and each graph's, which for a backward may come at its first call).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

import torch.fx as fx
from torch._inductor import config as inductor_config
from torch._inductor.custom_graph_pass import CustomGraphPass

from tunesmith import hooks
from tunesmith.cache import tally
from tunesmith.compile import dispatch
from tunesmith.compile.graphcache import result_settings
from tunesmith.compile.stages import all_passes, post_grad, run_passes
from tunesmith.compile.swap import Background
from tunesmith.config import Options
from tunesmith.counting import bump
from tunesmith.passes import pass_uuid
from tunesmith.plugins import get_system
from tunesmith_hookspecs import SPEC_VERSION

#: how AOTAutograd's cache names the function a rewritten attention calls (``attention.call``)
ATTENTION_CALL = "tunesmith.compile.attention.call"


class _Stage(CustomGraphPass):
    """One tunesmith stage as an Inductor custom pass."""

    def __init__(self, run: Callable[[fx.Graph], None], ident: str) -> None:
        self._run, self._ident = run, ident

    def __call__(self, graph: fx.Graph) -> None:
        self._run(graph)

    def uuid(self) -> str:
        return self._ident


class _Served:
    """Counts the graphs that Inductor's caches serve during the compiles it wraps (``watch``)."""

    def __init__(self, settings: Options) -> None:
        self.settings = settings
        self.counted = 0

    @staticmethod
    def _hits() -> tuple[int, int]:
        from torch._dynamo.utils import counters

        return counters["inductor"]["fxgraph_cache_hit"], counters["aot_autograd"]["autograd_cache_hit"]

    def watch(self, compile_graphs: Callable[..., Any]) -> Callable[..., Any]:
        """``compile_graphs`` counting the graphs served from Inductor's caches while it ran (less
        those that a ``watch`` inside it counted already)."""

        def watched(*args: Any, **kwargs: Any) -> Any:
            (graphs, entries), counted = self._hits(), self.counted
            result = compile_graphs(*args, **kwargs)
            after = self._hits()
            # an AOTAutograd entry loads each of its graphs from the FX graph cache, unless it
            # bundles them (torch._functorch.config.bundled_autograd_cache): then one a hit
            served = (after[0] - graphs) or (after[1] - entries)
            new = served - (self.counted - counted)
            if new > 0:
                self.counted += new
                bump("compiled_graph_cache_hit", new)
                bump("compiled_graph_inductor_hit", new)
                tally.add(
                    tally.local_root(hooks.cache_layers(self.settings)),
                    {"compiled_graph_cache_hit": new, "compiled_graph_inductor_hit": new},
                )
            return result

        return watched


def compile_with_inductor(
    gm: fx.GraphModule, example_inputs: Sequence[Any], settings: Options, background: Background | None = None
) -> Any:
    """``gm`` through Inductor with tunesmith's stages; with ``background`` (background tuning), without
    Inductor's FX graph cache (and so AOTAutograd's): a graph that runs placeholders is not stored."""
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner

    dispatch.options_id(settings)  # known here even when Inductor serves the graph from its cache
    system = get_system()
    body = {
        "settings": result_settings(settings),
        "passes": [pass_uuid(p) for p in all_passes(settings)],
        "plugins": sorted((r.name, r.version) for r in system.records.values() if r.loaded),
        "spec_version": SPEC_VERSION,
    }
    ident = hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()

    def lowering(graph: fx.Graph) -> None:
        gm = graph.owning_module
        if gm is None:  # Inductor runs post-grad passes on graphs of a GraphModule
            raise RuntimeError("tunesmith: the post-grad graph has no GraphModule")
        kind = (
            "backward" if any(n.name.startswith("tangents") for n in graph.find_nodes(op="placeholder")) else "forward"
        )
        post_grad(gm, settings, kind, background)

    patches = {
        "joint_custom_pre_pass": _Stage(lambda g: run_passes("joint_pre", g, settings), f"{ident}-joint-pre"),
        "joint_custom_post_pass": _Stage(lambda g: run_passes("joint_post", g, settings), f"{ident}-joint-post"),
        "post_grad_custom_pre_pass": _Stage(lowering, f"{ident}-post-grad"),
        "triton.cudagraphs": settings.cudagraphs,
        "triton.autotune_pointwise": settings.pointwise_autotune,  # docs/decisions.md
    }
    if background is not None:
        patches["fx_graph_cache"] = False
    marked = getattr(inductor_config, "unsafe_marked_cacheable_functions", None)
    if isinstance(marked, dict):  # a rewritten attention's call: its argument names the Problem and the kernel
        patches["unsafe_marked_cacheable_functions"] = {**marked, ATTENTION_CALL: ident}
    served = _Served(settings)
    return served.watch(compile_fx)(
        gm, example_inputs, inner_compile=served.watch(compile_fx_inner), config_patches=patches
    )
