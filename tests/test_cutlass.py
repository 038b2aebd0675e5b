"""The CUTLASS plugin, on the CPU: problems as CUTLASS GEMMs (layouts, alignment, epilogue operands),
instance validation with reasons, the rendered C++ of both kernel families, specs that round-trip,
the build cache (with a stand-in nvcc), the honest "cannot run here" report, and one sm90 and one
sm80 instance really compiled by nvcc (compile only: no GPU here), whose C ABI is then called for
its can_implement check, which needs no GPU. The framework under the plugin (the build cache, the
choices' plumbing) is tests/test_native.py's.
"""

from __future__ import annotations

import ctypes
import json
import re
import stat
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import attrs
import pytest
import torch
import tunesmith_cutlass
from test_native import CHAIN, fake_compiler
from tunesmith_cutlass import choices_for, rebuild_for
from tunesmith_cutlass.arch import SM80, SM90, Arch
from tunesmith_cutlass.environment import Environment, find_include, find_nvcc, probe
from tunesmith_cutlass.gemm import Unsupported, describe
from tunesmith_cutlass.instances import Instance, enumerate_instances, sm90_stages, validate
from tunesmith_cutlass.render import CAN_IMPLEMENT, COMPILER, render_source

import tunesmith
from tunesmith.hooks import plugin_status
from tunesmith.plugin.native import BuildError, name_entry
from tunesmith_hookspecs import ChoiceSpec, EpilogueOp, Problem, TensorMeta, from_json, to_json

from conftest import rand, run_env

#: the GPU of a stand-in environment: an A10-class Ampere GPU with 99 KiB of shared memory a block
SM86 = Arch(86, 99 * 1024)


def meta(shape: tuple[int, ...], dtype: str, stride: tuple[int, ...] | None = None, offset: int = 0) -> TensorMeta:
    if stride is None:
        return TensorMeta.contiguous(shape, dtype, "cuda")
    return TensorMeta(shape, stride, dtype, "cuda", offset)


def mm(m: int, n: int, k: int, dtype: str = "bfloat16", b_stride=None, epilogue=(), extra=()) -> Problem:
    out_dtype = next((s.dtype for s in reversed(epilogue) if s.name == "cast"), dtype)
    a, b = meta((m, k), dtype), meta((k, n), dtype, b_stride)
    return Problem("mm", (a, b, *extra), meta((m, n), out_dtype), epilogue)


def fake_env(arch: Arch = SM90, **changes) -> Environment:
    env = Environment(arch, "/nonexistent/cuda/bin/nvcc", "/nonexistent/cutlass/include", 132, "test")
    return attrs.evolve(env, **changes)


SM90_SMALL = Instance("sm90", 64, 128, 64, "pingpong")
SM80_SMALL = Instance("sm80", 64, 64, 32, "multistage", warps_m=2, warps_n=2, stages=4)


# --- problems as CUTLASS sees them ----------------------------------------------------------------


def test_layouts_and_alignment_come_from_the_strides():
    gemm = describe(mm(4096, 4096, 4096, "float16", b_stride=(1, 4096)), tf32=False)
    assert (gemm.a.layout, gemm.b.layout, gemm.b.ld, gemm.b.k_major) == ("row", "col", 4096, True)
    assert (gemm.kind.a_alignment, gemm.kind.b_alignment, gemm.kind.out_alignment) == (8, 8, 8)
    odd = describe(mm(1000, 1002, 1001, "bfloat16"), tf32=False)  # K = 1001: A's rows start anywhere
    assert (odd.kind.a_alignment, odd.kind.b_alignment, odd.kind.out_alignment) == (1, 2, 2)
    view = Problem("mm", (meta((64, 64), "float16"), meta((64, 64), "float16", (64, 1), 4)), meta((64, 64), "float16"))
    assert describe(view, tf32=False).kind.b_alignment == 4  # starts 4 elements (8 bytes) into its buffer


