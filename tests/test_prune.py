"""Pruning by the cost model: only the best ``prune`` estimates are benchmarked (none far above the
best, none far above ATen's), ATen's choices always are, more where the models are unsure of the
Problem, and without a device profile nothing is pruned."""

from __future__ import annotations

import attrs

import tunesmith
from tunesmith.cost.profiles import PRESETS
from tunesmith_hookspecs import ChoiceSpec, hookimpl

from conftest import rand

#: a Problem the models are sure of (aligned, K over SMALL_K, near the fitted sizes) and one they
#: are not (K of 16, a dimension of 20)
A, B = rand(128, 256), rand(256, 128)
SMALL_A, SMALL_B = rand(24, 16), rand(16, 20)
#: the modelled estimates below are in microseconds: ATen's for A @ B is about one launch (4 us)
US = 1e-3


@attrs.define
class Modelled:
    """A correct choice whose estimate the backend below reports."""

    spec: ChoiceSpec
    estimate: float | None

    def precompile(self) -> None:
        pass

    def kernel(self):
        return lambda a, b: a @ b


class ModelledBackend:
    """A run-time backend with one choice per estimate, and their estimates (None: no answer)."""

    name = "modelled"

    def __init__(self, *estimates: float | None, raises: bool = False) -> None:
        self.estimates, self.raises = estimates, raises

    @hookimpl
    def tunesmith_choices(self, problem, options):
        return [
            Modelled(ChoiceSpec(self.name, "mm", {"i": i}), None if e is None else e * US)
            for i, e in enumerate(self.estimates)
        ]

    @hookimpl
    def tunesmith_estimate_runtime(self, node, device):
        if not isinstance(node, Modelled):
            return None
        if self.raises:
            raise RuntimeError("model broke")
        return node.estimate


class CpuProfile:
    """A device-info plugin that gives the CPU the H100's profile, so that pruning runs here."""

    @hookimpl
    def tunesmith_device_info(self, device):
        return PRESETS["H100-SXM"] if str(device) == "cpu" else None


def benchmarked(sel: tunesmith.Selection) -> set[tuple[str, int | None]]:
    return {(s.backend, dict(s.params).get("i")) for s in sel.timings}


def test_only_the_best_estimates_and_aten_are_benchmarked(register):
    register(ModelledBackend(5.0, 1.0, 4.0, 1.05, 1.08))
    register(CpuProfile(), "cpu_profile")
    sel = tunesmith.tune("mm", A, B, options={"prune": 2})
    assert benchmarked(sel) == {("aten", None), ("modelled", 1), ("modelled", 3)}
    assert tunesmith.counters["choices_pruned"] == 3


def test_choices_estimated_past_the_window_are_not_benchmarked_even_within_prune(register):
    from tunesmith.cost.prune import WINDOW

    register(ModelledBackend(2.0, 1.0, 1.0 + WINDOW, 1.0 + 1.5 * WINDOW))
    register(CpuProfile(), "cpu_profile")
    sel = tunesmith.tune("mm", A, B, options={"prune": 3})  # (with 4 choices: pruning runs)
    assert benchmarked(sel) == {("aten", None), ("modelled", 1), ("modelled", 2)}
    assert tunesmith.counters["choices_pruned"] == 2


def test_choices_estimated_past_the_ceiling_atens_estimate_sets_are_not_benchmarked(register):
    from tunesmith.cost.prune import BASELINE_CEILING
    from tunesmith.problem import build_problem
    from tunesmith_aten.cost import estimate_ms

    aten = estimate_ms(build_problem("mm", [A, B], {}, ())[0], "eager", PRESETS["H100-SXM"]) / US
    over = aten * BASELINE_CEILING
    register(ModelledBackend(over * 1.01, over * 0.99, over * 0.98, over * 1.2))
    register(CpuProfile(), "cpu_profile")
    # all within the window of each other, and ATen sure to win (tests/test_skip.py): skipping off
    sel = tunesmith.tune("mm", A, B, options={"prune": 3, "skip_sure_aten": False})
    assert benchmarked(sel) == {("aten", None), ("modelled", 1), ("modelled", 2)}
    assert tunesmith.counters["choices_pruned"] == 2


