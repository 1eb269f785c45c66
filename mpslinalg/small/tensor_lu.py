"""The n <= 4 LU as whole-batch tensor ops: the torch backend's small path where no generated
kernel serves (complex dtypes, float64 on the CPU, CUDA without Triton, the CPU before the native
library has loaded).

The batch is laid out as structure of arrays, ``(n, width, batch)``: each matrix entry is one
batch vector, and the unrolled elimination is a fixed number of whole-batch tensor operations
(about 70-90 for n = 4), no Python loop over the batch. It follows LAPACK ``getrf`` +
``getrs`` as the kernels do: partial pivoting with pivot = argmax |a| (complex: |re| + |im|,
like ``icamax``), lowest row on ties, elimination carried on past a zero pivot (recorded in
``info``); the inverse solves ``A X = I``. Complex columns are scaled by the pivot's reciprocal
as LAPACK's getrf does through torch on the CPU (`_reciprocal`), so NaN and Inf propagate as in
torch.linalg. `mpslinalg.small.dispatch` chooses this path (its ``_TENSOR_OPS`` row).
"""

from __future__ import annotations

import math
import threading

import torch

#: Matrices per chunk on CPU (see _chunks): 131072 4x4 float32 systems with identity right-hand
#: sides are 16 MiB of workspace, which L3 holds through the elimination; smaller chunks pay
#: more per-op dispatch than they save (measured: 8192-65536 at batch 1e5 and 1e6).
_CPU_CHUNK = 131072

#: Largest work buffer kept between calls on CPU (see _buffer): covers batch 1e5 at n = 4 while
#: bounding what an idle thread holds (a few buffers of at most this size).
_SCRATCH_MAX_BYTES = 16 << 20

class _Scratch(threading.local):
    """Per-thread CPU work buffers kept between calls. Freshly allocated multi-megabyte buffers
    cost a page fault per 4 KiB on first touch, which measured 25-60 % of the CPU path's time at
    batch 1e5; the small path's ~20 temporaries are therefore reused (never returned to the
    caller: outputs are always fresh tensors)."""

    def __init__(self) -> None:
        self.buffers: dict[tuple[str, torch.dtype], torch.Tensor] = {}


_scratch = _Scratch()


def _buffer(name: str, shape: tuple[int, ...], dtype: torch.dtype,
            device: torch.device) -> torch.Tensor:
    """An uninitialised work tensor: reused per (name, dtype) and thread on CPU, fresh elsewhere
    (accelerators have caching allocators) or when larger than _SCRATCH_MAX_BYTES."""
    numel = math.prod(shape)
    size = numel * torch.empty(0, dtype=dtype).element_size()
    if device.type != "cpu" or size > _SCRATCH_MAX_BYTES:
        return torch.empty(shape, dtype=dtype, device=device)
    buf = _scratch.buffers.get((name, dtype))
    if buf is None or buf.numel() < numel:
        buf = _scratch.buffers[(name, dtype)] = torch.empty(numel, dtype=dtype)
    return buf[:numel].view(shape)


