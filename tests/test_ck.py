"""The Composable Kernel plugin, on the CPU: instance enumeration for the seed's shapes, validation
with reasons, the rendered C++ and hipcc command, the build cache (with a stand-in compiler), and
the honest "cannot run here" report of `tunesmith plugins` and of the conformance suite.

Nothing here compiles or runs a CK kernel: that needs hipcc, the CK headers and an AMD GPU. The
framework under the plugin (the build cache, the choices' plumbing) is tests/test_native.py's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
import torch
import tunesmith_ck
from test_native import CHAIN, fake_compiler
from tunesmith_ck import choices_for, rebuild_for
from tunesmith_ck.arch import ARCHS
from tunesmith_ck.environment import Environment, find_ck_include, find_hipcc, probe
from tunesmith_ck.gemm import Unsupported, describe
from tunesmith_ck.instances import (
    Instance,
    Tile,
    candidate,
    enumerate_instances,
    lds_bytes,
    shuffle,
    transfer,
    validate,
)
from tunesmith_ck.render import COMPILER, ENTRY, render_source

import tunesmith
from tunesmith.hooks import plugin_status
from tunesmith.plugin.native import BuildError
from tunesmith_hookspecs import ChoiceSpec, EpilogueOp, Problem, TensorMeta, from_json, to_json

from conftest import rand, run_env

GFX942, GFX950 = ARCHS["gfx942"], ARCHS["gfx950"]
TARGET = "gfx942:sramecc+:xnack-"


def meta(shape: tuple[int, ...], dtype: str, stride: tuple[int, ...] | None = None, offset: int = 0) -> TensorMeta:
    """A tensor's metadata on the GPU (nothing is allocated: the view of the LM head is 3 GiB)."""
    if stride is None:
        return TensorMeta.contiguous(shape, dtype, "cuda")
    return TensorMeta(shape, stride, dtype, "cuda", offset)


def mm(a: TensorMeta, b: TensorMeta, epilogue: tuple[EpilogueOp, ...] = (), extra: tuple[TensorMeta, ...] = ()):
    out_dtype = next((s.dtype for s in reversed(epilogue) if s.name == "cast"), a.dtype)
    return Problem("mm", (a, b, *extra), meta((a.shape[0], b.shape[1]), out_dtype), epilogue)


def seed_bf16() -> Problem:
    """The seed's small-K case: 2240 x 2048 x 256 in bfloat16."""
    return mm(meta((2240, 256), "bfloat16"), meta((256, 2048), "bfloat16"))


def seed_fp16_transposed_b() -> Problem:
    """4096^3 in float16 with B the transpose of a contiguous (N, K) weight: CK's column-major B."""
    return mm(meta((4096, 4096), "float16"), meta((4096, 4096), "float16", stride=(1, 4096)))


def lm_head(row_stride: int = 32832, offset: int = 0, width: int = 32768, m: int = 2048) -> Problem:
    """logits = h @ W.T, where W is a (50257, width) view of a wider buffer (rows ``row_stride`` apart)."""
    w_t = meta((width, 50257), "bfloat16", stride=(1, row_stride), offset=offset)
    return mm(meta((m, width), "bfloat16"), w_t)


def instance(gemm, tile: Tile, pipeline: str = "v3", scheduler: str = "Intrawave", **changes) -> Instance:
    return attrs.evolve(candidate(tile, pipeline, scheduler, gemm), **changes)


def fake_env(**changes) -> Environment:
    env = Environment(TARGET, "/nonexistent/rocm/bin/hipcc", "/nonexistent/ck/include", 304)
    return attrs.evolve(env, **changes)


# --- enumeration for the seed's shapes -------------------------------------------------------


