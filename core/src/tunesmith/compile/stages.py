"""The graph passes of each stage, and the post-grad stage that lowers and tunes a graph.

The post-grad stage, run on every forward, backward and inference graph: the post-grad "pre"
passes, the compiled-graph cache look-up, lowering, the kernels of every Problem whose shapes are
known (from the plan on a hit, else selected: caches, then tuning, split with other processes
compiling the same graph: ``fleet.py``) bound to their calls, the plan
stored on a miss, then the post-grad "post" passes. Last, each call whose winner is ATen's plain
op is given back to the graph as ATen's ops, so that the graph compiler runs and fuses it as it
would without tunesmith. Problems of symbolic shapes are selected at first sight, when the graph
runs.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import unset_fake_temporarily

from tunesmith import hooks
from tunesmith.cache import tally
from tunesmith.cache.dist_store import NAME as JOB_LAYER
from tunesmith.cache.stack import CacheStack
from tunesmith.compile import dispatch
from tunesmith.compile.graphcache import Unkeyable, graph_key, parse_plan, plan_payload
from tunesmith.compile.lowering import AtenLowering, Lowered, lower, restore, symbolic
from tunesmith.compile.swap import Background, select_or_queue
from tunesmith.config import Options
from tunesmith.counting import bump
from tunesmith.fleet import select_each
from tunesmith.problem import is_empty, tensor_like, tensor_meta
from tunesmith.selection import Selection
from tunesmith_hookspecs import ChoiceSpec, Problem, SelectionReport

log = logging.getLogger(__name__)

#: without CUDA graphs, how many times its call's host time ATen's op must take on the GPU before
#: another backend's kernel may replace it (see ``_with_launch_cost``)
GPU_BOUND = 4.0

#: the choice that is the graph's own ops: ATen's op alone, then the epilogue's ops one by one
GRAPH_OWN = ChoiceSpec(hooks.BASELINE_BACKEND, "eager")

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


def post_grad(gm: fx.GraphModule, options: Options, kind: str, background: Background | None = None) -> list[Lowered]:
    """The post-grad stage on ``gm`` (forward, backward or inference), in place; with ``background``
    (background tuning), a Problem the caches do not know runs ATen's op and is queued on it."""
    run_passes("post_grad_pre", gm.graph, options)
    gm.recompile()
    layers = hooks.cache_layers(options)
    stack = CacheStack(layers, "compiled_graph", options.cache_secret, options.cache_backoff_s)
    try:
        key: str | None = graph_key(gm, options, kind, all_passes(options))
    except Unkeyable as exc:
        key = None
        bump("compiled_graph_cache_bypass")
        log.info("compiled-graph cache bypassed for this %s graph: it holds %s", kind, exc)
    found = stack.get(key, parse_plan) if key else None
    if key:
        outcome = "compiled_graph_cache_hit" if found else "compiled_graph_cache_miss"
        bump(outcome)
        tally.add(tally.local_root(layers), {outcome: 1})  # for tunesmith report
    plan = found[0] if found else None
    if found and found[1] != JOB_LAYER:  # this process's own plan: its torch.distributed job's wins
        theirs = stack.publish(key, plan_payload(found[0]), parse_plan)
        if theirs is not None and theirs[0] != plan:
            bump("compiled_graph_job_answer")
            plan = theirs[0]
    lowered = lower(gm, [*hooks.lowerings(options), AtenLowering()], dispatch.options_id(options))
    pending: list[str] = []  # Problems queued for background tuning: no plan is stored
    with unset_fake_temporarily():  # tuning runs real kernels on real tensors; split with other processes
        prepared = select_each(
            lowered, lambda item: _prepare(item, plan, options, background, pending), options.cache_lock_wait_s
        )
        if key and plan is None and not pending:
            chosen = dict(x for x in prepared if x is not None)
            theirs = stack.put(key, plan_payload(chosen), parse_plan)
            if theirs is not None and theirs[0] != chosen:  # another rank of the job published first: run its plan
                bump("compiled_graph_job_answer")
                prepared = [_prepare(item, theirs[0], options, background, pending) for item in lowered]
    own = [item.node for item, x in zip(lowered, prepared, strict=True) if x and x[1] == GRAPH_OWN]
    run_passes("post_grad_post", gm.graph, options)
    alive = set(gm.graph.nodes)  # a "post" pass may have removed a call
    for node in own:
        if node in alive and not restore(gm.graph, node):
            log.debug("kept %s as a tunesmith call: ATen's ops would change its layout", node.name)
    gm.graph.lint()
    gm.recompile()
    return lowered


