"""C++ source of one instance (a shared library with one ``extern "C"`` entry point) and the hipcc
command that builds it.

Targeted Composable Kernel API (the universal XDL GEMM with a multiple-D epilogue):

- mm, addmm: ``ck::tensor_operation::device::DeviceGemmMultiD_Xdl_CShuffle_V3`` from
  ``ck/tensor_operation/gpu/device/impl/device_gemm_multiple_d_xdl_cshuffle_v3.hpp``, whose
  ``MakeArgument`` takes ``KBatch`` (CK of ROCm 6.3 and later);
- bmm: ``ck::tensor_operation::device::DeviceBatchedGemmMultiD_Xdl_CShuffle_V3`` from
  ``ck/tensor_operation/gpu/device/impl/device_batched_gemm_multiple_d_xdl_cshuffle_v3.hpp``.

The epilogue is a functor of this file (CK accepts any ``CDEElementwiseOperation`` called as
``op(e, c, d0, d1, ...)``) that composes CK's element-wise ops from
``ck/tensor_operation/gpu/element/unary_element_wise_operation.hpp`` in float.
"""

from __future__ import annotations

from collections.abc import Sequence

from tunesmith.plugin.native import Compiler, Step, banner, name_function
from tunesmith_ck.gemm import CK_LAYOUTS, CK_TYPES, UNARY, Gemm
from tunesmith_ck.instances import CSHUFFLE_DTYPE, Instance, d_vectors, shuffle, transfer

ENTRY = "tunesmith_ck_gemm"
#: the stride array the entry point reads: lda, ldb, lde, then the batch strides of A, B and E
STRIDES = ("lda", "ldb", "lde", "batch_a", "batch_b", "batch_e")
HEADERS = {
    False: "ck/tensor_operation/gpu/device/impl/device_gemm_multiple_d_xdl_cshuffle_v3.hpp",
    True: "ck/tensor_operation/gpu/device/impl/device_batched_gemm_multiple_d_xdl_cshuffle_v3.hpp",
}
DEVICE_OPS = {
    False: "ck::tensor_operation::device::DeviceGemmMultiD_Xdl_CShuffle_V3",
    True: "ck::tensor_operation::device::DeviceBatchedGemmMultiD_Xdl_CShuffle_V3",
}
#: flags CK's own builds pass for its GEMM kernels (inline everything, no device function calls)
HIPCC_FLAGS = (
    "-x",
    "hip",
    "-std=c++17",
    "-O3",
    "-DNDEBUG",
    "-fPIC",
    "-shared",
    "-fno-gpu-rdc",
    "-mllvm",
    "-amdgpu-early-inline-all=true",
    "-mllvm",
    "-amdgpu-function-calls=false",
)
#: hipcc, building a ``.cpp`` for the GPU's target id (e.g. ``gfx942:sramecc+:xnack-``)
COMPILER = Compiler("ck", "hipcc", ".cpp", HIPCC_FLAGS, "--offload-arch={}")


def _seq(values: Sequence[int]) -> str:
    return "S<" + ", ".join(str(v) for v in values) + ">"


def _step(step: Step) -> str:
    """One epilogue step as C++ on the float ``x``."""
    if step.op in UNARY:
        return f"{{ float y; ew::{UNARY[step.op]}{{}}(y, x); x = y; }}  // {step.op}"
    if step.op in ("add", "mul") and step.operand is not None:
        sign = "+" if step.op == "add" else "*"
        return f"x = x {sign} ck::type_convert<float>(d{step.operand});"
    if step.op in ("add", "mul"):
        sign = "+" if step.op == "add" else "*"
        return f"x = x {sign} scalars[{step.slot}];"
    if step.op == "round":
        return f"x = ck::type_convert<float>(ck::type_convert<{CK_TYPES[step.dtype]}>(x));  // cast to {step.dtype}"  # type: ignore[index]
    raise ValueError(f"unknown epilogue step {step.op!r}")


def _step_name(step: Step) -> str:
    """A step as the source's header comment names it: ``_d`` for a D tensor, ``_s`` for a scalar."""
    return step.op + ("_d" if step.operand is not None else "_s" if step.slot is not None else "")


def render_epilogue(gemm: Gemm) -> str:
    """The CDE element-wise functor: alpha * C (+ beta * bias), then the steps, stored as E's type."""
    ds = range(len(gemm.ds))
    template = "".join(f", typename D{i}" for i in ds)
    params = "".join(f", const D{i}& d{i}" for i in ds)
    body = ["float x = scalars[0] * ck::type_convert<float>(c);"]
    if gemm.bias:
        body.append("x = x + scalars[1] * ck::type_convert<float>(d0);  // addmm: beta * bias")
    body += [_step(step) for step in gemm.steps]
    body.append("e = ck::type_convert<E>(x);")
    lines = "\n".join(f"        {line}" for line in body)
    return f"""struct Epilogue
{{
    float scalars[{len(gemm.scalars)}];

    template <typename E, typename C{template}>
    __host__ __device__ void operator()(E& e, const C& c{params}) const
    {{
{lines}
    }}
}};"""


