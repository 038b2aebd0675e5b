"""A harmless graph pass with a stable uuid."""

from tunesmith_hookspecs import hookimpl


class SwapNothing:
    uuid = "fixture-goodpass-1"

    def __call__(self, graph):
        for node in graph.nodes:
            node.meta["seen_by_fixture"] = True


@hookimpl
def tunesmith_post_grad_passes(stage):
    return [SwapNothing()] if stage == "post" else []
