"""C++ source of one instance for one kind of GEMM: a shared library with a plain C ABI, and the nvcc
command that builds it.

The library exports (all ``extern "C"``, no torch headers):

- ``const char* tunesmith_cutlass_instance()``: the instance's name, checked on load;
- ``int tunesmith_cutlass_can_implement(ARGS)``: 0 when CUTLASS accepts the arguments, 1 when not,
  4 on an exception;
- ``int64_t tunesmith_cutlass_workspace_size(ARGS)``: the bytes of workspace the launch needs;
- ``int tunesmith_cutlass_run(ARGS, void* workspace, int64_t workspace_bytes, void* stream)``:
  0 when launched, 1 refused (``can_implement``), 2 ``initialize`` failed, 3 the launch failed,
  4 an exception was thrown;

where ``ARGS`` is ``(const void* a, const void* b, void* d, const void* const* operands, int64_t m,
int64_t n, int64_t k, int64_t batch, const int64_t* strides, const float* scalars)``: raw device
pointers, the sizes, the strides (see :data:`STRIDES`, then per epilogue operand its leading
dimension and batch stride) and the epilogue's numbers (alpha, beta, then the steps' scalars).
Nothing in the source depends on sizes, strides or numbers.
"""

from __future__ import annotations

from tunesmith.plugin.native import Compiler, banner, name_function
from tunesmith_cutlass.epilogue import Flavor, Tree, describe_steps, render_tree
from tunesmith_cutlass.gemm import CUTLASS_TYPES, ELEMENT_BYTES, MMA_TYPES, VECTOR_BYTES, Kind, OperandKind
from tunesmith_cutlass.instances import MMA_SHAPE, Instance, epilogue_vector

CAN_IMPLEMENT = "tunesmith_cutlass_can_implement"
WORKSPACE = "tunesmith_cutlass_workspace_size"
RUN = "tunesmith_cutlass_run"
#: the first entries of the stride array: leading dimensions, then batch strides, of A, B and D
STRIDES = ("lda", "ldb", "ldd", "batch_a", "batch_b", "batch_d")
#: flags of every build (the -gencode and include folder are added per build)
NVCC_FLAGS = (
    "-std=c++17",
    "-O3",
    "-DNDEBUG",
    "--expt-relaxed-constexpr",
    "-shared",
    "-Xcompiler",
    "-fPIC",
)
#: nvcc, building a ``.cu`` for one ``-gencode`` (:meth:`~tunesmith_cutlass.arch.Arch.gencode`)
COMPILER = Compiler("cutlass", "nvcc", ".cu", NVCC_FLAGS, "-gencode={}")
LAYOUTS = {"row": "cutlass::layout::RowMajor", "col": "cutlass::layout::ColumnMajor"}
ARGS = (
    "const void* a, const void* b, void* d, const void* const* operands, int64_t m, int64_t n, int64_t k, "
    "int64_t batch, const int64_t* strides, const float* scalars"
)
ARG_NAMES = "a, b, d, operands, m, n, k, batch, strides, scalars"


def _operand_stride(o: OperandKind, i: int) -> str:
    """The cute stride of operand ``i`` (its leading dimension and batch stride are run-time values)."""
    ld, batch = f"strides[{6 + 2 * i}]", f"strides[{7 + 2 * i}]"
    if o.kind == "row":
        return f"cute::make_stride(cute::_0{{}}, cute::_1{{}}, {batch})"
    if o.kind == "col":
        return f"cute::make_stride(cute::_1{{}}, cute::_0{{}}, {batch})"
    return f"cute::make_stride({ld}, cute::_1{{}}, {batch})"


def _ptr(o: OperandKind, i: int, const: bool = True) -> str:
    qualifier = " const" if const else ""
    cast = "static_cast" if const else "const_cast"
    pointer = f"operands[{i}]" if const else f"static_cast<{CUTLASS_TYPES[o.dtype]} const*>(operands[{i}])"
    return f"{cast}<{CUTLASS_TYPES[o.dtype]}{qualifier}*>({pointer})"