def test_seed_bf16_2240x2048x256_gets_valid_instances_each_padded_where_needed():
    gemm = describe(seed_bf16())
    assert (gemm.m, gemm.n, gemm.k, gemm.a.layout, gemm.b.layout) == (2240, 2048, 256, "row", "row")
    valid, rejected = enumerate_instances(gemm, GFX942)
    assert len(valid) >= 20 and rejected
    for inst in valid:
        assert validate(inst, gemm, GFX942) == []
        for dim, size, per_block in (("M", 2240, inst.m_per_block), ("N", 2048, inst.n_per_block)):
            assert (dim in inst.gemm_spec) == (size % per_block != 0), inst.name
        assert "K" not in inst.gemm_spec  # K=256 is a multiple of every KPerBlock tried
        assert (inst.ak1, inst.bk1) == (8, 4)  # A reads along K, B (row-major) along N
    # 2240 = 10 x 224: the 224-row tile needs no padding; 256 rows do
    by_tile = {(i.m_per_block, i.n_per_block, i.k_per_block, i.pipeline): i for i in valid}
    assert by_tile[(224, 256, 64, "v3")].gemm_spec == "Default"
    assert by_tile[(256, 256, 32, "v3")].gemm_spec == "MPadding"
    reasons = {(r.instance.m_per_block, r.instance.n_per_block, r.instance.pipeline): r.reasons for r in rejected}
    assert any("LDS: needs 122880 bytes" in why for why in reasons[(224, 256, "v4")])
    assert any("K=256 with KPerBlock=128 gives 2" in why for why in reasons[(16, 16, "v3")])
    assert any("28 threads along N do not divide BlockSize=256" in why for why in reasons[(256, 224, "v1")])


def test_the_same_shape_on_gfx950_keeps_the_instances_that_need_its_larger_lds():
    gemm = describe(seed_bf16())
    small = {i.name for i in enumerate_instances(gemm, GFX942)[0]}
    large = enumerate_instances(gemm, GFX950)[0]
    extra = [i for i in large if i.name not in small]
    assert small < {i.name for i in large} and extra
    assert all(GFX942.lds_bytes < lds_bytes(i, gemm) <= GFX950.lds_bytes for i in extra)


def test_transposed_fp16_b_is_read_as_column_major_along_k():
    gemm = describe(seed_fp16_transposed_b())
    assert (gemm.b.layout, gemm.b.ld) == ("col", 4096)
    valid, _ = enumerate_instances(gemm, GFX942)
    assert valid
    for inst in valid:
        assert inst.bk1 == 8 and inst.b_vector == 8
        padded = {"MPadding": (True, False), "NPadding": (False, True), "Default": (False, False)}
        assert padded[inst.gemm_spec] == (4096 % inst.m_per_block != 0, 4096 % inst.n_per_block != 0)
        b = transfer(inst, "B", gemm.b)
        assert not isinstance(b, str) and b.vector_dim == 2 and b.order == (1, 0, 2)
    row_b = describe(mm(meta((4096, 4096), "float16"), meta((4096, 4096), "float16")))
    inst = enumerate_instances(row_b, GFX942)[0][0]
    b = transfer(inst, "B", row_b.b)
    assert inst.bk1 == 4 and not isinstance(b, str) and b.vector_dim == 1 and b.order == (0, 2, 1)


def test_the_non_contiguous_50257x32768_lm_head_view():
    gemm = describe(lm_head())
    assert (gemm.m, gemm.n, gemm.k) == (2048, 50257, 32768)
    assert (gemm.b.layout, gemm.b.ld, gemm.b.contiguous_size) == ("col", 32832, 32768)
    valid, _ = enumerate_instances(gemm, GFX942)
    assert valid
    for inst in valid:
        assert "N" in inst.gemm_spec  # 50257 = 29 x 1733 divides by no tile
        assert inst.e_vector == 1  # E is row-major with an odd N: one element per store
        assert inst.b_vector == 8  # K and the row stride 32832 are multiples of 8
    # the same view with an odd row stride can only be read one element at a time
    odd = describe(lm_head(row_stride=32769))
    assert all(inst.b_vector == 1 for inst in enumerate_instances(odd, GFX942)[0])
    wide = attrs.evolve(enumerate_instances(odd, GFX942)[0][0], b_vector=8)
    assert "B's leading dimension 32769 is not a multiple of the vector width 8" in " ".join(
        validate(wide, odd, GFX942)
    )


