"""Fused Triton kernels for the n <= 4 small path on CUDA: inverse, solve, det and slogdet, QR,
SVD and symmetric eigh (`mpslinalg.small.orthogonal`), the matrix exponential and the Cholesky
family (`mpslinalg.small.cholesky`) and eig / eigvals (`mpslinalg.small.eig`), in exactly one
launch per op,
the matrices held in registers. The sections below describe the LU kernels; the QR kernels
follow ``qr_small`` of metal/linalg/qr.h the same way (:func:`mpslinalg.small.codegen.
emit_qr_factor`), and the Jacobi SVD / eigh kernels run their sweeps as one ``for`` loop of a
fixed trip count (converged lanes rotate by the identity; bit-identical to the CPU kernels,
which leave the loop early). The same load/store layouts serve m x n matrices (by the row
length n).

The arithmetic is that of ``metal/linalg/small_inverse.h`` (LAPACK ``getf2`` + ``getrs``), so
results, ``info`` and error semantics match the Metal kernel and the tensor-op path of
`mpslinalg.small.dispatch`:

- pivot = the first row of largest |a| in the column (strict ``>`` keeps the lowest row on ties
  and never selects a NaN), rows interchanged in full (L part included) by selects;
- a zero pivot skips the scaling of the column below it (multipliers stay 0), elimination goes
  on, ``info`` = 1-based index of the first zero pivot (0 = ok);
- solve: the row interchanges, unit-lower forward substitution, then column-oriented back
  substitution like ``trsm``; the inverse is the solution of ``A X = I``;
- det = product of U's diagonal times (-1)^(interchanges); slogdet = (sign, sum of log|u_kk|),
  (0, -inf) when singular.

Each program handles ``BLOCK`` consecutive matrices, one per lane. Triton has no per-lane
arrays, so the kernels are written out as straight-line code: for every (op, n) the generator
of `mpslinalg.small.codegen` (shared with `mpslinalg.small.cpu_simd` and the Metal kernels of
`mpslinalg.small.metal_kernels`; its Triton dialect is `_Triton` below, which renders the
description's expressions) emits one scalar variable per matrix entry (``a12`` is row 1, column
2): the same operations in the same order as the Metal kernel, every branch on data a
``tl.where``. The generated source is compiled with ``triton.jit``
(registered in `linecache` so that Triton can read it back); `kernel_source` shows it.

Loads and stores (``MPSLINALG_TRITON_LOAD``, read once at import; the default ``auto`` is
``vec``): ``vec`` has each lane load its own matrix 16 bytes at a time (a ``[BLOCK, c]`` vector
load, c = 4 float32 or 2 float64 entries of a row, split into entry vectors with ``tl.reshape``
+ ``tl.split`` inside the thread: no shared memory), the n*n/c accesses of a warp sharing their
cache lines; ``tile`` loads the program's whole block as one perfectly coalesced ``[BLOCK, P]``
tile (P = n*n rounded up to a power of two) and lets Triton redistribute it through shared
memory; ``strided`` loads each entry as its own vector (stride n*n elements). n = 1 and n = 3
(rows of 12 or 24 bytes) always use ``strided``. Compiled for sm_90 with triton 3.9: ``vec``
gives 4 ld.global.v4 + 4 st.global.v4 per float32 4x4 inverse, 53 registers, no shared memory.
``MPSLINALG_TRITON_BLOCK`` / ``MPSLINALG_TRITON_WARPS`` override the block size and warp count.

Floating-point contraction is off (``enable_fp_fusion=False``) and float32 division is
``tl.math.div_rn`` (Triton's ``/`` is the approximate ``div.full.f32``), so every operation
rounds like the Metal kernel compiled for the CPU by `mpslinalg.emulator`: the results are
bit-identical to the CPU path (checked in the interpreter by tests/test_small_triton.py).

dtypes: float32 and float64. Complex inputs stay on the tensor-op path (Triton has no complex
type; splitting re/im by hand is possible but not done here).

With ``TRITON_INTERPRET=1`` in the environment before triton is imported, the same kernels run
on CPU tensors through Triton's interpreter (numpy semantics, slow): that is how
tests/test_small_triton.py checks them on machines without a GPU.
"""

from __future__ import annotations

import contextlib
import functools
import linecache
import os
from collections.abc import Iterator

import torch
import triton
import triton.language as tl

from . import codegen as _codegen

#: dtypes served by these kernels.
DTYPES = (torch.float32, torch.float64)


_LOAD = os.environ.get("MPSLINALG_TRITON_LOAD", "auto")
if _LOAD not in ("auto", "vec", "tile", "strided"):
    raise ValueError(f"MPSLINALG_TRITON_LOAD: auto, vec, tile or strided, not {_LOAD!r}")
#: Matrices per program: one per lane with 4 warps (registers: ~40 live values per matrix for
#: n = 4 in float32, twice that in float64).
_BLOCK = int(os.environ.get("MPSLINALG_TRITON_BLOCK", "128"))
_WARPS = int(os.environ.get("MPSLINALG_TRITON_WARPS", "4"))

_OPS = ("inv", "solve", "det", "slogdet")


# ------------------------------------------------------------------------------ code generation

#: Binary operators whose result is a boolean vector in Triton.
_COMPARISONS = frozenset(("<", "<=", ">", ">=", "==", "!="))


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, line: str) -> None:
        self.lines.append("    " + line)


def _tile_width(n: int, cols: int | None = None) -> int:
    return 1 << max(0, (n * (n if cols is None else cols) - 1).bit_length())