def test_problems_that_are_not_one_cutlass_gemm_are_refused_with_a_reason():
    with pytest.raises(Unsupported, match="neither dimension has unit stride"):
        describe(mm(64, 48, 32, "float16", b_stride=(96, 2)), tf32=False)
    with pytest.raises(Unsupported, match="float32 matmul precision is 'highest'"):
        describe(mm(64, 48, 32, "float32"), tf32=False)
    assert describe(mm(64, 48, 32, "float32"), tf32=True).kind.dtype == "float32"
    scalar = meta((1,), "float16")
    a, b = meta((64, 32), "float16"), meta((32, 48), "float16")
    with pytest.raises(Unsupported, match="neither a row vector, a column vector nor a row-major matrix"):
        describe(Problem("addmm", (scalar, a, b), meta((64, 48), "float16"), (), {"alpha": 1.0, "beta": 1.0}), False)
    with pytest.raises(Unsupported, match="K is 0"):  # the sm90 mainloop would wait forever for a K tile
        describe(mm(64, 48, 0, "float16"), tf32=False)
    with pytest.raises(Unsupported, match="op mm_plus_mm is not served"):
        describe(Problem("mm_plus_mm", (a, b, a, b), meta((64, 48), "float16")), tf32=False)
    with pytest.raises(Unsupported, match="D here is float16, bfloat16 or float32"):
        describe(mm(64, 48, 32, "float16", epilogue=(EpilogueOp("cast", dtype="float64"),)), tf32=False)
    # beta = 0 reads no bias (torch ignores it too, NaNs included)
    no_bias = Problem("addmm", (scalar, a, b), meta((64, 48), "float16"), (), {"alpha": 2.0, "beta": 0.0})
    assert describe(no_bias, tf32=False).operands == () and describe(no_bias, tf32=False).scalars == (2.0, 0.0)


def test_epilogue_tensors_are_row_col_or_full_operands():
    a, b = meta((256, 128), "float16"), meta((128, 512), "float16")
    row, col, full = meta((512,), "float16"), meta((256, 1), "float32"), meta((256, 512), "bfloat16")
    epilogue = (
        EpilogueOp("gelu"),
        EpilogueOp("mul", input=3),
        EpilogueOp("add", input=4),
        EpilogueOp("add", scalar=3.0),
    )
    problem = Problem(
        "addmm", (row, a, b, col, full), meta((256, 512), "float16"), epilogue, {"alpha": 1.0, "beta": 2.0}
    )
    gemm = describe(problem, tf32=False)
    assert [(o.index, o.kind, o.dtype, o.alignment) for o in gemm.operands] == [
        (0, "row", "float16", 8),
        (3, "col", "float32", 1),
        (4, "full", "bfloat16", 8),
    ]
    assert gemm.scalars == (1.0, 2.0, 3.0) and gemm.kind.bias
    assert [(s.op, s.operand, s.slot) for s in gemm.kind.steps] == [
        ("gelu", None, None),
        ("mul", 1, None),
        ("add", 2, None),
        ("add", None, 2),
    ]


def test_one_kind_serves_every_size_so_one_source_serves_them():
    kinds = {describe(mm(m, n, k), tf32=False).kind for m, n, k in ((256, 512, 384), (4096, 4096, 4096), (8, 64, 1024))}
    assert len(kinds) == 1
    kind = kinds.pop()
    assert render_source(SM90_SMALL, kind) == render_source(SM90_SMALL, describe(mm(64, 8, 16), tf32=False).kind)
    assert describe(mm(64, 8, 16, b_stride=(1, 16)), tf32=False).kind != kind  # a transposed B is another kind


