"""Hermitian eigendecomposition: ``eigh`` and ``eigvalsh`` with torch.linalg semantics.

Op ``mpslinalg::eigh``: on the metal backend the kernels of ``metal/linalg/eigh.metal`` (see
the eigh page of the docs): two-sided cyclic Jacobi, one launch for any batch, up to
``TRIDIAG_MIN_N``:

- n <= ``SMALL_MAX``: ``eigh_small``, one matrix per thread in registers (generated from the
  n <= 4 description of `mpslinalg.small.codegen`: ``metal/linalg/eigh_small.h``, at most
  `mpslinalg.small.codegen.JACOBI_MAX_SWEEPS` sweeps);
- n up to the staging limit (62 in float32, 44 in complex64): ``eigh_group``, one threadgroup
  per matrix, A and V in threadgroup memory, pairs in the parallel round-robin order;
- larger n: ``eigh_device``, the same on A and V in a device-memory workspace;

and from ``TRIDIAG_MIN_N`` on, Householder tridiagonalisation spread over many threadgroups per
matrix (``metal/linalg/eigh_tridiagonal.h``), then bisection for the eigenvalues alone (n - 125
launches in all) or divide and conquer for the vectors (``metal/linalg/eigh_divide.h``) and the
QR family's blocked apply-Q.

Only the ``UPLO`` triangle is read. Eigenvalues come back ascending (real), eigenvectors as the
columns of V. Non-finite input gives NaN eigenvalues and vectors (torch raises for NaN on the
CPU; the metal path never reads the device to raise). Convergence is reported on the device:
the op's third output, ``info`` (0 converged; n for non-finite input; otherwise the rotations of
the last of ``MAX_SWEEPS`` sweeps), which the public functions do not return.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .. import small
from .._core import metal as _metal
from .._core import metal_params
from .._core.copy import contiguous
from .._core.declare import NOT_COMPUTED, REAL, Call, Declaration, Matrix, Param, Result, info
from .._core.metal import SIMD_WIDTH, launch
from .._core.op import call_torch, values_unavailable
from . import gemm_metal, qr_metal

__all__ = ["eigh", "eigvalsh"]

_SOURCE = "linalg/eigh.metal"

# Mirrors of the named constants of metal/linalg/eigh.h (tests/linalg/test_eigh.py checks them).
SMALL_MAX = 4  # kEighSmallMax
MAX_SWEEPS = 40  # kEighMaxSweeps
STAGE_BYTES = 31744  # kEighStageBytes: threadgroup memory for A and V in eigh_group
ROT_FLOATS = 6  # kEighRotFloats
GROUP_MAX_PAIRS = 32  # kEighGroupMaxPairs
MAX_THREADS = 1024  # kEighMaxThreads
STATUS_INTS = 2  # kEighStatusInts

#: The kernels index a matrix with 32-bit integers: n^2 < 2^31.
MAX_N = 46340

# Host-side launch geometry.
SMALL_GROUP = 256  # eigh_small: one thread per matrix

_TRIDIAG_HEADER = "linalg/eigh_tridiagonal.h"
#: From this order on the tridiagonal path (Householder reduction, then divide and conquer,
#: many threadgroups per matrix) serves a matrix; below it one-threadgroup Jacobi is as quick
#: or quicker (measured through the CUDA executor: the eigh page of the docs).
TRIDIAG_MIN_N = 128
#: eigh_tridiag_step (and eigh_tridiag_load): threads of a threadgroup and the trailing rows it
#: owns, one per simdgroup: a row is a chain of dependent loads and stores, so many
#: threadgroups hide the latency (128 at n = 1024); each repeats an O(n) prologue (the column
#: and its reflector), a small part of its 8 rows' work.
TRIDIAG_STEP_THREADS = 256
TRIDIAG_ROWS = 8
#: The last columns, from the order of the trailing matrix this small on, are reduced by one
#: threadgroup per matrix in one launch (eigh_tridiag_tail) instead of a launch each (measured
#: through the CUDA executor: the eigh page of the docs).
TRIDIAG_TAIL = 128
#: Threads of the eigh_tridiag_tail threadgroup (fewer where the pipeline allows fewer): its
#: simdgroups take the rows in turn, so more of them shorten each column's chain of rows; 512
#: against 256 and 1024 measured through the CUDA executor (the eigh page of the docs). The
#: tail's sums then run over 16 simdgroups, the steps' over 8: the same bits up to n = 256 (no
#: thread holds more than one entry of a column there), float32 rounding apart beyond.
TRIDIAG_TAIL_THREADS = 512
TRIDIAG_BISECT_THREADS = 64  # kTridiagBisectThreads: eigh_tridiag_bisect, one eigenvalue each

_DIVIDE_HEADER = "linalg/eigh_divide.h"
#: Simdgroups per threadgroup of eigh_dc_secular, eigh_dc_zhat and eigh_dc_mix (one root, kept
#: index or eigenvalue each; the kernels read the count from the launch).
DIVIDE_SIMDGROUPS = 8
DIVIDE_WORK_FLOATS = 10  # kDivideWorkFloats: per merge and order of its block (plus one)
DIVIDE_WORK_INTS = 7  # kDivideWorkInts (plus two)
#: eigh_dc_merge stages a merge in threadgroup memory up to this order (kDivideStageMax; tests
#: lower it to run the workspace variant at small sizes).
DIVIDE_STAGE = 2048
#: kDivideLeafMax: eigh_dc_leaf solves the blocks of the highest level whose blocks have at
#: most this many rows (below the last level) whole, in one launch; the merges start above it.
DIVIDE_LEAF_MAX = 16
DIVIDE_LEAF_THREADS = 32  # kDivideLeafThreads: one simdgroup a leaf


def group_max_n(dtype: torch.dtype) -> int:
    """The largest order eigh_group stages (A and V, n^2 elements each, in STAGE_BYTES)."""
    itemsize = torch.empty(0, dtype=dtype).element_size()
    return math.isqrt(STAGE_BYTES // (2 * itemsize))


def _group_threads(n: int) -> int:
    """Threads of an eigh_group / eigh_device threadgroup: one per (pair, pair) block of a
    rotation step's update, rounded up to whole simdgroups, at most MAX_THREADS (eigh_device:
    from 544, complex64 at n = 45, up; 1024 from n = 63)."""
    pairs = (n + 1) // 2
    items = pairs * pairs
    return min(MAX_THREADS, _metal.ceil_div(items, SIMD_WIDTH) * SIMD_WIDTH)


def path(n: int, dtype: torch.dtype) -> str:
    """Which kernels serve order n: 'small', 'group', 'device' or 'tridiagonal'."""
    if n <= SMALL_MAX:
        return "small"
    if n >= max(TRIDIAG_MIN_N, 3):
        return "tridiagonal"
    return "group" if n <= group_max_n(dtype) else "device"


def _tridiagonal(A: Tensor, w: Tensor, V: Tensor, status: Tensor, *, lower: bool,
                 vectors: bool, fn: str) -> None:
    """The tridiagonal path into w, V and status (see metal/linalg/eigh_tridiagonal.h): one
    load, n reduction steps, then bisection (eigenvalues only) or T's vectors (divide and
    conquer) and the QR family's apply-Q."""
    n = A.shape[-1]
    batch = w.numel() // n
    dtype, device = A.dtype, A.device
    groups = _metal.ceil_div(n, TRIDIAG_ROWS)  # the load's; a step uses at most as many

    def params(**fields: int) -> list[int]:
        return metal_params.pack(_TRIDIAG_HEADER, "TridiagParams", 0, n=n, batch=batch,
                                 lower=lower, vectors=vectors, **fields)

    x = torch.empty((batch, n, n), dtype=dtype, device=device)
    flags = torch.empty((batch, 2), dtype=torch.int32, device=device)
    part = torch.empty((batch, groups, 2), dtype=torch.float32, device=device)
    load = _metal.kernel(_SOURCE, "eigh_tridiag_load", dtype, device, fn=fn)
    launch(load, A, x, part, params(rows=TRIDIAG_ROWS, groups=groups),
           threads=[groups * TRIDIAG_STEP_THREADS, batch], group_size=[TRIDIAG_STEP_THREADS, 1])
    vec = torch.empty((batch, 4 * n + 2), dtype=dtype, device=device)
    scratch = torch.empty((batch, groups, 2 * n), dtype=dtype, device=device)
    de = torch.empty((batch, 2 * n), dtype=torch.float32, device=device)
    if vectors:
        refl = torch.zeros((batch, n - 1, n - 1), dtype=dtype, device=device)
        taus = torch.zeros((batch, n - 1), dtype=dtype, device=device)
    else:
        refl = taus = A.new_empty(1)  # never written
    step = _metal.bind(_metal.kernel(_SOURCE, "eigh_tridiag_step", dtype, device, fn=fn),
                       x, vec, scratch, de, refl, taus, part, flags)
    # n launches, where the host's cost per launch is most of a step's time: the arguments are
    # bound once and the packed words formed once, then only the step's word changes
    words = params(step=0, rows=TRIDIAG_ROWS, groups=groups)
    step_word = metal_params.param_struct(_TRIDIAG_HEADER, "TridiagParams").word("step")
    group_size = [TRIDIAG_STEP_THREADS, 1]
    tail = max(0, n - TRIDIAG_TAIL)  # the first column of eigh_tridiag_tail's
    for k in range(tail):
        step_groups = max(1, _metal.ceil_div(n - 1 - k, TRIDIAG_ROWS))
        words = list(words)
        words[step_word] = k
        step(words, threads=[step_groups * TRIDIAG_STEP_THREADS, batch], group_size=group_size)
    tail_kernel = _metal.kernel(_SOURCE, "eigh_tridiag_tail", dtype, device, fn=fn)
    tail_threads = _metal.group_width(tail_kernel, TRIDIAG_TAIL_THREADS)
    launch(tail_kernel, x, vec, scratch, de, refl, taus, part, flags,
           params(step=tail, rows=n, groups=groups), threads=[tail_threads, batch],
           group_size=[tail_threads, 1])
    if not vectors:
        bisect = _metal.kernel(_SOURCE, "eigh_tridiag_bisect", dtype, device, fn=fn)
        launch(bisect, de, flags, w, status, params(),
               threads=[_metal.ceil_div(n, TRIDIAG_BISECT_THREADS) * TRIDIAG_BISECT_THREADS,
                        batch], group_size=[TRIDIAG_BISECT_THREADS, 1])
        return
    Z = _divide(de, flags, w, status, n, batch, fn=fn)
    # V = Q Z, Q = diag(1, H(0) ... H(n - 2)) (the reflectors act on rows 1 .. n - 1).
    tmat = qr_metal.larft_metal(refl, taus, fn=fn)
    # (a copy of Z's rows 1 .. n - 1 whatever the batch, so that apply-Q's own gather, which
    # a batch of one would skip, never runs: launches do not depend on it)
    rows = torch.empty((batch, n - 1, n), dtype=dtype, device=device)
    rows.copy_(Z[:, 1:])
    rest = qr_metal.apply_q_metal(refl, tmat, rows, k=n - 1, adjoint=False, fn=fn)
    V_flat = V.view(batch, n, n)
    V_flat[:, :1].copy_(Z[:, :1])
    V_flat[:, 1:].copy_(rest)