def _mode(n: int, load: str, cols: int | None = None) -> str:
    """The load/store layout used for n x cols matrices (cols = n by default; see the module
    docstring): "vec" needs a power-of-two row length, "tile" does not vectorise for rows of 3
    (36 bytes)."""
    cols = n if cols is None else cols
    if load == "auto":
        load = "vec"
    if n * cols == 1 or cols == 1 or (load in ("vec", "tile") and cols == 3):
        return "strided"
    return load


def _chunk(n: int, dtype: str) -> int:
    """Entries per vector access in "vec" mode: 16 bytes at most (the widest global access)."""
    return min(n, 4 if dtype == "float32" else 2)


def _emit_split(w: _Writer, t: str, bits: int) -> dict[int, str]:
    """Split ``t`` ([BLOCK, 2 * bits]) into its 2**bits vectors: {flat index: name}. Each split
    takes the last dimension, i.e. the lowest remaining bit of the flat index."""
    names = {0: t}
    for bit in range(bits):
        nxt = {}
        for idx, name in names.items():
            lo, hi = f"{name}_0", f"{name}_1"
            w(f"{lo}, {hi} = tl.split({name})")
            nxt[idx], nxt[idx | (1 << bit)] = lo, hi
        names = nxt
    return names


def _emit_join(w: _Writer, names: dict[int, str], bits: int, prefix: str) -> str:
    """Join 2**bits vectors {flat index: name} into one [BLOCK, 2, ..., 2] tensor whose
    dimensions read in row-major order (so: the highest bit first)."""
    for bit in range(bits - 1, -1, -1):
        nxt = {}
        for idx in sorted(names):
            if not idx & (1 << bit):
                name = f"{prefix}{bit}_{idx}"
                w(f"{name} = tl.join({names[idx]}, {names[idx | (1 << bit)]})")
                nxt[idx] = name
        names = nxt
    return names[0]


def _begin(dtype: str, m: int, n: int, load: str) -> tuple[_Writer, _Triton]:
    """A kernel body's start: this program's rows of the batch and its m x n matrices of A
    loaded into a{i}{j}."""
    w = _Writer()
    w("rows = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)")
    w("live = rows < batch")
    _emit_load(w, "A", m, load, _chunk(n, dtype), cols=n)
    return w, _Triton(w, dtype)


def _emit_load(w: _Writer, ptr: str, n: int, load: str, c: int, cols: int | None = None) -> None:
    """a{i}{j} = entry (i, j) of this program's matrices in ``ptr`` (contiguous (batch, n, cols),
    cols = n by default)."""
    m, n = n, (n if cols is None else cols)
    nn, mode = m * n, _mode(m, load, n)
    if mode == "strided":
        for i in range(m):
            for j in range(n):
                w(f"a{i}{j} = tl.load({ptr} + rows * {nn} + {i * n + j}, mask=live, other=0.0)")
    elif mode == "vec":
        # Each thread loads its own matrix, c entries of a row at a time (one vector access).
        bits = c.bit_length() - 1
        w(f"cols = tl.arange(0, {c})")
        for start in range(0, nn, c):
            i, j0 = divmod(start, n)
            w(f"t = tl.load({ptr} + rows[:, None] * {nn} + ({start} + cols[None, :]), "
              f"mask=live[:, None], other=0.0)")
            w(f"t{start} = tl.reshape(t, [BLOCK{', 2' * bits}])")
            for j, name in _emit_split(w, f"t{start}", bits).items():
                w(f"a{i}{j0 + j} = {name}")
    else:
        p = _tile_width(m, n)
        bits = p.bit_length() - 1
        w(f"cols = tl.arange(0, {p})")
        mask = "live[:, None]" + ("" if p == nn else f" & (cols[None, :] < {nn})")
        w(f"t = tl.load({ptr} + rows[:, None] * {nn} + cols[None, :], mask={mask}, other=0.0)")
        w(f"t = tl.reshape(t, [BLOCK{', 2' * bits}])")
        names = _emit_split(w, "t", bits)
        for i in range(m):
            for j in range(n):
                w(f"a{i}{j} = {names[i * n + j]}")


def _emit_store(w: _Writer, ptr: str, values: dict[int, str], n: int, load: str,
                c: int, cols: int | None = None) -> None:
    """Store values[i * cols + j] as entry (i, j) of this program's matrices in ``ptr``
    (contiguous (batch, n, cols), cols = n by default)."""
    m, n = n, (n if cols is None else cols)
    nn, mode = m * n, _mode(m, load, n)
    if mode == "strided":
        for idx in range(nn):
            w(f"tl.store({ptr} + rows * {nn} + {idx}, {values[idx]}, mask=live)")
    elif mode == "vec":
        bits = c.bit_length() - 1
        w(f"cols = tl.arange(0, {c})")
        for start in range(0, nn, c):
            t = _emit_join(w, {j: values[start + j] for j in range(c)}, bits, f"o{start}_")
            w(f"t = tl.reshape({t}, [BLOCK, {c}])")
            w(f"tl.store({ptr} + rows[:, None] * {nn} + ({start} + cols[None, :]), t, "
              f"mask=live[:, None])")
    else:
        p = _tile_width(m, n)
        bits = p.bit_length() - 1
        if p > nn:
            w(f"pad = tl.zeros([BLOCK], {ptr}.dtype.element_ty)")
        t = _emit_join(w, {idx: values.get(idx, "pad") for idx in range(p)}, bits, "o")
        w(f"t = tl.reshape({t}, [BLOCK, {p}])")
        w(f"cols = tl.arange(0, {p})")
        mask = "live[:, None]" + ("" if p == nn else f" & (cols[None, :] < {nn})")
        w(f"tl.store({ptr} + rows[:, None] * {nn} + cols[None, :], t, mask={mask})")


