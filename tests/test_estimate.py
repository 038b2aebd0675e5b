"""``tunesmith.estimate``: programs traced on fake tensors, one row per node, on device presets.

Nothing here needs a GPU: inputs are meta tensors (or small CPU ones), and collectives are traced
under torch's fake process group of world size 8.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

import tunesmith
from tunesmith import hooks
from tunesmith.cost.collectives import collective_ms
from tunesmith.cost.graph import Row
from tunesmith.cost.profiles import PRESETS
from tunesmith_hookspecs import DeviceInfo, hookimpl

H100 = PRESETS["H100-SXM"]


def meta(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(*shape, dtype=dtype, device="meta")


def rows_of(est: tunesmith.Estimate, op: str) -> list[Row]:
    return [row for row in est.rows if row.op.startswith(op)]


def test_the_identity_and_views_cost_nothing():
    assert tunesmith.estimate(lambda x: x, meta(64, 64)).total_ms == 0
    est = tunesmith.estimate(lambda x: x.view(-1).view(64, 64).t().unsqueeze(0).expand(3, -1, -1)[1], meta(64, 64))
    assert len(est.rows) == 6, "each view is a row"
    assert est.total_ms == 0 and {row.bound for row in est.rows} == {"none"}
    # a reshape that must copy is no view
    copy = tunesmith.estimate(lambda x: x.t().reshape(-1), meta(64, 64))
    assert copy.total_ms > 0


# op, inputs, the ATen op its row shows, its FLOPs (0: costed by bytes)
CASES: dict[str, tuple[Callable, tuple[torch.Tensor, ...], str, int]] = {
    "mm": (torch.mm, (meta(64, 32), meta(32, 48)), "aten.mm", 2 * 64 * 48 * 32),
    "addmm": (torch.addmm, (meta(48), meta(64, 32), meta(32, 48)), "aten.addmm", 2 * 64 * 48 * 32),
    "bmm": (torch.bmm, (meta(4, 64, 32), meta(4, 32, 48)), "aten.bmm", 2 * 4 * 64 * 48 * 32),
    # N=2, Cin=3, Cout=8, kernel 3, out 30: 2·N·Cout·L_out·Cin·k
    "conv1d": (F.conv1d, (meta(2, 3, 32), meta(8, 3, 3)), "aten.convolution", 2 * 2 * 8 * 30 * 3 * 3),
    "conv2d": (F.conv2d, (meta(2, 3, 16, 16), meta(8, 3, 3, 3)), "aten.convolution", 2 * 2 * 8 * 14 * 14 * 3 * 9),
    "conv3d": (F.conv3d, (meta(2, 3, 8, 8, 8), meta(8, 3, 3, 3, 3)), "aten.convolution", 2 * 2 * 8 * 6**3 * 3 * 27),
    # transposed: each input element meets Cout·k·k weights (weight is [Cin, Cout, k, k])
    "conv_transpose2d": (
        F.conv_transpose2d,
        (meta(2, 8, 14, 14), meta(8, 3, 3, 3)),
        "aten.convolution",
        2 * 2 * 8 * 14 * 14 * 3 * 9,
    ),
    "grouped conv2d": (
        lambda x, w: F.conv2d(x, w, groups=2),
        (meta(2, 4, 16, 16), meta(8, 2, 3, 3)),
        "aten.convolution",
        2 * 2 * 8 * 14 * 14 * 2 * 9,
    ),
    "relu": (torch.relu, (meta(64, 64),), "aten.relu", 0),
    "reduction": (lambda x: x.sum(dim=1), (meta(64, 64),), "aten.sum", 0),
    "pointwise": (torch.add, (meta(64, 64), meta(64, 64)), "aten.add", 0),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_op_costs_something_and_gemms_count_their_flops(case):
    fn, inputs, op, flops = CASES[case]
    est = tunesmith.estimate(fn, *inputs)
    assert est.total_ms > 0
    (row,) = rows_of(est, op)
    assert row.ms > 0 and row.bytes > 0
    assert row.flops == flops
    if not flops:
        assert row.bound == "memory"


def test_linear_and_matmul_count_two_flops_per_multiply_add():
    est = tunesmith.estimate(lambda x, w: F.linear(x, w), meta(8, 16, 32), meta(24, 32))
    assert sum(row.flops for row in est.rows) == 2 * 8 * 16 * 24 * 32
    est = tunesmith.estimate(torch.matmul, meta(5, 16, 32), meta(32, 24))
    assert sum(row.flops for row in est.rows) == 2 * 5 * 16 * 24 * 32


def test_a_large_bf16_mm_is_near_its_flop_floor():
    n = 8192
    est = tunesmith.estimate(torch.mm, meta(n, n, dtype=torch.bfloat16), meta(n, n, dtype=torch.bfloat16))
    floor_ms = 2 * n**3 / dict(H100.peak_flops)["bfloat16"] * 1e3
    (row,) = rows_of(est, "aten.mm")
    assert row.bound == "compute"
    assert 0.9 <= est.total_ms / floor_ms <= 3


def test_a_large_float32_pointwise_op_is_near_its_byte_floor():
    n = 1 << 26
    est = tunesmith.estimate(torch.add, meta(n), meta(n))
    floor_ms = 3 * 4 * n / H100.memory_bandwidth * 1e3
    (row,) = rows_of(est, "aten.add")
    assert row.bound == "memory" and row.bytes == 3 * 4 * n
    assert 0.9 <= est.total_ms / floor_ms <= 3


def test_h200_moves_bytes_faster_than_h100():
    x = meta(1 << 24)
    h100 = tunesmith.estimate(torch.relu, x, device="H100-SXM")
    h200 = tunesmith.estimate(torch.relu, x, device="H200")
    assert 0 < h200.total_ms < h100.total_ms
    assert h200.device == "H200"


def test_float32_matmuls_use_tf32_only_where_torch_allows_it():
    a, b = meta(4096, 4096), meta(4096, 4096)
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        exact = tunesmith.estimate(torch.mm, a, b).total_ms
        torch.set_float32_matmul_precision("high")
        tf32 = tunesmith.estimate(torch.mm, a, b).total_ms
    finally:
        torch.set_float32_matmul_precision(before)
    peaks = dict(H100.peak_flops)
    assert exact / tf32 == pytest.approx(peaks["tf32"] / peaks["float32"])


def test_broadcast_inputs_are_read_once():
    est = tunesmith.estimate(torch.add, meta(1024, 1024), meta(1024))
    (row,) = rows_of(est, "aten.add")
    assert row.bytes == 4 * (1024 * 1024 * 2 + 1024)


def test_real_meta_and_fake_inputs_give_the_same_estimate():
    from torch._subclasses.fake_tensor import FakeTensorMode

    def fn(x, w):
        return torch.relu(x @ w).sum()

    real = tunesmith.estimate(fn, torch.randn(32, 16), torch.randn(16, 8))
    on_meta = tunesmith.estimate(fn, meta(32, 16), meta(16, 8))
    with FakeTensorMode() as mode:
        fake = (torch.empty(32, 16), torch.empty(16, 8))
    del mode
    faked = tunesmith.estimate(fn, *fake)
    assert real.rows == on_meta.rows == faked.rows
    assert real.total_ms > 0


def test_a_module_with_parameters_is_traced_without_running():
    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024))
    est = tunesmith.estimate(model, meta(8, 1024))
    assert sum(row.flops for row in est.rows) == 2 * 2 * 8 * 1024 * 4096
    assert est.total_ms == pytest.approx(sum(row.ms for row in est.rows))
    text = str(est)
    assert "aten.addmm.default" in text and "H100-SXM" in text and "total" in text


def test_device_may_be_a_deviceinfo_and_an_unknown_device_names_the_presets():
    mine = DeviceInfo("Mine", {"float32": 1e12}, memory_bandwidth=1e9)
    est = tunesmith.estimate(torch.relu, meta(1000), device=mine)
    assert est.device == "Mine" and est.total_ms == pytest.approx(8000 / 1e9 * 1e3)
    for device in ("no-such-gpu", torch.device("cpu")):
        with pytest.raises(tunesmith.TunesmithError, match="no device profile") as info:
            tunesmith.estimate(torch.relu, meta(4), device=device)
        assert all(name in str(info.value) for name in PRESETS)


def test_a_function_that_cannot_be_traced_gets_a_clear_error():
    def branchy(x):
        return x if x.sum() > 0 else -x

    with pytest.raises(tunesmith.TunesmithError, match="could not trace branchy"):
        tunesmith.estimate(branchy, torch.randn(4))


class MmModel:
    """A plugin that estimates mm nodes itself (every other node is left to the core)."""

    name = "mm-model"

    @hookimpl
    def tunesmith_estimate_runtime(self, node, device):
        return 7.5 if getattr(node, "target", None) is torch.ops.aten.mm.default else None


def test_a_plugin_answers_before_the_core_model():
    tunesmith.register(MmModel())
    try:
        est = tunesmith.estimate(lambda a, b: torch.relu(a @ b), meta(64, 64), meta(64, 64))
    finally:
        tunesmith.unregister("mm-model")
    (mm,) = rows_of(est, "aten.mm")
    (relu,) = rows_of(est, "aten.relu")
    assert mm.ms == 7.5 and mm.flops == 2 * 64**3
    assert 0 < relu.ms < 7.5


def test_the_core_model_leaves_choices_alone():
    assert hooks.estimate_runtime(object(), H100, tunesmith.current_options()) is None


def test_nodes_no_plugin_estimates_are_unknown_rows():
    with tunesmith.options(disabled_plugins=["core"]):
        est = tunesmith.estimate(torch.relu, meta(64), device=H100)
    (row,) = est.rows
    assert row.bound == "unknown" and row.ms == 0 and row.bytes == 2 * 4 * 64


# --- collectives --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def world() -> Iterator[int]:
    """The default process group: torch's fake backend, world size 8, no communication."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=8)
    try:
        yield 8
    finally:
        dist.destroy_process_group()


