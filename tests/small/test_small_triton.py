"""The fused Triton kernels of the n <= 4 small path (mpslinalg/_small_triton.py), without a GPU.

Triton's interpreter runs ``@triton.jit`` kernels on CPU tensors with numpy semantics, but only
when ``TRITON_INTERPRET=1`` is set before triton is imported (the library's own jit helpers are
wrapped at import). So one subprocess with that environment runs every kernel of the module on
the inputs built here (every op, n = 1..4, float32 and float64, each load layout) and sends the
outputs back; the tests then compare them in this process with

- a numpy transcription of the Metal kernel's algorithm (metal/linalg/small_inverse.h), the same
  operations in the same order, vectorised over the batch: bit-identical, every output;
- the Metal kernel itself compiled for the CPU (mpslinalg.emulator, float32): bit-identical;
- torch's getrf (info) and torch.linalg (values, to a tolerance).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from triton_interpreter import REQUIRES_TRITON, run_cases

from mpslinalg.small import dispatch as si
from mpslinalg.small import paths
from mpslinalg.testing import random_matrix, singular_matrix

pytestmark = REQUIRES_TRITON

ROOT = Path(__file__).resolve().parent.parent
DTYPES = (torch.float32, torch.float64)
SIZES = (1, 2, 3, 4)
LOADS = ("auto", "tile", "strided")

_SCRIPT = r"""
import sys
import torch
from mpslinalg.small import triton_kernels as st

cases = torch.load(sys.argv[1])
out = {}
for key, case in cases.items():
    st._LOAD = case["load"]
    A, B = case["A"], case.get("B")
    A0 = A.clone()
    B0 = None if B is None else B.clone()
    res = {"inv": st.small_inv_ex(A), "det": st.small_det(A), "slogdet": st.small_slogdet(A)}
    if B is not None:
        res["solve"] = st.small_solve_ex(A, B)
    res["untouched"] = torch.equal(A, A0) or bool(torch.isnan(A).any())
    if B is not None:
        res["untouched"] &= torch.equal(B, B0)
    out[key] = res
torch.save(out, sys.argv[2])
"""


# ---------------------------------------------------------------- inputs


def _special(n: int, dtype) -> torch.Tensor:
    """Singular matrices with the first zero pivot at every position, exact-arithmetic ones,
    pivot ties, NaN and Inf entries, zeros."""
    mats = [singular_matrix(n, rank, dtype, seed=32 + rank) for rank in range(n)]
    ints = torch.tensor([[2.0, 4, 1, 3], [1, 2, 5, 7], [4, 8, 3, 2], [1, 2, 0, 1]])
    dup = torch.tensor([[4.0, 8, 1, 3], [2, 4, 5, 7], [1, 2, 3, 2], [-2, -4, 0, 1]])
    ties = torch.tensor([[1.0, 1, 0, 2], [-1, 1, 1, 0], [1, 0, 1, 1], [-1, 2, 0, 1]])
    mats += [m[:n, :n].to(dtype) for m in (ints, dup, ties)]
    mats.append(torch.zeros(n, n, dtype=dtype))
    nan = random_matrix(n, dtype, seed=5)
    nan[0, -1] = math.nan
    inf = random_matrix(n, dtype, seed=6)
    inf[-1, 0] = math.inf
    mats += [nan, inf, torch.eye(n, dtype=dtype)]
    return torch.stack(mats)


def _cases() -> dict[str, dict]:
    cases = {}
    for dtype in DTYPES:
        name = str(dtype).removeprefix("torch.")
        for n in SIZES:
            # 300 matrices: three programs of 128, the last one partial.
            A = torch.cat([random_matrix(n, dtype, (300 - 12,), seed=n), _special(n, dtype)])
            A = A[torch.randperm(len(A), generator=torch.Generator().manual_seed(n))]
            B = random_matrix(3, dtype, (len(A),), seed=10 + n, m=n)
            for load in LOADS:
                if load != "auto" and (n == 1 or dtype == torch.float64):
                    continue
                cases[f"{name}-n{n}-{load}"] = {"A": A, "B": B, "load": load}
            # Layouts: batch shape (3, 5) from a transposed view; unbatched; empty; no rhs.
            T = random_matrix(n, dtype, (3, 5), seed=20 + n).mT
            cases[f"{name}-n{n}-view"] = {"A": T, "B": T[..., :1], "load": "auto"}
            cases[f"{name}-n{n}-single"] = {"A": T[1, 2], "B": T[1, 2], "load": "auto"}
            cases[f"{name}-n{n}-empty"] = {"A": torch.zeros(0, 2, n, n, dtype=dtype),
                                          "B": torch.zeros(0, 2, n, 2, dtype=dtype),
                                          "load": "auto"}
            cases[f"{name}-n{n}-norhs"] = {"A": A[:20], "B": torch.zeros(20, n, 0, dtype=dtype),
                                          "load": "auto"}
    return cases


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(cases, outputs): every case run through the kernels in Triton's interpreter."""
    return run_cases(tmp_path_factory, "triton", _cases(), _SCRIPT, timeout=300)