class _Triton(_codegen.Dialect):
    """Triton syntax for `mpslinalg.small.codegen`: plain assignments (no declarations,
    no scopes), ``tl.where`` selects on [BLOCK] vectors of ``dtype``."""

    def __init__(self, w: _Writer, dtype: str) -> None:
        self.out, self.dtype, self.indent = w, dtype, ""
        if dtype == "float64":
            self.safe_min = 2.2250738585072014e-308
            self.eps = 2.220446049250313e-16

    def w(self, line: str) -> None:
        self.out(self.indent + line)

    @contextlib.contextmanager
    def sweeps(self, count: int, flag: str) -> Iterator[None]:
        # No early exit: a lane that converged rotates by the identity (c = 1, s = 0) until the
        # loop ends, so the trip count is the same for every program.
        self.w(f"for sweep in range({count}):")
        self.indent += "    "
        self.write_declare(_codegen.BOOL, flag, "rows < 0")
        yield
        self.indent = self.indent[:-4]

    def write_declare(self, kind: str, name: str, text: str) -> None:
        self.w(f"{name} = {text}")

    def write_assign(self, name: str, text: str) -> None:
        self.w(f"{name} = {text}")

    def add_log(self, acc: str, x: _codegen.Expr) -> None:
        self.w(f"{acc} = {acc} + tl.log({self.render(x)})")

    def select(self, e: _codegen.Select) -> str:
        cond = self.render(e.cond)
        if not (isinstance(e.cond, _codegen.Binary) and e.cond.op in _COMPARISONS):
            # flags live as int32 vectors (see `full`); Triton wants a boolean condition
            cond = f"({cond}) != 0"
        return f"tl.where({cond}, {self.branch(e.a)}, {self.branch(e.b)})"

    def special(self, e: _codegen.Expr) -> tuple[str, int] | None:
        if isinstance(e, _codegen.Select):
            return self.select(e), _codegen.ATOM
        if isinstance(e, _codegen.Div) and self.dtype == "float32":
            # IEEE division: Triton's '/' on float32 is div.full.f32 (approximate, 2 ulp) on
            # NVIDIA.
            return f"tl.math.div_rn({self.render(e.a)}, {self.render(e.b)})", _codegen.ATOM
        return None

    def literal(self, value: float, kind: str) -> str:
        if kind in (_codegen.INT, _codegen.BOOL):
            return str(value)
        # repr: the exact value (a Python float operand takes the tensor's type).
        return f"{value:g}" if value == 0 else repr(float(value))

    def operand(self, value: float, kind: str) -> str:
        return str(value) if kind in (_codegen.INT, _codegen.BOOL) else repr(float(value))

    def full(self, kind: str, value: float) -> str:
        ty = "tl.int32" if kind in (_codegen.INT, _codegen.BOOL) else "A.dtype.element_ty"
        return f"tl.full([BLOCK], {value!r}, {ty})"

    def function(self, call: _codegen.Call, args: list[str]) -> str | _codegen.Expr:
        x = call.args[0]
        meaning = self.real_meaning(call)
        if meaning is not None:
            return meaning
        if call.fn in ("abs", "abs1", "modulus"):
            return f"tl.abs({args[0]})"
        if call.fn == "sqrt":
            # tl.sqrt is the approximate sqrt.approx.f32 for float32; float64's is correctly
            # rounded.
            return f"tl.sqrt_rn({args[0]})" if self.dtype == "float32" else f"tl.sqrt({args[0]})"
        if call.fn == "signbit":
            bits = "tl.int32" if self.dtype == "float32" else "tl.int64"
            return f"(({args[0]}).to({bits}, bitcast=True) < 0)"
        if call.fn == "isinf":
            # past the type's largest finite value: no infinity literal needed
            big = "3.4028234663852886e+38" if self.dtype == "float32" else "1.7976931348623157e+308"
            return f"(tl.abs({args[0]}) > {big})"
        if call.fn == "mul_unit":
            # A select of s or -s: the bits of the product, s being +-1 or +-0.
            return _codegen.select(call.args[1] > 0.0, x, -x)
        raise ValueError(f"mpslinalg.small.triton_kernels: no Triton for {call.fn}")


def _source(op: str, n: int, dtype: str, load: str) -> tuple[str, str]:
    """(function name, source) of the kernel for ``op``, ``n``, ``dtype`` ("float32" or
    "float64") and the ``load`` layout."""
    args = {
        "inv": "A, X, INFO, batch",
        "solve": "A, B, X, INFO, batch, nrhs",
        "det": "A, DET, batch",
        "slogdet": "A, SIGN, LOGABS, batch",
    }[op]
    name = f"small_{op}_n{n}_{dtype}_{_mode(n, load)}"
    w, dl = _begin(dtype, n, n, load)
    if op in _codegen.TRANSPOSED_OPS:
        _codegen.emit_transpose(dl, n)
    _codegen.emit_factor(dl, n)
    if op == "inv":
        out = {}

        def keep(j: int) -> None:
            for i in range(n):
                w(f"r{i}{j} = x{i}")
                out[i * n + j] = f"r{i}{j}"

        _codegen.emit_inverse(dl, n, keep)
        _emit_store(w, "X", out, n, load, _chunk(n, dtype))
        w("tl.store(INFO + rows, info, mask=live)")
    elif op == "solve":
        w(f"base = rows * {n} * nrhs")
        # a while loop, not range(nrhs): older Triton interpreters turn a runtime bound into an
        # index through int() of a 1-element array, which NumPy >= 2.3 refuses
        w("j = 0")
        w("while j < nrhs:")
        inner = _Writer()
        for i in range(n):
            inner(f"x{i} = tl.load(B + base + {i} * nrhs + j, mask=live, other=0.0)")
        _codegen.emit_solve_vector(_Triton(inner, dtype), n)
        for i in range(n):
            inner(f"tl.store(X + base + {i} * nrhs + j, x{i}, mask=live)")
        inner("j += 1")
        w.lines += ["    " + line for line in inner.lines]
        w("tl.store(INFO + rows, info, mask=live)")
    elif op == "det":
        det = _codegen.emit_det(dl, n)
        w(f"tl.store(DET + rows, {det}, mask=live)")
    else:
        _codegen.emit_perm_sign(dl, n)
        w("logabs = tl.zeros([BLOCK], LOGABS.dtype.element_ty)")
        _codegen.emit_slogdet(dl, n, "sgn", "logabs")
        w("tl.store(SIGN + rows, sgn, mask=live)")
        w("tl.store(LOGABS + rows, logabs, mask=live)")
    head = f"def {name}({args}, BLOCK: tl.constexpr):"
    return name, "\n".join([head, *w.lines]) + "\n"