def test_a_misaligned_view_narrows_its_vectors_and_an_oversized_one_is_refused():
    shifted = describe(lm_head(offset=4))
    assert {i.b_vector for i in enumerate_instances(shifted, GFX942)[0]} == {4}
    forced = attrs.evolve(enumerate_instances(shifted, GFX942)[0][0], b_vector=8)
    assert "B starts at element offset 4, not a multiple of the vector width 8" in validate(forced, shifted, GFX942)
    huge = describe(lm_head(row_stride=65600, width=65536))  # 50257 rows of 65600: past 2**31 elements
    valid, rejected = enumerate_instances(huge, GFX942)
    assert valid == []
    assert all(any("exceeds CK's 32-bit index_t" in why for why in r.reasons) for r in rejected)


# --- validation: accepted and rejected, with the reason ----------------------------------------

SEED_TILE = Tile(256, 224, 256, 64, 16, 7, 8)


@pytest.mark.parametrize(
    ("changes", "tile", "arch", "reason"),
    [
        ({}, SEED_TILE, "gfx942", None),
        ({"m_per_block": 100}, SEED_TILE, "gfx942", "MPerBlock=100 is not a multiple of MPerXDL*MXdlPerWave = 16*7"),
        ({"block_size": 128}, SEED_TILE, "gfx942", "2x2 waves of 64 lanes are 256 threads, not BlockSize=128"),
        ({"block_size": 512}, SEED_TILE, "gfx942", "BlockSize 512 is not one of (64, 128, 256)"),
        ({"m_per_xdl": 32}, SEED_TILE, "gfx942", "XDL tile 32x16 is not 32x32 or 16x16"),
        ({"k_per_block": 60}, SEED_TILE, "gfx942", "KPerBlock=60 is not a multiple of AK1=8"),
        ({"scheduler": "Interwave"}, SEED_TILE, "gfx942", "pipeline v3 exists only with the Intrawave scheduler"),
        ({"pipeline": "v4"}, SEED_TILE, "gfx942", "LDS: needs 122880 bytes"),
        ({"pipeline": "v4"}, SEED_TILE, "gfx950", None),
        ({"gemm_spec": "Default"}, Tile(256, 256, 256, 32, 32, 4, 4), "gfx942", "M=2240 is not a multiple of "),
        ({"a_vector": 16}, SEED_TILE, "gfx942", "A vector width 16 x 2 bytes exceeds 16-byte loads"),
        ({"a_vector": 16}, SEED_TILE, "gfx942", "A vector width 16 does not divide AK1=8"),
        ({"ak1": 4}, SEED_TILE, "gfx942", "AK1=4 does not suit a row-major A (use 8)"),
        ({"e_vector": 16}, SEED_TILE, "gfx942", "E vector width 16 x 2 bytes exceeds 16-byte stores"),
        ({"cshuffle_n": 1}, SEED_TILE, "gfx942", "which do not tile the shuffled tile's height 32"),
        ({"k_per_block": 128}, Tile(256, 128, 128, 64, 32, 2, 2), "gfx942", "K=256 with KPerBlock=128 gives 2"),
        ({}, Tile(256, 256, 224, 64, 16, 8, 7), "gfx942", "28 threads along N do not divide BlockSize=256"),
    ],
)
def test_validation_accepts_or_names_the_reason(changes, tile, arch, reason):
    gemm = describe(seed_bf16())
    reasons = validate(instance(gemm, tile, **changes), gemm, ARCHS[arch])
    if reason is None:
        assert reasons == []
    else:
        assert any(reason in why for why in reasons), reasons


