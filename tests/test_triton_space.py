"""The Triton plugin's search space is never behind Inductor's: on an H100 (its figures given, no
GPU needed) every config Inductor's max-autotune would try for a problem, by the description in
``tunesmith_triton/inductor.py``, is offered; that description holds the installed torch's own
lists where its private heuristics can be imported; and pruning keeps Triton choices, Inductor's
among them, on the shapes where Inductor's Triton kernels beat cuBLAS and the models are unsure."""

from __future__ import annotations

import pytest
import torch
from tunesmith_triton import inductor
from tunesmith_triton.choice import Config, TritonChoice, precision
from tunesmith_triton.configs import H100, configs_for, dims, fits
from tunesmith_triton.conv import conv_configs, conv_sizes

import tunesmith
from tunesmith.cost.profiles import PRESETS
from tunesmith.problem import build_problem, on_device
from tunesmith_hookspecs import ChoiceSpec, Problem

F16, BF16, F32 = torch.float16, torch.bfloat16, torch.float32


def meta(*shape: int, dtype: torch.dtype = BF16) -> torch.Tensor:
    return torch.empty(*shape, dtype=dtype, device="meta")


def gemm(op: str, *tensors: torch.Tensor) -> Problem:
    return on_device(build_problem(op, list(tensors), {})[0], "cuda")


#: the two shapes where Inductor's Triton kernel beat cuBLAS and tunesmith's did not: an fp16
#: GEMM of odd dimensions with K about 500 (28% faster than cuBLAS; every Triton choice pruned),
#: and attention scores over ~100 heads with K 64 (8% faster; tunesmith's best Triton 18% slower)
LOSERS = {
    "odd_fp16": lambda: gemm("mm", meta(3001, 501, dtype=F16), meta(501, 2999, dtype=F16)),
    "bmm_heads_k64": lambda: gemm("bmm", meta(96, 1024, 64), meta(96, 1024, 64).transpose(1, 2)),
}
GEMMS = {
    **LOSERS,
    "square": lambda: gemm("mm", meta(8192, 8192), meta(8192, 8192)),
    "decode_t": lambda: gemm("mm", meta(16, 4096), meta(11008, 4096).t()),
    "decode_down": lambda: gemm("mm", meta(16, 11008), meta(4096, 11008).t()),
    "one_row": lambda: gemm("mm", meta(1, 4096), meta(4096, 4096)),
    "small_k": lambda: gemm("mm", meta(2240, 256), meta(256, 2048)),
    "odd_1000": lambda: gemm("mm", meta(1000, 1000), meta(1000, 1000)),
    "fp32": lambda: gemm("mm", meta(2048, 2048, dtype=F32), meta(2048, 2048, dtype=F32)),
    "fp16_col_a": lambda: gemm("mm", meta(4096, 4096, dtype=F16).t(), meta(4096, 4096, dtype=F16)),
    "tiny": lambda: gemm("mm", meta(16, 16), meta(16, 16)),
    "addmm": lambda: gemm("addmm", meta(8192), meta(2048, 2048), meta(2048, 8192)),
    "bmm": lambda: gemm("bmm", meta(32, 1024, 128), meta(32, 128, 1024)),
    "baddbmm": lambda: gemm(
        "baddbmm", meta(64, 512, 512, dtype=F16), meta(64, 512, 64, dtype=F16), meta(64, 64, 512, dtype=F16)
    ),
    "mm_plus_mm": lambda: gemm("mm_plus_mm", meta(2048, 64), meta(64, 1536), meta(2048, 64), meta(64, 1536)),
    "mm_plus_mm_k32": lambda: gemm("mm_plus_mm", meta(256, 32), meta(32, 256), meta(256, 32), meta(32, 256)),
}  # fmt: skip


def conv(x: torch.Tensor, w: torch.Tensor, **scalars: object) -> Problem:
    return on_device(build_problem("conv", [x, w], scalars)[0], "cuda")


