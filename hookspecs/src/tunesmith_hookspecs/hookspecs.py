"""The tunesmith hook specifications: the plugin author's reference.

A plugin is any module or object carrying functions named like these hooks and decorated with
:data:`tunesmith_hookspecs.hookimpl`. It may accept fewer arguments than a spec lists (specs gain
arguments over time, never lose them). Hooks marked *firstresult* stop at the first
implementation that returns something other than ``None``, trying the most recently registered
plugin first (pluggy's order); the core calls the others once per plugin, validating each plugin's
result on its own (``tunesmith_choices`` in the order of the ``backends`` setting).

The ``options`` argument passed to hooks is the resolved settings object of the core
(``tunesmith.Options``): core settings are attributes (``options.backends``), and so are the ones
plugins declare through :func:`tunesmith_add_options` (``options.redis_url``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from tunesmith_hookspecs.types import (
        Benchmarker,
        CacheLayer,
        Choice,
        ChoiceSpec,
        DeviceInfo,
        OptionRegistry,
        PluginStatus,
        Problem,
        SelectionReport,
    )

PROJECT_NAME = "tunesmith"
hookspec = pluggy.HookspecMarker(PROJECT_NAME)


# --- settings and status ---------------------------------------------------------------------


@hookspec
def tunesmith_add_options(options: OptionRegistry) -> None:
    """Declare this plugin's own settings.

    Called once, when the plugin manager loads plugins. Each declared setting gets the same
    layering as the core's (defaults, config file, ``TUNESMITH_<NAME>`` environment variable,
    ``tunesmith.options(...)``, per call) and is read back as ``options.<name>``.

    :param options: the registry; call ``options.add(name, default, parse=None, help="")``.
        ``parse`` converts a raw value (a string from the environment or a TOML value) and
        raises ``ValueError`` with a message saying what it accepts.
    :returns: nothing.

    Example::

        @hookimpl
        def tunesmith_add_options(options):
            options.add("redis_url", None, parse=str, help="redis://host:port/db of the shared cache")
    """


@hookspec
def tunesmith_plugin_status(options: Any) -> PluginStatus | None:
    """Say whether this plugin can run on this machine, and if not, why.

    ``tunesmith plugins`` shows the answer; a backend that is not runnable offers no choices
    (the core also skips it, naming the reason when nothing valid is left). Keep it cheap: no
    compilation, no device work beyond queries. Not implementing it means "runnable".

    The core remembers the answer for the process (``tunesmith.reset()`` forgets it), unless the
    implementation takes ``options``: then the answer depends on the settings (a cache plugin
    with no server configured, say) and is asked again each time.

    :param options: the resolved settings.
    :returns: a :class:`~tunesmith_hookspecs.types.PluginStatus`, or ``None``.

    Example::

        @hookimpl
        def tunesmith_plugin_status():
            if shutil.which("nvcc") is None:
                return PluginStatus(False, "nvcc not found on PATH")
            return PluginStatus(True)
    """


# --- lowering and choices --------------------------------------------------------------------


@hookspec
def tunesmith_lowerings() -> Sequence[Any]:
    """Extra op-pattern -> Problem lowerings for the ``torch.compile`` backend.

    The backend walks each graph after AOTAutograd (ATen ops, ``node.meta["val"]`` holding a
    fake tensor of every value) from the last node to the first, and offers each node to the
    plugins' lowerings, then to its own (mm, addmm, bmm, baddbmm, ``mm + mm``, convolution).
    The first :class:`~tunesmith_hookspecs.types.LoweringMatch` wins; the core then takes in the
    pointwise ops that follow ``root`` (relu, gelu, silu, add, mul, casts, ...), checks dtypes and
    shapes (a match it cannot lower is left in the graph), and replaces the whole chain with one
    call of the ``tunesmith::gemm`` custom op, tuned like ``tunesmith.tune(op, *inputs)``.

    :returns: a sequence of lowering objects, each with a ``name`` and a
        ``match(node: torch.fx.Node) -> LoweringMatch | None`` method.

    Example::

        @hookimpl
        def tunesmith_lowerings():
            return [ScaledMatmulLowering()]
    """


@hookspec
def tunesmith_choices(problem: Problem, options: Any) -> Sequence[Choice]:
    """Candidate kernels for one Problem.

    Return every choice this backend can run for ``problem`` on this machine, or an empty list
    when it supports none (an unsupported op, dtype or device is not an error). Each choice has a
    ``spec`` (a :class:`~tunesmith_hookspecs.types.ChoiceSpec` whose ``backend`` is this
    plugin's entry-point name), ``precompile()`` (slow work, may run in a worker; raises on
    failure) and ``kernel()`` (returns a callable taking the Problem's input tensors in order and
    returning the output, epilogue included). The core validates what is returned: anything
    that is not such a choice gets one error naming this plugin, and only this plugin's results
    are dropped. Listed backends are called in ``options.backends`` order.

    :param problem: the Problem to tune.
    :param options: the resolved settings.
    :returns: a sequence of choices (possibly empty).

    Example::

        @hookimpl
        def tunesmith_choices(problem, options):
            if problem.op != "mm":
                return []
            return [MyChoice(ChoiceSpec("mine", "mm", {"BLOCK": b}), problem) for b in (64, 128)]
    """


@hookspec(firstresult=True)
def tunesmith_rebuild_choice(spec: ChoiceSpec, problem: Problem) -> Choice | None:
    """Turn a cached ChoiceSpec back into a runnable choice, without enumerating all choices.

    *firstresult*: stops at the first implementation that returns a choice. Return ``None``
    when ``spec.backend`` is not this plugin's name, or the spec no longer applies. Where no
    plugin rebuilds a spec, the core calls ``tunesmith_choices`` of the spec's backend and picks
    the choice with an equal spec. While it runs, ``tunesmith.plugin.current_options()`` gives
    the settings of the tune that asks (in a benchmark worker too): read plugin settings there.

    :param spec: the spec read from a cache or a benchmark request.
    :param problem: the Problem it was chosen for.
    :returns: a choice whose ``spec == spec``, or ``None``.

    Example::

        @hookimpl
        def tunesmith_rebuild_choice(spec, problem):
            if spec.backend == "mine":
                return MyChoice(spec, problem)
            return None
    """


# --- cost model ------------------------------------------------------------------------------


@hookspec(firstresult=True)
def tunesmith_estimate_runtime(node: Any, device: Any) -> float | None:
    """A cost-model estimate of a node's (or a choice's) runtime in milliseconds.

    *firstresult*: stops at the first non-``None`` answer; the core's roofline model answers
    last. ``node`` is a ``torch.fx.Node`` from a traced graph or a choice of this plugin.

    :param node: what to estimate.
    :param device: a :class:`~tunesmith_hookspecs.types.DeviceInfo` profile.
    :returns: milliseconds, or ``None`` to leave it to another plugin.

    Example::

        @hookimpl
        def tunesmith_estimate_runtime(node, device):
            if isinstance(node, MyChoice):
                return node.flops / dict(device.peak_flops)["bfloat16"] * 1e3
            return None
    """


@hookspec(firstresult=True)
def tunesmith_device_info(device: Any) -> DeviceInfo | None:
    """The profile of a device: peak FLOP/s per dtype, memory and interconnect bandwidth.

    *firstresult*: stops at the first non-``None`` answer.

    :param device: a ``torch.device`` or a preset name such as ``"H100-SXM"``.
    :returns: a :class:`~tunesmith_hookspecs.types.DeviceInfo`, or ``None``.

    Example::

        @hookimpl
        def tunesmith_device_info(device):
            if str(device) == "MyAccel":
                return DeviceInfo("MyAccel", {"bfloat16": 400e12}, memory_bandwidth=2e12)
            return None
    """


# --- benchmarking ----------------------------------------------------------------------------


@hookspec(firstresult=True)
def tunesmith_benchmarker(options: Any) -> Benchmarker | None:
    """The benchmarking strategy.

    *firstresult*: stops at the first non-``None`` answer; the core's in-process benchmarker
    answers last (``trylast``), so any plugin implementing this hook replaces it.

    :param options: the resolved settings (``options.benchmark`` names the wanted mode).
    :returns: an object with ``benchmark(problem, choices, inputs) -> list[Timing]`` giving one
        :class:`~tunesmith_hookspecs.types.Timing` per choice, in order, ``math.inf`` for a
        choice that failed; or ``None``.

    An optional method adds more: ``prepare(device)``, called when a graph that may hold
    Problems on ``device`` (a ``torch.device``) starts compiling, gets ready to time there
    while the graph is traced, and must return at once; it may return a callable, called when
    the graph is compiled. (The core's benchmarker starts that device's worker process, and
    stops it then if no Problem used it: every choice was cached.)

    Example::

        @hookimpl
        def tunesmith_benchmarker(options):
            if options.benchmark == "remote-farm":
                return FarmBenchmarker(options)
            return None
    """


# --- caches ----------------------------------------------------------------------------------


@hookspec
def tunesmith_cache_layers(options: Any) -> Sequence[CacheLayer]:
    """Persistent cache layers this plugin offers under the current options.

    A layer is any object with ``name`` (what ``options.caches`` calls it), ``get(key: str) ->
    bytes | None`` and ``put(key: str, value: bytes) -> None``. Values are the core's JSON
    entries (signed when ``cache_secret`` is set); a layer stores bytes and never interprets
    them. The core catches, counts and warns about a layer's errors and skips a failing layer
    for a back-off period. Return an empty list when unconfigured. A layer name offered by two
    plugins is an error that names both (``local`` is the core's disk layer).

    Optional methods add more:

    - ``server_for(key) -> str``: the server that stores ``key``; a failing server is then
      skipped alone, not the whole layer.
    - ``acquire(key, ttl_s) -> str | None``, ``refresh(key, token, ttl_s) -> bool`` and
      ``release(key, token)``: a lock with a token and an expiry, for single-flight: when many
      processes miss the same key, the one that acquires it tunes (refreshing the lock) and the
      others wait for its entry (:class:`~tunesmith_hookspecs.types.SharedCacheLayer`).
    - ``keys()``, ``stats()`` and ``clear()``: what ``tunesmith cache stats|clear|export`` use
      (:class:`~tunesmith_hookspecs.types.ListableCacheLayer`).

    :param options: the resolved settings.
    :returns: a sequence of cache layers.

    Example::

        @hookimpl
        def tunesmith_cache_layers(options):
            return [RedisLayer(options.redis_url)] if options.redis_url else []
    """


@hookspec(
    warn_on_impl=DeprecationWarning(
        "tunesmith_cache_backends is deprecated: rename the implementation to tunesmith_cache_layers"
    )
)
def tunesmith_cache_backends(options: Any) -> Sequence[CacheLayer]:
    """Deprecated: the former name of :func:`tunesmith_cache_layers`, still called the same way.

    Registering an implementation warns with a ``DeprecationWarning``; its layers are used as if
    it were named ``tunesmith_cache_layers``. Renamed so that "backend" means only a kernel backend
    (the ``backends`` setting) and the hook is named after what it returns, a ``CacheLayer``. The
    old name goes only with the next ``SPEC_VERSION``.

    :param options: the resolved settings.
    :returns: a sequence of cache layers.

    Example::

        @hookimpl
        def tunesmith_cache_backends(options):  # old name: define tunesmith_cache_layers instead
            return [RedisLayer(options.redis_url)] if options.redis_url else []
    """


# --- graph passes and the graph compiler -----------------------------------------------------


@hookspec
def tunesmith_pre_grad_passes() -> Sequence[Callable[[Any], Any]]:
    """Passes run on the Dynamo FX graph, before AOTAutograd.

    A pass is a callable that changes a ``torch.fx.Graph`` in place (its return value is
    ignored). Its ``uuid`` attribute (or, for a plain function, a hash of its source) enters
    the compiled-graph cache key, so change it whenever the pass's behaviour changes.

    :returns: a sequence of passes, run in order.

    Example::

        @hookimpl
        def tunesmith_pre_grad_passes():
            return [merge_shared_weight_mms]
    """


@hookspec
def tunesmith_joint_graph_passes(stage: str) -> Sequence[Callable[[Any], Any]]:
    """Passes run on the joint forward-backward graph (and on forward-only inference graphs).

    :param stage: ``"pre"`` (before the core's own joint-graph work) or ``"post"`` (after).
    :returns: a sequence of passes, as for :func:`tunesmith_pre_grad_passes`.

    Example::

        @hookimpl
        def tunesmith_joint_graph_passes(stage):
            return [fold_constants] if stage == "post" else []
    """


@hookspec
def tunesmith_post_grad_passes(stage: str) -> Sequence[Callable[[Any], Any]]:
    """Passes run on the forward and backward graphs after AOTAutograd has split them.

    :param stage: ``"pre"`` (before lowering) or ``"post"`` (after lowering).
    :returns: a sequence of passes, as for :func:`tunesmith_pre_grad_passes`.

    Example::

        @hookimpl
        def tunesmith_post_grad_passes(stage):
            return [reorder_for_overlap] if stage == "post" else []
    """


@hookspec(firstresult=True)
def tunesmith_graph_compiler(options: Any) -> Callable[..., Any] | None:
    """What compiles the rest of a graph once its GEMMs are lowered.

    *firstresult*: stops at the first non-``None`` answer. Answer only when
    ``options.graph_compiler`` names yours; the core supplies ``eager`` and ``inductor``.

    :param options: the resolved settings.
    :returns: a callable ``(gm: torch.fx.GraphModule, example_inputs) -> callable``, or ``None``.

    Example::

        @hookimpl
        def tunesmith_graph_compiler(options):
            return my_compiler if options.graph_compiler == "mine" else None
    """


# --- observers -------------------------------------------------------------------------------


@hookspec
def tunesmith_selection_done(report: SelectionReport) -> None:
    """Observe one finished selection (tuned or answered from a cache): logs, metrics, dashboards.

    :param report: a :class:`~tunesmith_hookspecs.types.SelectionReport`.
    :returns: nothing.

    Example::

        @hookimpl
        def tunesmith_selection_done(report):
            statsd.timing("tunesmith.tuning_s", report.tuning_s)
    """