def test_lds_is_counted_as_ck_allocates_it():
    gemm = describe(mm(meta((4096, 4096), "float16"), meta((4096, 4096), "float16", stride=(1, 4096))))
    inst = instance(gemm, Tile(256, 256, 256, 64, 32, 4, 4))
    assert lds_bytes(inst, gemm) == (256 * 64 + 256 * 64) * 2 == GFX942.lds_bytes  # fits exactly
    assert validate(inst, gemm, GFX942) == []
    assert lds_bytes(attrs.evolve(inst, pipeline="v4"), gemm) == 2 * GFX942.lds_bytes  # two LDS buffers
    thin = instance(gemm, Tile(64, 16, 16, 64, 16, 1, 1))
    assert lds_bytes(thin, gemm) == (16 * 64 + 16 * 64) * 2  # more than the float C shuffle's 16 x 16 x 4
    assert shuffle(thin) == (16, 4) and thin.e_vector == 4  # 8-wide stores would need 32 rows of threads


def test_problems_that_are_not_one_ck_gemm_are_refused_with_a_reason():
    a, b = meta((64, 32), "float16"), meta((32, 48), "float16")
    with pytest.raises(Unsupported, match="neither dimension has unit stride"):
        describe(mm(meta((64, 32), "float16", stride=(64, 2)), b))
    scalar = meta((1,), "float16")
    with pytest.raises(Unsupported, match="scalar-like"):
        describe(Problem("addmm", (scalar, a, b), meta((64, 48), "float16"), (), {"alpha": 1.0, "beta": 1.0}))
    with pytest.raises(Unsupported, match="the instances take float16 or bfloat16"):
        describe(mm(meta((64, 32), "float32"), meta((32, 48), "float32")))
    with pytest.raises(Unsupported, match="the output is float64"):
        describe(mm(a, b, (EpilogueOp("cast", dtype="float64"),)))
    with pytest.raises(Unsupported, match="cast to float64 is not served"):
        describe(mm(a, b, (EpilogueOp("cast", dtype="float64"), EpilogueOp("cast", dtype="float16"))))
    with pytest.raises(Unsupported, match="op mm_plus_mm is not served"):
        describe(Problem("mm_plus_mm", (a, b, a, b), meta((64, 48), "float16")))
    # beta = 0 reads no bias at all (torch ignores it too, NaNs included)
    no_bias = describe(Problem("addmm", (scalar, a, b), meta((64, 48), "float16"), (), {"alpha": 2.0, "beta": 0.0}))
    assert no_bias.ds == () and no_bias.scalars == (2.0, 0.0)


# --- rendered source and hipcc command -------------------------------------------------------


def _template_args(source: str) -> dict[str, str]:
    """The DeviceOp's template arguments by the name in their comment."""
    block = source[source.index("using DeviceOp") : source.index(">;", source.index("using DeviceOp"))]
    return {
        m.group(2).split(" (")[0]: m.group(1).strip().rstrip(",")
        for m in re.finditer(r"^\s+(.+?)\s*// (\S.*)$", block, re.M)
    }


def _seq(values) -> str:
    return "S<" + ", ".join(map(str, values)) + ">"