def _functional() -> dict[str, Callable]:
    """Each collective in the functional spelling: the ``_c10d_functional`` ops that
    ``torch.distributed._functional_collectives`` and torch.compile emit, each with its wait."""
    ops, name = torch.ops._c10d_functional, dist.group.WORLD.group_name

    def wait(out):
        return [ops.wait_tensor(t) for t in out] if isinstance(out, list | tuple) else ops.wait_tensor(out)

    return {
        "functional all_reduce": lambda x: wait(ops.all_reduce(x, "sum", name)),
        "functional all_gather_into_tensor": lambda x: wait(ops.all_gather_into_tensor(x, 8, name)),
        "functional reduce_scatter_tensor": lambda x: wait(ops.reduce_scatter_tensor(x, "sum", 8, name)),
        "functional all_reduce_coalesced": lambda x: wait(ops.all_reduce_coalesced([x, x], "sum", name)),
        "functional all_gather_into_tensor_coalesced": lambda x: wait(
            ops.all_gather_into_tensor_coalesced([x, x], 8, name)
        ),
        "functional reduce_scatter_tensor_coalesced": lambda x: wait(
            ops.reduce_scatter_tensor_coalesced([x, x], "sum", 8, name)
        ),
    }


def _legacy_all_gather_coalesced(x):
    with dist._coalescing_manager():
        dist.all_gather_into_tensor(x.new_empty(8 * x.shape[0], x.shape[1]), x)
        dist.all_gather_into_tensor(x.new_empty(8 * x.shape[0], x.shape[1]), x)