# ---------------------------------------------------------------- reference


def _reference(A: torch.Tensor, B: torch.Tensor | None):
    """The Metal kernel's arithmetic (small_factor, small_solve_vector, det, slogdet) in numpy,
    vectorised over the batch: the same IEEE operations in the same order, no contraction."""
    n = A.shape[-1]
    a = A.reshape(-1, n, n).numpy().copy()
    batch = a.shape[0]
    piv = np.zeros((batch, n), dtype=np.int64)
    info = np.zeros(batch, dtype=np.int32)
    rows = np.arange(batch)
    with np.errstate(all="ignore"):
        for k in range(n):
            p = np.full(batch, k)
            best = np.abs(a[:, k, k])
            for i in range(k + 1, n):
                v = np.abs(a[:, i, k])
                gt = v > best
                best = np.where(gt, v, best)
                p = np.where(gt, i, p)
            piv[:, k] = p
            upper = a[rows, k].copy()
            a[rows, k] = a[rows, p]
            a[rows, p] = upper
            zero = a[:, k, k] == 0
            info = np.where(zero & (info == 0), k + 1, info).astype(np.int32)
            for i in range(k + 1, n):
                a[:, i, k] = np.where(zero, a[:, i, k], a[:, i, k] / a[:, k, k])
            for i in range(k + 1, n):
                for j in range(k + 1, n):
                    a[:, i, j] = a[:, i, j] - a[:, i, k] * a[:, k, j]

        def solve(x):
            x = x.copy()
            for k in range(n - 1):
                upper = x[rows, k].copy()
                x[rows, k] = x[rows, piv[:, k]]
                x[rows, piv[:, k]] = upper
            for k in range(n):
                for i in range(k + 1, n):
                    x[:, i] = x[:, i] - a[:, i, k] * x[:, k]
            for k in range(n - 1, -1, -1):
                x[:, k] = x[:, k] / a[:, k, k]
                for i in range(k):
                    x[:, i] = x[:, i] - a[:, i, k] * x[:, k]
            return x

        eye = np.broadcast_to(np.eye(n, dtype=a.dtype), a.shape)
        inv = np.stack([solve(eye[:, :, j]) for j in range(n)], axis=-1)
        sgn = np.ones(batch, dtype=a.dtype)
        for k in range(n):
            sgn = np.where(piv[:, k] != k, -sgn, sgn)
        det = a[:, 0, 0].copy()
        for k in range(1, n):
            det = det * a[:, k, k]
        det = det * sgn
        logabs = np.zeros(batch, dtype=a.dtype)
        for k in range(n):
            d = a[:, k, k]
            logabs = logabs + np.log(np.abs(d))
            sgn = np.where(d == 0, 0, np.where(d > 0, sgn, -sgn)).astype(a.dtype)
        out = {"inv": (inv, info), "det": det, "slogdet": (sgn, logabs)}
        if B is not None:
            b = B.reshape(batch, n, B.shape[-1]).numpy()
            xs = [solve(b[:, :, j]) for j in range(b.shape[-1])]
            out["solve"] = (np.stack(xs, -1) if xs else b.copy(), info)
    shape = A.shape[:-2]

    def back(x, trail=()):
        return torch.from_numpy(np.ascontiguousarray(x)).reshape((*shape, *trail))

    res = {"inv": (back(inv, (n, n)), back(info)), "det": back(det),
           "slogdet": (back(out["slogdet"][0]), back(out["slogdet"][1]))}
    if B is not None:
        res["solve"] = (back(out["solve"][0], B.shape[-2:]), back(info))
    return res