CONVS = {
    "stem": lambda: conv(meta(32, 3, 224, 224), meta(64, 3, 7, 7), stride=2, padding=3),
    "res_3x3": lambda: conv(meta(32, 64, 56, 56), meta(64, 64, 3, 3), padding=1),
    "res_1x1": lambda: conv(meta(32, 64, 56, 56), meta(256, 64, 1, 1)),
    "late_7x7_pixels": lambda: conv(meta(32, 512, 7, 7), meta(512, 512, 3, 3), padding=1),
    "fp32": lambda: conv(meta(8, 128, 28, 28, dtype=F32), meta(128, 128, 3, 3, dtype=F32), padding=1),
}

Tile = tuple[int, int, int, int, int]


def inductors(problem: Problem) -> list[Tile]:
    """What Inductor would try for a GEMM problem, by ``inductor.py``'s description."""
    _, m, n, k = dims(problem)
    return inductor.mm_plus_mm_configs(k) if problem.op == "mm_plus_mm" else inductor.mm_configs(m, n, k)


def fitting(problem: Problem, tiles: list[Tile]) -> list[Tile]:
    """The tiles whose pipeline fits an H100's shared memory (the others fail to compile)."""
    size = torch.empty((), dtype=getattr(torch, problem.inputs[0].dtype)).element_size()
    return [t for t in tiles if fits(Config(*t[:3], 8, *t[3:]), size, H100.shared_memory)]


def tile(config) -> Tile:
    return config.block_m, config.block_n, config.block_k, config.num_warps, config.num_stages


@pytest.mark.parametrize("name", sorted(GEMMS))
def test_every_gemm_config_inductor_would_try_is_offered(name):
    problem = GEMMS[name]()
    offered = {tile(c) for template, c in configs_for(problem, False, H100) if template == "gemm" and c.split_k == 1}
    theirs = fitting(problem, inductors(problem))
    assert theirs, "Inductor tries something on every case here"
    assert [t for t in theirs if t not in offered] == []


@pytest.mark.parametrize("name", sorted(CONVS))
def test_every_conv_config_inductor_would_try_is_offered(name):
    """Inductor's tiles with BLOCK_M cut to one image's pixels: our template tiles one image at a
    time, so a taller tile than twice its pixels (a power of two) would only hold masked rows."""
    problem = CONVS[name]()
    images, pixels, oc, c, taps = conv_sizes(problem)
    _, _, h, w = problem.inputs[0].shape
    cut = 16
    while cut < pixels:
        cut *= 2
    theirs = inductor.conv_configs(images, h * w, oc, c, one_by_one=taps == 1)
    theirs = fitting(problem, list(dict.fromkeys((min(bm, cut), *rest) for bm, *rest in theirs)))
    offered = {tile(c) for c in conv_configs(problem, False, H100)}
    assert theirs and [t for t in theirs if t not in offered] == []


def test_inductors_rules_as_described():
    """Spot checks of the description: blocks cut to the problem (at least 16), warps to one per
    256 outputs, mm + mm's configs uncut and shallower than K, conv's warps at most 4 unless 1 x 1."""
    assert set(inductor.mm_configs(16, 16, 16)) == {(16, 16, 16, 1, s) for s in (1, 2, 3, 4, 5)}
    assert (128, 256, 64, 8, 4) in inductor.mm_configs(4096, 4096, 4096)
    assert (64, 64, 64, 8, 3) in inductor.mm_configs(96, 1024, 64)
    assert (16, 64, 32, 4, 5) in inductor.mm_configs(16, 1024, 64)  # 32 x 64 x 32 with 8 warps, cut to 16 rows
    assert all(t[2] < 64 for t in inductor.mm_plus_mm_configs(64))
    assert (64, 64, 32, 16, 4) in inductor.mm_plus_mm_configs(2048)
    assert max(t[3] for t in inductor.conv_configs(32, 56 * 56, 64, 64, one_by_one=False)) == 4
    assert (1024, 16, 16, 8, 1) in inductor.conv_configs(32, 56 * 56, 64, 64, one_by_one=True)


def _torch_heuristics():
    """torch's private config heuristics for CUDA, or a skip saying why they cannot be read."""
    try:
        from torch._inductor import config
        from torch._inductor.template_heuristics import triton as heuristics
        from torch._inductor.virtualized import V
    except ImportError as exc:
        pytest.skip(f"torch {torch.__version__} has no importable Inductor template heuristics ({exc})")
    if not hasattr(heuristics, "CUDAConfigHeuristic"):
        pytest.skip(f"torch {torch.__version__}'s heuristics have no CUDAConfigHeuristic")
    return config, heuristics, V


