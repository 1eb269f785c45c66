"""The algorithm of the n <= 4 small path, written once for the code generators of
`mpslinalg.small.triton_kernels` (Triton) and `mpslinalg.small.cpu_simd` (C++ vector
extensions).

The loops below follow ``metal/linalg/small_inverse.h`` (LAPACK ``getf2`` + ``getrs``) one for
one: the same operations in the same order, so every target rounds like the Metal kernel. They
emit straight-line code with one variable per matrix entry (``a12`` is row 1, column 2;
``x0..x{n-1}`` a right-hand side; ``p{k}`` the pivot row of step k; ``info``), and every branch
on data is a select. The syntax is left to a `Dialect`, one per target, which each
target module defines next to its own load/store, block and launch code.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Iterator

#: Kind of a declared variable: "f" (a value of the matrix dtype) or "i" (an int32).
FLOAT, INT = "f", "i"

#: Largest n served by the small path (the Metal kernels are instantiated for n = 1..4, the
#: generated CPU and Triton kernels likewise).
MAX_N = 4

#: torch.linalg.qr's modes, numbered as the QR kernels' mode argument of every target
#: (metal/linalg/qr.h's kQrModeReduced / kQrModeComplete / kQrModeR).
QR_MODES = {"reduced": 0, "complete": 1, "r": 2}


class Dialect(abc.ABC):
    """How a target writes the statements and expressions of the generated code. A dialect
    writes its statements itself (to the target's writer); expression methods return source."""

    # ---------------------------------------------------------------------------- statements

    @abc.abstractmethod
    def declare(self, kind: str, name: str, expr: str) -> None:
        """A new variable ``name`` (of ``kind``, FLOAT or INT) = ``expr``."""

    @abc.abstractmethod
    def assign(self, name: str, expr: str) -> None:
        """``name`` = ``expr`` for a variable declared before."""

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """A scope for the temporaries declared inside (none in dialects without scopes)."""
        yield

    @abc.abstractmethod
    def add_log(self, acc: str, x: str) -> None:
        """``acc`` += log(``x``), lane by lane."""

    # ---------------------------------------------------------------------------- expressions

    @abc.abstractmethod
    def select(self, cond: str, a: str, b: str) -> str:
        """``cond ? a : b`` lane by lane."""

    @abc.abstractmethod
    def abs(self, x: str) -> str:
        """|x| lane by lane."""

    @abc.abstractmethod
    def div(self, a: str, b: str) -> str:
        """a / b, correctly rounded."""

    @abc.abstractmethod
    def full(self, kind: str, value: float) -> str:
        """A vector (of ``kind``) with every lane ``value``."""

    @abc.abstractmethod
    def int_operand(self, value: int) -> str:
        """The int32 constant ``value`` as an operand of `select`."""

    @abc.abstractmethod
    def float_operand(self, value: float) -> str:
        """The float constant ``value`` as an operand of `select`."""

    @abc.abstractmethod
    def float_literal(self, value: float) -> str:
        """The float constant ``value`` as the right operand of a comparison with a vector."""

    #: The smallest normal number of the target's real type (LAPACK safmin); float32 unless a
    #: dialect says otherwise.
    safe_min: float = 1.1754943508222875e-38
    #: Machine epsilon of the real type (the Jacobi methods' convergence threshold).
    eps: float = 1.1920928955078125e-07

    @abc.abstractmethod
    def sweeps(self, count: int, flag: str) -> contextlib.AbstractContextManager:
        """A loop of at most ``count`` sweeps around the statements written inside; ``flag`` (an
        INT declared per sweep, false) is or-ed by the body where a lane rotated: a target may
        leave the loop once it stays false for every lane (SVD and eigh only)."""

    @abc.abstractmethod
    def sqrt(self, x: str) -> str:
        """The correctly rounded square root of x, lane by lane (QR, SVD and eigh only)."""

    @abc.abstractmethod
    def signbit(self, x: str) -> str:
        """An INT condition: the sign bit of x is set (true for -0.0, as copysign reads it)."""

    @abc.abstractmethod
    def mul_unit(self, s: str, d: str) -> str:
        """``s * unit(d)`` for a sign s (one of +-1, +-0), unit(d) = d > 0 ? 1 : -1 (a NaN
        counts as negative, like the Metal kernel)."""


#: The ops whose kernels factor the transpose of the matrix they read: torch.linalg.det and
#: slogdet of a contiguous real matrix factor the memory as LAPACK's column-major A^T
#: (det(A^T) = det(A), no copy), so an Inf or NaN reaches U's diagonal as it does there.
TRANSPOSED_OPS = ("det", "slogdet")


def emit_transpose(dl: Dialect, n: int) -> None:
    """a{i}{j} <-> a{j}{i} (renamings the compiler removes)."""
    for i in range(n):
        for j in range(i + 1, n):
            with dl.scope():
                dl.declare(FLOAT, "up", f"a{i}{j}")
                dl.assign(f"a{i}{j}", f"a{j}{i}")
                dl.assign(f"a{j}{i}", "up")


def emit_factor(dl: Dialect, n: int) -> None:
    """getf2 (small_factor): LU with partial pivoting of a{i}{j} in place; p{k} = pivot row of
    step k (k < n - 1), info = first zero pivot (1-based, 0 = none)."""
    dl.declare(INT, "info", dl.full(INT, 0))
    for k in range(n):
        if k < n - 1:
            # Pivot search: strict '>' keeps the lowest row on ties and never selects a NaN.
            dl.declare(INT, f"p{k}", dl.full(INT, k))
            with dl.scope():
                dl.declare(FLOAT, "best", dl.abs(f"a{k}{k}"))
                for i in range(k + 1, n):
                    with dl.scope():
                        dl.declare(FLOAT, "v", dl.abs(f"a{i}{k}"))
                        dl.declare(INT, "gt", "v > best")
                        if i + 1 < n:
                            dl.assign("best", dl.select("gt", "v", "best"))
                        dl.assign(f"p{k}", dl.select("gt", dl.int_operand(i), f"p{k}"))
            # Interchange rows k and p of the whole row (L part included), by selects.
            for i in range(k + 1, n):
                with dl.scope():
                    dl.declare(INT, "sw", f"p{k} == {i}")
                    for j in range(n):
                        with dl.scope():
                            dl.declare(FLOAT, "up", f"a{k}{j}")
                            dl.assign(f"a{k}{j}", dl.select("sw", f"a{i}{j}", "up"))
                            dl.assign(f"a{i}{j}", dl.select("sw", "up", f"a{i}{j}"))
        # A zero pivot: the column below is zero too, no scaling; the first one is recorded.
        with dl.scope():
            dl.declare(INT, "zero", f"a{k}{k} == {dl.float_literal(0.0)}")
            dl.assign("info", dl.select("zero & (info == 0)", dl.int_operand(k + 1), "info"))
            for i in range(k + 1, n):
                dl.assign(f"a{i}{k}", dl.select("zero", f"a{i}{k}", dl.div(f"a{i}{k}", f"a{k}{k}")))
        for i in range(k + 1, n):
            for j in range(k + 1, n):
                dl.assign(f"a{i}{j}", f"a{i}{j} - a{i}{k} * a{k}{j}")


def emit_solve_vector(dl: Dialect, n: int) -> None:
    """getrs for one right-hand side x0..x{n-1} in place (small_solve_vector)."""
    for k in range(n - 1):
        for i in range(k + 1, n):
            with dl.scope():
                dl.declare(INT, "sw", f"p{k} == {i}")
                dl.declare(FLOAT, "up", f"x{k}")
                dl.assign(f"x{k}", dl.select("sw", f"x{i}", "up"))
                dl.assign(f"x{i}", dl.select("sw", "up", f"x{i}"))
    for k in range(n):
        for i in range(k + 1, n):
            dl.assign(f"x{i}", f"x{i} - a{i}{k} * x{k}")
    for k in range(n - 1, -1, -1):
        dl.assign(f"x{k}", dl.div(f"x{k}", f"a{k}{k}"))
        for i in range(k):
            dl.assign(f"x{i}", f"x{i} - a{i}{k} * x{k}")


def emit_inverse(dl: Dialect, n: int, store_column: Callable[[int], None]) -> None:
    """The inverse column by column: x0..x{n-1} = column j of the identity, solved, then
    ``store_column(j)`` (which writes the statements that keep x)."""
    for j in range(n):
        with dl.scope():
            for i in range(n):
                dl.declare(FLOAT, f"x{i}", dl.full(FLOAT, 1.0 if i == j else 0.0))
            emit_solve_vector(dl, n)
            store_column(j)


def emit_perm_sign(dl: Dialect, n: int) -> None:
    """sgn = (-1)^(number of row interchanges), in the matrix dtype (small_perm_sign)."""
    dl.declare(FLOAT, "sgn", dl.full(FLOAT, 1.0))
    for k in range(n - 1):
        dl.assign("sgn", dl.select(f"p{k} != {k}", "-sgn", "sgn"))


def emit_det(dl: Dialect, n: int) -> str:
    """d = product of U's diagonal, sgn = the permutation sign; returns the determinant's
    expression (d * sgn)."""
    dl.declare(FLOAT, "d", "a00")
    for k in range(1, n):
        dl.assign("d", f"d * a{k}{k}")
    emit_perm_sign(dl, n)
    return "d * sgn"


def emit_slogdet(dl: Dialect, n: int, s: str, logabs: str) -> None:
    """The loop of small_slogdet over U's diagonal, after the caller declared the sign ``s``
    (from `emit_perm_sign`) and the sum ``logabs`` = 0: logabs += log|u_kk|, s = 0 for a
    zero pivot, else s * unit(u_kk)."""
    for k in range(n):
        dl.add_log(logabs, dl.abs(f"a{k}{k}"))
        is_zero = f"a{k}{k} == {dl.float_literal(0.0)}"
        dl.assign(s, dl.select(is_zero, dl.float_operand(0.0), dl.mul_unit(s, f"a{k}{k}")))


# ------------------------------------------------------------------------------ Householder QR
#
# The operations of ``qr_small`` in metal/linalg/qr.h (LAPACK geqr2 with larfg's reflectors and
# nrm2's scaled sum of squares, then org2r by backward accumulation), in the same order, every
# branch a select. For finite input they round like the Metal kernel (signs of zero aside); where
# the input holds NaN or Inf they follow LAPACK as torch.linalg.qr on the CPU runs it (MKL's
# geqrf / orgqr, checked entry by entry against it for every single non-finite entry of every
# shape: tests/small/test_small_qr.py), so that the NaN pattern and the finite entries are
# torch's:
#
# - lapy2 (larfg's |(alpha, xnorm)|) as torch's LAPACK computes it (observed; Reference
#   LAPACK's dlapy2 before 3.10, without its NaN tests): w = max, z = min of |alpha| and xnorm,
#   each taking xnorm where alpha is NaN (w = z = xnorm: R's diagonal entry stays finite),
#   w where z = 0, else w sqrt(1 + (z / w)^2) (NaN for two infinities);
# - beta's sign: -sign(alpha) reads a NaN alpha as negative (beta > 0);
# - org2r applies H_j to the columns after j only, and only to rows up to the last nonzero
#   entry of v and columns up to the last one with a nonzero entry in those rows, nothing when
#   tau = 0 (Reference LAPACK's larf scan, ila?lr / ila?lc); column j is then
#   (1 - tau, -tau v) (a NaN tau leaves the zeros a non-finite entry of A would otherwise reach
#   through 0 * NaN).
# Besides the methods above, the QR emitters use a dialect's `sqrt`, `signbit` and `safe_min`.


def emit_qr_factor(dl: Dialect, m: int, n: int) -> None:
    """geqr2 of a{i}{j} (m x n) in place: R on and above the diagonal, the reflectors' tails
    below it, tau{j} (j < min(m, n)) their scalars. beta = -sign(alpha) |(alpha, x)| (the sign
    bit of alpha, as copysign), H = I (tau = 0) when the tail x is exactly zero."""
    for j in range(min(m, n)):
        _emit_tail_norm(dl, m, j)
        dl.declare(FLOAT, f"tau{j}", dl.full(FLOAT, 0.0))
        with dl.scope():
            _emit_larfg(dl, m, j)
            for c in range(j + 1, n):
                _emit_apply_reflector(dl, m, j, "a", c)


def _emit_apply_reflector(dl: Dialect, m: int, j: int, target: str, c: int,
                          extent: tuple[dict[int, str], str] | None = None) -> None:
    """H_j = I - tau_j v v^T, v = (1, a[j+1:m, j]), applied to column c of ``target`` (``a`` in
    geqr2, ``q`` in org2r): target[j:m, c] -= tau_j v (v^T target[j:m, c]), as larf does.
    ``extent`` (org2r): the INT conditions of `_emit_reflector_extent`, (row i -> row i is
    within larf's scan, whether column c is): entries outside stay as they are."""
    rows, column = extent if extent is not None else ({}, None)

    def within(i: int) -> str | None:
        conds = [x for x in (rows.get(i), column) if x is not None]
        return " & ".join(conds) if conds else None

    with dl.scope():
        dl.declare(FLOAT, "d", f"{target}{j}{c}")
        for i in range(j + 1, m):
            term = f"a{i}{j} * {target}{i}{c}"
            if i in rows:  # past v's last nonzero: v_i = 0, and 0 * NaN must not reach d
                term = dl.select(rows[i], term, dl.float_operand(0.0))
            dl.assign("d", f"d + ({term})")
        dl.declare(FLOAT, "td", f"tau{j} * d")
        for i, update in [(j, f"{target}{j}{c} - td")] + [
                (i, f"{target}{i}{c} - a{i}{j} * td") for i in range(j + 1, m)]:
            cond = within(i)
            dl.assign(f"{target}{i}{c}",
                      update if cond is None else dl.select(cond, update, f"{target}{i}{c}"))


def _emit_tail_norm(dl: Dialect, m: int, j: int) -> None:
    """xnorm{j} = |a[j+1:m, j]| by LAPACK's classic scaled sum of squares (qr_ssq_add): no
    square that could overflow or underflow; NaN when the tail holds a NaN."""
    dl.declare(FLOAT, f"xnorm{j}", dl.full(FLOAT, 0.0))
    with dl.scope():
        dl.declare(FLOAT, "scale", dl.full(FLOAT, 0.0))
        dl.declare(FLOAT, "ssq", dl.full(FLOAT, 1.0))
        for i in range(j + 1, m):
            with dl.scope():
                dl.declare(FLOAT, "ax", dl.abs(f"a{i}{j}"))
                # x != 0 is also true for a NaN, which then reaches ssq through r2.
                dl.declare(INT, "nz", f"a{i}{j} != {dl.float_literal(0.0)}")
                dl.declare(INT, "grow", "scale < ax")
                dl.declare(FLOAT, "r1", dl.div("scale", "ax"))
                dl.declare(FLOAT, "r2", dl.div("ax", "scale"))
                grown = f"{dl.float_literal(1.0)} + ssq * r1 * r1"
                dl.assign("ssq", dl.select("nz", dl.select("grow", grown, "ssq + r2 * r2"), "ssq"))
                dl.assign("scale", dl.select("nz & grow", "ax", "scale"))
        dl.assign(f"xnorm{j}", dl.select(
            f"scale == {dl.float_literal(0.0)}",
            dl.select("ssq != ssq", "ssq", dl.float_operand(0.0)),
            f"scale * {dl.sqrt('ssq')}"))


def _emit_larfg(dl: Dialect, m: int, j: int) -> None:
    """The reflector of column j (qr_larfg with qr_lapy3(alpha, 0, xnorm)): beta into a{j}{j},
    tau{j}, the tail divided by alpha - beta (by its reciprocal unless that is below safmin)."""
    dl.declare(INT, "ident", f"xnorm{j} == {dl.float_literal(0.0)}")
    dl.declare(FLOAT, "alpha", f"a{j}{j}")
    dl.declare(FLOAT, "ax", dl.abs("alpha"))
    dl.declare(FLOAT, "az", dl.abs(f"xnorm{j}"))
    # max and min that take xnorm where alpha is NaN (a finite beta, as LAPACK's dlapy2 gives)
    dl.declare(FLOAT, "big", dl.select("ax > az", "ax", "az"))
    dl.declare(FLOAT, "small", dl.select("ax < az", "ax", "az"))
    dl.declare(FLOAT, "ratio", dl.div("small", "big"))
    dl.declare(FLOAT, "lapy", dl.select(
        f"small == {dl.float_literal(0.0)}", "big",
        f"big * {dl.sqrt(f'{dl.float_literal(1.0)} + ratio * ratio')}"))
    dl.declare(FLOAT, "nbeta", dl.select(f"{dl.signbit('alpha')} | (alpha != alpha)",
                                         "lapy", "-lapy"))
    dl.assign(f"tau{j}", dl.select("ident", dl.float_operand(0.0),
                                   dl.div("(nbeta - alpha)", "nbeta")))
    dl.declare(FLOAT, "denom", dl.select("ident", dl.float_operand(1.0), "alpha - nbeta"))
    dl.declare(FLOAT, "rden", dl.div(dl.full(FLOAT, 1.0), "denom"))
    dl.declare(INT, "recip", f"{dl.abs('denom')} >= {dl.float_literal(dl.safe_min)}")
    for i in range(j + 1, m):
        dl.assign(f"a{i}{j}", dl.select("ident", f"a{i}{j}", dl.select(
            "recip", f"a{i}{j} * rden", dl.div(f"a{i}{j}", "denom"))))
    dl.assign(f"a{j}{j}", dl.select("ident", "alpha", "nbeta"))


def emit_qr_q(dl: Dialect, m: int, n: int, cols: int) -> None:
    """q{i}{c} (m x cols, cols = min(m, n) or m) = the first cols columns of
    H_0 ... H_{k-1}, accumulated backwards from the identity as org2r does: H_j applied to
    the columns after j within larf's scan (`_emit_reflector_extent`), then column j set to
    (1 - tau_j, -tau_j v) below the zeros above it."""
    for i in range(m):
        for c in range(cols):
            dl.declare(FLOAT, f"q{i}{c}", dl.full(FLOAT, 1.0 if i == c else 0.0))
    for j in range(min(m, n) - 1, -1, -1):
        if j + 1 < cols:
            with dl.scope():
                rows = _emit_reflector_extent(dl, m, j, cols)
                for c in range(j + 1, cols):
                    _emit_apply_reflector(dl, m, j, "q", c, (rows, f"col{c}"))
        dl.assign(f"q{j}{j}", f"{dl.float_literal(1.0)} - tau{j}")
        for i in range(j + 1, m):
            dl.assign(f"q{i}{j}", f"-tau{j} * a{i}{j}")


def _emit_reflector_extent(dl: Dialect, m: int, j: int, cols: int) -> dict[int, str]:
    """What larf touches of q[j:m, j+1:cols] for H_j (LAPACK's scan for the last nonzero
    entry of v, then for the last column with a nonzero entry in those rows, a NaN counting as
    nonzero; nothing when tau = 0): declares INT row{i} (i > j, row i within) and col{c}
    (column c within, tau != 0 included); returns {i: "row{i}"}."""
    for i in range(m - 1, j, -1):
        nonzero = f"a{i}{j} != {dl.float_literal(0.0)}"
        dl.declare(INT, f"row{i}", nonzero if i == m - 1 else f"row{i + 1} | ({nonzero})")
    dl.declare(INT, "tauz", f"tau{j} != {dl.float_literal(0.0)}")
    for c in range(cols - 1, j, -1):
        nonzero = " | ".join([f"(q{j}{c} != {dl.float_literal(0.0)})"] + [
            f"(row{i} & (q{i}{c} != {dl.float_literal(0.0)}))" for i in range(j + 1, m)])
        dl.declare(INT, f"col{c}", f"tauz & ({nonzero})" if c == cols - 1
                   else f"col{c + 1} | (tauz & ({nonzero}))")
    return {i: f"row{i}" for i in range(j + 1, m)}


# ------------------------------------------------------------------------------ Jacobi: SVD, eigh
#
# One-sided Jacobi (Hestenes) for the SVD: the columns of the working matrix are rotated in
# pairs until every pair is orthogonal to working precision (|x_p . x_q| <= eps |x_p| |x_q|),
# never forming A^T A, so small singular values keep their relative accuracy; then sigma_j =
# |x_j|, u_j = x_j / sigma_j, V the product of the rotations. The two-sided cyclic Jacobi method
# for symmetric eigenproblems rotates rows and columns until |a_pq| <= eps sqrt(|a_pp a_qq|).
# Both use Rutishauser's rotation (Golub & Van Loan, "Matrix Computations", 4th ed., Alg. 8.5.1;
# the convention of metal/common/jacobi.h: J = [[c, s], [-s, c]], [x, y] <- [c x - s y,
# s x + c y], |t| <= 1). The matrix is first divided by its largest |entry| (so squared norms
# neither overflow nor underflow for entries near the ends of the exponent range; sigma and
# lambda are scaled back), sweeps are bounded (`JACOBI_MAX_SWEEPS`, the CPU code leaves the
# loop early once no lane of a block rotated in a sweep; Triton lanes that converged rotate by
# the identity), and a matrix with a non-finite entry is replaced by zeros for the sweeps and
# gets NaN in every output. A dialect supplies `Dialect.sweeps` besides the QR methods.

#: Sweeps at most: cyclic Jacobi converges quadratically, n <= 4 needs 4-7 sweeps in float64.
JACOBI_MAX_SWEEPS = 12

#: Above this |zeta| the tangent 1 / (|zeta| + sqrt(1 + zeta^2)) is 1 / (2 zeta) to rounding
#: (and 1 + zeta^2 could overflow): metal/common/jacobi.h's kJacobiTauHuge.
_ZETA_HUGE = 1.0e18


def _pairs(n: int) -> list[tuple[int, int]]:
    """Cyclic-by-rows order of the pairs (p, q), p < q."""
    return [(p, q) for p in range(n) for q in range(p + 1, n)]


def _emit_sanitize_and_scale(dl: Dialect, names: list[str]) -> None:
    """bad = some entry is not finite; entries <- 0 where bad; amax = max |entry|; entries /=
    amax (unless 0)."""
    dl.declare(INT, "bad", " | ".join(f"(({x} - {x}) != {dl.float_literal(0.0)})"
                                      for x in names))
    dl.declare(FLOAT, "zerov", dl.full(FLOAT, 0.0))
    dl.declare(FLOAT, "nanv", dl.div("zerov", "zerov"))
    dl.declare(FLOAT, "amax", dl.full(FLOAT, 0.0))
    for x in names:
        dl.assign(x, dl.select("bad", "zerov", x))
        with dl.scope():
            dl.declare(FLOAT, "ax", dl.abs(x))
            dl.assign("amax", dl.select("ax > amax", "ax", "amax"))
    dl.declare(FLOAT, "amaxs", dl.select(f"amax == {dl.float_literal(0.0)}",
                                         dl.float_operand(1.0), "amax"))
    for x in names:
        dl.assign(x, dl.div(x, "amaxs"))


def _emit_tangent(dl: Dialect, num: str, den: str) -> None:
    """zeta = num / den, t = sign(zeta) / (|zeta| + sqrt(1 + zeta^2)) (|t| <= 1), c, s."""
    dl.declare(FLOAT, "zeta", dl.div(num, den))
    dl.declare(FLOAT, "az", dl.abs("zeta"))
    dl.declare(FLOAT, "sg", dl.select(f"zeta < {dl.float_literal(0.0)}",
                                      dl.float_operand(-1.0), dl.float_operand(1.0)))
    dl.declare(FLOAT, "t", dl.select(
        f"az > {dl.float_literal(_ZETA_HUGE)}",
        dl.div(dl.full(FLOAT, 0.5), "zeta"),
        dl.div("sg", f"(az + {dl.sqrt(f'{dl.float_literal(1.0)} + zeta * zeta')})")))
    dl.declare(FLOAT, "c", dl.div(dl.full(FLOAT, 1.0),
                                  dl.sqrt(f"{dl.float_literal(1.0)} + t * t")))
    dl.declare(FLOAT, "s", "c * t")


def _emit_rotate(dl: Dialect, x: str, y: str) -> None:
    """[x, y] <- [c x - s y, s x + c y]."""
    with dl.scope():
        dl.declare(FLOAT, "xr", x)
        dl.assign(x, f"c * xr - s * {y}")
        dl.assign(y, f"s * xr + c * {y}")


def _emit_swap(dl: Dialect, cond: str, x: str, y: str) -> None:
    with dl.scope():
        dl.declare(FLOAT, "xs", x)
        dl.assign(x, dl.select(cond, y, "xs"))
        dl.assign(y, dl.select(cond, "xs", y))


#: Compare-exchange networks sorting n <= 4 keys.
_SORT_NETWORK = {1: [], 2: [(0, 1)], 3: [(0, 1), (1, 2), (0, 1)],
                 4: [(0, 1), (2, 3), (0, 2), (1, 3), (1, 2)]}


def emit_svd_any_shape(dl: Dialect, m: int, n: int, variant: str) -> list:
    """The SVD of a{i}{j} (m x n): `emit_svd` of A when m >= n, of A^T otherwise (A^T = U' S V'^T
    gives U = V', Vh = U'^T). ``variant``: "vals", "reduced" or "full". Returns the outputs to
    store as (name, rows, cols, value of entry (i, j)): S, then U and VH but for "vals"."""
    wide = m < n
    big, small = max(m, n), min(m, n)
    for i in range(big):
        for j in range(small):
            dl.declare(FLOAT, f"x{i}{j}", f"a{j}{i}" if wide else f"a{i}{j}")
    want_uv = variant != "vals"
    ucols = big if variant == "full" else small
    emit_svd(dl, big, small, want_uv, ucols)
    outputs = [("S", 1, small, lambda i, j: f"s{j}")]
    if want_uv and not wide:  # U = u (m x ucols), Vh = v^T (n x n)
        outputs += [("U", m, ucols, lambda i, j: f"u{i}{j}"), ("VH", n, n, lambda i, j: f"v{j}{i}")]
    elif want_uv:  # U = v (m x m), Vh = u^T (ucols x n)
        outputs += [("U", m, m, lambda i, j: f"v{i}{j}"), ("VH", ucols, n, lambda i, j: f"u{j}{i}")]
    return outputs


def emit_svd(dl: Dialect, m: int, n: int, want_uv: bool, ucols: int) -> None:
    """One-sided Jacobi SVD of x{i}{j} (m x n, m >= n): s{j} (descending, NaN for a non-finite
    input), and with ``want_uv`` u{i}{j} (m x ucols, ucols = n or m; orthonormalised column
    by column in the order of S, a column mostly inside the span of those before it, such as
    that of a zero singular value, and those past n completed to an orthonormal basis: see
    `_emit_orthonormal_column`) and v{i}{j} (n x n)."""
    names = [f"x{i}{j}" for i in range(m) for j in range(n)]
    _emit_sanitize_and_scale(dl, names)
    eps = dl.eps
    if want_uv:
        for i in range(n):
            for j in range(n):
                dl.declare(FLOAT, f"v{i}{j}", dl.full(FLOAT, 1.0 if i == j else 0.0))
    with dl.sweeps(JACOBI_MAX_SWEEPS, "rotated"):
        for p, q in _pairs(n):
            with dl.scope():
                # The Gram entries of the columns each divided by its largest |entry| (a zero
                # column by 1): no square underflows however far apart the column norms are,
                # and the test |gamma| <= eps sqrt(alpha beta) is scale-invariant.
                for c, name in ((p, "cp"), (q, "cq")):
                    dl.declare(FLOAT, name, dl.full(FLOAT, 0.0))
                    for i in range(m):
                        with dl.scope():
                            dl.declare(FLOAT, "ax", dl.abs(f"x{i}{c}"))
                            dl.assign(name, dl.select(f"ax > {name}", "ax", name))
                dl.declare(INT, "nonzero", f"(cp > {dl.float_literal(0.0)}) & "
                           f"(cq > {dl.float_literal(0.0)})")
                dl.assign("cp", dl.select("nonzero", "cp", dl.float_operand(1.0)))
                dl.assign("cq", dl.select("nonzero", "cq", dl.float_operand(1.0)))
                for i in range(m):
                    dl.declare(FLOAT, f"g{i}", dl.div(f"x{i}{p}", "cp"))
                    dl.declare(FLOAT, f"h{i}", dl.div(f"x{i}{q}", "cq"))
                for name, (a, b) in (("alpha", "gg"), ("beta", "hh"), ("gamma", "gh")):
                    dl.declare(FLOAT, name, " + ".join(f"{a}{i} * {b}{i}" for i in range(m)))
                dl.declare(INT, "rot", f"nonzero & ({dl.abs('gamma')} > {dl.float_literal(eps)} * "
                           f"{dl.sqrt('alpha')} * {dl.sqrt('beta')})")
                # zeta = (|x_q|^2 - |x_p|^2) / (2 x_p . x_q), numerator and denominator divided
                # by cp cq.
                _emit_tangent(dl, f"({dl.div('cq', 'cp')} * beta - {dl.div('cp', 'cq')} * alpha)",
                              f"({dl.float_literal(2.0)} * gamma)")
                # A tangent of zero (cp / cq overflows: the rounding residue of a rank-deficient
                # matrix, which the sweeps shrink to subnormal sizes but never make orthogonal)
                # rotates by the identity: not counted, so that such a lane leaves the loop.
                dl.assign("rot", f"rot & (t != {dl.float_literal(0.0)})")
                dl.assign("rotated", "rotated | rot")
                dl.assign("c", dl.select("rot", "c", dl.float_operand(1.0)))
                dl.assign("s", dl.select("rot", "s", dl.float_operand(0.0)))
                for i in range(m):
                    _emit_rotate(dl, f"x{i}{p}", f"x{i}{q}")
                if want_uv:
                    for i in range(n):
                        _emit_rotate(dl, f"v{i}{p}", f"v{i}{q}")
    for j in range(n):
        # sigma_j = |x_j| and u_j = x_j / sigma_j through x_j / max|x_ij|: squares of a column
        # far below the largest (sigma_j / sigma_1 < 1e-19 in float32) would be subnormal, and
        # u_j's norm off by far more than eps.
        dl.declare(FLOAT, f"cmax{j}", dl.full(FLOAT, 0.0))
        for i in range(m):
            with dl.scope():
                dl.declare(FLOAT, "ax", dl.abs(f"x{i}{j}"))
                dl.assign(f"cmax{j}", dl.select(f"ax > cmax{j}", "ax", f"cmax{j}"))
        dl.declare(FLOAT, f"cden{j}", dl.select(f"cmax{j} == {dl.float_literal(0.0)}",
                                                dl.float_operand(1.0), f"cmax{j}"))
        for i in range(m):
            dl.declare(FLOAT, f"y{i}{j}", dl.div(f"x{i}{j}", f"cden{j}"))
        dl.declare(FLOAT, f"nrm{j}", dl.sqrt(" + ".join(f"y{i}{j} * y{i}{j}" for i in range(m))))
        dl.declare(FLOAT, f"s{j}", f"cmax{j} * nrm{j}")
        if want_uv:
            # nrm >= 1 unless the column is zero (then u_j is completed below).
            dl.declare(FLOAT, f"den{j}", dl.select(f"nrm{j} > {dl.float_literal(0.0)}",
                                                   f"nrm{j}", dl.float_operand(1.0)))
            for i in range(m):
                dl.declare(FLOAT, f"u{i}{j}", dl.div(f"y{i}{j}", f"den{j}"))
    for a, b in _SORT_NETWORK[n]:  # descending
        with dl.scope():
            dl.declare(INT, "sw", f"s{a} < s{b}")
            _emit_swap(dl, "sw", f"s{a}", f"s{b}")
            if want_uv:
                for i in range(m):
                    _emit_swap(dl, "sw", f"u{i}{a}", f"u{i}{b}")
                for i in range(n):
                    _emit_swap(dl, "sw", f"v{i}{a}", f"v{i}{b}")
    if want_uv:
        for j in range(ucols):
            if j >= n:
                for i in range(m):
                    dl.declare(FLOAT, f"u{i}{j}", "zerov")
            with dl.scope():
                _emit_orthonormal_column(dl, m, j, own=j < n)
    for j in range(n):
        dl.assign(f"s{j}", dl.select("bad", "nanv", f"s{j} * amax"))
    if want_uv:
        for i in range(m):
            for j in range(ucols):
                dl.assign(f"u{i}{j}", dl.select("bad", "nanv", f"u{i}{j}"))
        for i in range(n):
            for j in range(n):
                dl.assign(f"v{i}{j}", dl.select("bad", "nanv", f"v{i}{j}"))


def _emit_orthonormal_column(dl: Dialect, m: int, j: int, own: bool) -> None:
    """u{.}{j} <- a unit vector orthogonal to u{.}{0..j-1} (orthonormal): u_j itself (when
    ``own``) less its components along them, unless that leaves less than half of it, else
    the basis vector e_k with the largest component outside their span (at least
    sqrt((m - j) / m) >= 1/2); then projected out twice (for orthogonality to working
    precision) and normalised.

    u_j = x_j / |x_j| is orthogonal to the columns before it only once the sweeps converged
    for its pairs. For rank-deficient input they never do: the column of a zero singular value
    holds the rounding residue of the rotations, which lies in the span of the other columns
    (a zero row of A keeps every column in a subspace) and only shrinks from sweep to sweep,
    down to subnormal sizes; normalised, it is parallel to another column. The same holds of a
    column whose entries are subnormal after the scaling (rows graded 1e-20 .. 1e20 in
    float32). Such a column, and a zero one, is mostly inside the span and takes e_k instead;
    a converged column moves by O(eps)."""
    prior = range(j)
    for k in range(m):
        for r in range(m):
            terms = [f"u{k}{i} * u{r}{i}" for i in prior]
            base = dl.float_literal(1.0 if r == k else 0.0)
            dl.declare(FLOAT, f"w{k}{r}", f"{base} - ({' + '.join(terms)})" if terms
                       else dl.full(FLOAT, 1.0 if r == k else 0.0))
        dl.declare(FLOAT, f"nu{k}", " + ".join(f"w{k}{r} * w{k}{r}" for r in range(m)))
    dl.declare(FLOAT, "best", "nu0")
    for r in range(m):
        dl.declare(FLOAT, f"y{r}", f"w0{r}")
    for k in range(1, m):
        with dl.scope():
            dl.declare(INT, "gt", f"nu{k} > best")
            dl.assign("best", dl.select("gt", f"nu{k}", "best"))
            for r in range(m):
                dl.assign(f"y{r}", dl.select("gt", f"w{k}{r}", f"y{r}"))
    if own:
        with dl.scope():
            for i in prior:
                dl.declare(FLOAT, f"d{i}", " + ".join(f"u{r}{i} * u{r}{j}" for r in range(m)))
            for r in range(m):
                terms = [f"u{r}{i} * d{i}" for i in prior]
                dl.declare(FLOAT, f"z{r}", f"u{r}{j} - ({' + '.join(terms)})" if terms
                           else f"u{r}{j}")
            # |z|^2 > 1/4: more than half of the unit vector u_j lies outside the span.
            dl.declare(INT, "keep", " + ".join(f"z{r} * z{r}" for r in range(m))
                       + f" > {dl.float_literal(0.25)}")
            for r in range(m):
                dl.assign(f"y{r}", dl.select("keep", f"z{r}", f"y{r}"))
    for _ in range(2):
        for i in prior:
            with dl.scope():
                dl.declare(FLOAT, "dot", " + ".join(f"u{r}{i} * y{r}" for r in range(m)))
                for r in range(m):
                    dl.assign(f"y{r}", f"y{r} - dot * u{r}{i}")
        with dl.scope():
            dl.declare(FLOAT, "nrm", dl.sqrt(" + ".join(f"y{r} * y{r}" for r in range(m))))
            for r in range(m):
                dl.assign(f"y{r}", dl.div(f"y{r}", "nrm"))
    for r in range(m):
        dl.assign(f"u{r}{j}", f"y{r}")


def emit_eigh(dl: Dialect, n: int, want_v: bool) -> None:
    """Cyclic Jacobi on the symmetric h{i}{j} (i <= j, the triangle the caller loaded): l{j}
    ascending (NaN for a non-finite input) and with ``want_v`` the eigenvectors v{i}{j}
    (columns), permuted alike."""
    names = [f"h{i}{j}" for i in range(n) for j in range(i, n)]
    _emit_sanitize_and_scale(dl, names)
    eps = dl.eps

    def h(i: int, j: int) -> str:
        return f"h{min(i, j)}{max(i, j)}"

    if want_v:
        for i in range(n):
            for j in range(n):
                dl.declare(FLOAT, f"v{i}{j}", dl.full(FLOAT, 1.0 if i == j else 0.0))
    with dl.sweeps(JACOBI_MAX_SWEEPS, "rotated"):
        for p, q in _pairs(n):
            with dl.scope():
                dl.declare(FLOAT, "apq", h(p, q))
                dl.declare(INT, "rot", f"({dl.abs('apq')} > {dl.float_literal(eps)} * "
                           f"{dl.sqrt(dl.abs(h(p, p)))} * {dl.sqrt(dl.abs(h(q, q)))}) & "
                           f"({dl.abs('apq')} > {dl.float_literal(dl.safe_min)})")
                dl.assign("rotated", "rotated | rot")
                _emit_tangent(dl, f"({h(q, q)} - {h(p, p)})", f"({dl.float_literal(2.0)} * apq)")
                dl.assign("c", dl.select("rot", "c", dl.float_operand(1.0)))
                dl.assign("s", dl.select("rot", "s", dl.float_operand(0.0)))
                dl.assign("t", dl.select("rot", "t", dl.float_operand(0.0)))
                dl.assign(h(p, p), f"{h(p, p)} - t * apq")
                dl.assign(h(q, q), f"{h(q, q)} + t * apq")
                dl.assign(h(p, q), dl.select("rot", "zerov", "apq"))
                for r in range(n):
                    if r not in (p, q):
                        _emit_rotate(dl, h(r, p), h(r, q))
                if want_v:
                    for i in range(n):
                        _emit_rotate(dl, f"v{i}{p}", f"v{i}{q}")
    for j in range(n):
        dl.declare(FLOAT, f"l{j}", h(j, j))
    for a, b in _SORT_NETWORK[n]:  # ascending
        with dl.scope():
            dl.declare(INT, "sw", f"l{a} > l{b}")
            _emit_swap(dl, "sw", f"l{a}", f"l{b}")
            if want_v:
                for i in range(n):
                    _emit_swap(dl, "sw", f"v{i}{a}", f"v{i}{b}")
    for j in range(n):
        dl.assign(f"l{j}", dl.select("bad", "nanv", f"l{j} * amax"))
    if want_v:
        for i in range(n):
            for j in range(n):
                dl.assign(f"v{i}{j}", dl.select("bad", "nanv", f"v{i}{j}"))