# --- validation --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("inst", "arch", "problem", "reason"),
    [
        (SM90_SMALL, SM90, (256, 512, 384), None),
        (SM80_SMALL, SM90, (256, 512, 384), None),
        (SM80_SMALL, SM80, (1000, 1002, 1002), None),
        (attrs.evolve(SM90_SMALL, schedule="cooperative"), SM90, (256, 512, 384), "tile M 64 is not a multiple of 128"),
        (attrs.evolve(SM90_SMALL, tile_m=128, tile_n=256), SM90, (256, 512, 384), "needs 256 float accumulators"),
        (attrs.evolve(SM90_SMALL, tile_m=96), SM90, (256, 512, 384), "tile M 96 is not 64, 128 or 256"),
        (attrs.evolve(SM90_SMALL, tile_k=48), SM90, (256, 512, 384), "tile K 48 x 2 bytes is not 64, 128 or 256"),
        (attrs.evolve(SM90_SMALL, cluster_m=4, cluster_n=2), SM90, (256, 512, 384), "has more than 4 blocks"),
        (attrs.evolve(SM90_SMALL, schedule="stream_k"), SM90, (256, 512, 384), "'stream_k' is not one of"),
        (SM90_SMALL, SM80, (256, 512, 384), "run on Hopper only, not on sm80"),
        (SM90_SMALL, SM90, (256, 512, 380), "TMA needs 16-byte aligned A"),
        (SM90_SMALL, SM90, (256, 500, 384), "TMA stores D in 16-byte rows: N=500 allows 8"),
        (attrs.evolve(SM90_SMALL, tile_m=256, tile_n=256, tile_k=128, schedule="cooperative"), SM90, (256, 512, 384),
         "needs 256 float accumulators"),
        (attrs.evolve(SM80_SMALL, warps_m=3), SM80, (256, 512, 384), "3x2 warps: a block has 2, 4 or 8 warps"),
        (attrs.evolve(SM80_SMALL, stages=2), SM80, (256, 512, 384), "2 stages: the multistage mainloop takes 3 to 7"),
        (attrs.evolve(SM80_SMALL, tile_m=256, tile_n=256, tile_k=64, stages=4, warps_m=4), SM86, (256, 512, 384),
         "shared memory: 4 stages of 65536 bytes need 262144, sm86 gives a block 101376"),
        (SM80_SMALL, SM80, (1000, 1001, 1002), "cp.async copies 4, 8 or 16 bytes: B's row-major layout"),
    ],
)  # fmt: skip
def test_validation_accepts_or_names_the_reason(inst, arch, problem, reason):
    gemm = describe(mm(*problem), tf32=False)
    reasons = validate(inst, gemm, arch)
    if reason is None:
        assert reasons == []
    else:
        assert any(reason in why for why in reasons), reasons


def test_sm90_shared_memory_leaves_room_for_the_stages():
    plain = describe(mm(4096, 4096, 4096), tf32=False)
    residual, steps = meta((4096, 4096), "bfloat16"), (EpilogueOp("add", input=2), EpilogueOp("cast", dtype="float32"))
    with_c = describe(mm(4096, 4096, 4096, epilogue=steps, extra=(residual,)), tf32=False)
    deep = Instance("sm90", 256, 128, 128, "cooperative")  # 96 KiB a stage
    assert sm90_stages(deep, plain.kind, SM90) == 2 and validate(deep, plain, SM90) == []
    # a float32 D beside a bfloat16 C: two 128x32 store stages and four load stages take the second one
    assert sm90_stages(deep, with_c.kind, SM90) == 1
    assert any("leave 1 stage(s), fewer than 2" in why for why in validate(deep, with_c, SM90))
    assert sm90_stages(Instance("sm90", 128, 256, 64, "cooperative"), plain.kind, SM90) == 4


def test_tf32_is_offered_only_where_torch_allows_it_and_sm90_reads_k_major_copies(tmp_path):
    problem = mm(256, 512, 384, "float32", b_stride=(1, 384))
    try:
        torch.set_float32_matmul_precision("highest")
        assert choices_for(problem, fake_env(), tmp_path, 4, 60) == []
        torch.set_float32_matmul_precision("high")
        offered = choices_for(problem, fake_env(), tmp_path, 4, 60)
        assert offered and {c.instance.family for c in offered} == {"sm90"}
        assert not any(c.gemm.b.copied for c in offered)  # B is K-major already
        row_b = choices_for(mm(256, 512, 384, "float32"), fake_env(), tmp_path, 12, 60)
        sm90 = [c for c in row_b if c.instance.family == "sm90"]
        sm80 = [c for c in row_b if c.instance.family == "sm80"]
        assert sm90 and sm80
        # TF32 wgmma reads K-major tiles only: sm90 reads a column-major copy of B, sm80 B itself
        assert all(c.gemm.b.copied and c.gemm.b.k_major and c.gemm.b.ld == 384 for c in sm90)
        assert all(c.gemm.kind == offered[0].gemm.kind for c in sm90)  # the library of K-major B serves it
        assert not any(c.gemm.b.copied for c in sm80)
        spec = sm90[0].spec
        again = rebuild_for(spec, mm(256, 512, 384, "float32"), fake_env(), tmp_path, 60)
        assert again is not None and again.gemm == sm90[0].gemm
    finally:
        torch.set_float32_matmul_precision("highest")


