"""The matrix exponential of n <= 4 matrices in one pass over the batch: the entry points, their
queries of the path table (``paths.TABLES["matrix_exp"]``) and the Metal host code.

The algorithm is `mpslinalg.small.codegen.emit_matrix_exp` (scaling and squaring with the
[7/7] Padé approximant, each matrix its own scaling and squarings), generated for three
targets: ``metal/linalg/small_matrix_exp.{h,metal}`` (metal backend, float32 and complex64, one
launch per call, one thread per matrix), `mpslinalg.small.cpu_simd` (torch backend on CPU,
float32) and `mpslinalg.small.triton_kernels` (torch backend on CUDA, float32). Where no row
of the table serves a call (float64, complex on the torch backend), torch.linalg.matrix_exp
runs. Forward only, no host synchronisation, inputs never modified.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch

from .._core import metal as _metal
from . import paths

#: Metal source of the kernels.
_SOURCE = "linalg/small_matrix_exp.metal"

#: Threads per threadgroup of the one-thread-per-matrix kernels.
_GROUP = 256


def _metal_matrix_exp(A: torch.Tensor) -> torch.Tensor:
    """One launch of ``small_matrix_exp_<dtype>_n<N>`` over the batch of A."""
    from .._core.copy import contiguous

    X = torch.empty(A.shape, dtype=A.dtype, device=A.device)
    batch = math.prod(A.shape[:-2])
    if batch:
        kern = _metal.kernel(_SOURCE, "small_matrix_exp", A.dtype, A.device, fn="matrix_exp",
                             n=A.shape[-1])
        _metal.launch(kern, contiguous(A, "matrix_exp"), X, batch, threads=batch,
                      group_size=min(_GROUP, batch))
    return X


#: The functions of the paths this op binds itself (`paths.functions` has the generated
#: kernels').
_OWN = {
    paths.METAL: SimpleNamespace(small_matrix_exp=_metal_matrix_exp),
    paths.TORCH_LINALG: SimpleNamespace(small_matrix_exp=torch.linalg.matrix_exp),
}


def may_use_small_matrix_exp(A: torch.Tensor) -> bool:
    """A cheap necessary condition of `use_small_matrix_exp` on the torch backend (shapes only:
    `mpslinalg.small.paths.may_take_small_path`)."""
    return paths.may_take_small_path("matrix_exp", A)


def use_small_matrix_exp(A: torch.Tensor, backend: str | None = None) -> bool:
    """True when the small path should compute exp(``A``) on ``backend`` (default: the one in
    force): n <= 4, every batch on the metal backend, on the torch backend from the table's
    crossover."""
    return paths.takes_small_path("matrix_exp", A, backend)


def small_matrix_exp(A: torch.Tensor, *, backend: str | None = None) -> torch.Tensor:
    """exp(A) for A (*, n, n), n <= 4, by the path the table chooses for ``backend``."""
    path = paths.choose("matrix_exp", A, backend)
    return paths.functions(path, _OWN).small_matrix_exp(A)
