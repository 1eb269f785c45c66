"""The Metal dialect of `mpslinalg.small.codegen`: the n <= 4 Metal kernels, generated.

One thread per matrix, scalar code: thread t loads matrix t into one variable per entry, runs
the straight-line code of the description (every loop unrolled, every branch on data a select,
so nothing is indexed dynamically and the matrix stays in registers) and writes its result; no
threadgroup memory, no barriers. For complex64 the matrix dtype is ``float2`` and the
operations that differ from the real ones go through ``metal/common/scalar.h`` (``mpsl::mul``,
``mpsl::div``, ``mpsl::abs1``, ``mpsl::modulus``, ``mpsl::is_zero``); a product or quotient of
a complex value by a real one is Metal's componentwise ``*`` / ``/``.

The kernels are checked in (`mpslinalg.small.generated` registers them; regenerate with
``python -m mpslinalg.small.generated``): ``metal/linalg/small_inverse.h`` holds
``small_{inv,solve,det,slogdet}_{float32,complex64}_n{1..4}``, included by
``metal/linalg/small_inverse.metal``; ``metal/linalg/qr_small.h`` holds
``qr_small_{float32,complex64}_m{1..4}_n{1..4}``, included by ``metal/linalg/qr.metal``;
``metal/linalg/svd_small.h`` holds ``svd_small_{float32,complex64}_m{1..4}_n{1..4}``, included
by ``metal/linalg/svd.metal``; ``metal/linalg/eigh_small.h`` holds
``eigh_small_{float32,complex64}_n{1..4}``, included by ``metal/linalg/eigh.metal``;
``metal/linalg/small_matrix_exp.h`` holds ``small_matrix_exp_{float32,complex64}_n{1..4}``,
included by ``metal/linalg/small_matrix_exp.metal``; ``metal/linalg/small_cholesky.h`` holds
``small_cholesky_{float32,complex64}_n{1..4}_upper{0,1}``,
``small_solve_triangular_{float32,complex64}_n{1..4}_left{0,1}_upper{0,1}_unit{0,1}`` and
``small_cholesky_solve_{float32,complex64}_n{1..4}_upper{0,1}``, included by
``metal/linalg/small_cholesky.metal``; ``metal/linalg/small_eig.h`` holds
``small_eig_{float32,complex64}_n{1..4}_vectors{0,1}``, included by
``metal/linalg/small_eig.metal``. The SVD and eigh kernels report the sweeps run and the
rotations of the last one (`_Metal.sweeps`).

Examples
--------
>>> from mpslinalg.small import metal_kernels
>>> text = metal_kernels.small_inverse_header()
>>> "[[kernel]] void small_inv_complex64_n3(" in text and "mpsl::div(" in text
True
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from . import codegen as cg
from . import generated

#: Metal's element type per dtype name (the host names' spelling).
_ELEMENT = {"float32": "float", "complex64": "float2"}


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, line: str, depth: int = 1) -> None:
        self.lines.append("  " * depth + line)


#: The status counters of `_Metal.sweeps`.
_SWEEPS, _ROTATIONS = cg.Var("sweeps_run", cg.INT), cg.Var("rotations", cg.INT)


class _Metal(cg.Dialect):
    """MSL for one dtype: FLOAT is ``float`` or ``float2`` (``complex``), REAL ``float``, INT
    ``int``, BOOL ``bool``; temporaries in brace scopes."""

    def __init__(self, w: _Writer, complex_: bool) -> None:
        self.w, self.depth, self.complex = w, 1, complex_

    def _type(self, kind: str) -> str:
        if kind == cg.FLOAT:
            return "float2" if self.complex else "float"
        return {cg.REAL: "float", cg.INT: "int", cg.BOOL: "bool"}[kind]

    # ---------------------------------------------------------------------------- statements

    def write_declare(self, kind: str, name: str, text: str) -> None:
        self.w(f"{self._type(kind)} {name} = {text};", self.depth)

    def write_assign(self, name: str, text: str) -> None:
        self.w(f"{name} = {text};", self.depth)

    def write(self, line: str) -> None:
        """A statement of the kernel's own (loads, stores, loops)."""
        self.w(line, self.depth)

    @contextlib.contextmanager
    def scope(self, head: str = "") -> Iterator[None]:
        self.w(f"{head}{' ' if head else ''}{{", self.depth)
        self.depth += 1
        yield
        self.depth -= 1
        self.w("}", self.depth)

    def add_log(self, acc: str, x: cg.Expr) -> None:
        self.w(f"{acc} += metal::log({self.render(x)});", self.depth)

    @contextlib.contextmanager
    def sweeps(self, count: int, flag: str) -> Iterator[None]:
        # One matrix per thread: it leaves the loop once its own sweep rotated nothing. The
        # sweeps run (that last one included) and the rotations of the last sweep (0: it
        # converged) are the status the SVD and eigh kernels report.
        self.declare(cg.INT, _SWEEPS.name, cg.Full(0, cg.INT))
        self.declare(cg.INT, _ROTATIONS.name, cg.Full(0, cg.INT))
        with self.scope(f"for (int sweep = 0; sweep < {count}; ++sweep)"):
            self.assign(_SWEEPS, _SWEEPS + 1)
            self.assign(_ROTATIONS, 0)
            self.declare(cg.BOOL, flag, cg.Full(0, cg.BOOL))
            yield
            self.w(f"if (!{flag}) break;", self.depth)

    def note_rotation(self, flag: cg.Var, rot: cg.Expr) -> None:
        super().note_rotation(flag, rot)
        self.assign(_ROTATIONS, _ROTATIONS + cg.select(rot, cg.Const(1, cg.INT), 0))

    # ---------------------------------------------------------------------------- expressions

    def literal(self, value: float, kind: str) -> str:
        if kind == cg.BOOL:
            return "true" if value else "false"
        if kind == cg.INT:
            return str(value)
        real = f"{float(value)!r}f"
        return f"float2({real}, 0.0f)" if kind == cg.FLOAT and self.complex else real

    operand = literal

    def full(self, kind: str, value: float) -> str:
        return self.literal(value, kind)

    def _complex(self, e: cg.Expr) -> bool:
        return self.complex and e.kind == cg.FLOAT

    def special(self, e: cg.Expr) -> tuple[str, int] | None:
        if isinstance(e, cg.Binary) and e.op in ("&", "|") and e.kind == cg.BOOL:
            op, level = ("&&", cg.AND) if e.op == "&" else ("||", cg.OR)
            return self.infix(op, level, e.a, e.b), level
        if isinstance(e, cg.Not):
            return "!" + self.wrap(e.a, cg.UNARY), cg.UNARY
        both = isinstance(e, (cg.Binary, cg.Div)) and self._complex(e.a) and self._complex(e.b)
        if both and isinstance(e, cg.Div):
            return f"mpsl::div({self.render(e.a)}, {self.render(e.b)})", cg.ATOM
        if both and e.op == "*":
            return f"mpsl::mul({self.render(e.a)}, {self.render(e.b)})", cg.ATOM
        if isinstance(e, cg.Binary) and e.kind == cg.BOOL and (
                self._complex(e.a) or self._complex(e.b)):
            raise ValueError(f"mpslinalg.small.metal_kernels: complex operands of {e.op}")
        return None

    def function(self, call: cg.Call, args: list[str]) -> str | cg.Expr:
        x = call.args[0]
        if call.fn == "abs" or (call.fn in ("abs1", "modulus") and not self._complex(x)):
            return f"metal::fabs({args[0]})"
        if call.fn in ("abs1", "modulus", "is_zero", "conj") and self._complex(x):
            return f"mpsl::{call.fn}({args[0]})"
        if call.fn == "nonzero" and self._complex(x):
            return f"!mpsl::is_zero({args[0]})"
        if call.fn in ("re", "im") and self._complex(x):
            return f"{self.wrap(x, cg.ATOM)}.{'x' if call.fn == 're' else 'y'}"
        if call.fn == "complex" and self.complex:
            return f"float2({args[0]}, {args[1]})"
        if call.fn in ("sqrt", "signbit", "isnan", "isinf"):
            return f"metal::{call.fn}({args[0]})"
        meaning = self.real_meaning(call)
        if meaning is not None:
            return meaning
        if call.fn == "mul_unit":
            d = call.args[1]
            if self._complex(d):  # d / |d|, as mpsl's unit sign of a complex number
                return f"mpsl::mul({args[0]}, {args[1]} / mpsl::modulus({args[1]}))"
            return x * cg.select(d > 0.0, 1.0, -1.0)
        raise ValueError(f"mpslinalg.small.metal_kernels: no Metal for {call.fn}")