def _qr_source(m: int, n: int, dtype: str, mode: str, load: str) -> tuple[str, str]:
    """(function name, source) of the QR kernel of m x n matrices for ``mode``: geqr2 and the
    backward accumulation of Q (the operations of qr_small in metal/linalg/qr.h), R (and Q)
    stored in torch.linalg.qr's layout."""
    k = min(m, n)
    rrows = m if mode == "complete" else k
    qcols = m if mode == "complete" else k
    name = f"small_qr_m{m}_n{n}_{dtype}_{mode}_{_mode(m, load, n)}"
    w, dl = _begin(dtype, m, n, load)
    _codegen.emit_qr_factor(dl, m, n)
    w("zero = tl.zeros([BLOCK], A.dtype.element_ty)")
    rvals = {i * n + j: (f"a{i}{j}" if i <= j and i < k else "zero")
             for i in range(rrows) for j in range(n)}
    _emit_store(w, "R", rvals, rrows, load, _chunk(n, dtype), cols=n)
    if mode != "r":
        _codegen.emit_qr_q(dl, m, n, qcols)
        qvals = {i * qcols + j: f"q{i}{j}" for i in range(m) for j in range(qcols)}
        _emit_store(w, "Q", qvals, m, load, _chunk(qcols, dtype), cols=qcols)
    head = f"def {name}(A, Q, R, batch, BLOCK: tl.constexpr):"
    return name, "\n".join([head, *w.lines]) + "\n"


def kernel_source(op: str, n: int, dtype: str = "float32", load: str | None = None) -> str:
    """The generated Triton source of the ``op`` kernel for n x n matrices (for reading)."""
    return _source(op, n, dtype, load or _LOAD)[1]


def _svd_source(m: int, n: int, dtype: str, variant: str, load: str) -> tuple[str, str]:
    """(function name, source) of the SVD kernel of m x n matrices (one-sided Jacobi of
    `mpslinalg.small.codegen.emit_svd_any_shape`; wide matrices through their transpose).
    variant: "vals", "reduced" or "full"."""
    name = f"small_svd_m{m}_n{n}_{dtype}_{variant}_{_mode(m, load, n)}"
    w, dl = _begin(dtype, m, n, load)
    for out, rows, cols, value in _codegen.emit_svd_any_shape(dl, m, n, variant):
        vals = {i * cols + j: value(i, j) for i in range(rows) for j in range(cols)}
        _emit_store(w, out, vals, rows, load, _chunk(cols, dtype), cols=cols)
    head = f"def {name}(A, U, S, VH, batch, BLOCK: tl.constexpr):"
    return name, "\n".join([head, *w.lines]) + "\n"


def _eigh_source(n: int, dtype: str, upper: bool, want_v: bool, load: str) -> tuple[str, str]:
    """(function name, source) of the eigh kernel of n x n symmetric matrices (cyclic Jacobi of
    `mpslinalg.small.codegen.emit_eigh`), reading the upper or lower triangle."""
    name = (f"small_eigh_n{n}_{dtype}_{'upper' if upper else 'lower'}_"
            f"{'vecs' if want_v else 'vals'}_{_mode(n, load)}")
    w, dl = _begin(dtype, n, n, load)
    for i in range(n):
        for j in range(i, n):
            w(f"h{i}{j} = {f'a{i}{j}' if upper else f'a{j}{i}'}")
    _codegen.emit_eigh(dl, n, want_v)
    _emit_store(w, "L", {j: f"l{j}" for j in range(n)}, 1, load, _chunk(n, dtype), cols=n)
    if want_v:
        _emit_store(w, "V", {i * n + j: f"v{i}{j}" for i in range(n) for j in range(n)}, n,
                    load, _chunk(n, dtype))
    head = f"def {name}(A, L, V, batch, BLOCK: tl.constexpr):"
    return name, "\n".join([head, *w.lines]) + "\n"


def svd_kernel_source(m: int, n: int, dtype: str = "float32", variant: str = "reduced",
                      load: str | None = None) -> str:
    """The generated Triton source of the SVD kernel for m x n matrices (for reading)."""
    return _svd_source(m, n, dtype, variant, load or _LOAD)[1]


def eigh_kernel_source(n: int, dtype: str = "float32", upper: bool = False,
                       want_v: bool = True, load: str | None = None) -> str:
    """The generated Triton source of the eigh kernel for n x n matrices (for reading)."""
    return _eigh_source(n, dtype, upper, want_v, load or _LOAD)[1]


