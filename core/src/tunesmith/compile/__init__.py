"""The ``torch.compile`` backend: ``torch.compile(model, backend="tunesmith", options={...})``.

``backend`` (in :mod:`tunesmith.compile.backend`) runs the pipeline; :mod:`.stages` holds the
graph passes and the post-grad stage, :mod:`.lowering` turns GEMM chains into calls of the
``tunesmith::gemm`` custom op (:mod:`.dispatch`), :mod:`.graphcache` keys graphs and their plans,
and :mod:`.inductor` runs the stages as Inductor's custom passes.
"""

from tunesmith.compile.backend import backend

__all__ = ["backend"]
