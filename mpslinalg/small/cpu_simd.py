"""SIMD CPU kernels for the n <= 4 small path: many matrices per vector instruction.

The Metal kernel compiled for the CPU by `mpslinalg.emulator` runs one matrix per lane and
one lane at a time (~90 ns per 4x4 inverse per thread), nothing vectorised across matrices. Here
the same arithmetic is generated as C++ over blocks of ``_W`` matrices in structure-of-arrays
form: every matrix entry is one GCC/Clang vector (``vector_size``) holding that entry of all the
matrices of the block, so each operation of the elimination is one SIMD instruction for the whole
block (blocks of 8 with AVX2, of 4 with the SSE2/NEON baseline).

The code generator (`mpslinalg.small.codegen`, shared with
`mpslinalg.small.triton_kernels` and `mpslinalg.small.metal_kernels`, which writes
``metal/linalg/small_inverse.h`` from the same description; the C++ dialect is `_Cpp` below)
emits the Metal kernel's operations in the same order, every branch on data a vector select,
and the library is compiled with ``-ffp-contract=off``
and without fast-math, so each lane rounds exactly like the emulator-compiled Metal kernel: the
results are bit-identical (tests/small/test_small_cpu.py compares them exactly):

- pivot = the first row of largest |a| (strict ``>``: lowest row on ties, a NaN never wins),
  full-row interchanges by selects (exact bit moves);
- a zero pivot skips the scaling (multipliers stay 0), elimination continues, ``info`` = 1-based
  index of the first zero pivot;
- solve: interchanges, unit-lower forward substitution, column-oriented back substitution like
  ``trsm``; the inverse solves ``A X = I``;
- det = prod(diag U) * (-1)^swaps; slogdet = (sign, sum log|u_kk|) with ``logf`` per lane (as
  the emulator's ``metal::log``), (0, -inf) when singular.

Each function is emitted twice, for the x86-64 baseline (SSE2) and with
``__attribute__((target("avx2")))``; the entry point picks one at run time with
``__builtin_cpu_supports``, so the built library does not depend on the build host's CPU. (The
AVX2 variants sit under ``#if defined(__x86_64__)``: other architectures compile only the
baseline, and the checked-in source does not depend on the machine that generated it.) The
batch is split over ``nthreads`` std::threads inside the library (at most one per 4096
matrices: a thread start costs about as much as inverting 2000-3000 matrices); ctypes releases
the GIL for the call.

dtype: float32 only (complex64 and float64 take the tensor-op path or torch.linalg).

A second library, `ORTH_LIBRARY`, holds QR (every m, n <= 4), the one-sided Jacobi SVD
(`SVD_SHAPES`) and the Jacobi symmetric eigendecomposition (n <= 4) in float32 and
float64, from the generators of `mpslinalg.small.codegen` (`small_qr`,
`small_svd`, `small_eigh`; float32 QR is bit-identical to ``qr_small`` of
metal/linalg/qr.h in the emulator). Its sweeps loop leaves early once no lane of a block
rotated.

A third, `EXPM_LIBRARY`, holds the matrix exponential (n <= 4, float32:
`mpslinalg.small.codegen.emit_matrix_exp`), bit-identical to metal/linalg/small_matrix_exp.h
in the emulator. A fourth, `CHOL_LIBRARY`, holds the Cholesky family (cholesky_ex,
solve_triangular, cholesky_solve; n <= 4, float32 and complex64, the latter as pairs of float
vectors, `_CppComplex`: `mpslinalg.small.codegen.emit_cholesky`, `emit_triangular_solve`,
`emit_cholesky_solve`), bit-identical to metal/linalg/small_cholesky.h in the emulator. A
fifth, `EIG_LIBRARY`, holds eig and eigvals of real matrices (n <= 4, float32 in, complex64
out: `mpslinalg.small.codegen.emit_eig`), bit-identical to metal/linalg/small_eig.h in the
emulator.

The sources are checked in as generated files (``native/small_cpu.cpp``,
``native/small_cpu_orth.cpp``, ``native/small_cpu_expm.cpp``, ``native/small_cpu_chol.cpp``,
``native/small_cpu_eig.cpp``,
with their flags in ``native/libraries.cmake``; see
`mpslinalg.small.generated`), the build backend compiles them when the package is built or
installed (``CMakeLists.txt``), and `mpslinalg.small.native` loads the result from the package
when this module is imported: from the first call on, a call takes the same path (see `ready`).
"""

from __future__ import annotations

import contextlib
import ctypes
import math
from collections.abc import Callable, Iterator

import torch

from . import codegen as _codegen
from . import generated, native
from .codegen import MAX_N, QR_MODES

#: Matrices per block = lanes per vector with AVX2: 8 float32 fill one register (the SSE2
#: baseline uses blocks of _W // 2).
_W = 8


_OPS = ("inv", "solve", "det", "slogdet")

#: Compiler flags (CMakeLists.txt compiles and links with exactly these, read from the generated
#: native/flags.cmake; the build makes a position-independent shared library of it).
#: -ffp-contract=off: no fused multiply-add (the emulator's flag, so products and differences
#: round separately as in the Metal kernel); no -ffast-math and no -march: the instruction set
#: is chosen at run time (see the module docstring).
_FLAGS = ["-std=c++17", "-O3", "-pthread", "-ffp-contract=off", "-fno-exceptions", "-fno-rtti",
          "-w"]

#: Run the baseline (SSE2) variant even where AVX2 exists: for tests, which would otherwise never
#: run it on AVX2 hosts.
_BASELINE = False


# ------------------------------------------------------------------------------ code generation

class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, line: str, indent: int = 1) -> None:
        self.lines.append("  " * indent + line)


class _Cpp(_codegen.Dialect):
    """C++ syntax for `mpslinalg.small.codegen`: ``vf`` / ``vi`` vectors (W lanes of float
    / int32), temporaries in brace scopes, ``c ? a : b`` selects on vectors."""

    def __init__(self, w: _Writer, double: bool = False) -> None:
        self.w, self.depth = w, 1
        # float64 (the QR/SVD/eigh kernels): double vectors, unsuffixed literals, int64 masks.
        self.suffix = "" if double else "f"
        if double:
            self.safe_min = 2.2250738585072014e-308
            self.eps = 2.220446049250313e-16

    def write_declare(self, kind: str, name: str, text: str) -> None:
        vector = "vi" if kind in (_codegen.INT, _codegen.BOOL) else "vf"
        self.w(f"{vector} {name} = {text};", self.depth)

    def write_assign(self, name: str, text: str) -> None:
        self.w(f"{name} = {text};", self.depth)

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        self.w("{", self.depth)
        self.depth += 1
        yield
        self.depth -= 1
        self.w("}", self.depth)

    def add_log(self, acc: str, x: _codegen.Expr) -> None:
        # log per lane with the C library's logf, like the emulator's metal::log.
        with self.scope():
            self.declare(_codegen.REAL, "m", x)
            self.w(f"for (int l = 0; l < W; ++l) {acc}[l] += __builtin_logf(m[l]);", self.depth)

    def literal(self, value: float, kind: str) -> str:
        if kind in (_codegen.INT, _codegen.BOOL):
            return str(value)
        return f"{float(value)!r}{self.suffix}"

    def operand(self, value: float, kind: str) -> str:
        if kind in (_codegen.INT, _codegen.BOOL):
            return f"splat_i({value})"
        return f"splat_f({self.literal(value, kind)})"

    def full(self, kind: str, value: float) -> str:
        return self.operand(value, kind)

    def function(self, call: _codegen.Call, args: list[str]) -> str | _codegen.Expr:
        x = call.args[0]
        meaning = self.real_meaning(call)
        if meaning is not None:
            return meaning
        if call.fn in ("abs", "abs1", "modulus"):
            return f"vabs({args[0]})"
        if call.fn == "sqrt":
            return f"vsqrt({args[0]})"
        if call.fn == "signbit":
            return f"((vi)({args[0]}) < splat_i(0))"
        if call.fn == "mul_unit":
            d = call.args[1]
            return x * _codegen.select(d > 0.0, 1.0, -1.0)
        raise ValueError(f"mpslinalg.small.cpu_simd: no C++ for {call.fn}")

    @contextlib.contextmanager
    def sweeps(self, count: int, flag: str) -> Iterator[None]:
        self.w(f"for (int sweep = 0; sweep < {count}; ++sweep) {{", self.depth)
        self.depth += 1
        self.declare(_codegen.BOOL, flag, _codegen.Full(0, _codegen.INT))
        yield
        # The whole block converged: no lane rotated in this sweep.
        self.w(f"if (!vany({flag})) break;", self.depth)
        self.depth -= 1
        self.w("}", self.depth)