def qr_kernel_source(m: int, n: int, dtype: str = "float32", mode: str = "reduced",
                     load: str | None = None) -> str:
    """The generated Triton source of the QR kernel for m x n matrices (for reading)."""
    return _qr_source(m, n, dtype, mode, load or _LOAD)[1]


def _compile(name: str, src: str):
    """The plain Python function of a generated kernel, its source registered in linecache
    (Triton's JIT and interpreter read kernels back with ``inspect.getsource``)."""
    filename = f"<mpslinalg-small-triton-{name}>"
    lines = src.splitlines(keepends=True)
    # mtime None: linecache.checkcache keeps the entry although no such file exists.
    linecache.cache[filename] = (len(src), None, lines, filename)
    scope = {"tl": tl, "triton": triton, "__name__": __name__}
    exec(compile(src, filename, "exec"), scope)
    return scope[name]


@functools.cache
def _function(op: str, n: int, dtype: str, load: str):
    return _compile(*_source(op, n, dtype, load))


@functools.cache
def _qr_kernel(m: int, n: int, dtype: str, mode: str, load: str):
    return triton.jit(_compile(*_qr_source(m, n, dtype, mode, load)), do_not_specialize=["batch"])


@functools.cache
def _svd_kernel(m: int, n: int, dtype: str, variant: str, load: str):
    return triton.jit(_compile(*_svd_source(m, n, dtype, variant, load)),
                      do_not_specialize=["batch"])


@functools.cache
def _eigh_kernel(n: int, dtype: str, upper: bool, want_v: bool, load: str):
    return triton.jit(_compile(*_eigh_source(n, dtype, upper, want_v, load)),
                      do_not_specialize=["batch"])


@functools.cache
def _kernel(op: str, n: int, dtype: str, load: str):
    # Under TRITON_INTERPRET=1 (set before triton is imported) triton.jit gives the interpreter.
    no_spec = ["batch", "nrhs"] if op == "solve" else ["batch"]
    return triton.jit(_function(op, n, dtype, load), do_not_specialize=no_spec)


# ------------------------------------------------------------------------------ entry points