def test_rendered_source_carries_the_chosen_parameters():
    gemm = describe(seed_bf16())
    inst = instance(gemm, SEED_TILE)
    source = render_source(inst, gemm)
    args = _template_args(source)
    a, b, (cm, cn) = transfer(inst, "A", gemm.a), transfer(inst, "B", gemm.b), shuffle(inst)
    expected = {
        "ALayout": "Row",
        "BLayout": "Row",
        "GemmSpec": f"ck::tensor_operation::device::GemmSpecialization::{inst.gemm_spec}",
        "BlockSize": inst.block_size,
        "MPerBlock": inst.m_per_block,
        "NPerBlock": inst.n_per_block,
        "KPerBlock": inst.k_per_block,
        "AK1": inst.ak1,
        "BK1": inst.bk1,
        "MPerXDL": inst.m_per_xdl,
        "NPerXDL": inst.n_per_xdl,
        "MXdlPerWave": inst.m_xdl_per_wave,
        "NXdlPerWave": inst.n_xdl_per_wave,
        "ABlockTransferThreadClusterLengths_AK0_M_AK1": _seq(a.cluster),
        "ABlockTransferSrcScalarPerVector": inst.a_vector,
        "BBlockTransferThreadClusterLengths_BK0_N_BK1": _seq(b.cluster),
        "BBlockTransferSrcVectorDim": 1,
        "BBlockTransferSrcScalarPerVector": inst.b_vector,
        "CShuffleMXdlPerWavePerShuffle": inst.cshuffle_m,
        "CShuffleNXdlPerWavePerShuffle": inst.cshuffle_n,
        "CShuffleBlockTransferClusterLengths_MBlock_MPerBlock_NBlock_NPerBlock": _seq((1, cm, 1, cn)),
        "CDEShuffleBlockTransferScalarPerVectors": _seq((inst.e_vector,)),
        "BlkGemmPipeSched": f"ck::BlockGemmPipelineScheduler::{inst.scheduler}",
        "BlkGemmPipelineVer": f"ck::BlockGemmPipelineVersion::{inst.pipeline}",
        "ComputeTypeB": "BDataType",
    }
    assert {k: args.get(k) for k in expected} == {k: str(v) for k, v in expected.items()}
    assert len(args) == 46  # every template argument of DeviceGemmMultiD_Xdl_CShuffle_V3 up to ComputeTypeB
    assert "DeviceGemmMultiD_Xdl_CShuffle_V3<" in source
    assert '#include "ck/tensor_operation/gpu/device/impl/device_gemm_multiple_d_xdl_cshuffle_v3.hpp"' in source
    assert "using ADataType  = ck::bhalf_t;" in source and "using DsDataType = ck::Tuple<>;" in source
    assert f'extern "C" const char* tunesmith_ck_instance() {{ return "{inst.name}"; }}' in source
    assert f'extern "C" int {ENTRY}(' in source and "/*KBatch=*/1" in source
    assert source.count("{") == source.count("}")


def test_rendered_epilogue_fuses_bias_and_pointwise_steps_as_d_tensors():
    a, b = meta((2240, 256), "float16"), meta((256, 2048), "float16", stride=(1, 256))
    bias, residual = meta((2048,), "float16"), meta((2240, 2048), "float32")
    epilogue = (*CHAIN, EpilogueOp("cast", dtype="bfloat16"))
    problem = Problem(
        "addmm", (bias, a, b, residual), meta((2240, 2048), "bfloat16"), epilogue, {"alpha": 2.0, "beta": 0.5}
    )
    gemm = describe(problem)
    assert [d.layout for d in gemm.ds] == ["row", "row"] and [d.ld for d in gemm.ds] == [0, 2048]
    assert gemm.scalars == (2.0, 0.5, 0.5)
    inst = instance(gemm, Tile(256, 128, 128, 64, 32, 2, 2))
    assert validate(inst, gemm, GFX942) == [] and inst.e_vector == 8
    source = render_source(inst, gemm)
    args = _template_args(source)
    assert (args["ALayout"], args["BLayout"], args["ELayout"]) == ("Row", "Col", "Row")
    assert (args["BBlockTransferSrcVectorDim"], args["BK1"]) == ("2", "8")  # B^T is read along K
    assert args["DsLayout"] == "DsLayout" and "using DsLayout   = ck::Tuple<Row, Row>;" in source
    assert "using DsDataType = ck::Tuple<ck::half_t, float>;" in source
    assert "using EDataType  = ck::bhalf_t;" in source
    assert args["CDEShuffleBlockTransferScalarPerVectors"] == "S<8, 8, 4>"  # float D: 4 x 4 bytes
    body = source[source.index("struct Epilogue") : source.index("using DeviceOp")]
    expected = [
        "float scalars[3];",
        "__host__ __device__ void operator()(E& e, const C& c, const D0& d0, const D1& d1) const",
        "float x = scalars[0] * ck::type_convert<float>(c);",
        "x = x + scalars[1] * ck::type_convert<float>(d0);",
        "ew::Relu{}(y, x)",
        "x = x + ck::type_convert<float>(d1);",
        "x = x * scalars[2];",
        "ew::FastGelu{}(y, x)",
        "e = ck::type_convert<E>(x);",
    ]
    positions = [body.index(line) for line in expected]
    assert positions == sorted(positions)  # in the Problem's order


