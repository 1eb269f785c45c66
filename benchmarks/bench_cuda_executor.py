"""mpslinalg's Metal kernels run by the CUDA executor (mpslinalg.emulator.cuda) on an NVIDIA GPU,
against torch's own CUDA implementation of the same op and against a roofline.

These are NVIDIA numbers: they say how the Metal kernels' algorithms fare on a GPU that exists
here, and nothing about Apple GPUs.

    python benchmarks/bench_cuda_executor.py [--reps 21] [--sections launch,matrix,cases,lu,qr]
        [--gemm-sizes 256,1024,2048] [--cholesky-sizes 1024,4096] [--out results.md]
    python benchmarks/bench_cuda_executor.py --sections cholesky --dry-run   # no GPU needed
    python benchmarks/bench_cuda_executor.py --sections trsm [--trsm-sizes 4096]
        [--trsm-blocks rule,128,256,512]

Sections: ``launch``, the host cost of one launch against a torch kernel's; ``matrix``, a GEMM of
8x8 simdgroup_matrix tiles against torch.mm (what the executor's simdgroup_matrix costs);
``cases``, the library's kernels against torch's op; ``spectral``, svd and eigh at 16 x 128^2,
256^2 and 1024^2 (float32 and complex64); ``eigh``, eigh's rule (the tridiagonal path from 128)
against the Jacobi kernels and cuSOLVER at ``--eigh-shapes``; ``lu``, ``qr`` and ``cholesky``,
those families at research scale (qr: the TSQR tree at 4000x36, 65536x8 and 100000x32, the blocked
path at 4096^2 and 64 x 64^2 complex; cholesky: one matrix of each ``--cholesky-sizes`` order, 64 x
(64 x 64), the inverse); ``trsm``, the blocked triangular solve alone (4096^2 upper with 64 and 1
right-hand sides against torch.linalg.solve_triangular, at the host's diagonal block rows and any
forced by ``--trsm-blocks``; by substitution, trsm_diag + trsm_update, and by inverted diagonal
blocks, each profiled). ``--dry-run`` builds the chosen sections' cases on the CPU (the emulator
runs the Metal kernels) at small sizes, calls every contender once and prints the agreement notes:
a check of the benchmark's code paths, no timing. Each case times the contenders interleaved (one
call of each per round, CUDA events around each call, the stream synchronized between calls) after
warm-up calls, and reports the median with the min and max over the rounds, and next to it the
device time of the executor's kernels (`mpslinalg.emulator.cuda.profile`) with a per-kernel
breakdown, so that a slow kernel shows as one. The roofline time is max(bytes / bandwidth, flops /
fp32 peak) with the bytes that must move at least once (the input read, the result written) and
LAPACK's flop counts; it ignores launch latency, which dominates the small cases. """

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics

import torch

os.environ.setdefault("MPSLINALG_METAL_ON_CUDA", "1")  # the metal backend on CUDA tensors

from mpslinalg import emulator as _emulator  # noqa: E402
from mpslinalg.emulator import cuda  # noqa: E402
from mpslinalg.linalg import cholesky_metal as _chol_metal  # noqa: E402
from mpslinalg.linalg import eigh as _eigh  # noqa: E402
from mpslinalg.linalg import lu_metal as _lu_metal  # noqa: E402
from mpslinalg.linalg import qr_metal as _qr_metal  # noqa: E402
from mpslinalg.linalg import svd_metal as _svd_metal  # noqa: E402
from mpslinalg.linalg import triangular_metal as _tri_metal  # noqa: E402
from mpslinalg.small import dispatch as si  # noqa: E402

H200_BANDWIDTH = 4.8e12  # bytes/s, HBM3e
H200_FP32_PEAK = 67e12  # flop/s, fp32 without tensor cores


def _time(fn, reps_out, start, end):
    start.record()
    fn()
    end.record()
    end.synchronize()
    reps_out.append(start.elapsed_time(end) * 1e3)  # microseconds


def _bench(contenders, reps, warmup=3):
    for fn in contenders.values():
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    times = {name: [] for name in contenders}
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(reps):
        for name, fn in contenders.items():  # interleaved: drift hits every contender alike
            _time(fn, times[name], start, end)
    return times


def _roofline_us(nbytes, flops):
    return max(nbytes / H200_BANDWIDTH, flops / H200_FP32_PEAK) * 1e6


