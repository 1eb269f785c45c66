"""Batched inverse, determinant and solve for n <= 4 (camera geometry), in one pass over the batch.

Camera-geometry code inverts millions of 2x2 / 3x3 / 4x4 matrices per step (poses, intrinsics,
homographies). A general LU pays per-matrix overhead; this module computes the same LAPACK-style
factorisation for the whole batch at once:

- metal backend: one launch of ``metal/linalg/small_inverse.metal`` per op, one thread per matrix,
  the matrix in registers;
- torch backend (CPU, CUDA): the batch in structure-of-arrays layout ``(n, width, batch)`` and the
  same unrolled elimination written as whole-batch tensor ops (no Python loop over the batch).

Both follow LAPACK ``getrf`` + ``getrs``: partial pivoting with pivot = argmax |a| (complex:
|re| + |im|, like ``icamax``), lowest row on ties, elimination carried on past a zero pivot,
which is recorded in ``info`` (1-based index of the first zero pivot, 0 = ok); the inverse is
the solution of ``A X = I`` (forward elimination, then column-oriented back substitution like
``trsm``). So results, ``info`` and error semantics match the general LU path.

The public API (``mpslinalg.inv``/``det``/``solve``...) validates, broadcasts, casts and calls
these functions when :func:`use_small_path` says so; they only compute (forward only, no host
synchronisation, inputs never modified).
"""

from __future__ import annotations

import torch

from . import _metal
from ._backend import resolve_backend

#: Largest n served by the small path (the Metal kernels are instantiated for n = 1..4).
MAX_N = 4

#: Metal source of the kernels.
_SOURCE = "linalg/small_inverse.metal"

#: Threads per threadgroup of the one-thread-per-matrix kernels.
_GROUP = 256

#: Smallest batch for which the torch fast path beats torch.linalg, per device type and n
#: (measured with benchmarks/bench_small_inverse.py, results in benchmarks/results/: the fast
#: path issues a fixed number of whole-batch tensor ops, ~70-90 for n = 4, so below these sizes
#: per-op dispatch costs more than LAPACK's / cuSOLVER's per-matrix work). Chosen on the safe
#: side of the measured crossovers so the small path is never the slower one. n = 1 and device
#: types not listed always use torch.linalg.
_TORCH_MIN_BATCH = {
    "cpu": {2: 4096, 3: 8192, 4: 32768},
    "cuda": {2: 786432, 3: 524288, 4: 786432},
}


def _batch_numel(A: torch.Tensor) -> int:
    b = 1
    for s in A.shape[:-2]:
        b *= s
    return b


def use_small_path(A: torch.Tensor, fn: str = "inv") -> bool:
    """True when the small path should compute ``fn`` for ``A`` (square, 1 <= n <= 4; on the
    torch backend only where it is measured to beat torch.linalg for this device and batch)."""
    if A.dim() < 2 or A.shape[-1] != A.shape[-2] or not 1 <= A.shape[-1] <= MAX_N:
        return False
    backend = resolve_backend(A.device, fn)
    if backend == "metal":
        return A.dtype in (torch.float32, torch.complex64)
    if A.dtype not in (torch.float32, torch.float64, torch.complex64, torch.complex128):
        return False
    limit = _TORCH_MIN_BATCH.get(A.device.type, {}).get(A.shape[-1])
    return limit is not None and _batch_numel(A) >= limit


# ------------------------------------------------------------------------------ torch backend

def _abs1(x: torch.Tensor) -> torch.Tensor:
    """|re| + |im| for complex (LAPACK's pivot measure), |x| for real."""
    if x.is_complex():
        return torch.view_as_real(x).abs().sum(-1)
    return x.abs()


