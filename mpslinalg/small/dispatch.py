"""Batched inverse, determinant and solve for n <= 4 (camera geometry), in one pass over the batch:
the entry points, their queries of the path table (`mpslinalg.small.paths`) and the Metal host
code.

Camera-geometry code inverts millions of 2x2 / 3x3 / 4x4 matrices per step (poses, intrinsics,
homographies). A general LU pays per-matrix overhead; this module computes the same LAPACK-style
factorisation for the whole batch at once:

- metal backend: one launch of ``metal/linalg/small_inverse.metal`` per op, one thread per matrix,
  the matrix in registers;
- torch backend on CPU, float32: generated SIMD C++ kernels (`mpslinalg.small.cpu_simd`, the
  Metal kernel's arithmetic over blocks of 8 matrices, one vector instruction per operation for
  the whole block, bit-identical to the Metal kernel in the emulator) on torch's intra-op
  threads, where the installed package holds the library (compiled at install, `.native`);
- torch backend on CUDA, float32/float64, when ``triton`` imports: one fused Triton kernel per op
  (`mpslinalg.small.triton_kernels`, the same arithmetic as the Metal kernel, a matrix per
  lane);
- torch backend otherwise (complex, float64 on CPU, no compiler yet): the same unrolled
  elimination as whole-batch tensor ops on the batch in structure-of-arrays layout
  (`mpslinalg.small.tensor_lu`).

Both follow LAPACK ``getrf`` + ``getrs``: partial pivoting with pivot = argmax |a| (complex:
|re| + |im|, like ``icamax``), lowest row on ties, elimination carried on past a zero pivot,
which is recorded in ``info`` (1-based index of the first zero pivot, 0 = ok); the inverse is
the solution of ``A X = I`` (forward elimination, then column-oriented back substitution like
``trsm``). So results, ``info`` and error semantics match the general LU path.

The choice is the op's table in `mpslinalg.small.paths` (``TABLES["inv"]``, shared by the four
ops; the ``mpslinalg.small`` logger says at DEBUG level which path served a call). The public
API (``mpslinalg.inv``/``det``/``solve``...) validates, broadcasts, casts and calls these
functions when `use_small_path` says so; they only compute (forward only, no host
synchronisation, inputs never modified).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch

from .._core import metal as _metal
from . import paths, tensor_lu

#: Metal source of the kernels.
_SOURCE = "linalg/small_inverse.metal"

#: Threads per threadgroup of the one-thread-per-matrix kernels.
_GROUP = 256


def may_use_small_path(A: torch.Tensor) -> bool:
    """A cheap necessary condition of `use_small_path` on the torch backend: the public
    functions' fast path asks it on every call, so it reads shapes only
    (`mpslinalg.small.paths.may_take_small_path`)."""
    return paths.may_take_small_path("inv", A)


def use_small_path(A: torch.Tensor, backend: str | None = None) -> bool:
    """True when the small path should compute ``A``'s inverse, solve or determinant on
    ``backend`` (default: the one in force; square, 1 <= n <= 4; on the torch backend only
    where it is measured to beat torch.linalg for this device and batch: the table
    ``paths.TABLES["inv"]``)."""
    return paths.takes_small_path("inv", A, backend)


# ------------------------------------------------------------------------------ metal backend

def _metal_run(op: str, fn: str, A: torch.Tensor, tensors: list[torch.Tensor],
               scalars: tuple[int, ...] = ()) -> None:
    """One launch of ``<op>_<dtype>_n<N>`` over the batch of A: thread t handles matrix t.
    Kernel arguments: A, ``tensors`` (batch-leading, contiguous), the batch size, ``scalars``."""
    from .._core.copy import contiguous

    batch = math.prod(A.shape[:-2])
    if batch == 0:
        return
    kern = _metal.kernel(_SOURCE, op, A.dtype, A.device, fn=fn, n=A.shape[-1])
    _metal.launch(kern, *(contiguous(t, fn) for t in [A, *tensors]), batch, *scalars,
                  threads=batch, group_size=min(_GROUP, batch))


def _metal_inv(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    X = torch.empty(A.shape, dtype=A.dtype, device=A.device)
    info = torch.empty(A.shape[:-2], dtype=torch.int32, device=A.device)
    _metal_run("small_inv", "inv_ex", A, [X, info])
    return X, info


def _metal_solve(A: torch.Tensor, B: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    X = torch.empty(B.shape, dtype=A.dtype, device=A.device)
    info = torch.empty(A.shape[:-2], dtype=torch.int32, device=A.device)
    _metal_run("small_solve", "solve_ex", A, [B, X, info], (B.shape[-1],))
    return X, info


def _metal_det(A: torch.Tensor) -> torch.Tensor:
    det = torch.empty(A.shape[:-2], dtype=A.dtype, device=A.device)
    _metal_run("small_det", "det", A, [det])
    return det


def _metal_slogdet(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    sign = torch.empty(A.shape[:-2], dtype=A.dtype, device=A.device)
    logabs = torch.empty(A.shape[:-2], dtype=torch.float32, device=A.device)
    _metal_run("small_slogdet", "slogdet", A, [sign, logabs])
    return sign, logabs


# ------------------------------------------------------------------------------ path table

#: The functions of the paths this family binds itself (`paths.functions` has the generated
#: kernels').
_OWN = {
    paths.METAL: SimpleNamespace(small_inv_ex=_metal_inv, small_solve_ex=_metal_solve,
                                 small_det=_metal_det, small_slogdet=_metal_slogdet),
    paths.TENSOR_OPS: SimpleNamespace(small_inv_ex=lambda A: tensor_lu.solve(A, None),
                                      small_solve_ex=tensor_lu.solve, small_det=tensor_lu.det,
                                      small_slogdet=tensor_lu.slogdet),
}


def choose_path(A: torch.Tensor, backend: str | None = None) -> str:
    """The path that serves ``A`` (`mpslinalg.small.paths.choose` of ``paths.TABLES["inv"]``)."""
    return paths.choose("inv", A, backend)


def torch_path(A: torch.Tensor) -> str:
    """Which implementation the small_* functions run for ``A`` (for benchmarks and logs)."""
    return choose_path(A)


def _functions(path: str):
    return paths.functions(path, _OWN)


# ------------------------------------------------------------------------------ entry points

def small_inv_ex(A: torch.Tensor, *, backend: str | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """(inverse, info) of A (*, n, n), n <= 4; info as ``getrf``'s (first zero pivot, 1-based).
    ``backend``: the call's (default: the one in force), which chooses the kernel."""
    return _functions(choose_path(A, backend)).small_inv_ex(A)