def test_bmm_renders_the_batched_device_op_with_batch_strides():
    a, b = meta((3, 64, 128), "bfloat16"), meta((3, 128, 96), "bfloat16")
    gemm = describe(Problem("bmm", (a, b), meta((3, 64, 96), "bfloat16")))
    assert (gemm.batch, gemm.a.batch_stride, gemm.b.batch_stride) == (3, 64 * 128, 128 * 96)
    source = render_source(enumerate_instances(gemm, GFX942)[0][0], gemm)
    assert "ck::tensor_operation::device::DeviceBatchedGemmMultiD_Xdl_CShuffle_V3<" in source
    assert "impl/device_batched_gemm_multiple_d_xdl_cshuffle_v3.hpp" in source
    assert "batch_a, batch_b, batch_stride_ds, batch_e," in source and "KBatch" not in source


def test_the_hipcc_command_line():
    command = COMPILER.command("/opt/rocm/bin/hipcc", "/tmp/i.cpp", "/tmp/i.so", TARGET, "/opt/ck/include")
    assert command[0] == "/opt/rocm/bin/hipcc"
    assert f"--offload-arch={TARGET}" in command
    assert command[command.index("-I") + 1] == "/opt/ck/include"
    assert {"-shared", "-fPIC", "-O3", "-std=c++17", "-fno-gpu-rdc"} <= set(command)
    assert command[command.index("-x") + 1] == "hip"
    assert command[-3:] == ["-o", "/tmp/i.so", "/tmp/i.cpp"]


def test_ck_headers_and_hipcc_are_found_where_the_docs_say(tmp_path, monkeypatch):
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "rocm"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert find_hipcc() is None
    hipcc = tmp_path / "rocm" / "bin" / "hipcc"
    hipcc.parent.mkdir(parents=True)
    hipcc.write_text("#!/bin/sh\n")
    hipcc.chmod(hipcc.stat().st_mode | stat.S_IEXEC)
    assert find_hipcc() == str(hipcc)

    ck = tmp_path / "ck"
    include, why = find_ck_include(str(ck))
    assert include is None and f"no include/ck/ck.hpp under ck_dir={ck}" in why
    (ck / "include" / "ck").mkdir(parents=True)
    (ck / "include" / "ck" / "ck.hpp").write_text("")
    include, why = find_ck_include(str(ck))
    assert include is None and "include/ck/config.h" in why  # a source checkout, not an install
    (ck / "include" / "ck" / "config.h").write_text("")
    assert find_ck_include(str(ck)) == (str(ck / "include"), "")
    # TUNESMITH_CK_DIR is the ck_dir setting, as for every plugin setting
    monkeypatch.setenv("TUNESMITH_CK_DIR", str(ck))
    assert tunesmith.current_options().ck_dir == str(ck)
    assert probe(tunesmith.current_options().ck_dir).include == str(ck / "include")


# --- the build cache (a stand-in compiler: hipcc itself is not here) --------------------------