def _abs1_into(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """|re| + |im| for complex (LAPACK's pivot measure), |x| for real, written into ``out``."""
    if x.is_complex():
        parts = torch.abs(torch.view_as_real(x),
                          out=_buffer("abs1", (*x.shape, 2), out.dtype, x.device))
        return torch.sum(parts, -1, out=out)
    return torch.abs(x, out=out)


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
    batch = math.prod(A.shape[:-2])
    # Copying a (batch, n*n, 1) -> (1, n*n, batch) transposed view into a contiguous tensor takes
    # torch's fast transpose path (2-4x faster on CPU than copying a permuted (n, n, batch) view).
    if A.device.type == "cpu":
        U = _buffer("U", (n, n, batch), A.dtype, A.device)
        U.view(1, n * n, batch).copy_(A.reshape(batch, n * n, 1).transpose(0, 2))
    elif m == 0:
        U = _transpose(A, batch, n * n).view(n, n, batch)
        # Factored in place: never in the caller's memory.
        if U.untyped_storage().data_ptr() == A.untyped_storage().data_ptr():
            U = U.clone()
    if m == 0:
        return U, None, None
    if A.device.type == "cpu":
        R = torch.empty((n, m, batch), dtype=A.dtype, device=A.device)
        M = None
    else:
        M = torch.empty((n, n + m, batch), dtype=A.dtype, device=A.device)
        M[:, :n].copy_(_transpose(A, batch, n * n).view(n, n, batch))
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
    """Factor the workspace of `_workspace` in place; returns the row-interchange count."""
    if U.device.type == "cpu":
        return _factor_select(U, R, n)
    return _factor_gather(U if M is None else M, n)


def _factor_gather(M: torch.Tensor, n: int) -> torch.Tensor:
    """`_factor_select` in fewer, larger ops for accelerators, where each op costs a kernel
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


def _reciprocal(p: torch.Tensor) -> torch.Tensor:
    """1 / p for complex p as getrf's scaling of the column below the pivot gives it through
    torch on the CPU: scaled by s = |re| + |im| (no overflow or underflow of |p|^2), so NaN for
    an infinite p, where torch's own division (Smith's algorithm, which trsm's division by U's
    diagonal matches) gives 0. p = 0 gives NaN."""
    re, im = p.real, p.imag
    s = re.abs() + im.abs()
    re, im = re / s, im / s
    d = s * (re * re + im * im)
    return torch.complex(re / d, -im / d)


def _div_by_pivot(x: torch.Tensor, p: torch.Tensor,
                  out: torch.Tensor | None = None) -> torch.Tensor:
    """The multipliers x / p of getrf's column below the pivot p: complex as getrf scales
    (x * `_reciprocal` (p) where |p| >= safmin, the smallest normal number, else x / p), real
    by IEEE division (which already gives what LAPACK gives)."""
    if not x.is_complex():
        return torch.div(x, p, out=out)
    scaled = torch.mul(x, _reciprocal(p))
    return torch.where(p.abs() >= torch.finfo(p.real.dtype).tiny, scaled, x / p, out=out)


def _eliminate(M: torch.Tensor, k: int, R: torch.Tensor | None = None) -> None:
    """Step k of the elimination below the (already interchanged) pivot M[k, k], applied to the
    columns k+1.. of M and to all columns of R."""
    piv = M[k, k]
    n, batch, dev = M.shape[0], M.shape[-1], M.device
    # A zero pivot means the column below it is zero too: LAPACK skips the scaling, so the
    # multipliers are 0, not 0/0.
    zero = torch.eq(piv, 0, out=_buffer("zero", (batch,), torch.bool, dev))
    safe = torch.add(piv, zero, out=_buffer("safe", (batch,), M.dtype, dev))
    mult = _div_by_pivot(M[k + 1:, k], safe,
                         out=_buffer("mult", (n - k - 1, batch), M.dtype, dev))
    mult = mult.unsqueeze(1)
    M[k + 1:, k + 1:].addcmul_(mult, M[k:k + 1, k + 1:], value=-1)
    if R is not None:
        R[k + 1:].addcmul_(mult, R[k:k + 1], value=-1)


def _factor_select(M: torch.Tensor, R: torch.Tensor | None, n: int) -> torch.Tensor:
    """Gaussian elimination with partial pivoting of the first n columns of ``M`` (n, w, batch),
    in place; row operations act on all w columns of M and on all of R (n, m, batch) if given
    (so the right-hand sides become L^-1 P B), the multipliers are not stored. Pivots are those
    ``getrf`` chooses: the first row of largest |a| (complex: |re| + |im|), lowest index on
    ties. Returns the number of row interchanges per batch element (integer)."""
    batch, dev = M.shape[-1], M.device
    real = M.real.dtype if M.is_complex() else M.dtype
    ibits = _BITS[real]
    swaps = torch.zeros(batch, dtype=ibits, device=dev)
    for k in range(n - 1):
        cands = n - k - 1
        mag = _abs1_into(M[k:, k], _buffer("mag", (n - k, batch), real, dev))
        # g[i] = 1 where row k+1+i is strictly larger than every row above it (a NaN never
        # is); the pivot is the last such row: onehot[i] = g[i] * prod_{j > i} (1 - g[j]).
        g = _buffer("g", (cands, batch), ibits, dev)
        best = mag[0]
        for i in range(cands):
            torch.gt(mag[i + 1], best, out=g[i])
            if i + 1 < cands:
                best = torch.maximum(best, mag[i + 1], out=_buffer("best", (batch,), real, dev))
        onehot = g
        if cands > 1:
            keep = torch.neg(g[cands - 1], out=_buffer("keep", (batch,), ibits, dev)).add_(1)
            nxt = _buffer("next", (batch,), ibits, dev)
            for i in range(cands - 2, -1, -1):
                if i > 0:
                    torch.neg(g[i], out=nxt).add_(1).mul_(keep)
                onehot[i].mul_(keep)
                keep, nxt = nxt, keep
        for i in range(cands):
            swaps.add_(onehot[i])
        # Interchange row k with the pivot row by an exact bitwise select (xor swap under an
        # all-ones mask): no arithmetic on the values, so Inf and NaN move like any number.
        mask = onehot.neg_().unsqueeze(1)  # (cands, 1, batch): 0 or all bits set
        if M.is_complex():
            mask = mask.unsqueeze(-1)
        for part in (M[k:, k:], None if R is None else R[k:]):
            if part is None:
                continue
            rows = _bits(part)  # (n - k, width, batch[, 2])
            diff = _buffer("diff", tuple(rows.shape[1:]), rows.dtype, dev)
            for i in range(cands):
                torch.bitwise_xor(rows[i + 1], rows[0], out=diff).bitwise_and_(mask[i])
                rows[i + 1].bitwise_xor_(diff)
                rows[0].bitwise_xor_(diff)
        _eliminate(M, k, R)
    return swaps


def _back_substitute(U: torch.Tensor, R: torch.Tensor, n: int) -> torch.Tensor:
    """Solve U X = R in place, column-oriented like LAPACK ``trsm``."""
    for k in range(n - 1, -1, -1):
        R[k].div_(U[k, k].unsqueeze(0))  # trsm's division: 0 for an infinite U_kk
        if k > 0:
            R[:k].addcmul_(U[:k, k].unsqueeze(1), R[k].unsqueeze(0), value=-1)
    return R


def _diag(M: torch.Tensor) -> list[torch.Tensor]:
    return [M[k, k] for k in range(M.shape[0])]


def _info(diag: list[torch.Tensor]) -> torch.Tensor:
    """1-based index of the first zero pivot, 0 when none (int32, per batch element)."""
    batch, dev = diag[0].shape[0], diag[0].device
    info = torch.zeros(batch, dtype=torch.int32, device=dev)
    zero = _buffer("zero", (batch,), torch.bool, dev)
    for k in range(len(diag) - 1, -1, -1):
        info.masked_fill_(torch.eq(diag[k], 0, out=zero), k + 1)
    return info


def _perm_sign(swaps: torch.Tensor, dtype) -> torch.Tensor:
    """(-1)^(number of row interchanges)."""
    return (1 - 2 * (swaps & 1)).to(dtype)


def _chunks(U: torch.Tensor) -> list[slice]:
    """Batch ranges processed one after the other: on CPU, chunks whose workspace stays in cache
    across the ~100 passes of the elimination (a fixed number of chunks per call, not a loop
    over matrices); elsewhere the whole batch at once."""
    batch = U.shape[-1]
    step = _CPU_CHUNK if U.device.type == "cpu" else max(batch, 1)
    return [slice(start, min(start + step, batch)) for start in range(0, batch, step)]


def solve(A: torch.Tensor, B: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    n = A.shape[-1]
    batch_shape = A.shape[:-2]
    batch = math.prod(A.shape[:-2])
    m = n if B is None else B.shape[-1]
    U, R, M = _workspace(A, B, m)
    info = torch.empty(batch, dtype=torch.int32, device=A.device)
    for part in _chunks(U):
        Uc = U[..., part]
        Rc = None if R is None else R[..., part]
        _factor(Uc, Rc, None if M is None else M[..., part], n)
        info[part] = _info(_diag(Uc))
        if Rc is not None:
            _back_substitute(Uc, Rc, n)
    if R is None:  # no right-hand sides: only info
        R = torch.empty((n, 0, batch), dtype=A.dtype, device=A.device)
    # (n, m, batch) -> (batch, n, m): returned as a view (batch-innermost strides) rather than
    # paying for a transposing copy.
    X = R.permute(2, 0, 1)
    return X.reshape(*batch_shape, n, m), info.reshape(batch_shape)


def _lu_diag(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The diagonal of U (batch, n) and the permutation sign (batch,) of the matrix torch's det
    factors: A^T for a contiguous real A (`mpslinalg.small.dispatch._det_operand`), else A."""
    n = A.shape[-1]
    U, _, _ = _workspace(A, None, 0)
    if not A.is_complex() and A.is_contiguous():
        U = U.transpose(0, 1)
    swaps = torch.empty(U.shape[-1], dtype=torch.int64, device=A.device)
    for part in _chunks(U):
        swaps[part] = _factor(U[..., part], None, None, n)
    return torch.diagonal(U, dim1=0, dim2=1), _perm_sign(swaps, A.dtype)


def det(A: torch.Tensor) -> torch.Tensor:
    diag, sign = _lu_diag(A)
    return (diag.prod(-1) * sign).reshape(A.shape[:-2])


def slogdet(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    diag, sign = _lu_diag(A)
    sign = torch.sgn(diag).prod(-1) * sign  # sgn(0) = 0: singular -> sign 0
    logabs = diag.abs().log().sum(-1)  # log 0 = -inf: singular -> -inf
    return sign.reshape(A.shape[:-2]), logabs.reshape(A.shape[:-2])