# ------------------------------------------------------------------------------ LU family

#: Buffers of each op's kernel after the matrices A (name, Metal type), then the scalars; the
#: host code (mpslinalg/small/dispatch.py) passes them in this order.
_LU_BUFFERS = {
    "inv": [("X", "device T*"), ("INFO", "device int*"), ("batch", "constant long&")],
    "solve": [("B", "device const T*"), ("X", "device T*"), ("INFO", "device int*"),
              ("batch", "constant long&"), ("nrhs", "constant long&")],
    "det": [("DET", "device T*"), ("batch", "constant long&")],
    "slogdet": [("SIGN", "device T*"), ("LOGABS", "device float*"), ("batch", "constant long&")],
}


def _kernel_head(w: _Writer, name: str, element: str, buffers: list[tuple[str, str]]) -> None:
    w(f"[[kernel]] void {name}(", 0)
    args = [("A", "device const T*"), *buffers]
    for index, (arg, ty) in enumerate(args):
        w(f"    {ty.replace('T*', element + '*')} {arg} [[buffer({index})]],", 0)
    w("    uint gid [[thread_position_in_grid]]) {", 0)
    w("const long index = long(gid);")
    w("if (index >= batch) {")
    w("return;", 2)
    w("}")


def _lu_kernel(op: str, dtype: str, n: int) -> list[str]:
    """The kernel ``small_<op>_<dtype>_n<n>``: getf2 of matrix ``index`` of A, then ``op``."""
    element, nn = _ELEMENT[dtype], n * n
    w = _Writer()
    dl = _Metal(w, dtype == "complex64")
    _kernel_head(w, f"small_{op}_{dtype}_n{n}", element, _LU_BUFFERS[op])
    w(f"device const {element}* src = A + index * long({nn});")
    for i in range(n):
        for j in range(n):
            w(f"{element} a{i}{j} = src[{i * n + j}];")
    cg.emit_factor(dl, n)
    if op == "inv":
        w(f"device {element}* dst = X + index * long({nn});")

        def keep(j: int) -> None:
            for i in range(n):
                dl.write(f"dst[{i * n + j}] = x{i};")

        cg.emit_inverse(dl, n, keep)
        w("INFO[index] = info;")
    elif op == "solve":
        w(f"const long base = index * long({n}) * nrhs;")
        with dl.scope("for (long j = 0; j < nrhs; ++j)"):
            for i in range(n):
                dl.write(f"{element} x{i} = B[base + long({i}) * nrhs + j];")
            cg.emit_solve_vector(dl, n)
            for i in range(n):
                dl.write(f"X[base + long({i}) * nrhs + j] = x{i};")
        w("INFO[index] = info;")
    elif op == "det":
        w(f"DET[index] = {cg.emit_det(dl, n)};")
    else:
        sgn = cg.emit_perm_sign(dl, n)
        dl.declare(cg.FLOAT, "s", cg.Full(1.0) * sgn)
        dl.declare(cg.REAL, "logabs", cg.Full(0.0, cg.REAL))
        cg.emit_slogdet(dl, n, "s", "logabs")
        w("SIGN[index] = s;")
        w("LOGABS[index] = logabs;")
    w("}", 0)
    return w.lines