def _workspace(A: torch.Tensor, rhs: torch.Tensor | None, m: int):
    """The system in structure-of-arrays layout, each matrix entry a batch vector: U = A as a
    contiguous (n, n, batch) tensor and R = the m right-hand sides (None: the identity) as
    (n, m, batch), or None when m = 0. On CPU they are separate tensors (saves a pass over A);
    elsewhere they are views into one (n, n + m, batch) tensor M, also returned, so that each
    row operation is a single kernel launch. Returns (U, R, M or None)."""
    n = A.shape[-1]
    batch = _batch_numel(A)
    # Transposing through (batch, n*n, 1) -> (1, n*n, batch) with .contiguous() takes torch's
    # fast transpose path (2-4x faster on CPU than copying a permuted view into place).
    T = _transpose(A, batch, n * n).view(n, n, batch)
    if m == 0 or A.device.type == "cpu":
        # Factored in place: never in the caller's memory.
        shared = T.untyped_storage().data_ptr() == A.untyped_storage().data_ptr()
        U = T.clone() if shared else T
        if m == 0:
            return U, None, None
        R = torch.empty((n, m, batch), dtype=A.dtype, device=A.device)
        M = None
    else:
        M = torch.empty((n, n + m, batch), dtype=A.dtype, device=A.device)
        M[:, :n].copy_(T)
        U, R = M[:, :n], M[:, n:]
    if rhs is None:
        R.zero_()
        for i in range(n):
            R[i, i].fill_(1)
    else:
        R.copy_(_transpose(rhs, batch, n * m).view(n, m, batch))
    return U, R, M


def _transpose(x: torch.Tensor, batch: int, size: int) -> torch.Tensor:
    """(*, ...) with ``size`` entries per batch element -> contiguous (size, batch)."""
    return x.reshape(batch, size, 1).transpose(0, 2).contiguous().view(size, batch)


#: Integer type of the same width as each dtype's real part (for exact bitwise selects).
_BITS = {torch.float32: torch.int32, torch.float64: torch.int64}


def _bits(x: torch.Tensor) -> torch.Tensor:
    """The same memory as integers (complex: (..., 2) real/imag), for branch-free selects."""
    if x.is_complex():
        x = torch.view_as_real(x)
    return x.view(_BITS[x.dtype])


def _factor(U: torch.Tensor, R: torch.Tensor | None, M: torch.Tensor | None,
            n: int) -> torch.Tensor:
    """Factor the workspace of :func:`_workspace` in place; returns the row-interchange count."""
    if U.device.type == "cpu":
        return _factor_select(U, R, n)
    return _factor_gather(U if M is None else M, n)


def _factor_gather(M: torch.Tensor, n: int) -> torch.Tensor:
    """:func:`_factor_select` in fewer, larger ops for accelerators, where each op costs a kernel
    launch: the pivot row by argmax (first maximum, like idamax) and gather, the interchange by
    one select. (On CPU argmax over a short leading dimension and gather are slow.)"""
    w, batch = M.shape[1], M.shape[-1]
    swaps = torch.zeros(batch, dtype=torch.int32, device=M.device)
    offsets = torch.arange(n, device=M.device).view(-1, 1, 1)
    for k in range(n - 1):
        blk = M[k:, k:]  # (n - k, w - k, batch)
        p = torch.argmax(_abs1(blk[:, 0]), dim=0).view(1, 1, -1)
        swaps.add_(p[0, 0] != 0)
        pivot_row = torch.gather(blk, 0, p.expand(1, w - k, batch))
        # The row that held the pivot receives the old row k, the others stay.
        torch.where(p == offsets[1:n - k], blk[:1], blk[1:], out=blk[1:])
        blk[:1].copy_(pivot_row)
        _eliminate(M, k)
    return swaps


def _eliminate(M: torch.Tensor, k: int, R: torch.Tensor | None = None) -> None:
    """Step k of the elimination below the (already interchanged) pivot M[k, k], applied to the
    columns k+1.. of M and to all columns of R."""
    piv = M[k, k]
    # A zero pivot means the column below it is zero too: LAPACK skips the scaling, so the
    # multipliers are 0, not 0/0.
    safe = piv + (piv == 0)
    mult = (M[k + 1:, k] / safe).unsqueeze(1)
    M[k + 1:, k + 1:].addcmul_(mult, M[k:k + 1, k + 1:], value=-1)
    if R is not None:
        R[k + 1:].addcmul_(mult, R[k:k + 1], value=-1)