def test_k_major_copies_hold_the_operands_as_the_kernel_reads_them():
    """The copies a launch makes: dense, K-major, with the leading dimension and batch stride the
    library is given (checked on CPU tensors: the copy is torch's)."""
    from tunesmith_cutlass.choice import _Launch
    from tunesmith_cutlass.gemm import with_k_major_operands

    a, b = torch.randn(3, 40, 24).transpose(1, 2), torch.randn(3, 40, 56)  # A column-major, B row-major
    problem = Problem("bmm", (meta((3, 24, 40), "float32", (960, 1, 24)), meta((3, 40, 56), "float32")),
                      meta((3, 24, 56), "float32"))  # fmt: skip
    gemm = with_k_major_operands(describe(problem, tf32=True))
    assert gemm.a.copied and gemm.b.copied
    assert (gemm.kind.a_layout, gemm.kind.b_layout) == ("row", "col")
    launch = _Launch(library=None, problem=problem, gemm=gemm)  # type: ignore[arg-type]
    ka, kb = launch.matrices((a, b))
    for copy, matrix, value in ((ka, gemm.a, a), (kb, gemm.b, b)):
        assert torch.equal(copy, value)
        row, col = copy.stride()[1:]
        assert (row, col) == ((matrix.ld, 1) if matrix.layout == "row" else (1, matrix.ld))
        assert copy.stride(0) == matrix.batch_stride


def test_enumeration_per_gpu_and_alignment():
    aligned = describe(mm(4096, 4096, 4096), tf32=False)
    on_hopper, _ = enumerate_instances(aligned, SM90)
    assert {i.family for i in on_hopper} == {"sm90", "sm80"}
    on_ampere, rejected = enumerate_instances(aligned, SM80)
    assert {i.family for i in on_ampere} == {"sm80"}
    odd = describe(mm(1000, 1002, 1002), tf32=False)  # 4-byte rows: cp.async only
    valid, rejected = enumerate_instances(odd, SM90)
    assert valid and {i.family for i in valid} == {"sm80"}
    assert all(
        any("TMA needs 16-byte aligned A" in why for why in r.reasons) for r in rejected if r.instance.family == "sm90"
    )
    unaligned = describe(mm(1000, 1001, 1001), tf32=False)  # 2-byte rows: nothing
    assert enumerate_instances(unaligned, SM90)[0] == []


# --- rendered source ----------------------------------------------------------------------------


def chain_problem(op: str = "addmm") -> Problem:
    a, b = meta((256, 384), "bfloat16"), meta((384, 512), "bfloat16", (1, 384))
    bias, residual = meta((512,), "bfloat16"), meta((256, 512), "bfloat16")
    epilogue = (*CHAIN, EpilogueOp("silu"), EpilogueOp("cast", dtype="float16"))
    return Problem(op, (bias, a, b, residual), meta((256, 512), "float16"), epilogue, {"alpha": 2.0, "beta": 0.5})


def _balanced(source: str) -> bool:
    return all(source.count(x) == source.count(y) for x, y in ("{}", "()"))