def _generated_banner(what: str) -> list[str]:
    return [
        "// Generated by `python -m mpslinalg.small.generated` from the n <= 4 descriptions of",
        "// mpslinalg/small/codegen.py (Metal dialect: mpslinalg/small/metal_kernels.py). Do not",
        "// edit: change the description or the dialect and regenerate (tests/small/",
        "// test_generated.py fails while this file is stale).",
        "//",
        *what.strip().splitlines(),
        "#pragma once",
        "",
        '#include "../common/defines.h"',
        '#include "../common/scalar.h"',
    ]


_SMALL_INVERSE_ABOUT = """
// Batched inverse, determinant, log-determinant and solve for n <= 4: one thread per matrix.
//
// Camera geometry inverts millions of 2x2 / 3x3 / 4x4 matrices at once. Each op is exactly one
// launch over the whole batch: thread t loads matrix t into registers (one variable per entry,
// row interchanges done with selects so nothing is indexed dynamically), factors it and writes
// its result. No threadgroup memory and no barriers.
//
// The arithmetic is LAPACK's, so results, info and error semantics match the general LU path:
//   getf2: partial pivoting, pivot = first row of largest abs1 (|re| + |im| for complex, like
//          icamax; NaN never wins a comparison, like idamax), elimination continued past a zero
//          pivot, info = 1-based index of the first zero pivot (0 = ok);
//   getrs: row interchanges, unit-lower forward substitution, column-oriented back substitution
//          (trsm); inv = the solution of A X = I, like torch.linalg.inv;
//   det = prod(diag U) * (-1)^swaps; slogdet = (sign, sum log|u_kk|), (0, -inf) when singular.
// Kernels small_<op>_<dtype>_n<n> for op in inv, solve, det, slogdet, dtype float32 (float) and
// complex64 (float2), n = 1 .. 4.
"""


