"""Boolean inputs (attention masks) are timed with the caller's values, not random ones.

A kernel may skip what a mask masks, so its time depends on the mask: random bits keep every
block, a padding or causal mask keeps some. The rotating input sets reuse the caller's boolean
tensors, and a benchmark worker gets their values as bits in its setup job (base64 of the
storage the view reaches; JSON, never pickle), up to ``MAX_ELEMENTS`` a tensor.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Mapping, Sequence

import torch

from tunesmith.problem import _storage_size
from tunesmith_hookspecs import TensorMeta

log = logging.getLogger(__name__)

#: a boolean input of more storage elements than this is random in the worker (8 MiB of bits)
MAX_ELEMENTS = 64 * 1024 * 1024


#: the weight of each of a byte's eight bits, first bit highest
_BITS = torch.tensor([128, 64, 32, 16, 8, 4, 2, 1], dtype=torch.uint8)


def _pack(flat: torch.Tensor) -> bytes:
    """Booleans as bits, eight a byte, the first the highest (zeros pad the last byte)."""
    padded = torch.zeros((flat.numel() + 7) // 8 * 8, dtype=torch.uint8)
    padded[: flat.numel()] = flat.to(torch.uint8)
    packed = (padded.view(-1, 8) * _BITS).sum(1, dtype=torch.uint8)
    return bytes(packed.contiguous().untyped_storage())


def _unpack(data: bytes, count: int) -> torch.Tensor:
    """``_pack``'s first ``count`` booleans."""
    packed = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return ((packed[:, None] & _BITS) != 0).reshape(-1)[:count]


def payload(metas: Sequence[TensorMeta], inputs: Sequence[torch.Tensor]) -> dict[str, str]:
    """The values of the boolean ``inputs``, by index: the bits of the storage each view reaches."""
    out = {}
    for index, (meta, t) in enumerate(zip(metas, inputs, strict=False)):
        if t.dtype != torch.bool:
            continue
        size = _storage_size(meta)
        if size > MAX_ELEMENTS:
            log.debug("input %d: a boolean tensor of %d elements is timed with random values", index, size)
            continue
        storage = torch.as_strided(t.detach(), (size,), (1,), 0).cpu()
        out[str(index)] = base64.b64encode(_pack(storage)).decode("ascii")
    return out


def apply(
    metas: Sequence[TensorMeta], inputs: list[torch.Tensor], values: Mapping[str, str], device: torch.device
) -> None:
    """Replace the inputs that ``values`` (``payload``'s) holds with tensors of those values."""
    for key, bits in values.items():
        index = int(key)
        meta = metas[index]
        storage = _unpack(base64.b64decode(bits), _storage_size(meta)).to(device)
        inputs[index] = storage.as_strided(meta.shape, meta.stride, meta.storage_offset)