def _divide(de: Tensor, flags: Tensor, w: Tensor, status: Tensor, n: int, batch: int, *,
            fn: str) -> Tensor:
    """T's eigenvectors Z (batch, n, n) float32 by divide and conquer (metal/linalg/
    eigh_divide.h): the leaves (blocks of at most DIVIDE_LEAF_MAX rows) by one eigh_dc_leaf
    launch, then per level of ceil(log2 n) above them the merges, their roots, z-hat, the
    mixing rows and one shared GEMM; w and status too."""
    device = de.device
    levels = max(1, (n - 1).bit_length())

    def width(level: int) -> int:  # the largest block of a level
        return 1 if level == 0 else -(-(n << level) >> levels)

    def size(level: int) -> int:
        return (1 << (levels - level)) * width(level) ** 2

    f32 = torch.float32
    biggest = max(size(level) for level in range(1, levels + 1))
    w_rot = torch.empty(batch * biggest, dtype=f32, device=device)
    mix = torch.empty(batch * biggest, dtype=f32, device=device)
    w_prev = torch.empty(batch * biggest, dtype=f32, device=device)
    w_next = torch.empty(batch * biggest, dtype=f32, device=device)
    lam_prev = torch.empty(batch * n * 2, dtype=f32, device=device)
    lam_next = torch.empty(batch * n * 2, dtype=f32, device=device)
    most = max((1 << (levels - level)) * width(level) for level in range(1, levels + 1))
    work = torch.empty(batch * (DIVIDE_WORK_FLOATS * most + (1 << levels)), dtype=f32,
                       device=device)
    iwork = torch.empty(batch * (DIVIDE_WORK_INTS * most + 2 * (1 << levels)),
                        dtype=torch.int32, device=device)
    Z = torch.empty((batch, n, n), dtype=f32, device=device)
    merge, secular, zhat, mixing = (
        _metal.kernel(_SOURCE, name, f32, device, fn=fn)
        for name in ("eigh_dc_merge", "eigh_dc_secular", "eigh_dc_zhat", "eigh_dc_mix"))
    # The leaves: the highest level below the last whose blocks have at most DIVIDE_LEAF_MAX
    # rows, solved whole in one launch (level 0, the 1 x 1 blocks, needs none: the first merge
    # reads T's diagonal).
    leaf = max(level for level in range(levels) if width(level) <= DIVIDE_LEAF_MAX)
    if leaf > 0:
        params = metal_params.pack(_DIVIDE_HEADER, "DivideParams", n=n, batch=batch, level=leaf,
                                   levels=levels, width=width(leaf), child=width(leaf - 1),
                                   stage=DIVIDE_STAGE)
        launch(_metal.kernel(_SOURCE, "eigh_dc_leaf", f32, device, fn=fn), de, flags, lam_prev,
               w_prev, params, threads=[DIVIDE_LEAF_THREADS, 1 << (levels - leaf), batch],
               group_size=[DIVIDE_LEAF_THREADS, 1, 1])
    for level in range(leaf + 1, levels + 1):
        wd, blocks = width(level), 1 << (levels - level)
        params = metal_params.pack(_DIVIDE_HEADER, "DivideParams", n=n, batch=batch,
                                   level=level, levels=levels, width=wd, child=width(level - 1),
                                   stage=DIVIDE_STAGE)
        threads = min(TRIDIAG_STEP_THREADS, _metal.ceil_div(wd, SIMD_WIDTH) * SIMD_WIDTH)
        launch(merge, de, flags, lam_prev, w_prev, w_rot, work, iwork, params,
               threads=[threads, blocks, batch], group_size=[threads, 1, 1])
        sgs = min(DIVIDE_SIMDGROUPS, wd)
        grid = {"threads": [_metal.ceil_div(wd, sgs) * sgs * SIMD_WIDTH, blocks, batch],
                "group_size": [sgs * SIMD_WIDTH, 1, 1]}
        launch(secular, flags, work, iwork, params, **grid)
        launch(zhat, flags, work, iwork, params, **grid)
        launch(mixing, flags, work, iwork, lam_next, mix, w, status, params, **grid)
        if level == levels:
            gemm_metal.launch_gemm(w_rot, mix, Z, n, n, n, batch, lda=n, ldb=n, ldc=n,
                                   op_a="T", op_b="T", stride_a=n * n, stride_b=n * n,
                                   stride_c=n * n, fn=fn, kernel="tile")
        else:
            gemm_metal.launch_gemm(mix, w_rot, w_next, wd, wd, wd, batch * blocks, lda=wd,
                                   ldb=wd, ldc=wd, stride_a=wd * wd, stride_b=wd * wd,
                                   stride_c=wd * wd, fn=fn, kernel="tile")
        lam_prev, lam_next = lam_next, lam_prev
        w_prev, w_next = w_next, w_prev
    return Z