def test_sm90_source_uses_the_builders_and_the_visitor_tree():
    gemm = describe(chain_problem(), tf32=False)
    inst = Instance("sm90", 128, 256, 64, "cooperative", cluster_m=2)
    assert validate(inst, gemm, SM90) == []
    source = render_source(inst, gemm.kind)
    for expected in (
        "using TileShape    = cute::Shape<cute::Int<128>, cute::Int<256>, cute::Int<64>>;",
        "using ClusterShape = cute::Shape<cute::Int<2>, cute::Int<1>, cute::_1>;",
        "cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;",
        "cutlass::epilogue::TmaWarpSpecializedCooperative, N",
        "cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, cutlass::bfloat16_t, float, "
        "cute::Stride<cute::_0, cute::_1, int64_t>, 8>",
        "cutlass::epilogue::fusion::Sm90SrcFetch<cutlass::bfloat16_t>",  # the residual is C
        "ElementA, cutlass::layout::RowMajor, 8,",
        "ElementB, cutlass::layout::ColumnMajor, 8,",
        "cutlass::bfloat16_t, cutlass::layout::RowMajor, 8,",  # C
        "using ElementD = cutlass::half_t;",
        "StageCountAutoCarveout",
        f'extern "C" const char* tunesmith_cutlass_instance() {{ return "{inst.name}"; }}',
        f'extern "C" int {CAN_IMPLEMENT}(',
    ):
        assert expected in source, expected
    # the tree in the Problem's order: alpha * acc, beta * bias + x, relu, + residual, * 0.5, gelu_tanh, silu
    functors = re.findall(r"Sm90Compute<([\w:]+),", source)
    assert functors == [
        "cutlass::multiplies",
        "cutlass::homogeneous_multiply_add",
        "cutlass::epilogue::thread::ReLu",
        "cutlass::plus",
        "cutlass::multiplies",
        "cutlass::epilogue::thread::GELU_taylor",
        "cutlass::epilogue::thread::SiLu",
        "cutlass::epilogue::thread::Identity",
    ]
    assert "scalars[0]" in source and "scalars[1]" in source and "scalars[2]" in source
    assert "2.0" not in source and "0.5" not in source  # numbers are run-time arguments
    assert _balanced(source)
    pingpong = render_source(attrs.evolve(inst, tile_m=64, tile_n=128, schedule="pingpong", cluster_m=1), gemm.kind)
    assert "KernelTmaWarpSpecializedPingpong" in pingpong and "cutlass::epilogue::TmaWarpSpecialized," in pingpong


def test_sm80_source_uses_gemm_universal_with_the_2x_visitor_tree():
    gemm = describe(chain_problem(), tf32=False)
    source = render_source(SM80_SMALL, gemm.kind)
    for expected in (
        "cutlass::gemm::kernel::DefaultGemmWithVisitor<",
        "cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>",
        "cutlass::gemm::GemmShape<64, 64, 32>, cutlass::gemm::GemmShape<32, 32, 32>, "
        "cutlass::gemm::GemmShape<16, 8, 16>",
        "cutlass::epilogue::threadblock::VisitorRowBroadcast<OutputTileThreadMap, cutlass::bfloat16_t,",
        "cutlass::epilogue::threadblock::VisitorAuxLoad<OutputTileThreadMap, cutlass::bfloat16_t,",
        "using Callbacks = cutlass::epilogue::threadblock::Sm80EVT<StoreD, N",
        "cutlass::gemm::GemmUniversalMode::kGemm",
        "    4, cutlass::arch::OpMultiplyAdd, 1>::GemmKernel;",
    ):
        assert expected in source, expected
    assert len(re.findall(r"VisitorCompute<", source)) == 8 and _balanced(source)
    a, b = meta((3, 64, 32), "float32"), meta((3, 32, 48), "float32")
    batched = describe(Problem("bmm", (a, b), meta((3, 64, 48), "float32")), tf32=True)
    source = render_source(attrs.evolve(SM80_SMALL, tile_k=16), batched.kind)
    # float32 stays float in sm80 source, so that the warp MMA rounds it to TF32 (not the truncating tensor cores)
    assert "GemmUniversalMode::kBatched" in source and "using ElementA = float;" in source
    assert "cutlass::gemm::GemmShape<16, 8, 8>" in source  # the TF32 mma.sync


# --- choices, specs and the build cache ------------------------------------------------------------