def render_instance(inst: Instance, gemm: Gemm) -> str:
    """The ``using DeviceOp = ...`` of the instance: every template argument, commented."""
    a, b = transfer(inst, "A", gemm.a), transfer(inst, "B", gemm.b)
    cluster = shuffle(inst)
    if isinstance(a, str) or isinstance(b, str) or isinstance(cluster, str):
        raise ValueError(f"instance {inst.name} is not valid for this problem: {a if isinstance(a, str) else b}")
    cde_vectors = (inst.e_vector, *d_vectors(inst, gemm))
    args = [
        (CK_LAYOUTS[gemm.a.layout], "ALayout"),
        (CK_LAYOUTS[gemm.b.layout], "BLayout"),
        ("DsLayout", "DsLayout"),
        ("Row", "ELayout"),
        ("ADataType", "ADataType"),
        ("BDataType", "BDataType"),
        ("DsDataType", "DsDataType"),
        ("EDataType", "EDataType"),
        ("float", "AccDataType"),
        (CK_TYPES[CSHUFFLE_DTYPE], "CShuffleDataType"),
        ("ew::PassThrough", "AElementwiseOperation"),
        ("ew::PassThrough", "BElementwiseOperation"),
        ("Epilogue", "CDEElementwiseOperation"),
        (f"ck::tensor_operation::device::GemmSpecialization::{inst.gemm_spec}", "GemmSpec"),
        (inst.block_size, "BlockSize"),
        (inst.m_per_block, "MPerBlock"),
        (inst.n_per_block, "NPerBlock"),
        (inst.k_per_block, "KPerBlock"),
        (inst.ak1, "AK1"),
        (inst.bk1, "BK1"),
        (inst.m_per_xdl, "MPerXDL"),
        (inst.n_per_xdl, "NPerXDL"),
        (inst.m_xdl_per_wave, "MXdlPerWave"),
        (inst.n_xdl_per_wave, "NXdlPerWave"),
        (_seq(a.cluster), "ABlockTransferThreadClusterLengths_AK0_M_AK1"),
        (_seq(a.order), "ABlockTransferThreadClusterArrangeOrder"),
        (_seq(a.order), "ABlockTransferSrcAccessOrder"),
        (a.vector_dim, "ABlockTransferSrcVectorDim"),
        (a.src_vector, "ABlockTransferSrcScalarPerVector"),
        (a.dst_vector, "ABlockTransferDstScalarPerVector_AK1"),
        (a.lds_extra, "ABlockLdsExtraM"),
        (_seq(b.cluster), "BBlockTransferThreadClusterLengths_BK0_N_BK1"),
        (_seq(b.order), "BBlockTransferThreadClusterArrangeOrder"),
        (_seq(b.order), "BBlockTransferSrcAccessOrder"),
        (b.vector_dim, "BBlockTransferSrcVectorDim"),
        (b.src_vector, "BBlockTransferSrcScalarPerVector"),
        (b.dst_vector, "BBlockTransferDstScalarPerVector_BK1"),
        (b.lds_extra, "BBlockLdsExtraN"),
        (inst.cshuffle_m, "CShuffleMXdlPerWavePerShuffle"),
        (inst.cshuffle_n, "CShuffleNXdlPerWavePerShuffle"),
        (_seq((1, cluster[0], 1, cluster[1])), "CShuffleBlockTransferClusterLengths_MBlock_MPerBlock_NBlock_NPerBlock"),
        (_seq(cde_vectors), "CDEShuffleBlockTransferScalarPerVectors (E, then each D)"),
        (f"ck::BlockGemmPipelineScheduler::{inst.scheduler}", "BlkGemmPipeSched"),
        (f"ck::BlockGemmPipelineVersion::{inst.pipeline}", "BlkGemmPipelineVer"),
        ("ADataType", "ComputeTypeA"),
        ("BDataType", "ComputeTypeB"),
    ]
    codes = [f"{value}," for value, _ in args[:-1]] + [str(args[-1][0])]
    width = max(len(code) for code in codes)
    body = "\n".join(f"    {code:<{width}} // {what}" for code, (_, what) in zip(codes, args, strict=True))
    return f"using DeviceOp = {DEVICE_OPS[gemm.batched]}<\n{body}\n    >;"