def eigh_metal(A: Tensor, *, lower: bool, vectors: bool, fn: str = "eigh"
               ) -> tuple[Tensor, Tensor, Tensor]:
    """Eigenvalues, eigenvectors and status of the (*, n, n) float32 / complex64 tensor ``A``
    (not modified), of which the ``lower`` (or upper) triangle is read.

    Returns ``(w, V, status)``: w (*, n) real ascending; V (*, n, n) with the eigenvectors as
    columns (an empty tensor when not ``vectors``); status (*, 2) int32, ``[info, sweeps]``.
    One launch (plus one gather for a non-contiguous ``A``); no device read.
    """
    *batch_shape, n, _ = A.shape
    if n > MAX_N:
        raise ValueError(f"mpslinalg.{fn}: the metal backend supports matrices of order at most "
                         f"{MAX_N} (n^2 < 2^31), got n = {n}; use the torch backend")
    A = contiguous(A, fn)
    batch = math.prod(batch_shape)
    real = A.real.dtype if A.is_complex() else A.dtype
    w = torch.empty((*batch_shape, n), dtype=real, device=A.device)
    V = (torch.empty((*batch_shape, n, n), dtype=A.dtype, device=A.device) if vectors
         else A.new_empty(0))
    # Every path's kernels write every matrix's status, so no fill (a launch) is needed.
    status = torch.empty((*batch_shape, STATUS_INTS), dtype=torch.int32, device=A.device)
    if batch == 0 or n == 0:
        return w, V, status.zero_()
    v_arg = V if vectors else A.new_empty(1)  # never written
    params = metal_params.pack("linalg/eigh.h", "EighParams", n=n, batch=batch, lower=lower,
                               vectors=vectors)
    kind = path(n, A.dtype)
    if kind == "tridiagonal":
        _tridiagonal(A, w, V, status, lower=lower, vectors=vectors, fn=fn)
        return w, V, status
    if kind == "small":
        kernel = _metal.kernel(_SOURCE, "eigh_small", A.dtype, A.device, fn=fn, n=n)
        group = min(SMALL_GROUP, _metal.ceil_div(batch, SIMD_WIDTH) * SIMD_WIDTH)
        launch(kernel, A, w, v_arg, status, params,
               threads=[_metal.ceil_div(batch, group) * group], group_size=[group])
        return w, V, status
    if kind == "group":
        kernel = _metal.kernel(_SOURCE, "eigh_group", A.dtype, A.device, fn=fn)
        threads = _metal.group_width(kernel, _group_threads(n))  # the bits do not depend on it
        launch(kernel, A, w, v_arg, status, params, threads=[threads, batch],
               group_size=[threads, 1])
        return w, V, status
    work = torch.empty((batch, 2, n, n), dtype=A.dtype, device=A.device)
    rot = torch.empty((batch, (n + 1) // 2 * ROT_FLOATS), dtype=torch.float32, device=A.device)
    kernel = _metal.kernel(_SOURCE, "eigh_device", A.dtype, A.device, fn=fn)
    threads = _metal.group_width(kernel, _group_threads(n))
    launch(kernel, A, w, v_arg, status, params, work, rot, threads=[threads, batch],
           group_size=[threads, 1])
    return w, V, status


# ---------------------------------------------------------------- mpslinalg::eigh


def _eigh_metal(A: Tensor, UPLO: str, vectors: bool) -> tuple[Tensor, Tensor, Tensor]:
    w, V, status = eigh_metal(A, lower=UPLO == "L", vectors=vectors)
    return w, V, status[..., 0]


def _eigh_torch(A: Tensor, UPLO: str, vectors: bool) -> tuple[Tensor, Tensor, Tensor]:
    info = torch.zeros(A.shape[:-2], dtype=torch.int32, device=A.device)
    if vectors:
        w, V = call_torch("eigh", torch.linalg.eigh, A, UPLO)
        return w, V, info
    return call_torch("eigvalsh", torch.linalg.eigvalsh, A, UPLO), A.new_empty(0), info


def _eigh_small(A: Tensor, UPLO: str, vectors: bool, *, backend: str
                ) -> tuple[Tensor, Tensor, Tensor]:
    w, V = small.small_eigh(A, UPLO == "U", vectors)
    return w, V, torch.zeros(A.shape[:-2], dtype=torch.int32, device=A.device)


def _eigh_save(ctx, inputs, outputs) -> None:
    # An unused V (eigvalsh, or a loss of L alone) must reach the backward as None, as torch's
    # undefined gradient, not as zeros: 0 / 0 at a repeated eigenvalue would give NaN.
    ctx.set_materialize_grads(False)
    ctx.vectors = inputs[2]
    ctx.save_for_backward(outputs[0], outputs[1])


def _eigh_backward(ctx, gL: Tensor | None, gV: Tensor | None, ginfo):
    """gA = V (diag(gL) + sym(V^H gV) / E) V^H with E_ij = L_j - L_i and sym(X) = (X - X^H) / 2
    (the projection onto skew-Hermitian matrices), as torch's linalg_eig_backward for Hermitian
    input (torch/csrc/autograd/FunctionsManual.cpp; the formula of Giles 2008, "An extended
    collection of matrix derivative results for forward and reverse mode AD", sec. 3.1). As in
    torch, repeated eigenvalues give non-finite gradients when the loss uses V, and a loss that
    depends on the complex phase of the eigenvectors raises (one device read in the backward
    pass, as torch's check)."""
    L, V = ctx.saved_tensors
    if not ctx.vectors:
        raise RuntimeError("mpslinalg.eigvalsh: internal error: the eigenvectors needed by the "
                           "derivative were not computed")
    if gL is None and gV is None:
        return None, None, None
    if gV is None:
        inner = torch.diag_embed(gL.to(V.dtype))
    else:
        VhgV = V.mH @ gV
        if V.is_complex() and not values_unavailable(V):
            phase = VhgV.diagonal(dim1=-2, dim2=-1).imag
            if not torch.allclose(phase, torch.zeros_like(phase), rtol=1e-2, atol=1e-2):
                raise RuntimeError(
                    "mpslinalg.eigh: The eigenvectors in the complex case are specified up to "
                    "multiplication by e^{i phi}. The specified loss function depends on this "
                    "quantity, so it is ill-defined.")
        skew = 0.5 * (VhgV - VhgV.mH)
        E = L.unsqueeze(-2) - L.unsqueeze(-1)
        E.diagonal(dim1=-2, dim2=-1).fill_(1)
        inner = skew / E.to(skew.dtype)
        if gL is not None:
            inner.diagonal(dim1=-2, dim2=-1).copy_(gL)
    return V @ inner @ V.mH, None, None


#: (eigenvalues, eigenvectors or an empty tensor, info) of Hermitian ``A`` given by the
#: ``UPLO`` triangle.
eigh_decl = Declaration(
    "eigh", [Matrix("A"), Param("UPLO", "str"), Param("vectors", "bool")],
    [Result("eigenvalues", lambda A, UPLO, vectors: A[-1:], REAL),
     Result("eigenvectors", lambda A, UPLO, vectors: A if vectors else NOT_COMPUTED), info()],
    forward={"metal": _eigh_metal, "torch": _eigh_torch, "small": _eigh_small},
    small_when=lambda backend, A, UPLO, vectors: small.use_small_eigh(A, backend, vectors),
    backward=_eigh_backward, saves=_eigh_save)
eigh_op = eigh_decl.op


# ---------------------------------------------------------------- public API


def _uplo(fn: str, UPLO: object) -> str:
    """'L' or 'U' (either case), as torch accepts."""
    if not isinstance(UPLO, str) or UPLO.upper() not in ("L", "U"):
        raise RuntimeError(f"mpslinalg.{fn}: Expected UPLO argument to be 'L' or 'U', but got "
                           f"{UPLO}")
    return UPLO.upper()


def _eigh_general(A: Tensor) -> bool:
    """eigh's calls of the op on the torch backend: batches the small path may serve."""
    return small.may_use_small_eigh(A)


def _eigh_args(call: Call, A: Tensor, UPLO: object) -> tuple:
    return A, _uplo(call.fn, UPLO), True


def _eigh_results(call: Call, L: Tensor, V: Tensor, info: Tensor):
    return torch.return_types.linalg_eigh((call.cast(L), call.cast(V)))


@eigh_decl.public(torch.linalg.eigh, through_op=_eigh_general, prepare=_eigh_args,
                  finish=_eigh_results)
def eigh(A: Tensor, UPLO: str = "L", *, out: tuple[Tensor, Tensor] | None = None):
    r"""Eigenvalues and eigenvectors of a Hermitian (real symmetric) matrix; like
    `torch.linalg.eigh`: ``A = V diag(L) V^H``.

    Parameters
    ----------
    A : Tensor
        ``(*, n, n)``. Only the triangle named by ``UPLO`` is read (the imaginary part of the
        diagonal is ignored).
    UPLO : {'L', 'U'}, optional
        Which triangle to read (lower case accepted).
    out : tuple of Tensor, optional
        ``(eigenvalues, eigenvectors)`` to write the results into.

    Returns
    -------
    eigenvalues : Tensor
        ``(*, n)``, real, ascending.
    eigenvectors : Tensor
        ``(*, n, n)``, A's dtype: orthonormal (unitary) columns, each defined up to sign (real)
        or phase (complex). Differentiable (torch's rule).

    Notes
    -----
    On the metal backend: two-sided Jacobi with exact power-of-two scaling, one launch for any
    batch, below n = 128; from 128, Householder tridiagonalisation and divide and conquer over
    many threadgroups (docs: eigh page). No device read; non-finite input gives
    NaN results (torch raises on the CPU for NaN).

    Examples
    --------
    >>> import torch, mpslinalg
    >>> A = torch.tensor([[2., 1.], [1., 2.]])
    >>> L, V = mpslinalg.eigh(A)
    >>> L
    tensor([1., 3.])
    >>> torch.allclose(V @ torch.diag(L) @ V.mT, A)
    True
    """


def _eigvalsh_general(A: Tensor) -> bool:
    """eigvalsh's calls of the op on the torch backend: batches the small path may serve at
    the eigenvalues-only crossovers."""
    return small.may_use_small_eigh(A, compute_v=False)


def _eigvalsh_args(call: Call, A: Tensor, UPLO: object) -> tuple:
    # the eigenvectors only where the derivative needs them
    return A, _uplo(call.fn, UPLO), A.requires_grad and torch.is_grad_enabled()


@eigh_decl.public(torch.linalg.eigvalsh, through_op=_eigvalsh_general, prepare=_eigvalsh_args,
                  finish=lambda call, L, V, info: call.cast(L))
def eigvalsh(A: Tensor, UPLO: str = "L", *, out: Tensor | None = None) -> Tensor:
    r"""Eigenvalues of a Hermitian (real symmetric) matrix; like `torch.linalg.eigvalsh`.

    Parameters
    ----------
    A : Tensor
        ``(*, n, n)``. Only the triangle named by ``UPLO`` is read.
    UPLO : {'L', 'U'}, optional
        Which triangle to read (lower case accepted).
    out : Tensor, optional
        Tensor to write the result into.

    Returns
    -------
    Tensor
        ``(*, n)``, real, ascending. Differentiable (``V diag(gL) V^H``; the eigenvectors are
        then computed too).

    Examples
    --------
    >>> import torch, mpslinalg
    >>> mpslinalg.eigvalsh(torch.tensor([[2., 1.], [1., 2.]]))
    tensor([1., 3.])
    """