def test_choices_round_trip_through_their_specs(tmp_path):
    problem, env = chain_problem(), fake_env()
    choices = choices_for(problem, env, tmp_path, 6, 60)
    assert len(choices) == 6 and len({c.spec for c in choices}) == 6
    for choice in choices:
        assert choice.spec.backend == "cutlass"
        assert (
            choice.spec.template == {"sm90": "gemm_sm90_tma_ws", "sm80": "gemm_sm80_multistage"}[choice.instance.family]
        )
        spec = from_json(to_json(choice.spec), ChoiceSpec)
        assert Instance.from_params(spec.params) == choice.instance
        rebuilt = rebuild_for(spec, problem, env, tmp_path, 60)
        assert rebuilt is not None and rebuilt.spec == choice.spec and rebuilt.source() == choice.source()
    sm90 = next(c for c in choices if c.instance.family == "sm90")
    assert rebuild_for(sm90.spec, problem, fake_env(SM80), tmp_path, 60) is None  # not on Ampere
    stale = ChoiceSpec("cutlass", sm90.spec.template, {**dict(sm90.spec.params), "swizzle": 3})
    assert rebuild_for(stale, problem, env, tmp_path, 60) is None
    wrong = ChoiceSpec("cutlass", "gemm_sm80_multistage", sm90.spec.params)
    assert rebuild_for(wrong, problem, env, tmp_path, 60) is None
    assert len(choices_for(problem, env, tmp_path, 2, 60)) == 2  # cutlass_max_instances
    with pytest.raises(BuildError, match="nvcc could not start"):  # built with the gencode of its family
        choices[0].precompile()  # the stand-in environment names an nvcc that does not exist
    cpu = Problem("mm", (TensorMeta.contiguous((64, 64), "float16"),) * 2, TensorMeta.contiguous((64, 64), "float16"))
    assert choices_for(cpu, env, tmp_path, 8, 60) == []


def test_ranking_prefers_tiles_that_fill_the_gpu():
    big = describe(mm(8192, 8192, 8192), tf32=False)
    valid, _ = enumerate_instances(big, SM90)
    best = tunesmith_cutlass.rank(valid, big, SM90, 132)
    assert best[0].family == "sm90" and best[0].tile_m * best[0].tile_n == 128 * 256
    thin = describe(mm(16, 4096, 4096), tf32=False)
    best = tunesmith_cutlass.rank(enumerate_instances(thin, SM90)[0], thin, SM90, 132)
    assert best[0].tile_m == 64  # 16 rows: the smallest tile M wastes least


def test_libraries_are_built_by_nvcc_with_the_gencode_and_cached_by_the_headers_version(tmp_path):
    """The build cache is the plugin API's (tests/test_native.py); what is CUTLASS's own: the folder,
    nvcc's flags and ``-gencode`` per family, and the CUTLASS headers' version in the key."""
    nvcc, log = fake_compiler(tmp_path, "nvcc", "12.8", "no instance of CollectiveBuilder matches")
    root = COMPILER.root(str(tmp_path / "cache"))
    assert root == tmp_path / "cache" / "cutlass"
    gencode = SM90.gencode("sm90")
    first = COMPILER.build("// one", nvcc, gencode, "/inc", "v1", root, 60)
    assert first == root / f"{COMPILER.key('// one', nvcc, gencode, '/inc', 'v1')}.so"
    assert first.with_suffix(".cu").read_text() == "// one"
    calls = log.read_text().splitlines()
    assert len(calls) == 1 and "-gencode=arch=compute_90a,code=sm_90a" in calls[0]
    assert {"-O3", "-std=c++17", "--expt-relaxed-constexpr", "-shared", "-fPIC"} <= set(calls[0].split())
    assert COMPILER.build("// one", nvcc, gencode, "/inc", "v1", root, 60) == first  # a hit: not compiled again
    assert len(log.read_text().splitlines()) == 1
    assert SM80.gencode("sm80") == "arch=compute_80,code=sm_80" and SM86.gencode("sm80").endswith("code=sm_86")
    assert COMPILER.key("// one", nvcc, SM80.gencode("sm80"), "/inc", "v1") != first.stem  # another family
    assert COMPILER.key("// one", nvcc, gencode, "/inc", "v2") != first.stem  # other headers
    with pytest.raises(BuildError, match="no instance of CollectiveBuilder matches"):
        COMPILER.build("// FAIL", nvcc, gencode, "/inc", "v1", root, 60)


