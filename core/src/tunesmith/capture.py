"""Whether a CUDA graph is being captured on this thread's stream: then nothing may be tuned,
synchronised or allocated outside the graph's pool, so selection refuses to run."""

from __future__ import annotations

import torch


def capturing() -> bool:
    """True while the current CUDA stream is capturing a graph (False without CUDA)."""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