def sm90_flavor() -> Flavor:
    """CUTLASS 3.x's visitor nodes; a full operand is C, read by the epilogue's own TMA loads."""
    ns = "cutlass::epilogue::fusion"
    stride = {"row": "cute::Stride<cute::_0, cute::_1, int64_t>", "col": "cute::Stride<cute::_1, cute::_0, int64_t>"}

    def operand(o: OperandKind, i: int) -> str:
        t = CUTLASS_TYPES[o.dtype]
        if o.kind == "full":
            return f"{ns}::Sm90SrcFetch<{t}>"
        node = "Sm90RowBroadcast" if o.kind == "row" else "Sm90ColBroadcast"
        return f"{ns}::{node}<0, TileShape, {t}, float, {stride[o.kind]}, {o.alignment}>"

    def operand_args(o: OperandKind, i: int) -> str:
        if o.kind == "full":
            return "{}"
        return f"{{{_ptr(o, i)}, {CUTLASS_TYPES[o.dtype]}(0), {_operand_stride(o, i)}}}"

    return Flavor(f"{ns}::Sm90AccFetch", f"{ns}::Sm90ScalarBroadcast", f"{ns}::Sm90Compute", f"{ns}::Sm90EVT",
                  operand, operand_args)  # fmt: skip


def sm80_flavor() -> Flavor:
    """CUTLASS 2.x's visitor nodes, all reading through the epilogue's ``OutputTileThreadMap``."""
    ns = "cutlass::epilogue::threadblock"
    stride = {
        "row": "cute::Stride<cute::_0, cute::_1, int64_t>",
        "col": "cute::Stride<cute::_1, cute::_0, int64_t>",
        "full": "cute::Stride<int64_t, cute::_1, int64_t>",
    }
    nodes = {"row": "VisitorRowBroadcast", "col": "VisitorColBroadcast", "full": "VisitorAuxLoad"}

    def operand(o: OperandKind, i: int) -> str:
        return f"{ns}::{nodes[o.kind]}<OutputTileThreadMap, {CUTLASS_TYPES[o.dtype]}, {stride[o.kind]}>"

    def operand_args(o: OperandKind, i: int) -> str:
        return f"{{{_ptr(o, i, const=o.kind != 'full')}, {CUTLASS_TYPES[o.dtype]}(0), {_operand_stride(o, i)}}}"

    return Flavor(f"{ns}::VisitorAccFetch", f"{ns}::VisitorScalarBroadcast", f"{ns}::VisitorCompute",
                  f"{ns}::Sm80EVT", operand, operand_args)  # fmt: skip


def _matrix_stride(layout: str, operand: str) -> str:
    """The cute stride of A (M, K, L) or B (N, K, L) in CUTLASS 3.x's convention."""
    ld, batch = ("strides[0]", "strides[3]") if operand == "A" else ("strides[1]", "strides[4]")
    k_major = (layout == "row") == (operand == "A")
    if k_major:
        return f"cute::make_stride({ld}, cute::_1{{}}, {batch})"
    return f"cute::make_stride(cute::_1{{}}, {ld}, {batch})"


def _int(value: int) -> str:
    return f"cute::Int<{value}>"


def _sm90_types(inst: Instance, kind: Kind, tree: Tree) -> list[str]:
    size = ELEMENT_BYTES[kind.dtype]
    full = [o for o in kind.operands if o.kind == "full"]
    element_c = CUTLASS_TYPES[full[0].dtype] if full else "void"
    align_c = VECTOR_BYTES // ELEMENT_BYTES[full[0].dtype] if full else kind.out_alignment
    coop = inst.schedule == "cooperative"
    kernel = "KernelTmaWarpSpecializedCooperative" if coop else "KernelTmaWarpSpecializedPingpong"
    epilogue = "TmaWarpSpecializedCooperative" if coop else "TmaWarpSpecialized"
    return [
        f"using TileShape    = cute::Shape<{_int(inst.tile_m)}, {_int(inst.tile_n)}, {_int(inst.tile_k)}>;",
        f"using ClusterShape = cute::Shape<{_int(inst.cluster_m)}, {_int(inst.cluster_n)}, cute::_1>;",
        "",
        "// the epilogue visitor tree",
        *tree.types,
        "",
        "using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<",
        "    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,",
        "    cutlass::epilogue::collective::EpilogueTileAuto, float, float,",
        f"    {element_c}, cutlass::layout::RowMajor, {align_c},",
        f"    ElementD, cutlass::layout::RowMajor, {kind.out_alignment},",
        f"    cutlass::epilogue::{epilogue}, {tree.root}>::CollectiveOp;",
        "using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<",
        "    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,",
        f"    ElementA, {LAYOUTS[kind.a_layout]}, {VECTOR_BYTES // size},",
        f"    ElementB, {LAYOUTS[kind.b_layout]}, {VECTOR_BYTES // size},",
        "    float, TileShape, ClusterShape,",
        "    cutlass::gemm::collective::StageCountAutoCarveout<",
        "        static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,",
        f"    cutlass::gemm::{kernel}>::CollectiveOp;",
        "using GemmKernel = cutlass::gemm::kernel::GemmUniversal<",
        "    cute::Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue>;",
        "using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;",
    ]