# --- "cannot run here" ---------------------------------------------------------------------------


def test_nvcc_and_the_headers_are_found_where_the_docs_say(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IEXEC)
    assert find_nvcc() == str(nvcc)
    include, version, why = find_include(str(tmp_path / "checkout"))
    assert include is None and "no include/cutlass/cutlass.h and cute/tensor.hpp under cutlass_dir=" in why
    for marker in ("cutlass/cutlass.h", "cute/tensor.hpp"):
        (tmp_path / "checkout" / "include" / marker).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "checkout" / "include" / marker).write_text("")
    assert find_include(str(tmp_path / "checkout"))[0] == str(tmp_path / "checkout" / "include")
    package, version, why = find_include(None)  # the nvidia-cutlass wheel, a dependency of the plugin
    assert package is not None and Path(package, "cutlass", "gemm").is_dir() and version.startswith("nvidia-cutlass")
    monkeypatch.setenv("TUNESMITH_CUTLASS_DIR", str(tmp_path / "checkout"))
    assert probe(tunesmith.current_options().cutlass_dir).include == str(tmp_path / "checkout" / "include")


def test_tunesmith_plugins_names_what_is_missing():
    proc = subprocess.run(
        [sys.executable, "-m", "tunesmith", "plugins", "--json"], capture_output=True, text=True, env=run_env()
    )
    assert proc.returncode == 0, proc.stderr
    row = {r["name"]: r for r in json.loads(proc.stdout)}["cutlass"]
    assert row["distribution"] == "tunesmith-cutlass"
    expected = {
        "a CUDA build of torch": torch.version.cuda is None,
        "an NVIDIA GPU": torch.version.cuda is not None and not torch.cuda.is_available(),
        "nvcc (not on PATH": find_nvcc() is None,
        "CUTLASS headers": find_include(None)[0] is None,
    }
    assert row["runnable"] is not any(expected.values())
    for piece, missing in expected.items():
        assert (piece in row["reason"]) == missing, (piece, row["reason"])
    assert {"tunesmith_choices", "tunesmith_rebuild_choice", "tunesmith_estimate_runtime"} <= set(row["hooks"])


@pytest.mark.skipif(probe(None).runnable, reason="this machine can run the cutlass plugin")
def test_where_cutlass_cannot_run_it_offers_nothing_and_breaks_nothing():
    status = plugin_status("cutlass")
    assert not status.runnable and status.reason.startswith("missing ")
    assert status.ops == ("mm", "addmm", "bmm") and status.dtypes == ("float16", "bfloat16")  # no TF32 allowed
    try:
        torch.set_float32_matmul_precision("high")
        tunesmith.reset()
        assert tunesmith_cutlass.tunesmith_plugin_status(tunesmith.current_options()).dtypes == (
            "float16",
            "bfloat16",
            "float32",
        )
    finally:
        torch.set_float32_matmul_precision("highest")
    assert tunesmith_cutlass.tunesmith_choices(problem=mm(256, 512, 384), options=tunesmith.current_options()) == []
    a, b = rand(32, 16), rand(16, 24)
    assert tunesmith.tune("mm", a, b).spec.backend == "aten"
    with pytest.raises(tunesmith.NoValidChoicesError, match=r"cutlass: cannot run here: missing "):
        tunesmith.tune("mm", a, b, options={"backends": ["cutlass"]})


