"""A compiled graph whose unknown Problems are tuned in the background (``tuning="background"``).

At compile time each Problem is looked up in the caches only: a known one gets its kernel as in
blocking mode, an unknown one its placeholder (ATen's own op for a GEMM, which the graph compiler
then runs and fuses as reduce-overhead would; torch's SDPA for an attention) and a job for the
background tuner. The graph runs at once. At each call (a step boundary) the tuner may time on
the idle GPU (``background.gap_at_boundary``); once every Problem of the graph is tuned, the
graph is compiled again in blocking mode, which finds every answer in the caches, and the new
graph replaces the old one at that boundary, once per graph (its CUDA graphs are recorded anew).
Where every winner is its placeholder, the graph already runs them: it is compiled again all the
same, but only once, so that Inductor's caches hold a graph a later process can use.

Inductor's caches never store a graph with placeholders: such a compile runs with its FX graph
cache (and with it AOTAutograd's) off. A graph whose Problems are all tuned is marked so in
tunesmith's compiled-graph cache (its Dynamo graph's key, with every Problem's spec); a later
process that finds the mark compiles it in blocking mode straight away, with Inductor's caches.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch
import torch.fx as fx
from torch.fx._lazy_graph_module import _make_graph_module

from tunesmith import hooks
from tunesmith.background import Job, gap_at_boundary, tuner
from tunesmith.cache.stack import CacheStack
from tunesmith.compile.graphcache import Unkeyable, graph_key, parse_plan, plan_payload
from tunesmith.config import Options
from tunesmith.counting import bump
from tunesmith.selection import Selection, lookup, select
from tunesmith_hookspecs import Choice, ChoiceSpec, Problem

log = logging.getLogger(__name__)

#: compiles a Dynamo graph with these settings; the graph record it may queue Problems on (None: blocking)
Compile = Callable[[fx.GraphModule, Sequence[Any], Options, "Background | None"], Any]


class Background:
    """One Dynamo graph's compiled function, its Problems tuned in the background, swapped for
    the blocking compile once they all are."""

    def __init__(self, gm: fx.GraphModule, example_inputs: Sequence[Any], settings: Options, compile: Compile):
        self._original = _copy(gm)  # before any pass changes it
        self._inputs = list(example_inputs)  # real tensors (Dynamo's), kept for the second compile
        context = torch._guards.TracingContext.try_get()
        known = context.tensor_to_context if context is not None else {}
        self._symbolic = [(t, known[t]) for t in self._inputs if isinstance(t, torch.Tensor) and t in known]
        self._settings = settings
        self._compile = compile
        self._grad = torch.is_grad_enabled()  # Dynamo traced under it: an inference graph stays one
        self._devices = sorted(
            {t.device for t in example_inputs if isinstance(t, torch.Tensor) and t.device.type == "cuda"}, key=str
        )
        self._lock = threading.Lock()
        self.placeholders: dict[str, ChoiceSpec] = {}  # Problem key -> the spec the graph runs now
        self.known: dict[str, ChoiceSpec] = {}  # Problem key -> spec, for every Problem of the graph
        self._tuned = 0
        self._failed = 0
        self._first = time.monotonic()
        self._calls = 0
        self.swapped = False  # settled: the blocking compile runs, or nothing was left to tune
        self.mark_key: str | None = None
        self.current: Any = None

    # -- at compile time (the stages call these) --

    def placeholder(self, problem: Problem, spec: ChoiceSpec, device: torch.device, options: Options) -> None:
        """``problem`` runs ``spec`` until it is tuned: queue it."""
        key = problem.key()
        with self._lock:
            if key in self.placeholders:
                return
            self.placeholders[key] = spec
        tuner.submit(Job(problem, options, device, lambda winner: self._tuned_one(key, winner)))

    def answered(self, problem: Problem, spec: ChoiceSpec) -> None:
        """``problem`` was known when compiling (for the graph's mark)."""
        with self._lock:
            self.known[problem.key()] = spec

    # -- the background tuner calls this --

    def _tuned_one(self, key: str, winner: ChoiceSpec | None) -> None:
        with self._lock:
            self.known[key] = winner if winner is not None else self.placeholders[key]
            self._tuned += 1
            if winner is None:
                self._failed += 1

    # -- at run time --

    def ready(self) -> bool:
        """Every Problem queued by this graph is tuned (or failed, keeping its placeholder)."""
        with self._lock:
            return self._tuned == len(self.placeholders)

    def waiting(self) -> bool:
        return bool(self.placeholders) and not self.swapped

    def __call__(self, *args: Any) -> Any:
        if not self.swapped:
            self._calls += 1
            if self.placeholders and self._calls > 1:  # the first step neither waits nor shares the host
                tuner.start()
                gap_at_boundary(self._settings, self._devices)
            if self._calls > 1 and self.ready():  # after one call: a backward compiles at its first
                self.swap_now()
        return self.current(*args)

    def swap_now(self) -> None:
        """Where every Problem is tuned: compile the graph again in blocking mode (every answer now in
        the caches), run that from now on, and mark the graph tuned."""
        if self.swapped or not self.ready():
            return
        if not self.placeholders:  # every Problem was known when compiling
            self._settle()
            self.mark()
            return
        if self._failed:  # a compile in blocking mode would tune those again: the graph keeps its placeholders
            self._settle()
            log.warning(
                "tunesmith: %d of a graph's Problems could not be tuned; it keeps running ATen there", self._failed
            )
            return
        changed = sum(1 for key, spec in self.placeholders.items() if self.known.get(key) != spec)
        began = time.monotonic()
        blocking = attrs.evolve(self._settings, tuning="blocking")
        with torch._guards.tracing(_fresh_context(self._symbolic)), torch.set_grad_enabled(self._grad):
            self.current = _undisabled(self._compile(self._original, self._inputs, blocking, None))
        self._settle()
        bump("background_swapped")
        log.info(
            "tunesmith: a graph took its %d tuned kernels (%d not its placeholder) %.1f s after its compile; "
            "compiled again in %.1f s",
            len(self.placeholders), changed, began - self._first, time.monotonic() - began,
        )  # fmt: skip
        self.mark()

    def _settle(self) -> None:
        """No more compiles of this graph: let go of its copy and its example inputs."""
        self.swapped = True
        self._original, self._inputs, self._symbolic = None, [], []  # type: ignore[assignment]

    def mark(self) -> None:
        """Store the mark that this graph's Problems are all tuned (its key and every spec)."""
        if self.mark_key is not None:
            _stack(self._settings).put(self.mark_key, plan_payload(dict(self.known)), parse_plan)


def select_or_queue(
    problem: Problem,
    inputs: Sequence[torch.Tensor],
    options: Options,
    background: Background | None,
    placeholder: ChoiceSpec,
) -> Selection | Choice:
    """What a compiled call of ``problem`` runs now: its selection (tuned here in blocking mode);
    with ``background``, the caches' answer, else ``placeholder``'s choice, precompiled, with the
    Problem queued on ``background`` (where no plugin rebuilds the placeholder, it is tuned here)."""
    with torch.no_grad():
        selection = lookup(problem, inputs, options) if background is not None else None
        if selection is None and background is not None:
            choice = hooks.rebuild_choice(placeholder, problem, options)
            if choice is not None:
                choice.precompile()
                background.placeholder(problem, placeholder, inputs[0].device, options)
                return choice
        if selection is None:
            selection = select(problem, inputs, options)
    if background is not None:
        background.answered(problem, selection.spec)
    return selection


def _copy(gm: fx.GraphModule) -> fx.GraphModule:
    """``gm`` with a graph of its own, its attributes the same objects, and what Dynamo tells
    AOTAutograd through the graph module (its id, the parameters' sources, each input's source):
    without it the parameters are not static inputs of the CUDA graphs, nor the shapes static."""
    graph = fx.Graph()
    values: dict[fx.Node, fx.Node] = {}
    graph.output(graph.graph_copy(gm.graph, values))
    copied = _make_graph_module(gm, graph)  # lazy, as Dynamo makes it: AOTAutograd's cache key reads its fields
    copied.meta = dict(gm.meta)
    for name, value in vars(gm).items():  # what Dynamo set on it: _param_name_to_source, ...
        vars(copied).setdefault(name, value)
    for old, new in values.items():
        if hasattr(old, "_dynamo_source"):
            new._dynamo_source = old._dynamo_source  # type: ignore[attr-defined]
    return copied


def _undisabled(compiled: Any) -> Any:
    """``compiled`` without the ``torch._dynamo.disable`` wrapper a graph compiler puts around it:
    Dynamo puts one around the :class:`Background` that calls it, and a second cost every step
    of a host-bound model (a decode step) nine more Python calls."""
    from torch._dynamo.eval_frame import innermost_fn

    return innermost_fn(compiled) if getattr(compiled, "_torchdynamo_disable", False) else compiled


def _fresh_context(symbolic: list[tuple[torch.Tensor, Any]]) -> torch._guards.TracingContext:
    """A tracing context as Dynamo makes one, with Dynamo's symbolic contexts of the real example
    inputs (its own context is spent: reused after its compile, it traces into symbolic sizes)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    context = torch._guards.TracingContext(FakeTensorMode(shape_env=ShapeEnv()))
    for tensor, symbolic_context in symbolic:
        context.tensor_to_context[tensor] = symbolic_context
    return context


def _stack(settings: Options) -> CacheStack:
    return CacheStack(hooks.cache_layers(settings), "compiled_graph", settings.cache_secret, settings.cache_backoff_s)


def compile_in_background(
    gm: fx.GraphModule, example_inputs: Sequence[Any], settings: Options, compile: Compile, passes: list[Any]
) -> Any:
    """``gm`` compiled with its unknown Problems tuned in the background; a graph marked tuned by an
    earlier process (or this one) is compiled in blocking mode, with nothing left to tune. No
    benchmark worker starts here (one booting beside the first step slows it: docs/decisions.md):
    the tuner's first job starts it, after the first step."""
    try:
        key: str | None = graph_key(gm, settings, "dynamo", passes)
    except Unkeyable as exc:
        key = None
        log.debug("this graph cannot be marked tuned (%s): its compiles keep Inductor's caches off", exc)
    if key is not None and _stack(settings).get(key, parse_plan) is not None:
        bump("background_graph_known")
        return compile(gm, example_inputs, attrs.evolve(settings, tuning="blocking"), None)
    graph = Background(gm, example_inputs, settings, compile)
    graph.mark_key = key
    compiled = compile(gm, example_inputs, settings, graph)
    if getattr(compiled, "_boxed_call", False):
        graph._boxed_call = True  # type: ignore[attr-defined]  # called as Dynamo calls the graph
    graph.current = _undisabled(compiled)
    tuner.graphs.append(graph)
    return graph