def test_no_profile_or_prune_off_benchmarks_everything(register):
    register(ModelledBackend(5.0, 1.0, 4.0))
    sel = tunesmith.tune("mm", A, B, options={"prune": 1})  # the CPU has no profile
    assert len(sel.timings) == 4
    register(CpuProfile(), "cpu_profile")
    tunesmith.reset()
    assert len(tunesmith.tune("mm", A, B, options={"prune": None}).timings) == 4
    assert tunesmith.counters["choices_pruned"] == 0


def test_unestimated_choices_are_kept_outside_the_budget(register):
    """A choice no plugin estimates is benchmarked rather than dropped, and takes no place from
    the modelled ones."""
    register(ModelledBackend(None, 3.0, 1.0, None, 2.0))
    register(CpuProfile(), "cpu_profile")
    sel = tunesmith.tune("mm", A, B, options={"prune": 1})
    assert benchmarked(sel) == {("aten", None), ("modelled", 0), ("modelled", 2), ("modelled", 3)}
    assert tunesmith.counters["choices_pruned"] == 2


def test_an_estimate_or_a_profile_that_raises_does_not_stop_tuning(register):
    register(ModelledBackend(1.0, 2.0, raises=True))
    register(CpuProfile(), "cpu_profile")
    assert len(tunesmith.tune("mm", A, B, options={"prune": 1}).timings) == 3  # unestimated: all kept

    class BrokenProfile:
        @hookimpl(tryfirst=True)
        def tunesmith_device_info(self, device):
            raise RuntimeError("profile broke")

    register(BrokenProfile(), "broken_profile")
    tunesmith.reset()
    assert len(tunesmith.tune("mm", A, B, options={"prune": 1}).timings) == 3
    assert tunesmith.counters["choices_pruned"] == 0


def test_where_the_models_are_unsure_more_choices_are_kept_and_no_backend_is_dropped_whole(register):
    """K of 16: twice ``prune`` choices within ``UNSURE_WINDOW``, and each backend's best few past
    the window and ATen's ceiling."""
    from tunesmith.cost.prune import BASELINE_CEILING, UNSURE_PRUNE, UNSURE_WINDOW
    from tunesmith.problem import build_problem
    from tunesmith_aten.cost import estimate_ms

    class Other(ModelledBackend):
        name = "other"

    aten = estimate_ms(build_problem("mm", [SMALL_A, SMALL_B], {}, ())[0], "eager", PRESETS["H100-SXM"]) / US
    assert UNSURE_PRUNE == 2 and UNSURE_WINDOW == 0.5
    register(ModelledBackend(1.0, 1.2, 1.4, 1.45, 2.0, 1.1))
    register(Other(*(aten * BASELINE_CEILING * f for f in (3.0, 2.0, 4.0, 5.0))))  # past the ceiling: all
    register(CpuProfile(), "cpu_profile")
    sel = tunesmith.tune("mm", SMALL_A, SMALL_B, options={"prune": 2})
    kept = {("modelled", i) for i in (0, 5, 1, 2)} | {("other", 1), ("other", 0)}  # 4 best, each backend's 2 best
    assert benchmarked(sel) == {("aten", None), *kept}
    assert tunesmith.counters["prune_unsure"] == 1
    assert tunesmith.counters["choices_pruned"] == 4


def test_the_models_are_unsure_of_unaligned_small_k_and_far_problems():
    from tunesmith.cost.prune import unsure
    from tunesmith.problem import build_problem

    def why(op, *tensors):
        return unsure(build_problem(op, [t.to("meta") for t in tensors], {})[0])

    assert why("mm", A, B) == []
    assert why("bmm", rand(4, 128, 256), rand(4, 256, 128)) == []
    assert why("conv", rand(2, 64, 32, 32), rand(64, 64, 3, 3)) == []
    [odd] = why("mm", rand(3001, 200), rand(200, 2999))
    assert "not a multiple" in odd
    [small] = why("bmm", rand(96, 256, 64), rand(96, 64, 256))
    assert "K of 64" in small
    assert len(why("mm_plus_mm", A, B, rand(128, 64), rand(64, 128))) == 1  # the second product's K
    # a convolution's ceiling is backed by ResNet-50's measured choices, 3 input channels or not
    assert why("conv", rand(2, 3, 32, 32), rand(64, 3, 7, 7)) == []
    [far] = why("mm", rand(8, 4096), rand(4096, 8))  # 64 outputs
    assert "far" in far