def _arguments(gemm: Gemm) -> list[str]:
    """The C++ lines that pack the entry point's arguments into CK's ``MakeArgument``."""
    d_count = len(gemm.ds)
    idx = "static_cast<ck::index_t>"
    ds = ", ".join(f"ds[{i}]" for i in range(d_count))
    lds = ", ".join(f"{idx}(d_strides[{2 * i}])" for i in range(d_count))
    batch_ds = ", ".join(f"{idx}(d_strides[{2 * i + 1}])" for i in range(d_count))
    lines = [
        f"std::array<const void*, {d_count}> p_ds{{{ds}}};",
        f"std::array<ck::index_t, {d_count}> stride_ds{{{lds}}};",
        f"const auto M = {idx}(m), N = {idx}(n), K = {idx}(k);",
        f"const auto lda = {idx}(strides[0]), ldb = {idx}(strides[1]), lde = {idx}(strides[2]);",
    ]
    if gemm.batched:
        return [
            *lines,
            f"std::array<ck::index_t, {d_count}> batch_stride_ds{{{batch_ds}}};",
            f"const auto batch_a = {idx}(strides[3]), batch_b = {idx}(strides[4]), batch_e = {idx}(strides[5]);",
            "auto argument = op.MakeArgument(a, b, p_ds, e, M, N, K, static_cast<ck::index_t>(batch),",
            "                                lda, ldb, stride_ds, lde, batch_a, batch_b, batch_stride_ds, batch_e,",
            "                                ew::PassThrough{}, ew::PassThrough{}, epilogue);",
        ]
    return [
        *lines,
        "(void)batch;",
        "auto argument = op.MakeArgument(a, b, p_ds, e, M, N, K, lda, ldb, stride_ds, lde, /*KBatch=*/1,",
        "                                ew::PassThrough{}, ew::PassThrough{}, epilogue);",
    ]


def render_source(inst: Instance, gemm: Gemm) -> str:
    """The complete C++ source of one instance for one GEMM's layouts, dtypes and epilogue."""
    a_layout, b_layout = CK_LAYOUTS[gemm.a.layout], CK_LAYOUTS[gemm.b.layout]
    ds_layout = ", ".join(CK_LAYOUTS[d.layout] for d in gemm.ds)
    ds_types = ", ".join(CK_TYPES[d.dtype] for d in gemm.ds)
    steps = ", ".join(_step_name(s) for s in gemm.steps) or "none"
    statements = [
        "Epilogue epilogue{};",
        f"for(int i = 0; i < {len(gemm.scalars)}; ++i)",
        "    epilogue.scalars[i] = scalars[i];",
        "auto op = DeviceOp{};",
        *_arguments(gemm),
        "if(!op.IsSupportedArgument(argument))",
        "    return 1;",
        "op.MakeInvoker().Run(argument, StreamConfig{static_cast<hipStream_t>(stream), false});",
        "return hipGetLastError() == hipSuccess ? 0 : 3;",
    ]
    body = "\n".join(f"        {line}" for line in statements)
    return f"""{banner("ck", inst.name)}
// {DEVICE_OPS[gemm.batched]}
//   from {HEADERS[gemm.batched]}
// {gemm.op}: A {a_layout}-major, B {b_layout}-major, {gemm.dtype} -> E {gemm.out_dtype};
// D tensors: {len(gemm.ds)}{" (the first is the bias)" if gemm.bias else ""}; epilogue steps: {steps}
#include <array>
#include <cstdint>
#include <exception>

#include "ck/ck.hpp"
#include "ck/tensor_operation/gpu/device/tensor_layout.hpp"
#include "ck/tensor_operation/gpu/device/gemm_specialization.hpp"
#include "ck/tensor_operation/gpu/element/element_wise_operation.hpp"
#include "ck/tensor_operation/gpu/element/unary_element_wise_operation.hpp"
#include "{HEADERS[gemm.batched]}"

namespace {{

using Row = ck::tensor_layout::gemm::RowMajor;
using Col = ck::tensor_layout::gemm::ColumnMajor;
template <ck::index_t... Is>
using S  = ck::Sequence<Is...>;
namespace ew = ck::tensor_operation::element_wise;

using ADataType  = {CK_TYPES[gemm.dtype]};
using BDataType  = {CK_TYPES[gemm.dtype]};
using EDataType  = {CK_TYPES[gemm.out_dtype]};
using DsLayout   = ck::Tuple<{ds_layout}>;
using DsDataType = ck::Tuple<{ds_types}>;

{render_epilogue(gemm)}

{render_instance(inst, gemm)}

}} // namespace

{name_function("ck", inst.name)}

// Returns 0 when the kernel was launched, 1 when CK refuses the arguments (IsSupportedArgument),
// 2 when CK threw, 3 when the launch failed.
extern "C" int {ENTRY}(const void* a, const void* b, const void* const* ds, void* e,
                                 int64_t batch, int64_t m, int64_t n, int64_t k,
                                 const int64_t* strides,   // {", ".join(STRIDES)}
                                 const int64_t* d_strides, // per D: leading dimension, batch stride
                                 const float* scalars,     // alpha, beta, then the epilogue's numbers
                                 void* stream)
{{
    try
    {{
{body}
    }}
    catch(const std::exception&)
    {{
        return 2;
    }}
}}
"""
