"""The algorithms of the n <= 4 small path, written once for three code generators:
`mpslinalg.small.cpu_simd` (C++ vector extensions), `mpslinalg.small.triton_kernels` (Triton)
and `mpslinalg.small.metal_kernels` (Metal, one thread per matrix: the checked-in kernels of
``metal/linalg/small_inverse.h``, ``qr_small.h``, ``svd_small.h``, ``eigh_small.h``,
``small_matrix_exp.h``, ``small_cholesky.h`` and ``small_eig.h``).

The descriptions emit straight-line code with one variable per matrix entry (``a12`` is row 1,
column 2; ``x0..x{n-1}`` a right-hand side; ``p{k}`` the pivot row of step k; ``info``), and
every branch on data is a select. They build expressions (`Expr`: variables, constants,
arithmetic through Python's operators, comparisons, logical and / or / not, `select`, `abs_`,
`abs1`, `modulus`, `sqrt`, ...) and hand them to a `Dialect`, one per target, which renders them
(operator precedence, literals, the target's functions) and writes the statements; each target
module defines its dialect next to its own load/store, block and launch code.

Values have a kind: `FLOAT` (the matrix dtype: float2 in Metal's complex64), `REAL` (a real
number of that precision, such as a pivot's magnitude), `INT` (an int32) and `BOOL` (a
condition); the C++ and Triton dialects only tell vectors of floats from vectors of ints.

Examples
--------
>>> from mpslinalg.small import codegen as cg
>>> a, b = cg.Var("a"), cg.Var("b")
>>> cg.render_c(cg.select(a > 0.0, a - b * 2.0, -(a + b)))
'(a > 0.0) ? a - b * 2.0 : -(a + b)'
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Iterator

#: Kinds of values: the matrix dtype, a real number of its precision, an int32, a condition.
FLOAT, REAL, INT, BOOL = "f", "r", "i", "b"

#: Largest n served by the small path (the Metal kernels are generated for n = 1..4, the
#: CPU and Triton kernels likewise).
MAX_N = 4

#: torch.linalg.qr's modes, numbered as the QR kernels' mode argument of every target
#: (metal/linalg/qr.h's kQrModeReduced / kQrModeComplete / kQrModeR).
QR_MODES = {"reduced": 0, "complete": 1, "r": 2}

# ------------------------------------------------------------------------------ expressions
#
# Precedence levels of the rendered text (C's order, which Python shares for everything used
# here but '&' / '|' against comparisons: those operands are always parenthesised, so the text
# means the same in both languages).
ATOM, UNARY, MUL, ADD, CMP, AND, OR, SELECT = 100, 90, 80, 70, 60, 50, 40, 10
_PRECEDENCE = {"*": MUL, "+": ADD, "-": ADD, "<": CMP, "<=": CMP, ">": CMP, ">=": CMP,
               "==": CMP, "!=": CMP, "&": AND, "|": OR}


class Expr:
    """A node of an expression. Arithmetic and comparisons through Python's operators
    (``==`` / ``!=`` as `eq` / `ne`: the nodes stay hashable), ``&`` / ``|`` / ``~`` for the
    logical and / or / not of conditions; Python numbers become constants of the other
    operand's kind."""

    __slots__ = ("kind",)
    kind: str

    def _binary(self, op: str, other: object, reflected: bool = False) -> Expr:
        other = constant(other, self.kind)
        a, b = (other, self) if reflected else (self, other)
        if op == "/":
            return Div(a, b)
        return Binary(op, a, b)

    def __add__(self, o: object) -> Expr: return self._binary("+", o)
    def __radd__(self, o: object) -> Expr: return self._binary("+", o, True)
    def __sub__(self, o: object) -> Expr: return self._binary("-", o)
    def __rsub__(self, o: object) -> Expr: return self._binary("-", o, True)
    def __mul__(self, o: object) -> Expr: return self._binary("*", o)
    def __rmul__(self, o: object) -> Expr: return self._binary("*", o, True)
    def __truediv__(self, o: object) -> Expr: return self._binary("/", o)
    def __rtruediv__(self, o: object) -> Expr: return self._binary("/", o, True)
    def __lt__(self, o: object) -> Expr: return self._binary("<", o)
    def __le__(self, o: object) -> Expr: return self._binary("<=", o)
    def __gt__(self, o: object) -> Expr: return self._binary(">", o)
    def __ge__(self, o: object) -> Expr: return self._binary(">=", o)
    def __and__(self, o: object) -> Expr: return self._binary("&", o)
    def __or__(self, o: object) -> Expr: return self._binary("|", o)
    def __neg__(self) -> Expr: return Neg(self)
    def __invert__(self) -> Expr: return Not(self)

    def eq(self, o: object) -> Expr:
        """``self == o``."""
        return self._binary("==", o)

    def ne(self, o: object) -> Expr:
        """``self != o``."""
        return self._binary("!=", o)


class Var(Expr):
    """A variable (declared by `Dialect.declare` or by the target's own code)."""

    __slots__ = ("name",)

    def __init__(self, name: str, kind: str = FLOAT) -> None:
        self.name, self.kind = name, kind


class Const(Expr):
    """A scalar constant (rendered as an operand of the vector expression around it)."""

    __slots__ = ("value",)

    def __init__(self, value: float, kind: str = FLOAT) -> None:
        self.value, self.kind = value, kind


class Full(Expr):
    """A value with every lane ``value`` (a vector constant: a declaration's initial value)."""

    __slots__ = ("value",)

    def __init__(self, value: float, kind: str = FLOAT) -> None:
        self.value, self.kind = value, kind


def _result_kind(op: str, a: Expr, b: Expr) -> str:
    if _PRECEDENCE[op] <= CMP:
        return BOOL
    kinds = {a.kind, b.kind}
    return next(k for k in (FLOAT, REAL, INT, BOOL) if k in kinds)


class Binary(Expr):
    """``a op b`` for op in + - * (arithmetic), < <= > >= == != (comparison), & | (logical)."""

    __slots__ = ("op", "a", "b")

    def __init__(self, op: str, a: Expr, b: Expr) -> None:
        self.op, self.a, self.b, self.kind = op, a, b, _result_kind(op, a, b)


class Div(Expr):
    """``a / b``, correctly rounded."""

    __slots__ = ("a", "b")

    def __init__(self, a: Expr, b: Expr) -> None:
        self.a, self.b, self.kind = a, b, _result_kind("*", a, b)


class Neg(Expr):
    __slots__ = ("a",)

    def __init__(self, a: Expr) -> None:
        self.a, self.kind = a, a.kind


class Not(Expr):
    __slots__ = ("a",)

    def __init__(self, a: Expr) -> None:
        self.a, self.kind = a, BOOL


class Select(Expr):
    """``cond ? a : b`` (lane by lane)."""

    __slots__ = ("cond", "a", "b")

    def __init__(self, cond: Expr, a: Expr, b: Expr) -> None:
        self.cond, self.a, self.b, self.kind = cond, a, b, a.kind


class Call(Expr):
    """A function of the targets (see `FUNCTIONS`)."""

    __slots__ = ("fn", "args")

    def __init__(self, fn: str, args: tuple[Expr, ...], kind: str) -> None:
        self.fn, self.args, self.kind = fn, args, kind


#: The functions a dialect renders (each maps to the kind of its result, None: the first
#: argument's): abs |x| of a real value; abs1 |re| + |im| (|x| for a real dtype: LAPACK's
#: pivot measure); modulus |x| of the matrix dtype; sqrt (correctly rounded); signbit (true
#: for -0.0, as copysign reads it); isnan; is_zero (x == 0, both parts for complex);
#: mul_unit(s, d) = s * unit(d) for a sign s (one of +-1, +-0), unit(d) = d > 0 ? 1 : -1 for
#: a real dtype (a NaN counts as negative), d / |d| for complex; nonzero (not is_zero, a NaN
#: included); conj, re, im (x, x, - for a real dtype); complex(re, im) (complex dtypes only);
#: isinf (of a REAL).
FUNCTIONS = {"abs": REAL, "abs1": REAL, "modulus": REAL, "sqrt": None, "signbit": BOOL,
             "isnan": BOOL, "isinf": BOOL, "is_zero": BOOL, "nonzero": BOOL, "mul_unit": None,
             "conj": None, "re": REAL, "im": REAL, "complex": FLOAT}


def constant(value: object, kind: str = FLOAT) -> Expr:
    """``value`` as an expression: an `Expr` as it is, a Python number as a `Const` of ``kind``
    (an int next to an INT or BOOL stays an int)."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"mpslinalg.small.codegen: not an expression: {value!r}")
    if kind in (INT, BOOL):
        if not isinstance(value, int):
            raise TypeError(f"mpslinalg.small.codegen: a float constant {value!r} next to an int")
        return Const(value, INT)
    return Const(float(value), kind)


def _call(fn: str, *args: object) -> Call:
    exprs = tuple(constant(a) for a in args)
    return Call(fn, exprs, FUNCTIONS[fn] or exprs[0].kind)


def select(cond: Expr, a: object, b: object) -> Expr:
    """``cond ? a : b``; a Python number takes the other branch's kind."""
    if not isinstance(a, Expr):
        a = constant(a, constant(b).kind)
    return Select(cond, a, constant(b, a.kind))


def abs_(x: object) -> Expr:
    """|x| of a real value."""
    return _call("abs", x)


def abs1(x: object) -> Expr:
    """|re x| + |im x| (LAPACK's icamax measure), |x| for a real dtype."""
    return _call("abs1", x)


def modulus(x: object) -> Expr:
    """|x| of a value of the matrix dtype (the complex modulus for complex)."""
    return _call("modulus", x)


def sqrt(x: object) -> Expr:
    """The correctly rounded square root."""
    return _call("sqrt", x)


def signbit(x: object) -> Expr:
    """The sign bit of x is set (true for -0.0)."""
    return _call("signbit", x)


def isnan(x: object) -> Expr:
    """x is a NaN."""
    return _call("isnan", x)


def is_zero(x: object) -> Expr:
    """x == 0 (both parts for complex)."""
    return _call("is_zero", x)


def nonzero(x: object) -> Expr:
    """x != 0 (either part for complex; true for a NaN)."""
    return _call("nonzero", x)


def isinf(x: object) -> Expr:
    """x is an infinity (of a REAL)."""
    return _call("isinf", x)


def conj(x: object) -> Expr:
    """The complex conjugate (x itself for a real dtype)."""
    return _call("conj", x)


def re(x: object) -> Expr:
    """The real part (x itself for a real dtype)."""
    return _call("re", x)


def im(x: object) -> Expr:
    """The imaginary part (complex dtypes only)."""
    return _call("im", x)


def make_complex(real: object, imag: object) -> Expr:
    """The complex number real + i imag (complex dtypes only)."""
    return _call("complex", constant(real, REAL), constant(imag, REAL))


def mul_unit(s: object, d: object) -> Expr:
    """``s * unit(d)`` for a sign s (see `FUNCTIONS`)."""
    return _call("mul_unit", s, d)


class Vars:
    """The variables ``<prefix><i><j>...`` of one kind: ``Vars("a")[1, 2]`` is ``a12``."""

    def __init__(self, prefix: str, kind: str = FLOAT) -> None:
        self.prefix, self.kind = prefix, kind

    def __getitem__(self, index: int | tuple[int, ...]) -> Var:
        index = index if isinstance(index, tuple) else (index,)
        return Var(self.prefix + "".join(str(i) for i in index), self.kind)


class Renderer(abc.ABC):
    """How a target renders the expressions of the generated code. The base class renders the
    operators with C's precedence (valid Python too, see `ATOM`); a target supplies the leaves
    (`literal`, `operand`, `full`), the functions (`function`) and may render any node its own
    way (`special`)."""

    @abc.abstractmethod
    def literal(self, value: float, kind: str) -> str:
        """The constant ``value`` (of ``kind``) as an operand of arithmetic or a comparison."""

    @abc.abstractmethod
    def operand(self, value: float, kind: str) -> str:
        """The constant ``value`` (of ``kind``) as a branch of a select."""

    @abc.abstractmethod
    def full(self, kind: str, value: float) -> str:
        """A value (of ``kind``) with every lane ``value``."""

    @abc.abstractmethod
    def function(self, call: Call, args: list[str]) -> str | Expr:
        """``call`` (see `FUNCTIONS`) with its rendered arguments: its text (an atom), or an
        expression to render instead."""

    @staticmethod
    def real_meaning(call: Call) -> Expr | None:
        """The functions that are plain expressions for a real dtype (isnan: x != x, is_zero,
        nonzero, conj and re: x itself), else None."""
        x = call.args[0]
        return {"isnan": lambda: x.ne(x), "is_zero": lambda: x.eq(0.0),
                "nonzero": lambda: x.ne(0.0), "conj": lambda: x,
                "re": lambda: x}.get(call.fn, lambda: None)()

    def special(self, e: Expr) -> tuple[str, int] | None:
        """The dialect's own rendering of ``e`` as (text, precedence), None for the default."""
        return None

    def render(self, e: Expr) -> str:
        """The source text of ``e``."""
        return self.text(e)[0]

    def text(self, e: Expr) -> tuple[str, int]:
        """(source text, precedence level) of ``e``."""
        own = self.special(e)
        if own is not None:
            return own
        if isinstance(e, Var):
            return e.name, ATOM
        if isinstance(e, Const):
            text = self.literal(e.value, e.kind)
            return text, UNARY if text.startswith("-") else ATOM
        if isinstance(e, Full):
            return self.full(e.kind, e.value), ATOM
        if isinstance(e, Neg):
            inner = self.wrap(e.a, UNARY)
            return "-" + (f"({inner})" if inner.startswith("-") else inner), UNARY
        if isinstance(e, Not):
            return "~" + self.wrap(e.a, UNARY), UNARY
        if isinstance(e, Div):
            return self.infix("/", MUL, e.a, e.b), MUL
        if isinstance(e, Binary):
            level = _PRECEDENCE[e.op]
            return self.infix(e.op, level, e.a, e.b), level
        if isinstance(e, Select):
            return self.select(e), SELECT
        if isinstance(e, Call):
            out = self.function(e, [self.render(a) for a in e.args])
            return (out, ATOM) if isinstance(out, str) else self.text(out)
        raise TypeError(f"mpslinalg.small.codegen: not an expression: {e!r}")

    def wrap(self, e: Expr, level: int, strict: bool = False) -> str:
        """``e`` rendered as an operand at precedence ``level``: parenthesised when it binds
        less tightly (or as tightly, with ``strict``: a right operand, never reassociated)."""
        text, own = self.text(e)
        return f"({text})" if own < level or (strict and own == level) else text

    def infix(self, op: str, level: int, a: Expr, b: Expr) -> str:
        # Comparisons never chain, and inside '&' / '|' they are parenthesised (see ATOM).
        inner = CMP + 1 if level in (CMP, AND, OR) else level
        return f"{self.wrap(a, inner)} {op} {self.wrap(b, inner if inner > level else level, True)}"

    def branch(self, e: Expr) -> str:
        """A branch of a select: constants as `operand`."""
        if isinstance(e, Const):
            return self.operand(e.value, e.kind)
        return self.render(e)

    def select(self, e: Select) -> str:
        """``cond ? a : b`` in C syntax: a condition other than a name in parentheses."""
        cond = self.render(e.cond) if isinstance(e.cond, Var) else f"({self.render(e.cond)})"
        return f"{cond} ? {self.branch(e.a)} : {self.branch(e.b)}"


class Dialect(Renderer):
    """A target of the descriptions: renders their expressions (`Renderer`) and writes their
    statements."""

    # ---------------------------------------------------------------------------- statements

    def declare(self, kind: str, name: str, value: object) -> Var:
        """A new variable ``name`` of ``kind`` = ``value``; returns it."""
        self.write_declare(kind, name, self.render(constant(value, kind)))
        return Var(name, kind)

    def assign(self, target: Var | str, value: object) -> None:
        """``target`` = ``value`` for a variable declared before."""
        name = target.name if isinstance(target, Var) else target
        kind = target.kind if isinstance(target, Var) else FLOAT
        self.write_assign(name, self.render(constant(value, kind)))

    @abc.abstractmethod
    def write_declare(self, kind: str, name: str, text: str) -> None:
        """The declaration of ``name`` (of ``kind``) = the rendered ``text``."""

    @abc.abstractmethod
    def write_assign(self, name: str, text: str) -> None:
        """``name`` = the rendered ``text``."""

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """A scope for the temporaries declared inside (none in dialects without scopes)."""
        yield

    @abc.abstractmethod
    def add_log(self, acc: str, x: Expr) -> None:
        """``acc`` += log(``x``) (a REAL), lane by lane."""

    #: The smallest normal number of the target's real type (LAPACK safmin); float32 unless a
    #: dialect says otherwise.
    safe_min: float = 1.1754943508222875e-38
    #: Machine epsilon of the real type (the Jacobi methods' convergence threshold).
    eps: float = 1.1920928955078125e-07

    @abc.abstractmethod
    def sweeps(self, count: int, flag: str) -> contextlib.AbstractContextManager:
        """A loop of at most ``count`` sweeps around the statements written inside; ``flag`` (a
        BOOL declared per sweep, false) is or-ed by the body where a lane rotated: a target may
        leave the loop once it stays false for every lane (SVD and eigh only)."""

    def note_rotation(self, flag: Var, rot: Expr) -> None:
        """The body of `sweeps` rotates a pair where ``rot``: ``flag`` |= ``rot``. A target
        that reports the rotations of the last sweep (Metal's eigh status) counts them too."""
        self.assign(flag, flag | rot)

