"""The ``torch.compile`` backend: ``torch.compile(model, backend="tunesmith", options={...})``.

``backend`` (in :mod:`tunesmith.compile.backend`) runs the pipeline; :mod:`.stages` holds the
graph passes and the post-grad stage, :mod:`.lowering` turns GEMM chains into calls of the
``tunesmith::gemm`` custom op (:mod:`.dispatch`), :mod:`.graphcache` keys graphs and their plans,
and :mod:`.inductor` runs the stages as Inductor's custom passes; :mod:`.install_keys` keeps
Inductor's hashes of the torch and Triton installations across processes. Inductor, the default
graph compiler, is loaded with this package (a second of imports), when ``torch.compile`` looks
the backend up, as torch's own ``inductor`` backend is, rather than inside the first call.
"""

import torch._inductor.compile_fx  # noqa: F401 - loaded here, at torch.compile(), as Inductor's backend loads it

from tunesmith.compile.backend import backend

__all__ = ["backend"]
