"""Host side of metal/linalg/refine.metal: float64-class solves of float64 / complex128 systems
from float32 kernels (mixed-precision iterative refinement), and the double-float self-test.

Metal has no float64. A float64 / complex128 ``A`` and ``B`` reach the kernels as their bits
(an int32 view: no conversion on the host), ``refine_split`` cuts every float64 into three
float32 pieces whose sum is that float64 exactly, scaled by a power of two per matrix (so
1e-30 or 1e+30 matrices neither under- nor overflow in float32), the existing LU kernels
factor the leading piece (`lu_metal.lu_factor_metal`: a faster LU speeds this up too), and a
fixed number of steps follows: ``refine_residual`` (R = B - A X, exact products summed in a
three-float accumulator; a simdgroup per row of R, its lanes along A's row and the right-hand
sides), the correction D = A^-1 R in float32 (see `CORRECTION`) and ``refine_update``
(backward error, decision, X += D with X a three-float value). The steps are a fixed count,
`MAX_STEPS`, so that nothing waits for the device; each matrix stops on the device by itself
(the rule of LAPACK's dgerfs: while the backward error halves), after which every later launch
of its steps returns at once: the residual and the update read its status (and the blocked
solves' gate, when the correction is solved). A stopped matrix costs launches, not work.

The correction, `correction_kind`: for few right-hand sides, the inverses of the float32
factors, L^-1 and U^-1 (LAPACK trtri by `triangular_metal.inverse_lower`, n^3 / 3
multiply-adds once), applied at each step as two products on the shared GEMM (and the row
interchanges as a gather): two launches a step. Substituting with the factors instead (the
blocked solve, 4 ceil(n / bs) - 2 launches a step) did the same work in 512 launches a step at
n = 4096 with 32-row blocks, which made the launches, not the arithmetic, the cost of the
refined solve (168 ms against the float32 solve's 72 ms on the H200), and 62 with the
256-row blocks of `triangular_metal.block_rows`. The explicit inverses change the correction's
error only by a modest factor (its error is still of order cond(A) u32 relative, Higham,
"Accuracy and Stability of Numerical Algorithms", 2nd ed., sec. 14.3-14.4, against sec. 9.1
for substitution), and refinement only needs that error below one to converge: the accuracy
targets and step counts of docs/float64.rst hold with it. With many right-hand sides (``inv``)
the products, which do not skip the factors' zero triangles, would do twice the solves'
arithmetic: the blocked solves serve there.

The float64 result is assembled where the input lives: the three float32 pieces of X are moved
there and summed in float64 (two additions and a power-of-two scaling per entry: the one place
float64 arithmetic happens, on the CPU on a Mac). On a Mac, float64 tensors live on the CPU
(MPS has no float64): a CPU float64 call on the metal backend moves the int32 bits to the Apple
GPU, runs every kernel there and brings X's pieces and ``info`` back (`work_device`); where no
Apple GPU is usable (here) the same kernels run on the CPU tensors in the emulator.

``info``: the LU's (the first exactly zero pivot) where it is non-zero; else `UNREFINED_INFO`
for a matrix whose refinement did not reach float64-class accuracy (about cond(A) > 1e7,
beyond float32 factors: never a float32-grade answer labelled float64); else 0. Input holding
NaN or Inf gives NaN results and no failure, as LAPACK does.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from .._core import checks, metal_params
from .._core import metal as _metal
from .._core.copy import contiguous
from .._core.errors import UNREFINED_INFO
from .._core.metal import launch
from .._core.platform import mps_unavailable_reasons
from . import gemm_metal, lu_metal, triangular_metal

_SOURCE = "linalg/refine.metal"
_HEADER = "linalg/refine.h"

#: Refinement steps launched per call (each matrix stops earlier on the device: typically 3
#: steps at cond 1e2 and 6 at 1e6, see docs/float64.rst).
MAX_STEPS = 12
#: How the correction D = A^-1 R is computed (see the module docstring), or None for
#: `correction_kind`'s rule: "inverse" (L^-1 and U^-1 formed once, two GEMM launches a step),
#: "blocked" (the gated solves with the factors, trsm_diag + trsm_update per diagonal block of
#: bs = triangular_metal.block_rows(n) rows, many threadgroups: 2 ceil(n / bs) - 1 launches per
#: triangular solve) or "trsv" (a threadgroup per
#: right-hand side, one launch per triangular solve: less parallel, far fewer launches).
#: benchmarks/bench_refine.py times each.
CORRECTION = None
#: The inverse correction serves at most n / INVERSE_RHS_RATIO right-hand sides: beyond, its
#: products' extra arithmetic (they do not skip the inverses' zero triangles: n^2 k more
#: multiply-adds a step than the solves' n^2 k) outweighs the launches it saves.
INVERSE_RHS_RATIO = 4
#: The dtypes the metal backend refines, with the float32 dtype they compute in.
REFINED_DTYPES = {torch.float64: torch.float32, torch.complex128: torch.complex64}
#: Float64's unit roundoff; the accepted backward error is sqrt(n) times it (dsgesv's test).
EPS64 = 2.0 ** -53

# Mirrors of metal/linalg/refine.h (tests/linalg/test_refine.py checks them).
STATE_INTS = 2  # kRefineStateInts
ERR_FLOATS = 2  # kRefineErrFloats
ITERATING, CONVERGED, FAILED, NONFINITE = 0, 1, 2, 3  # kRefine{Iterating,...,Nonfinite}

# Launch geometry (host-side only).
UPDATE_THREADS = 256  # refine_update: one threadgroup per matrix
RESIDUAL_ROWS = 8  # refine_residual: simdgroups (rows of R) per threadgroup
SPLIT_GROUP = 256

#: The exponent field of a float64's high 32-bit word.
_EXP_SHIFT, _EXP_MASK, _EXP_BIAS = 20, 0x7FF, 1023


class Refined(NamedTuple):
    """What `solve_refined` returns: X (float64 / complex128), info (A's batch), and per
    broadcast batch element the refinement steps applied and the last backward error."""

    X: torch.Tensor
    info: torch.Tensor
    steps: torch.Tensor
    berr: torch.Tensor


def residual_tile_cols(k: int) -> int:
    """refine_residual's right-hand sides per simdgroup for ``k`` of them: the power of two
    at least k, at most the SIMD width; the lanes left over split the depth (all 32 of them
    along A's row for one right-hand side)."""
    tile = 1
    while tile < min(k, _metal.SIMD_WIDTH):
        tile *= 2
    return tile


def correction_kind(n: int, k: int) -> str:
    """The correction's kernels for order n and k right-hand sides (`CORRECTION` when set)."""
    if CORRECTION is not None:
        return CORRECTION
    return "inverse" if INVERSE_RHS_RATIO * k <= n else "blocked"


class _InverseCorrection:
    """D = A^-1 R from A = P L U by the factors' inverses: L^-1 (unit lower) and U^-1 (the
    adjoint of U^-H: `triangular_metal.inverse_lower` inverts lower triangles; stored as is so
    that both products read their rows contiguously, in gemm_narrow for few right-hand sides),
    formed once per matrix of A's batch and broadcast to the calls' batch, and the permutation
    of P."""

    def __init__(self, LU: torch.Tensor, pivots: torch.Tensor, batch, fn: str):
        n = LU.shape[-1]

        def spread(x: torch.Tensor) -> torch.Tensor:
            return contiguous(x.expand(*batch, *x.shape[LU.dim() - 2:]), fn)

        self.fn = fn
        self.l_inv = spread(triangular_metal.inverse_lower(LU, trans=0, unit=1, fn=fn))
        self.u_inv = spread(triangular_metal.adjoint_copy(
            triangular_metal.inverse_lower(LU, trans=1, fn=fn)))
        # A[perm] = L U: P^T R = R[perm] (left); R P^T puts R's column i at perm[i] (right)
        # (an index, int64: torch's gather takes it broadcast, with no copy)
        perm = lu_metal.pivots_to_permutation_metal(pivots, n, fn=fn)
        self.perm = perm.expand(*batch, n)

    def __call__(self, R: torch.Tensor, left: bool) -> torch.Tensor:
        fn = self.fn
        if left:  # D = U^-1 L^-1 (P^T R)
            rows = torch.gather(R, -2, self.perm[..., :, None].expand(R.shape))
            T = gemm_metal.gemm_metal(self.l_inv, rows, fn=fn)
            return gemm_metal.gemm_metal(self.u_inv, T, fn=fn)
        # D = R U^-1 L^-1 P^T
        T = gemm_metal.gemm_metal(R, self.u_inv, fn=fn)
        T = gemm_metal.gemm_metal(T, self.l_inv, fn=fn)
        return torch.empty_like(T).scatter_(-1, self.perm[..., None, :].expand(T.shape), T)


def refined(dtype: torch.dtype) -> bool:
    """Whether the metal backend computes ``dtype`` by refinement (float64, complex128)."""
    return dtype in REFINED_DTYPES


def unrefined(small_when):
    """A family's ``small_when`` that never sends a refined call (float64 on the metal
    backend) to the n <= 4 path, whose kernels are float32."""

    def when(backend: str, A: torch.Tensor, *rest) -> bool:
        if backend == "metal" and refined(A.dtype):
            return False
        return small_when(backend, A, *rest)

    return when


def work_device(device: torch.device) -> torch.device:
    """Where the kernels of a float64 call on ``device`` run: the Apple GPU for CPU tensors
    when one is usable (float64 cannot live on MPS), else the tensors' own device (the
    emulator for CPU tensors, the CUDA executor for CUDA tensors)."""
    if device.type == "cpu" and not mps_unavailable_reasons():
        return torch.device("mps")
    return device


def _real_view(x: torch.Tensor) -> torch.Tensor:
    """The float64 scalars of ``x`` (complex as (re, im) pairs in the last dimension)."""
    x = x.resolve_conj().resolve_neg()
    return torch.view_as_real(x) if x.is_complex() else x


def split(x: torch.Tensor, work: torch.device, fn: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` (*, r, c) float64 / complex128 as three float32 / complex64 pieces (3, *, r, c)
    on ``work``, x == (p0 + p1 + p2) * 2^shift exactly, and the int32 shift per matrix (*)."""
    *batch, rows, cols = x.shape
    real = _real_view(x).contiguous()
    per_matrix = rows * cols * (2 if x.is_complex() else 1)
    count = real.numel()
    # flattened first: a contiguous tensor may carry any stride on a dimension of size 1
    # (torch.linalg.solve's (n, 1) results do), which a dtype view refuses
    bits = real.reshape(-1).view(torch.int32).to(work)
    nmat = math.prod(batch)
    hi = bits.view(-1, 2)[:, 1]
    if count and per_matrix:
        field = (hi >> _EXP_SHIFT) & _EXP_MASK
        # NaN and Inf (the all-ones exponent) do not set the scale: the finite entries keep
        # theirs, so LU meets the same numbers as the float32 path
        field = torch.where(field == _EXP_MASK, 0, field)
        exponent = field.view(nmat, per_matrix).amax(-1)
        shift = (exponent - _EXP_BIAS).to(torch.int32)
    else:
        shift = torch.zeros(nmat, dtype=torch.int32, device=work)
    pieces = torch.empty(3 * count, dtype=torch.float32, device=work)
    if count:
        kernel = _metal.kernel(_SOURCE, "refine_split", torch.float32, work, fn=fn)
        threads = _metal.grid_stride_threads(count)
        launch(kernel, bits, shift, pieces,
               metal_params.pack(_HEADER, "RefineSplitParams", count=count,
                                 per_matrix=per_matrix, plane=count),
               threads=[threads], group_size=[min(SPLIT_GROUP, threads)])
    pieces = pieces.view(3, *real.shape)
    if x.is_complex():
        pieces = torch.view_as_complex(pieces)
    return pieces, shift.view(batch)


def _reduce_to(flags: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """A bool tensor of a broadcast batch shape reduced (any) to the batch ``shape`` it was
    broadcast from."""
    extra = flags.dim() - len(shape)
    if extra:
        flags = flags.flatten(0, extra - 1).any(0) if extra > 1 else flags.any(0)
    for dim, size in enumerate(shape):
        if size == 1 and flags.shape[dim] != 1:
            flags = flags.any(dim, keepdim=True)
    return flags


def _params(n: int, rows: int, cols: int, left: bool, nb: int, step: int) -> list[int]:
    """RefineParams of step ``step`` for ``nb`` matrices of order n, right-hand sides rows x
    cols."""
    k = cols if left else rows
    return metal_params.pack(
        _HEADER, "RefineParams", n=n, rows=rows, cols=cols, left=int(left), a_plane=nb * n * n,
        b_plane=nb * rows * cols, step=step, max_steps=MAX_STEPS, tol=math.sqrt(n) * EPS64,
        tile_cols=residual_tile_cols(k))


def residual(Ap: torch.Tensor, Bp: torch.Tensor, Xp: torch.Tensor, state: torch.Tensor,
             R: torch.Tensor, *, left: bool, step: int, fn: str = "solve") -> torch.Tensor:
    """``refine_residual``: R = B - A X (``left``) or B - X A into R (*, rows, cols), for the
    matrices whose status in ``state`` (nb, STATE_INTS) is `ITERATING` (the others' R is left
    as it is). Ap (3, *, n, n), Bp and Xp (3, *, rows, cols): contiguous pieces on one
    device, batches equal. At ``step`` 0 the kernel takes X as zero (R = B, no product).
    Returns R."""
    n = Ap.shape[-1]
    rows, cols = R.shape[-2:]
    nb = math.prod(R.shape[:-2])
    m, k = (rows, cols) if left else (cols, rows)  # R^ = B^ - op(A) X^ is m x k
    if not (nb and m and k):
        return R
    kernel = _metal.kernel(_SOURCE, "refine_residual", R.dtype, R.device, fn=fn)
    group = [_metal.SIMD_WIDTH, min(RESIDUAL_ROWS, m), 1]
    threads = [_metal.ceil_div(k, residual_tile_cols(k)) * _metal.SIMD_WIDTH,
               _metal.ceil_div(m, group[1]) * group[1], nb]
    launch(kernel, Ap, Bp, Xp, R, state, _params(n, rows, cols, left, nb, step),
           threads=threads, group_size=group)
    return R


def solve_refined(A: torch.Tensor, B: torch.Tensor, *, left: bool = True,
                  fn: str = "solve") -> Refined:
    """A X = B (``left``) or X A = B for float64 / complex128 ``A`` (*, n, n) and ``B``
    (*, rows, cols), batches broadcast, by iterative refinement on float32 kernels (see the
    module docstring). ``info`` has A's batch shape. No device value is read on the host."""
    dtype = A.dtype
    compute = REFINED_DTYPES[dtype]
    n = A.shape[-1]
    batch = checks.broadcast_shapes(A.shape[:-2], B.shape[:-2])
    rows, cols = B.shape[-2:]
    work = work_device(A.device)

    Ap, shift_a = split(A, work, fn)
    LU, pivots, lu_info = lu_metal.lu_factor_metal(Ap[0], fn=fn)
    Bp, shift_b = split(B.expand(*batch, rows, cols), work, fn)
    nb = math.prod(batch)
    lead_ones = [1] * (len(batch) - (A.dim() - 2))  # A's batch padded to the broadcast one
    Ae = Ap.reshape(3, *lead_ones, *A.shape[:-2], n, n).expand(3, *batch, n, n).contiguous()
    X = torch.zeros((3, *batch, rows, cols), dtype=compute, device=work)
    state = torch.zeros((nb, STATE_INTS), dtype=torch.int32, device=work)
    berr = torch.zeros((nb, ERR_FLOATS), dtype=torch.float32, device=work)
    anorm = torch.zeros(nb, dtype=torch.float32, device=work)
    bnorm = torch.zeros(nb, dtype=torch.float32, device=work)
    if nb and n and rows * cols:
        lead = Ae[0].abs()
        anorm = (lead.sum(-1) if left else lead.sum(-2)).amax(-1).reshape(nb)
        bnorm = Bp[0].abs().reshape(nb, rows * cols).amax(-1)

    if nb and rows * cols and n:
        update = _metal.kernel(_SOURCE, "refine_update", compute, work, fn=fn)
        update_threads = min(UPDATE_THREADS,
                             _metal.ceil_div(rows * cols, _metal.SIMD_WIDTH) * _metal.SIMD_WIDTH)
        kind = correction_kind(n, cols if left else rows)
        if kind == "inverse":
            correct = _InverseCorrection(LU, pivots, batch, fn)
        else:
            # the LU's factors and pivots per broadcast batch element, once for every step
            LUe = contiguous(LU.expand(*batch, n, n), fn)
            pive = contiguous(pivots.expand(*batch, n), fn)
            gate = (state, STATE_INTS)  # status word per matrix: non-zero once it stopped

            def correct(R: torch.Tensor, left: bool) -> torch.Tensor:
                return triangular_metal.solve_packed(
                    LUe, pive, R, left=left, adjoint=False, steps=triangular_metal.LU_STEPS,
                    fn=fn, gate=gate, kind=kind)

        R = torch.zeros((*batch, rows, cols), dtype=compute, device=work)
        for step in range(MAX_STEPS):
            residual(Ae, Bp, X, state, R, left=left, step=step, fn=fn)
            D = correct(R, left)
            launch(update, R, D, X, state, berr, anorm, bnorm,
                   _params(n, rows, cols, left, nb, step),
                   threads=[update_threads, nb], group_size=[update_threads, 1])

    home = A.device
    pieces = X.to(home)
    X64 = pieces[0].to(dtype) + (pieces[1].to(dtype) + pieces[2].to(dtype))
    scale = (shift_b - shift_a.expand(batch)).to(home)
    X64 = torch.ldexp(X64, scale[..., None, None].to(X64.real.dtype))
    status = state[:, 0].reshape(batch)
    failed = _reduce_to(status == FAILED, A.shape[:-2]).to(home)
    lu_info = lu_info.to(home)
    info = torch.where(lu_info != 0, lu_info,
                       torch.where(failed, UNREFINED_INFO, 0).to(torch.int32))
    return Refined(X64, info, state[:, 1].reshape(batch).to(home),
                   berr[:, 0].reshape(batch).to(home))


# ---------------------------------------------------------------- the double-float self-test

#: refine_selftest's outputs: name -> (first index, length).
SELFTEST_OUTPUTS = {"two_sum": (0, 2), "fast_two_sum": (2, 2), "two_prod": (4, 2),
                    "df_add": (6, 2), "df_sub": (8, 2), "df_mul": (10, 2), "df_fma": (12, 2),
                    "df_div": (14, 2), "df_sqrt": (16, 2), "split3": (18, 3),
                    "three_float_sum": (21, 1)}
#: Relative error bounds of the double-float operations, in units of u^2 = 2^-48 (Joldes,
#: Muller & Popescu 2017; df_fma composed of df_mul and df_add; df_sqrt measured).
DF_BOUNDS = {"df_add": 3.0, "df_sub": 3.0, "df_mul": 5.0, "df_fma": 8.0, "df_div": 15.0,
             "df_sqrt": 4.0}
_U2 = 2.0 ** -48


class SelftestRow(NamedTuple):
    """One check of the self-test: what, the error found (in units of u^2 for the
    double-float operations, else absolute), the bound, and whether it held."""

    name: str
    error: float
    bound: float
    ok: bool


def _df(value: float) -> tuple[float, float]:
    hi = float(torch.tensor(value, dtype=torch.float32))
    return hi, float(torch.tensor(value - hi, dtype=torch.float32))


def selftest_inputs() -> tuple[list[float], dict[str, float]]:
    """The self-test's inputs and the exact (float64) values its outputs must match."""
    a, b = 1.0, 2.0 ** -30  # two_sum: s = 1, e = 2^-30 (a reassociating compiler gives 0)
    c = d = 1.0 + 2.0 ** -12  # two_prod: p = 1 + 2^-11, e = 2^-24
    x, y, z = math.pi, math.e, math.sqrt(2.0) / 3.0
    xs, ys, zs = _df(x), _df(y), _df(z)
    xv, yv, zv = xs[0] + xs[1], ys[0] + ys[1], zs[0] + zs[1]  # the double-floats' values
    w = -1.0 / 3.0 * 2.0 ** 40  # split: its 53 bits, scaled by 2^-40
    words = torch.tensor([w], dtype=torch.float64).view(torch.int32).tolist()
    word_floats = torch.tensor(words, dtype=torch.int32).view(torch.float32).tolist()
    inputs = [a, b, c, d, *xs, *ys, *zs, *word_floats, 40.0]
    exact = {"two_sum": a + b, "fast_two_sum": a + b, "two_prod": c * d,
             "df_add": xv + yv, "df_sub": xv - yv, "df_mul": xv * yv, "df_fma": xv * yv + zv,
             "df_div": xv / yv, "df_sqrt": math.sqrt(xv), "split3": w * 2.0 ** -40,
             "three_float_sum": b}
    return inputs, exact


def selftest(device: torch.device, kernel=None) -> list[SelftestRow]:
    """Run refine_selftest on ``device``'s executor (or ``kernel``, a compiled
    refine_selftest_float32) and judge it against float64: the error-free transformations
    must be exact (their error terms present: a fast-math build loses them), the double-float
    operations within their published bounds."""
    inputs, exact = selftest_inputs()
    work = work_device(device)
    src = torch.tensor(inputs, dtype=torch.float32, device=work)
    out = torch.full((32,), math.nan, dtype=torch.float32, device=work)
    if kernel is None:
        kernel = _metal.kernel(_SOURCE, "refine_selftest", torch.float32, work, fn="check")
    launch(kernel, src, out, threads=[1], group_size=[1])
    got = out.cpu().double().tolist()
    rows = []
    for name, (first, length) in SELFTEST_OUTPUTS.items():
        parts = got[first:first + length]
        if name in DF_BOUNDS:
            value = parts[0] + parts[1]
            error = abs(value - exact[name]) / abs(exact[name]) / _U2
            rows.append(SelftestRow(name, error, DF_BOUNDS[name], error <= DF_BOUNDS[name]))
        else:  # exact: the float64 sum of the parts (exact here) is the exact value
            error = abs(math.fsum(parts) - exact[name])
            ok = error == 0.0 and (length == 1 or parts[1] != 0.0)
            rows.append(SelftestRow(name, error, 0.0, ok))
    return rows


# ---------------------------------------------------------------- least squares

#: The augmented system's alpha is 2^-ALPHA_SHIFT times A's largest entry (to a power of
#: two): its condition number is then about max(2^ALPHA_SHIFT, cond(A)^2 / 2^ALPHA_SHIFT)
#: rather than cond(A)^2 (Bjorck 1967), so full-rank problems up to cond(A) ~ 1e5 refine.
ALPHA_SHIFT = 12


def lstsq_refined(A: torch.Tensor, B: torch.Tensor, *, fn: str = "lstsq"
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """LAPACK gels' problem for float64 / complex128 ``A`` (*, m, n) of full rank and ``B``
    (*, m, k) through the augmented system (Bjorck 1967, "Iterative refinement of linear least
    squares solutions I", BIT 7), refined like `solve_refined`: for m >= n
    [[alpha I, A], [A^H, 0]] [r / alpha; x] = [b; 0] (r = b - A x, the residual), for m < n
    [[alpha I, A^H], [A, 0]] [x; z] = [0; b] (x the minimum-norm solution). Returns (X, the
    residuals' squared column norms for m > n, else an empty tensor). A matrix whose
    refinement failed (rank-deficient, too ill-conditioned) raises `mpslinalg.LinAlgError`
    (torch's lstsq has no info): the one device read."""
    from .._core.errors import check_errors

    *_, m, n = A.shape
    k = B.shape[-1]
    batch = checks.broadcast_shapes(A.shape[:-2], B.shape[:-2])
    real = A.real.dtype if A.is_complex() else A.dtype
    tall = m >= n
    s = m + n
    exponent = torch.frexp(A.abs().amax((-2, -1)) if A.numel() else
                           A.new_zeros(A.shape[:-2], dtype=real))[1]
    alpha = torch.ldexp(torch.ones_like(exponent, dtype=real), exponent - ALPHA_SHIFT)
    K = A.new_zeros((*A.shape[:-2], s, s))
    lead = m if tall else n
    K[..., :lead, :lead].diagonal(dim1=-2, dim2=-1).copy_(
        alpha[..., None].expand(*A.shape[:-2], lead))
    if tall:
        K[..., :m, m:] = A
        K[..., m:, :m] = A.mH
    else:
        K[..., :n, n:] = A.mH
        K[..., n:, :n] = A
    rhs = A.new_zeros((*batch, s, k))
    if tall:
        rhs[..., :m, :] = B
    else:
        rhs[..., n:, :] = B
    res = solve_refined(K, rhs, fn=fn)
    check_errors(res.info, f"mpslinalg.{fn}")
    if not tall:
        return res.X[..., :n, :], A.new_empty(0, dtype=real)
    X = res.X[..., m:, :]
    if m == n:
        return X, A.new_empty(0, dtype=real)
    r = res.X[..., :m, :] * alpha[..., None, None].to(A.dtype)
    return X, r.abs().square().sum(-2)