class _Plain(Renderer):
    """C syntax with plain literals and function names (for reading and the examples)."""

    def literal(self, value: float, kind: str) -> str:
        return repr(value)

    operand = literal

    def full(self, kind: str, value: float) -> str:
        return repr(value)

    def function(self, call: Call, args: list[str]) -> str:
        return f"{call.fn}({', '.join(args)})"


def render_c(e: Expr) -> str:
    """``e`` in C syntax with plain literals (for reading)."""
    return _Plain().render(e)


#: The ops whose kernels factor the transpose of the matrix they read: torch.linalg.det and
#: slogdet of a contiguous real matrix factor the memory as LAPACK's column-major A^T
#: (det(A^T) = det(A), no copy), so an Inf or NaN reaches U's diagonal as it does there.
TRANSPOSED_OPS = ("det", "slogdet")


def emit_transpose(dl: Dialect, n: int) -> None:
    """a{i}{j} <-> a{j}{i} (renamings the compiler removes)."""
    a = Vars("a")
    for i in range(n):
        for j in range(i + 1, n):
            with dl.scope():
                up = dl.declare(FLOAT, "up", a[i, j])
                dl.assign(a[i, j], a[j, i])
                dl.assign(a[j, i], up)


def emit_factor(dl: Dialect, n: int) -> None:
    """getf2 (small_factor): LU with partial pivoting of a{i}{j} in place; p{k} = pivot row of
    step k (k < n - 1), info = first zero pivot (1-based, 0 = none)."""
    a, p = Vars("a"), Vars("p", INT)
    info = dl.declare(INT, "info", Full(0, INT))
    for k in range(n):
        if k < n - 1:
            # Pivot search: strict '>' keeps the lowest row on ties and never selects a NaN.
            dl.declare(INT, f"p{k}", Full(k, INT))
            with dl.scope():
                best = dl.declare(REAL, "best", abs1(a[k, k]))
                for i in range(k + 1, n):
                    with dl.scope():
                        v = dl.declare(REAL, "v", abs1(a[i, k]))
                        gt = dl.declare(BOOL, "gt", v > best)
                        if i + 1 < n:
                            dl.assign(best, select(gt, v, best))
                        dl.assign(p[k], select(gt, i, p[k]))
            # Interchange rows k and p of the whole row (L part included), by selects.
            for i in range(k + 1, n):
                with dl.scope():
                    sw = dl.declare(BOOL, "sw", p[k].eq(i))
                    for j in range(n):
                        with dl.scope():
                            up = dl.declare(FLOAT, "up", a[k, j])
                            dl.assign(a[k, j], select(sw, a[i, j], up))
                            dl.assign(a[i, j], select(sw, up, a[i, j]))
        # A zero pivot: the column below is zero too, no scaling; the first one is recorded.
        with dl.scope():
            zero = dl.declare(BOOL, "zero", is_zero(a[k, k]))
            dl.assign(info, select(zero & info.eq(0), k + 1, info))
            for i in range(k + 1, n):
                dl.assign(a[i, k], select(zero, a[i, k], a[i, k] / a[k, k]))
        for i in range(k + 1, n):
            for j in range(k + 1, n):
                dl.assign(a[i, j], a[i, j] - a[i, k] * a[k, j])


def emit_solve_vector(dl: Dialect, n: int) -> None:
    """getrs for one right-hand side x0..x{n-1} in place (small_solve_vector)."""
    a, p, x = Vars("a"), Vars("p", INT), Vars("x")
    for k in range(n - 1):
        for i in range(k + 1, n):
            with dl.scope():
                sw = dl.declare(BOOL, "sw", p[k].eq(i))
                up = dl.declare(FLOAT, "up", x[k])
                dl.assign(x[k], select(sw, x[i], up))
                dl.assign(x[i], select(sw, up, x[i]))
    for k in range(n):
        for i in range(k + 1, n):
            dl.assign(x[i], x[i] - a[i, k] * x[k])
    for k in range(n - 1, -1, -1):
        dl.assign(x[k], x[k] / a[k, k])
        for i in range(k):
            dl.assign(x[i], x[i] - a[i, k] * x[k])


def emit_inverse(dl: Dialect, n: int, store_column: Callable[[int], None]) -> None:
    """The inverse column by column: x0..x{n-1} = column j of the identity, solved, then
    ``store_column(j)`` (which writes the statements that keep x)."""
    for j in range(n):
        with dl.scope():
            for i in range(n):
                dl.declare(FLOAT, f"x{i}", Full(1.0 if i == j else 0.0))
            emit_solve_vector(dl, n)
            store_column(j)


def emit_perm_sign(dl: Dialect, n: int) -> Var:
    """sgn = (-1)^(number of row interchanges), a REAL (small_perm_sign); returns it."""
    p = Vars("p", INT)
    sgn = dl.declare(REAL, "sgn", Full(1.0, REAL))
    for k in range(n - 1):
        dl.assign(sgn, select(p[k].ne(k), -sgn, sgn))
    return sgn


def emit_det(dl: Dialect, n: int) -> str:
    """d = product of U's diagonal, sgn = the permutation sign; returns the determinant's
    rendered expression (d * sgn)."""
    a = Vars("a")
    d = dl.declare(FLOAT, "d", a[0, 0])
    for k in range(1, n):
        dl.assign(d, d * a[k, k])
    sgn = emit_perm_sign(dl, n)
    return dl.render(d * sgn)


def emit_slogdet(dl: Dialect, n: int, s: str, logabs: str) -> None:
    """The loop of small_slogdet over U's diagonal, after the caller declared the sign ``s``
    (of the matrix dtype, from `emit_perm_sign`) and the REAL sum ``logabs`` = 0: logabs +=
    log|u_kk|, s = 0 for a zero pivot, else s * unit(u_kk)."""
    a, sign = Vars("a"), Var(s)
    for k in range(n):
        dl.add_log(logabs, modulus(a[k, k]))
        dl.assign(sign, select(is_zero(a[k, k]), 0.0, mul_unit(sign, a[k, k])))


# ------------------------------------------------------------------------------ Householder QR
#
# LAPACK geqr2 with larfg's reflectors and nrm2's scaled sum of squares, then org2r by backward
# accumulation (the Metal kernels qr_small_*, generated from it, and the blocked kernels of
# metal/linalg/qr.h use the same reflectors), every branch a select. Where the input holds NaN
# or Inf the real kernels follow LAPACK as torch.linalg.qr on the CPU runs it (MKL's
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
# The complex kernels (Metal's complex64) take the complex reflector of `_emit_larfg_complex`
# (qr_larfg's) with the same scan, a zero test of both parts (`nonzero`).


def emit_qr_factor(dl: Dialect, m: int, n: int, complex_: bool = False) -> None:
    """geqr2 of a{i}{j} (m x n) in place: R on and above the diagonal, the reflectors' tails
    below it, tau{j} (j < min(m, n)) their scalars. beta = -sign(alpha) |(alpha, x)| (the sign
    bit of alpha, as copysign), H = I (tau = 0) when the tail x is exactly zero. ``complex_``:
    the complex reflector of `_emit_larfg_complex`, H^H applied to the columns after j."""
    for j in range(min(m, n)):
        _emit_tail_norm(dl, m, j, complex_)
        dl.declare(FLOAT, f"tau{j}", Full(0.0))
        with dl.scope():
            (_emit_larfg_complex if complex_ else _emit_larfg)(dl, m, j)
            for c in range(j + 1, n):
                _emit_apply_reflector(dl, m, j, "a", c)


def _emit_apply_reflector(dl: Dialect, m: int, j: int, target: str, c: int,
                          extent: tuple[dict[int, Var], Var] | None = None) -> None:
    """H_j = I - tau_j v v^H, v = (1, a[j+1:m, j]), applied to column c of ``target``: as
    H_j^H in geqr2 (``a``), as H_j in org2r (``q``): target[j:m, c] -= tau v (v^H target[j:m,
    c]), tau conjugated in geqr2, as larf does. ``extent`` (org2r): the BOOL conditions of
    `_emit_reflector_extent`, (row i -> row i is within larf's scan, whether column c is):
    entries outside stay as they are."""
    a, t, tau = Vars("a"), Vars(target), Var(f"tau{j}")
    rows, column = extent if extent is not None else ({}, None)

    def within(i: int) -> Expr | None:
        conds = [x for x in (rows.get(i), column) if x is not None]
        return conds[0] & conds[1] if len(conds) == 2 else (conds[0] if conds else None)

    with dl.scope():
        d = dl.declare(FLOAT, "d", t[j, c])
        for i in range(j + 1, m):
            term = conj(a[i, j]) * t[i, c]
            if i in rows:  # past v's last nonzero: v_i = 0, and 0 * NaN must not reach d
                term = select(rows[i], term, 0.0)
            dl.assign(d, d + term)
        td = dl.declare(FLOAT, "td", (conj(tau) if target == "a" else tau) * d)
        for i, update in [(j, t[j, c] - td)] + [
                (i, t[i, c] - a[i, j] * td) for i in range(j + 1, m)]:
            cond = within(i)
            dl.assign(t[i, c], update if cond is None else select(cond, update, t[i, c]))


def _emit_tail_norm(dl: Dialect, m: int, j: int, complex_: bool = False) -> None:
    """xnorm{j} = |a[j+1:m, j]| by LAPACK's classic scaled sum of squares (qr_ssq_add, over
    the real and imaginary parts for complex): no square that could overflow or underflow;
    NaN when the tail holds a NaN."""
    a = Vars("a")
    xnorm = dl.declare(REAL, f"xnorm{j}", Full(0.0, REAL))
    with dl.scope():
        scale = dl.declare(REAL, "scale", Full(0.0, REAL))
        ssq = dl.declare(REAL, "ssq", Full(1.0, REAL))
        for i in range(j + 1, m):
            for x in (re(a[i, j]), im(a[i, j])) if complex_ else (a[i, j],):
                with dl.scope():
                    ax = dl.declare(REAL, "ax", abs_(x))
                    # x != 0 is also true for a NaN, which then reaches ssq through r2.
                    nz = dl.declare(BOOL, "nz", x.ne(0.0))
                    grow = dl.declare(BOOL, "grow", scale < ax)
                    r1 = dl.declare(REAL, "r1", scale / ax)
                    r2 = dl.declare(REAL, "r2", ax / scale)
                    grown = 1.0 + ssq * r1 * r1
                    dl.assign(ssq, select(nz, select(grow, grown, ssq + r2 * r2), ssq))
                    dl.assign(scale, select(nz & grow, ax, scale))
        dl.assign(xnorm, select(scale.eq(0.0), select(isnan(ssq), ssq, 0.0),
                                scale * sqrt(ssq)))


def _emit_larfg(dl: Dialect, m: int, j: int) -> None:
    """The reflector of column j (qr_larfg with qr_lapy3(alpha, 0, xnorm)): beta into a{j}{j},
    tau{j}, the tail divided by alpha - beta (by its reciprocal unless that is below safmin)."""
    a, xnorm, tau = Vars("a"), Var(f"xnorm{j}", REAL), Var(f"tau{j}")
    ident = dl.declare(BOOL, "ident", xnorm.eq(0.0))
    alpha = dl.declare(FLOAT, "alpha", a[j, j])
    ax = dl.declare(REAL, "ax", abs_(alpha))
    az = dl.declare(REAL, "az", abs_(xnorm))
    # max and min that take xnorm where alpha is NaN (a finite beta, as LAPACK's dlapy2 gives)
    big = dl.declare(REAL, "big", select(ax > az, ax, az))
    small = dl.declare(REAL, "small", select(ax < az, ax, az))
    ratio = dl.declare(REAL, "ratio", small / big)
    lapy = dl.declare(REAL, "lapy", select(small.eq(0.0), big, big * sqrt(1.0 + ratio * ratio)))
    nbeta = dl.declare(FLOAT, "nbeta", select(signbit(alpha) | isnan(alpha), lapy, -lapy))
    dl.assign(tau, select(ident, 0.0, (nbeta - alpha) / nbeta))
    denom = dl.declare(FLOAT, "denom", select(ident, 1.0, alpha - nbeta))
    _emit_scale_tail(dl, m, j, ident, denom)
    dl.assign(a[j, j], select(ident, alpha, nbeta))


def _emit_scale_tail(dl: Dialect, m: int, j: int, ident: Var, denom: Var) -> None:
    """The tail of column j divided by ``denom`` (by its reciprocal unless |denom| is below
    safmin, qr_scale), unless the reflector is the identity."""
    a = Vars("a")
    rden = dl.declare(FLOAT, "rden", Full(1.0) / denom)
    recip = dl.declare(BOOL, "recip", modulus(denom) >= dl.safe_min)
    for i in range(j + 1, m):
        dl.assign(a[i, j], select(ident, a[i, j], select(
            recip, a[i, j] * rden, a[i, j] / denom)))


def _emit_larfg_complex(dl: Dialect, m: int, j: int) -> None:
    """The complex reflector of column j (zlarfg as qr_larfg of metal/linalg/qr.h): the
    identity when the tail is zero and alpha real, else beta = -sign(re alpha) |(alpha, x)|
    (lapy3: the sum of the magnitudes when one is NaN, the largest when it is 0 or Inf), tau =
    ((beta - re alpha) / beta, -im alpha / beta), the tail divided by alpha - beta; R's
    diagonal entry beta is real."""
    a, xnorm, tau = Vars("a"), Var(f"xnorm{j}", REAL), Var(f"tau{j}")
    alpha = dl.declare(FLOAT, "alpha", a[j, j])
    ident = dl.declare(BOOL, "ident", xnorm.eq(0.0) & im(alpha).eq(0.0))
    parts = [dl.declare(REAL, name, abs_(x))
             for name, x in (("ax", re(alpha)), ("ay", im(alpha)), ("az", xnorm))]
    ax, ay, az = parts
    anynan = dl.declare(BOOL, "anynan", isnan(ax) | isnan(ay) | isnan(az))
    byz = dl.declare(REAL, "byz", select(ay > az, ay, az))
    big = dl.declare(REAL, "big", select(ax > byz, ax, byz))
    rx, ry, rz = (dl.declare(REAL, f"r{v}", x / big) for v, x in zip("xyz", parts, strict=True))
    lapy = dl.declare(REAL, "lapy", select(anynan, ax + ay + az, select(
        big.eq(0.0) | isinf(big), big, big * sqrt(rx * rx + ry * ry + rz * rz))))
    beta = dl.declare(REAL, "beta", select(signbit(re(alpha)), lapy, -lapy))
    dl.assign(tau, select(ident, 0.0, make_complex((beta - re(alpha)) / beta,
                                                   -im(alpha) / beta)))
    denom = dl.declare(FLOAT, "denom", select(ident, 1.0, alpha - make_complex(beta, 0.0)))
    _emit_scale_tail(dl, m, j, ident, denom)
    dl.assign(a[j, j], make_complex(select(ident, re(alpha), beta), 0.0))


def emit_qr_q(dl: Dialect, m: int, n: int, cols: int) -> None:
    """q{i}{c} (m x cols, cols = min(m, n) or m) = the first cols columns of
    H_0 ... H_{k-1}, accumulated backwards from the identity as org2r does: H_j applied to
    the columns after j within larf's scan (`_emit_reflector_extent`), then column j set to
    (1 - tau_j, -tau_j v) below the zeros above it."""
    a, q = Vars("a"), Vars("q")
    for i in range(m):
        for c in range(cols):
            dl.declare(FLOAT, f"q{i}{c}", Full(1.0 if i == c else 0.0))
    for j in range(min(m, n) - 1, -1, -1):
        tau = Var(f"tau{j}")
        if j + 1 < cols:
            with dl.scope():
                rows = _emit_reflector_extent(dl, m, j, cols)
                for c in range(j + 1, cols):
                    _emit_apply_reflector(dl, m, j, "q", c, (rows, Var(f"col{c}", BOOL)))
        dl.assign(q[j, j], 1.0 - tau)
        for i in range(j + 1, m):
            dl.assign(q[i, j], -tau * a[i, j])


def _emit_reflector_extent(dl: Dialect, m: int, j: int, cols: int) -> dict[int, Var]:
    """What larf touches of q[j:m, j+1:cols] for H_j (LAPACK's scan for the last nonzero
    entry of v, then for the last column with a nonzero entry in those rows, a NaN counting as
    nonzero; nothing when tau = 0): declares BOOL row{i} (i > j, row i within) and col{c}
    (column c within, tau != 0 included); returns {i: row{i}}."""
    a, q = Vars("a"), Vars("q")
    row, col = Vars("row", BOOL), Vars("col", BOOL)
    for i in range(m - 1, j, -1):
        entry = nonzero(a[i, j])
        dl.declare(BOOL, f"row{i}", entry if i == m - 1 else row[i + 1] | entry)
    tauz = dl.declare(BOOL, "tauz", nonzero(Var(f"tau{j}")))
    for c in range(cols - 1, j, -1):
        entries = nonzero(q[j, c])
        for i in range(j + 1, m):
            entries = entries | (row[i] & nonzero(q[i, c]))
        dl.declare(BOOL, f"col{c}", tauz & entries if c == cols - 1
                   else col[c + 1] | (tauz & entries))
    return {i: row[i] for i in range(j + 1, m)}


