"""Selection of one Problem's kernel: memory, then the cache layers, else tune and store.

Tuning gathers choices from every enabled backend, prunes them by the cost model, times them
with the benchmarker, picks the fastest (ties go to the earlier backend in ``backends``),
optionally verifies it against the float64 reference, and stores the answer in every layer.
Where the cost model is sure ATen wins (``cost/skip.py``), no tune runs: ATen's choice is taken,
kept in memory only (``source`` "skipped").
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch

from tunesmith import hooks
from tunesmith.attention import OP as ATTENTION
from tunesmith.bench.inprocess import BUDGET_EXHAUSTED, runnable
from tunesmith.cache.dist_store import NAME as JOB_LAYER
from tunesmith.cache.flight import HeldElsewhere, SingleFlight
from tunesmith.cache.keys import device_name, selection_key
from tunesmith.cache.stack import CacheStack
from tunesmith.capture import capturing
from tunesmith.config import Options
from tunesmith.cost.prune import prune
from tunesmith.cost.skip import skip_to_aten, skips
from tunesmith.counting import bump
from tunesmith.errors import CaptureError, NoValidChoicesError, TunesmithWarning
from tunesmith.fleet import Arrivals, builds_ahead, deferring, defers, patience
from tunesmith.ops import measured, reference, relative_error, tolerance
from tunesmith.plugins import get_system
from tunesmith.problem import check_fits
from tunesmith_hookspecs import Choice, ChoiceSpec, Problem, SelectionReport, Timing, structure, unstructure

log = logging.getLogger(__name__)

#: the most that measured noise widens a tie (a noisier measurement says little either way)
MAX_NOISE_TIE = 0.05
#: the standard error of a median of n samples, in interquartile ranges over the square root of n
#: (for normally spread samples: 1.2533 standard deviations, and an interquartile range is 1.349)
MEDIAN_STANDARD_ERROR = 0.93
#: two medians this many standard errors of their difference apart are not a tie
TIE_STANDARD_ERRORS = 2.0


@attrs.frozen
class SelectionEntry:
    """The payload of an autotune cache entry."""

    chosen: ChoiceSpec
    timings: tuple[Timing, ...]
    device_name: str
    tuning_s: float
    budget_exhausted: bool = False
    #: the Problem tuned (for ``tunesmith report``); None in entries written before it was stored
    problem: Problem | None = None


@attrs.frozen(eq=False)
class Selection:
    """The answer for one Problem: the chosen spec, every time measured, and a runnable kernel."""

    problem: Problem
    spec: ChoiceSpec
    timings: dict[ChoiceSpec, float]
    kernel: Callable[..., Any]
    cached: bool
    report: SelectionReport

    def __call__(self, *tensors: torch.Tensor) -> torch.Tensor:
        return self.kernel(*tensors)


#: the ``source`` of a selection taken without a tune (``cost/skip.py``)
SKIPPED = "skipped"

_memory: dict[str, Selection] = {}
_memory_lock = threading.Lock()
#: keys this process found held by another process (``defer``) and has not selected since
_deferred: set[str] = set()
#: the winners of those keys, rebuilt and precompiled here as other processes publish them
_arrivals: Arrivals[SelectionEntry, Choice | None] = Arrivals()


def clear_memory() -> None:
    with _memory_lock:
        _memory.clear()
    _deferred.clear()
    _arrivals.clear()


def describe(problem: Problem) -> str:
    shapes = " x ".join(str(tuple(m.shape)) for m in problem.inputs[: problem.num_op_inputs])
    steps = "".join(f" -> {s.name}" for s in problem.epilogue)
    return f"{problem.op} {shapes} {problem.inputs[0].dtype} on {problem.device}{steps}"


def _backends_with_versions(options: Options) -> list[tuple[str, str | None]]:
    records = get_system().records
    return [(name, records[name].version if name in records else None) for name in hooks.backend_names(options)]


def _make(problem: Problem, key: str, entry: SelectionEntry, kernel: Callable[..., Any], source: str) -> Selection:
    report = SelectionReport(
        problem, key, entry.chosen, entry.timings, source, entry.device_name, entry.tuning_s, entry.budget_exhausted
    )
    timings = {t.spec: t.ms for t in entry.timings}
    return Selection(problem, entry.chosen, timings, kernel, source != "tuned", report)


def select(problem: Problem, inputs: Sequence[torch.Tensor], options: Options) -> Selection:
    """The selection for ``problem``, from the first cache layer that has it, else freshly tuned.
    Raises :class:`CaptureError` during a CUDA graph's capture (a compiled graph selects its
    kernels when compiling or in the warm-up run before capture). Within ``fleet.deferring()``,
    raises :class:`HeldElsewhere` where another process is tuning it, instead of waiting (and with
    ``ahead``, where its winner, found in the caches, is still being built on a thread here)."""
    if capturing():
        raise CaptureError(f"cannot select a kernel for {describe(problem)} while a CUDA graph is captured")
    device = inputs[0].device
    key = selection_key(problem, device, _backends_with_versions(options))
    if (selection := _from_memory(problem, inputs, key, options)) is not None:
        return selection
    if builds_ahead() and _arrivals.building(key):
        raise HeldElsewhere(key)  # its winner, found before, is still being built here
    stack = CacheStack(hooks.cache_layers(options), "autotune", options.cache_secret, options.cache_backoff_s)

    first = stack.get(key, _parse_entry)
    if first is not None and builds_ahead() and not _arrivals.ready(key, first[0]):
        # split with other processes: its winner is built on a thread while this one tunes others
        _arrivals.watch(key, stack, _parse_entry, *_watching(problem, options, device), entry=first[0])
        raise HeldElsewhere(key)
    selection = _found(stack, problem, inputs, key, first, options)
    if selection is not None and key in _deferred:
        bump("autotune_taken")  # another process tuned it while this one held off
    offered = None
    if selection is None:
        offered = _offered(problem, options)
        selection = _skipped(problem, inputs, key, offered[0], options, device)
    if selection is None:
        ttl_s, wait_s = options.cache_lock_ttl_s, patience(options.cache_lock_wait_s)
        flight = SingleFlight(stack, key, _parse_entry, ttl_s, wait_s, defers(), seen=first)
        try:
            with flight as found:
                selection = _found(stack, problem, inputs, key, found, options)  # another process tuned it meanwhile
                if selection is not None:
                    bump("autotune_taken")
                else:
                    with deferring(False):  # a selection inside the tune waits as usual
                        entry, kernel = _tune(problem, inputs, options, device, offered)
                    ms = next((t.ms for t in entry.timings if t.spec == entry.chosen), math.nan)
                    log.info(
                        "tuned %s: %s at %.4f ms, of %d choices in %.1f s",
                        describe(problem), entry.chosen, ms, len(entry.timings), entry.tuning_s,
                    )  # fmt: skip
                    theirs = stack.put(key, unstructure(entry), _parse_entry)
                    bump("autotune_tuned")
                    selection = _job_answer(
                        problem, inputs, key, _make(problem, key, entry, kernel, "tuned"), theirs, options
                    )
        except HeldElsewhere:  # raised before the block (nothing held): the caller comes back later
            if key not in _deferred:
                _deferred.add(key)
                bump("autotune_deferred")
                _arrivals.watch(key, stack, _parse_entry, *_watching(problem, options, device))
            raise
    _deferred.discard(key)
    _arrivals.forget(key)
    with _memory_lock:
        _memory[key] = selection
    hooks.selection_done(selection.report, options)
    return selection


def lookup(problem: Problem, inputs: Sequence[torch.Tensor], options: Options) -> Selection | None:
    """The selection for ``problem`` from memory or the first cache layer that has it, or None
    where nobody has tuned it: nothing is tuned here (background tuning's first look)."""
    key = selection_key(problem, inputs[0].device, _backends_with_versions(options))
    if (selection := _from_memory(problem, inputs, key, options)) is not None:
        return selection
    stack = CacheStack(hooks.cache_layers(options), "autotune", options.cache_secret, options.cache_backoff_s)
    selection = _found(stack, problem, inputs, key, stack.get(key, _parse_entry), options)
    if selection is not None:
        with _memory_lock:
            _memory[key] = selection
        hooks.selection_done(selection.report, options)
    return selection


def _from_memory(problem: Problem, inputs: Sequence[torch.Tensor], key: str, options: Options) -> Selection | None:
    with _memory_lock:
        hit = _memory.get(key)
    if hit is not None and hit.report.source == SKIPPED and not skips(options):
        return None  # a skip, with skipping now off: tune it
    if hit is None or (options.verify and _verify(problem, hit.spec, hit.kernel, inputs) is not None):
        return None
    bump("autotune_memory_hit")
    selection = attrs.evolve(hit, cached=True, report=attrs.evolve(hit.report, source="memory"))
    hooks.selection_done(selection.report, options)
    return selection


def _found(
    stack: CacheStack,
    problem: Problem,
    inputs: Sequence[torch.Tensor],
    key: str,
    found: tuple[SelectionEntry, str] | None,
    options: Options,
) -> Selection | None:
    """The selection of a cache entry, if it runs here; one from this process's own layers is
    published to its ``torch.distributed`` job, whose answer wins (:func:`_job_answer`)."""
    selection = _cached(problem, inputs, key, found, options)
    if selection is None or found is None or found[1] == JOB_LAYER:
        return selection
    return _job_answer(
        problem, inputs, key, selection, stack.publish(key, unstructure(found[0]), _parse_entry), options
    )


def _parse_entry(payload: Any) -> SelectionEntry:
    return structure(payload, SelectionEntry)


def _job_answer(
    problem: Problem,
    inputs: Sequence[torch.Tensor],
    key: str,
    selection: Selection,
    theirs: tuple[SelectionEntry, str] | None,
    options: Options,
) -> Selection:
    """The entry another rank of this ``torch.distributed`` job published first, where it chose
    another kernel and that kernel runs here (``autotune_job_answer``): every rank runs the same;
    else ``selection``."""
    if theirs is None or theirs[0].chosen == selection.spec:
        return selection
    adopted = _cached(problem, inputs, key, theirs, options)
    if adopted is None:
        return selection
    bump("autotune_job_answer")
    return adopted


def _cached(
    problem: Problem,
    inputs: Sequence[torch.Tensor],
    key: str,
    found: tuple[SelectionEntry, str] | None,
    options: Options,
) -> Selection | None:
    """The selection of a cache entry, if it rebuilds here (and, with ``verify``, is right)."""
    selection = _from_cache(problem, key, *found, options) if found else None
    if selection is not None and options.verify and _verify(problem, selection.spec, selection.kernel, inputs):
        return None
    return selection


def _from_cache(problem: Problem, key: str, entry: SelectionEntry, layer: str, options: Options) -> Selection | None:
    built = _arrivals.claim(key, entry)  # rebuilt already, as it arrived (another process's winner)?
    error = "no installed plugin rebuilds it"
    try:
        if built is not None:
            choice = built.result()
        else:
            choice = hooks.rebuild_choice(entry.chosen, problem, options)
            if choice is not None:
                choice.precompile()
        if choice is not None:
            return _make(problem, key, entry, choice.kernel(), layer)
    except Exception as exc:  # noqa: BLE001 - a stale entry is re-tuned, not fatal
        error = f"{type(exc).__name__}: {exc}"
    bump("cache_rebuild_failed")
    warnings.warn(
        f"cached choice {entry.chosen} (from {layer!r}) cannot run here ({error}); tuning again",
        TunesmithWarning,
        stacklevel=3,
    )
    return None


def _watching(
    problem: Problem, options: Options, device: torch.device
) -> tuple[Callable[[SelectionEntry], Choice | None], int, float]:
    """How :data:`_arrivals` builds an entry's winner on a thread (rebuilt and precompiled, on
    ``device``'s GPU where it is one; None where no plugin rebuilds it), how many at once, and
    how long it looks for the entry."""

    def build(entry: SelectionEntry) -> Choice | None:
        choice = hooks.rebuild_choice(entry.chosen, problem, options)
        if choice is not None:
            with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
                choice.precompile()
        return choice

    return build, options.compile_threads, options.cache_lock_wait_s


def _offered(problem: Problem, options: Options) -> tuple[list[Choice], dict[str, str]]:
    """Every enabled backend's choices for ``problem`` and why the others offered none; raises
    :class:`NoValidChoicesError` where none is offered."""
    choices, reasons = hooks.choices(problem, options)
    if not choices:
        raise NoValidChoicesError(describe(problem), reasons)
    return choices, reasons


def _skipped(
    problem: Problem,
    inputs: Sequence[torch.Tensor],
    key: str,
    choices: Sequence[Choice],
    options: Options,
    device: torch.device,
) -> Selection | None:
    """ATen's choice without a tune where the cost model is sure it wins (``tune_skipped_aten``),
    with ``verify`` checked; stored in no cache layer, so that a tune with skipping off still runs."""
    start = time.monotonic()
    choice = skip_to_aten(choices, options, device, problem)
    if choice is None:
        return None
    try:
        choice.precompile()
        kernel = choice.kernel()
    except Exception as exc:  # noqa: BLE001 - the tune decides instead
        log.warning("ATen's %s for %s cannot run (%s): tuning", choice.spec, describe(problem), exc)
        return None
    if options.verify and _verify(problem, choice.spec, kernel, inputs) is not None:
        return None
    bump("tune_skipped_aten")
    log.info("skipped tuning %s: the cost model is sure ATen wins (%s)", describe(problem), choice.spec)
    report = SelectionReport(
        problem, key, choice.spec, (), SKIPPED, device_name(device), time.monotonic() - start, False
    )
    return Selection(problem, choice.spec, {}, kernel, False, report)


def _tune(
    problem: Problem,
    inputs: Sequence[torch.Tensor],
    options: Options,
    device: torch.device,
    offered: tuple[list[Choice], dict[str, str]] | None = None,
) -> tuple[SelectionEntry, Callable[..., Any]]:
    start = time.monotonic()
    check_fits(problem, device)  # here, not per call: only a tuning allocates the Problem's tensors
    choices, reasons = offered if offered is not None else _offered(problem, options)
    choices = prune(choices, options, device, problem)
    timings = hooks.benchmarker(options).benchmark(problem, choices, inputs)
    if len(timings) != len(choices):
        raise RuntimeError(f"the benchmarker returned {len(timings)} timings for {len(choices)} choices")
    timings = list(timings)
    ref = reference(problem, inputs) if checks_winner(problem, options) else None
    for i in ranked(timings, options.tie_tolerance, options.bench_repeat):
        try:
            kernel = runnable(choices[i])  # a choice timed in a worker is compiled here only now
        except Exception as exc:  # noqa: BLE001 - the next best is taken
            timings[i] = Timing(choices[i].spec, math.inf, f"cannot run in this process: {exc}")
            continue
        if ref is not None and (why := _verify(problem, choices[i].spec, kernel, inputs, ref)) is not None:
            timings[i] = Timing(choices[i].spec, math.inf, why)
            continue
        entry = SelectionEntry(
            choices[i].spec,
            tuple(timings),
            device_name(device),
            time.monotonic() - start,
            any(t.error == BUDGET_EXHAUSTED for t in timings),
            problem,
        )
        return entry, kernel
    raise NoValidChoicesError(describe(problem), {**reasons, **_failures(choices, timings)})


def checks_winner(problem: Problem, options: Options) -> bool:
    """Whether a fresh tuning checks its winner against float64 before it wins: with ``verify``, and
    always for attention, whose fused kernels can be wrong on one mask's structure and right on
    another's (one reference and one run per tuned problem; docs/decisions.md)."""
    return options.verify or problem.op == ATTENTION


def ranked(timings: Sequence[Timing], tie_tolerance: float, samples: int) -> list[int]:
    """The timed choices, best first. Times within ``tie_tolerance`` of the best, or within twice
    the standard error of the two medians' difference (each a median of ``samples`` repeats,
    its noise the spread; up to ``MAX_NOISE_TIE``), are ties, won by the earlier choice (the
    earlier backend in ``backends``), so that every process picks the same."""
    left = [i for i, t in enumerate(timings) if t.ok]
    order = []
    while left:
        best = min(left, key=lambda i: timings[i].ms)
        fastest = timings[best]
        winner = next(
            i for i in left if timings[i].ms <= fastest.ms * (1 + _margin(tie_tolerance, fastest, timings[i], samples))
        )
        order.append(winner)
        left.remove(winner)
    return order


def _margin(tie_tolerance: float, a: Timing, b: Timing, samples: int) -> float:
    error = MEDIAN_STANDARD_ERROR * math.hypot(a.noise, b.noise) / math.sqrt(max(samples, 1))
    return max(tie_tolerance, min(TIE_STANDARD_ERRORS * error, MAX_NOISE_TIE))


def _verify(
    problem: Problem,
    spec: ChoiceSpec,
    kernel: Callable[..., Any],
    inputs: Sequence[torch.Tensor],
    ref: Any = None,
) -> str | None:
    """None when ``kernel`` matches the float64 reference (``ref``, computed when not given), else
    why not (counted and warned about)."""
    try:
        with torch.no_grad():
            err = relative_error(measured(problem, kernel)(*inputs), reference(problem, inputs) if ref is None else ref)
    except Exception as exc:  # noqa: BLE001 - a kernel that raises is as wrong as one that miscomputes
        bump("verify_rejected")
        why = f"verify: the kernel raised {type(exc).__name__}: {exc}"
        warnings.warn(f"{why}: not using {spec}", TunesmithWarning, stacklevel=4)
        return why
    tol = tolerance(problem)
    if err <= tol:
        return None
    bump("verify_rejected")
    why = f"verify: relative error {err:.3g} > {tol:g}"
    warnings.warn(f"{why}: {spec} is wrong for {describe(problem)}; not using it", TunesmithWarning, stacklevel=4)
    return why


def _failures(choices: Sequence[Choice], timings: Sequence[Timing]) -> dict[str, str]:
    by_backend: dict[str, list[str]] = {}
    for choice, timing in zip(choices, timings, strict=True):
        by_backend.setdefault(choice.spec.backend, []).append(f"{choice.spec}: {timing.error}")
    return {
        backend: f"all {len(errs)} choice(s) failed: " + "; ".join(errs[:3]) + (" ..." if len(errs) > 3 else "")
        for backend, errs in by_backend.items()
    }