class _CppComplex(_Cpp):
    """`_Cpp` for complex64: a value of the matrix dtype is a ``vc``, the real and the imaginary
    parts of the block's entries as two ``vf`` (`_COMPLEX_TYPES`, whose operators compute as
    metal/common/scalar.h's ``mpsl::mul`` / ``mpsl::div`` and Metal's componentwise float2
    arithmetic, so the results are the emulated Metal kernel's bits); selects of such values
    are ``csel``."""

    def write_declare(self, kind: str, name: str, text: str) -> None:
        if kind == _codegen.FLOAT:
            self.w(f"vc {name} = {text};", self.depth)
        else:
            super().write_declare(kind, name, text)

    def literal(self, value: float, kind: str) -> str:
        if kind == _codegen.FLOAT:
            return f"cst({float(value)!r}f)"
        return super().literal(value, kind)

    def operand(self, value: float, kind: str) -> str:
        if kind == _codegen.FLOAT:
            return self.literal(value, kind)
        return super().operand(value, kind)

    def special(self, e: _codegen.Expr) -> tuple[str, int] | None:
        if isinstance(e, _codegen.Select) and e.kind == _codegen.FLOAT:
            return (f"csel({self.render(e.cond)}, {self.branch(e.a)}, {self.branch(e.b)})",
                    _codegen.ATOM)
        return None

    def function(self, call: _codegen.Call, args: list[str]) -> str | _codegen.Expr:
        if call.fn == "complex":
            return f"vc{{{self.branch(call.args[0])}, {self.branch(call.args[1])}}}"
        if call.args[0].kind == _codegen.FLOAT:
            own = {"conj": f"conj_c({args[0]})", "re": f"({args[0]}).re",
                   "im": f"({args[0]}).im", "abs1": f"(vabs(({args[0]}).re) + "
                   f"vabs(({args[0]}).im))"}.get(call.fn)
            if own is None:
                raise ValueError(f"mpslinalg.small.cpu_simd: no complex C++ for {call.fn}")
            return own
        return super().function(call, args)


#: The complex type of `_CppComplex` in each variant's namespace (ATTR: its target), after
#: MPSL_VECTOR_TYPES: the operators of metal/common/scalar.h on blocks of complex numbers.
_COMPLEX_TYPES = """\
// Complex values of a block: the real and the imaginary parts as two vectors (ATTR: the
// variant's target). Products and quotients as metal/common/scalar.h's mpsl::mul and mpsl::div
// (Smith's quotient, NaN for an infinite divisor), the rest componentwise like Metal's float2,
// so each lane rounds like the emulated Metal kernel.
#define MPSL_COMPLEX_TYPES(ATTR) \\
  struct vc { vf re, im; }; \\
  ATTR static inline vc cst(T x) { return vc{splat_f(x), splat_f(T(0))}; } \\
  ATTR static inline vc csel(vi c, vc a, vc b) { return vc{c ? a.re : b.re, c ? a.im : b.im}; } \\
  ATTR static inline vc conj_c(vc a) { return vc{a.re, -a.im}; } \\
  ATTR static inline vc operator+(vc a, vc b) { return vc{a.re + b.re, a.im + b.im}; } \\
  ATTR static inline vc operator-(vc a, vc b) { return vc{a.re - b.re, a.im - b.im}; } \\
  ATTR static inline vc operator-(vc a) { return vc{-a.re, -a.im}; } \\
  ATTR static inline vc operator*(vc a, vc b) { \\
    return vc{a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re}; } \\
  ATTR static inline vc operator*(vc a, vf r) { return vc{a.re * r, a.im * r}; } \\
  ATTR static inline vc operator/(vc a, vc b) { \\
    vf inf = splat_f(__builtin_inff()); \\
    vi infinite = (vabs(b.re) == inf) | (vabs(b.im) == inf); \\
    vi wide = vabs(b.re) >= vabs(b.im); \\
    vf r1 = b.im / b.re; vf d1 = b.re + b.im * r1; \\
    vf r2 = b.re / b.im; vf d2 = b.im + b.re * r2; \\
    vf re = wide ? (a.re + a.im * r1) / d1 : (a.re * r2 + a.im) / d2; \\
    vf im = wide ? (a.im - a.re * r1) / d1 : (a.im * r2 - a.re) / d2; \\
    vf nan = splat_f(__builtin_nanf("")); \\
    return vc{infinite ? nan : re, infinite ? nan : im}; }
"""


def _loop(w: _Writer, body: str) -> None:
    """``for l in lanes: body``, with a compile-time trip count for full blocks (the copy is
    then fully unrolled) and a run-time one for the tail block."""
    w(f"if (cnt == W) {{ for (int l = 0; l < W; ++l) {body} }}")
    w(f"else {{ for (int l = 0; l < cnt; ++l) {body} }}")


def _emit_block(w: _Writer, op: str, n: int) -> None:
    """The body of ``<op>_block``: cnt (<= W) matrices starting at matrix ``base``."""
    nn = n * n
    dl = _Cpp(w)
    # Transpose the block into structure of arrays (lanes past cnt are zeros, never stored).
    w(f"alignas(64) float t[{nn}][W] = {{}};")
    _loop(w, f"for (int e = 0; e < {nn}; ++e) t[e][l] = A[(base + l) * {nn} + e];")
    for i in range(n):
        for j in range(n):
            w(f"vf a{i}{j}; __builtin_memcpy(&a{i}{j}, t[{i * n + j}], sizeof(vf));")
    if op in _codegen.TRANSPOSED_OPS:
        _codegen.emit_transpose(dl, n)
    _codegen.emit_factor(dl, n)
    if op == "inv":
        w(f"alignas(64) float o[{nn}][W];")

        def keep(j: int) -> None:
            for i in range(n):
                w(f"__builtin_memcpy(o[{i * n + j}], &x{i}, sizeof(vf));", dl.depth)

        _codegen.emit_inverse(dl, n, keep)
        _loop(w, f"{{ for (int e = 0; e < {nn}; ++e) X[(base + l) * {nn} + e] = o[e][l]; "
              "INFO[base + l] = info[l]; }")
    elif op == "solve":
        w("for (long j = 0; j < nrhs; ++j) {")
        w(f"alignas(64) float b[{n}][W] = {{}};")
        _loop(w, f"for (int i = 0; i < {n}; ++i) b[i][l] = B[((base + l) * {n} + i) * nrhs + j];")
        for i in range(n):
            w(f"vf x{i}; __builtin_memcpy(&x{i}, b[{i}], sizeof(vf));")
        _codegen.emit_solve_vector(dl, n)
        for i in range(n):
            w(f"__builtin_memcpy(b[{i}], &x{i}, sizeof(vf));")
        _loop(w, f"for (int i = 0; i < {n}; ++i) X[((base + l) * {n} + i) * nrhs + j] = b[i][l];")
        w("}")
        w("for (int l = 0; l < cnt; ++l) INFO[base + l] = info[l];")
    elif op == "det":
        det = _codegen.emit_det(dl, n)
        w(f"d = {det};")
        w("for (int l = 0; l < cnt; ++l) DET[base + l] = d[l];")
    else:
        _codegen.emit_perm_sign(dl, n)
        w("vf s = splat_f(1.0f) * sgn;")
        w("alignas(64) float logabs[W] = {};")
        _codegen.emit_slogdet(dl, n, "s", "logabs")
        w("for (int l = 0; l < cnt; ++l) { SIGN[base + l] = s[l]; LOGABS[base + l] = logabs[l]; }")