def _prepare(A: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    n = A.shape[-1]
    batch = 1
    for s in A.shape[:-2]:
        batch *= s
    # The kernels read raw memory: contiguous, and no lazy negation (inputs are never modified).
    return A.resolve_neg().contiguous(), n, batch


def _launch(op: str, n: int, batch: int, *args, extra: tuple[int, ...] = (),
            kern=None) -> None:
    """One launch of the ``op`` kernel (or ``kern``) over ``batch`` matrices: args (tensors),
    batch, extra."""
    if batch == 0:
        return
    A = args[0]
    if kern is None:
        kern = _kernel(op, n, str(A.dtype).removeprefix("torch."), _LOAD)
    grid = (triton.cdiv(batch, _BLOCK),)
    if A.device.type == "cpu":  # Triton's interpreter (TRITON_INTERPRET=1), for tests
        kern[grid](*args, batch, *extra, BLOCK=_BLOCK)
        return
    with torch.cuda.device(A.device):
        kern[grid](*args, batch, *extra, BLOCK=_BLOCK, num_warps=_WARPS,
                   enable_fp_fusion=False)


def small_inv_ex(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(inverse, info) of A (*, n, n): one launch."""
    A, n, batch = _prepare(A)
    X = torch.empty(A.shape, dtype=A.dtype, device=A.device)
    info = torch.empty(A.shape[:-2], dtype=torch.int32, device=A.device)
    _launch("inv", n, batch, A, X, info)
    return X, info


def small_solve_ex(A: torch.Tensor, B: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(X, info) with A X = B for A (*, n, n), B (*, n, k) of the same batch shape: one launch."""
    A, n, batch = _prepare(A)
    B = B.to(A.dtype).resolve_neg().contiguous()
    X = torch.empty(B.shape, dtype=A.dtype, device=A.device)
    info = torch.empty(A.shape[:-2], dtype=torch.int32, device=A.device)
    _launch("solve", n, batch, A, B, X, info, extra=(B.shape[-1],))
    return X, info


def small_det(A: torch.Tensor) -> torch.Tensor:
    """det(A) for A (*, n, n): one launch."""
    A, n, batch = _prepare(A)
    det = torch.empty(A.shape[:-2], dtype=A.dtype, device=A.device)
    _launch("det", n, batch, A, det)
    return det


def small_slogdet(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(sign, log|det|) for A (*, n, n): one launch; singular gives (0, -inf)."""
    A, n, batch = _prepare(A)
    sign = torch.empty(A.shape[:-2], dtype=A.dtype, device=A.device)
    logabs = torch.empty(A.shape[:-2], dtype=A.dtype, device=A.device)
    _launch("slogdet", n, batch, A, sign, logabs)
    return sign, logabs


def _pointer(x: torch.Tensor) -> torch.Tensor:
    """x, or a one-element stand-in for an empty output the kernel does not write (an empty
    tensor may have a null data pointer, which Triton's launcher refuses)."""
    return x if x.numel() else torch.empty(1, dtype=x.dtype, device=x.device)


def small_qr(A: torch.Tensor, mode: str = "reduced") -> tuple[torch.Tensor, torch.Tensor]:
    """(Q, R) of torch.linalg.qr(A, mode) for A (*, m, n), m, n <= 4: one launch (mode 'r': Q
    is an empty tensor)."""
    *batch_shape, m, n = A.shape
    A = A.resolve_neg().contiguous()
    batch = 1
    for s in batch_shape:
        batch *= s
    rows = m if mode == "complete" else min(m, n)
    R = torch.empty((*batch_shape, rows, n), dtype=A.dtype, device=A.device)
    Q = (torch.empty((*batch_shape, m, rows), dtype=A.dtype, device=A.device) if mode != "r"
         else torch.empty(0, dtype=A.dtype, device=A.device))
    kern = _qr_kernel(m, n, str(A.dtype).removeprefix("torch."), mode, _LOAD)
    _launch("qr", n, batch, A, _pointer(Q), R, kern=kern)
    return Q, R


def small_svd(A: torch.Tensor, full_matrices: bool = True,
              compute_uv: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(U, S, Vh) of torch.linalg.svd(A, full_matrices) for A (*, m, n), m, n <= 4: one launch
    (without ``compute_uv`` U and Vh are empty tensors)."""
    *batch_shape, m, n = A.shape
    A = A.resolve_neg().contiguous()
    batch = 1
    for s in batch_shape:
        batch *= s
    k = min(m, n)
    variant = "vals" if not compute_uv else ("full" if full_matrices and m != n else "reduced")
    S = torch.empty((*batch_shape, k), dtype=A.dtype, device=A.device)
    empty = torch.empty(0, dtype=A.dtype, device=A.device)
    U, Vh = empty, empty
    if compute_uv:
        U = torch.empty((*batch_shape, m, m if full_matrices else k), dtype=A.dtype,
                        device=A.device)
        Vh = torch.empty((*batch_shape, n if full_matrices else k, n), dtype=A.dtype,
                         device=A.device)
    kern = _svd_kernel(m, n, str(A.dtype).removeprefix("torch."), variant, _LOAD)
    _launch("svd", n, batch, A, _pointer(U), S, _pointer(Vh), kern=kern)
    return U, S, Vh


def small_eigh(A: torch.Tensor, upper: bool = False,
               compute_v: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """(L, V) of torch.linalg.eigh(A, 'U' if upper else 'L') for symmetric A (*, n, n),
    n <= 4: one launch (without ``compute_v`` V is an empty tensor)."""
    *batch_shape, n, _ = A.shape
    A = A.resolve_neg().contiguous()
    batch = 1
    for s in batch_shape:
        batch *= s
    L = torch.empty((*batch_shape, n), dtype=A.dtype, device=A.device)
    V = torch.empty((*batch_shape, n, n) if compute_v else (0,), dtype=A.dtype,
                    device=A.device)
    kern = _eigh_kernel(n, str(A.dtype).removeprefix("torch."), upper, compute_v, _LOAD)
    _launch("eigh", n, batch, A, L, _pointer(V), kern=kern)
    return L, V


# ------------------------------------------------------------------------------ matrix_exp

class _TritonUntilDone(_Triton):
    """`_Triton` whose `sweeps` loop leaves once no lane of the program set the flag (a
    ``while`` on the flag's maximum over the block): the matrix exponential's squarings, whose
    count per lane is at most the loop's (``count`` bounds it by construction, see
    `mpslinalg.small.codegen.emit_matrix_exp`), and whose lanes that are done keep their value
    by selects, so leaving early changes no bit."""

    @contextlib.contextmanager
    def sweeps(self, count: int, flag: str) -> Iterator[None]:
        # an int32 scalar from the start (a loop-carried value keeps its type; a program has a
        # live lane)
        self.w("go = tl.max(live.to(tl.int32), axis=0)")
        self.w("while go > 0:")
        self.indent += "    "
        self.write_declare(_codegen.BOOL, flag, "rows < 0")
        yield
        self.w(f"go = tl.max({flag}.to(tl.int32), axis=0)")
        self.indent = self.indent[:-4]


def _matrix_exp_source(n: int, dtype: str, load: str) -> tuple[str, str]:
    """(function name, source) of the matrix_exp kernel of n x n matrices (scaling and squaring
    of `mpslinalg.small.codegen.emit_matrix_exp`)."""
    name = f"small_matrix_exp_n{n}_{dtype}_{_mode(n, load)}"
    w, _ = _begin(dtype, n, n, load)
    _codegen.emit_matrix_exp(_TritonUntilDone(w, dtype), n)
    _emit_store(w, "X", {i * n + j: f"e{i}{j}" for i in range(n) for j in range(n)}, n, load,
                _chunk(n, dtype))
    head = f"def {name}(A, X, batch, BLOCK: tl.constexpr):"
    return name, "\n".join([head, *w.lines]) + "\n"


def matrix_exp_kernel_source(n: int, dtype: str = "float32", load: str | None = None) -> str:
    """The generated Triton source of the matrix_exp kernel for n x n matrices (for reading)."""
    return _matrix_exp_source(n, dtype, load or _LOAD)[1]


@functools.cache
def _matrix_exp_kernel(n: int, dtype: str, load: str):
    return triton.jit(_compile(*_matrix_exp_source(n, dtype, load)),
                      do_not_specialize=["batch"])


def small_matrix_exp(A: torch.Tensor) -> torch.Tensor:
    """exp(A) for A (*, n, n) float32, n <= 4: one launch."""
    A, n, batch = _prepare(A)
    X = torch.empty(A.shape, dtype=A.dtype, device=A.device)
    kern = _matrix_exp_kernel(n, str(A.dtype).removeprefix("torch."), _LOAD)
    _launch("matrix_exp", n, batch, A, X, kern=kern)
    return X


# ------------------------------------------------------------------------------ Cholesky family
#
# cholesky_ex, solve_triangular and cholesky_solve (`mpslinalg.small.codegen.emit_cholesky`,
# `emit_triangular_solve`, `emit_cholesky_solve`): one kernel per variant (upper, left,
# unitriangular), as the Metal and CPU kernels, bit-identical to them except where a pivot is
# not finite: cholesky_ex follows torch's CUDA function there (cuSOLVER's potrf: a NaN pivot is
# no failure, an infinite one leaves zeros below it).


def _cholesky_source(n: int, dtype: str, upper: bool, load: str) -> tuple[str, str]:
    """(function name, source) of the cholesky_ex kernel of n x n matrices: the factor in
    torch's layout and info."""
    name = f"small_cholesky_n{n}_{dtype}_upper{int(upper)}_{_mode(n, load)}"
    w, dl = _begin(dtype, n, n, load)
    _codegen.emit_hermitian_lower(dl, n, upper, "l")
    # non-finite pivots as torch's CUDA cholesky_ex (cuSOLVER) has them
    _codegen.emit_cholesky(dl, n, cusolver=True)
    entry = _codegen.cholesky_factor_entry(n, upper)
    w("zero = tl.zeros([BLOCK], A.dtype.element_ty)")
    values = {i * n + j: "zero" if entry(i, j) is None else dl.render(entry(i, j))
              for i in range(n) for j in range(n)}
    _emit_store(w, "L", values, n, load, _chunk(n, dtype))
    w("tl.store(INFO + rows, info, mask=live)")
    head = f"def {name}(A, L, INFO, batch, BLOCK: tl.constexpr):"
    return name, "\n".join([head, *w.lines]) + "\n"


def _emit_rhs_loop(w: _Writer, n: int, dtype: str, column_major: bool, body) -> None:
    """For each right-hand side j: x{i} loaded from B, ``body(dialect)``, stored to X (B n x
    nrhs per matrix, or nrhs x n with ``column_major``)."""
    w(f"base = rows * {n} * nrhs")
    # a while loop, as the solve kernel's (see there)
    w("j = 0")
    w("while j < nrhs:")
    inner = _Writer()
    for i in range(n):
        at = f"j * {n} + {i}" if column_major else f"{i} * nrhs + j"
        inner(f"x{i} = tl.load(B + base + {at}, mask=live, other=0.0)")
    body(_Triton(inner, dtype))
    for i in range(n):
        at = f"j * {n} + {i}" if column_major else f"{i} * nrhs + j"
        inner(f"tl.store(X + base + {at}, x{i}, mask=live)")
    inner("j += 1")
    w.lines += ["    " + line for line in inner.lines]


def _solve_triangular_source(n: int, dtype: str, left: bool, upper: bool, unit: bool,
                             load: str) -> tuple[str, str]:
    """(function name, source) of the solve_triangular kernel of one variant."""
    name = (f"small_solve_triangular_n{n}_{dtype}_left{int(left)}_upper{int(upper)}"
            f"_unit{int(unit)}_{_mode(n, load)}")
    w, _ = _begin(dtype, n, n, load)
    _emit_rhs_loop(w, n, dtype, not left, lambda dl: _codegen.emit_triangular_solve(
        dl, n, _codegen.triangular_entry(left), _codegen.triangular_solves_lower(left, upper),
        unit))
    head = f"def {name}(A, B, X, batch, nrhs, BLOCK: tl.constexpr):"
    return name, "\n".join([head, *w.lines]) + "\n"


def _cholesky_solve_source(n: int, dtype: str, upper: bool, load: str) -> tuple[str, str]:
    """(function name, source) of the cholesky_solve kernel (the factor in A)."""
    name = f"small_cholesky_solve_n{n}_{dtype}_upper{int(upper)}_{_mode(n, load)}"
    w, dl = _begin(dtype, n, n, load)
    _codegen.emit_hermitian_lower(dl, n, upper, "l")
    _emit_rhs_loop(w, n, dtype, False, lambda inner: _codegen.emit_cholesky_solve(inner, n))
    head = f"def {name}(A, B, X, batch, nrhs, BLOCK: tl.constexpr):"
    return name, "\n".join([head, *w.lines]) + "\n"


def cholesky_kernel_source(op: str, n: int, dtype: str = "float32", load: str | None = None,
                           **variant: bool) -> str:
    """The generated Triton source of a Cholesky-family kernel (for reading): ``op``
    "cholesky" or "cholesky_solve" (``upper=``), or "solve_triangular" (``left=``,
    ``upper=``, ``unit=``)."""
    return _CHOLESKY_SOURCES[op](n, dtype, load=load or _LOAD, **variant)[1]


_CHOLESKY_SOURCES = {"cholesky": _cholesky_source, "solve_triangular": _solve_triangular_source,
                     "cholesky_solve": _cholesky_solve_source}


@functools.cache
def _cholesky_kernel(op: str, n: int, dtype: str, load: str, variant: tuple) -> object:
    return triton.jit(_compile(*_CHOLESKY_SOURCES[op](n, dtype, *variant, load=load)),
                      do_not_specialize=["batch", "nrhs"] if op != "cholesky" else ["batch"])


def _dtype_name(A: torch.Tensor) -> str:
    return str(A.dtype).removeprefix("torch.")


def small_cholesky_ex(A: torch.Tensor, upper: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(factor, info) of torch.linalg.cholesky_ex(A, upper=upper) for A (*, n, n), n <= 4: one
    launch."""
    A, n, batch = _prepare(A)
    L = torch.empty(A.shape, dtype=A.dtype, device=A.device)
    info = torch.empty(A.shape[:-2], dtype=torch.int32, device=A.device)
    kern = _cholesky_kernel("cholesky", n, _dtype_name(A), _LOAD, (upper,))
    _launch("cholesky", n, batch, A, L, info, kern=kern)
    return L, info


def _rhs_launch(op: str, A: torch.Tensor, B: torch.Tensor, nrhs: int,
                variant: tuple) -> torch.Tensor:
    A, n, batch = _prepare(A)
    B = B.resolve_neg().contiguous()
    X = torch.empty(B.shape, dtype=B.dtype, device=B.device)
    if B.numel():
        kern = _cholesky_kernel(op, n, _dtype_name(A), _LOAD, variant)
        _launch(op, n, batch, A, B, X, extra=(nrhs,), kern=kern)
    return X


def small_solve_triangular(A: torch.Tensor, B: torch.Tensor, upper: bool, left: bool = True,
                           unitriangular: bool = False) -> torch.Tensor:
    """torch.linalg.solve_triangular(A, B, upper=, left=, unitriangular=) for A (*, n, n),
    n <= 4, B of A's batch shape: one launch."""
    return _rhs_launch("solve_triangular", A, B, B.shape[-1] if left else B.shape[-2],
                       (left, upper, unitriangular))


def small_cholesky_solve(B: torch.Tensor, L: torch.Tensor, upper: bool = False) -> torch.Tensor:
    """torch.cholesky_solve(B, L, upper) for the factor L (*, n, n), n <= 4, B (*, n, k) of
    L's batch shape: one launch."""
    return _rhs_launch("cholesky_solve", L, B, B.shape[-1], (upper,))


# ------------------------------------------------------------------------------ eig
#
# eig / eigvals of real float32 matrices (`mpslinalg.small.codegen.emit_eig`), complex64
# results written as 64-bit words of interleaved real and imaginary parts, bit-identical to the
# CPU and Metal kernels.


class _TritonBounded(_Triton):
    """`_Triton` whose `sweeps` loop leaves once no lane of the program set the flag, after
    ``count`` trips at most (a ``while`` on the flag's maximum over the block and a trip
    counter): eig's Francis sweeps, where a lane that deflated completely changes nothing
    (its reflectors are identities, tau = 0), so leaving early changes no bit."""

    @contextlib.contextmanager
    def sweeps(self, count: int, flag: str) -> Iterator[None]:
        self.w("go = tl.max(live.to(tl.int32), axis=0)")
        self.w("trips = 0")
        self.w("while go > 0:")
        self.indent += "    "
        self.write_declare(_codegen.BOOL, flag, "rows < 0")
        yield
        self.w("trips += 1")
        self.w(f"go = tl.max({flag}.to(tl.int32), axis=0) * (trips < {count})")
        self.indent = self.indent[:-4]


def _emit_store_complex(w: _Writer, ptr: str, values: list[tuple[str, str]]) -> None:
    """Store the complex entries values[e] = (real part, imaginary part) as entry e of this
    program's rows of ``ptr`` (a complex64 tensor viewed as int64, len(values) entries a row),
    one 8-byte store per entry: the parts' bits packed into an int64, the real part low (the
    memory order of a complex64 on a little-endian device). Half the store instructions of a
    store per part (each of a warp's stores touches as many cache lines either way); a
    [BLOCK, 2] join of the parts is stored one part per thread through shared memory instead."""
    for e, (re_, im_) in enumerate(values):
        w(f"t = ({re_}).to(tl.uint32, bitcast=True).to(tl.int64) | "
          f"(({im_}).to(tl.int32, bitcast=True).to(tl.int64) << 32)")
        w(f"tl.store({ptr} + rows * {len(values)} + {e}, t, mask=live)")


def _eig_source(n: int, vectors: bool, load: str) -> tuple[str, str]:
    """(function name, source) of the eig kernel of real n x n float32 matrices."""
    name = f"small_eig_n{n}_float32_vectors{int(vectors)}_{_mode(n, load)}"
    w, _ = _begin("float32", n, n, load)
    _codegen.emit_eig(_TritonBounded(w, "float32"), n, vectors)
    _emit_store_complex(w, "E", [(f"wre{k}", f"wim{k}") for k in range(n)])
    if vectors:
        _emit_store_complex(w, "V", [(f"vre{i}{k}", f"vim{i}{k}")
                                     for i in range(n) for k in range(n)])
    head = f"def {name}(A, E, {'V, ' if vectors else ''}batch, BLOCK: tl.constexpr):"
    return name, "\n".join([head, *w.lines]) + "\n"


def eig_kernel_source(n: int, vectors: bool = True, load: str | None = None) -> str:
    """The generated Triton source of the eig kernel for n x n matrices (for reading)."""
    return _eig_source(n, vectors, load or _LOAD)[1]


@functools.cache
def _eig_kernel(n: int, vectors: bool, load: str):
    return triton.jit(_compile(*_eig_source(n, vectors, load)), do_not_specialize=["batch"])


def small_eig(A: torch.Tensor, compute_v: bool = True
              ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(eigenvalues, eigenvectors or None) of A (*, n, n) float32, n <= 4, complex64: one
    launch."""
    A, n, batch = _prepare(A)
    E = torch.empty((*A.shape[:-1],), dtype=torch.complex64, device=A.device)
    V = torch.empty(A.shape, dtype=torch.complex64, device=A.device) if compute_v else None
    kern = _eig_kernel(n, compute_v, _LOAD)
    # complex64 entries written as int64 bit patterns (see `_emit_store_complex`)
    outputs = (E.view(torch.int64),) + ((V.view(torch.int64),) if compute_v else ())
    _launch("eig", n, batch, A, *outputs, kern=kern)
    return E, V