@generated.generates("metal/linalg/small_inverse.h")
def small_inverse_header() -> str:
    """The text of ``metal/linalg/small_inverse.h``: every n <= 4 LU-family kernel."""
    lines = _generated_banner(_SMALL_INVERSE_ABOUT)
    for op in _LU_BUFFERS:
        for dtype in _ELEMENT:
            for n in range(1, cg.MAX_N + 1):
                lines += ["", *_lu_kernel(op, dtype, n)]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------ QR

def _store(dl: _Metal, ptr: str, rows: int, cols: int, value) -> None:
    """Entry (i, j) of matrix ``index`` of ``ptr`` (contiguous (batch, rows, cols)) =
    value(i, j) (a variable name or an expression)."""
    for i in range(rows):
        for j in range(cols):
            v = value(i, j)
            text = v if isinstance(v, str) else dl.render(v)
            dl.write(f"{ptr}[index * long({rows * cols}) + {i * cols + j}] = {text};")


def _qr_kernel(dtype: str, m: int, n: int) -> list[str]:
    """The kernel ``qr_small_<dtype>_m<m>_n<n>``: geqr2 of matrix ``index`` of A, R (and Q) in
    torch.linalg.qr's layout for the run-time ``mode`` (mpsl::kQrModeReduced / Complete / R)."""
    element, k = _ELEMENT[dtype], min(m, n)
    complex_ = dtype == "complex64"
    w = _Writer()
    dl = _Metal(w, complex_)
    buffers = [("Q", "device T*"), ("R", "device T*"), ("batch", "constant long&"),
               ("mode", "constant long&")]
    _kernel_head(w, f"qr_small_{dtype}_m{m}_n{n}", element, buffers)
    for i in range(m):
        for j in range(n):
            w(f"{element} a{i}{j} = A[index * long({m * n}) + {i * n + j}];")
    cg.emit_qr_factor(dl, m, n, complex_)

    def r_value(i: int, j: int):
        return f"a{i}{j}" if i <= j and i < k else dl.render(cg.Full(0.0))

    if m > k:
        with dl.scope("if (mode == mpsl::kQrModeComplete)"):
            _store(dl, "R", m, n, r_value)
        with dl.scope("else"):
            _store(dl, "R", k, n, r_value)
    else:
        _store(dl, "R", k, n, r_value)
    w("if (mode == mpsl::kQrModeR) {")
    w("return;", 2)
    w("}")
    if m > k:
        with dl.scope("if (mode == mpsl::kQrModeComplete)"):
            cg.emit_qr_q(dl, m, n, m)
            _store(dl, "Q", m, m, lambda i, j: f"q{i}{j}")
            dl.write("return;")
    cg.emit_qr_q(dl, m, n, k)
    _store(dl, "Q", m, k, lambda i, j: f"q{i}{j}")
    w("}", 0)
    return w.lines


_QR_SMALL_ABOUT = """
// QR of a batch of m x n matrices, m, n <= 4, one matrix per thread in registers: geqr2
// (larfg's reflectors, nrm2's scaled sum of squares), then org2r by backward accumulation, the
// reflectors of the blocked kernels of qr.h. mode (mpsl::kQrMode*): reduced (Q m x k, R k x n,
// k = min(m, n)), complete (Q m x m, R m x n) or r (R only, k x n; Q is not written). Where the
// input holds NaN or Inf, the real kernels follow LAPACK as torch.linalg.qr on the CPU runs it
// (see mpslinalg/small/codegen.py). Kernels qr_small_<dtype>_m<m>_n<n>, dtype float32 (float)
// and complex64 (float2); included by qr.metal after qr.h (its mode constants).
"""


@generated.generates("metal/linalg/qr_small.h")
def qr_small_header() -> str:
    """The text of ``metal/linalg/qr_small.h``: every m, n <= 4 QR kernel."""
    lines = _generated_banner(_QR_SMALL_ABOUT)
    for dtype in _ELEMENT:
        for m in range(1, cg.MAX_N + 1):
            for n in range(1, cg.MAX_N + 1):
                lines += ["", *_qr_kernel(dtype, m, n)]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------ matrix_exp

def _matrix_exp_kernel(dtype: str, n: int) -> list[str]:
    """The kernel ``small_matrix_exp_<dtype>_n<n>``: exp of matrix ``index`` of A into X
    (`mpslinalg.small.codegen.emit_matrix_exp`)."""
    element = _ELEMENT[dtype]
    w = _Writer()
    dl = _Metal(w, dtype == "complex64")
    _kernel_head(w, f"small_matrix_exp_{dtype}_n{n}", element,
                 [("X", "device T*"), ("batch", "constant long&")])
    for i in range(n):
        for j in range(n):
            w(f"{element} a{i}{j} = A[index * long({n * n}) + {i * n + j}];")
    cg.emit_matrix_exp(dl, n)
    _store(dl, "X", n, n, lambda i, j: f"e{i}{j}")
    w("}", 0)
    return w.lines