# ------------------------------------------------------------------------------ Jacobi: SVD, eigh
#
# One-sided Jacobi (Hestenes) for the SVD: the columns of the working matrix are rotated in
# pairs until every pair is orthogonal to working precision (|x_p^H x_q| <= eps |x_p| |x_q|),
# never forming A^H A, so small singular values keep their relative accuracy; then sigma_j =
# |x_j|, u_j = x_j / sigma_j, V the product of the rotations. The two-sided cyclic Jacobi method
# for Hermitian eigenproblems rotates rows and columns until |a_pq| <= eps sqrt(|a_pp a_qq|).
# Both use Rutishauser's rotation (Golub & Van Loan, "Matrix Computations", 4th ed., Alg. 8.5.1;
# the convention of metal/common/jacobi.h: J = [[c, s], [-conj(s), c]], [x, y] <- [c x -
# conj(s) y, s x + c y], c and t real, |t| <= 1, s = c t times the phase a_pq / |a_pq| of the
# coupling for complex, which reduces the Hermitian 2 x 2 problem to the real one). The matrix
# is first divided by its largest |entry| (so squared norms neither overflow nor underflow for
# entries near the ends of the exponent range; sigma and lambda are scaled back), sweeps are
# bounded (`JACOBI_MAX_SWEEPS`, the CPU code leaves the loop early once no lane of a block
# rotated in a sweep, a Metal thread once its matrix did not; Triton lanes that converged rotate
# by the identity), and a matrix with a non-finite entry is replaced by zeros for the sweeps and
# gets NaN in every output. A dialect supplies `Dialect.sweeps` (and may count the rotations,
# `Dialect.note_rotation`) besides the QR methods. ``complex_`` (Metal's complex64 only) selects
# the complex arithmetic: the C++ and Triton targets are real.

#: Sweeps at most: cyclic Jacobi converges quadratically, n <= 4 needs 4-7 sweeps in float64.
JACOBI_MAX_SWEEPS = 12

#: Above this |zeta| the tangent 1 / (|zeta| + sqrt(1 + zeta^2)) is 1 / (2 zeta) to rounding
#: (and 1 + zeta^2 could overflow): metal/common/jacobi.h's kJacobiTauHuge.
_ZETA_HUGE = 1.0e18


def _pairs(n: int) -> list[tuple[int, int]]:
    """Cyclic-by-rows order of the pairs (p, q), p < q."""
    return [(p, q) for p in range(n) for q in range(p + 1, n)]


def _not_finite(x: Expr, complex_: bool) -> Expr:
    """x is a NaN or an infinity (either part for complex): x - x is then not 0."""
    if complex_ and x.kind == FLOAT:
        return (re(x) - re(x)).ne(0.0) | (im(x) - im(x)).ne(0.0)
    return (x - x).ne(0.0)


def _abs2(x: Expr, complex_: bool) -> Expr:
    """|x|^2 (a REAL)."""
    return re(x) * re(x) + im(x) * im(x) if complex_ and x.kind == FLOAT else x * x


def _nan_of(kind: str, complex_: bool) -> Expr:
    """The NaN of ``kind`` (FLOAT or REAL) from `_emit_sanitize_and_scale`'s ``nanv``."""
    nanv = Var("nanv", REAL)
    return make_complex(nanv, nanv) if complex_ and kind == FLOAT else nanv


def _emit_sanitize_and_scale(dl: Dialect, names: list[Var], complex_: bool = False) -> None:
    """bad = some entry is not finite; entries <- 0 where bad; amax = max |entry|; entries /=
    amax (unless 0)."""
    bad = _not_finite(names[0], complex_)
    for x in names[1:]:
        bad = bad | _not_finite(x, complex_)
    bad = dl.declare(BOOL, "bad", bad)
    zerov = dl.declare(FLOAT, "zerov", Full(0.0))
    dl.declare(REAL, "nanv", re(zerov) / re(zerov))
    amax = dl.declare(REAL, "amax", Full(0.0, REAL))
    for x in names:
        dl.assign(x, select(bad, Full(0.0, x.kind) if x.kind != FLOAT else zerov, x))
        with dl.scope():
            ax = dl.declare(REAL, "ax", modulus(x))
            dl.assign(amax, select(ax > amax, ax, amax))
    amaxs = dl.declare(REAL, "amaxs", select(amax.eq(0.0), 1.0, amax))
    for x in names:
        dl.assign(x, x / amaxs)


#: The rotation's scalars declared by `_emit_tangent` and read by `_emit_rotate`.
_C, _S, _T = Var("c", REAL), Var("s"), Var("t", REAL)


def _emit_tangent(dl: Dialect, num: Expr, den: Expr, phase: Expr | None = None) -> None:
    """zeta = num / den, t = sign(zeta) / (|zeta| + sqrt(1 + zeta^2)) (|t| <= 1), c, s = c t
    (times ``phase``, the unit coupling of a complex rotation)."""
    zeta = dl.declare(REAL, "zeta", num / den)
    az = dl.declare(REAL, "az", abs_(zeta))
    sg = dl.declare(REAL, "sg", select(zeta < 0.0, Const(-1.0, REAL), 1.0))
    t = dl.declare(REAL, "t", select(az > _ZETA_HUGE, Full(0.5, REAL) / zeta,
                                     sg / (az + sqrt(1.0 + zeta * zeta))))
    c = dl.declare(REAL, "c", Full(1.0, REAL) / sqrt(1.0 + t * t))
    dl.declare(FLOAT, "s", c * t if phase is None else c * t * phase)


def _rotated(x: Expr, y: Expr, complex_: bool) -> tuple[Expr, Expr]:
    """[x, y] J = [c x - conj(s) y, s x + c y]."""
    return _C * x - conj(_S) * y if complex_ else _C * x - _S * y, _S * x + _C * y


def _emit_rotate(dl: Dialect, x: Var, y: Var, complex_: bool = False) -> None:
    """[x, y] <- [x, y] J."""
    with dl.scope():
        xr = dl.declare(FLOAT, "xr", x)
        new_x, new_y = _rotated(xr, y, complex_)
        dl.assign(x, new_x)
        dl.assign(y, new_y)


def _emit_swap(dl: Dialect, cond: Var, x: Var, y: Var) -> None:
    with dl.scope():
        xs = dl.declare(x.kind, "xs", x)
        dl.assign(x, select(cond, y, xs))
        dl.assign(y, select(cond, xs, y))


#: Compare-exchange networks sorting n <= 4 keys.
_SORT_NETWORK = {1: [], 2: [(0, 1)], 3: [(0, 1), (1, 2), (0, 1)],
                 4: [(0, 1), (2, 3), (0, 2), (1, 3), (1, 2)]}


def _sum(terms: list[Expr]) -> Expr:
    """terms[0] + terms[1] + ..., left to right."""
    total = terms[0]
    for term in terms[1:]:
        total = total + term
    return total


def emit_svd_any_shape(dl: Dialect, m: int, n: int, variant: str,
                       complex_: bool = False) -> list:
    """The SVD of a{i}{j} (m x n): `emit_svd` of A when m >= n, of A^H otherwise (A^H = U' S V'^H
    gives U = V', Vh = U'^H). ``variant``: "vals", "reduced" or "full". Returns the outputs to
    store as (name, rows, cols, name of entry (i, j)): S, then U and VH but for "vals" (for
    complex VH's entries are declared here, vh{i}{j}, the conjugates of those of V or U')."""
    wide = m < n
    big, small = max(m, n), min(m, n)
    a = Vars("a")
    for i in range(big):
        for j in range(small):
            dl.declare(FLOAT, f"x{i}{j}", (conj(a[j, i]) if complex_ else a[j, i]) if wide
                       else a[i, j])
    want_uv = variant != "vals"
    ucols = big if variant == "full" else small
    emit_svd(dl, big, small, want_uv, ucols, complex_)
    outputs = [("S", 1, small, lambda i, j: f"s{j}")]
    if not want_uv:
        return outputs
    # Vh = (v or u)^H: entry (i, j) is that of (j, i), conjugated for complex.
    vh = "v" if not wide else "u"
    vh_rows = n if not wide else ucols
    if complex_:
        for i in range(vh_rows):
            for j in range(n):
                dl.declare(FLOAT, f"vh{i}{j}", conj(Var(f"{vh}{j}{i}")))

    def vh_entry(i: int, j: int) -> str:
        return f"vh{i}{j}" if complex_ else f"{vh}{j}{i}"

    if not wide:  # U = u (m x ucols), Vh = v^H (n x n)
        outputs += [("U", m, ucols, lambda i, j: f"u{i}{j}"), ("VH", n, n, vh_entry)]
    else:  # U = v (m x m), Vh = u^H (ucols x n)
        outputs += [("U", m, m, lambda i, j: f"v{i}{j}"), ("VH", ucols, n, vh_entry)]
    return outputs


def emit_svd(dl: Dialect, m: int, n: int, want_uv: bool, ucols: int,
             complex_: bool = False) -> None:
    """One-sided Jacobi SVD of x{i}{j} (m x n, m >= n): s{j} (descending, NaN for a non-finite
    input), and with ``want_uv`` u{i}{j} (m x ucols, ucols = n or m; orthonormalised column
    by column in the order of S, a column mostly inside the span of those before it, such as
    that of a zero singular value, and those past n completed to an orthonormal basis: see
    `_emit_orthonormal_column`) and v{i}{j} (n x n)."""
    x, u, v, s = Vars("x"), Vars("u"), Vars("v"), Vars("s", REAL)
    _emit_sanitize_and_scale(dl, [x[i, j] for i in range(m) for j in range(n)], complex_)
    bad, zerov, amax = Var("bad", BOOL), Var("zerov"), Var("amax", REAL)
    rotated = Var("rotated", BOOL)
    if want_uv:
        for i in range(n):
            for j in range(n):
                dl.declare(FLOAT, f"v{i}{j}", Full(1.0 if i == j else 0.0))
    with dl.sweeps(JACOBI_MAX_SWEEPS, "rotated"):
        for p, q in _pairs(n):
            with dl.scope():
                # The Gram entries of the columns each divided by its largest |entry| (a zero
                # column by 1): no square underflows however far apart the column norms are,
                # and the test |gamma| <= eps sqrt(alpha beta) is scale-invariant.
                for c, name in ((p, "cp"), (q, "cq")):
                    cmax = dl.declare(REAL, name, Full(0.0, REAL))
                    for i in range(m):
                        with dl.scope():
                            ax = dl.declare(REAL, "ax", modulus(x[i, c]))
                            dl.assign(cmax, select(ax > cmax, ax, cmax))
                cp, cq = Var("cp", REAL), Var("cq", REAL)
                nonzero = dl.declare(BOOL, "nonzero", (cp > 0.0) & (cq > 0.0))
                dl.assign(cp, select(nonzero, cp, 1.0))
                dl.assign(cq, select(nonzero, cq, 1.0))
                g, h = Vars("g"), Vars("h")
                for i in range(m):
                    dl.declare(FLOAT, f"g{i}", x[i, p] / cp)
                    dl.declare(FLOAT, f"h{i}", x[i, q] / cq)
                dl.declare(REAL, "alpha", _sum([_abs2(g[i], complex_) for i in range(m)]))
                dl.declare(REAL, "beta", _sum([_abs2(h[i], complex_) for i in range(m)]))
                gamma = dl.declare(FLOAT, "gamma", _sum([conj(g[i]) * h[i] for i in range(m)]))
                alpha, beta = Var("alpha", REAL), Var("beta", REAL)
                size = (dl.declare(REAL, "agamma", modulus(gamma)) if complex_
                        else modulus(gamma))
                rot = dl.declare(BOOL, "rot", nonzero & (
                    size > constant(dl.eps, REAL) * sqrt(alpha) * sqrt(beta)))
                # zeta = (|x_q|^2 - |x_p|^2) / (2 x_p^H x_q) (over |x_p^H x_q| for complex,
                # the phase going into s), numerator and denominator divided by cp cq.
                num = cq / cp * beta - cp / cq * alpha
                if complex_:
                    _emit_tangent(dl, num, 2.0 * size, gamma / size)
                else:
                    _emit_tangent(dl, num, 2.0 * gamma)
                # A tangent of zero (cp / cq overflows: the rounding residue of a rank-deficient
                # matrix, which the sweeps shrink to subnormal sizes but never make orthogonal)
                # rotates by the identity: not counted, so that such a lane leaves the loop.
                dl.assign(rot, rot & _T.ne(0.0))
                dl.note_rotation(rotated, rot)
                dl.assign(_C, select(rot, _C, 1.0))
                dl.assign(_S, select(rot, _S, 0.0))
                for i in range(m):
                    _emit_rotate(dl, x[i, p], x[i, q], complex_)
                if want_uv:
                    for i in range(n):
                        _emit_rotate(dl, v[i, p], v[i, q], complex_)
    for j in range(n):
        # sigma_j = |x_j| and u_j = x_j / sigma_j through x_j / max|x_ij|: squares of a column
        # far below the largest (sigma_j / sigma_1 < 1e-19 in float32) would be subnormal, and
        # u_j's norm off by far more than eps.
        cmax = dl.declare(REAL, f"cmax{j}", Full(0.0, REAL))
        for i in range(m):
            with dl.scope():
                ax = dl.declare(REAL, "ax", modulus(x[i, j]))
                dl.assign(cmax, select(ax > cmax, ax, cmax))
        cden = dl.declare(REAL, f"cden{j}", select(cmax.eq(0.0), 1.0, cmax))
        y = Vars("y")
        for i in range(m):
            dl.declare(FLOAT, f"y{i}{j}", x[i, j] / cden)
        nrm = dl.declare(REAL, f"nrm{j}",
                         sqrt(_sum([_abs2(y[i, j], complex_) for i in range(m)])))
        dl.declare(REAL, f"s{j}", cmax * nrm)
        if want_uv:
            # nrm >= 1 unless the column is zero (then u_j is completed below).
            den = dl.declare(REAL, f"den{j}", select(nrm > 0.0, nrm, 1.0))
            for i in range(m):
                dl.declare(FLOAT, f"u{i}{j}", y[i, j] / den)
    for a, b in _SORT_NETWORK[n]:  # descending
        with dl.scope():
            sw = dl.declare(BOOL, "sw", s[a] < s[b])
            _emit_swap(dl, sw, s[a], s[b])
            if want_uv:
                for i in range(m):
                    _emit_swap(dl, sw, u[i, a], u[i, b])
                for i in range(n):
                    _emit_swap(dl, sw, v[i, a], v[i, b])
    if want_uv:
        for j in range(ucols):
            if j >= n:
                for i in range(m):
                    dl.declare(FLOAT, f"u{i}{j}", zerov)
            with dl.scope():
                _emit_orthonormal_column(dl, m, j, own=j < n, complex_=complex_)
    for j in range(n):
        dl.assign(s[j], select(bad, _nan_of(REAL, complex_), s[j] * amax))
    if want_uv:
        for i in range(m):
            for j in range(ucols):
                dl.assign(u[i, j], select(bad, _nan_of(FLOAT, complex_), u[i, j]))
        for i in range(n):
            for j in range(n):
                dl.assign(v[i, j], select(bad, _nan_of(FLOAT, complex_), v[i, j]))


def _emit_orthonormal_column(dl: Dialect, m: int, j: int, own: bool,
                             complex_: bool = False) -> None:
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
    u, w, nu, y = Vars("u"), Vars("w"), Vars("nu", REAL), Vars("y")
    prior = range(j)
    for k in range(m):
        # w_k = (I - U U^H) e_k, U the columns before j.
        for r in range(m):
            unit = 1.0 if r == k else 0.0
            dl.declare(FLOAT, f"w{k}{r}", unit - _sum([conj(u[k, i]) * u[r, i] for i in prior])
                       if j else Full(unit))
        dl.declare(REAL, f"nu{k}", _sum([_abs2(w[k, r], complex_) for r in range(m)]))
    best = dl.declare(REAL, "best", nu[0])
    for r in range(m):
        dl.declare(FLOAT, f"y{r}", w[0, r])
    for k in range(1, m):
        with dl.scope():
            gt = dl.declare(BOOL, "gt", nu[k] > best)
            dl.assign(best, select(gt, nu[k], best))
            for r in range(m):
                dl.assign(y[r], select(gt, w[k, r], y[r]))
    if own:
        with dl.scope():
            d, z = Vars("d"), Vars("z")
            for i in prior:
                dl.declare(FLOAT, f"d{i}", _sum([conj(u[r, i]) * u[r, j] for r in range(m)]))
            for r in range(m):
                dl.declare(FLOAT, f"z{r}", u[r, j] - _sum([u[r, i] * d[i] for i in prior])
                           if j else u[r, j])
            # |z|^2 > 1/4: more than half of the unit vector u_j lies outside the span.
            keep = dl.declare(BOOL, "keep",
                              _sum([_abs2(z[r], complex_) for r in range(m)]) > 0.25)
            for r in range(m):
                dl.assign(y[r], select(keep, z[r], y[r]))
    for _ in range(2):
        for i in prior:
            with dl.scope():
                dot = dl.declare(FLOAT, "dot", _sum([conj(u[r, i]) * y[r] for r in range(m)]))
                for r in range(m):
                    dl.assign(y[r], y[r] - dot * u[r, i])
        with dl.scope():
            nrm = dl.declare(REAL, "nrm", sqrt(_sum([_abs2(y[r], complex_) for r in range(m)])))
            for r in range(m):
                dl.assign(y[r], y[r] / nrm)
    for r in range(m):
        dl.assign(u[r, j], y[r])


