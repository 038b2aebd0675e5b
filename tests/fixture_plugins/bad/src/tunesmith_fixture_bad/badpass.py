"""A graph pass with a uuid that changes every process, which also breaks the graph."""

import os

from tunesmith_hookspecs import hookimpl


class Breaker:
    uuid = f"fixture-badpass-{os.getpid()}"

    def __call__(self, graph):
        nodes = [n for n in graph.nodes if n.op == "call_function"]
        if nodes:  # make the first op use the output of the last: used before defined
            first, last = nodes[0], nodes[-1]
            first.args = (last, *first.args[1:])


@hookimpl
def tunesmith_pre_grad_passes():
    return [Breaker()]