def _legacy_reduce_scatter_coalesced(x):
    with dist._coalescing_manager():
        dist.reduce_scatter_tensor(x.new_empty(x.shape[0] // 8, x.shape[1]), x)
        dist.reduce_scatter_tensor(x.new_empty(x.shape[0] // 8, x.shape[1]), x)


LEGACY: dict[str, Callable] = {
    "c10d all_reduce": lambda x: dist.all_reduce(x),
    "c10d all_gather_into_tensor": lambda x: dist.all_gather_into_tensor(x.new_empty(8 * x.shape[0], x.shape[1]), x),
    "c10d reduce_scatter_tensor": lambda x: dist.reduce_scatter_tensor(x.new_empty(x.shape[0] // 8, x.shape[1]), x),
    "c10d all_reduce_coalesced": lambda x: dist.all_reduce_coalesced([x, x]),
    "c10d all_gather_into_tensor_coalesced": _legacy_all_gather_coalesced,
    "c10d reduce_scatter_tensor_coalesced": _legacy_reduce_scatter_coalesced,
}
COLLECTIVES = [
    *(f"functional {n}" for n in ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor")),
    *(f"functional {n}_coalesced" for n in ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor")),
    *LEGACY,
]


@pytest.mark.parametrize("case", COLLECTIVES)
def test_each_collective_gets_a_positive_estimate(world, case):
    fn = {**_functional(), **LEGACY}[case]
    est = tunesmith.estimate(fn, meta(1024, 1024))
    network = [row for row in est.rows if row.bound == "network"]
    assert len(network) == 1 and network[0].ms > 0
    assert est.total_ms >= network[0].ms
    waits = [row for row in est.rows if "wait_tensor" in row.op]
    assert case.startswith("c10d") or waits
    assert all(row.ms == 0 and row.bound == "none" for row in waits)


@pytest.mark.parametrize("kind", ["all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor"])
def test_both_spellings_agree_and_coalescing_sums_the_messages(world, kind):
    x = meta(1024, 1024)
    functional, legacy = _functional(), LEGACY
    one = tunesmith.estimate(functional[f"functional {kind}"], x).total_ms
    assert tunesmith.estimate(legacy[f"c10d {kind}"], x).total_ms == pytest.approx(one)
    nbytes = 4 * 1024 * 1024 * (8 if kind == "all_gather_into_tensor" else 1)
    model = {"all_reduce": "all_reduce", "all_gather_into_tensor": "all_gather"}.get(kind, "reduce_scatter")
    assert one == pytest.approx(collective_ms(model, nbytes, 8, H100)[0])
    both = tunesmith.estimate(functional[f"functional {kind}_coalesced"], x).total_ms
    assert both == pytest.approx(collective_ms(model, 2 * nbytes, 8, H100)[0])
    assert one < both < 2 * one  # one latency for both tensors


def test_the_world_size_comes_from_the_ops_group(world):
    import torch.distributed._functional_collectives as fc  # the user-facing wrapper of the ops

    half = dist.new_group([0, 1, 2, 3])
    x = meta(1 << 20)
    est = tunesmith.estimate(lambda x: fc.all_reduce(x, "sum", half), x)
    assert est.total_ms == pytest.approx(collective_ms("all_reduce", 4 << 20, 4, H100)[0])
    legacy = tunesmith.estimate(lambda x: dist.all_reduce(x, group=half), x)
    assert legacy.total_ms == pytest.approx(est.total_ms)


def test_the_alpha_beta_model_picks_tree_for_small_and_ring_for_large_messages():
    b, a, p = H100.interconnect_bandwidth, H100.interconnect_latency_s, 8
    ms, algorithm = collective_ms("all_reduce", 1 << 30, p, H100)
    assert algorithm == "ring"
    assert ms == pytest.approx((2 * (p - 1) / p * (1 << 30) / b + 2 * (p - 1) * a) * 1e3)
    ms, algorithm = collective_ms("all_reduce", 1024, p, H100)
    assert algorithm == "tree"
    assert ms == pytest.approx((2 * 1024 / b + 2 * math.log2(p) * a) * 1e3)
    ms, algorithm = collective_ms("all_gather", 1 << 30, p, H100)
    assert algorithm == "ring" and ms == pytest.approx(((p - 1) / p * (1 << 30) / b + (p - 1) * a) * 1e3)
    assert collective_ms("all_reduce", 1 << 30, 1, H100) == (0.0, "none")
    assert collective_ms("all_reduce", 1 << 30, p, PRESETS["H100-PCIe"])[0] > ms