def _sm90_arguments(kind: Kind, tree: Tree) -> list[str]:
    full = [(i, o) for i, o in enumerate(kind.operands) if o.kind == "full"]
    if full:
        i, o = full[0]
        c_ptr, c_stride = _ptr(o, i), _operand_stride(o, i)
    else:
        c_ptr, c_stride = "nullptr", "cute::make_stride(int64_t(0), cute::_1{}, int64_t(0))"
    return [
        "cutlass::KernelHardwareInfo hw_info;",
        "hw_info.device_id = device_id();",
        "hw_info.sm_count = sm_count(hw_info.device_id);",
        *tree.args,
        "typename Gemm::Arguments arguments{",
        "    cutlass::gemm::GemmUniversalMode::kGemm,",
        "    {int(m), int(n), int(k), int(batch)},",
        f"    {{static_cast<ElementA const*>(a), {_matrix_stride(kind.a_layout, 'A')},",
        f"     static_cast<ElementB const*>(b), {_matrix_stride(kind.b_layout, 'B')}}},",
        f"    {{{tree.root.lower()}, {c_ptr}, {c_stride},",
        "     static_cast<ElementD*>(d), cute::make_stride(strides[2], cute::_1{}, strides[5])},",
        "    hw_info};",
        "return arguments;",
    ]


def _sm80_types(inst: Instance, kind: Kind, tree: Tree) -> list[str]:
    mma_m, mma_n, mma_k = MMA_SHAPE[ELEMENT_BYTES[kind.dtype]]
    warp_m, warp_n = inst.tile_m // inst.warps_m, inst.tile_n // inst.warps_n
    vector = epilogue_vector(kind)
    ns = "cutlass::epilogue::threadblock"
    block = f"cutlass::gemm::GemmShape<{inst.tile_m}, {inst.tile_n}, {inst.tile_k}>"
    warp = f"cutlass::gemm::GemmShape<{warp_m}, {warp_n}, {inst.tile_k}>"
    return [
        f"using OutputTileThreadMap = {ns}::OutputTileThreadLayout<",
        f"    {block}, {warp}, ElementD, {vector}, 1>;",
        "",
        "// the epilogue visitor tree, stored to D",
        *tree.types,
        f"using StoreD = {ns}::VisitorAuxStore<OutputTileThreadMap, ElementD,",
        "    cutlass::FloatRoundStyle::round_to_nearest, cute::Stride<int64_t, cute::_1, int64_t>>;",
        f"using Callbacks = {ns}::Sm80EVT<StoreD, {tree.root}>;",
        "",
        "using GemmKernel = typename cutlass::gemm::kernel::DefaultGemmWithVisitor<",
        f"    ElementA, {LAYOUTS[kind.a_layout]}, cutlass::ComplexTransform::kNone, {kind.a_alignment},",
        f"    ElementB, {LAYOUTS[kind.b_layout]}, cutlass::ComplexTransform::kNone, {kind.b_alignment},",
        f"    ElementD, cutlass::layout::RowMajor, {vector},",
        "    float, float, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,",
        f"    {block}, {warp}, cutlass::gemm::GemmShape<{mma_m}, {mma_n}, {mma_k}>,",
        "    Callbacks, cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<8>,",
        f"    {inst.stages}, cutlass::arch::OpMultiplyAdd, 1>::GemmKernel;",
        "using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;",
    ]


def _sm80_arguments(kind: Kind, tree: Tree) -> list[str]:
    mode = "kBatched" if kind.batched else "kGemm"
    return [
        *tree.args,
        "typename StoreD::Arguments store_d{static_cast<ElementD*>(d),",
        "    cute::make_stride(strides[2], cute::_1{}, strides[5])};",
        f"typename Callbacks::Arguments callbacks{{{tree.root.lower()}, store_d}};",
        "typename Gemm::Arguments arguments(",
        f"    cutlass::gemm::GemmUniversalMode::{mode}, {{int(m), int(n), int(k)}}, int(batch), callbacks,",
        "    a, b, nullptr, nullptr, strides[3], strides[4], 0, strides[5],",
        "    strides[0], strides[1], int64_t(0), strides[2]);",
        "return arguments;",
    ]