def small_solve_ex(A: torch.Tensor, B: torch.Tensor, *, backend: str | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """(X, info) with A X = B for A (*, n, n), B (*, n, k) of the same batch shape."""
    return _functions(choose_path(A, backend)).small_solve_ex(A, B)


def _det_operand(path: str, A: torch.Tensor) -> torch.Tensor:
    """What ``path``'s det and slogdet get for ``A``. torch.linalg.det and slogdet factor a
    contiguous real A as LAPACK reads its memory, A^T (det(A^T) = det(A)), any other A as it
    is, and where A holds Inf or NaN the two factorisations give different values. The
    generated kernels factor the transpose of the contiguous matrix they read
    (`mpslinalg.small.codegen.TRANSPOSED_OPS`) and the tensor ops choose by layout
    themselves, so the kernels get A^T (contiguous where A is column-major) for any A but a
    contiguous one. The Metal kernel factors A on the metal backend."""
    if path in (paths.METAL, paths.TENSOR_OPS) or A.is_contiguous():
        return A
    return A.mT


def small_det(A: torch.Tensor, *, backend: str | None = None) -> torch.Tensor:
    """det(A) for A (*, n, n), n <= 4: product of U's diagonal times the permutation sign
    (on the torch backend of the matrix torch's det factors, see `_det_operand`)."""
    path = choose_path(A, backend)
    return _functions(path).small_det(_det_operand(path, A))


def small_slogdet(A: torch.Tensor, *, backend: str | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """(sign, log|det|) for A (*, n, n), n <= 4; singular gives (0, -inf). A real matrix
    whose log|det| is NaN (a NaN in U's diagonal) has sign 0, as torch's product of sgn(U_kk)
    gives (sgn(NaN) = 0), on every path and device; the kernels would give +-1."""
    path = choose_path(A, backend)
    sign, logabs = _functions(path).small_slogdet(_det_operand(path, A))
    if not sign.is_complex():  # complex sgn(NaN) is NaN: the kernels give that already
        sign = sign.masked_fill(logabs.isnan(), 0)
    return sign, logabs
