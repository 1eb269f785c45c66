"""The n <= 4 small path (mpslinalg/small_inverse.py, metal/linalg/small_inverse.metal).

Accuracy by LAPACK's ratios (xGET03 for inv, xGET02 for solve), info compared with torch's
getrf, camera-geometry matrices with known inverses, and the metal backend's structural promises:
exactly one launch and no host synchronisation per op at every batch size.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import mpslinalg
from mpslinalg.small import cpu_simd, paths, tensor_lu
from mpslinalg.small import dispatch as si
from mpslinalg.testing import (
    THRESH,
    count_host_syncs,
    inv_ratio,
    matrix_with_spread,
    noncontiguous,
    random_matrix,
    singular_matrix,
    solve_ratio,
    wide,
)

SIZES = (1, 2, 3, 4)


def _dtypes(backend):
    if backend.is_metal:
        return (torch.float32, torch.complex64)
    return (torch.float32, torch.complex64, torch.float64, torch.complex128)


def _launches():
    from mpslinalg import emulator

    return emulator.total_launches()


# ---------------------------------------------------------------- dispatch


def test_use_small_path_shapes():
    with mpslinalg.use_backend("metal"):
        for n in SIZES:
            assert si.use_small_path(torch.zeros(3, n, n))
        assert si.use_small_path(torch.zeros(2, 5, 3, 3, dtype=torch.complex64))
        assert not si.use_small_path(torch.zeros(3, 5, 5))
        assert not si.use_small_path(torch.zeros(3, 0, 0))
        assert not si.use_small_path(torch.zeros(3, 3, 4))
        assert not si.use_small_path(torch.zeros(3, 3, 3, dtype=torch.float64))
    with mpslinalg.use_backend("torch"):
        big = torch.zeros(1 << 17, 4, 4)
        assert si.use_small_path(big)
        assert si.use_small_path(big.double())
        assert not si.use_small_path(torch.zeros(2, 4, 4))  # torch.linalg is faster there
        assert not si.use_small_path(big.half())


# ---------------------------------------------------------------- accuracy


@pytest.mark.parametrize("n", SIZES)
def test_inv_random(backend, n):
    for dtype in _dtypes(backend):
        A = backend.tensor(random_matrix(n, dtype, (3, 37), seed=n))
        A0 = A.clone()
        X, info = si.small_inv_ex(A)
        assert X.shape == A.shape and X.dtype == dtype
        assert info.shape == (3, 37) and info.dtype == torch.int32
        assert torch.equal(A, A0)  # input untouched
        assert (info == 0).all()
        assert inv_ratio(A, X, dtype) < THRESH


@pytest.mark.parametrize("n", (2, 3, 4))
@pytest.mark.parametrize("dtype", (torch.float32, torch.complex64))
def test_inv_ill_conditioned(backend, n, dtype):
    """kappa up to 1e6 in single precision: pivoting keeps the ratio LAPACK-like."""
    worst = 0.0
    for cond in (1e2, 1e4, 1e6):
        A = backend.tensor(matrix_with_spread(n, cond, dtype, (256,), seed=7))
        X, info = si.small_inv_ex(A)
        assert (info == 0).all()
        worst = max(worst, inv_ratio(A, X, dtype))
        ref = inv_ratio(A, torch.linalg.inv(A.cpu()), dtype)
        assert worst < max(THRESH, 3 * ref)
    assert worst < THRESH


@pytest.mark.parametrize("n", (2, 3, 4))
def test_inv_badly_scaled(backend, n):
    dtype = torch.float32
    for scale in (1e-30, 1e-10, 1e10, 1e30):
        A = backend.tensor(matrix_with_spread(n, 10.0, dtype, (64,), seed=3, scale=scale))
        X, info = si.small_inv_ex(A)
        assert (info == 0).all() and torch.isfinite(X).all()
        assert inv_ratio(A, X, dtype) < THRESH
    # Rows scaled over 16 orders of magnitude: pivoting has to pick the large rows.
    rows = torch.tensor([1e8, 1.0, 1e-8, 1e4][:n], dtype=torch.float64)
    A = backend.tensor((rows[:, None] * wide(random_matrix(n, dtype, (64,), seed=4))).to(dtype))
    X, _ = si.small_inv_ex(A)
    assert inv_ratio(A, X, dtype) < THRESH


@pytest.mark.parametrize("n", SIZES)
def test_solve(backend, n):
    for dtype in _dtypes(backend):
        for k in (1, 3):
            A = backend.tensor(random_matrix(n, dtype, (50,), seed=11))
            B = backend.tensor(random_matrix(k, dtype, (50,), seed=12, m=n))
            B0 = B.clone()
            X, info = si.small_solve_ex(A, B)
            assert X.shape == B.shape and (info == 0).all()
            assert torch.equal(B, B0)
            assert solve_ratio(A, X, B, dtype) < THRESH
    A = backend.tensor(matrix_with_spread(n, 1e6, torch.float32, (128,), seed=13))
    B = backend.tensor(random_matrix(2, torch.float32, (128,), seed=14, m=n))
    X, _ = si.small_solve_ex(A, B)
    assert solve_ratio(A, X, B, torch.float32) < THRESH


@pytest.mark.parametrize("n", SIZES)
def test_det_slogdet(backend, n):
    for dtype in _dtypes(backend):
        A = random_matrix(n, dtype, (40,), seed=21)
        ref = torch.linalg.det(wide(A))
        det = si.small_det(backend.tensor(A))
        assert det.shape == (40,) and det.dtype == dtype
        rtol = 1e3 * torch.finfo(torch.empty(0, dtype=dtype).real.dtype).eps
        assert torch.allclose(wide(det), ref, rtol=rtol, atol=0)
        sign, logabs = si.small_slogdet(backend.tensor(A))
        ref_sign, ref_log = torch.linalg.slogdet(wide(A))
        assert sign.dtype == dtype and logabs.dtype == torch.empty(0, dtype=dtype).real.dtype
        assert torch.allclose(wide(sign), ref_sign, atol=rtol)
        assert torch.allclose(wide(logabs), ref_log, atol=rtol * max(1.0, ref_log.abs().max()))


# ---------------------------------------------------------------- singular matrices and info


def _singular_batch(n: int, dtype) -> torch.Tensor:
    """Exactly singular matrices with their first zero pivot at every position, mixed with
    non-singular ones: zero columns, a column twice another (exact in binary), all zeros."""
    mats = [random_matrix(n, dtype, seed=31)]
    for rank in range(n):
        mats.append(singular_matrix(n, rank, dtype, seed=32 + rank))
    if n >= 2:
        # Multipliers are powers of two and entries small integers, so elimination is exact.
        dup = torch.tensor([[4.0, 8, 1, 3], [2, 4, 5, 7], [1, 2, 3, 2], [-2, -4, 0, 1]])
        mats.append(dup[:n, :n].to(dtype))
    ints = torch.tensor([[2.0, 4, 1, 3], [1, 2, 5, 7], [4, 8, 3, 2], [1, 2, 0, 1]])
    mats.append(ints[:n, :n].to(dtype))
    mats.append(torch.zeros(n, n, dtype=dtype))
    mats.append(random_matrix(n, dtype, seed=41))
    return torch.stack(mats)


@pytest.mark.parametrize("n", SIZES)
def test_singular_info_matches_getrf(backend, n):
    for dtype in (torch.float32, torch.complex64):
        A = _singular_batch(n, dtype)
        expected = torch.linalg.lu_factor_ex(A).info
        assert torch.equal(torch.linalg.inv_ex(A).info, expected)
        _, info = si.small_inv_ex(backend.tensor(A))
        assert torch.equal(info.cpu(), expected)
        _, info = si.small_solve_ex(backend.tensor(A), backend.tensor(torch.ones(len(A), n, 2,
                                                                                  dtype=dtype)))
        assert torch.equal(info.cpu(), expected)
        det = si.small_det(backend.tensor(A)).cpu()
        assert (det[expected > 0] == 0).all()
        assert (det[expected == 0] != 0).all()
        sign, logabs = si.small_slogdet(backend.tensor(A))
        assert (sign.cpu()[expected > 0] == 0).all()
        assert (logabs.cpu()[expected > 0] == -math.inf).all()
        assert torch.isfinite(logabs.cpu()[expected == 0]).all()


def test_pivot_ties_follow_lapack(backend):
    """Equal |a| in a column: the lowest row is the pivot, so info and results match getrf."""
    A = torch.tensor([[[1.0, 1, 0], [-1, 1, 1], [1, 0, 1]],
                      [[1.0, 2, 3], [-1, -2, 0], [1, 2, 3]]])
    X, info = si.small_inv_ex(backend.tensor(A))
    assert torch.equal(info.cpu(), torch.linalg.lu_factor_ex(A).info)
    assert torch.allclose(X.cpu()[0], torch.linalg.inv(A[0]), atol=1e-6)


def test_nan_inf_isolated(backend):
    n = 3
    A = random_matrix(n, torch.float32, (5,), seed=51)
    clean_X, _ = si.small_inv_ex(backend.tensor(A))
    clean_det = si.small_det(backend.tensor(A))
    bad = A.clone()
    bad[1, 0, 0] = math.nan
    bad[3, 2, 1] = math.inf
    X, info = si.small_inv_ex(backend.tensor(bad))
    det = si.small_det(backend.tensor(bad))
    keep = [0, 2, 4]
    assert torch.equal(X[keep], clean_X[keep]) and torch.equal(det[keep], clean_det[keep])
    # NaN in -> NaN out; an Inf entry behaves as in LAPACK (here: a finite inverse with zeros).
    assert torch.isnan(X[1]).all() and torch.isnan(det[1])
    ref = torch.linalg.inv_ex(bad[3])
    assert torch.allclose(X[3].cpu(), ref.inverse, atol=1e-6, equal_nan=True)
    assert torch.equal(det[3].cpu(), torch.linalg.det(bad[3]))
    assert (info == 0).all()


def _same_values(ours: torch.Tensor, theirs: torch.Tensor, rtol: float) -> bool:
    """NaN (real and imaginary parts apart) and infinities where ``theirs`` has them, the
    finite entries close."""
    ours, theirs = (torch.view_as_real(t) if t.is_complex() else t for t in (ours, theirs))
    ours, theirs = ours.double(), theirs.double()
    finite = theirs.isfinite()
    return (torch.equal(ours.isnan(), theirs.isnan())
            and torch.equal(ours[theirs.isinf()], theirs[theirs.isinf()])
            and torch.allclose(ours[finite], theirs[finite], rtol=rtol, atol=rtol))


@pytest.mark.parametrize("dtype", (torch.complex64, torch.complex128, torch.float32,
                                   torch.float64), ids=str)
def test_nonfinite_like_torch(dtype):
    """One entry NaN, +-Inf (complex: also i Inf), each entry in turn, n = 2..4, row- and
    column-major: the torch backend's paths (tensor ops, SIMD kernels) give torch.linalg's
    values, NaN where it gives NaN (getrf's complex reciprocal of an infinite pivot; det and
    slogdet of a contiguous real matrix through the LU of its transpose, as torch's), for
    inv_ex, solve_ex, det and slogdet."""
    rtol = 1e-4 if dtype in (torch.float32, torch.complex64) else 1e-10
    values = [math.nan, math.inf, -math.inf] + ([complex(0, math.inf)] if dtype.is_complex
                                                else [])
    with mpslinalg.use_backend("torch"):
        for n in (2, 3, 4):
            for value in values:
                for pos in range(n * n):
                    M = (random_matrix(n, dtype, (1,), seed=pos) + 2 * torch.eye(n)).to(dtype)
                    M.view(-1)[pos] = value
                    B = random_matrix(2, dtype, (1,), seed=99, m=n)
                    for A in (M, M.mT.contiguous().mT):
                        where = (n, value, pos, A.is_contiguous())
                        assert _same_values(si.small_inv_ex(A)[0], torch.linalg.inv_ex(A)[0],
                                            rtol), where
                        assert _same_values(si.small_solve_ex(A, B)[0],
                                            torch.linalg.solve_ex(A, B)[0], rtol), where
                        assert _same_values(si.small_det(A), torch.linalg.det(A), rtol), where
                        for ours, theirs in zip(si.small_slogdet(A), torch.linalg.slogdet(A),
                                                strict=True):
                            assert _same_values(ours, theirs, rtol), where


# ---------------------------------------------------------------- camera geometry


def _rigid(batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[R t; 0 1] with random rotations, and the known inverse [R^T, -R^T t; 0 1] (float64)."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((batch, 4))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    w, x, y, z = q.T
    R = np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
                  2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
                  2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
                 axis=1).reshape(batch, 3, 3)
    t = rng.uniform(-10, 10, (batch, 3, 1))
    T = np.zeros((batch, 4, 4))
    T[:, :3, :3], T[:, :3, 3:], T[:, 3, 3] = R, t, 1
    Ti = np.zeros((batch, 4, 4))
    Rt = np.swapaxes(R, 1, 2)
    Ti[:, :3, :3], Ti[:, :3, 3:], Ti[:, 3, 3] = Rt, -Rt @ t, 1
    return torch.from_numpy(T), torch.from_numpy(Ti)


def _intrinsics(batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """K = [[fx, s, cx], [0, fy, cy], [0, 0, 1]] and its closed-form inverse (float64)."""
    rng = np.random.default_rng(seed)
    fx, fy = rng.uniform(200, 2000, batch), rng.uniform(200, 2000, batch)
    cx, cy = rng.uniform(100, 1000, batch), rng.uniform(100, 800, batch)
    s = rng.uniform(-1, 1, batch)
    zero, one = np.zeros(batch), np.ones(batch)
    K = np.stack([fx, s, cx, zero, fy, cy, zero, zero, one], 1).reshape(batch, 3, 3)
    Ki = np.stack([1 / fx, -s / (fx * fy), (s * cy - cx * fy) / (fx * fy),
                   zero, 1 / fy, -cy / fy, zero, zero, one], 1).reshape(batch, 3, 3)
    return torch.from_numpy(K), torch.from_numpy(Ki)


def _homographies(batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """K [R + t n^T / d] K^-1 style homographies; the inverse from float64 LAPACK."""
    rng = np.random.default_rng(seed)
    H = np.eye(3) + 0.2 * rng.standard_normal((batch, 3, 3))
    H[:, 2, :2] *= 1e-3  # projective terms are small in pixel units
    H[:, :2, 2] *= 300
    return torch.from_numpy(H), torch.linalg.inv(torch.from_numpy(H))


CAMERA = {"rigid": _rigid, "intrinsics": _intrinsics, "homography": _homographies}


def _camera_batches(backend):
    sizes = [1, 1000]
    if backend.name == "torch":
        sizes.append(100000)
    return sizes


@pytest.mark.parametrize("case", sorted(CAMERA))
def test_camera_known_inverse(backend, case):
    for batch in _camera_batches(backend):
        M64, inv64 = CAMERA[case](batch, seed=batch)
        A = backend.tensor(M64.float())
        X, info = si.small_inv_ex(A)
        assert (info == 0).all()
        assert inv_ratio(A, X, torch.float32) < THRESH
        err = (wide(X) - inv64).abs().amax((-2, -1)) / inv64.abs().amax((-2, -1))
        cond = torch.linalg.cond(M64, p=1)
        assert (err < 30 * cond * torch.finfo(torch.float32).eps).all()


@pytest.mark.slow
def test_camera_large_batch_metal(metal_backend):
    """One 100000-matrix launch through the kernel (the torch backend already runs it above)."""
    T, Ti = _rigid(100000, seed=5)
    X, info = si.small_inv_ex(metal_backend.tensor(T.float()))
    assert (info == 0).all()
    assert ((wide(X) - Ti).abs().amax() < 1e-4)


# ---------------------------------------------------------------- shapes and layouts


@pytest.mark.parametrize("n", (1, 3, 4))
def test_empty_batches(backend, n):
    for shape in ((0, n, n), (2, 0, n, n)):
        A = backend.tensor(torch.zeros(shape))
        X, info = si.small_inv_ex(A)
        assert X.shape == shape and info.shape == shape[:-2]
        assert si.small_det(A).shape == shape[:-2]
        sign, logabs = si.small_slogdet(A)
        assert sign.shape == logabs.shape == shape[:-2]
        X, info = si.small_solve_ex(A, backend.tensor(torch.zeros(*shape[:-1], 2)))
        assert X.shape == (*shape[:-1], 2)


def test_solve_without_right_hand_sides(backend):
    """B of shape (*, n, 0): an empty X, but info still flags singular matrices."""
    A = random_matrix(3, torch.float32, (4,), seed=111)
    A[2, :, 1] = 0
    X, info = si.small_solve_ex(backend.tensor(A), backend.tensor(torch.zeros(4, 3, 0)))
    assert X.shape == (4, 3, 0)
    assert info.tolist() == [0, 0, 2, 0]


def test_unbatched_and_noncontiguous(backend):
    for n in SIZES:
        A = random_matrix(n, torch.float32, (6,), seed=61)
        X_ref, _ = si.small_inv_ex(backend.tensor(A))
        X, info = si.small_inv_ex(noncontiguous(backend.tensor(A)))
        assert torch.equal(X, X_ref)
        X, info = si.small_inv_ex(backend.tensor(A).mT)  # transposed view
        assert inv_ratio(A.mT, X, torch.float32) < THRESH
        X, info = si.small_inv_ex(backend.tensor(A[0]))  # no batch dimension
        assert X.shape == (n, n) and info.shape == ()
        assert torch.equal(X, X_ref[0])
        B = noncontiguous(backend.tensor(random_matrix(3, torch.float32, (6,), seed=62, m=n)))
        Xs, _ = si.small_solve_ex(noncontiguous(backend.tensor(A)), B)
        assert solve_ratio(A, Xs, B, torch.float32) < THRESH


def test_accelerator_variant_matches_cpu_variant():
    """The torch fast path picks rows by argmax + gather on accelerators and by bitwise selects
    on CPU; both must give bit-identical factors (checked here on CPU, where CI runs)."""
    for dtype in (torch.float32, torch.complex64, torch.float64):
        for n in SIZES:
            A = torch.cat([random_matrix(n, dtype, (300,), seed=n), _singular_batch(n, dtype)])
            A[5, 0, 0] = math.nan
            U, R, _ = tensor_lu._workspace(A, None, n)
            M1 = torch.cat([U, R], dim=1)
            M2 = M1.clone()
            s1, s2 = tensor_lu._factor_select(M1, None, n), tensor_lu._factor_gather(M2, n)
            s3 = tensor_lu._factor_select(U, R, n)
            finite = [i for i in range(A.shape[0]) if i != 5]
            assert torch.equal(torch.cat([U, R], dim=1)[..., finite], M1[..., finite])
            assert torch.equal(M1[..., finite], M2[..., finite])
            assert torch.equal(s1, s3) and torch.equal(s1.int(), s2.int())
            assert torch.isnan(M1[:, :, 5]).any() and torch.isnan(M2[:, :, 5]).any()


# ---------------------------------------------------------------- metal: launches and syncs


@pytest.mark.parametrize("batch", (1, 37, 1000))
def test_metal_single_launch_no_sync(metal_backend, batch):
    from mpslinalg import emulator

    for dtype in (torch.float32, torch.complex64):
        A = metal_backend.tensor(random_matrix(4, dtype, (batch,), seed=71))
        B = metal_backend.tensor(random_matrix(2, dtype, (batch,), seed=72, m=4))
        for call, args in ((si.small_inv_ex, (A,)), (si.small_det, (A,)),
                           (si.small_slogdet, (A,)), (si.small_solve_ex, (A, B))):
            call(*args)  # compile outside the counted region
            emulator.reset_launch_counts()
            with count_host_syncs() as syncs:
                call(*args)
            assert emulator.total_launches() == 1
            assert syncs.calls == []


def test_torch_path_no_sync():
    A = random_matrix(4, torch.float32, (5000,), seed=81)
    with mpslinalg.use_backend("torch"), count_host_syncs() as syncs:
        si.small_inv_ex(A)
        si.small_det(A)
        si.small_slogdet(A)
        si.small_solve_ex(A, A[..., :2])
    assert syncs.calls == []


# ---------------------------------------------------------------- through the public API


def _small_path_batch(backend, n: int) -> int:
    """A batch that takes the small path: any on the metal backend; on the torch backend the
    smallest of the crossovers of the table of inv for this device type (which one applies
    depends on the dtype and on what is installed: the SIMD library, triton)."""
    if backend.is_metal:
        return 1000
    device = backend.device
    limits = paths.TABLES["inv"].crossovers(device.type, n)
    batch = next((b for b in limits
                  if si.use_small_path(torch.empty(b, n, n, device=device))), None)
    assert batch is not None, f"no batch of {limits} takes the small path on {device}"
    return batch


@pytest.mark.parametrize("n", (2, 4))
def test_public_api_uses_small_path(backend, n):
    batch = _small_path_batch(backend, n)
    A = backend.tensor(random_matrix(n, torch.float32, (batch,), seed=91))
    assert si.use_small_path(A)
    X, info = si.small_inv_ex(A)
    assert torch.equal(mpslinalg.inv(A), X)
    assert torch.equal(mpslinalg.inv_ex(A).info, info)
    assert torch.equal(mpslinalg.det(A), si.small_det(A))
    B = backend.tensor(random_matrix(1, torch.float32, (batch,), seed=92, m=n))
    assert torch.equal(mpslinalg.solve(A, B), si.small_solve_ex(A, B)[0])
    with pytest.raises(torch.linalg.LinAlgError, match="Batch element 1"):
        mpslinalg.inv(backend.tensor(_singular_batch(n, torch.float32)))


def test_cpu_chunks(monkeypatch):
    """Batches larger than a CPU chunk are processed chunk by chunk with the same results."""
    A = torch.cat([random_matrix(4, torch.float32, (40,), seed=101),
                   _singular_batch(4, torch.float32)])
    B = random_matrix(2, torch.float32, (A.shape[0],), seed=102, m=4)
    with mpslinalg.use_backend("torch"):
        whole = si.small_inv_ex(A), si.small_solve_ex(A, B), si.small_det(A), si.small_slogdet(A)
        monkeypatch.setattr(tensor_lu, "_CPU_CHUNK", 7)
        chunked = si.small_inv_ex(A), si.small_solve_ex(A, B), si.small_det(A), si.small_slogdet(A)
    for a, b in zip(whole, chunked, strict=True):
        for x, y in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,),
                        strict=True):
            assert torch.equal(torch.nan_to_num(x), torch.nan_to_num(y))


def test_outputs_do_not_alias_work_buffers():
    """The CPU path reuses its work buffers between calls; results must not live in them."""
    A = random_matrix(4, torch.float32, (64,), seed=121)
    B = random_matrix(4, torch.float32, (64,), seed=122)
    with mpslinalg.use_backend("torch"):
        outs = [si.small_inv_ex(A)[0], si.small_det(A), *si.small_slogdet(A),
                si.small_solve_ex(A, B)[0]]
        kept = [o.clone() for o in outs]
        si.small_inv_ex(B), si.small_det(B), si.small_slogdet(B), si.small_solve_ex(B, A)
    for o, k in zip(outs, kept, strict=True):
        assert torch.equal(o, k)


def test_torch_backend_cpu_kernel_matches_metal_backend(monkeypatch, native_small_cpu):
    """On CPU the torch backend runs float32 batches through the SIMD kernels of
    mpslinalg.small.cpu_simd on torch's intra-op threads: results are bit-identical to the metal
    backend's whatever the number of threads (det and slogdet: the metal backend's of the
    transpose, which torch's det factors for a contiguous real matrix); complex64 takes the
    tensor-op path (never the emulator, which is not a production compiler)."""
    A = random_matrix(4, torch.float32, (40000,), seed=5)
    A[17] = 0  # a singular element keeps its info
    B = random_matrix(2, torch.float32, (40000,), seed=6, m=4)
    with mpslinalg.use_backend("metal"):
        At = A.mT.contiguous()
        want = (si.small_inv_ex(A), si.small_solve_ex(A, B), si.small_det(At),
                si.small_slogdet(At))
    for threads in (1, 2, 3):
        monkeypatch.setattr(torch, "get_num_threads", lambda t=threads: t)
        assert si.torch_path(A) == "simd kernel on CPU"
        with mpslinalg.use_backend("torch"):
            got = (si.small_inv_ex(A), si.small_solve_ex(A, B), si.small_det(A),
                   si.small_slogdet(A))
        for g, w in zip(torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(want),
                        strict=True):
            torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)
    assert want[0][1][17] == 1
    assert si.torch_path(A.to(torch.complex64)) == "tensor ops"


def test_torch_backend_without_native_library_uses_tensor_ops(monkeypatch):
    cpu_simd.LIBRARY.wait()  # so that no build in flight sets the library under the test
    monkeypatch.setattr(cpu_simd.LIBRARY, "loaded", None)  # not in this installation
    A = random_matrix(3, torch.float32, (50,), seed=8)
    assert si.torch_path(A) == "tensor ops"
    X, info = si.small_inv_ex(A)
    torch.testing.assert_close(X, torch.linalg.inv(A), rtol=1e-4, atol=1e-4)
    assert si.torch_path(A.double()) == "tensor ops"