class _Sizes:
    """Static sizes for Inductor's heuristics outside a graph: every hint is the size itself."""

    def optimization_hint_with_override(self, expr, hint_override=None):
        return int(expr)

    def size_hint(self, expr, fallback=None, hint_override=None):
        return int(expr)

    def statically_known_lt(self, left, right):
        return int(left) < int(right)


class _Graph:
    sizevars = _Sizes()


def _tiles(configs) -> set[Tile]:
    return {(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.kwargs["BLOCK_K"], c.num_warps, c.num_stages) for c in configs}


SHAPES = [(3001, 2999, 501), (1024, 1024, 64), (16, 4096, 4096), (8192, 8192, 8192), (16, 16, 16), (1, 11008, 4096)]


def test_the_description_holds_the_installed_torchs_own_lists():
    """torch's own mm, bmm, addmm, mm + mm and conv configs, scaled by its own code for each shape,
    are all in ``inductor.py``'s description; and the defaults that shape them are as described."""
    config, heuristics, V = _torch_heuristics()
    assert config.max_autotune_gemm_search_space == "DEFAULT"
    assert not config.max_autotune_prune_choices_based_on_shared_mem
    assert not config.triton.enable_persistent_tma_matmul  # no TMA template under max-autotune
    cuda = heuristics.CUDAConfigHeuristic()
    with V.set_graph_handler(_Graph()):
        for m, n, k in SHAPES:
            theirs = _tiles(cuda.preprocess_mm_configs(m, n, k, configs=cuda.mm_configs, dtype_size=2))
            assert theirs <= set(inductor.mm_configs(m, n, k)), (m, n, k)
            images, channels = 8, max(16, n // 64)
            theirs = _tiles(cuda.get_conv_configs()(images * m, n, channels, dtype_size=2))
            assert theirs <= set(inductor.scaled(inductor.CONV, images * m, n, channels)), (m, n, k)
        plus = heuristics.CUDAMMPlusMMTemplateConfigHeuristic()
        for k in (16, 64, 2048):
            theirs = _tiles(plus.preprocess_mm_configs(256, 256, k, configs=plus.mm_configs, dtype_size=2))
            assert theirs <= set(inductor.mm_plus_mm_configs(k)), k
    registry = pytest.importorskip("torch._inductor.template_heuristics.registry")
    mm = pytest.importorskip("torch._inductor.kernel.mm")
    bmm = pytest.importorskip("torch._inductor.kernel.bmm")
    for uid, op in [(mm.mm_template.uid, "mm"), (mm.mm_template.uid, "addmm"), (bmm.bmm_template.uid, "bmm")]:
        heuristic = registry.get_template_heuristic(uid, "cuda", op)
        assert {tuple(c.__dict__.values())[:5] for c in heuristic.mm_configs} == {
            tuple(c.__dict__.values())[:5] for c in cuda.mm_configs
        }, f"{op} uses the mm list on CUDA"


def test_pruning_keeps_triton_and_inductors_configs_on_the_losers():
    """Where Inductor's Triton kernel beat cuBLAS (odd dimensions; K of 64), the models are unsure:
    pruning on the H100 preset keeps Triton choices, some of them configs Inductor tries, where it
    used to drop every one (odd) or keep two (bmm)."""
    from tunesmith.cost.prune import UNSURE_FLOOR, kept_choices, unsure
    from tunesmith_aten import tunesmith_choices as aten_choices

    options = tunesmith.current_options()
    for name, make in LOSERS.items():
        problem = make()
        assert unsure(problem), name
        triton = [
            TritonChoice(ChoiceSpec("triton", t, c.params()), problem, precision(problem), H100.sms)
            for t, c in configs_for(problem, False, H100)
        ]
        kept = kept_choices([*aten_choices(problem, options), *triton], PRESETS["H100-SXM"], options, problem)
        ours = [c for c in kept if c.spec.backend == "triton"]
        assert len(ours) >= min(UNSURE_FLOOR, options.prune), name
        theirs = set(inductors(problem))
        assert any(c.spec.template == "gemm" and tile(c.config) in theirs for c in ours), name
