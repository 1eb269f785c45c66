"""The algorithm of the n <= 4 small path, written once for the code generators of
:mod:`mpslinalg.small.triton_kernels` (Triton) and :mod:`mpslinalg.small.cpu_simd` (C++ vector
extensions).

The loops below follow ``metal/linalg/small_inverse.h`` (LAPACK ``getf2`` + ``getrs``) one for
one: the same operations in the same order, so every target rounds like the Metal kernel. They
emit straight-line code with one variable per matrix entry (``a12`` is row 1, column 2;
``x0..x{n-1}`` a right-hand side; ``p{k}`` the pivot row of step k; ``info``), and every branch
on data is a select. The syntax is left to a :class:`Dialect`, one per target, which each
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
        """The int32 constant ``value`` as an operand of :meth:`select`."""

    @abc.abstractmethod
    def float_operand(self, value: float) -> str:
        """The float constant ``value`` as an operand of :meth:`select`."""

    @abc.abstractmethod
    def float_literal(self, value: float) -> str:
        """The float constant ``value`` as the right operand of a comparison with a vector."""

    #: The smallest normal number and the largest finite one of the target's real type (LAPACK
    #: safmin and overflow threshold); float32 unless a dialect says otherwise.
    safe_min: float = 1.1754943508222875e-38
    real_max: float = 3.4028234663852886e38

    def sqrt(self, x: str) -> str:
        """The correctly rounded square root of x, lane by lane (QR, SVD and eigh only)."""
        raise NotImplementedError(f"{type(self).__name__} has no sqrt")

    def signbit(self, x: str) -> str:
        """An INT condition: the sign bit of x is set (true for -0.0, as copysign reads it)."""
        raise NotImplementedError(f"{type(self).__name__} has no signbit")

    @abc.abstractmethod
    def mul_unit(self, s: str, d: str) -> str:
        """``s * unit(d)`` for a sign s (one of +-1, +-0), unit(d) = d > 0 ? 1 : -1 (a NaN
        counts as negative, like the Metal kernel)."""


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
    (from :func:`emit_perm_sign`) and the sum ``logabs`` = 0: logabs += log|u_kk|, s = 0 for a
    zero pivot, else s * unit(u_kk)."""
    for k in range(n):
        dl.add_log(logabs, dl.abs(f"a{k}{k}"))
        is_zero = f"a{k}{k} == {dl.float_literal(0.0)}"
        dl.assign(s, dl.select(is_zero, dl.float_operand(0.0), dl.mul_unit(s, f"a{k}{k}")))


# ------------------------------------------------------------------------------ Householder QR
#
# The operations of ``qr_small`` in metal/linalg/qr.h (LAPACK geqr2 with larfg's reflectors and
# nrm2's scaled sum of squares, then orgqr by backward accumulation), in the same order, every
# branch a select. Besides the methods above, the QR emitters use a dialect's :meth:`sqrt`,
# :meth:`signbit`, :attr:`safe_min` and :attr:`real_max`.


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
                with dl.scope():
                    dl.declare(FLOAT, "d", f"a{j}{c}")
                    for i in range(j + 1, m):
                        dl.assign("d", f"d + a{i}{j} * a{i}{c}")
                    dl.declare(FLOAT, "cd", f"tau{j} * d")
                    dl.assign(f"a{j}{c}", f"a{j}{c} - cd")
                    for i in range(j + 1, m):
                        dl.assign(f"a{i}{c}", f"a{i}{c} - a{i}{j} * cd")


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
    dl.declare(FLOAT, "big", dl.select("ax > az", "ax", "az"))
    dl.declare(FLOAT, "rx", dl.div("ax", "big"))
    dl.declare(FLOAT, "rz", dl.div("az", "big"))
    dl.declare(FLOAT, "lapy", dl.select(
        "(ax != ax) | (az != az)", "ax + az",
        dl.select(f"(big == {dl.float_literal(0.0)}) | (big > {dl.float_literal(dl.real_max)})",
                  "big", f"big * {dl.sqrt('rx * rx + rz * rz')}")))
    dl.declare(FLOAT, "nbeta", dl.select(dl.signbit("alpha"), "lapy", "-lapy"))
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
    H_0 ... H_{k-1}, accumulated backwards from the identity (orgqr as qr_small does it)."""
    for i in range(m):
        for c in range(cols):
            dl.declare(FLOAT, f"q{i}{c}", dl.full(FLOAT, 1.0 if i == c else 0.0))
    for j in range(min(m, n) - 1, -1, -1):
        for c in range(cols):
            with dl.scope():
                dl.declare(FLOAT, "d", f"q{j}{c}")
                for i in range(j + 1, m):
                    dl.assign("d", f"d + a{i}{j} * q{i}{c}")
                dl.declare(FLOAT, "td", f"tau{j} * d")
                dl.assign(f"q{j}{c}", f"q{j}{c} - td")
                for i in range(j + 1, m):
                    dl.assign(f"q{i}{c}", f"q{i}{c} - a{i}{j} * td")
