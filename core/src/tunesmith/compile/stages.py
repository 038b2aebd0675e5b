"""The graph passes of each stage, and the post-grad stage that lowers and tunes a graph.

The post-grad stage, run on every forward, backward and inference graph: the post-grad "pre"
passes, the compiled-graph cache look-up, lowering, the kernels of every Problem whose shapes are
known (from the plan on a hit, else selected: caches, then tuning), the plan stored on a miss,
then the post-grad "post" passes. Problems of symbolic shapes are selected at first sight, when
the graph runs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import unset_fake_temporarily

from tunesmith import hooks
from tunesmith.cache.stack import CacheStack
from tunesmith.compile import dispatch
from tunesmith.compile.graphcache import Unkeyable, graph_key, parse_plan, plan_payload
from tunesmith.compile.lowering import AtenLowering, Lowered, lower, symbolic
from tunesmith.counters import bump
from tunesmith.options import Options
from tunesmith.problem import is_empty, tensor_like, tensor_meta
from tunesmith.selection import select
from tunesmith_hookspecs import ChoiceSpec, SelectionReport

log = logging.getLogger(__name__)

PASS_HOOKS = {
    "pre_grad": ("tunesmith_pre_grad_passes", None),
    "joint_pre": ("tunesmith_joint_graph_passes", "pre"),
    "joint_post": ("tunesmith_joint_graph_passes", "post"),
    "post_grad_pre": ("tunesmith_post_grad_passes", "pre"),
    "post_grad_post": ("tunesmith_post_grad_passes", "post"),
}


def passes(stage: str, options: Options) -> list[Any]:
    hook, when = PASS_HOOKS[stage]
    return hooks.graph_passes(hook, options, when)


def run_passes(stage: str, graph: fx.Graph, options: Options) -> None:
    """Apply the passes of ``stage`` to ``graph`` in place (their return values are ignored)."""
    for graph_pass in passes(stage, options):
        graph_pass(graph)
    graph.lint()


def all_passes(options: Options) -> list[Any]:
    return [p for stage in PASS_HOOKS for p in passes(stage, options)]


def post_grad(gm: fx.GraphModule, options: Options, kind: str) -> list[Lowered]:
    """The post-grad stage on ``gm`` (forward, backward or inference), in place."""
    run_passes("post_grad_pre", gm.graph, options)
    gm.recompile()
    stack = CacheStack(hooks.cache_layers(options), "compiled_graph", options.cache_secret, options.cache_backoff_s)
    try:
        key: str | None = graph_key(gm, options, kind, all_passes(options))
    except Unkeyable as exc:
        key = None
        bump("compiled_graph_cache_bypass")
        log.info("compiled-graph cache bypassed for this %s graph: it holds %s", kind, exc)
    found = stack.get(key, parse_plan) if key else None
    if key:
        bump("compiled_graph_cache_hit" if found else "compiled_graph_cache_miss")
    plan = found[0] if found else None
    lowered = lower(gm, [*hooks.lowerings(options), AtenLowering()], dispatch.options_id(options))
    chosen: dict[str, ChoiceSpec] = {}
    with unset_fake_temporarily():  # tuning runs real kernels on real tensors
        for item in lowered:
            chosen.update(_prepare(item, plan, options))
    if key and plan is None:
        stack.put(key, plan_payload(chosen))
    run_passes("post_grad_post", gm.graph, options)
    gm.recompile()
    return lowered


def _prepare(item: Lowered, plan: dict[str, ChoiceSpec] | None, options: Options) -> dict[str, ChoiceSpec]:
    """Ready the kernel of one lowered call whose shapes are known: from the plan, or selected."""
    vals: Sequence[Any] = [a.meta.get("val") for a in item.node.args[1]]
    if any(symbolic(v) for v in vals):
        return {}  # selected when the graph runs with these shapes
    tensors = [tensor_like(tensor_meta(v), v.device) for v in vals]
    problem, inputs = dispatch.Recipe.from_json(item.recipe).problem(tensors)
    if is_empty(problem):
        return {}
    spec = plan.get(problem.key()) if plan is not None else None
    choice = hooks.rebuild_choice(spec, problem, options) if spec is not None else None
    if choice is not None:
        choice.precompile()
        dispatch.remember(item.recipe, tensors, choice.kernel())
        hooks.selection_done(SelectionReport(problem, problem.key(), spec, (), source="plan"), options)
        return {problem.key(): spec}
    with torch.no_grad():
        selection = select(problem, inputs, options)
    dispatch.remember(item.recipe, tensors, selection.kernel)
    return {problem.key(): selection.spec}