def test_libraries_are_built_by_hipcc_for_the_gpu_s_target_and_cached(tmp_path):
    """The build cache is the plugin API's (tests/test_native.py); what is CK's own: the folder, the
    ``.cpp`` source, and hipcc's ``--offload-arch`` of the GPU's target id in the key."""
    hipcc, log = fake_compiler(tmp_path, "hipcc", error="no matching constructor for DeviceOp")
    root = COMPILER.root(str(tmp_path / "cache"))
    assert root == tmp_path / "cache" / "ck"
    first = COMPILER.build("// instance one", hipcc, TARGET, "/opt/ck/include", "", root, 60)
    assert first == root / f"{COMPILER.key('// instance one', hipcc, TARGET, '/opt/ck/include')}.so"
    assert first.read_bytes() == b"not really a library" and first.with_suffix(".cpp").read_text() == "// instance one"
    assert len(log.read_text().splitlines()) == 1 and f"--offload-arch={TARGET}" in log.read_text()
    assert COMPILER.build("// instance one", hipcc, TARGET, "/opt/ck/include", "", root, 60) == first  # a hit
    assert len(log.read_text().splitlines()) == 1
    assert COMPILER.key("// instance one", hipcc, "gfx90a", "/opt/ck/include") != first.stem  # another GPU
    with pytest.raises(BuildError, match="no matching constructor for DeviceOp"):
        COMPILER.build("// FAIL", hipcc, TARGET, "/opt/ck/include", "", root, 60)
    with pytest.raises(BuildError, match="hipcc could not start"):
        COMPILER.build("// instance three", str(tmp_path / "missing-hipcc"), TARGET, "/opt/ck/include", "", root, 60)


# --- choices, specs and their honest failures --------------------------------------------------


def test_on_an_amd_machine_choices_round_trip_through_their_specs(tmp_path):
    problem, env = seed_bf16(), fake_env()
    choices = choices_for(problem, env, tmp_path, 5, 60)
    assert len(choices) == 5
    assert len({c.spec for c in choices}) == 5
    assert len({(c.instance.m_per_block, c.instance.n_per_block, c.instance.k_per_block) for c in choices}) == 5
    for choice in choices:
        assert choice.spec.backend == "ck" and choice.spec.template == "gemm_multiple_d_xdl_cshuffle_v3"
        spec = from_json(to_json(choice.spec), ChoiceSpec)
        rebuilt = rebuild_for(spec, problem, env, tmp_path, 60)
        assert rebuilt is not None and rebuilt.spec == choice.spec and rebuilt.source() == choice.source()
    # a spec of another problem that does not fit this one, or of another version, is not rebuilt
    narrow = choices_for(lm_head(row_stride=32769), env, tmp_path, 1, 60)[0]
    assert rebuild_for(ChoiceSpec("ck", narrow.spec.template, narrow.spec.params), problem, env, tmp_path, 60) is None
    stale = ChoiceSpec("ck", choices[0].spec.template, {**dict(choices[0].spec.params), "tile": 3})
    assert rebuild_for(stale, problem, env, tmp_path, 60) is None
    batched = Problem("bmm", (meta((2, 64, 64), "float16"),) * 2, meta((2, 64, 64), "float16"))
    assert choices_for(batched, env, tmp_path, 2, 60)[0].spec.template == "batched_gemm_multiple_d_xdl_cshuffle_v3"
    with pytest.raises(BuildError, match="hipcc could not start"):
        choices[0].precompile()  # the stand-in environment names a hipcc that does not exist
    # nothing for problems on the CPU, in float32, or of ops the instances do not compute
    cpu = Problem("mm", (TensorMeta.contiguous((64, 64), "float16"),) * 2, TensorMeta.contiguous((64, 64), "float16"))
    assert choices_for(cpu, env, tmp_path, 8, 60) == []
    assert choices_for(mm(meta((64, 64), "float32"), meta((64, 64), "float32")), env, tmp_path, 8, 60) == []
    assert choices_for(problem, fake_env(arch="gfx1100"), tmp_path, 8, 60) == []  # RDNA: no XDL units


# --- "cannot run here" ------------------------------------------------------------------------