def _factor_select(M: torch.Tensor, R: torch.Tensor | None, n: int) -> torch.Tensor:
    """Gaussian elimination with partial pivoting of the first n columns of ``M`` (n, w, batch),
    in place; row operations act on all w columns of M and on all of R (n, m, batch) if given
    (so the right-hand sides become L^-1 P B), the multipliers are not stored. Pivots are those
    ``getrf`` chooses: the first row of largest |a| (complex: |re| + |im|), lowest index on
    ties. Returns the number of row interchanges per batch element (integer)."""
    batch = M.shape[-1]
    ibits = _BITS[M.real.dtype] if M.is_complex() else _BITS[M.dtype]
    swaps = torch.zeros(batch, dtype=ibits, device=M.device)
    for k in range(n - 1):
        mag = _abs1(M[k:, k])  # (n - k, batch)
        cands = n - k - 1
        # g[i] = 1 where row k+1+i is strictly larger than every row above it (a NaN never
        # is); the pivot is the last such row: onehot[i] = g[i] * prod_{j > i} (1 - g[j]).
        g = torch.empty((cands, batch), dtype=ibits, device=M.device)
        best = mag[0]
        for i in range(cands):
            torch.gt(mag[i + 1], best, out=g[i])
            if i + 1 < cands:
                best = torch.maximum(best, mag[i + 1])
        onehot = g
        if cands > 1:
            keep = 1 - g[cands - 1]
            for i in range(cands - 2, -1, -1):
                nxt = keep * (1 - g[i]) if i > 0 else None
                onehot[i].mul_(keep)
                keep = nxt
        swaps.add_(onehot.sum(0, dtype=ibits) if cands > 1 else onehot[0])
        # Interchange row k with the pivot row by an exact bitwise select (xor swap under an
        # all-ones mask): no arithmetic on the values, so Inf and NaN move like any number.
        mask = onehot.neg_().unsqueeze(1)  # (cands, 1, batch): 0 or all bits set
        if M.is_complex():
            mask = mask.unsqueeze(-1)
        for part in (M[k:, k:], None if R is None else R[k:]):
            if part is None:
                continue
            rows = _bits(part)  # (n - k, width, batch[, 2])
            diff = torch.empty_like(rows[0])
            for i in range(cands):
                torch.bitwise_xor(rows[i + 1], rows[0], out=diff).bitwise_and_(mask[i])
                rows[i + 1].bitwise_xor_(diff)
                rows[0].bitwise_xor_(diff)
        _eliminate(M, k, R)
    return swaps


def _back_substitute(U: torch.Tensor, R: torch.Tensor, n: int) -> torch.Tensor:
    """Solve U X = R in place, column-oriented like LAPACK ``trsm``."""
    for k in range(n - 1, -1, -1):
        R[k].div_(U[k, k].unsqueeze(0))
        if k > 0:
            R[:k].addcmul_(U[:k, k].unsqueeze(1), R[k].unsqueeze(0), value=-1)
    return R


def _diag(M: torch.Tensor) -> list[torch.Tensor]:
    return [M[k, k] for k in range(M.shape[0])]


def _info(diag: list[torch.Tensor]) -> torch.Tensor:
    """1-based index of the first zero pivot, 0 when none (int32, per batch element)."""
    info = torch.zeros(diag[0].shape, dtype=torch.int32, device=diag[0].device)
    for k in range(len(diag) - 1, -1, -1):
        info = torch.where(diag[k] == 0, k + 1, info)
    return info


def _perm_sign(swaps: torch.Tensor, dtype) -> torch.Tensor:
    """(-1)^(number of row interchanges)."""
    return (1 - 2 * (swaps & 1)).to(dtype)


