"""Strided gather into contiguous memory on the metal backend (metal/common/copy.metal).

Kernels take contiguous row-major matrices; this turns any view (slices, transposes, broadcast
batch dimensions with stride 0) into one in a single launch.
"""

from __future__ import annotations

import torch

from . import metal as _metal


def contiguous(x: torch.Tensor, fn: str = "contiguous") -> torch.Tensor:
    """``x`` as a contiguous tensor, gathered by the Metal kernel when it is not already; lazy
    conjugate / negative views (``A.mH`` of complex input) are materialised first, since
    kernels read storage, not view flags."""
    x = x.resolve_conj().resolve_neg()
    if x.is_contiguous():
        return x
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    numel = x.numel()
    if numel == 0:
        return out
    kernel = _metal.kernel("common/copy.metal", "copy_strided", x.dtype, x.device, fn=fn)
    sizes = list(x.shape) or [1]
    strides = list(x.stride()) or [1]
    _metal.launch(kernel, x, out, sizes, strides, len(sizes), numel,
                  threads=_metal.grid_stride_threads(numel), group_size=None)
    return out
