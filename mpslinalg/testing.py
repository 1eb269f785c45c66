"""Helpers for testing linear algebra, used by mpslinalg's own tests, ``python -m mpslinalg
check`` and the benchmarks, and public for users who test code built on mpslinalg.

- LAPACK's test ratios (``*_ratio``), as in its testing programs xGET01 / xGET02 / xGET03 /
  xQRT01: a residual scaled by ``n * ||A|| * eps`` of the compute dtype, with 1-norms computed
  in float64 / complex128. A correct factorisation stays below `THRESH` (30, LAPACK's).
- Matrix generators in the style of LAPACK's ``xLATMS``: a chosen condition number, scale and
  rank, real or complex, batched, reproducible from a seed (`matrix_with_spread`,
  `random_matrix`, `singular_matrix`, `noncontiguous`).
- `count_host_syncs`: counts the reads that force a device-to-host synchronisation;
  `count_launches`: the Metal kernels launched, on any executor.

Examples
--------
>>> import torch, mpslinalg
>>> from mpslinalg.testing import matrix_with_spread, solve_ratio, THRESH
>>> A = matrix_with_spread(8, cond=1e4, dtype=torch.float32, seed=1)
>>> B = torch.ones(8, 2)
>>> solve_ratio(A, mpslinalg.solve(A, B), B) < THRESH
True
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from ._core import errors as _errors
from ._core import metal as _metal

__all__ = ["THRESH", "batch_ratio", "lu_ratio", "ldl_ratio", "solve_ratio", "inv_ratio",
           "qr_ratio", "orthogonality_ratio", "svd_ratio", "singular_values_ratio",
           "penrose_ratios", "random_matrix", "matrix_with_spread", "singular_matrix",
           "noncontiguous", "count_host_syncs", "count_launches", "wide", "eps", "norm1"]

THRESH = 30.0

_WIDE = {torch.float32: torch.float64, torch.complex64: torch.complex128,
         torch.float16: torch.float64, torch.bfloat16: torch.float64}


def wide(x: torch.Tensor) -> torch.Tensor:
    """``x`` detached, on the CPU, in float64 / complex128 (other dtypes kept).

    Examples
    --------
    >>> import torch
    >>> from mpslinalg.testing import wide
    >>> wide(torch.ones(2, dtype=torch.complex64)).dtype
    torch.complex128
    """
    x = x.detach().cpu()
    return x.to(_WIDE.get(x.dtype, x.dtype))


def eps(dtype: torch.dtype) -> float:
    """Machine epsilon of the compute dtype (float16/bfloat16 compute in float32).

    Examples
    --------
    >>> import torch
    >>> from mpslinalg.testing import eps
    >>> eps(torch.complex64) == torch.finfo(torch.float32).eps
    True
    """
    real = {torch.complex64: torch.float32, torch.complex128: torch.float64,
            torch.float16: torch.float32, torch.bfloat16: torch.float32}.get(dtype, dtype)
    return torch.finfo(real).eps


def norm1(x: torch.Tensor) -> torch.Tensor:
    """Matrix 1-norm per batch element, in float64 / complex128's real type.

    Examples
    --------
    >>> import torch
    >>> from mpslinalg.testing import norm1
    >>> norm1(torch.tensor([[1., -2.], [3., 4.]]))
    tensor(6., dtype=torch.float64)
    """
    return torch.linalg.matrix_norm(wide(x), ord=1)


def batch_ratio(num: torch.Tensor, den: torch.Tensor) -> float:
    """The largest ``num / den`` over a batch, with 0/0 = 0 (an exact, empty or zero residual)
    and NaN when any ratio is NaN: the reduction of every LAPACK-style ratio here.

    Examples
    --------
    >>> import torch
    >>> from mpslinalg.testing import batch_ratio
    >>> batch_ratio(torch.tensor([0.0, 2.0]), torch.tensor([0.0, 4.0]))
    0.5
    """
    num, den = num.reshape(-1), den.reshape(-1)
    if num.numel() == 0:
        return 0.0
    r = torch.where(num == 0, torch.zeros_like(num), num / den)
    return float(r.max()) if not torch.isnan(r).any() else math.nan


def lu_ratio(A, P, L, U, dtype=None) -> float:
    """||A - P L U|| / (n ||A|| eps) for torch.linalg.lu's convention A = P L U (xGET01); the
    maximum over the batch.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> from mpslinalg.testing import lu_ratio, random_matrix
    >>> A = random_matrix(5, seed=3)
    >>> lu_ratio(A, *mpslinalg.lu(A)) < 30
    True
    """
    dtype = dtype or L.dtype
    A, P, L, U = map(wide, (A, P, L, U))
    n = max(A.shape[-1], A.shape[-2], 1)
    res = norm1(A - P @ L @ U)
    return batch_ratio(res, n * norm1(A) * eps(dtype))


def _ldl_product(LD: np.ndarray, pivots: list[int], hermitian: bool) -> np.ndarray:
    """P1 L1 P2 L2 ... D ... (^T, ^H when ``hermitian``) of one matrix's LAPACK sytrf / hetrf
    factors (UPLO='L'), in LD's dtype: L accumulated column block by column block (NumPy: a
    torch call per step costs more than the step)."""
    n = LD.shape[-1]
    T = np.eye(n, dtype=LD.dtype)
    D = np.zeros_like(LD)
    k = 0
    while k < n:
        pair = pivots[k] < 0 and k + 1 < n
        s, kk = (2, k + 1) if pair else (1, k)
        kp = abs(pivots[k]) - 1
        T[:, [kk, kp]] = T[:, [kp, kk]]
        T[:, k:k + s] += T[:, k + s:] @ LD[k + s:, k:k + s]
        D[k:k + s, k:k + s] = np.tril(LD[k:k + s, k:k + s])
        if pair:
            D[k, k + 1] = LD[k + 1, k].conj() if hermitian else LD[k + 1, k]
        k += s
    return T @ D @ (T.conj().T if hermitian else T.T)


def ldl_ratio(A, LD, pivots, hermitian: bool = False, dtype=None) -> float:
    """||A - P L D L^T P^T|| / (n ||A|| eps) for torch.linalg.ldl_factor's factors (LAPACK
    sytrf, UPLO='L'; ``hermitian``: hetrf, ``L^H``), the factors multiplied out in float64 /
    complex128 (xSYT01); the maximum over the batch. Only A's lower triangle counts (the
    imaginary part of its diagonal neither, when ``hermitian``), as for the factorisation.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> from mpslinalg.testing import ldl_ratio, random_matrix
    >>> A = random_matrix(5, seed=3)
    >>> ldl_ratio(A, *mpslinalg.ldl_factor(A)) < 30
    True
    """
    dtype = dtype or LD.dtype
    A, LD = wide(A), wide(LD)
    hermitian = hermitian and A.is_complex()
    lower = torch.tril(A, -1)
    full = lower + (lower.mH if hermitian else lower.mT)
    diag = A.diagonal(dim1=-2, dim2=-1)
    full = full + torch.diag_embed(diag.real.to(A.dtype) if hermitian else diag)
    n = max(A.shape[-1], 1)
    count = math.prod(LD.shape[:-2])
    flat_LD = LD.reshape(count, *LD.shape[-2:]).numpy()
    flat_piv = pivots.detach().cpu().reshape(count, LD.shape[-1]).tolist()
    product = np.stack([_ldl_product(m, p, hermitian)
                        for m, p in zip(flat_LD, flat_piv, strict=True)]) if len(flat_piv) \
        else flat_LD
    res = norm1(full - torch.from_numpy(product).reshape(LD.shape))
    return batch_ratio(res, n * norm1(full) * eps(dtype))


def solve_ratio(A, X, B, dtype=None) -> float:
    """||A X - B|| / (||A|| ||X|| n eps) (xGET02, 1-norms); the maximum over the batch.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> from mpslinalg.testing import random_matrix, solve_ratio
    >>> A, B = random_matrix(4, seed=1), random_matrix(4, seed=2)
    >>> solve_ratio(A, mpslinalg.solve(A, B), B) < 30
    True
    """
    dtype = dtype or X.dtype
    A, X, B = map(wide, (A, X, B))
    n = max(A.shape[-1], 1)
    res = norm1(A @ X - B)
    return batch_ratio(res, norm1(A) * norm1(X) * n * eps(dtype))


def inv_ratio(A, Ainv, dtype=None) -> float:
    """||A inv(A) - I|| / (n ||A|| ||inv(A)|| eps) (xGET03); the maximum over the batch.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> from mpslinalg.testing import inv_ratio, random_matrix
    >>> A = random_matrix(4, seed=1)
    >>> inv_ratio(A, mpslinalg.inv(A)) < 30
    True
    """
    dtype = dtype or Ainv.dtype
    A, Ainv = map(wide, (A, Ainv))
    n = max(A.shape[-1], 1)
    eye = torch.eye(n, dtype=A.dtype)
    res = norm1(A @ Ainv - eye)
    return batch_ratio(res, n * norm1(A) * norm1(Ainv) * eps(dtype))


def qr_ratio(A, Q, R, dtype=None) -> float:
    """||A - Q R|| / (max(m, n) ||A|| eps) for A (m x n) = Q R (xQRT01, 1-norms); the maximum
    over the batch.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> from mpslinalg.testing import qr_ratio, random_matrix
    >>> A = random_matrix(3, seed=1, m=5)
    >>> qr_ratio(A, *mpslinalg.qr(A)) < 30
    True
    """
    dtype = dtype or R.dtype
    A, Q, R = map(wide, (A, Q, R))
    size = max(A.shape[-1], A.shape[-2], 1)
    return batch_ratio(norm1(A - Q @ R), size * norm1(A) * eps(dtype))


def orthogonality_ratio(Q, dtype=None) -> float:
    """||Q^H Q - I|| / (m eps) for Q with m rows and orthonormal columns (xQRT01, 1-norm); the
    maximum over the batch.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> from mpslinalg.testing import orthogonality_ratio, random_matrix
    >>> Q, _ = mpslinalg.qr(random_matrix(3, seed=2, m=5))
    >>> orthogonality_ratio(Q) < 30
    True
    """
    dtype = dtype or Q.dtype
    Q = wide(Q)
    eye = torch.eye(Q.shape[-1], dtype=Q.dtype)
    num = norm1(Q.mH @ Q - eye)
    return batch_ratio(num, torch.full_like(num, max(Q.shape[-2], 1) * eps(dtype)))


def svd_ratio(A, U, S, Vh, dtype=None) -> float:
    """||A - U diag(S) Vh|| / (max(m, n) ||A|| eps) (xBDT01-style, 1-norms), over the first
    min(m, n) columns of U and rows of Vh (so full and reduced forms alike); the maximum over the
    batch.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> from mpslinalg.testing import random_matrix, svd_ratio
    >>> A = random_matrix(3, seed=1, m=5)
    >>> svd_ratio(A, *mpslinalg.svd(A)) < 30
    True
    """
    dtype = dtype or U.dtype
    A, U, S, Vh = map(wide, (A, U, S, Vh))
    k = S.shape[-1]
    rebuilt = (U[..., :k] * S.unsqueeze(-2).to(U.dtype)) @ Vh[..., :k, :]
    size = max(A.shape[-1], A.shape[-2], 1)
    return batch_ratio(norm1(A - rebuilt), size * norm1(A) * eps(dtype))


def singular_values_ratio(S, S_ref, m: int, n: int, dtype=None) -> float:
    """``max |S - S_ref| / (max(m, n) S_ref,max eps)``: singular values against a reference
    (e.g. SciPy's in float64); the maximum over the batch.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> from mpslinalg.testing import random_matrix, singular_values_ratio
    >>> A = random_matrix(4, seed=2)
    >>> S_ref = torch.linalg.svdvals(A.double())
    >>> singular_values_ratio(mpslinalg.svdvals(A), S_ref, 4, 4) < 30
    True
    """
    dtype = dtype or S.dtype
    S, S_ref = wide(S), wide(S_ref)
    if S.numel() == 0:
        return 0.0
    err = (S - S_ref).abs().amax(-1)
    return batch_ratio(err, max(m, n, 1) * S_ref.amax(-1) * eps(dtype))


def penrose_ratios(A, X, dtype=None) -> dict[str, float]:
    """The four Moore-Penrose conditions for X = pinv(A) as ratios (1-norms, max(m, n) eps):
    ||A X A - A|| / (||A||^2 ||X||), ||X A X - X|| / (||X||^2 ||A||),
    ||(A X)^H - A X|| / (||A|| ||X||) and ||(X A)^H - X A|| / (||A|| ||X||); each the maximum over
    the batch.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> from mpslinalg.testing import penrose_ratios, random_matrix
    >>> A = random_matrix(3, seed=1, m=5)
    >>> max(penrose_ratios(A, mpslinalg.pinv(A)).values()) < 30
    True
    """
    dtype = dtype or X.dtype
    A, X = wide(A), wide(X)
    a, x = norm1(A), norm1(X)
    unit = max(A.shape[-1], A.shape[-2], 1) * eps(dtype)
    AX, XA = A @ X, X @ A
    return {
        "AXA=A": batch_ratio(norm1(AX @ A - A), a * a * x * unit),
        "XAX=X": batch_ratio(norm1(XA @ X - X), x * x * a * unit),
        "(AX)^H=AX": batch_ratio(norm1(AX.mH - AX), a * x * unit),
        "(XA)^H=XA": batch_ratio(norm1(XA.mH - XA), a * x * unit),
    }


# ---------------------------------------------------------------- matrix generators

def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _haar(rng: np.random.Generator, n: int, complex_: bool, batch: tuple) -> np.ndarray:
    z = rng.standard_normal((*batch, n, n))
    if complex_:
        z = z + 1j * rng.standard_normal((*batch, n, n))
    q, r = np.linalg.qr(z)
    d = np.diagonal(r, axis1=-2, axis2=-1)
    return q * (d / np.where(np.abs(d) == 0, 1, np.abs(d)))[..., None, :]


def random_matrix(n: int, dtype=torch.float32, batch: tuple = (), seed: int = 0, m=None):
    """Standard normal entries (complex: both parts), shape ``(*batch, m or n, n)``.

    Examples
    --------
    >>> from mpslinalg.testing import random_matrix
    >>> random_matrix(3, batch=(2,), m=4).shape
    torch.Size([2, 4, 3])
    """
    rng = _rng(seed)
    m = n if m is None else m
    a = rng.standard_normal((*batch, m, n))
    if dtype.is_complex:
        a = a + 1j * rng.standard_normal((*batch, m, n))
    return torch.from_numpy(a).to(dtype)


def matrix_with_spread(n: int, cond: float, dtype=torch.float32, batch: tuple = (),
                       seed: int = 0, scale: float = 1.0, rank: int | None = None):
    """U diag(s) V^H with Haar U, V and singular values spread geometrically from ``scale`` down
    to ``scale / cond`` (LAPACK xLATMS mode 3); with ``rank``, the singular values past the
    first ``rank`` are exactly zero.

    Examples
    --------
    >>> import torch
    >>> from mpslinalg.testing import matrix_with_spread
    >>> A = matrix_with_spread(6, cond=1e3, dtype=torch.float64, seed=0)
    >>> round(float(torch.linalg.cond(A)))
    1000
    """
    rng = _rng(seed)
    u = _haar(rng, n, dtype.is_complex, batch)
    v = _haar(rng, n, dtype.is_complex, batch)
    s = scale * cond ** (-np.arange(n) / max(n - 1, 1))
    if rank is not None:
        s[rank:] = 0
    a = (u * s[..., None, :]) @ np.conj(np.swapaxes(v, -1, -2))
    return torch.from_numpy(a).to(dtype)


def singular_matrix(n: int, rank: int, dtype=torch.float32, batch: tuple = (), seed: int = 0):
    """An exactly rank-deficient matrix: the last ``n - rank`` columns are zero, so LU meets an
    exact zero pivot.

    Examples
    --------
    >>> import mpslinalg
    >>> from mpslinalg.testing import singular_matrix
    >>> mpslinalg.lu_factor_ex(singular_matrix(4, rank=2)).info
    tensor(3, dtype=torch.int32)
    """
    a = random_matrix(n, dtype, batch, seed)
    a[..., :, rank:] = 0
    return a


def noncontiguous(x: torch.Tensor) -> torch.Tensor:
    """The same values as ``x`` in a non-contiguous view (every other column of a wider
    buffer).

    Examples
    --------
    >>> import torch
    >>> from mpslinalg.testing import noncontiguous
    >>> noncontiguous(torch.eye(3)).is_contiguous()
    False
    """
    wide_buf = torch.zeros((*x.shape[:-1], 2 * x.shape[-1]), dtype=x.dtype, device=x.device)
    wide_buf[..., ::2] = x
    view = wide_buf[..., ::2]
    assert not view.is_contiguous() or x.numel() <= 1
    return view


# ---------------------------------------------------------------- host synchronisations

_SYNC_METHODS = {"item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__",
                 "__index__", "__complex__", "nonzero"}


class _SyncCounter(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in _SYNC_METHODS:
            self.calls.append(name)
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def count_host_syncs():
    """Counts tensor reads that force a device->host synchronisation (``.item()``,
    ``.tolist()``, ``.cpu()``, ``.numpy()``, ``bool(t)``, ...) inside the block.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> from mpslinalg.testing import count_host_syncs
    >>> with count_host_syncs() as syncs:
    ...     _ = mpslinalg.inv_ex(torch.eye(3))
    >>> syncs.calls
    []
    """
    counter = _SyncCounter()
    _errors.read_listeners.append(counter.calls.append)
    try:
        with counter:
            yield counter
    finally:
        _errors.read_listeners.remove(counter.calls.append)


class _LaunchCounter:
    def __init__(self):
        self.names: list[str] = []


@contextlib.contextmanager
def count_launches():
    """Records the Metal kernels mpslinalg launches inside the block, by host name in the order
    submitted (``names``), on every executor: the Apple GPU, the emulator (also what is queued
    on a stream) and the CUDA executor.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> from mpslinalg.testing import count_launches
    >>> with mpslinalg.use_backend("metal"), count_launches() as launches:
    ...     _ = mpslinalg.inv_ex(torch.eye(3))
    >>> launches.names
    ['small_inv_float32_n3']
    """
    counter = _LaunchCounter()
    _metal.launch_listeners.append(counter.names.append)
    try:
        yield counter
    finally:
        _metal.launch_listeners.remove(counter.names.append)