def _expected_missing(path: str, rocm: Path) -> dict[str, bool]:
    """Which pieces this machine lacks, found independently of the plugin."""
    hipcc = shutil.which("hipcc", path=path) or (rocm / "bin" / "hipcc").is_file()
    return {
        "a ROCm build of torch": torch.version.hip is None,
        "an AMD GPU": not torch.cuda.is_available(),
        "hipcc (not on PATH": not hipcc,
        "Composable Kernel headers (no include/ck/ck.hpp under ck_dir=": True,  # ck_dir and ROCM_PATH are empty
    }


def test_tunesmith_plugins_names_every_missing_piece(tmp_path):
    path = os.pathsep.join(p for p in ("/usr/bin", "/bin") if Path(p).is_dir())
    rocm, ck = tmp_path / "rocm", tmp_path / "ck"
    environ = run_env(PATH=path, ROCM_PATH=str(rocm), TUNESMITH_CK_DIR=str(ck))
    proc = subprocess.run(
        [sys.executable, "-m", "tunesmith", "plugins", "--json"], capture_output=True, text=True, env=environ
    )
    assert proc.returncode == 0, proc.stderr
    rows = {row["name"]: row for row in json.loads(proc.stdout)}
    row = rows["ck"]
    assert row["distribution"] == "tunesmith-ck" and row["runnable"] is False
    assert set(row["hooks"]) == {
        "tunesmith_add_options",
        "tunesmith_choices",
        "tunesmith_plugin_status",
        "tunesmith_rebuild_choice",
    }
    for piece, missing in _expected_missing(path, rocm).items():
        assert (piece in row["reason"]) == missing, (piece, row["reason"])
    assert rows["aten"]["runnable"] is True  # the other backends are untouched


@pytest.mark.skipif(probe(None).runnable, reason="this machine can run the ck plugin")
def test_where_ck_cannot_run_it_offers_nothing_and_breaks_nothing():
    status = plugin_status("ck")
    assert not status.runnable and status.reason.startswith("missing ")
    assert (status.ops, status.dtypes, status.devices) == (("mm", "addmm", "bmm"), ("float16", "bfloat16"), ("cuda",))
    options = tunesmith.current_options()
    cuda_problem = seed_bf16()
    assert tunesmith_ck.tunesmith_choices(problem=cuda_problem, options=options) == []
    a, b = rand(32, 16), rand(16, 24)
    sel = tunesmith.tune("mm", a, b)
    assert sel.spec.backend == "aten"
    torch.testing.assert_close(sel.kernel(a, b), a @ b)
    with pytest.raises(tunesmith.NoValidChoicesError, match=r"ck: cannot run here: missing a ROCm build of torch"):
        tunesmith.tune("mm", a, b, options={"backends": ["ck"]})


@pytest.mark.skipif(probe(None).runnable, reason="this machine can run the ck plugin: the suite checks it for real")
def test_the_conformance_suite_reports_ck_as_not_runnable_with_the_reason():
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "-rs", "--pyargs", "tunesmith.conformance"]
    proc = subprocess.run([*argv, "--tunesmith-plugin", "ck"], capture_output=True, text=True, env=run_env())
    assert proc.returncode == 0, proc.stdout[-3000:]  # nothing failed
    reason = plugin_status("ck").reason
    assert f"plugin 'ck' (tunesmith-ck 0.1.0), kinds: backend, cannot run here: {reason}" in proc.stdout
    backend = dict(re.findall(r"test_backend\.py::(\S+) (PASSED|FAILED|SKIPPED|ERROR)", proc.stdout))
    assert backend and set(backend.values()) == {"SKIPPED"}, backend
    skips = re.findall(r"SKIPPED \[\d+\] \S*test_backend\.py:\d+: (.*)", proc.stdout)
    assert set(skips) == {f"plugin 'ck' cannot run here: {reason}"}
    assert "its backend checks were skipped, not passed" in proc.stdout
    assert re.search(r"=+ 1 passed, \d+ skipped", proc.stdout.splitlines()[-1])  # test_plugin.py: a backend