@pytest.mark.skipif(
    probe(None).runnable, reason="this machine can run the cutlass plugin: the suite checks it for real"
)
def test_the_conformance_suite_reports_cutlass_as_not_checked_with_the_reason():
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "-rs", "--pyargs", "tunesmith.conformance"]
    proc = subprocess.run([*argv, "--tunesmith-plugin", "cutlass"], capture_output=True, text=True, env=run_env())
    assert proc.returncode == 0, proc.stdout[-3000:]
    reason = plugin_status("cutlass").reason
    assert f"plugin 'cutlass' (tunesmith-cutlass 0.1.0), kinds: backend, cannot run here: {reason}" in proc.stdout
    backend = dict(re.findall(r"test_backend\.py::(\S+) (PASSED|FAILED|SKIPPED|ERROR)", proc.stdout))
    assert backend and set(backend.values()) == {"SKIPPED"}, backend
    assert "its backend checks were skipped, not passed" in proc.stdout


# --- nvcc compiles the generated code (one instance of each family, at once) --------------------------

ARGTYPES = [ctypes.c_void_p] * 3 + [ctypes.POINTER(ctypes.c_void_p)] + [ctypes.c_int64] * 4
ARGTYPES += [ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_float)]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict[str, tuple[Path | Exception, float]]:
    """One sm90 and one sm80 instance for a bfloat16 mm, built by the real nvcc in parallel: the
    library (or the error) and the seconds each build took."""
    nvcc, (include, version, why) = find_nvcc(), find_include(None)
    if nvcc is None or include is None:
        pytest.skip(f"no nvcc or CUTLASS headers here: {why or 'nvcc not found'}")
    kind = describe(mm(256, 512, 384), tf32=False).kind
    root = COMPILER.root(str(tmp_path_factory.mktemp("nvcc")))

    def one(inst: Instance) -> tuple[Path | Exception, float]:
        start = time.monotonic()
        try:
            source, gencode = render_source(inst, kind), SM90.gencode(inst.family)
            path = COMPILER.build(source, nvcc, gencode, include, version, root, 600)
        except BuildError as exc:
            return exc, time.monotonic() - start
        return path, time.monotonic() - start

    with ThreadPoolExecutor(2) as pool:
        results = dict(zip(("sm90", "sm80"), pool.map(one, (SM90_SMALL, SM80_SMALL)), strict=True))
    print({family: f"{seconds:.0f} s" for family, (_, seconds) in results.items()})
    return results


@pytest.mark.parametrize(("family", "inst"), [("sm90", SM90_SMALL), ("sm80", SM80_SMALL)])
def test_nvcc_builds_the_instance_and_its_c_abi_answers(compiled, family, inst):
    path, _ = compiled[family]
    assert isinstance(path, Path), path
    library = ctypes.CDLL(str(path))  # links no CUDA library dynamically: loads without a GPU
    name = getattr(library, name_entry("cutlass"))
    name.restype = ctypes.c_char_p
    assert name().decode() == inst.name
    can_implement = getattr(library, CAN_IMPLEMENT)
    can_implement.argtypes, can_implement.restype = ARGTYPES, ctypes.c_int

    def check(m: int, n: int, k: int) -> int:
        strides = (ctypes.c_int64 * 6)(k, n, n, 0, 0, 0)
        scalars, operands = (ctypes.c_float * 2)(1.0, 0.0), (ctypes.c_void_p * 1)(0)
        return can_implement(1 << 20, 1 << 20, 1 << 20, operands, m, n, k, 1, strides, scalars)

    assert check(256, 512, 384) == 0 and check(4096, 8, 64) == 0  # one library, any size of its kind
    assert check(256, 512, 380) == 1  # K = 380 breaks the 8-element rows of A that the kind assumes


def test_sm80_instances_are_not_offered_for_batches_until_their_launch_is_fixed():
    def bmm(batch: int) -> Problem:
        a, b = meta((batch, 256, 384), "bfloat16"), meta((batch, 384, 512), "bfloat16")
        return Problem("bmm", (a, b), meta((batch, 256, 512), "bfloat16"))

    assert validate(SM80_SMALL, describe(bmm(1), tf32=False), SM90) == []
    assert any("sm80 batched launches fail" in why for why in validate(SM80_SMALL, describe(bmm(3), tf32=False), SM90))
    assert validate(SM90_SMALL, describe(bmm(3), tf32=False), SM90) == []