def emit_eigh(dl: Dialect, n: int, want_v: bool, complex_: bool = False) -> None:
    """Cyclic Jacobi on the Hermitian h{i}{j} (i <= j, the triangle the caller loaded; the
    diagonal REAL for complex): l{j} ascending (NaN for a non-finite input) and with
    ``want_v`` the eigenvectors v{i}{j} (columns), permuted alike."""
    diagonal = REAL if complex_ else FLOAT
    _emit_sanitize_and_scale(dl, [Var(f"h{i}{j}", diagonal if i == j else FLOAT)
                                  for i in range(n) for j in range(i, n)], complex_)
    bad, zerov, amax = Var("bad", BOOL), Var("zerov"), Var("amax", REAL)
    rotated = Var("rotated", BOOL)
    v, lam = Vars("v"), Vars("l", REAL)

    def h(i: int, j: int) -> Var:
        return Var(f"h{min(i, j)}{max(i, j)}", diagonal if i == j else FLOAT)

    def entry(i: int, j: int) -> Expr:
        """a_ij of the Hermitian matrix (the stored upper triangle, conjugated below it)."""
        return conj(h(i, j)) if complex_ and i > j else h(i, j)

    if want_v:
        for i in range(n):
            for j in range(n):
                dl.declare(FLOAT, f"v{i}{j}", Full(1.0 if i == j else 0.0))
    with dl.sweeps(JACOBI_MAX_SWEEPS, "rotated"):
        for p, q in _pairs(n):
            with dl.scope():
                apq = dl.declare(FLOAT, "apq", h(p, q))
                size = dl.declare(REAL, "off", modulus(apq)) if complex_ else modulus(apq)
                rot = dl.declare(BOOL, "rot", (
                    size > constant(dl.eps, REAL) * sqrt(abs_(h(p, p)))
                    * sqrt(abs_(h(q, q)))) & (size > dl.safe_min))
                dl.note_rotation(rotated, rot)
                # zeta = (a_qq - a_pp) / (2 a_pq) (over |a_pq| for complex, the phase going
                # into s); the diagonal moves by t a_pq (t |a_pq|).
                off = size if complex_ else apq
                _emit_tangent(dl, h(q, q) - h(p, p), 2.0 * off, apq / size if complex_ else None)
                dl.assign(_C, select(rot, _C, 1.0))
                dl.assign(_S, select(rot, _S, 0.0))
                dl.assign(_T, select(rot, _T, 0.0))
                dl.assign(h(p, p), h(p, p) - _T * off)
                dl.assign(h(q, q), h(q, q) + _T * off)
                dl.assign(h(p, q), select(rot, zerov, apq))
                for r in range(n):
                    if r in (p, q):
                        continue
                    if not complex_:
                        _emit_rotate(dl, h(r, p), h(r, q))
                        continue
                    # [a_rp, a_rq] <- [a_rp, a_rq] J (row r of A J; column r of J^H A is its
                    # conjugate), stored wherever the upper triangle holds them.
                    with dl.scope():
                        xr = dl.declare(FLOAT, "xr", entry(r, p))
                        yr = dl.declare(FLOAT, "yr", entry(r, q))
                        for (i, j), value in zip(((r, p), (r, q)), _rotated(xr, yr, True),
                                                 strict=True):
                            dl.assign(h(i, j), conj(value) if i > j else value)
                if want_v:
                    for i in range(n):
                        _emit_rotate(dl, v[i, p], v[i, q], complex_)
    for j in range(n):
        dl.declare(REAL, f"l{j}", re(h(j, j)))
    for a, b in _SORT_NETWORK[n]:  # ascending
        with dl.scope():
            sw = dl.declare(BOOL, "sw", lam[a] > lam[b])
            _emit_swap(dl, sw, lam[a], lam[b])
            if want_v:
                for i in range(n):
                    _emit_swap(dl, sw, v[i, a], v[i, b])
    for j in range(n):
        dl.assign(lam[j], select(bad, _nan_of(REAL, complex_), lam[j] * amax))
    if want_v:
        for i in range(n):
            for j in range(n):
                dl.assign(v[i, j], select(bad, _nan_of(FLOAT, complex_), v[i, j]))


# ------------------------------------------------------------------------------ matrix exponential
#
# Scaling and squaring with the [7/7] Padé approximant, as the metal path of
# mpslinalg/linalg/matrix_exp.py computes it (Higham 2005, "The scaling and squaring method for
# the matrix exponential revisited", SIAM J. Matrix Anal. Appl. 26(4), algorithm 2.3, with the
# single-precision theta_7 of its table 2.1): s = ceil(log2(||A||_1 / theta_7)), at least 0, the
# matrix scaled by 2^-s, r_7 = (V - U)^-1 (V + U) from A^2, A^4, A^6, the denominator solved
# by `emit_factor` / `emit_solve_vector`, then squared s times. s is found without a logarithm:
# the ratio r = ||A||_1 / theta_7 is divided by 2^64, 2^32, ..., 2^1 wherever it exceeds that
# power (exact: each is a power of two), and once more by 2 where the rest exceeds 1, so s is
# the least integer with r <= 2^s exactly (a float32 log2 rounds ratios just above a power of
# two down to it); a finite r is below 2^128, so s <= 128 = `EXPM_MAX_SQUARINGS`. The matrix is
# scaled along with r, step by step, so no factor is subnormal. A matrix with a non-finite
# entry is replaced by zeros (s = 0) and gets NaN in every entry.

#: Higham 2005, table 2.1, unit roundoff 2^-24: the largest ||A||_1 for which the [7/7] Padé
#: approximant is accurate to float32's unit roundoff.
EXPM_THETA_7 = 3.925724783138660

#: The coefficients b_0 .. b_7 of the [7/7] Padé approximant of exp (Higham 2005, eq. 2.2).
EXPM_PADE_7 = (17297280.0, 8648640.0, 1995840.0, 277200.0, 25200.0, 1512.0, 56.0, 1.0)

#: Squarings at most (a finite ||A||_1 / theta_7 is below 2^128 in float32).
EXPM_MAX_SQUARINGS = 128

#: The powers 2^b, b = 64 ... 1, that `emit_matrix_exp` divides the ratio by in turn.
_EXPM_STEPS = (64, 32, 16, 8, 4, 2, 1)


def _emit_product(dl: Dialect, out: str, left: Vars, right: Vars, n: int) -> Vars:
    """out{i}{j} = sum_k left{i}{k} right{k}{j} (declared; the sum left to right)."""
    for i in range(n):
        for j in range(n):
            dl.declare(FLOAT, f"{out}{i}{j}", _sum([left[i, k] * right[k, j] for k in range(n)]))
    return Vars(out)


def emit_matrix_exp(dl: Dialect, n: int) -> None:
    """exp(a{i}{j}) into e{i}{j} (n x n) by scaling and squaring (see the section above);
    the squarings are a loop of at most `EXPM_MAX_SQUARINGS` trips around `Dialect.sweeps`,
    each lane squaring while its own count lasts (selects), that a target leaves once no lane
    of its block needs more."""
    a, e = Vars("a"), Vars("e")
    entries = [a[i, j] for i in range(n) for j in range(n)]
    # x - x is 0 for a finite x, NaN for an infinite or NaN one (either part of a complex x)
    bad = nonzero(entries[0] - entries[0])
    for x in entries[1:]:
        bad = bad | nonzero(x - x)
    bad = dl.declare(BOOL, "bad", bad)
    zerov = dl.declare(FLOAT, "zerov", Full(0.0))
    nanv = dl.declare(FLOAT, "nanv", zerov / zerov)
    for x in entries:
        dl.assign(x, select(bad, zerov, x))
    # ||A||_1: the largest column sum of |a_ij| (NaN never wins: the matrix is finite now)
    norm = dl.declare(REAL, "norm", Full(0.0, REAL))
    for j in range(n):
        with dl.scope():
            col = dl.declare(REAL, "col", _sum([modulus(a[i, j]) for i in range(n)]))
            dl.assign(norm, select(col > norm, col, norm))
    ratio = dl.declare(REAL, "ratio", norm / constant(EXPM_THETA_7, REAL))
    left = dl.declare(INT, "left", Full(0, INT))
    for b in _EXPM_STEPS:
        with dl.scope():
            over = dl.declare(BOOL, "over", ratio > constant(float(2 ** b), REAL))
            _emit_scale_by(dl, over, 2.0 ** -b, ratio, entries)
            dl.assign(left, select(over, left + b, left))
    with dl.scope():
        over = dl.declare(BOOL, "over", ratio > constant(1.0, REAL))
        _emit_scale_by(dl, over, 0.5, ratio, entries)
        dl.assign(left, select(over, left + 1, left))
    # r_7(A) = (V - U)^-1 (V + U), U = A (b7 A^6 + b5 A^4 + b3 A^2 + b1 I), V = b6 A^6 + ...
    b = [constant(c, REAL) for c in EXPM_PADE_7]
    a2 = _emit_product(dl, "sq", a, a, n)
    a4 = _emit_product(dl, "qu", a2, a2, n)
    a6 = _emit_product(dl, "sx", a4, a2, n)

    def even(i: int, j: int, c: tuple[Expr, ...], unit: float) -> Expr:
        terms = c[0] * a6[i, j] + c[1] * a4[i, j] + c[2] * a2[i, j]
        return terms + unit if i == j else terms

    for i in range(n):
        for j in range(n):
            dl.declare(FLOAT, f"od{i}{j}", even(i, j, (b[7], b[5], b[3]), EXPM_PADE_7[1]))
            dl.declare(FLOAT, f"ev{i}{j}", even(i, j, (b[6], b[4], b[2]), EXPM_PADE_7[0]))
    u = _emit_product(dl, "u", a, Vars("od"), n)
    ev, num = Vars("ev"), Vars("nu")
    for i in range(n):
        for j in range(n):
            dl.declare(FLOAT, f"nu{i}{j}", ev[i, j] + u[i, j])
            dl.assign(a[i, j], ev[i, j] - u[i, j])
    emit_factor(dl, n)
    x = Vars("x")
    for j in range(n):
        with dl.scope():
            for i in range(n):
                dl.declare(FLOAT, f"x{i}", num[i, j])
            emit_solve_vector(dl, n)
            for i in range(n):
                dl.assign(num[i, j], x[i])
    for i in range(n):
        for j in range(n):
            dl.declare(FLOAT, f"e{i}{j}", num[i, j])
    more = Var("more", BOOL)
    with dl.sweeps(EXPM_MAX_SQUARINGS, "more"):
        with dl.scope():
            act = dl.declare(BOOL, "act", left > 0)
            square = _emit_product(dl, "pw", e, e, n)
            for i in range(n):
                for j in range(n):
                    dl.assign(e[i, j], select(act, square[i, j], e[i, j]))
            dl.assign(left, select(act, left - 1, left))
            dl.assign(more, more | (left > 0))
    for i in range(n):
        for j in range(n):
            dl.assign(e[i, j], select(bad, nanv, e[i, j]))


def _emit_scale_by(dl: Dialect, cond: Var, factor: float, ratio: Var, entries: list[Var]) -> None:
    """ratio and the entries multiplied by the power of two ``factor`` where ``cond``."""
    f = constant(factor, REAL)
    dl.assign(ratio, select(cond, ratio * f, ratio))
    for x in entries:
        dl.assign(x, select(cond, f * x, x))


# ------------------------------------------------------------------------------ Cholesky family
#
# cholesky_ex is LAPACK's unblocked potf2 (lower), left-looking, column by column: d = re(a_jj)
# - sum_k |l_jk|^2 (k = 0 .. j-1, subtracted in that order), the leading minor of order j + 1
# is positive where d > 0 (a NaN is not), then l_jj = sqrt(d) and l_ij = (a_ij - sum_k l_ik
# conj(l_jk)) r below it, r the pivot's reciprocal as torch's CPU factor (MKL) has it where
# the pivot is infinite: sqrt(d) / d for real (NaN below an infinite pivot; 1 / sqrt(d) would
# give zeros), 1 / sqrt(d) for complex, applied by a complex product (Inf becomes Inf + NaN i,
# as there). At the first column whose d is not positive (or NaN), potf2
# stores d on the diagonal and returns: that column's entries below the diagonal and every
# later column keep the input's values, and info = j + 1. torch.linalg.cholesky_ex on the CPU
# (MKL's potrf, torch 2.13) leaves exactly that pattern in the factor (checked entry by entry:
# tests/small/test_small_cholesky.py), so the description computes every column and selects the
# input's value wherever potf2 would have stopped. An upper factor is U = L^H of the Hermitian
# matrix whose lower triangle is the conjugate of the upper one the caller gave (potf2 with
# uplo 'U' does the same operations on the mirrored entries: conj(x) y and conj(x conj(y)) are
# the same bits), so one description serves both.
#
# No scaling: |l_ij| <= sqrt(a_ii) for a positive definite matrix, so no intermediate exceeds
# the largest diagonal entry and none is smaller than the square root of the smallest one
# (LAPACK's potf2 does not scale either); finite float32 input in about 1e-37 .. 3e38 factors to
# working accuracy.
#
# solve_triangular and cholesky_solve are column-oriented substitutions (trsm's left, no
# transpose order: x_k /= t_kk, then x_i -= t_ik x_k for the rows after k), every entry of x
# the same sequence of operations as trsm's dot-product forms. The right-sided X A = B is A^T
# X^T = B^T (no conjugation), each row of B one right-hand side; cholesky_solve is L y = b then
# L^H x = y (A = U^H U for upper: L = U^H), potrs' two solves. Nothing is checked and no zero is
# skipped: a zero diagonal gives Inf / NaN as the division does.


def _as_matrix_dtype(x: Expr, complex_: bool) -> Expr:
    """A REAL value as a value of the matrix dtype (imaginary part 0 for complex)."""
    return make_complex(x, 0.0) if complex_ else x


def emit_hermitian_lower(dl: Dialect, n: int, upper: bool, out: str,
                         complex_: bool = False) -> Vars:
    """out{i}{j} (i >= j) = the lower triangle of the Hermitian matrix given by its lower
    (a{i}{j}) or, with ``upper``, its upper triangle (conj(a{j}{i})); returns ``Vars(out)``."""
    a = Vars("a")
    for i in range(n):
        for j in range(i + 1):
            dl.declare(FLOAT, f"{out}{i}{j}", conj(a[j, i]) if upper and complex_ else (
                a[j, i] if upper else a[i, j]))
    return Vars(out)


def emit_cholesky(dl: Dialect, n: int, complex_: bool = False, cusolver: bool = False) -> None:
    """potf2 (see the section above) of the Hermitian matrix whose lower triangle is l{i}{j}
    (i >= j), in place: the factor L, or potf2's partial result where a leading minor is not
    positive; info (an INT) = the order of the first such minor, 0 if none.

    Non-finite pivots as torch's CPU factor has them (LAPACK's potf2: a NaN pivot is a failing
    minor, DISNAN), or with ``cusolver`` as torch's CUDA factor has them (cuSOLVER's potrf):
    only a pivot <= 0 fails, so a NaN runs on through the factor with info 0, and an infinite
    pivot's column below it is t / inf = 0."""
    lo = Vars("l")
    info = dl.declare(INT, "info", Full(0, INT))
    for j in range(n):
        with dl.scope():
            ok = dl.declare(BOOL, "ok", info.eq(0))
            d = dl.declare(REAL, "d", re(lo[j, j]))
            for k in range(j):
                dl.assign(d, d - _abs2(lo[j, k], complex_))
            pos = dl.declare(BOOL, "pos", ~(d <= 0.0) if cusolver else d > 0.0)
            take = dl.declare(BOOL, "take", ok & pos)
            s = dl.declare(REAL, "s", sqrt(d))
            # The pivot's reciprocal as torch's CPU factor has it where the pivot is infinite:
            # sqrt(d) / d (NaN) for real, 1 / sqrt(d) (0) applied by a complex product for
            # complex (Inf * 1 = Inf + NaN i)
            r = dl.declare(REAL, "r", constant(1.0, REAL) / s if complex_ else s / d)
            if cusolver and not complex_:
                dl.assign(r, select(isinf(s), constant(0.0, REAL), r))
            scale = _as_matrix_dtype(r, complex_)
            for i in range(j + 1, n):
                with dl.scope():
                    t = dl.declare(FLOAT, "t", lo[i, j])
                    for k in range(j):
                        dl.assign(t, t - lo[i, k] * conj(lo[j, k]))
                    dl.assign(lo[i, j], select(take, t * scale, lo[i, j]))
            dl.assign(info, select(ok & ~pos, j + 1, info))
            dl.assign(lo[j, j], select(take, _as_matrix_dtype(s, complex_), select(
                ok, _as_matrix_dtype(d, complex_), lo[j, j])))