_SMALL_MATRIX_EXP_ABOUT = """
// The matrix exponential of a batch of n x n matrices, n <= 4, one matrix per thread in
// registers: scaling and squaring with the [7/7] Pade approximant (Higham 2005), the scaling
// 2^-s of each matrix its own (s = ceil(log2(||A||_1 / theta_7)), at least 0), the denominator
// solved by the LU of small_inverse.h's kernels, then each result squared its own s times; a
// matrix with a non-finite entry gives NaN. Kernels small_matrix_exp_<dtype>_n<n>, dtype
// float32 (float) and complex64 (float2), n = 1 .. 4; included by small_matrix_exp.metal.
"""


@generated.generates("metal/linalg/small_matrix_exp.h")
def small_matrix_exp_header() -> str:
    """The text of ``metal/linalg/small_matrix_exp.h``: every n <= 4 matrix_exp kernel."""
    lines = _generated_banner(_SMALL_MATRIX_EXP_ABOUT)
    for dtype in _ELEMENT:
        for n in range(1, cg.MAX_N + 1):
            lines += ["", *_matrix_exp_kernel(dtype, n)]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------ SVD, eigh

def _kernel_params_head(w: _Writer, name: str, element: str, buffers: list[tuple[str, str]],
                        params: str) -> None:
    """The head of a kernel whose scalars are one struct ``p`` (``params``, the host packs it
    with `mpslinalg._core.metal_params`), after the matrices A and ``buffers``."""
    w(f"[[kernel]] void {name}(", 0)
    args = [("A", "device const T*"), *buffers]
    for index, (arg, ty) in enumerate(args):
        w(f"    {ty.replace('T*', element + '*')} {arg} [[buffer({index})]],", 0)
    w(f"    constant {params}& p [[buffer({len(args)})]],", 0)
    w("    uint gid [[thread_position_in_grid]]) {", 0)
    w("const long index = long(gid);")
    w("if (index >= p.batch) {")
    w("return;", 2)
    w("}")


def _svd_kernel(dtype: str, m: int, n: int) -> list[str]:
    """The kernel ``svd_small_<dtype>_m<m>_n<n>``: S, and U and Vh for p.vectors (full or
    reduced by p.full), of matrix ``index`` of A; INFO the sweeps run, kSvdNotConverged or
    kSvdNonFinite."""
    element, k = _ELEMENT[dtype], min(m, n)
    complex_ = dtype == "complex64"
    w = _Writer()
    dl = _Metal(w, complex_)
    buffers = [("U", "device T*"), ("S", "device float*"), ("VH", "device T*"),
               ("INFO", "device int*")]
    _kernel_params_head(w, f"svd_small_{dtype}_m{m}_n{n}", element, buffers,
                        "mpsl::SvdSmallParams")
    for i in range(m):
        for j in range(n):
            w(f"{element} a{i}{j} = A[index * long({m * n}) + {i * n + j}];")

    def values_and_info(variant: str) -> list:
        outputs = cg.emit_svd_any_shape(dl, m, n, variant, complex_)
        _store(dl, "S", 1, k, outputs[0][3])
        dl.write(f"INFO[index] = bad ? mpsl::kSvdNonFinite : {_ROTATIONS.name} == 0 ? "
                 f"{_SWEEPS.name} : mpsl::kSvdNotConverged;")
        return outputs

    with dl.scope("if (p.vectors == 0)"):
        values_and_info("vals")
        dl.write("return;")
    # The reduced factors are the leading columns of U and rows of Vh of the full ones.
    _, (_, _, ucols, u_entry), (_, vrows, _, vh_entry) = values_and_info("full")
    with dl.scope("if (p.full != 0)"):
        _store(dl, "U", m, ucols, u_entry)
        _store(dl, "VH", vrows, n, vh_entry)
    with dl.scope("else"):
        _store(dl, "U", m, k, u_entry)
        _store(dl, "VH", k, n, vh_entry)
    w("}", 0)
    return w.lines