HEADERS = {
    "sm90": (
        "cutlass/gemm/collective/collective_builder.hpp",
        "cutlass/epilogue/collective/collective_builder.hpp",
        "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp",
        "cutlass/gemm/kernel/gemm_universal.hpp",
        "cutlass/gemm/device/gemm_universal_adapter.h",
    ),
    "sm80": (  # cutlass::gemm first: the visitors' headers name it where cute::gemm is also visible
        "cutlass/gemm/device/gemm_universal_adapter.h",
        "cutlass/gemm/kernel/default_gemm_universal_with_visitor.h",
        "cutlass/epilogue/threadblock/fusion/visitors.hpp",
    ),
}


#: sm90's persistent kernels size their grid by the SM count: asked once per device, not every launch
SM_COUNT = """int device_id() {
    int device = 0;
    cudaGetDevice(&device);
    return device;
}

int sm_count(int device) {
    static int counts[64] = {};
    if(device < 0 || device >= 64)
        return cutlass::KernelHardwareInfo::query_device_multiprocessor_count(device);
    if(counts[device] == 0)
        counts[device] = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(device);
    return counts[device];
}

"""


def render_source(inst: Instance, kind: Kind) -> str:
    """The complete C++ source of one instance for one kind of GEMM."""
    if inst.family == "sm90":
        tree = render_tree(kind, sm90_flavor(), "ElementD")
        types, arguments = _sm90_types(inst, kind, tree), _sm90_arguments(kind, tree)
    else:
        tree = render_tree(kind, sm80_flavor(), "ElementD")
        types, arguments = _sm80_types(inst, kind, tree), _sm80_arguments(kind, tree)
    includes = "\n".join(f'#include "{h}"' for h in HEADERS[inst.family])
    helpers = SM_COUNT if inst.family == "sm90" else ""
    # sm80 reads float32 as float, so that its warp MMA rounds the operands to TF32; as tfloat32_t
    # the raw bits would reach the tensor cores, which truncate them (1.14x the tolerance on the
    # H100). sm90's wgmma takes tfloat32_t.
    element = "float" if inst.family == "sm80" and kind.dtype == "float32" else MMA_TYPES[kind.dtype]
    body = "\n".join(f"    {line}" for line in arguments)
    operands = ", ".join(f"{o.kind} {o.dtype} (vector {o.alignment})" for o in kind.operands) or "none"
    return f"""{banner("cutlass", inst.name)}
// A {kind.a_layout}-major (vector {kind.a_alignment}), B {kind.b_layout}-major (vector {kind.b_alignment}),
// {kind.dtype} -> D {kind.out_dtype} row-major (vector {kind.out_alignment}){", batched" if kind.batched else ""}
// epilogue operands: {operands}
// epilogue: {describe_steps(kind)}
#include <cstddef>
#include <cstdint>
#include <exception>

#include <cuda_runtime.h>

#include "cutlass/cutlass.h"
#include "cutlass/kernel_hardware_info.h"
#include "cute/tensor.hpp"
#include "cutlass/numeric_types.h"
#include "cutlass/functional.h"
#include "cutlass/epilogue/thread/activation.h"
{includes}

namespace {{

using ElementA = {element};
using ElementB = {element};
using ElementD = {CUTLASS_TYPES[kind.out_dtype]};

{chr(10).join(types)}

{helpers}typename Gemm::Arguments make_arguments({ARGS}) {{
{body}
}}

}} // namespace

{name_function("cutlass", inst.name)}

extern "C" int {CAN_IMPLEMENT}({ARGS}) {{
    try {{
        return Gemm::can_implement(make_arguments({ARG_NAMES})) == cutlass::Status::kSuccess ? 0 : 1;
    }} catch(const std::exception&) {{
        return 4;
    }}
}}

extern "C" int64_t {WORKSPACE}({ARGS}) {{
    try {{
        return static_cast<int64_t>(Gemm::get_workspace_size(make_arguments({ARG_NAMES})));
    }} catch(const std::exception&) {{
        return -1;
    }}
}}

extern "C" int {RUN}({ARGS},
                     void* workspace, int64_t workspace_bytes, void* stream) {{
    try {{
        auto arguments = make_arguments({ARG_NAMES});
        if(Gemm::can_implement(arguments) != cutlass::Status::kSuccess)
            return 1;
        if(static_cast<int64_t>(Gemm::get_workspace_size(arguments)) > workspace_bytes)
            return 2;
        Gemm gemm;
        auto cuda_stream = static_cast<cudaStream_t>(stream);
        if(gemm.initialize(arguments, workspace, cuda_stream) != cutlass::Status::kSuccess)
            return 2;
        return gemm.run(cuda_stream) == cutlass::Status::kSuccess ? 0 : 3;
    }} catch(const std::exception&) {{
        return 4;
    }}
}}
"""