def cholesky_factor_entry(n: int, upper: bool, complex_: bool = False
                          ) -> Callable[[int, int], Expr | None]:
    """Entry (i, j) of the stored factor after `emit_cholesky`: L's (lower) or L^H's (upper),
    None where the triangle is zero."""
    lo = Vars("l")

    def entry(i: int, j: int) -> Expr | None:
        if upper:
            return None if i > j else (conj(lo[j, i]) if complex_ else lo[j, i])
        return None if i < j else lo[i, j]

    return entry


def emit_triangular_solve(dl: Dialect, n: int, t: Callable[[int, int], Expr], lower: bool,
                          unit: bool = False) -> None:
    """x0..x{n-1} <- T^-1 x for the triangular T whose entry (i, j) is ``t(i, j)`` (asked only
    for the triangle ``lower`` names, the diagonal only without ``unit``), by column-oriented
    substitution (see the section above)."""
    x = Vars("x")
    order = list(range(n)) if lower else list(range(n - 1, -1, -1))
    for at, k in enumerate(order):
        if not unit:
            dl.assign(x[k], x[k] / t(k, k))
        for i in order[at + 1:]:
            dl.assign(x[i], x[i] - t(i, k) * x[k])


def triangular_entry(left: bool) -> Callable[[int, int], Expr]:
    """Entry (i, j) of the matrix solve_triangular substitutes with: A's (left), A^T's (right:
    X A = B is A^T X^T = B^T)."""
    a = Vars("a")
    return (lambda i, j: a[i, j]) if left else (lambda i, j: a[j, i])


def triangular_solves_lower(left: bool, upper: bool) -> bool:
    """Whether solve_triangular's substitution runs forward (its matrix is lower triangular):
    A lower on the left, A upper on the right (A^T lower)."""
    return upper != left


def emit_cholesky_solve(dl: Dialect, n: int, complex_: bool = False) -> None:
    """x <- A^-1 x for A = L L^H, L's lower triangle in l{i}{j} (i >= j): L y = x, then
    L^H x = y (potrs)."""
    lo = Vars("l")
    emit_triangular_solve(dl, n, lambda i, j: lo[i, j], lower=True)
    emit_triangular_solve(dl, n, lambda i, j: conj(lo[j, i]) if complex_ else lo[j, i],
                          lower=False)


# ------------------------------------------------------------------------------ eig (real)
#
# The nonsymmetric eigenproblem of a real n x n matrix (n <= 4) as LAPACK's geev computes it
# without balancing: Hessenberg reduction by Householder reflectors (gehd2, Q accumulated as
# orghr would), the Francis double-shift QR iteration of dlahqr on the whole Schur form
# (wantt, wantz), the 2 x 2 diagonal blocks standardised as dlanv2 does (a complex pair is then
# a +- i sqrt|b| sqrt|c|: exactly conjugate), the eigenvectors of the quasi-triangular T by
# back-substitution as dtrevc (a near-zero pivot replaced by smin = eps max(|lambda|, 1) of
# the scaled T: LAPACK's perturbation with a floor, so a Jordan block gives nearly parallel
# vectors as LAPACK's do, and no x overflows), transformed back by Z and normalised as dgeev:
# unit 2-norm, a complex vector rotated so that its
# component of largest modulus is real, with the sign of its real part.
#
# Straight-line code: the active window [l, i] of dlahqr is an INT pair per lane, found anew
# each sweep from the subdiagonal entries that deflation left nonzero (the largest i whose rows
# i - 2 .. i are unreduced; l the top of that unreduced block); the reflector of each static
# position k acts where l <= k <= i - 1 (tau = 0 elsewhere) and is applied to the whole rows and
# columns (entries outside the window are exact zeros, or belong to T's upper part, which the
# Schur form updates anyway). Deflation sets a subdiagonal entry to 0 by dlahqr's test (with
# Ahues and Tisseur's refinement); exceptional shifts at the 10th and 20th sweep without
# deflation (its % 20 == 10: from l's corner, 0 from i's: dlahqr's). The matrix is first divided
# by its largest |entry| (eigenvalues scaled back; eigenvectors do not change), so 1e+-30
# inputs work; a matrix with a non-finite entry is replaced by zeros for the iteration and gets
# NaN in every output, as does one whose iteration did not converge within `EIG_MAX_SWEEPS`.
# Eigenvalues come out in the order of T's diagonal, as geev's. Real arithmetic only: the
# complex solves of the eigenvector step are written on (re, im) pairs.

#: Francis sweeps at most per matrix (dlahqr allows 30 max(10, n) for the whole matrix; n <= 4
#: converges in a handful: the loop leaves once every lane deflated).
EIG_MAX_SWEEPS = 30 * MAX_N

#: dlahqr's exceptional-shift constants (dat1 = 3/4, dat2 = -0.4375).
_EIG_DAT1, _EIG_DAT2 = 0.75, -0.4375

#: dlahqr's kexsh: an exceptional shift every 10 sweeps without deflation, from l's corner and
#: i's in turn (its % 20 == 10 and == 0, counted in ``itp`` = its % 20).
_EIG_KEXSH = 10

#: dlanv2's threshold factor on eps for real eigenvalues of a 2 x 2 block.
_DLANV2_MULTPL = 4.0

#: Newton steps on the characteristic cubic of a 3 x 3 Hessenberg matrix (a real root, from
#: +-||H||_inf; see `_emit_cubic_shifts`): near a simple root the error squares each step, and
#: from the start a few steps of about a factor 2/3 come first.
_EIG_CUBIC_NEWTON = 10


def _sign(x: Expr, of: Expr) -> Expr:
    """Fortran's sign(|x|, of): |x| with the sign of ``of`` (>= 0 counts as positive)."""
    if isinstance(x, Const):
        return select(of < 0.0, Const(-abs(x.value), REAL), Const(abs(x.value), REAL))
    return select(of < 0.0, -abs_(x), abs_(x))


def _pick(index: Var, values: dict[int, Expr]) -> Expr:
    """The value of ``values`` at the lane's INT ``index`` (the last one otherwise)."""
    keys = sorted(values)
    out = values[keys[-1]]
    for k in reversed(keys[:-1]):
        out = select(index.eq(k), values[k], out)
    return out


def _any_of(x: Var, values: range) -> Expr:
    """x equals one of ``values`` (an INT)."""
    out = x.eq(values[0])
    for v in values[1:]:
        out = out | x.eq(v)
    return out


def _emit_deflate(dl: Dialect, n: int) -> None:
    """dlahqr's small-subdiagonal test on h{k}{k-1}, k = 1..n-1: set to 0 where negligible."""
    h = Vars("h")
    ulp, smlnum = constant(dl.eps, REAL), constant(dl.safe_min * (n / dl.eps), REAL)
    for k in range(1, n):
        with dl.scope():
            sub = dl.declare(REAL, "sub", abs_(h[k, k - 1]))
            tst = dl.declare(REAL, "tst", abs_(h[k - 1, k - 1]) + abs_(h[k, k]))
            extra = [abs_(h[k - 1, k - 2])] if k >= 2 else []
            extra += [abs_(h[k + 1, k])] if k + 1 < n else []
            if extra:
                dl.assign(tst, select(tst.eq(0.0), _sum(extra), tst))
            ab = dl.declare(REAL, "ab", select(sub > abs_(h[k - 1, k]), sub, abs_(h[k - 1, k])))
            ba = dl.declare(REAL, "ba", select(sub > abs_(h[k - 1, k]), abs_(h[k - 1, k]), sub))
            dd = dl.declare(REAL, "dd", abs_(h[k - 1, k - 1] - h[k, k]))
            aa = dl.declare(REAL, "aa", select(abs_(h[k, k]) > dd, abs_(h[k, k]), dd))
            bb = dl.declare(REAL, "bb", select(abs_(h[k, k]) > dd, dd, abs_(h[k, k])))
            s = dl.declare(REAL, "s", aa + ab)
            s = dl.declare(REAL, "ss", select(s.eq(0.0), 1.0, s))
            rhs = dl.declare(REAL, "rhs", ulp * (bb * (aa / s)))
            fine = (ba * (ab / s)) <= select(rhs > smlnum, rhs, smlnum)
            small = (sub <= smlnum) | ((sub <= ulp * tst) & fine)
            dl.assign(h[k, k - 1], select(small, 0.0, h[k, k - 1]))


def _emit_window(dl: Dialect, n: int, declared: bool = False) -> None:
    """act (a window of three or more unreduced rows remains), its bottom i and top l (declared
    here, or already, by an earlier call, with ``declared``)."""
    h = Vars("h")
    act, iw, lw = Var("act", BOOL), Var("iw", INT), Var("lw", INT)
    for var, value in ((act, 0), (iw, n - 1), (lw, 0)):
        if declared:
            dl.assign(var, Full(value, INT))
        else:
            dl.declare(var.kind, var.name, Full(value, INT))
    for i in range(2, n):  # ascending: the largest qualifying i wins
        with dl.scope():
            q = dl.declare(BOOL, "q", nonzero(h[i, i - 1]) & nonzero(h[i - 1, i - 2]))
            top = constant(0, INT)
            for k in range(1, i - 1):  # l = the largest k <= i - 2 with h[k, k-1] == 0
                top = select(is_zero(h[k, k - 1]), k, top)
            dl.assign(iw, select(q, i, iw))
            dl.assign(lw, select(q, top, lw))
            dl.assign(act, act | q)


def _emit_householder3(dl: Dialect, x: tuple[Expr, Expr, Expr]) -> tuple[Var, Var, Var, Var]:
    """dlarfg of (x0, x1, x2): (beta, tau, v1, v2), H = I - tau (1, v1, v2)(1, v1, v2)^T maps x
    to (beta, 0, 0); the identity (tau = 0, beta = x0) when x1 = x2 = 0."""
    x0 = dl.declare(REAL, "hx0", _filled(x[0]))
    x1 = dl.declare(REAL, "hx1", _filled(x[1]))
    two = isinstance(x[2], Const) and x[2].value == 0.0
    if two:
        # a reflector of two rows (the last step of a sweep or of the reduction): the norm of
        # (x1, 0) below is |x1| exactly (x1 / |x1| = +-1, sqrt(1) = 1; x1 = 0 gives 0), the
        # entries being finite (scaled to at most 1, non-finite input replaced by zeros), so
        # it is taken as such: one division and one square root fewer in every sweep
        xn = dl.declare(REAL, "hxn", abs_(x1))
    else:
        x2 = dl.declare(REAL, "hx2", _filled(x[2]))
        # the norms scaled by the larger part, as dnrm2 / dlapy2: tiny bulges late in the
        # iteration must not underflow to an identity reflector
        m = dl.declare(REAL, "hm", select(abs_(x1) > abs_(x2), abs_(x1), abs_(x2)))
        ms = dl.declare(REAL, "hms", select(m.eq(0.0), 1.0, m))
        xn = dl.declare(REAL, "hxn", m * sqrt((x1 / ms) * (x1 / ms) + (x2 / ms) * (x2 / ms)))
    ident = dl.declare(BOOL, "hid", xn.eq(0.0))
    norm = dl.declare(REAL, "hno", _lapy2(dl, x0, xn, "h"))
    beta = dl.declare(REAL, "hbeta", select(ident, x0, select(x0 < 0.0, norm, -norm)))
    bs = dl.declare(REAL, "hbs", select(ident, 1.0, beta))
    tau = dl.declare(REAL, "htau", select(ident, 0.0, (beta - x0) / bs))
    den = dl.declare(REAL, "hden", select(ident, 1.0, x0 - beta))
    v1 = dl.declare(REAL, "hv1", select(ident, 0.0, x1 / den))
    v2 = dl.declare(REAL, "hv2", Full(0.0, REAL) if two else select(ident, 0.0, x2 / den))
    return beta, tau, v1, v2


def _emit_reflect(dl: Dialect, n: int, rows: tuple[int, ...], tau: Expr, v: tuple[Expr, ...],
                  left_cols: range, right_rows: range, z: bool = True) -> None:
    """H = I - tau v v^T (v over ``rows``, v[0] = 1) applied from the left to h's columns
    ``left_cols``, from the right to h's rows ``right_rows`` (and to z's rows 0..n-1)."""
    h, zz = Vars("h"), Vars("z")
    t = [dl.declare(REAL, f"rt{p}", tau * v[p]) for p in range(len(rows))]
    for j in left_cols:
        with dl.scope():
            s = dl.declare(REAL, "rs", _sum([v[p] * h[r, j] if p else h[r, j]
                                             for p, r in enumerate(rows)]))
            for p, r in enumerate(rows):
                dl.assign(h[r, j], h[r, j] - s * t[p])
    targets = [(h, r) for r in right_rows] + ([(zz, r) for r in range(n)] if z else [])
    for m, r in targets:
        with dl.scope():
            s = dl.declare(REAL, "rs", _sum([m[r, c] * v[p] if p else m[r, c]
                                             for p, c in enumerate(rows)]))
            for p, c in enumerate(rows):
                dl.assign(m[r, c], m[r, c] - s * t[p])


def _emit_hessenberg(dl: Dialect, n: int, want_z: bool) -> None:
    """gehd2 of h{i}{j} in place with Z = Q (z{i}{j}, declared here)."""
    h = Vars("h")
    for i in range(n):
        for j in range(n):
            dl.declare(REAL, f"z{i}{j}", Full(1.0 if i == j else 0.0, REAL))
    for k in range(n - 2):
        rows = tuple(range(k + 1, n))
        with dl.scope():
            x = [h[r, k] for r in rows] + [constant(0.0, REAL)] * (3 - len(rows))
            beta, tau, v1, v2 = _emit_householder3(dl, tuple(x))
            v = (constant(1.0, REAL), v1, v2)[:len(rows)]
            dl.assign(h[k + 1, k], beta)
            for r in rows[1:]:
                dl.assign(h[r, k], Full(0.0, REAL))
            _emit_reflect(dl, n, rows, tau, v, range(k + 1, n), range(n), want_z)


def _emit_trailing_eigs(dl: Dialect, h11: Expr, h12: Expr, h21: Expr, h22: Expr,
                        p: str) -> tuple[Var, Var, Var, Var]:
    """dlahqr's reading of the 2 x 2 [[h11, h12], [h21, h22]] (its variables prefixed ``p``):
    (tr, rt, cpx, near): complex (or equal) eigenvalues tr +- i rt where cpx, else real ones
    tr +- rt, near the one nearest h22 (the double shift dlahqr then takes twice)."""
    tr = dl.declare(REAL, p + "tr", (h11 + h22) * 0.5)
    det = dl.declare(REAL, p + "det", (h11 - tr) * (h22 - tr) - h12 * h21)
    rt = dl.declare(REAL, p + "rtdisc", sqrt(abs_(det)))
    cpx = dl.declare(BOOL, p + "cpx", det >= 0.0)
    r1 = dl.declare(REAL, p + "r1", tr + rt)
    r2 = dl.declare(REAL, p + "r2", tr - rt)
    near = dl.declare(REAL, p + "near", select(abs_(r1 - h22) <= abs_(r2 - h22), r1, r2))
    return tr, rt, cpx, near


def _emit_shifts(dl: Dialect, n: int) -> None:
    """dlahqr's shifts (s1r, s1i, s2r, s2i) of the window's trailing 2 x 2 (exceptional at
    its % 20 == 10 / 0)."""
    h = Vars("h")
    iw, lw, its, itp = Var("iw", INT), Var("lw", INT), Var("its", INT), Var("itp", INT)
    ii = range(2, n)
    h11 = dl.declare(REAL, "g11", _pick(iw, {i: h[i - 1, i - 1] for i in ii}))
    h12 = dl.declare(REAL, "g12", _pick(iw, {i: h[i - 1, i] for i in ii}))
    h21 = dl.declare(REAL, "g21", _pick(iw, {i: h[i, i - 1] for i in ii}))
    h22 = dl.declare(REAL, "g22", _pick(iw, {i: h[i, i] for i in ii}))
    # exceptional shifts: from l's corner at its = 10, 30, ..., from i's at 20, 40, ...
    with dl.scope():
        # two comparisons of the counter modulo 20, not one per multiple of 10 below the bound
        exl = dl.declare(BOOL, "exl", itp.eq(_EIG_KEXSH))
        exi = dl.declare(BOOL, "exi", itp.eq(0) & (its > 0))
        sl = dl.declare(REAL, "sl", _pick(lw, {l: abs_(h[l + 1, l]) + abs_(h[l + 2, l + 1])
                                               for l in range(n - 2)}))
        hl = _pick(lw, {l: h[l, l] for l in range(n - 2)})
        si = dl.declare(REAL, "si", _pick(iw, {i: abs_(h[i, i - 1]) + abs_(h[i - 1, i - 2])
                                               for i in ii}))
        ex = dl.declare(BOOL, "ex", exl | exi)
        s = dl.declare(REAL, "exs", select(exl, sl, si))
        e11 = dl.declare(REAL, "e11", constant(_EIG_DAT1, REAL) * s + select(exl, hl, h22))
        dl.assign(h11, select(ex, e11, h11))
        dl.assign(h12, select(ex, constant(_EIG_DAT2, REAL) * s, h12))
        dl.assign(h21, select(ex, s, h21))
        dl.assign(h22, select(ex, e11, h22))
    s = dl.declare(REAL, "shs", abs_(h11) + abs_(h12) + abs_(h21) + abs_(h22))
    ss = dl.declare(REAL, "shd", select(s.eq(0.0), 1.0, s))
    for x in (h11, h12, h21, h22):
        dl.assign(x, x / ss)
    tr, rt, cpx, near = _emit_trailing_eigs(dl, h11, h12, h21, h22, "")
    dl.declare(REAL, "s1r", select(cpx, tr, near) * s)
    dl.declare(REAL, "s2r", select(cpx, tr, near) * s)
    dl.declare(REAL, "s1i", select(cpx, rt * s, 0.0))
    dl.declare(REAL, "s2i", select(cpx, -(rt * s), 0.0))
    if n == 3:  # the first sweep's shifts: two roots of the cubic (`_emit_cubic_shifts`)
        first = Var("cfirst", BOOL)
        for x in ("s1r", "s1i", "s2r", "s2i"):
            dl.assign(Var(x, REAL), select(first, Var("c" + x, REAL), Var(x, REAL)))