def _torch_solve(A: torch.Tensor, B: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    n = A.shape[-1]
    batch_shape = A.shape[:-2]
    batch = _batch_numel(A)
    m = n if B is None else B.shape[-1]
    U, R, M = _workspace(A, B, m)
    if batch == 0:
        X = R.permute(2, 0, 1)
        info = torch.zeros(0, dtype=torch.int32, device=A.device)
    else:
        _factor(U, R, M, n)
        info = _info(_diag(U))
        # (n, m, batch) -> (batch, n, m): returned as a view (batch-innermost strides) rather
        # than paying for a transposing copy.
        X = _back_substitute(U, R, n).permute(2, 0, 1)
    return X.reshape(*batch_shape, n, m), info.reshape(batch_shape)


def _torch_lu_diag(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The diagonal of U (batch, n) and the permutation sign (batch,)."""
    n = A.shape[-1]
    U, _, _ = _workspace(A, None, 0)
    swaps = _factor(U, None, None, n)
    return torch.diagonal(U, dim1=0, dim2=1), _perm_sign(swaps, A.dtype)


def _torch_det(A: torch.Tensor) -> torch.Tensor:
    diag, sign = _torch_lu_diag(A)
    return (diag.prod(-1) * sign).reshape(A.shape[:-2])


def _torch_slogdet(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    diag, sign = _torch_lu_diag(A)
    sign = torch.sgn(diag).prod(-1) * sign  # sgn(0) = 0: singular -> sign 0
    logabs = diag.abs().log().sum(-1)  # log 0 = -inf: singular -> -inf
    return sign.reshape(A.shape[:-2]), logabs.reshape(A.shape[:-2])


# ------------------------------------------------------------------------------ metal backend

def _metal_run(op: str, fn: str, A: torch.Tensor, *args) -> None:
    """One launch of ``<op>_<dtype>_n<N>`` over the batch of A: thread t handles matrix t.
    ``args`` follow A in buffer order (tensors contiguous, then the batch size is appended)."""
    from ._copy import contiguous

    batch = _batch_numel(A)
    if batch == 0:
        return
    kern = _metal.kernel(_SOURCE, op, A.dtype, A.device, fn=fn, n=A.shape[-1])
    tensors = [contiguous(A, fn)] + [contiguous(x, fn) if isinstance(x, torch.Tensor) else x
                                     for x in args]
    kern(*tensors, threads=batch, group_size=min(_GROUP, batch))


def _metal_inv(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    X = torch.empty(A.shape, dtype=A.dtype, device=A.device)
    info = torch.empty(A.shape[:-2], dtype=torch.int32, device=A.device)
    _metal_run("small_inv", "inv_ex", A, X, info, _batch_numel(A))
    return X, info


def _metal_solve(A: torch.Tensor, B: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    X = torch.empty(B.shape, dtype=A.dtype, device=A.device)
    info = torch.empty(A.shape[:-2], dtype=torch.int32, device=A.device)
    _metal_run("small_solve", "solve_ex", A, B, X, info, _batch_numel(A), B.shape[-1])
    return X, info


def _metal_det(A: torch.Tensor) -> torch.Tensor:
    det = torch.empty(A.shape[:-2], dtype=A.dtype, device=A.device)
    _metal_run("small_det", "det", A, det, _batch_numel(A))
    return det


def _metal_slogdet(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    sign = torch.empty(A.shape[:-2], dtype=A.dtype, device=A.device)
    logabs = torch.empty(A.shape[:-2], dtype=torch.float32, device=A.device)
    _metal_run("small_slogdet", "slogdet", A, sign, logabs, _batch_numel(A))
    return sign, logabs


# ------------------------------------------------------------------------------ entry points

def small_inv_ex(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(inverse, info) of A (*, n, n), n <= 4; info as ``getrf``'s (first zero pivot, 1-based)."""
    if resolve_backend(A.device, "inv_ex") == "metal":
        return _metal_inv(A)
    return _torch_solve(A, None)


def small_solve_ex(A: torch.Tensor, B: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(X, info) with A X = B for A (*, n, n), B (*, n, k) of the same batch shape."""
    if resolve_backend(A.device, "solve_ex") == "metal":
        return _metal_solve(A, B)
    return _torch_solve(A, B)


def small_det(A: torch.Tensor) -> torch.Tensor:
    """det(A) for A (*, n, n), n <= 4: product of U's diagonal times the permutation sign."""
    if resolve_backend(A.device, "det") == "metal":
        return _metal_det(A)
    return _torch_det(A)


def small_slogdet(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(sign, log|det|) for A (*, n, n), n <= 4; singular gives (0, -inf)."""
    if resolve_backend(A.device, "slogdet") == "metal":
        return _metal_slogdet(A)
    return _torch_slogdet(A)
