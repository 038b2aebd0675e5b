"""attention whose kernel runs only on the caller's mask (keeping exactly the first half of the
keys): the benchmark worker must time a boolean input with its caller's values, not random ones."""

import torch
import torch.nn.functional as F

from tunesmith_hookspecs import ChoiceSpec, PluginStatus, hookimpl

NAME = "fixture_mask"


def _first_half_only(q, k, v, mask=None):
    keys = k.shape[2]
    if mask is None or not bool((mask == (torch.arange(keys, device=mask.device) < keys // 2)).all()):
        raise RuntimeError("not the caller's mask: it does not keep exactly the first half of the keys")
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class Choice:
    def __init__(self, spec):
        self.spec = spec

    def precompile(self):
        pass

    def kernel(self):
        return _first_half_only


@hookimpl
def tunesmith_choices(problem, options):
    return [Choice(ChoiceSpec(NAME, "first_half_only"))] if problem.op == "attention" else []


@hookimpl
def tunesmith_rebuild_choice(spec, problem):
    return Choice(spec) if spec.backend == NAME and problem.op == "attention" else None


@hookimpl
def tunesmith_plugin_status():
    return PluginStatus(True, ops=["attention"], dtypes=["float32"])