def _same(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Bit-identical values (NaN where NaN), same shape and dtype."""
    return (x.shape == y.shape and x.dtype == y.dtype
            and torch.equal(torch.isnan(x), torch.isnan(y))
            and torch.equal(torch.nan_to_num(x, nan=0.0), torch.nan_to_num(y, nan=0.0)))


# ---------------------------------------------------------------- tests


def test_interpreter_ran_every_case(runs):
    cases, out = runs
    assert set(out) == set(cases)
    for key, res in out.items():
        assert res["untouched"], key  # inputs never modified


def test_bit_identical_to_reference(runs):
    """Every output of every case equals the numpy transcription of the Metal kernel (det and
    slogdet: of the transpose, which the kernels factor as torch's det does)."""
    cases, out = runs
    for key, case in cases.items():
        ref = _reference(case["A"], case["B"])
        transposed = _reference(case["A"].mT, None)
        ref.update({op: transposed[op] for op in ("det", "slogdet")})
        got = out[key]
        for op in ("inv", "solve", "det", "slogdet"):
            for g, r in zip(torch.utils._pytree.tree_leaves(got[op]),
                            torch.utils._pytree.tree_leaves(ref[op]), strict=True):
                assert _same(g, r), (key, op)


def test_shapes_and_dtypes(runs):
    cases, out = runs
    for key, case in cases.items():
        A, B, res = case["A"], case["B"], out[key]
        X, info = res["inv"]
        assert X.shape == A.shape and X.dtype == A.dtype and X.is_contiguous(), key
        assert info.shape == A.shape[:-2] and info.dtype == torch.int32, key
        assert res["det"].shape == A.shape[:-2] and res["det"].dtype == A.dtype, key
        sign, logabs = res["slogdet"]
        assert sign.shape == logabs.shape == A.shape[:-2], key
        assert sign.dtype == logabs.dtype == A.dtype, key
        assert res["solve"][0].shape == B.shape, key


#: sigma_min / sigma_max below this times n * eps: singular in the working precision
_SINGULAR_TO_WORKING_PRECISION = 64


def test_matches_getrf_and_torch_linalg(runs):
    """info as torch's getrf; values close to torch.linalg on the non-singular matrices."""
    cases, out = runs
    for key, case in cases.items():
        A = case["A"]
        if A.numel() == 0:
            continue
        res = out[key]
        info = torch.linalg.lu_factor_ex(A).info
        finite = torch.isfinite(A).flatten(-2).all(-1)
        # getrf's operation order differs between LAPACK builds (the H200 image's torch links
        # another one), so an exactly zero pivot can appear in one and not the other on matrices
        # singular to working precision: only there may info disagree
        differs = finite & (res["inv"][1] != info)
        if differs.any():
            sv = torch.linalg.svdvals(A[differs].double())
            eps = torch.finfo(A.dtype).eps
            assert (sv[..., -1] <= _SINGULAR_TO_WORKING_PRECISION * A.shape[-1] * eps
                    * sv[..., 0]).all(), key
        assert torch.equal(res["solve"][1], res["inv"][1]), key
        ours = res["inv"][1]
        det = res["det"]
        assert (det[ours > 0] == 0).all() and (det[(ours == 0) & finite] != 0).all(), key
        sign, logabs = res["slogdet"]
        assert (sign[ours > 0] == 0).all() and (logabs[ours > 0] == -math.inf).all(), key
        ok = (info == 0) & finite & ~differs
        if not ok.any():
            continue
        A64 = A.double()[ok]
        tol = 1e-3 if A.dtype == torch.float32 else 1e-10
        X = res["inv"][0][ok].double()
        resid = (A64 @ X - torch.eye(A.shape[-1], dtype=torch.float64)).abs().amax()
        assert resid < tol * max(1.0, float(torch.linalg.cond(A64).amax())), key
        torch.testing.assert_close(det[ok].double(), torch.linalg.det(A64), rtol=tol, atol=0)
        ref_sign, ref_log = torch.linalg.slogdet(A64)
        assert torch.equal(sign[ok].double(), ref_sign), key
        torch.testing.assert_close(logabs[ok].double(), ref_log, rtol=0, atol=tol)


def test_bit_identical_to_metal_kernel_on_cpu(runs):
    """float32: the same results as the Metal kernel compiled for the CPU (the CPU path); only
    log|det| may differ in the last bit (the C library's logf against numpy's)."""
    from mpslinalg.emulator import find_compiler

    if find_compiler() is None:
        pytest.skip("no C++ compiler for mpslinalg.emulator")
    cases, out = runs
    for key, case in cases.items():
        A, B = case["A"], case["B"]
        if A.dtype != torch.float32 or A.numel() == 0:
            continue
        A, B = A.contiguous(), B.contiguous()
        At = A.mT.contiguous()  # det and slogdet factor the transpose of what they read
        want = {"inv": si._metal_inv(A), "det": si._metal_det(At),
                "slogdet": si._metal_slogdet(At)}
        if B.shape[-1]:
            want["solve"] = si._metal_solve(A, B)
        for op, w in want.items():
            got = torch.utils._pytree.tree_leaves(out[key][op])
            for i, (g, r) in enumerate(zip(got, torch.utils._pytree.tree_leaves(w), strict=True)):
                if op == "slogdet" and i == 1:
                    torch.testing.assert_close(g, r, rtol=2e-7, atol=1e-6, equal_nan=True)
                else:
                    assert _same(g, r), (key, op)


def test_generated_source_and_dispatch():
    """The generated kernels are straight-line code with tl.where selects; small_inverse finds
    the module (CUDA dispatch itself needs a GPU: benchmarks/bench_small_inverse.py prints it)."""
    from mpslinalg.small import triton_kernels as st

    src = st.kernel_source("inv", 4)
    assert "tl.where" in src and "tl.math.div_rn" in src and " if " not in src
    assert "tl.load" in st.kernel_source("solve", 3, "float64", "strided")
    assert paths.import_triton_kernels() is st
    assert si.torch_path(torch.zeros(2, 4, 4, dtype=torch.complex64)) != "triton"
    # the fused kernel's crossover is far below the tensor-op path's (H200 sweep)
    lu = paths.TABLES["inv"]
    assert lu.row(paths.TRITON, "cuda").min_batch[4] < lu.row(paths.TENSOR_OPS, "cuda").min_batch[4]