_SVD_SMALL_ABOUT = """
// SVD of a batch of m x n matrices, m, n <= 4, one matrix per thread in registers: one-sided
// Jacobi (complex rotations for complex64), columns orthonormalised in the order of S and U
// completed to m x m for full_matrices; a wide matrix through its conjugate transpose. p
// (mpsl::SvdSmallParams of svd.h): vectors (else S only), full. INFO: the sweeps run (the last
// one rotated nothing), kSvdNotConverged, or kSvdNonFinite for NaN / Inf input (then S, U and
// Vh are NaN). Kernels svd_small_<dtype>_m<m>_n<n>, dtype float32 (float) and complex64
// (float2); included by svd.metal after svd.h.
"""


@generated.generates("metal/linalg/svd_small.h")
def svd_small_header() -> str:
    """The text of ``metal/linalg/svd_small.h``: every m, n <= 4 SVD kernel."""
    lines = _generated_banner(_SVD_SMALL_ABOUT)
    for dtype in _ELEMENT:
        for m in range(1, cg.MAX_N + 1):
            for n in range(1, cg.MAX_N + 1):
                lines += ["", *_svd_kernel(dtype, m, n)]
    return "\n".join(lines) + "\n"


def _eigh_kernel(dtype: str, n: int) -> list[str]:
    """The kernel ``eigh_small_<dtype>_n<n>``: eigenvalues W (ascending) and for p.vectors the
    eigenvectors V (columns) of matrix ``index`` of A, of which the triangle p.lower names is
    read (the imaginary part of the diagonal ignored); STATUS [info, sweeps run]: info 0
    (converged), n (non-finite input, no sweep), else the rotations of the last sweep."""
    element, nn = _ELEMENT[dtype], n * n
    complex_ = dtype == "complex64"
    w = _Writer()
    dl = _Metal(w, complex_)
    buffers = [("W", "device float*"), ("V", "device T*"), ("STATUS", "device int*")]
    _kernel_params_head(w, f"eigh_small_{dtype}_n{n}", element, buffers, "mpsl::EighParams")
    w(f"device const {element}* src = A + index * long({nn});")
    w("const bool lower = p.lower != 0;")
    for i in range(n):
        w(f"float h{i}{i} = src[{i * n + i}]{'.x' if complex_ else ''};")
        for j in range(i + 1, n):
            below = f"src[{j * n + i}]"
            w(f"{element} h{i}{j} = lower ? {f'mpsl::conj({below})' if complex_ else below} : "
              f"src[{i * n + j}];")

    def values_and_status(want_v: bool) -> None:
        cg.emit_eigh(dl, n, want_v, complex_)
        _store(dl, "W", 1, n, lambda i, j: f"l{j}")
        if want_v:
            _store(dl, "V", n, n, lambda i, j: f"v{i}{j}")
        dl.write(f"STATUS[index * long(mpsl::kEighStatusInts)] = bad ? {n} : "
                 f"{_ROTATIONS.name};")
        dl.write(f"STATUS[index * long(mpsl::kEighStatusInts) + 1] = bad ? 0 : "
                 f"{_SWEEPS.name};")

    with dl.scope("if (p.vectors == 0)"):
        values_and_status(False)
        dl.write("return;")
    values_and_status(True)
    w("}", 0)
    return w.lines


_EIGH_SMALL_ABOUT = """
// Hermitian eigendecomposition of a batch of n x n matrices, n <= 4, one matrix per thread in
// registers: cyclic Jacobi (rotations with the phase of a_pq for complex64) on the triangle
// p.lower names (mpsl::EighParams of eigh.h), eigenvalues ascending, eigenvectors (columns)
// for p.vectors. STATUS (kEighStatusInts per matrix): [info, sweeps run], info 0 converged, n
// for NaN / Inf input (no sweep; W and V NaN), else the rotations of the last sweep. Kernels
// eigh_small_<dtype>_n<n>, dtype float32 (float) and complex64 (float2); included by
// eigh.metal after eigh.h.
"""


@generated.generates("metal/linalg/eigh_small.h")
def eigh_small_header() -> str:
    """The text of ``metal/linalg/eigh_small.h``: every n <= 4 eigh kernel."""
    lines = _generated_banner(_EIGH_SMALL_ABOUT)
    for dtype in _ELEMENT:
        for n in range(1, cg.MAX_N + 1):
            lines += ["", *_eigh_kernel(dtype, n)]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------ Cholesky family

def _load_entries(dl: _Metal, element: str, n: int, keep) -> None:
    """a{i}{j} = entry (i, j) of matrix ``index`` of A for the (i, j) where ``keep(i, j)``."""
    for i in range(n):
        for j in range(n):
            if keep(i, j):
                dl.write(f"{element} a{i}{j} = A[index * long({n * n}) + {i * n + j}];")