_ARGS = {
    "inv": "const float* A, float* X, int* INFO",
    "solve": "const float* A, const float* B, float* X, int* INFO, long nrhs",
    "det": "const float* A, float* DET",
    "slogdet": "const float* A, float* SIGN, float* LOGABS",
}
_CALL = {
    "inv": "A, X, INFO",
    "solve": "A, B, X, INFO, nrhs",
    "det": "A, DET",
    "slogdet": "A, SIGN, LOGABS",
}

_PRELUDE = f"""\
// Generated by `python -m mpslinalg.small.generated` from mpslinalg/small/cpu_simd.py:
// the small-path kernels of metal/linalg/small_inverse.h
// over blocks of W matrices in structure-of-arrays vectors.
#include <thread>
#include <vector>

namespace {{
// Threads get whole multiples of G matrices (a multiple of every variant's W).
constexpr long G = {_W};
// Fewest matrices worth another thread: starting one costs ~30 us, about the time to invert
// 2000-3000 4x4 matrices (measured), so smaller batches run on fewer threads.
constexpr long kMinPerThread = 4096;

// W lanes of T (float or double) / IT (the integer of T's width) per vector, and the helpers of
// one variant (ATTR: its target; ABS: IT with every bit but the sign bit set).
#define MPSL_VECTOR_TYPES(T, IT, ABS, WIDTH, ATTR) \\
  constexpr int W = WIDTH; \\
  typedef T vf __attribute__((vector_size(W * sizeof(T)))); \\
  typedef IT vi __attribute__((vector_size(W * sizeof(T)))); \\
  ATTR static inline vf splat_f(T x) {{ vf r; for (int l = 0; l < W; ++l) r[l] = x; \\
    return r; }} \\
  ATTR static inline vi splat_i(IT x) {{ vi r; for (int l = 0; l < W; ++l) r[l] = x; \\
    return r; }} \\
  ATTR static inline vf vabs(vf x) {{ return (vf)((vi)x & splat_i(ABS)); }} \\
  ATTR static inline vf vsqrt(vf x) {{ vf r; for (int l = 0; l < W; ++l) \\
    r[l] = lane_sqrt(x[l]); return r; }} \\
  ATTR static inline bool vany(vi x) {{ IT r = 0; for (int l = 0; l < W; ++l) r |= x[l]; \\
    return r != 0; }}

static inline float lane_sqrt(float x) {{ return __builtin_sqrtf(x); }}
static inline double lane_sqrt(double x) {{ return __builtin_sqrt(x); }}

// Run body(first, last) over [0, count) split in nthreads ranges of whole groups.
template <typename F>
void parallel(long count, int nthreads, F body) {{
  long groups = (count + G - 1) / G;
  if (nthreads > count / kMinPerThread) nthreads = int(count / kMinPerThread);
  if (nthreads <= 1) {{ body(0L, count); return; }}
  std::vector<std::thread> pool;
  long per = (groups + nthreads - 1) / nthreads * G;
  for (int t = 1; t < nthreads; ++t) {{
    long first = t * per, last = first + per < count ? first + per : count;
    if (first < last) pool.emplace_back(body, first, last);
  }}
  body(0L, per < count ? per : count);
  for (auto& th : pool) th.join();
}}
}}  // namespace
"""


def _variant(op: str, n: int, suffix: str, attr: str, width: int) -> str:
    w = _Writer()
    name = f"{op}_n{n}_{suffix}"
    w(f"namespace {suffix}_{op}_{n} {{", 0)
    w(f"MPSL_VECTOR_TYPES(float, int, 0x7fffffff, {width}, {attr})", 0)
    # noinline: the elimination is emitted once, for full and tail blocks alike.
    w(f"{attr} __attribute__((noinline)) static void block("
      f"{_ARGS[op]}, long base, int cnt) {{", 0)
    _emit_block(w, op, n)
    w("}", 0)
    w("}", 0)
    w(f"{attr} __attribute__((noinline)) static void {name}({_ARGS[op]}, long first, "
      "long last) {", 0)
    w(f"using namespace {suffix}_{op}_{n};")
    w("long base = first;")
    w(f"for (; base + W <= last; base += W) block({_CALL[op]}, base, W);")
    w(f"if (base < last) block({_CALL[op]}, base, int(last - base));")
    w("}", 0)
    return "\n".join(w.lines) + "\n"


#: The AVX2 variants exist on x86-64 only; elsewhere the entry point takes the baseline.
_X86_ONLY = "#if defined(__x86_64__)"


def _entry_point(name: str, args: str, call: str) -> str:
    """``mpsl_small_<name>``: the AVX2 variant ``<name>_avx2`` where the CPU has AVX2 (and the
    caller does not ask for the baseline), else ``<name>_base``; the batch split over
    ``nthreads`` threads."""
    return (f'extern "C" __attribute__((visibility("default"))) void mpsl_small_{name}('
            f"{args}, long batch, int nthreads, int baseline) {{\n"
            f"{_X86_ONLY}\n"
            f'  auto fn = !baseline && __builtin_cpu_supports("avx2") ? {name}_avx2 : '
            f"{name}_base;\n"
            "#else\n"
            f"  auto fn = {name}_base;\n"
            "#endif\n"
            f"  parallel(batch, nthreads, [&](long first, long last) {{ fn({call}, first, last); "
            "});\n"
            "}\n")


def _x86_only(code: str) -> str:
    return f"{_X86_ONLY}\n{code}#endif\n"


