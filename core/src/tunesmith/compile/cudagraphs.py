"""CUDA graphs around the graphs that a graph compiler other than Inductor runs (``cudagraphs``).

torch's CUDA-graph trees, as Inductor's ``reduce-overhead`` mode and torch's own ``cudagraphs``
backend use them: each forward, backward or inference graph is run once to warm up, then captured
and replayed, with the parameters as static inputs and one memory pool for the forward and its
backward. A graph that cannot be captured (CPU tensors, several devices, mutated inputs, an op
torch marks unsafe) runs as it is, with the reason logged once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch.fx as fx

log = logging.getLogger(__name__)


class Captured:
    """The CUDA-graph state of one compiled function: whether its forward is captured, and where."""

    def __init__(self, num_dynamo_inputs: int) -> None:
        self.num_dynamo_inputs = num_dynamo_inputs
        self.forward_captured = True
        self.device_index: int | None = None

    def wrap(self, compiled: Callable[..., Any], gm: fx.GraphModule, inputs: Sequence[Any], kind: str) -> Any:
        """``compiled`` (a boxed callable running ``gm``) under CUDA graphs, or as it is with the
        reason logged when ``gm`` cannot be captured."""
        from torch._dynamo.backends.cudagraphs import (
            check_for_skip,
            find_input_mutations,
            get_device_index,
            get_stack_traces,
        )
        from torch._inductor.cudagraph_trees import cudagraphify_impl
        from torch._inductor.cudagraph_utils import get_placeholder_info
        from torch._inductor.utils import count_tangents, num_fw_fixed_arguments

        backward = kind == "backward"
        if backward and not self.forward_captured:
            return compiled
        fixed = count_tangents(gm) if backward else num_fw_fixed_arguments(self.num_dynamo_inputs, len(inputs))
        why = check_for_skip(gm, fixed)
        if why is not None:
            log.warning("tunesmith: the %s graph runs without CUDA graphs: %s", kind, why)
            if not backward:
                self.forward_captured = False
                return compiled
            return self._backward_outside(compiled)
        device = get_device_index(gm)
        if not backward:
            self.device_index = device
        out = cudagraphify_impl(
            compiled,
            list(inputs),
            range(fixed),
            device_index=device,
            is_backward=backward,
            is_inference=kind == "inference",
            stack_traces=get_stack_traces(gm),
            placeholders=get_placeholder_info(gm.graph),
            mutated_input_idxs=find_input_mutations(gm.graph),
        )
        out._boxed_call = True
        return out

    def _backward_outside(self, compiled: Callable[..., Any]) -> Any:
        """A backward run outside CUDA graphs after a captured forward: the trees' manager is told,
        so that it does not take the backward's tensors for a new generation's."""
        from torch._inductor.cudagraph_trees import get_manager

        manager = get_manager(self.device_index or 0, create_if_none_exists=False)

        def run(args: list[Any]) -> Any:
            if manager is not None:
                manager.set_to_running_backward()
            return compiled(args)

        run._boxed_call = True  # type: ignore[attr-defined]
        return run