def _triangle(upper: bool, unit: bool = False):
    """keep(i, j) of `_load_entries`: the triangle ``upper`` names (its diagonal unless
    ``unit``)."""
    def keep(i: int, j: int) -> bool:
        return (i < j if upper else i > j) or (i == j and not unit)

    return keep


def _cholesky_kernel(dtype: str, n: int, upper: bool) -> list[str]:
    """The kernel ``small_cholesky_<dtype>_n<n>_upper<u>``: the factor (torch's layout, the
    other triangle zero) and info of matrix ``index`` of A, of which only the triangle named by
    ``upper`` is read (`mpslinalg.small.codegen.emit_cholesky`)."""
    element, complex_ = _ELEMENT[dtype], dtype == "complex64"
    w = _Writer()
    dl = _Metal(w, complex_)
    _kernel_head(w, f"small_cholesky_{dtype}_n{n}_upper{int(upper)}", element,
                 [("L", "device T*"), ("INFO", "device int*"), ("batch", "constant long&")])
    _load_entries(dl, element, n, _triangle(upper))
    cg.emit_hermitian_lower(dl, n, upper, "l", complex_)
    cg.emit_cholesky(dl, n, complex_)
    entry = cg.cholesky_factor_entry(n, upper, complex_)
    zero = cg.Full(0.0)
    _store(dl, "L", n, n, lambda i, j: entry(i, j) or zero)
    w("INFO[index] = info;")
    w("}", 0)
    return w.lines


def _rhs_loop(dl: _Metal, element: str, n: int, column_major: bool, body) -> None:
    """For each right-hand side j of B (nrhs of them): x{i} loaded, ``body()``, x{i} stored to
    X; right-hand sides are the columns of B (n x nrhs), or with ``column_major`` its rows
    (nrhs x n: solve_triangular's right side)."""
    dl.write(f"const long base = index * long({n}) * nrhs;")

    def at(i: int) -> str:
        return f"base + j * long({n}) + {i}" if column_major else f"base + long({i}) * nrhs + j"

    with dl.scope("for (long j = 0; j < nrhs; ++j)"):
        for i in range(n):
            dl.write(f"{element} x{i} = B[{at(i)}];")
        body()
        for i in range(n):
            dl.write(f"X[{at(i)}] = x{i};")


_RHS_BUFFERS = [("B", "device const T*"), ("X", "device T*"), ("batch", "constant long&"),
                ("nrhs", "constant long&")]


def _solve_triangular_kernel(dtype: str, n: int, left: bool, upper: bool,
                             unit: bool) -> list[str]:
    """The kernel ``small_solve_triangular_<dtype>_n<n>_left<l>_upper<u>_unit<d>``: X with
    A X = B (left) or X A = B, A triangular (only its triangle read, not its diagonal when
    unitriangular)."""
    element, complex_ = _ELEMENT[dtype], dtype == "complex64"
    w = _Writer()
    dl = _Metal(w, complex_)
    _kernel_head(w, f"small_solve_triangular_{dtype}_n{n}_left{int(left)}_upper{int(upper)}"
                    f"_unit{int(unit)}", element, _RHS_BUFFERS)
    _load_entries(dl, element, n, _triangle(upper, unit))
    _rhs_loop(dl, element, n, not left, lambda: cg.emit_triangular_solve(
        dl, n, cg.triangular_entry(left), cg.triangular_solves_lower(left, upper), unit))
    w("}", 0)
    return w.lines


def _cholesky_solve_kernel(dtype: str, n: int, upper: bool) -> list[str]:
    """The kernel ``small_cholesky_solve_<dtype>_n<n>_upper<u>``: X with L L^H X = B (U^H U X
    = B for upper), the factor in A (only its triangle read)."""
    element, complex_ = _ELEMENT[dtype], dtype == "complex64"
    w = _Writer()
    dl = _Metal(w, complex_)
    _kernel_head(w, f"small_cholesky_solve_{dtype}_n{n}_upper{int(upper)}", element,
                 _RHS_BUFFERS)
    _load_entries(dl, element, n, _triangle(upper))
    cg.emit_hermitian_lower(dl, n, upper, "l", complex_)
    _rhs_loop(dl, element, n, False, lambda: cg.emit_cholesky_solve(dl, n, complex_))
    w("}", 0)
    return w.lines