def _emit_cubic_shifts(dl: Dialect) -> None:
    """cs1r, cs1i, cs2r, cs2i: the first sweep's double shift for the 3 x 3 Hessenberg h (n = 3
    only), eigenvalues of h: a complex pair, or one real eigenvalue twice.

    With exact eigenvalues as its shifts a sweep deflates at once in exact arithmetic: a pair
    of them leaves h10 = 0 and the pair in the trailing 2 x 2 (rank (H - s1)(H - s2) = 1), one
    of them twice leaves h21 = 0 and it at the bottom (a shifted QR step with an exact
    eigenvalue deflates it: Watkins, *Fundamentals of Matrix Computations*, 3rd ed., sec. 5.6),
    where dlahqr's first shifts, the eigenvalues of the trailing 2 x 2 as it stands, take a few
    sweeps to get there. A program's trip count is its slowest lane's: on random input the
    lanes' sweeps went from 3.1 to 1.4 on average, a 128-lane program's from 8.0 to 2.0.
    A real root mu of p(x) = det(x I - H) = x^3 + c2 x^2 + c1 x + c0 is found by Newton's method
    from +-||H||_inf, beyond every real root: from above where p is not positive at the
    inflection point -c2 / 3 (a root lies right of it, where p is convex and increasing), from
    below otherwise (a root lies left of it, where p is concave and increasing), so the iterates
    move monotonically to that root (in exact arithmetic); they are kept in
    [-||H||_inf, ||H||_inf], and a zero derivative takes no step. From that start a fixed number
    of steps converged on every random matrix tried (error at most 1e-11 after 10 steps in
    float64 over 8192 of them). The other two are the roots of the quadratic left by dividing
    out x - mu. Any finite shifts keep the iteration backward stable (they only choose which
    similarity transforms are applied), so an inaccurate root (a cluster) costs sweeps, never
    accuracy; the entries are at most 1 in modulus here (scaled), so nothing overflows."""
    h = Vars("h")
    c2 = dl.declare(REAL, "cc2", -(h[0, 0] + h[1, 1] + h[2, 2]))
    m12 = dl.declare(REAL, "cm12", h[1, 1] * h[2, 2] - h[1, 2] * h[2, 1])
    c1 = dl.declare(REAL, "cc1", (h[0, 0] * h[1, 1] - h[0, 1] * h[1, 0]) + h[0, 0] * h[2, 2] + m12)
    c0 = dl.declare(REAL, "cc0", h[1, 0] * (h[0, 1] * h[2, 2] - h[0, 2] * h[2, 1])
                    - h[0, 0] * m12)
    rows = [abs_(h[i, 0]) + abs_(h[i, 1]) + abs_(h[i, 2]) if i < 2
            else abs_(h[2, 1]) + abs_(h[2, 2]) for i in range(3)]
    top = dl.declare(REAL, "cub", rows[0])
    for r in rows[1:]:
        dl.assign(top, select(r > top, r, top))
    xi = dl.declare(REAL, "cxi", c2 * (-1.0 / 3.0))
    below = dl.declare(BOOL, "cbelow", ((xi + c2) * xi + c1) * xi + c0 <= 0.0)
    x = dl.declare(REAL, "cx", select(below, top, -top))
    for _ in range(_EIG_CUBIC_NEWTON):
        with dl.scope():
            px = dl.declare(REAL, "cp", ((x + c2) * x + c1) * x + c0)
            dp = dl.declare(REAL, "cdp", (3.0 * x + 2.0 * c2) * x + c1)
            step = dl.declare(REAL, "cst", px / select(dp.eq(0.0), 1.0, dp))
            nx = dl.declare(REAL, "cnx", x - select(dp.eq(0.0), 0.0, step))
            nx = dl.declare(REAL, "cny", select(nx > top, top, nx))
            dl.assign(x, select(nx < -top, -top, nx))
    b = dl.declare(REAL, "cb", (c2 + x) * 0.5)  # x^2 + 2 b x + c: the other two roots
    c = dl.declare(REAL, "cc", c1 + x * (c2 + x))
    disc = dl.declare(REAL, "cdisc", b * b - c)
    rt = dl.declare(REAL, "crt", sqrt(abs_(disc)))
    pair = dl.declare(BOOL, "cpair", disc < 0.0)
    # Which eigenvalues the shifts take, so that T's diagonal (the order of the eigenvalues)
    # is mostly the one dlahqr's own shifts lead to: with its first shifts s, conj(s) (the
    # trailing 2 x 2's eigenvalues; a real one nearest h22, twice, when both are real) the
    # iteration moves the eigenvalues of least pi(lambda) = |lambda - s| |lambda - conj(s)| to
    # the bottom. Three real roots: the least one, a, twice (a double single shift: h21 = 0, a
    # at the bottom). A complex pair goes together: mu twice if pi(mu) is the least, else the
    # pair (h10 = 0). (Measured on 8192 random matrices: the order differs from LAPACK's geev,
    # which balances, for 6.4% of them, 2.4% with dlahqr's shifts alone; taking the least two
    # real roots where pi(a) / pi(b) < pi(b) / pi(c) fails gave 8.6% and more sweeps.)
    tr, rt2, cpx, near = _emit_trailing_eigs(dl, h[1, 1], h[1, 2], h[2, 1], h[2, 2], "c")
    sr = dl.declare(REAL, "csr", select(cpx, tr, near))
    si = dl.declare(REAL, "csi", select(cpx, rt2, 0.0))

    def pi2(re_: Expr, im_: Expr) -> Expr:  # pi(lambda)^2
        d = re_ - sr
        return (d * d + (im_ - si) * (im_ - si)) * (d * d + (im_ + si) * (im_ + si))

    zero = Full(0.0, REAL)
    qmu = dl.declare(REAL, "cqmu", pi2(x, zero))
    least = dl.declare(REAL, "cla", x)  # the real root of least pi
    qmin = dl.declare(REAL, "cqa", qmu)
    for root in (-b + rt, -b - rt):
        with dl.scope():
            r = dl.declare(REAL, "cr", root)
            qr = dl.declare(REAL, "cqr", pi2(r, zero))
            dl.assign(least, select(qr < qmin, r, least))
            dl.assign(qmin, select(qr < qmin, qr, qmin))
    lone_mu = dl.declare(BOOL, "clm", qmu < pi2(-b, rt))
    real1 = dl.declare(REAL, "creal", select(pair, select(lone_mu, x, -b), least))
    dl.declare(REAL, "cs1r", real1)
    dl.declare(REAL, "cs2r", real1)
    dl.declare(REAL, "cs1i", select(pair & ~lone_mu, rt, 0.0))
    dl.declare(REAL, "cs2i", select(pair & ~lone_mu, -rt, 0.0))


def _emit_francis(dl: Dialect, n: int, want_z: bool) -> None:
    """One double-shift sweep of dlahqr over each lane's window (no-op where act is false)."""
    h = Vars("h")
    act, iw, lw = Var("act", BOOL), Var("iw", INT), Var("lw", INT)
    _emit_shifts(dl, n)
    s1r, s1i, s2r, s2i = (Var(x, REAL) for x in ("s1r", "s1i", "s2r", "s2i"))
    # the first column of (H - s1)(H - s2) at l, scaled (dlahqr with m = l)
    hm = {x: dl.declare(REAL, f"f{x}", _pick(lw, {l: h[l + a, l + b] for l in range(n - 2)}))
          for x, (a, b) in {"00": (0, 0), "01": (0, 1), "10": (1, 0), "11": (1, 1),
                            "21": (2, 1)}.items()}
    s = dl.declare(REAL, "fs", abs_(hm["00"] - s2r) + abs_(s2i) + abs_(hm["10"]))
    s = dl.declare(REAL, "fss", select(s.eq(0.0), 1.0, s))
    h21s = dl.declare(REAL, "h21s", hm["10"] / s)
    w1 = dl.declare(REAL, "w1", h21s * hm["01"] + (hm["00"] - s1r) * ((hm["00"] - s2r) / s)
                    - s1i * (s2i / s))
    w2 = dl.declare(REAL, "w2", h21s * (hm["00"] + hm["11"] - s1r - s2r))
    w3 = dl.declare(REAL, "w3", h21s * hm["21"])
    s = dl.declare(REAL, "ws", abs_(w1) + abs_(w2) + abs_(w3))
    s = dl.declare(REAL, "wss", select(s.eq(0.0), 1.0, s))
    for x in (w1, w2, w3):
        dl.assign(x, x / s)
    for k in range(n - 1):
        with dl.scope():
            on = dl.declare(BOOL, "on", act & (lw <= k) & (iw > k))
            first = dl.declare(BOOL, "first", lw.eq(k))
            three = k + 2 < n
            th = dl.declare(BOOL, "th", iw >= k + 2) if three else None
            x = [select(first, w1, h[k, k - 1] if k else 0.0),
                 select(first, w2, h[k + 1, k - 1] if k else 0.0),
                 select(th, select(first, w3, h[k + 2, k - 1] if k else 0.0), 0.0)
                 if three else constant(0.0, REAL)]
            beta, tau, v1, v2 = _emit_householder3(dl, tuple(x))
            dl.assign(tau, select(on, tau, 0.0))
            if k:
                keep = on & ~first
                dl.assign(h[k, k - 1], select(keep, beta, h[k, k - 1]))
                dl.assign(h[k + 1, k - 1], select(keep, 0.0, h[k + 1, k - 1]))
                if three:
                    dl.assign(h[k + 2, k - 1], select(keep & th, 0.0, h[k + 2, k - 1]))
            rows = (k, k + 1, k + 2) if three else (k, k + 1)
            v = (constant(1.0, REAL), v1, v2)[:len(rows)]
            _emit_reflect(dl, n, rows, tau, v, range(k, n), range(n), want_z)


def _emit_lanv2(dl: Dialect, n: int, k: int, want_z: bool) -> None:
    """dlanv2 on the diagonal block at rows k, k + 1 where its subdiagonal is nonzero, the
    rotation applied to the rest of h and to z (drot, as dlahqr does after it)."""
    h, zz = Vars("h"), Vars("z")
    eps = constant(dl.eps, REAL)
    blk = dl.declare(BOOL, "blk", nonzero(h[k + 1, k]))
    a = dl.declare(REAL, "la", h[k, k])
    b = dl.declare(REAL, "lb", h[k, k + 1])
    c = dl.declare(REAL, "lc", h[k + 1, k])
    d = dl.declare(REAL, "ld", h[k + 1, k + 1])
    cs = dl.declare(REAL, "cs", Full(1.0, REAL))
    sn = dl.declare(REAL, "sn", Full(0.0, REAL))
    # case b == 0: swap rows and columns
    bz = dl.declare(BOOL, "bz", blk & b.eq(0.0))
    # case standard already: a == d and sign(b) != sign(c)
    std = dl.declare(BOOL, "std", blk & ~bz & (a - d).eq(0.0)
                     & (b < 0.0).ne(c < 0.0))
    gen = dl.declare(BOOL, "gen", blk & ~bz & ~std)
    temp = dl.declare(REAL, "ltemp", a - d)
    p = dl.declare(REAL, "lp", temp * 0.5)
    bcmax = dl.declare(REAL, "bcmax", select(abs_(b) > abs_(c), abs_(b), abs_(c)))
    bcmis = dl.declare(REAL, "bcmis", select(abs_(b) > abs_(c), abs_(c), abs_(b))
                       * _sign(constant(1.0, REAL), b) * _sign(constant(1.0, REAL), c))
    scale = dl.declare(REAL, "lscale", select(abs_(p) > bcmax, abs_(p), bcmax))
    scl = dl.declare(REAL, "lscl", select(scale.eq(0.0), 1.0, scale))
    z = dl.declare(REAL, "lz", p / scl * p + bcmax / scl * bcmis)
    real = dl.declare(BOOL, "lreal", gen & (z >= constant(_DLANV2_MULTPL, REAL) * eps))
    cplx = dl.declare(BOOL, "lcplx", gen & ~real)
    # real eigenvalues
    with dl.scope():
        zr = dl.declare(REAL, "zr", p + _sign(sqrt(scl) * sqrt(select(real, z, 0.0)), p))
        zrs = dl.declare(REAL, "zrs", select(zr.eq(0.0), 1.0, zr))
        ra = dl.declare(REAL, "ra", d + zr)
        rd = dl.declare(REAL, "rd", d - bcmax / zrs * bcmis)
        tau = dl.declare(REAL, "rtau", _lapy2(dl, c, zr, "r"))
        taus = dl.declare(REAL, "rtaus", select(tau.eq(0.0), 1.0, tau))
        dl.assign(cs, select(real, zr / taus, cs))
        dl.assign(sn, select(real, c / taus, sn))
        rb = dl.declare(REAL, "rb", b - c)
        # complex or nearly equal real eigenvalues: make the diagonal equal
        # the rotation depends on sigma : temp only, taken as their ratio to the larger (dlanv2
        # scales them by powers of two instead): a - d may be subnormal, its few bits exact
        sigma = dl.declare(REAL, "sigma", b + c)
        big = dl.declare(REAL, "cbig", select(abs_(sigma) > abs_(temp), abs_(sigma),
                                              abs_(temp)))
        big = dl.declare(REAL, "cbigs", select(big.eq(0.0), 1.0, big))
        sgn = dl.declare(REAL, "csig", sigma / big)
        ctemp = dl.declare(REAL, "ctemp", temp / big)
        tau2 = dl.declare(REAL, "ctau", _lapy2(dl, sgn, ctemp, "c"))
        tau2 = dl.declare(REAL, "ctaus", select(tau2.eq(0.0), 1.0, tau2))
        ccs = dl.declare(REAL, "ccs", sqrt((1.0 + abs_(sgn) / tau2) * 0.5))
        csn = dl.declare(REAL, "csn", -(ctemp * 0.5 / (tau2 * ccs))
                         * _sign(constant(1.0, REAL), sigma))
        aa = dl.declare(REAL, "aa", a * ccs + b * csn)
        bb = dl.declare(REAL, "bb", -(a * csn) + b * ccs)
        cc = dl.declare(REAL, "cc", c * ccs + d * csn)
        dd = dl.declare(REAL, "dd", -(c * csn) + d * ccs)
        ca = dl.declare(REAL, "ca", aa * ccs + cc * csn)
        cb = dl.declare(REAL, "cb", bb * ccs + dd * csn)
        cc2 = dl.declare(REAL, "cc2", -(aa * csn) + cc * ccs)
        cd = dl.declare(REAL, "cd", -(bb * csn) + dd * ccs)
        mid = dl.declare(REAL, "mid", (ca + cd) * 0.5)
        cnz = dl.declare(BOOL, "cnz", cc2.ne(0.0))
        bnz = dl.declare(BOOL, "bnz", cb.ne(0.0))
        same = dl.declare(BOOL, "same", cnz & bnz & ((cb < 0.0).eq(cc2 < 0.0)))
        flip = dl.declare(BOOL, "flip", cnz & ~bnz)
        sab = dl.declare(REAL, "sab", sqrt(abs_(cb)))
        sac = dl.declare(REAL, "sac", sqrt(abs_(cc2)))
        pp = dl.declare(REAL, "pp", _sign(sab * sac, cc2))
        tt = dl.declare(REAL, "tt", constant(1.0, REAL) / sqrt(select(same, abs_(cb + cc2),
                                                                          1.0)))
        cs1 = dl.declare(REAL, "cs1", sab * tt)
        sn1 = dl.declare(REAL, "sn1", sac * tt)
        # the complex branch's outputs
        fa = dl.declare(REAL, "fa", select(same, mid + pp, mid))
        fd = dl.declare(REAL, "fd", select(same, mid - pp, mid))
        fb = dl.declare(REAL, "fb", select(same, cb - cc2, select(flip, -cc2, cb)))
        fc = dl.declare(REAL, "fc", select(same | flip, 0.0, cc2))
        fcs = dl.declare(REAL, "fcs", select(same, ccs * cs1 - csn * sn1, select(flip, -csn,
                                                                                ccs)))
        fsn = dl.declare(REAL, "fsn", select(same, ccs * sn1 + csn * cs1, select(flip, ccs,
                                                                                csn)))
        dl.assign(cs, select(cplx, fcs, select(bz, 0.0, cs)))
        dl.assign(sn, select(cplx, fsn, select(bz, 1.0, sn)))
        na = select(real, ra, select(cplx, fa, select(bz, d, a)))
        nd = select(real, rd, select(cplx, fd, select(bz, a, d)))
        nb = select(real, rb, select(cplx, fb, select(bz, -c, b)))
        nc = select(real | bz, 0.0, select(cplx, fc, c))
        dl.assign(h[k, k], na)
        dl.assign(h[k + 1, k + 1], nd)
        dl.assign(h[k, k + 1], nb)
        dl.assign(h[k + 1, k], nc)
    # drot: rows k, k+1 right of the block, columns k, k+1 above it, z's columns k, k+1
    pairs = [(h[k, j], h[k + 1, j]) for j in range(k + 2, n)]
    pairs += [(h[r, k], h[r, k + 1]) for r in range(k)]
    pairs += [(zz[r, k], zz[r, k + 1]) for r in range(n)] if want_z else []
    for x, y in pairs:
        with dl.scope():
            xs = dl.declare(REAL, "xs", x)
            dl.assign(x, cs * xs + sn * y)
            dl.assign(y, cs * y - sn * xs)