@generated.generates("native/small_cpu.cpp")
def source() -> str:
    """The C++ source of the library (all ops, n = 1..4), as checked in and compiled by the
    build."""
    parts = [_PRELUDE]
    for op in _OPS:
        for n in range(1, MAX_N + 1):
            # The baseline with 16-byte vectors (SSE2, NEON): wider generic vectors split into
            # halves cost 3x the compile time for no speed.
            parts.append(_variant(op, n, "base", "", _W // 2))
            parts.append(_x86_only(_variant(op, n, "avx2", '__attribute__((target("avx2")))',
                                            _W)))
            parts.append(_entry_point(f"{op}_n{n}", _ARGS[op], _CALL[op]))
    return "\n".join(parts)


# ------------------------------------------------------------------------------ build and load

def _bind(lib: ctypes.CDLL) -> None:
    p, i64, i32 = ctypes.c_void_p, ctypes.c_long, ctypes.c_int
    nptr = {"inv": 3, "solve": 4, "det": 2, "slogdet": 3}
    for op in _OPS:
        for n in range(1, MAX_N + 1):
            fn = getattr(lib, f"mpsl_small_{op}_n{n}")
            fn.restype = None
            fn.argtypes = [p] * nptr[op] + ([i64] if op == "solve" else []) + [i64, i32, i32]


#: The inverse / solve / det library, loaded from the package (see `mpslinalg.small.native`).
LIBRARY = native.NativeLibrary("small_cpu", _bind)


def ready() -> bool:
    """Whether the library is loaded (decided at import: the same answer from the first call
    on)."""
    return LIBRARY.loaded is not None


def _prepare(A: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    batch = 1
    for s in A.shape[:-2]:
        batch *= s
    # The kernels read raw memory: contiguous, no lazy negation (inputs are never modified).
    return A.resolve_neg().contiguous(), A.shape[-1], batch


def _call(op: str, n: int, batch: int, *args, threads: int) -> None:
    if batch == 0:
        return
    fn = getattr(LIBRARY.require(), f"mpsl_small_{op}_n{n}")
    ptrs = [a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args]
    fn(*ptrs, batch, max(1, threads), int(_BASELINE))


def small_inv_ex(A: torch.Tensor, threads: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(inverse, info) of A (*, n, n) float32 on CPU."""
    A, n, batch = _prepare(A)
    X = torch.empty(A.shape, dtype=A.dtype)
    info = torch.empty(A.shape[:-2], dtype=torch.int32)
    _call("inv", n, batch, A, X, info, threads=threads)
    return X, info


def small_solve_ex(A: torch.Tensor, B: torch.Tensor,
                   threads: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(X, info) with A X = B for A (*, n, n), B (*, n, k) of the same batch shape."""
    A, n, batch = _prepare(A)
    B = B.to(A.dtype).resolve_neg().contiguous()
    X = torch.empty(B.shape, dtype=A.dtype)
    info = torch.empty(A.shape[:-2], dtype=torch.int32)
    # nrhs = 0 (no right-hand sides): only info, the factorisation still runs.
    _call("solve", n, batch, A, B, X, info, B.shape[-1], threads=threads)
    return X, info


def small_det(A: torch.Tensor, threads: int = 1) -> torch.Tensor:
    """det(A) for A (*, n, n)."""
    A, n, batch = _prepare(A)
    det = torch.empty(A.shape[:-2], dtype=A.dtype)
    _call("det", n, batch, A, det, threads=threads)
    return det


def small_slogdet(A: torch.Tensor, threads: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(sign, log|det|) for A (*, n, n); singular gives (0, -inf)."""
    A, n, batch = _prepare(A)
    sign = torch.empty(A.shape[:-2], dtype=A.dtype)
    logabs = torch.empty(A.shape[:-2], dtype=torch.float32)
    _call("slogdet", n, batch, A, sign, logabs, threads=threads)
    return sign, logabs


# ------------------------------------------------------------------ orthogonal factorisations
#
# A second library (built next to the first, so that neither's cache key depends on the other):
# Householder QR of m x n matrices, m, n <= MAX_N, float32 and float64, by the generator's
# emit_qr_factor / emit_qr_q (the operations of qr_small in metal/linalg/qr_small.h).

#: The real types of the orthogonal kernels: (C++ type, mask integer, sign-clear mask, bytes).
#: Keyed by name: the generated source depends on no torch dtype.
_REAL_TYPES = {
    "f32": ("float", "int", "0x7fffffff", 4),
    "f64": ("double", "long long", "0x7fffffffffffffffLL", 8),
}
#: torch dtype -> key of _REAL_TYPES.
_REAL_KEYS = {torch.float32: "f32", torch.float64: "f64"}
#: Every element type of a generated kernel: the real ones, and complex64 ("c64": pairs of
#: float vectors, `_CppComplex`).
_KERNEL_TYPES = {**_REAL_TYPES, "c64": _REAL_TYPES["f32"]}

#: -fno-math-errno: sqrt never sets errno (no rounding change), so lane loops of sqrt vectorise.
_ORTH_FLAGS = [*_FLAGS, "-fno-math-errno"]

#: Each native library's flags, by name: ``native/<name>.cpp`` is its source.
_LIBRARY_FLAGS = {"small_cpu": _FLAGS, "small_cpu_orth": _ORTH_FLAGS, "small_cpu_expm": _FLAGS,
                  "small_cpu_chol": _ORTH_FLAGS, "small_cpu_eig": _ORTH_FLAGS}


@generated.generates("native/libraries.cmake")
def cmake_libraries() -> str:
    """The libraries CMakeLists.txt builds and the flags of each (`_LIBRARY_FLAGS`)."""
    lines = ["# Generated by `python -m mpslinalg.small.generated` from "
             "mpslinalg/small/cpu_simd.py:",
             "# the native libraries CMakeLists.txt builds, and the compiler flags of each.",
             f"set(MPSL_NATIVE_LIBRARIES {' '.join(_LIBRARY_FLAGS)})"]
    lines += [f"set(MPSL_FLAGS_{name} {' '.join(flags)})" for name, flags in _LIBRARY_FLAGS.items()]
    return "\n".join(lines) + "\n"


def _load(w: _Writer, m: int, n: int) -> None:
    """a{i}{j} = entry (i, j) of the block's matrices in A (contiguous (batch, m, n)), through
    a structure-of-arrays buffer (lanes past cnt are zeros, never stored)."""
    w(f"alignas(64) T t[{m * n}][W] = {{}};")
    _loop(w, f"for (int e = 0; e < {m * n}; ++e) t[e][l] = A[(base + l) * {m * n} + e];")
    for i in range(m):
        for j in range(n):
            w(f"vf a{i}{j}; __builtin_memcpy(&a{i}{j}, t[{i * n + j}], sizeof(vf));")


def _store(w: _Writer, ptr: str, rows: int, cols: int, value) -> None:
    """Entry (i, j) of the block's matrices in ``ptr`` (contiguous (batch, rows, cols)) =
    the vector expression value(i, j)."""
    w("{")
    w(f"alignas(64) T o[{rows * cols}][W];")
    for i in range(rows):
        for j in range(cols):
            w(f"{{ vf v = {value(i, j)}; __builtin_memcpy(o[{i * cols + j}], &v, "
              "sizeof(vf)); }")
    _loop(w, f"for (int e = 0; e < {rows * cols}; ++e) "
          f"{ptr}[(base + l) * {rows * cols} + e] = o[e][l];")
    w("}")


def _qr_block(w: _Writer, m: int, n: int, double: bool) -> None:
    """The body of the QR block function: cnt (<= W) matrices from ``base``; Q and R in the
    layout of torch.linalg.qr for the run-time ``mode``."""
    k = min(m, n)
    dl = _Cpp(w, double)
    _load(w, m, n)
    _codegen.emit_qr_factor(dl, m, n)

    def store(ptr: str, name: str, rows: int, cols: int, value) -> None:
        _store(w, ptr, rows, cols, value)

    def r_value(i: int, j: int) -> str:
        return f"a{i}{j}" if i <= j and i < k else "splat_f(0)"

    w(f"if (mode == {QR_MODES['complete']}) {{")
    store("R", "r", m, n, r_value)
    w("} else {")
    store("R", "r", k, n, r_value)
    w("}")
    w(f"if (mode == {QR_MODES['r']}) return;")
    if m > k:
        w(f"if (mode == {QR_MODES['complete']}) {{")
        with dl.scope():
            _codegen.emit_qr_q(dl, m, n, m)
            store("Q", "q", m, m, lambda i, j: f"q{i}{j}")
        w("return;")
        w("}")
    _codegen.emit_qr_q(dl, m, n, k)
    store("Q", "q", m, k, lambda i, j: f"q{i}{j}")


_QR_ARGS = "const T* A, T* Q, T* R, long mode"

#: Shapes (m, n) of the generated SVD kernels: square and the camera's 3 x 4 / 4 x 3.
SVD_SHAPES = ((1, 1), (2, 2), (3, 3), (4, 4), (3, 4), (4, 3))

#: SVD variants: singular values only, U (m x k) / Vh (k x n), U (m x m) / Vh (n x n).
SVD_VARIANTS = ("vals", "reduced", "full")

_SVD_ARGS = "const T* A, T* U, T* S, T* VH"
_EIGH_ARGS = "const T* A, T* L, T* V, long upper"


def _svd_variants(m: int, n: int) -> tuple[str, ...]:
    """The variants generated for m x n ('full' is 'reduced' for square matrices)."""
    return SVD_VARIANTS if m != n else SVD_VARIANTS[:2]


def _svd_block(w: _Writer, m: int, n: int, variant: str, double: bool) -> None:
    """The body of the SVD block function (see `mpslinalg.small.codegen.emit_svd_any_shape`)."""
    dl = _Cpp(w, double)
    _load(w, m, n)
    for name, rows, cols, value in _codegen.emit_svd_any_shape(dl, m, n, variant):
        _store(w, name, rows, cols, value)


def _eigh_block(w: _Writer, n: int, want_v: bool, double: bool) -> None:
    """The body of the eigh block function (see `mpslinalg.small.codegen.emit_eigh`):
    the triangle named by the run-time ``upper`` is read."""
    dl = _Cpp(w, double)
    _load(w, n, n)
    for i in range(n):
        for j in range(i, n):
            w(f"vf h{i}{j} = upper ? a{i}{j} : a{j}{i};")
    _codegen.emit_eigh(dl, n, want_v)
    _store(w, "L", 1, n, lambda i, j: f"l{j}")
    if want_v:
        _store(w, "V", n, n, lambda i, j: f"v{i}{j}")


def _svd_name(m: int, n: int, variant: str, dtype: torch.dtype | str) -> str:
    return f"svd_m{m}_n{n}_{variant}_{_key(dtype)}"


def _eigh_name(n: int, want_v: bool, dtype: torch.dtype | str) -> str:
    return f"eigh_n{n}_{'vecs' if want_v else 'vals'}_{_key(dtype)}"


def _orth_variant(name: str, dtype: str, suffix: str, attr: str, width: int,
                  args: str, call: str, body) -> str:
    ctype, itype, absmask, _ = _KERNEL_TYPES[dtype]
    w = _Writer()
    w(f"namespace {suffix}_{name} {{", 0)
    w(f"typedef {ctype} T;", 0)
    w(f"MPSL_VECTOR_TYPES({ctype}, {itype}, {absmask}, {width}, {attr})", 0)
    if dtype == "c64":
        w(f"MPSL_COMPLEX_TYPES({attr})", 0)
    w(f"{attr} __attribute__((noinline)) static void block({args}, long base, int cnt) {{", 0)
    body(w)
    w("}", 0)
    w("}", 0)
    w(f"{attr} __attribute__((noinline)) static void {name}_{suffix}("
      f"{args.replace('T*', ctype + '*')}, long first, long last) {{", 0)
    w(f"using namespace {suffix}_{name};")
    w("long base = first;")
    w(f"for (; base + W <= last; base += W) block({call}, base, W);")
    w(f"if (base < last) block({call}, base, int(last - base));")
    w("}", 0)
    return "\n".join(w.lines) + "\n"


def _orth_function(name: str, dtype: str, args: str, call: str, body) -> str:
    """Both instruction-set variants of one kernel and its ``mpsl_small_<name>`` entry point
    (``dtype``: a key of _REAL_TYPES)."""
    ctype, size = _KERNEL_TYPES[dtype][0], _KERNEL_TYPES[dtype][3]
    lanes = _W * 4 // size
    return "\n".join([
        _orth_variant(name, dtype, "base", "", lanes // 2, args, call, body),
        _x86_only(_orth_variant(name, dtype, "avx2", '__attribute__((target("avx2")))', lanes,
                                args, call, body)),
        _entry_point(name, args.replace("T*", ctype + "*"), call)])


def _key(dtype: torch.dtype | str) -> str:
    return dtype if isinstance(dtype, str) else _REAL_KEYS[dtype]


def _qr_name(m: int, n: int, dtype: torch.dtype | str) -> str:
    return f"qr_m{m}_n{n}_{_key(dtype)}"


@generated.generates("native/small_cpu_orth.cpp")
def orth_source() -> str:
    """The C++ source of the orthogonal-factorisation library, as checked in and compiled by
    the build."""
    parts = [_PRELUDE.replace("the small-path kernels of metal/linalg/small_inverse.h",
                              "Householder QR as qr_small in metal/linalg/qr_small.h")]
    for dtype in _REAL_TYPES:
        for m in range(1, MAX_N + 1):
            for n in range(1, MAX_N + 1):
                parts.append(_orth_function(
                    _qr_name(m, n, dtype), dtype, _QR_ARGS, "A, Q, R, mode",
                    lambda w, m=m, n=n, dtype=dtype: _qr_block(w, m, n,
                                                              dtype == "f64")))
        for m, n in SVD_SHAPES:
            for variant in _svd_variants(m, n):
                parts.append(_orth_function(
                    _svd_name(m, n, variant, dtype), dtype, _SVD_ARGS, "A, U, S, VH",
                    lambda w, m=m, n=n, v=variant, dtype=dtype: _svd_block(
                        w, m, n, v, dtype == "f64")))
        for n in range(1, MAX_N + 1):
            for want_v in (False, True):
                parts.append(_orth_function(
                    _eigh_name(n, want_v, dtype), dtype, _EIGH_ARGS, "A, L, V, upper",
                    lambda w, n=n, v=want_v, dtype=dtype: _eigh_block(
                        w, n, v, dtype == "f64")))
    return "\n".join(parts)


def _bind_orth(lib: ctypes.CDLL) -> None:
    p, i64, i32 = ctypes.c_void_p, ctypes.c_long, ctypes.c_int
    for dtype in _REAL_TYPES:
        for m in range(1, MAX_N + 1):
            for n in range(1, MAX_N + 1):
                fn = getattr(lib, f"mpsl_small_{_qr_name(m, n, dtype)}")
                fn.restype = None
                fn.argtypes = [p, p, p, i64, i64, i32, i32]
        for m, n in SVD_SHAPES:
            for variant in _svd_variants(m, n):
                fn = getattr(lib, f"mpsl_small_{_svd_name(m, n, variant, dtype)}")
                fn.restype = None
                fn.argtypes = [p, p, p, p, i64, i32, i32]
        for n in range(1, MAX_N + 1):
            for want_v in (False, True):
                fn = getattr(lib, f"mpsl_small_{_eigh_name(n, want_v, dtype)}")
                fn.restype = None
                fn.argtypes = [p, p, p, i64, i64, i32, i32]


#: The orthogonal-factorisation library, loaded from the package like `LIBRARY`.
ORTH_LIBRARY = native.NativeLibrary("small_cpu_orth", _bind_orth)

#: dtypes the orthogonal kernels serve (complex takes torch.linalg).
ORTH_DTYPES = tuple(_REAL_KEYS)


def small_qr(A: torch.Tensor, mode: str = "reduced",
             threads: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(Q, R) of torch.linalg.qr(A, mode) for A (*, m, n) float32/float64 on CPU, m, n <= 4
    (mode 'r': Q is an empty tensor)."""
    *batch_shape, m, n = A.shape
    A = A.resolve_neg().contiguous()
    batch = math.prod(batch_shape)
    k = min(m, n)
    rows = m if mode == "complete" else k
    R = torch.empty((*batch_shape, rows, n), dtype=A.dtype)
    Q = (torch.empty((*batch_shape, m, rows), dtype=A.dtype) if mode != "r"
         else torch.empty(0, dtype=A.dtype))
    if batch:
        fn = getattr(ORTH_LIBRARY.require(), f"mpsl_small_{_qr_name(m, n, A.dtype)}")
        fn(A.data_ptr(), Q.data_ptr(), R.data_ptr(), QR_MODES[mode], batch, max(1, threads),
           int(_BASELINE))
    return Q, R


def small_svd(A: torch.Tensor, full_matrices: bool = True, compute_uv: bool = True,
              threads: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(U, S, Vh) of torch.linalg.svd(A, full_matrices) for A (*, m, n) float32/float64 on CPU,
    (m, n) in `SVD_SHAPES`; without ``compute_uv`` U and Vh are empty tensors."""
    *batch_shape, m, n = A.shape
    A = A.resolve_neg().contiguous()
    batch = math.prod(batch_shape)
    k = min(m, n)
    variant = "vals" if not compute_uv else ("full" if full_matrices and m != n else "reduced")
    S = torch.empty((*batch_shape, k), dtype=A.dtype)
    empty = torch.empty(0, dtype=A.dtype)
    U = torch.empty((*batch_shape, m, m if full_matrices else k), dtype=A.dtype) if compute_uv \
        else empty
    Vh = torch.empty((*batch_shape, n if full_matrices else k, n), dtype=A.dtype) if compute_uv \
        else empty
    if batch:
        fn = getattr(ORTH_LIBRARY.require(), f"mpsl_small_{_svd_name(m, n, variant, A.dtype)}")
        fn(A.data_ptr(), U.data_ptr(), S.data_ptr(), Vh.data_ptr(), batch, max(1, threads),
           int(_BASELINE))
    return U, S, Vh


def small_eigh(A: torch.Tensor, upper: bool = False, compute_v: bool = True,
               threads: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(L, V) of torch.linalg.eigh(A, 'U' if upper else 'L') for symmetric A (*, n, n)
    float32/float64 on CPU, n <= 4 (only the named triangle is read); without ``compute_v`` V
    is an empty tensor."""
    *batch_shape, n, _ = A.shape
    A = A.resolve_neg().contiguous()
    batch = math.prod(batch_shape)
    L = torch.empty((*batch_shape, n), dtype=A.dtype)
    V = torch.empty((*batch_shape, n, n) if compute_v else (0,), dtype=A.dtype)
    if batch:
        fn = getattr(ORTH_LIBRARY.require(), f"mpsl_small_{_eigh_name(n, compute_v, A.dtype)}")
        fn(A.data_ptr(), L.data_ptr(), V.data_ptr(), int(upper), batch, max(1, threads),
           int(_BASELINE))
    return L, V


# ------------------------------------------------------------------------------ matrix exponential
#
# A third library: scaling and squaring of `mpslinalg.small.codegen.emit_matrix_exp`, float32
# (float64 takes torch.linalg.matrix_exp), bit-identical to small_matrix_exp of
# metal/linalg/small_matrix_exp.h in the emulator. Its squarings loop leaves once no lane of a
# block needs another squaring.

_EXPM_ARGS = "const T* A, T* X"


def _expm_name(n: int) -> str:
    return f"matrix_exp_n{n}_f32"


def _expm_block(w: _Writer, n: int) -> None:
    """The body of the matrix_exp block function: exp of cnt (<= W) matrices from ``base``."""
    dl = _Cpp(w)
    _load(w, n, n)
    _codegen.emit_matrix_exp(dl, n)
    _store(w, "X", n, n, lambda i, j: f"e{i}{j}")


@generated.generates("native/small_cpu_expm.cpp")
def expm_source() -> str:
    """The C++ source of the matrix-exponential library, as checked in and compiled by the
    build."""
    parts = [_PRELUDE.replace("the small-path kernels of metal/linalg/small_inverse.h",
                              "the matrix exponential of metal/linalg/small_matrix_exp.h")]
    for n in range(1, MAX_N + 1):
        parts.append(_orth_function(_expm_name(n), "f32", _EXPM_ARGS, "A, X",
                                    lambda w, n=n: _expm_block(w, n)))
    return "\n".join(parts)


def _bind_expm(lib: ctypes.CDLL) -> None:
    p, i64, i32 = ctypes.c_void_p, ctypes.c_long, ctypes.c_int
    for n in range(1, MAX_N + 1):
        fn = getattr(lib, f"mpsl_small_{_expm_name(n)}")
        fn.restype = None
        fn.argtypes = [p, p, i64, i32, i32]


#: The matrix-exponential library, loaded from the package like `LIBRARY`.
EXPM_LIBRARY = native.NativeLibrary("small_cpu_expm", _bind_expm)


# ------------------------------------------------------------------------------ Cholesky family
#
# A fourth library: cholesky_ex, solve_triangular and cholesky_solve of n <= 4 matrices, float32
# and complex64 (`mpslinalg.small.codegen`'s emit_cholesky, emit_triangular_solve,
# emit_cholesky_solve; complex through `_CppComplex`),
# bit-identical to metal/linalg/small_cholesky.h in the emulator. One function per variant
# (upper, left, unitriangular), as the Metal kernels: the substitution's direction is the code's
# shape. -fno-math-errno: the square root of a non-positive pivot (selected away) sets no errno.

_CHOL_ARGS = "const T* A, T* L, int* INFO, long trans"
_RHS_ARGS = "const T* A, const T* B, T* X, long nrhs, long trans"


#: torch dtype -> the key of the Cholesky-family kernels' element type (`_KERNEL_TYPES`).
_CHOL_KEYS = {torch.float32: "f32", torch.complex64: "c64"}


def _chol_name(n: int, upper: bool, key: str) -> str:
    return f"cholesky_n{n}_upper{int(upper)}_{key}"


def _trsm_name(n: int, left: bool, upper: bool, unit: bool, key: str) -> str:
    return f"solve_triangular_n{n}_left{int(left)}_upper{int(upper)}_unit{int(unit)}_{key}"


def _chol_solve_name(n: int, upper: bool, key: str) -> str:
    return f"cholesky_solve_n{n}_upper{int(upper)}_{key}"


def _parts(complex_: bool) -> tuple[tuple[str, str], ...]:
    """(suffix of the SoA buffer, member of the value) per part of an entry: the value itself
    for a real dtype, .re and .im of a ``vc`` for complex (interleaved in memory)."""
    return (("_re", ".re"), ("_im", ".im")) if complex_ else (("", ""),)


def _load_either_layout(w: _Writer, n: int, complex_: bool = False) -> None:
    """a{i}{j} = entry (i, j) of the block's matrices in A, stored row by row (contiguous
    (batch, n, n)) or, where the run-time ``trans`` is set, column by column (A.mT contiguous:
    torch's own factors and solutions are batches of column-major matrices, and gathering them
    costs torch many times the kernel)."""
    nn, parts = n * n, _parts(complex_)
    stride = len(parts)
    for p, (suffix, _) in enumerate(parts):
        w(f"alignas(64) T t{suffix}[{nn}][W] = {{}};")
        _loop(w, f"for (int e = 0; e < {nn}; ++e) "
              f"t{suffix}[e][l] = A[((base + l) * {nn} + e) * {stride} + {p}];")
    for i in range(n):
        for j in range(n):
            w(f"{'vc' if complex_ else 'vf'} a{i}{j};")
            for suffix, member in parts:
                w(f"__builtin_memcpy(&a{i}{j}{member}, t{suffix}[trans ? {j * n + i} : "
                  f"{i * n + j}], sizeof(vf));")


def _store_parts(w: _Writer, ptr: str, rows: int, cols: int, value, complex_: bool) -> None:
    """`_store` for either dtype: value(i, j) an expression of the matrix dtype."""
    parts = _parts(complex_)
    w("{")
    for suffix, _ in parts:
        w(f"alignas(64) T o{suffix}[{rows * cols}][W];")
    for i in range(rows):
        for j in range(cols):
            w(f"{{ {'vc' if complex_ else 'vf'} v = {value(i, j)};")
            for suffix, member in parts:
                w(f"__builtin_memcpy(o{suffix}[{i * cols + j}], &v{member}, sizeof(vf));")
            w("}")
    for p, (suffix, _) in enumerate(parts):
        _loop(w, f"for (int e = 0; e < {rows * cols}; ++e) "
              f"{ptr}[((base + l) * {rows * cols} + e) * {len(parts)} + {p}] = o{suffix}[e][l];")
    w("}")


def _chol_block(w: _Writer, n: int, upper: bool, complex_: bool) -> None:
    """The body of the cholesky block function: factor and info of cnt (<= W) matrices."""
    dl = _CppComplex(w) if complex_ else _Cpp(w)
    _load_either_layout(w, n, complex_)
    _codegen.emit_hermitian_lower(dl, n, upper, "l", complex_)
    _codegen.emit_cholesky(dl, n, complex_)
    entry = _codegen.cholesky_factor_entry(n, upper, complex_)
    zero = dl.operand(0.0, _codegen.FLOAT)
    _store_parts(w, "L", n, n, lambda i, j: zero if entry(i, j) is None
                 else dl.render(entry(i, j)), complex_)
    w("for (int l = 0; l < cnt; ++l) INFO[base + l] = info[l];")


def _rhs_block(w: _Writer, n: int, column_major: bool, complex_: bool, body) -> None:
    """The block's right-hand sides one at a time: x{i} loaded from B, ``body()``, stored to X
    (B n x nrhs per matrix, or nrhs x n with ``column_major``: one right-hand side per row)."""
    parts = _parts(complex_)
    at = (f"((base + l) * nrhs + j) * {n} + i" if column_major
          else f"((base + l) * {n} + i) * nrhs + j")
    w("for (long j = 0; j < nrhs; ++j) {")
    for p, (suffix, _) in enumerate(parts):
        w(f"alignas(64) T b{suffix}[{n}][W] = {{}};")
        _loop(w, f"for (int i = 0; i < {n}; ++i) b{suffix}[i][l] = B[({at}) * {len(parts)} + {p}];")
    for i in range(n):
        w(f"{'vc' if complex_ else 'vf'} x{i};")
        for suffix, member in parts:
            w(f"__builtin_memcpy(&x{i}{member}, b{suffix}[{i}], sizeof(vf));")
    body()
    for p, (suffix, member) in enumerate(parts):
        for i in range(n):
            w(f"__builtin_memcpy(b{suffix}[{i}], &x{i}{member}, sizeof(vf));")
        _loop(w, f"for (int i = 0; i < {n}; ++i) X[({at}) * {len(parts)} + {p}] = b{suffix}[i][l];")
    w("}")


def _trsm_block(w: _Writer, n: int, left: bool, upper: bool, unit: bool, complex_: bool) -> None:
    """The body of the solve_triangular block function."""
    dl = _CppComplex(w) if complex_ else _Cpp(w)
    _load_either_layout(w, n, complex_)
    _rhs_block(w, n, not left, complex_, lambda: _codegen.emit_triangular_solve(
        dl, n, _codegen.triangular_entry(left), _codegen.triangular_solves_lower(left, upper),
        unit))


def _chol_solve_block(w: _Writer, n: int, upper: bool, complex_: bool) -> None:
    """The body of the cholesky_solve block function (the factor in A)."""
    dl = _CppComplex(w) if complex_ else _Cpp(w)
    _load_either_layout(w, n, complex_)
    _codegen.emit_hermitian_lower(dl, n, upper, "l", complex_)
    _rhs_block(w, n, False, complex_, lambda: _codegen.emit_cholesky_solve(dl, n, complex_))


#: solve_triangular's variants: (left, upper, unitriangular).
_TRSM_VARIANTS = tuple((left, upper, unit) for left in (True, False) for upper in (False, True)
                       for unit in (False, True))


@generated.generates("native/small_cpu_chol.cpp")
def chol_source() -> str:
    """The C++ source of the Cholesky-family library, as checked in and compiled by the
    build."""
    parts = [_PRELUDE.replace("the small-path kernels of metal/linalg/small_inverse.h",
                              "the Cholesky family of metal/linalg/small_cholesky.h"),
             _COMPLEX_TYPES]
    for key in _CHOL_KEYS.values():
        cx = key == "c64"
        for n in range(1, MAX_N + 1):
            for upper in (False, True):
                parts.append(_orth_function(
                    _chol_name(n, upper, key), key, _CHOL_ARGS, "A, L, INFO, trans",
                    lambda w, n=n, u=upper, cx=cx: _chol_block(w, n, u, cx)))
                parts.append(_orth_function(
                    _chol_solve_name(n, upper, key), key, _RHS_ARGS, "A, B, X, nrhs, trans",
                    lambda w, n=n, u=upper, cx=cx: _chol_solve_block(w, n, u, cx)))
            for left, upper, unit in _TRSM_VARIANTS:
                parts.append(_orth_function(
                    _trsm_name(n, left, upper, unit, key), key, _RHS_ARGS,
                    "A, B, X, nrhs, trans",
                    lambda w, n=n, v=(left, upper, unit), cx=cx: _trsm_block(w, n, *v, cx)))
    return "\n".join(parts)


def _bind_chol(lib: ctypes.CDLL) -> None:
    p, i64, i32 = ctypes.c_void_p, ctypes.c_long, ctypes.c_int
    names = []
    for key in _CHOL_KEYS.values():
        for n in range(1, MAX_N + 1):
            for upper in (False, True):
                names += [(_chol_name(n, upper, key), [p, p, p, i64]),
                          (_chol_solve_name(n, upper, key), [p, p, p, i64, i64])]
            names += [(_trsm_name(n, *v, key), [p, p, p, i64, i64]) for v in _TRSM_VARIANTS]
    for name, args in names:
        fn = getattr(lib, f"mpsl_small_{name}")
        fn.restype = None
        fn.argtypes = [*args, i64, i32, i32]


#: The Cholesky-family library, loaded from the package like `LIBRARY`.
CHOL_LIBRARY = native.NativeLibrary("small_cpu_chol", _bind_chol)

#: dtypes the matrix-exponential kernels serve.
EXPM_DTYPES = (torch.float32,)


def small_matrix_exp(A: torch.Tensor, threads: int = 1) -> torch.Tensor:
    """exp(A) for A (*, n, n) float32 on CPU, n <= 4."""
    *batch_shape, n, _ = A.shape
    A = A.resolve_neg().contiguous()
    batch = math.prod(batch_shape)
    X = torch.empty(A.shape, dtype=A.dtype)
    if batch:
        fn = getattr(EXPM_LIBRARY.require(), f"mpsl_small_{_expm_name(n)}")
        fn(A.data_ptr(), X.data_ptr(), batch, max(1, threads), int(_BASELINE))
    return X


#: dtypes the Cholesky-family kernels serve.
CHOL_DTYPES = tuple(_CHOL_KEYS)


def _matrices(A: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(memory, trans): A's batch as the kernels read it, row by row (trans 0) or, where A.mT is
    contiguous (torch's factors), column by column (1) without a copy."""
    A = A.resolve_conj().resolve_neg()
    if not A.is_contiguous() and A.mT.is_contiguous():
        return A.mT, 1
    return A.contiguous(), 0


def small_cholesky_ex(A: torch.Tensor, upper: bool = False,
                      threads: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(factor, info) of torch.linalg.cholesky_ex(A, upper=upper) for A (*, n, n) float32 or
    complex64 on CPU, n <= 4 (only the named triangle is read)."""
    *batch_shape, n, _ = A.shape
    M, trans = _matrices(A)
    batch = math.prod(batch_shape)
    L = torch.empty(A.shape, dtype=A.dtype)
    info = torch.empty(batch_shape, dtype=torch.int32)
    if batch:
        fn = getattr(CHOL_LIBRARY.require(),
                     f"mpsl_small_{_chol_name(n, upper, _CHOL_KEYS[A.dtype])}")
        fn(M.data_ptr(), L.data_ptr(), info.data_ptr(), trans, batch, max(1, threads),
           int(_BASELINE))
    return L, info


def _rhs_call(name: str, A: torch.Tensor, B: torch.Tensor, nrhs: int,
              threads: int) -> torch.Tensor:
    """X of the right-hand-side kernel ``name`` for A (*, n, n) and B of A's batch shape."""
    M, trans = _matrices(A)
    B = B.resolve_conj().resolve_neg().contiguous()
    X = torch.empty(B.shape, dtype=B.dtype)
    batch = math.prod(A.shape[:-2])
    if batch and B.numel():
        fn = getattr(CHOL_LIBRARY.require(), f"mpsl_small_{name}")
        fn(M.data_ptr(), B.data_ptr(), X.data_ptr(), nrhs, trans, batch, max(1, threads),
           int(_BASELINE))
    return X


def small_solve_triangular(A: torch.Tensor, B: torch.Tensor, upper: bool, left: bool = True,
                           unitriangular: bool = False, threads: int = 1) -> torch.Tensor:
    """torch.linalg.solve_triangular(A, B, upper=, left=, unitriangular=) for A (*, n, n)
    float32 or complex64 on CPU, n <= 4, B of A's batch shape (only A's named triangle is
    read)."""
    n = A.shape[-1]
    return _rhs_call(_trsm_name(n, left, upper, unitriangular, _CHOL_KEYS[A.dtype]), A, B,
                     B.shape[-1] if left else B.shape[-2], threads)


def small_cholesky_solve(B: torch.Tensor, L: torch.Tensor, upper: bool = False,
                         threads: int = 1) -> torch.Tensor:
    """torch.cholesky_solve(B, L, upper) for the factor L (*, n, n) float32 or complex64 on
    CPU, n <= 4, B
    (*, n, k) of L's batch shape (only L's named triangle is read)."""
    return _rhs_call(_chol_solve_name(L.shape[-1], upper, _CHOL_KEYS[L.dtype]), L, B,
                     B.shape[-1], threads)


# ------------------------------------------------------------------------------ eig
#
# A fifth library: eig and eigvals of real n <= 4 matrices, float32 (`mpslinalg.small.codegen`'s
# emit_eig: Hessenberg, Francis double-shift QR, dlanv2, dtrevc's back-substitution), its
# outputs complex64 (interleaved real and imaginary parts), bit-identical to
# metal/linalg/small_eig.h in the emulator. -fno-math-errno: square roots of selected-away
# negative values set no errno.

_EIG_ARGS = "const T* A, T* E, T* V, long trans"

#: dtypes the eig kernels serve (real input; complex64 results).
EIG_DTYPES = (torch.float32,)


def _eig_name(n: int, want_v: bool) -> str:
    return f"eig_n{n}_{'vecs' if want_v else 'vals'}_f32"


def _store_complex(w: _Writer, ptr: str, rows: int, cols: int, name: Callable[[int, int], str]
                   ) -> None:
    """Entry (i, j) of the block's complex results in ``ptr`` (contiguous (batch, rows, cols)
    complex64) = name(i, j) with "re" / "im" appended: the REAL vectors that hold it."""
    w("{")
    w(f"alignas(64) T o[{rows * cols * 2}][W];")
    for i in range(rows):
        for j in range(cols):
            for p, part in enumerate(("re", "im")):
                w(f"__builtin_memcpy(o[{(i * cols + j) * 2 + p}], &{name(i, j).format(part)}, "
                  "sizeof(vf));")
    _loop(w, f"for (int e = 0; e < {rows * cols * 2}; ++e) "
          f"{ptr}[(base + l) * {rows * cols * 2} + e] = o[e][l];")
    w("}")


def _eig_block(w: _Writer, n: int, want_v: bool) -> None:
    """The body of the eig block function: eigenvalues (and vectors) of cnt (<= W) matrices."""
    dl = _Cpp(w)
    _load_either_layout(w, n)
    _codegen.emit_eig(dl, n, want_v)
    _store_complex(w, "E", 1, n, lambda i, k: f"w{{}}{k}")
    if want_v:
        _store_complex(w, "V", n, n, lambda i, k: f"v{{}}{i}{k}")


@generated.generates("native/small_cpu_eig.cpp")
def eig_source() -> str:
    """The C++ source of the eig library, as checked in and compiled by the build."""
    parts = [_PRELUDE.replace("the small-path kernels of metal/linalg/small_inverse.h",
                              "eig / eigvals of metal/linalg/small_eig.h")]
    for n in range(1, MAX_N + 1):
        for want_v in (False, True):
            parts.append(_orth_function(_eig_name(n, want_v), "f32", _EIG_ARGS,
                                        "A, E, V, trans",
                                        lambda w, n=n, v=want_v: _eig_block(w, n, v)))
    return "\n".join(parts)


def _bind_eig(lib: ctypes.CDLL) -> None:
    p, i64, i32 = ctypes.c_void_p, ctypes.c_long, ctypes.c_int
    for n in range(1, MAX_N + 1):
        for want_v in (False, True):
            fn = getattr(lib, f"mpsl_small_{_eig_name(n, want_v)}")
            fn.restype = None
            fn.argtypes = [p, p, p, i64, i64, i32, i32]


#: The eig library, loaded from the package like `LIBRARY`.
EIG_LIBRARY = native.NativeLibrary("small_cpu_eig", _bind_eig)

#: Every native library of the n <= 4 path, with what each holds (info, CI's wheel check).
LIBRARIES = {"inv/solve/det": LIBRARY, "QR/SVD/eigh": ORTH_LIBRARY, "matrix_exp": EXPM_LIBRARY,
             "cholesky/solve_triangular/cholesky_solve": CHOL_LIBRARY,
             "eig/eigvals": EIG_LIBRARY}

native.warn_absent(list(LIBRARIES.values()))


def small_eig(A: torch.Tensor, compute_v: bool = True,
              threads: int = 1) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(eigenvalues, eigenvectors or None) of A (*, n, n) float32 on CPU, n <= 4, complex64,
    as torch.linalg.eig returns them (NaN for a matrix with a non-finite entry)."""
    *batch_shape, n, _ = A.shape
    M, trans = _matrices(A)
    batch = math.prod(batch_shape)
    W = torch.empty((*batch_shape, n), dtype=torch.complex64)
    V = torch.empty(A.shape, dtype=torch.complex64) if compute_v else None
    if batch:
        fn = getattr(EIG_LIBRARY.require(), f"mpsl_small_{_eig_name(n, compute_v)}")
        fn(M.data_ptr(), W.data_ptr(), V.data_ptr() if compute_v else None, trans, batch,
           max(1, threads), int(_BASELINE))
    return W, V