_SMALL_CHOLESKY_ABOUT = """
// Cholesky factorisation, triangular solves and Cholesky solves of a batch of n x n matrices,
// n <= 4, one matrix per thread in registers:
//   small_cholesky_<dtype>_n<n>_upper<u>: LAPACK's potf2 of the triangle named by upper, the
//     factor (L, or U = L^H) in torch's layout and info = the order of the first leading minor
//     that is not positive (NaN included); from that column on, potf2's partial result (that
//     column's diagonal the non-positive pivot, the entries after it the input's);
//   small_solve_triangular_<dtype>_n<n>_left<l>_upper<u>_unit<d>: X with A X = B (left, B
//     n x nrhs) or X A = B (B nrhs x n), A triangular, unit diagonal assumed for unit;
//   small_cholesky_solve_<dtype>_n<n>_upper<u>: X with L L^H X = B (U^H U X = B), potrs.
// dtype float32 (float) and complex64 (float2), n = 1 .. 4; included by small_cholesky.metal.
"""


#: The variants of solve_triangular's kernels: (left, upper, unitriangular).
SOLVE_TRIANGULAR_VARIANTS = tuple((left, upper, unit) for left in (True, False)
                                  for upper in (False, True) for unit in (False, True))


@generated.generates("metal/linalg/small_cholesky.h")
def small_cholesky_header() -> str:
    """The text of ``metal/linalg/small_cholesky.h``: every n <= 4 Cholesky-family kernel."""
    lines = _generated_banner(_SMALL_CHOLESKY_ABOUT)
    for dtype in _ELEMENT:
        for n in range(1, cg.MAX_N + 1):
            for upper in (False, True):
                lines += ["", *_cholesky_kernel(dtype, n, upper)]
                lines += ["", *_cholesky_solve_kernel(dtype, n, upper)]
            for left, upper, unit in SOLVE_TRIANGULAR_VARIANTS:
                lines += ["", *_solve_triangular_kernel(dtype, n, left, upper, unit)]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------ eig

def _eig_kernel(dtype: str, n: int, vectors: bool) -> list[str]:
    """The kernel ``small_eig_<dtype>_n<n>_vectors<v>``: the eigenvalues (E, complex64 as
    float2) and with ``vectors`` the unit eigenvectors (V, columns, float2) of the real or
    complex matrix ``index`` of A (`mpslinalg.small.codegen.emit_eig`, `emit_eig_complex`)."""
    element, complex_ = _ELEMENT[dtype], dtype == "complex64"
    w = _Writer()
    dl = _Metal(w, complex_)
    buffers = [("E", "device float2*")] + ([("V", "device float2*")] if vectors else [])
    _kernel_head(w, f"small_eig_{dtype}_n{n}_vectors{int(vectors)}", element,
                 [*buffers, ("batch", "constant long&")])
    _load_entries(dl, element, n, lambda i, j: True)
    (cg.emit_eig_complex if complex_ else cg.emit_eig)(dl, n, vectors)

    def value(prefix: str, suffix: str) -> str:
        """The complex result ``<prefix><suffix>`` (complex input) or its parts
        ``<prefix>re<suffix>``, ``<prefix>im<suffix>`` (real input)."""
        if complex_:
            return f"{prefix}{suffix}"
        return f"float2({prefix}re{suffix}, {prefix}im{suffix})"

    for k in range(n):
        w(f"E[index * long({n}) + {k}] = {value('w', str(k))};")
    if vectors:
        for i in range(n):
            for k in range(n):
                w(f"V[index * long({n * n}) + {i * n + k}] = {value('v', f'{i}{k}')};")
    w("}", 0)
    return w.lines


_SMALL_EIG_ABOUT = """
// Eigenvalues and eigenvectors of a batch of n x n matrices, n <= 4, one matrix per thread in
// registers: small_eig_<dtype>_n<n>_vectors<v>: LAPACK's geev without balancing for float32
// (Hessenberg reduction, dlahqr's Francis double-shift sweeps, dlanv2's 2 x 2 blocks, dtrevc's
// back-substitution, geev's normalisation), zgeev's for complex64 (complex Hessenberg, zlahqr's
// single-shift sweeps, ztrevc), the eigenvalues in E and for vectors the unit eigenvectors
// (columns) in V, both complex64 (float2); NaN everywhere for a matrix with a non-finite entry.
// n = 1 .. 4; included by small_eig.metal.
"""


@generated.generates("metal/linalg/small_eig.h")
def small_eig_header() -> str:
    """The text of ``metal/linalg/small_eig.h``: every n <= 4 eig kernel."""
    lines = _generated_banner(_SMALL_EIG_ABOUT)
    for dtype in _ELEMENT:
        for n in range(1, cg.MAX_N + 1):
            for vectors in (False, True):
                lines += ["", *_eig_kernel(dtype, n, vectors)]
    return "\n".join(lines) + "\n"
