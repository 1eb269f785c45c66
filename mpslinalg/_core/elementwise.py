"""Host side of elementwise kernels over broadcast, strided operands
(metal/common/elementwise.h).

Operands are bound as they are (a kernel reads the storage of each view at its own strides,
stride 0 along broadcast dimensions), so non-contiguous and broadcast inputs cost no gather.
"""

from __future__ import annotations

import torch

from . import checks

#: Mirrors ``kMaxElementwiseDims`` in metal/common/elementwise.h.
MAX_DIMS = 16


def broadcast_views(fn: str, *tensors: torch.Tensor) -> tuple[torch.Size, list[torch.Tensor]]:
    """The broadcast shape of ``tensors`` and each one expanded to it (views, no copy); raises
    torch's broadcasting error reworded to name ``mpslinalg.<fn>``."""
    try:
        shape = checks.broadcast_shapes(*(t.shape for t in tensors))
    except RuntimeError:
        got = ", ".join(str(tuple(t.shape)) for t in tensors)
        raise RuntimeError(f"mpslinalg.{fn}: the shapes {got} do not broadcast") from None
    if len(shape) > MAX_DIMS:
        raise RuntimeError(f"mpslinalg.{fn}: at most {MAX_DIMS} dimensions are supported on the "
                           f"metal backend, got {len(shape)}")
    return shape, [t.expand(shape) for t in tensors]


def layout(shape: torch.Size, *views: torch.Tensor) -> list[list[int]]:
    """``[sizes, strides of each view]`` as kernel arguments (0-dim shapes as one element)."""
    if len(shape) == 0:
        return [[1]] + [[0] for _ in views]
    return [list(shape)] + [list(v.stride()) for v in views]
