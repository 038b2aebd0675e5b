"""ATen's cost model: the kernels torch runs for a Problem, each at the roofline, plus a launch each.

The calibrated profile is measured with ``torch.mm`` itself, so a large GEMM's estimate is close
to its time; small ones take longer (cuBLAS's own fixed costs). Pruning uses this estimate only as
a reference: a choice estimated far above it is not worth benchmarking beside ATen's.
"""

from __future__ import annotations

from tunesmith.plugin import flops, math_dtype, meta_bytes, problem_bytes, roofline
from tunesmith_hookspecs import DeviceInfo, Problem

#: seconds each kernel's launch adds
LAUNCH_S = 4e-6


def _bias_in_epilogue(problem: Problem) -> bool:
    """Whether cuBLAS adds the bias in the GEMM's epilogue: a bias of one row (torch copies any
    other into the output first, then accumulates onto it)."""
    bias = problem.inputs[0]
    return problem.op == "addmm" and (len(bias.shape) == 1 or (len(bias.shape) == 2 and bias.stride[0] == 0))


def kernels(problem: Problem, template: str) -> list[tuple[int, int]]:
    """(FLOPs, bytes) of each kernel ``template`` runs for the Problem, in order."""
    out, ins, work = meta_bytes(problem.output), problem.inputs, flops(problem)
    if problem.op == "mm_plus_mm":
        one = work * ins[0].shape[1] // (ins[0].shape[1] + ins[2].shape[1])  # A @ B's share (K may differ)
        first, second = (one, meta_bytes(ins[0]) + meta_bytes(ins[1]) + out), meta_bytes(ins[2]) + meta_bytes(ins[3])
        if template == "mm_then_addmm":  # the second GEMM copies the first's result, then adds onto it
            found = [first, (0, 2 * out), (work - one, second + 2 * out)]
        else:  # two products, then their sum
            found = [first, (work - one, second + out), (0, 3 * out)]
    elif problem.op in ("addmm", "baddbmm"):
        gemm = meta_bytes(ins[1]) + meta_bytes(ins[2])
        if _bias_in_epilogue(problem):
            found = [(work, gemm + meta_bytes(ins[0]) + out)]
        else:
            found = [(0, meta_bytes(ins[0]) + out), (work, gemm + 2 * out)]
    else:  # mm, bmm, conv
        found = [(work, sum(meta_bytes(m) for m in ins[: problem.num_op_inputs]) + out)]
    steps = problem.epilogue[1:] if template == "addmm_activation" else problem.epilogue
    for step in steps:  # each a pass over the output (reading its tensor operand, if any)
        operand = meta_bytes(ins[step.input]) if isinstance(step.input, int) else 0
        found.append((0, 2 * out + operand))
    return found


def estimate_ms(problem: Problem, template: str, device: DeviceInfo) -> float:
    """Milliseconds for ``template`` on ``problem``: its kernels at the roofline, plus a launch each."""
    dtype = math_dtype(problem)
    steps = kernels(problem, template)
    return sum(roofline(f, b, device, dtype).ms for f, b in steps) + len(steps) * LAUNCH_S * 1e3


#: attention's fused backends against the roofline: they reach about half of it on a Hopper
#: (the softmax between the products keeps the tensor cores waiting)
FUSED_ATTENTION_EFFICIENCY = 0.5


def attention_ms(problem: Problem, backend: str, device: DeviceInfo) -> float:
    """Milliseconds for one of torch's attention backends: a fused one at a share of the roofline;
    the math path's score matrix written and read by each of its passes (scores, scale and mask,
    softmax, its cast; twice that for training) at the memory floor, plus a launch per pass."""
    dtype = math_dtype(problem)
    fused = roofline(flops(problem), problem_bytes(problem), device, dtype).ms / FUSED_ATTENTION_EFFICIENCY
    if backend != "math":
        return fused + LAUNCH_S * 1e3
    b, hq, length, _ = problem.inputs[0].shape
    s = problem.inputs[1].shape[2]
    passes = 8 if problem.scalar("grad") else 4
    scores = 2 * passes * b * hq * length * s * 4  # each pass reads and writes float32 scores
    return roofline(flops(problem), problem_bytes(problem) + scores, device, dtype).ms + passes * LAUNCH_S * 1e3