def _matrices(shape, dtype, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    if dtype.is_complex:
        return torch.complex(torch.randn(shape, generator=gen, device="cuda"),
                             torch.randn(shape, generator=gen, device="cuda"))
    return torch.randn(shape, generator=gen, device="cuda")


def _lu_flops(batch, n, complex_):
    return batch * (2 / 3) * n**3 * (4 if complex_ else 1)


def cases():
    out = []

    for batch, n, dtype in [(64, 64, torch.complex64), (1, 1024, torch.float32)]:
        A = _matrices((batch, n, n), dtype) + n * torch.eye(n, device="cuda")
        es = A.element_size()
        ours = lambda A=A: _lu_metal.lu_factor_metal(A)  # noqa: E731
        theirs = lambda A=A: torch.linalg.lu_factor(A)  # noqa: E731
        LU, piv, _ = ours()
        ref, ref_piv = theirs()
        agree = f"pivots equal: {bool(torch.equal(piv, ref_piv))}, max |LU - LU_torch| = " \
                f"{(LU - ref).abs().max().item():.1e}"
        out.append((f"lu_factor {batch}x({n}x{n}) {str(dtype)[6:]}", {
            "CUDA executor (lu.metal)": ours, "torch.linalg.lu_factor": theirs},
            _roofline_us(2 * batch * n * n * es, _lu_flops(batch, n, dtype.is_complex)), agree))

    for batch, n, k, dtype in [(1, 1024, 1, torch.float32), (64, 64, 1, torch.complex64)]:
        A = _matrices((batch, n, n), dtype, 1) + n * torch.eye(n, device="cuda")
        B = _matrices((batch, n, k), dtype, 2)
        es = A.element_size()

        def ours(A=A, B=B):
            LU, piv, _ = _lu_metal.lu_factor_metal(A)
            return _lu_metal.lu_solve_metal(LU, piv, B)

        theirs = lambda A=A, B=B: torch.linalg.solve(A, B)  # noqa: E731
        X = ours()
        res = ((A @ X - B).abs().max() / B.abs().max()).item()
        flops = _lu_flops(batch, n, dtype.is_complex) + batch * 2 * n * n * k * (
            4 if dtype.is_complex else 1)
        out.append((f"solve {batch}x({n}x{n}), {k} rhs, {str(dtype)[6:]}", {
            "CUDA executor (lu.metal + triangular.metal)": ours, "torch.linalg.solve": theirs},
            _roofline_us((batch * n * n + 2 * batch * n * k) * es, flops),
            f"max |A X - B| / max |B| = {res:.1e}"))

    batch, n = 10**6, 4
    A = _matrices((batch, n, n), torch.float32, 3) + 2 * torch.eye(n, device="cuda")
    ours = lambda: si._metal_inv(A)  # noqa: E731
    theirs = lambda: torch.linalg.inv(A)  # noqa: E731
    eye = torch.eye(n, device="cuda")

    def residual(X):  # max over the batch of |A X - I| / (|A| |X|), max-norms
        r = (A @ X - eye).abs().amax((-2, -1))
        return (r / (A.abs().amax((-2, -1)) * X.abs().amax((-2, -1)))).max().item()

    agree = f"max relative residual: CUDA executor {residual(ours()[0]):.1e}, torch " \
            f"{residual(theirs()):.1e}"
    # per matrix: getrf 2/3 n^3 + getri-like solve with n right-hand sides 4/3 n^3
    out.append((f"inv ({batch:.0e}, {n}, {n}) float32", {
        "CUDA executor (small_inverse.metal)": ours, "torch.linalg.inv": theirs},
        _roofline_us(2 * batch * n * n * 4, batch * 2 * n**3), agree))
    out += _qr_cases()
    out += _jacobi_cases()
    return out


def _pivot_agreement(piv, ref_piv):
    differ = int((piv != ref_piv).sum())
    return f"pivots differing from cuSOLVER's: {differ} of {piv.numel()}"


def lu_cases(sizes=(1024, 2048, 4096, 8192)):
    """issue 25's targets: lu_factor and solve (1 and 64 right-hand sides) on general random
    matrices (row interchanges happen), complex64 at 2048, the batched medium sizes, and a
    solve_triangular-shaped trsm."""
    out = []

    def factor_case(batch, n, dtype, seed):
        A = _matrices((batch, n, n), dtype, seed)
        if batch == 1:
            A = A[0]
        ours = lambda A=A: _lu_metal.lu_factor_metal(A)  # noqa: E731
        theirs = lambda A=A: torch.linalg.lu_factor(A)  # noqa: E731
        LU, piv, _ = ours()
        _, ref_piv = theirs()
        P, L, U = torch.lu_unpack(LU, piv)
        res = ((P @ L @ U - A).abs().amax() / A.abs().amax()).item()
        out.append((f"lu_factor {batch}x({n}x{n}) {str(dtype)[6:]}", {
            "CUDA executor (lu.metal)": ours, "torch.linalg.lu_factor": theirs},
            _roofline_us(2 * batch * n * n * A.element_size(),
                         _lu_flops(batch, n, dtype.is_complex)),
            f"{_pivot_agreement(piv, ref_piv)}, max |P L U - A| / max |A| = {res:.1e}"))

    def solve_case(batch, n, k, dtype, seed):
        A = _matrices((batch, n, n), dtype, seed)
        B = _matrices((batch, n, k), dtype, seed + 1)
        if batch == 1:
            A, B = A[0], B[0]

        def ours(A=A, B=B):
            LU, piv, _ = _lu_metal.lu_factor_metal(A)
            return _lu_metal.lu_solve_metal(LU, piv, B)

        theirs = lambda A=A, B=B: torch.linalg.solve(A, B)  # noqa: E731
        X = ours()
        res = ((A @ X - B).abs().amax() / (A.abs().amax() * X.abs().amax() * n)).item()
        flops = _lu_flops(batch, n, dtype.is_complex) + batch * 2 * n * n * k * (
            4 if dtype.is_complex else 1)
        out.append((f"solve {batch}x({n}x{n}), {k} rhs, {str(dtype)[6:]}", {
            "CUDA executor (lu.metal + triangular.metal)": ours, "torch.linalg.solve": theirs},
            _roofline_us((batch * n * n + 2 * batch * n * k) * A.element_size(), flops),
            f"max |A X - B| / (n max |A| max |X|) = {res:.1e}"))

    for n in sizes:
        factor_case(1, n, torch.float32, n)
        for k in (1, 64):
            solve_case(1, n, k, torch.float32, n + k)
    factor_case(1, 2048, torch.complex64, 7)
    solve_case(1, 2048, 1, torch.complex64, 8)
    factor_case(64, 64, torch.complex64, 9)
    solve_case(64, 64, 1, torch.complex64, 10)
    factor_case(256, 128, torch.float32, 11)
    solve_case(256, 128, 1, torch.float32, 12)

    n, k = 4096, 64
    R = torch.triu(_matrices((n, n), torch.float32, 13)) + n**0.5 * torch.eye(n, device="cuda")
    B = _matrices((n, k), torch.float32, 14)
    ours = lambda: _tri_metal.triangular_solve_metal(R, B, upper=True)  # noqa: E731
    theirs = lambda: torch.linalg.solve_triangular(R, B, upper=True)  # noqa: E731
    X = ours()
    res = ((R @ X - B).abs().amax() / B.abs().amax()).item()
    out.append((f"trsm {n}x{n} upper, {k} rhs, float32", {
        "CUDA executor (triangular.metal)": ours, "torch.linalg.solve_triangular": theirs},
        _roofline_us((n * n // 2 + 2 * n * k) * 4, n * n * k), f"max |R X - B| / max |B| = "
        f"{res:.1e}"))
    return out


def _hpd(batch, n, dtype, seed, device):
    """Hermitian positive definite X X^H / n + I (condition about 5): the factorization runs to
    the end, no minor fails."""
    gen = torch.Generator(device=device).manual_seed(seed)
    X = torch.randn((batch, n, n), generator=gen, device=device)
    if dtype.is_complex:
        X = torch.complex(X, torch.randn((batch, n, n), generator=gen, device=device))
    A = X @ X.mH / n + torch.eye(n, device=device)
    return A[0] if batch == 1 else A


def cholesky_cases(sizes=(1024, 4096), batched=(64, 64), device="cuda"):
    """issue 27's targets: cholesky of one matrix of each order in ``sizes`` and of ``batched``
    = (batch, n) matrices, float32 (and complex64 for the batch), against cuSOLVER through
    torch.linalg.cholesky (which reads info on the host) and cholesky_ex (which does not; ours
    does not either); cholesky_inverse (potri: trtri + lauum) at the first size."""
    out = []

    def factor_case(batch, n, dtype, seed):
        A = _hpd(batch, n, dtype, seed, device)
        ours = lambda A=A: _chol_metal.cholesky_metal(A, False)  # noqa: E731
        L, info = ours()
        ref = torch.linalg.cholesky(A)
        # LAPACK xPOT01 in float64: ||L L^H - A||_1 / (n ||A||_1 eps), the maximum over the batch
        Lw, Aw = L.to(torch.complex128 if dtype.is_complex else torch.float64), A.to(
            torch.complex128 if dtype.is_complex else torch.float64)
        num = torch.linalg.matrix_norm(Lw @ Lw.mH - Aw, 1)
        ratio = (num / (n * torch.linalg.matrix_norm(Aw, 1) * torch.finfo(dtype).eps)).max()
        out.append((f"cholesky {batch}x({n}x{n}) {str(dtype)[6:]}", {
            "CUDA executor (cholesky.metal + triangular.metal)": ours,
            "torch.linalg.cholesky": lambda A=A: torch.linalg.cholesky(A),
            "torch.linalg.cholesky_ex": lambda A=A: torch.linalg.cholesky_ex(A)},
            _roofline_us(2 * batch * n * n * A.element_size(),
                         batch * n**3 / 3 * (4 if dtype.is_complex else 1)),
            f"info all 0: {not bool(info.any())}, xPOT01 ratio {ratio.item():.2f}, max |L - "
            f"L_torch| / max |L_torch| = {((L - ref).abs().max() / ref.abs().max()).item():.1e}"))

    for n in sizes:
        factor_case(1, n, torch.float32, n)
    factor_case(*batched, torch.float32, 1)
    factor_case(*batched, torch.complex64, 2)

    n = sizes[0]
    L = torch.linalg.cholesky(_hpd(1, n, torch.float32, 3, device))
    ours = lambda: _chol_metal.cholesky_inverse_metal(L, False)  # noqa: E731
    theirs = lambda: torch.cholesky_inverse(L)  # noqa: E731
    inv, ref = ours(), theirs()
    out.append((f"cholesky_inverse 1x({n}x{n}) float32", {
        "CUDA executor (triangular.metal + cholesky.metal)": ours,
        "torch.cholesky_inverse": theirs},
        _roofline_us(2 * n * n * 4, n**3 * 2 / 3),
        f"max |X - X_torch| / max |X_torch| = "
        f"{((inv - ref).abs().max() / ref.abs().max()).item():.1e}"))
    return out


def _with_block_rows(fn, bs):
    """fn run with the blocked triangular solve's diagonal blocks forced to ``bs`` rows (None:
    the host's rule, triangular_metal.block_rows)."""
    if bs is None:
        return fn

    def call():
        rule = _tri_metal.block_rows
        _tri_metal.block_rows = lambda n: bs
        try:
            return fn()
        finally:
            _tri_metal.block_rows = rule

    return call


def _trsm_kind(R, B, kind, trtri=None):
    """R X = B (R upper) by `triangular_metal._solve_left` of the given kind ("blocked":
    trsm_diag + trsm_update; "inverse": inverted diagonal blocks), whatever the rule says;
    ``trtri``: the inverse's INVERSE_TRTRI_BLOCK forced to this many rows."""
    no_swaps = torch.zeros(1, dtype=torch.int32, device=R.device)
    X = B.clone(memory_format=torch.contiguous_format)
    rule = _tri_metal.INVERSE_TRTRI_BLOCK
    _tri_metal.INVERSE_TRTRI_BLOCK = trtri or rule
    try:
        return _tri_metal._solve_left(R, no_swaps, X, ((0, 0, 0, 0),), "solve_triangular",
                                      kind=kind)
    finally:
        _tri_metal.INVERSE_TRTRI_BLOCK = rule


def trsm_cases(sizes=(4096,), rhs=(64, 1), blocks=(None,), device="cuda"):
    """The blocked triangular solve alone (metal/linalg/triangular.h) against cuBLAS's trsm
    through torch.linalg.solve_triangular: an upper triangle (backward substitution, as R of
    QR or U of LU) of each order in ``sizes`` with each count of right-hand sides in ``rhs``,
    float32, the diagonal blocks of triangular_metal.block_rows (None in ``blocks``) or forced
    to each other entry's rows; three contenders of ours, whichever the rule picks (the note
    says which): the substitution by blocks (trsm_diag + trsm_update, 2 ceil(n / bs) - 1
    launches) and the inverted diagonal blocks (`_solve_left` kind "inverse": the blocks
    inverted by one trsm_diag launch, INVERSE_TRTRI_BLOCK, then 2 ceil(n / bs) - 1 gemm
    launches), and the same with the blocks inverted by 32-row blocks (2 bs / 32 - 1 launches
    instead of one), each profiled, the launches of each counted in the notes."""
    out = []
    for n in sizes:
        gen = torch.Generator(device=device).manual_seed(n)
        R = torch.randn((n, n), generator=gen, device=device).triu() + n**0.5 * torch.eye(
            n, device=device)
        for k in rhs:
            B = torch.randn((n, k), generator=gen, device=device)
            theirs = lambda R=R, B=B: torch.linalg.solve_triangular(R, B, upper=True)  # noqa: E731
            ref = theirs()
            for bs in blocks:
                used = bs or _tri_metal.block_rows(n)
                picked = _with_block_rows(lambda n=n, k=k: _tri_metal.use_inverse(n, k), bs)()
                contenders = {
                    f"CUDA executor ({kind}{f', trtri by {trtri} rows' if trtri else ''})":
                        _with_block_rows(lambda R=R, B=B, kind=kind, trtri=trtri: _trsm_kind(
                            R, B, kind, trtri), bs)
                    for kind, trtri in (("blocked", None), ("inverse", None),
                                        ("inverse", _tri_metal.BLOCK))}
                notes = [f"the rule takes {'inverse' if picked else 'blocked'}"]
                for who, fn in contenders.items():
                    _emulator.reset_launch_counts()  # counts either executor's launches
                    X = fn()
                    launches = _emulator.total_launches()
                    res = ((R @ X - B).abs().amax() / B.abs().amax()).item()
                    err = ((X - ref).abs().amax() / ref.abs().amax()).item()
                    notes.append(f"{who}: {launches} launches, max |R X - B| / max |B| = "
                                 f"{res:.1e}, max |X - X_torch| / max |X_torch| = {err:.1e}")
                contenders["torch.linalg.solve_triangular"] = theirs
                out.append((f"trsm {n}x{n} upper, {k} rhs, float32, bs={used}"
                            f"{'' if bs else ' (rule)'}", contenders,
                            _roofline_us((n * n // 2 + 2 * n * k) * 4, n * n * k),
                            "; ".join(notes)))
    return out


_JACOBI_SMALL = [(10**5, 3, torch.float32), (10**6, 3, torch.float32),
                 (64, 32, torch.float32), (64, 32, torch.complex64)]
#: issue 26's sizes past one threadgroup's memory, and the batch of 128^2 between
_JACOBI_SCALE = "16x128,1x256,1x1024"


def _jacobi_scale(shapes: str):
    """(batch, n, dtype) of "BxN,..." in float32 and complex64."""
    return [(int(b), int(n), dtype) for b, n in (s.split("x") for s in shapes.split(","))
            for dtype in (torch.float32, torch.complex64)]


def _jacobi_cases(shapes=_JACOBI_SMALL):
    """SVD and Hermitian eigensolver: Jacobi sweeps, so no flop count defines a roofline; the
    bytes bound is given (input read, factors written) with the sweeps' flops left out."""
    out = []
    for batch, n, dtype in shapes:
        size = f"{batch:.0e}" if batch >= 10**4 else str(batch)
        A = _matrices((batch, n, n), dtype, 5)
        es = A.element_size()
        ours = lambda A=A: _svd_metal.svd_metal(A)  # noqa: E731
        theirs = lambda A=A: torch.linalg.svd(A, full_matrices=False)  # noqa: E731
        U, S, Vh, info = ours()
        res = ((U * S.unsqueeze(-2).to(dtype)) @ Vh - A).abs().amax() / A.abs().amax()
        out.append((f"svd {size}x({n}x{n}) {str(dtype)[6:]}", {
            "CUDA executor (svd.metal)": ours, "torch.linalg.svd": theirs},
            _roofline_us(batch * n * n * 3 * es, 0),
            f"max |U S Vh - A| / max |A| = {res.item():.1e}, sweeps <= {int(info.max())}"))
        H = A + A.mH
        ours = lambda H=H: _eigh.eigh_metal(H, lower=True, vectors=True)  # noqa: E731
        theirs = lambda H=H: torch.linalg.eigh(H)  # noqa: E731
        try:
            theirs()
        except RuntimeError as exc:  # cuSOLVER's batched syevj fails at large batches
            theirs = None
            failure = f"; torch.linalg.eigh fails: {str(exc).splitlines()[0][:80]}"
        else:
            failure = ""
        w, V, status = ours()
        res = (H @ V - V * w.unsqueeze(-2).to(dtype)).abs().amax() / H.abs().amax()
        contenders = {"CUDA executor (eigh.metal)": ours}
        if theirs is not None:
            contenders["torch.linalg.eigh"] = theirs
        out.append((f"eigh {size}x({n}x{n}) {str(dtype)[6:]}", contenders,
                    _roofline_us(batch * n * n * 2 * es, 0),
                    f"max |H V - V diag(w)| / max |H| = {res.item():.1e}{failure}"))
    return out


def _eigh_jacobi(H):
    """eigh_metal on the one-threadgroup Jacobi kernels whatever the order (the rule's path
    below eigh.TRIDIAG_MIN_N)."""
    rule = _eigh.path
    _eigh.path = lambda n, dtype: "group" if n <= _eigh.group_max_n(dtype) else "device"
    try:
        return _eigh.eigh_metal(H, lower=True, vectors=True)
    finally:
        _eigh.path = rule


def eigh_cases(shapes=((1, 128), (16, 128), (1, 256), (1, 512), (1, 1024)), jacobi_max=256):
    """eigh of one or a few large matrices: the rule's path (tridiagonal from
    eigh.TRIDIAG_MIN_N, its vectors by divide and conquer), the one-threadgroup Jacobi kernels
    up to ``jacobi_max`` (the crossover), and torch (cuSOLVER); then eigvalsh against torch's.
    Roofline: bytes only (input read, vectors written); the iterations' flops are
    data-dependent."""
    out = []
    for batch, n in shapes:
        for dtype in (torch.float32, torch.complex64):
            A = _matrices((batch, n, n), dtype, 6)
            H = A + A.mH
            contenders = {
                "CUDA executor (eigh.metal, rule: "
                f"{_eigh.path(n, dtype)})": lambda H=H: _eigh.eigh_metal(H, lower=True,
                                                                         vectors=True)}
            if n <= jacobi_max:
                contenders["CUDA executor (eigh.metal, Jacobi)"] = lambda H=H: _eigh_jacobi(H)
            contenders["torch.linalg.eigh"] = lambda H=H: torch.linalg.eigh(H)
            w, V, status = _eigh.eigh_metal(H, lower=True, vectors=True)
            wide = torch.complex128 if dtype.is_complex else torch.float64
            Hd, Vd = H.to(wide), V.to(wide)
            eps = torch.finfo(torch.float32).eps
            res = ((Hd @ Vd - Vd * w.to(wide).unsqueeze(-2)).abs().amax()
                   / (n * Hd.abs().amax() * eps))
            orth = (Vd.mH @ Vd - torch.eye(n, device="cuda", dtype=wide)).abs().amax() / (n * eps)
            err = ((w.double() - torch.linalg.eigvalsh(Hd)).abs().amax()
                   / (n * w.double().abs().amax() * eps))
            out.append((f"eigh {batch}x({n}x{n}) {str(dtype)[6:]}", contenders,
                        _roofline_us(batch * n * n * 2 * A.element_size(), 0),
                        f"ratios (max-norm, / n eps): residual {res.item():.2f}, orthogonality "
                        f"{orth.item():.2f}, eigenvalues vs float64 {err.item():.2f}; "
                        f"status [{int(status[..., 0].max())}, "
                        f"{int(status[..., 1].max())}] (info, Jacobi sweeps or 0)"
                        ))
            w_only = _eigh.eigh_metal(H, lower=True, vectors=False)[0]
            err = ((w_only.double() - torch.linalg.eigvalsh(Hd)).abs().amax()
                   / (n * w_only.double().abs().amax() * eps))
            out.append((f"eigvalsh {batch}x({n}x{n}) {str(dtype)[6:]}", {
                "CUDA executor (eigh.metal)": lambda H=H: _eigh.eigh_metal(H, lower=True,
                                                                           vectors=False),
                "torch.linalg.eigvalsh": lambda H=H: torch.linalg.eigvalsh(H)},
                _roofline_us(batch * n * n * A.element_size(), 0),
                f"eigenvalues vs float64 {err.item():.2f} (max-norm ratio / n eps)"))
    return out


def _qr_flops(batch, m, n, complex_):
    # geqrf 2 m n^2 - 2/3 n^3, then orgqr for the reduced Q about the same (LAPACK Working Note 41)
    return batch * 2 * (2 * m * n * n - (2 / 3) * n**3) * (4 if complex_ else 1)


def _qr_case(batch, m, n, dtype):
    A = _matrices((batch, m, n), dtype, 4)
    es = A.element_size()
    ours = lambda A=A: _qr_metal.qr_metal(A)  # noqa: E731
    theirs = lambda A=A: torch.linalg.qr(A)  # noqa: E731
    Q, R = ours()
    k = min(m, n)
    eye = torch.eye(k, dtype=dtype, device=A.device)
    res = ((Q @ R - A).abs().amax() / A.abs().amax()).item()
    orth = (Q.mH @ Q - eye).abs().amax().item()
    R_ref = theirs()[1]
    r_err = ((R - R_ref).abs().amax() / R_ref.abs().amax()).item()  # LAPACK's signs on both
    path = ("TSQR, levels (nodes): " + " ".join(
        str(lev.nodes) for lev in _qr_metal.tsqr_levels(m, n, dtype))
        if _qr_metal.use_tsqr(m, n, "reduced", dtype) else "blocked")
    return (f"qr {batch}x({m}x{n}) {str(dtype)[6:]}", {
        "CUDA executor (qr.metal)": ours, "torch.linalg.qr": theirs},
        _roofline_us((batch * m * n * 2 + batch * k * n) * es,
                     _qr_flops(batch, m, n, dtype.is_complex)),
        f"{path}; max |QR - A| / max |A| = {res:.1e}, max |Q^H Q - I| = {orth:.1e}, "
        f"max |R - R_torch| / max |R_torch| = {r_err:.1e}")


def _qr_cases():
    # 1e4 3x3, not 1e5: torch.linalg.qr takes ~4 s per call for 1e5 on an H200
    return [_qr_case(*case) for case in [(1, 4000, 36, torch.float32),
                                         (64, 64, 64, torch.complex64),
                                         (10**4, 3, 3, torch.float32)]]


def qr_cases():
    """The QR targets of issue 26: tall-skinny (the TSQR tree), one large square matrix (the
    blocked path) and a batch of complex 64 x 64."""
    return [_qr_case(*case) for case in [(1, 4000, 36, torch.float32),
                                         (1, 65536, 8, torch.float32),
                                         (1, 100_000, 32, torch.float32),
                                         (1, 4096, 4096, torch.float32),
                                         (64, 64, 64, torch.complex64)]]


def _breakdown(fn, calls=3):
    """Device time per call of each kernel fn launches, from torch's profiler (CUPTI sees the
    driver-API launches; wrappers are named emu_k<i>_<host name>)."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    per = {}
    for e in prof.events():
        if e.device_type.name == "CUDA":
            name = e.name.split("_", 2)[-1] if e.name.startswith("emu_k") else e.name
            t, c = per.get(name, (0.0, 0))
            per[name] = (t + e.device_time / calls, c + 1 / calls)
    return per


_NOP = """
kernel void bump(device float* x [[buffer(0)]], constant long& n [[buffer(1)]],
                 uint i [[thread_position_in_grid]]) {
  if (long(i) < n) { x[i] += 1.0f; }
}
"""


def _launch_overhead(calls=2000, rounds=5):
    """Host microseconds per launch of a trivial kernel: the CUDA executor (Python marshalling +
    cuLaunchKernel) vs a torch in-place op on the same tensor; interleaved rounds, each round
    `calls` back-to-back calls, the device synchronised around it. Returns name -> times."""
    import time

    x = torch.zeros(32, device="cuda")
    bump = cuda.compile_shader(_NOP).bump
    lib = cuda.compile_shader(_NOP)
    contenders = [
        ("CUDA executor, kernel looked up once", lambda: bump(x, 32, threads=32)),
        ("CUDA executor, lib.bump looked up per call", lambda: lib.bump(x, 32, threads=32)),
        ("torch x.add_(1)", lambda: x.add_(1.0)),
    ]
    out = {who: [] for who, _ in contenders}
    for _, fn in contenders:
        for _ in range(200):
            fn()
    torch.cuda.synchronize()
    for _ in range(rounds):
        for who, fn in contenders:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
            out[who].append((time.perf_counter() - t0) / calls * 1e6)
    return out


# One simdgroup computes a 16x16 block of C = A B as 2x2 8x8 tiles, loading straight from device
# memory: the shape of kernel Apple GPUs run fast, to time the executor's simdgroup_matrix.
_SG_GEMM = """
#include <metal_stdlib>
using namespace metal;
kernel void sg_gemm16(device const float* A [[buffer(0)]], device const float* B [[buffer(1)]],
                      device float* C [[buffer(2)]], constant uint& n [[buffer(3)]],
                      uint tg [[threadgroup_position_in_grid]],
                      uint sg [[simdgroup_index_in_threadgroup]],
                      uint nsg [[simdgroups_per_threadgroup]]) {
  const uint blocks = n / 16, t = tg * nsg + sg;
  const uint bi = t / blocks, bj = t % blocks;
  simdgroup_float8x8 acc[2][2];
  for (uint i = 0; i < 2; ++i)
    for (uint j = 0; j < 2; ++j) acc[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  for (uint k = 0; k < n; k += 8) {
    simdgroup_float8x8 a[2], b[2];
    for (uint i = 0; i < 2; ++i) simdgroup_load(a[i], A, n, ulong2(k, bi * 16 + i * 8));
    for (uint j = 0; j < 2; ++j) simdgroup_load(b[j], B, n, ulong2(bj * 16 + j * 8, k));
    for (uint i = 0; i < 2; ++i)
      for (uint j = 0; j < 2; ++j) simdgroup_multiply_accumulate(acc[i][j], a[i], b[j], acc[i][j]);
  }
  for (uint i = 0; i < 2; ++i)
    for (uint j = 0; j < 2; ++j)
      simdgroup_store(acc[i][j], C, n, ulong2(bj * 16 + j * 8, bi * 16 + i * 8));
}
"""


def _simdgroup_gemm(sizes=(256, 1024, 2048), reps=11):
    """Device time of the 16x16-per-simdgroup GEMM above (CUDA events), against torch.mm in
    fp32 without TF32; returns rows (n, ours us [min, max], torch us, max rel. error)."""
    kernel = cuda.compile_shader(_SG_GEMM).sg_gemm16
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    for n in sizes:
        gen = torch.Generator(device="cuda").manual_seed(n)
        A = torch.randn(n, n, device="cuda", generator=gen)
        B = torch.randn(n, n, device="cuda", generator=gen)
        C = torch.empty(n, n, device="cuda")
        sgs = (n // 16) ** 2
        group = 4 * 32

        def ours(A=A, B=B, C=C, n=n, sgs=sgs, group=group):
            kernel(A, B, C, n, threads=32 * sgs, group_size=group, arg_casts={3: "int32"})

        def theirs(A=A, B=B):
            torch.mm(A, B)

        times = _bench({"ours": ours, "torch": theirs}, reps)
        ours()
        ref = A.double() @ B.double()
        err = ((C.double() - ref).abs().max() / ref.abs().max()).item()
        rows.append((n, times["ours"], times["torch"], err))
    return rows


def _profile_breakdown(fn, calls=3):
    """Device time per call of each CUDA-executor kernel fn launches: the executor's profiling
    mode (CUDA events around each launch; no CUPTI), or torch's profiler where the executor
    has none."""
    if not hasattr(cuda, "profile"):
        return _breakdown(fn, calls)
    fn()
    torch.cuda.synchronize()
    with cuda.profile() as prof:
        for _ in range(calls):
            fn()
    return {name: (us / calls, n / calls) for name, (n, us) in prof.kernels().items()}


def _spread(ts):
    return f"{statistics.median(ts):.1f} [{min(ts):.1f}, {max(ts):.1f}]"


def _header(reps):
    props = torch.cuda.get_device_properties(0)
    return [
        "# mpslinalg Metal kernels through the CUDA executor (NVIDIA GPU, not an Apple GPU)",
        "",
        f"- date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC",
        f"- GPU: {props.name}, {props.multi_processor_count} SMs; host {platform.machine()}",
        f"- torch {torch.__version__} (CUDA {torch.version.cuda}), NVRTC "
        f"{'.'.join(map(str, cuda.nvrtc_version()))}, torch linalg library: "
        f"{torch.backends.cuda.preferred_linalg_library()}",
        f"- {reps} interleaved rounds after 3 warm-up calls; CUDA events per call; times in "
        "microseconds, median [min, max]",
        "",
    ]


def _launch_section():
    over = _launch_overhead()
    lines = ["## Host cost per launch", "",
             "A trivial kernel (one 32-thread group) launched back to back, 2000 calls per round, "
             "5 interleaved rounds; host wall microseconds per call, median [min, max]:", "",
             "| contender | us per launch |", "| --- | ---: |"]
    lines += [f"| {who} | {_spread(ts)} |" for who, ts in over.items()]
    return lines + [""]


def _matrix_section(sizes, reps):
    lines = ["## simdgroup_matrix GEMM", "",
             "C = A B in float32, n x n, one simdgroup per 16x16 block of C as 2x2 8x8 "
             "`simdgroup_float8x8` tiles loaded from device memory (`_SG_GEMM`), 4 simdgroups "
             "per threadgroup; device time (CUDA events), against torch.mm in fp32 (TF32 off):",
             "",
             "| n | CUDA executor us | torch.mm us | executor / torch | GFLOP/s | max rel. err |",
             "| ---: | ---: | ---: | ---: | ---: | ---: |"]
    for n, ours, theirs, err in _simdgroup_gemm(sizes, reps):
        med = statistics.median(ours)
        lines.append(f"| {n} | {_spread(ours)} | {_spread(theirs)} | "
                     f"{med / statistics.median(theirs):.1f} | {2 * n**3 / med / 1e3:.0f} | "
                     f"{err:.1e} |")
    return lines + [""]


def _cases_section(reps, make=None, title="## Library kernels"):
    lines = [
        title, "",
        f"- roofline: max(bytes / {H200_BANDWIDTH / 1e12:.1f} TB/s, flops / "
        f"{H200_FP32_PEAK / 1e12:.0f} TFLOP/s fp32), launch latency ignored",
        "- device us: the sum of the executor's kernels' device time per call (its profiling "
        "mode: CUDA events around each launch); wall minus device is host time and torch's "
        "own kernels between launches",
        "",
        "| case | contender | median us | [min, max] | device us | x roofline |",
        "| --- | --- | ---: | --- | ---: | ---: |",
    ]
    notes, breakdown = [], []
    for name, contenders, roof, agree in (make or cases)():
        times = _bench(contenders, reps)
        # the first contender is profiled, and every other one of the executor's (the trsm
        # section's two kinds), each labelled in the breakdown
        ours = [who for i, who in enumerate(contenders)
                if i == 0 or who.startswith("CUDA executor")]
        device = {}
        for who in ours:
            try:
                per = _profile_breakdown(contenders[who])
            except Exception as exc:  # noqa: BLE001 - the profiler is optional here
                per = {f"(profiler failed: {exc})": (0.0, 0)}
            label = f"{who}: " if len(ours) > 1 else ""
            for kname, (t, c) in sorted(per.items(), key=lambda kv: -kv[1][0]):
                breakdown.append(f"| {name} | {label}{kname} | {c:.0f} | {t:.1f} |")
            device[who] = sum(t for t, _ in per.values())
        for who, ts in times.items():
            med = statistics.median(ts)
            dev = f"{device[who]:.1f}" if who in device else ""
            lines.append(f"| {name} | {who} | {med:.1f} | [{min(ts):.1f}, {max(ts):.1f}] | "
                         f"{dev} | {med / roof:.1f} |")
        lines.append(f"| {name} | roofline | {roof:.1f} | | | 1.0 |")
        notes.append(f"- {name}: {agree}")
    return lines + ["", "Agreement with torch on the benchmarked inputs:", "", *notes, "",
                    "Device time per call of the CUDA executor's kernels (its profiling mode):",
                    "", "| case | kernel | launches | device us |", "| --- | --- | ---: | ---: |",
                    *breakdown, ""]


def _dry_run(sections):
    """The cases of ``sections`` on the CPU at small sizes: every contender called once."""
    makers = {"cholesky": lambda: cholesky_cases((96,), (3, 40), device="cpu"),
              # 600: the rule's 64-row blocks (10 steps), and the same solve at 256 rows (the
              # inverse kind at its production block: inverse_lower blocked)
              "trsm": lambda: trsm_cases((600,), (64, 1), (None, 256), device="cpu")}
    for section in sections:
        if section not in makers:
            raise SystemExit(f"bench_cuda_executor: no dry run for the {section!r} section")
        for name, contenders, roof, agree in makers[section]():
            for fn in contenders.values():
                fn()
            print(f"- {name}: {', '.join(contenders)}; roofline {roof:.3g} us; {agree}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--sections", default="launch,matrix,cases,lu,qr",
                    help="comma-separated subset of launch, matrix, cases, lu, qr, cholesky, "
                         "trsm, spectral, eigh")
    ap.add_argument("--lu-sizes", default="1024,2048,4096,8192",
                    help="the n of the square float32 cases of the lu section")
    ap.add_argument("--cholesky-sizes", default="1024,4096",
                    help="the n of the single-matrix float32 cases of the cholesky section")
    ap.add_argument("--trsm-sizes", default="4096",
                    help="the n of the float32 triangular solves of the trsm section")
    ap.add_argument("--trsm-blocks", default="rule",
                    help="the trsm section's diagonal block rows: 'rule' (triangular_metal."
                         "block_rows) and / or multiples of 32, comma-separated")
    ap.add_argument("--spectral-shapes", default=_JACOBI_SCALE,
                    help="the spectral section's batch x order, comma-separated")
    ap.add_argument("--eigh-shapes", default="1x128,16x128,1x256,1x512,1x1024",
                    help="the eigh section's batch x order, comma-separated")
    ap.add_argument("--gemm-sizes", default="256,1024,2048",
                    help="the n of the simdgroup_matrix GEMM")
    ap.add_argument("--dry-run", action="store_true",
                    help="check the sections' cases on the CPU (emulator), small sizes, no timing")
    ap.add_argument("--out", help="also write the markdown report here")
    args = ap.parse_args()
    sections = args.sections.split(",")
    if args.dry_run:
        _dry_run(sections)
        return
    if not torch.cuda.is_available():
        raise SystemExit("bench_cuda_executor: no CUDA device")
    lines = _header(args.reps)
    if "launch" in sections:
        lines += _launch_section()
    if "matrix" in sections:
        sizes = [int(n) for n in args.gemm_sizes.split(",")]
        lines += _matrix_section(sizes, args.reps)
    if "cases" in sections:
        lines += _cases_section(args.reps)
    if "lu" in sections:
        sizes = [int(n) for n in args.lu_sizes.split(",")]
        lines += _cases_section(args.reps, lambda: lu_cases(sizes),
                                "## LU, solve and triangular solves at research scale")
    if "qr" in sections:
        lines += _cases_section(args.reps, qr_cases, "## QR at research scale")
    if "cholesky" in sections:
        sizes = [int(n) for n in args.cholesky_sizes.split(",")]
        lines += _cases_section(args.reps, lambda: cholesky_cases(sizes),
                                "## Cholesky at research scale")
    if "spectral" in sections:
        shapes = _jacobi_scale(args.spectral_shapes)
        lines += _cases_section(args.reps, lambda: _jacobi_cases(shapes),
                                "## SVD and eigh past one threadgroup")
    if "eigh" in sections:
        shapes = [tuple(int(v) for v in s.split("x")) for s in args.eigh_shapes.split(",")]
        lines += _cases_section(args.reps, lambda: eigh_cases(shapes),
                                "## eigh: tridiagonal path against Jacobi and cuSOLVER")
    if "trsm" in sections:
        sizes = [int(n) for n in args.trsm_sizes.split(",")]
        blocks = [None if b == "rule" else int(b) for b in args.trsm_blocks.split(",")]
        lines += _cases_section(args.reps, lambda: trsm_cases(sizes, (64, 1), blocks),
                                "## Blocked triangular solve (trsm)")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