def _lapy2(dl: Dialect, x: Expr, y: Expr, p: str) -> Expr:
    """sqrt(x^2 + y^2) without overflow (dlapy2): w sqrt(1 + (z / w)^2)."""
    ax = dl.declare(REAL, p + "px", abs_(x))
    ay = dl.declare(REAL, p + "py", abs_(y))
    w = dl.declare(REAL, p + "pw", select(ax > ay, ax, ay))
    z = dl.declare(REAL, p + "pz", select(ax > ay, ay, ax))
    ws = dl.declare(REAL, p + "pws", select(w.eq(0.0), 1.0, w))
    r = dl.declare(REAL, p + "pr", z / ws)
    return select(z.eq(0.0), w, w * sqrt(1.0 + r * r))


# complex arithmetic on (re, im) pairs of REAL expressions, for the eigenvector solves
def _cmul(a: tuple[Expr, Expr], b: tuple[Expr, Expr]) -> tuple[Expr, Expr]:
    return a[0] * b[0] - a[1] * b[1], a[0] * b[1] + a[1] * b[0]


def _emit_cdiv(dl: Dialect, a: tuple[Expr, Expr], b: tuple[Var, Var], name: str
               ) -> tuple[Var, Var]:
    """a / b by Smith's algorithm, declared as ``name``r / ``name``i. Each quotient divides the
    selected operands (the same value as selecting between the two quotients): a straight-line
    target computes both branches of a select, so three divisions, not six."""
    wide = dl.declare(BOOL, f"{name}w", abs_(b[0]) >= abs_(b[1]))
    r = dl.declare(REAL, f"{name}q", select(wide, b[1], b[0]) / select(wide, b[0], b[1]))
    den = dl.declare(REAL, f"{name}d", select(wide, b[0] + b[1] * r, b[1] + b[0] * r))
    re_ = dl.declare(REAL, f"{name}r", select(wide, a[0] + a[1] * r, a[0] * r + a[1]) / den)
    im_ = dl.declare(REAL, f"{name}i", select(wide, a[1] - a[0] * r, a[1] * r - a[0]) / den)
    return re_, im_


def _emit_eigvec(dl: Dialect, n: int, k: int) -> None:
    """x{k}_{j}r / i: the eigenvector of T for the eigenvalue of slot k (wr{k}, wi{k}) where k
    is a real eigenvalue or the first of a complex pair (dtrevc's back-substitution; the
    second of a pair is the conjugate of the first, selected by the caller)."""
    h = Vars("h")
    wr, wi = Var(f"wr{k}", REAL), Var(f"wi{k}", REAL)
    first = Var(f"top{k}", BOOL) if k + 1 < n else None
    # dtrevc's smin = max(eps |lambda|, smlnum), floored at eps ||T|| instead (T is scaled to
    # entries of at most about 1): a perturbation within the backward error, so that no step of
    # the substitution grows x by more than 1 / eps (dtrevc rescales instead) and three steps
    # stay finite, as on a nilpotent Jordan block
    smin = dl.declare(REAL, f"smin{k}", select(
        constant(dl.eps, REAL) * (abs_(wr) + abs_(wi)) > dl.eps,
        constant(dl.eps, REAL) * (abs_(wr) + abs_(wi)), dl.eps))
    xr = {j: constant(0.0, REAL) for j in range(n)}
    xi = dict(xr)
    if first is None:
        xr[k] = constant(1.0, REAL)
    else:
        b, c = h[k, k + 1], h[k + 1, k]
        xr[k] = dl.declare(REAL, f"u{k}a", select(first, sqrt(abs_(b)), 1.0))
        xi[k + 1] = dl.declare(REAL, f"u{k}b", select(first, _sign(sqrt(abs_(c)), b), 0.0))
    # (T[:k, :k] - lambda) y = -T[:k, k:k+2] u, upper Hessenberg: eliminate row j + 1 by row
    # j with partial pivoting between the two, then back-substitute
    m = {(i, j): (h[i, j] - wr if i == j else h[i, j], -wi if i == j else constant(0.0, REAL))
         for i in range(k) for j in range(k) if j >= i - 1}
    rhs = {}
    for i in range(k):
        terms = [h[i, c] * xr[c] for c in (k, k + 1) if c < n and c in xr]
        rr = -_sum(terms)
        ri = -_sum([h[i, c] * xi[c] for c in (k, k + 1) if c < n]) if k + 1 < n else \
            constant(0.0, REAL)
        rhs[i] = (dl.declare(REAL, f"b{k}{i}r", rr), dl.declare(REAL, f"b{k}{i}i", _filled(ri)))
    mv = {}
    for (i, j), (vr, vi) in m.items():
        mv[i, j] = (dl.declare(REAL, f"m{k}{i}{j}r", _filled(vr)),
                    dl.declare(REAL, f"m{k}{i}{j}i", _filled(vi)))
    for j in range(k - 1):
        with dl.scope():
            sw = dl.declare(BOOL, "sw", abs_(mv[j + 1, j][0]) + abs_(mv[j + 1, j][1])
                            > abs_(mv[j, j][0]) + abs_(mv[j, j][1]))
            for c in range(j, k):
                for part in (0, 1):
                    _emit_swap(dl, sw, mv[j, c][part], mv[j + 1, c][part])
            for part in (0, 1):
                _emit_swap(dl, sw, rhs[j][part], rhs[j + 1][part])
            _emit_perturb(dl, mv[j, j], smin)
            f = _emit_cdiv(dl, mv[j + 1, j], mv[j, j], "mu")
            for c in range(j + 1, k):
                pr, pi = _cmul(f, mv[j, c])
                dl.assign(mv[j + 1, c][0], mv[j + 1, c][0] - pr)
                dl.assign(mv[j + 1, c][1], mv[j + 1, c][1] - pi)
            pr, pi = _cmul(f, rhs[j])
            dl.assign(rhs[j + 1][0], rhs[j + 1][0] - pr)
            dl.assign(rhs[j + 1][1], rhs[j + 1][1] - pi)
    sol = {}
    for j in range(k - 1, -1, -1):
        sol[j] = (dl.declare(REAL, f"y{k}{j}r", Full(0.0, REAL)),
                  dl.declare(REAL, f"y{k}{j}i", Full(0.0, REAL)))
        with dl.scope():
            sr, si = rhs[j]
            for c in range(j + 1, k):
                pr, pi = _cmul(mv[j, c], sol[c])
                sr, si = sr - pr, si - pi
            num = (dl.declare(REAL, "nr", sr), dl.declare(REAL, "ni", si))
            _emit_perturb(dl, mv[j, j], smin)
            qr_, qi_ = _emit_cdiv(dl, num, mv[j, j], "q")
            dl.assign(sol[j][0], qr_)
            dl.assign(sol[j][1], qi_)
    for j in range(n):
        dl.declare(REAL, f"x{k}_{j}r", sol[j][0] if j in sol else _filled(xr[j]))
        dl.declare(REAL, f"x{k}_{j}i", sol[j][1] if j in sol else _filled(xi[j]))


def _filled(e: Expr) -> Expr:
    """A constant as a value with every lane it (a declaration's initial value)."""
    return Full(e.value, e.kind) if isinstance(e, Const) else e


def _emit_perturb(dl: Dialect, p: tuple[Var, Var], smin: Var) -> None:
    """dtrevc's perturbation: a pivot with |re| + |im| < smin becomes smin."""
    small = abs_(p[0]) + abs_(p[1]) < smin
    dl.assign(p[1], select(small, 0.0, p[1]))
    dl.assign(p[0], select(small, smin, p[0]))


def emit_eig(dl: Dialect, n: int, want_v: bool) -> None:
    """The eigenvalues of the real a{i}{j} (n x n; see the section above) into wre{k}, wim{k}
    (REAL), with ``want_v`` the unit eigenvectors (columns) into vre{i}{k}, vim{i}{k}; NaN
    everywhere for a non-finite input or an iteration that did not converge."""
    a, h = Vars("a"), Vars("h")
    for i in range(n):
        for j in range(n):
            dl.declare(REAL, f"h{i}{j}", a[i, j])
    _emit_sanitize_and_scale(dl, [h[i, j] for i in range(n) for j in range(n)])
    bad, amax, nanv = Var("bad", BOOL), Var("amax", REAL), Var("nanv", REAL)
    if n >= 3:
        _emit_hessenberg(dl, n, want_v)
        its = dl.declare(INT, "its", Full(0, INT))
        itp = dl.declare(INT, "itp", Full(0, INT))
        iprev = dl.declare(INT, "iprev", Full(-1, INT))
        more, act, iw = Var("more", BOOL), Var("act", BOOL), Var("iw", INT)

        def deflate_and_find_window(declared: bool) -> None:
            _emit_deflate(dl, n)
            _emit_window(dl, n, declared)
            dl.assign(its, select(iw.eq(iprev), its + 1, 0))
            dl.assign(itp, select(iw.eq(iprev), select(itp.eq(2 * _EIG_KEXSH - 1), 0, itp + 1),
                                  0))
            dl.assign(iprev, iw)

        # Deflation and the window of the next sweep end each sweep (the first ones precede the
        # loop), so that the loop leaves right after the last sweep that had work: the test at
        # the top of a sweep would cost a whole sweep of no-ops (tau = 0) after it, on every
        # target (a lane that deflated keeps its bits: the steps are idempotent there)
        deflate_and_find_window(False)
        if n == 3:
            _emit_cubic_shifts(dl)
            first = dl.declare(BOOL, "cfirst", Full(1, INT))
        with dl.sweeps(EIG_MAX_SWEEPS, "more"):
            with dl.scope():
                _emit_francis(dl, n, want_v)
                deflate_and_find_window(True)
                dl.assign(more, more | act)
                if n == 3:
                    dl.assign(first, Full(0, INT))
        fail = dl.declare(BOOL, "fail", bad | act)
    else:
        for i in range(n):
            for j in range(n):
                dl.declare(REAL, f"z{i}{j}", Full(1.0 if i == j else 0.0, REAL))
        fail = bad
    for k in range(n - 1):
        with dl.scope():
            _emit_lanv2(dl, n, k, want_v)
    for k in range(n):
        top = dl.declare(BOOL, f"top{k}", nonzero(h[k + 1, k])) if k + 1 < n else None
        bot = dl.declare(BOOL, f"bot{k}", nonzero(h[k, k - 1])) if k else None
        wi = constant(0.0, REAL)
        if bot is not None:
            wi = select(bot, -(sqrt(abs_(h[k - 1, k])) * sqrt(abs_(h[k, k - 1]))), wi)
        if top is not None:
            wi = select(top, sqrt(abs_(h[k, k + 1])) * sqrt(abs_(h[k + 1, k])), wi)
        dl.declare(REAL, f"wr{k}", h[k, k])
        dl.declare(REAL, f"wi{k}", _filled(wi))
    if want_v:
        for k in range(n):
            _emit_eigvec(dl, n, k)
            _emit_back_transform(dl, n, k)
        for k in range(1, n):  # the second of a pair: the conjugate of the first's vector
            with dl.scope():
                bot = Var(f"bot{k}", BOOL)
                for i in range(n):
                    dl.assign(f"vre{i}{k}", select(bot, Var(f"vre{i}{k - 1}", REAL),
                                                   Var(f"vre{i}{k}", REAL)))
                    dl.assign(f"vim{i}{k}", select(bot, -Var(f"vim{i}{k - 1}", REAL),
                                                   Var(f"vim{i}{k}", REAL)))
        for k in range(n):
            for i in range(n):
                for part in ("vre", "vim"):
                    v = Var(f"{part}{i}{k}", REAL)
                    dl.assign(v, select(fail, nanv, v))
    for k in range(n):
        dl.declare(REAL, f"wre{k}", select(fail, nanv, Var(f"wr{k}", REAL) * amax))
        dl.declare(REAL, f"wim{k}", select(fail, nanv, Var(f"wi{k}", REAL) * amax))


def _emit_back_transform(dl: Dialect, n: int, k: int) -> None:
    """vre/vim{i}{k} = Z x (x of `_emit_eigvec`), normalised as dgeev: unit 2-norm (after
    division by the largest |re| + |im|, so no square overflows), a complex vector rotated so
    its first component of largest modulus is real with the sign of its real part (dlartg)."""
    zz = Vars("z")
    x = [(Var(f"x{k}_{j}r", REAL), Var(f"x{k}_{j}i", REAL)) for j in range(n)]
    vr = [dl.declare(REAL, f"vre{i}{k}", _sum([zz[i, c] * x[c][0] for c in range(n)]))
          for i in range(n)]
    vi = [dl.declare(REAL, f"vim{i}{k}", _sum([zz[i, c] * x[c][1] for c in range(n)]))
          for i in range(n)]
    with dl.scope():
        big = dl.declare(REAL, "big", Full(0.0, REAL))
        for i in range(n):
            with dl.scope():
                m = dl.declare(REAL, "m", abs_(vr[i]) + abs_(vi[i]))
                dl.assign(big, select(m > big, m, big))
        bigs = dl.declare(REAL, "bigs", select(big.eq(0.0), 1.0, big))
        for v in vr + vi:
            dl.assign(v, v / bigs)
        nrm = dl.declare(REAL, "nrm", sqrt(_sum([vr[i] * vr[i] + vi[i] * vi[i]
                                                 for i in range(n)])))
        for v in vr + vi:
            dl.assign(v, v / nrm)
        # the first component of largest modulus made real (complex eigenvalues only)
        best = dl.declare(REAL, "best", vr[0] * vr[0] + vi[0] * vi[0])
        f = dl.declare(REAL, "f", vr[0])
        g = dl.declare(REAL, "g", vi[0])
        at = dl.declare(INT, "at", Full(0, INT))
        for i in range(1, n):
            with dl.scope():
                m = dl.declare(REAL, "m", vr[i] * vr[i] + vi[i] * vi[i])
                gt = dl.declare(BOOL, "gt", m > best)
                dl.assign(best, select(gt, m, best))
                dl.assign(f, select(gt, vr[i], f))
                dl.assign(g, select(gt, vi[i], g))
                dl.assign(at, select(gt, i, at))
        cplx = dl.declare(BOOL, "cx", Var(f"wi{k}", REAL).ne(0.0))
        r = dl.declare(REAL, "r", _sign(sqrt(f * f + g * g), f))
        rs = dl.declare(REAL, "rs", select(r.eq(0.0), 1.0, r))
        cs = dl.declare(REAL, "cs", select(cplx, f / rs, 1.0))
        sn = dl.declare(REAL, "sn", select(cplx, g / rs, 0.0))
        for i in range(n):
            with dl.scope():
                xs = dl.declare(REAL, "xs", vr[i])
                dl.assign(vr[i], cs * xs + sn * vi[i])
                # that component's imaginary part exactly 0, as geev sets it
                dl.assign(vi[i], select(cplx & at.eq(i), 0.0, cs * vi[i] - sn * xs))


# ------------------------------------------------------------------------------ eig (complex)
#
# The complex eigenproblem (zgeev without balancing): complex Householder Hessenberg reduction
# (zgehd2, zlarfg's reflectors with a real beta), zlahqr's single-shift QR with Wilkinson's
# shift, deflation and exceptional shifts over each lane's window (as the real description's),
# ztrevc's back-substitution (perturbed pivots as there) and zgeev's normalisation (unit 2-norm,
# the first component of largest modulus made real and positive). Only arithmetic, conj, re, im
# and abs1 of complex values: moduli and square roots are written on the parts, so that the
# C++ complex dialect (`cpu_simd._CppComplex`) can render it as the Metal one does. Generated
# for Metal only: the C++ of both variants compiled for over 16 minutes on the shared 2-core
# machine without finishing, so the CPU library serves float32 only for now.


def _cscale(x: Expr, s: Expr) -> Expr:
    """x / s for a complex x and a REAL s, part by part."""
    return make_complex(re(x) / s, im(x) / s)


def _emit_cabs(dl: Dialect, x: Expr, name: str) -> Var:
    """|x| of a complex x without overflow (dlapy2 of its parts)."""
    return dl.declare(REAL, name, _lapy2(dl, re(x), im(x), name))