def _prepare(
    item: Lowered,
    plan: dict[str, ChoiceSpec] | None,
    options: Options,
    background: Background | None = None,
    pending: list[str] | None = None,
) -> tuple[str, ChoiceSpec] | None:
    """Ready and bind the kernel of one lowered call whose shapes are known, from the plan or
    selected (with ``background``: looked up, else ATen's op until it is tuned in the background); its
    Problem's key and chosen spec (None while the shapes are symbolic)."""
    vals: Sequence[Any] = [a.meta.get("val") for a in item.node.args[1]]
    if any(symbolic(v) for v in vals):
        return None  # selected when the graph runs with these shapes
    tensors = [tensor_like(tensor_meta(v), v.device) for v in vals]
    problem, inputs = dispatch.Recipe.from_json(item.recipe).problem(tensors)
    if is_empty(problem):
        return None
    spec = plan.get(problem.key()) if plan is not None else None
    if spec == GRAPH_OWN:  # the call goes back to the graph as ATen's ops: no kernel to ready
        hooks.selection_done(SelectionReport(problem, problem.key(), spec, (), source="plan"), options)
        return problem.key(), spec
    choice = hooks.rebuild_choice(spec, problem, options) if spec is not None else None
    if choice is not None:
        choice.precompile()
        dispatch.remember(item.recipe, tensors, choice.kernel(), problem)
        hooks.selection_done(SelectionReport(problem, problem.key(), spec, (), source="plan"), options)
        return problem.key(), spec
    selection = select_or_queue(problem, inputs, options, background, GRAPH_OWN)
    if not isinstance(selection, Selection):  # ATen's op until tuned in the background
        if pending is not None:
            pending.append(problem.key())
        dispatch.remember(item.recipe, tensors, selection.kernel(), problem)  # where ATen's ops cannot take it back
        return problem.key(), GRAPH_OWN
    spec, kernel = selection.spec, selection.kernel
    if not options.cudagraphs and spec != GRAPH_OWN and problem.device == "cuda":
        spec, kernel = _with_launch_cost(item.recipe, problem, tensors, selection, options)
    dispatch.remember(item.recipe, tensors, kernel, problem)
    return problem.key(), spec


def _with_launch_cost(
    recipe: str, problem: Problem, tensors: Sequence[torch.Tensor], selection: Selection, options: Options
) -> tuple[ChoiceSpec, Any]:
    """Without CUDA graphs each call also costs its launch on the host: the winner stays only where
    its GPU time and its call's host time (through the bound call, as the graph makes it) add up
    to less than the same for the graph's own ATen op, and where ATen's op keeps the GPU busy for
    ``GPU_BOUND`` times that host time; else the graph keeps ATen's op. Measured alone, a call's
    host time is at its best and a kernel's GPU time at its worst (cold L2): in the decode MLP
    of ``benchmarks/models.py`` Triton won each small GEMM alone by more than its launch, and
    made the step 2.5x slower."""
    own_ms = selection.timings.get(GRAPH_OWN, math.inf)
    own = hooks.rebuild_choice(GRAPH_OWN, problem, options) if math.isfinite(own_ms) else None
    if own is None:
        return selection.spec, selection.kernel
    own_kernel = own.kernel()
    dispatch.remember(recipe, tensors, selection.kernel, problem)
    with torch.no_grad():
        host = _host_ms(lambda: dispatch.gemm(recipe, list(tensors)))
        win = selection.timings[selection.spec] + host
        mine = own_ms + _host_ms(lambda: own_kernel(*tensors))
    if mine > win and own_ms >= GPU_BOUND * host:
        return selection.spec, selection.kernel
    bump("launch_bound_to_aten")
    log.info("%s: %s loses to ATen's op with its launch (%.4f ms against %.4f)", problem.op, selection.spec, win, mine)
    return GRAPH_OWN, own_kernel


def _host_ms(call: Callable[[], Any], calls: int = 20, rounds: int = 3) -> float:
    """The host's time to enqueue one ``call`` (the least of ``rounds`` rounds), in ms."""
    call()
    torch.cuda.synchronize()
    best = math.inf
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        best = min(best, (time.perf_counter() - start) / calls * 1e3)
        torch.cuda.synchronize()
    return best