def _emit_csqrt(dl: Dialect, z: Expr, name: str) -> Var:
    """The principal square root of a complex z (a FLOAT), from its parts."""
    zr = dl.declare(REAL, f"{name}r", re(z))
    zi = dl.declare(REAL, f"{name}i", im(z))
    r = _emit_cabs(dl, z, f"{name}m")
    sr = dl.declare(REAL, f"{name}s", sqrt((r + abs_(zr)) * 0.5))
    den = dl.declare(REAL, f"{name}d", select(sr.eq(0.0), 1.0, sr * 2.0))
    pos = zr >= 0.0
    return dl.declare(FLOAT, name, make_complex(
        select(pos, sr, abs_(zi) / den), select(pos, zi / den, _sign(sr, zi))))


def _emit_zlarfg(dl: Dialect, x: list[Expr]) -> tuple[Var, Var, list[Var]]:
    """zlarfg of (x0, x1[, x2]): (beta REAL, tau FLOAT, v) with H = I - tau u u^H, u = (1, v),
    H^H x = (beta, 0, ...); the identity (tau = 0, beta = re x0) where the tail is 0 and x0 is
    real."""
    x0 = dl.declare(FLOAT, "zx0", _filled(x[0]))
    tail = [dl.declare(FLOAT, f"zx{p}", _filled(e)) for p, e in enumerate(x[1:], start=1)]
    m = dl.declare(REAL, "zm", _max([abs1(t) for t in tail]))
    ms = dl.declare(REAL, "zms", select(m.eq(0.0), 1.0, m))
    xn = dl.declare(REAL, "zxn", m * sqrt(_sum([(re(t) / ms) * (re(t) / ms)
                                                 + (im(t) / ms) * (im(t) / ms) for t in tail])))
    ar = dl.declare(REAL, "zar", re(x0))
    ai = dl.declare(REAL, "zai", im(x0))
    ident = dl.declare(BOOL, "zid", xn.eq(0.0) & ai.eq(0.0))
    big = dl.declare(REAL, "zbig", _max([abs_(ar), abs_(ai), xn]))
    bigs = dl.declare(REAL, "zbigs", select(big.eq(0.0), 1.0, big))
    norm = dl.declare(REAL, "zno", big * sqrt((ar / bigs) * (ar / bigs) + (ai / bigs)
                                              * (ai / bigs) + (xn / bigs) * (xn / bigs)))
    beta = dl.declare(REAL, "zbeta", select(ident, ar, select(ar < 0.0, norm, -norm)))
    bs = dl.declare(REAL, "zbs", select(ident, 1.0, beta))
    tau = dl.declare(FLOAT, "ztau", select(ident, Full(0.0), make_complex(
        (beta - ar) / bs, -ai / bs)))
    den = dl.declare(FLOAT, "zden", select(ident, Full(1.0), x0 - make_complex(beta, 0.0)))
    scale = dl.declare(FLOAT, "zsc", Full(1.0) / den)
    v = [dl.declare(FLOAT, f"zv{p}", select(ident, Full(0.0), t * scale))
         for p, t in enumerate(tail, start=1)]
    return beta, tau, v


def _max(xs: list[Expr]) -> Expr:
    out = xs[0]
    for x in xs[1:]:
        out = select(x > out, x, out)
    return out


def _emit_creflect(dl: Dialect, n: int, rows: tuple[int, ...], tau: Expr, v: list[Expr],
                   left_cols: range, want_z: bool) -> None:
    """H = I - tau u u^H (u = (1, v) over ``rows``): h <- H^H h on ``left_cols``, h <- h H on
    every row, and z <- z H (``want_z``)."""
    h, zz = Vars("h"), Vars("z")
    u = [Full(1.0)] + list(v)
    ct = dl.declare(FLOAT, "ct", conj(tau))
    for j in left_cols:
        with dl.scope():
            s = dl.declare(FLOAT, "cs", _sum([h[r, j] if p == 0 else conj(u[p]) * h[r, j]
                                               for p, r in enumerate(rows)]))
            cts = dl.declare(FLOAT, "cts", ct * s)
            for p, r in enumerate(rows):
                dl.assign(h[r, j], h[r, j] - (cts if p == 0 else u[p] * cts))
    targets = [(h, r) for r in range(n)] + ([(zz, r) for r in range(n)] if want_z else [])
    for m, r in targets:
        with dl.scope():
            s = dl.declare(FLOAT, "cs", _sum([m[r, c] if p == 0 else m[r, c] * u[p]
                                               for p, c in enumerate(rows)]))
            ts = dl.declare(FLOAT, "cts", tau * s)
            for p, c in enumerate(rows):
                dl.assign(m[r, c], m[r, c] - (ts if p == 0 else ts * conj(u[p])))


def _emit_cdeflate(dl: Dialect, n: int) -> None:
    """`_emit_deflate` with |re| + |im| for |.| (zlahqr's cabs1)."""
    h = Vars("h")
    ulp, smlnum = constant(dl.eps, REAL), constant(dl.safe_min * (n / dl.eps), REAL)
    for k in range(1, n):
        with dl.scope():
            sub = dl.declare(REAL, "sub", abs1(h[k, k - 1]))
            tst = dl.declare(REAL, "tst", abs1(h[k - 1, k - 1]) + abs1(h[k, k]))
            extra = [abs1(h[k - 1, k - 2])] if k >= 2 else []
            extra += [abs1(h[k + 1, k])] if k + 1 < n else []
            if extra:
                dl.assign(tst, select(tst.eq(0.0), _sum(extra), tst))
            up = dl.declare(REAL, "up", abs1(h[k - 1, k]))
            ab = dl.declare(REAL, "ab", select(sub > up, sub, up))
            ba = dl.declare(REAL, "ba", select(sub > up, up, sub))
            dd = dl.declare(REAL, "dd", abs1(h[k - 1, k - 1] - h[k, k]))
            hk = dl.declare(REAL, "hk", abs1(h[k, k]))
            aa = dl.declare(REAL, "aa", select(hk > dd, hk, dd))
            bb = dl.declare(REAL, "bb", select(hk > dd, dd, hk))
            s = dl.declare(REAL, "s", aa + ab)
            s = dl.declare(REAL, "ss", select(s.eq(0.0), 1.0, s))
            rhs = dl.declare(REAL, "rhs", ulp * (bb * (aa / s)))
            fine = (ba * (ab / s)) <= select(rhs > smlnum, rhs, smlnum)
            small = (sub <= smlnum) | ((sub <= ulp * tst) & fine)
            dl.assign(h[k, k - 1], select(small, Full(0.0), h[k, k - 1]))


def _cnonzero(x: Expr) -> Expr:
    return re(x).ne(0.0) | im(x).ne(0.0)


def _emit_cwindow(dl: Dialect, n: int) -> None:
    """act (an unreduced block of two or more rows remains), its bottom iw and top lw."""
    h = Vars("h")
    act = dl.declare(BOOL, "act", Full(0, INT))
    iw = dl.declare(INT, "iw", Full(n - 1, INT))
    lw = dl.declare(INT, "lw", Full(0, INT))
    for i in range(1, n):
        with dl.scope():
            q = dl.declare(BOOL, "q", _cnonzero(h[i, i - 1]))
            top = constant(0, INT)
            for k in range(1, i):
                top = select(~_cnonzero(h[k, k - 1]), k, top)
            dl.assign(iw, select(q, i, iw))
            dl.assign(lw, select(q, top, lw))
            dl.assign(act, act | q)


def _emit_cshift(dl: Dialect, n: int) -> Var:
    """zlahqr's shift t (Wilkinson's; exceptional at its % 20 == 10 / 0)."""
    h = Vars("h")
    iw, lw, its = Var("iw", INT), Var("lw", INT), Var("its", INT)
    ii = range(1, n)
    g11 = dl.declare(FLOAT, "g11", _pick(iw, {i: h[i - 1, i - 1] for i in ii}))
    g12 = dl.declare(FLOAT, "g12", _pick(iw, {i: h[i - 1, i] for i in ii}))
    g21 = dl.declare(FLOAT, "g21", _pick(iw, {i: h[i, i - 1] for i in ii}))
    g22 = dl.declare(FLOAT, "g22", _pick(iw, {i: h[i, i] for i in ii}))
    t = dl.declare(FLOAT, "sh", g22)
    with dl.scope():
        su = _emit_csqrt(dl, g12, "q1")
        sv = _emit_csqrt(dl, g21, "q2")
        u = dl.declare(FLOAT, "wu", su * sv)
        s = dl.declare(REAL, "ws", abs1(u))
        x = dl.declare(FLOAT, "wx", (g11 - g22) * 0.5)
        sx = dl.declare(REAL, "wsx", abs1(x))
        s2 = dl.declare(REAL, "ws2", select(sx > s, sx, s))
        s2s = dl.declare(REAL, "ws2s", select(s2.eq(0.0), 1.0, s2))
        xs = dl.declare(FLOAT, "wxs", _cscale(x, s2s))
        us = dl.declare(FLOAT, "wus", _cscale(u, s2s))
        y0 = _emit_csqrt(dl, xs * xs + us * us, "wy")
        y = dl.declare(FLOAT, "wyy", y0 * s2)
        sxs = dl.declare(REAL, "wsxs", select(sx.eq(0.0), 1.0, sx))
        flip = (sx > 0.0) & ((re(x) / sxs) * re(y) + (im(x) / sxs) * im(y) < 0.0)
        dl.assign(y, select(flip, -y, y))
        xy = dl.declare(FLOAT, "wxy", x + y)
        xyz = dl.declare(BOOL, "wxyz", ~_cnonzero(xy))
        q = dl.declare(FLOAT, "wq", u / select(xyz, Full(1.0), xy))
        dl.assign(t, select(s.ne(0.0) & ~xyz, g22 - u * q, g22))
        exl = dl.declare(BOOL, "exl", _any_of(its, range(10, EIG_MAX_SWEEPS, 20)))
        exi = dl.declare(BOOL, "exi", _any_of(its, range(20, EIG_MAX_SWEEPS, 20)))
        sl = dl.declare(REAL, "sl", constant(_EIG_DAT1, REAL) * abs_(re(
            _pick(lw, {l: h[l + 1, l] for l in range(n - 1)}))))
        hl = _pick(lw, {l: h[l, l] for l in range(n - 1)})
        si = dl.declare(REAL, "si", constant(_EIG_DAT1, REAL) * abs_(re(g21)))
        dl.assign(t, select(exl, hl + make_complex(sl, 0.0), select(
            exi, g22 + make_complex(si, 0.0), t)))
    return t


def _emit_cqr_sweep(dl: Dialect, n: int, want_z: bool) -> None:
    """One single-shift sweep of zlahqr over each lane's window (no-op where act is false)."""
    h = Vars("h")
    act, iw, lw = Var("act", BOOL), Var("iw", INT), Var("lw", INT)
    t = _emit_cshift(dl, n)
    for k in range(n - 1):
        with dl.scope():
            on = dl.declare(BOOL, "on", act & (lw <= k) & (iw > k))
            first = dl.declare(BOOL, "first", lw.eq(k))
            # first: (h_kk - t, h_k+1,k) scaled by |.|_1 (zlahqr), else the bulge
            f0 = dl.declare(FLOAT, "f0", h[k, k] - t)
            fs = dl.declare(REAL, "fs", abs1(f0) + abs1(h[k + 1, k]))
            fs = dl.declare(REAL, "fss", select(fs.eq(0.0), 1.0, fs))
            x0 = select(first, _cscale(f0, fs), h[k, k - 1] if k else Full(0.0))
            x1 = select(first, _cscale(h[k + 1, k], fs), h[k + 1, k - 1] if k else Full(0.0))
            beta, tau, v = _emit_zlarfg(dl, [x0, x1])
            dl.assign(tau, select(on, tau, Full(0.0)))
            if k:
                keep = on & ~first
                dl.assign(h[k, k - 1], select(keep, make_complex(beta, 0.0), h[k, k - 1]))
                dl.assign(h[k + 1, k - 1], select(keep, Full(0.0), h[k + 1, k - 1]))
            _emit_creflect(dl, n, (k, k + 1), tau, v, range(k, n), want_z)


def emit_eig_complex(dl: Dialect, n: int, want_v: bool) -> None:
    """The eigenvalues of the complex a{i}{j} (n x n; see the section above) into w{k} (FLOAT),
    with ``want_v`` the unit eigenvectors (columns) into v{i}{k}; NaN everywhere for a
    non-finite input or an iteration that did not converge."""
    a, h, zz = Vars("a"), Vars("h"), Vars("z")
    entries = [h[i, j] for i in range(n) for j in range(n)]
    for i in range(n):
        for j in range(n):
            dl.declare(FLOAT, f"h{i}{j}", a[i, j])
    bad = _not_finite(entries[0], True)
    for x in entries[1:]:
        bad = bad | _not_finite(x, True)
    bad = dl.declare(BOOL, "bad", bad)
    zerov = dl.declare(REAL, "zerov", Full(0.0, REAL))
    nanv = dl.declare(REAL, "nanv", zerov / zerov)
    cnan = make_complex(nanv, nanv)
    for x in entries:
        dl.assign(x, select(bad, Full(0.0), x))
    amax = dl.declare(REAL, "amax", _max([abs1(x) for x in entries]))
    amaxs = dl.declare(REAL, "amaxs", select(amax.eq(0.0), 1.0, amax))
    for x in entries:
        dl.assign(x, _cscale(x, amaxs))
    for i in range(n):
        for j in range(n):
            dl.declare(FLOAT, f"z{i}{j}", Full(1.0 if i == j else 0.0))
    for k in range(n - 2):
        rows = tuple(range(k + 1, n))
        with dl.scope():
            beta, tau, v = _emit_zlarfg(dl, [h[r, k] for r in rows])
            dl.assign(h[k + 1, k], make_complex(beta, 0.0))
            for r in rows[1:]:
                dl.assign(h[r, k], Full(0.0))
            _emit_creflect(dl, n, rows, tau, v, range(k + 1, n), want_v)
    fail = bad
    if n >= 2:
        its = dl.declare(INT, "its", Full(0, INT))
        iprev = dl.declare(INT, "iprev", Full(-1, INT))
        more = Var("more", BOOL)
        with dl.sweeps(EIG_MAX_SWEEPS, "more"):
            with dl.scope():
                _emit_cdeflate(dl, n)
                _emit_cwindow(dl, n)
                iw = Var("iw", INT)
                dl.assign(its, select(iw.eq(iprev), its + 1, 0))
                dl.assign(iprev, iw)
                _emit_cqr_sweep(dl, n, want_v)
                dl.assign(more, more | Var("act", BOOL))
        _emit_cdeflate(dl, n)
        _emit_cwindow(dl, n)
        fail = dl.declare(BOOL, "fail", bad | Var("act", BOOL))
    for k in range(n):
        dl.declare(FLOAT, f"w{k}", select(fail, cnan, h[k, k] * amax))
    if not want_v:
        return
    eps = constant(dl.eps, REAL)
    for k in range(n):
        lam = h[k, k]
        smin = dl.declare(REAL, f"smin{k}", select(eps * abs1(lam) > dl.eps, eps * abs1(lam),
                                                   dl.eps))
        x = {k: Full(1.0)}
        for j in range(k - 1, -1, -1):
            x[j] = dl.declare(FLOAT, f"x{k}_{j}", -_sum([h[j, c] * x[c]
                                                         for c in range(j + 1, k + 1)]))
            with dl.scope():
                d = dl.declare(FLOAT, "d", h[j, j] - lam)
                dl.assign(d, select(abs1(d) < smin, make_complex(smin, 0.0), d))
                dl.assign(x[j], x[j] / d)
        col = [dl.declare(FLOAT, f"v{i}{k}", _sum([zz[i, c] * x[c] for c in range(k + 1)]))
               for i in range(n)]
        with dl.scope():
            big = dl.declare(REAL, "big", _max([abs1(c) for c in col]))
            bigs = dl.declare(REAL, "bigs", select(big.eq(0.0), 1.0, big))
            for c in col:
                dl.assign(c, _cscale(c, bigs))
            nrm = dl.declare(REAL, "nrm", sqrt(_sum([re(c) * re(c) + im(c) * im(c)
                                                     for c in col])))
            for c in col:
                dl.assign(c, _cscale(c, nrm))
            best = dl.declare(REAL, "best", re(col[0]) * re(col[0]) + im(col[0]) * im(col[0]))
            at = dl.declare(INT, "at", Full(0, INT))
            piv = dl.declare(FLOAT, "piv", col[0])
            for i in range(1, n):
                with dl.scope():
                    m = dl.declare(REAL, "m", re(col[i]) * re(col[i]) + im(col[i]) * im(col[i]))
                    gt = dl.declare(BOOL, "gt", m > best)
                    dl.assign(best, select(gt, m, best))
                    dl.assign(at, select(gt, i, at))
                    dl.assign(piv, select(gt, col[i], piv))
            rot = dl.declare(FLOAT, "rot", _cscale(conj(piv), sqrt(select(best.eq(0.0), 1.0,
                                                                         best))))
            for i, c in enumerate(col):
                dl.assign(c, c * rot)
                dl.assign(c, select(at.eq(i), make_complex(re(c), 0.0), c))
                dl.assign(c, select(fail, cnan, c))
