"""Check and benchmark cases of the nonsymmetric eigensolver (eig, eigvals), and the ratios they
(and tests/linalg/test_eig.py) judge it by.

Checks return the larger of two ratios: LAPACK's xGET22-style residual ``||A V - V diag(L)||
/ (n ||A|| eps)`` (1-norms, float64), and the eigenvalue error against SciPy,
``max_i |L_i - L_i^scipy| / (n eps ||A||_F cond_i)`` with ``cond_i = ||y_i|| ||x_i|| /
|y_i^H x_i|`` the condition number of the eigenvalue (SciPy's left and right vectors): the
first-order bound of an eigenvalue's error under a backward error of eps ||A||. Benchmarks time
mpslinalg against torch.linalg on the device.
"""

from __future__ import annotations

import numpy as np
import torch

import mpslinalg

from .._core.registry import bench_case, check_case, median_time
from ..testing import batch_ratio, eps, norm1, random_matrix, wide


def residual_ratio(A, L, V, dtype=None) -> float:
    """||A V - V diag(L)||_1 / (n ||A||_1 eps) (xGET22), in float64 / complex128; the maximum
    over the batch."""
    dtype = dtype or A.dtype
    Aw = wide(A)
    V, L = wide(V), wide(L)
    n = Aw.shape[-1]
    if n == 0 or Aw.numel() == 0:
        return 0.0
    Ac = Aw.to(V.dtype)
    num = norm1(Ac @ V - V * L[..., None, :])
    return batch_ratio(num, n * norm1(Aw) * eps(dtype))


def scipy_eigenvalues(A) -> tuple[np.ndarray, np.ndarray]:
    """SciPy's eigenvalues of each matrix of the (*, n, n) batch in float64 / complex128 and
    their condition numbers (inf for a defective eigenvalue), each (*, n)."""
    import scipy.linalg

    An = wide(A).numpy()
    n = An.shape[-1]
    flat = An.reshape(-1, n, n)
    ws, conds = [], []
    for a in flat:
        w, vl, vr = scipy.linalg.eig(a, left=True, right=True)
        dots = np.abs(np.sum(vl.conj() * vr, axis=0))
        norms = np.linalg.norm(vl, axis=0) * np.linalg.norm(vr, axis=0)
        with np.errstate(divide="ignore"):
            conds.append(np.where(dots > 0, norms / np.maximum(dots, 1e-300), np.inf))
        ws.append(w)
    shape = An.shape[:-1]
    return np.stack(ws).reshape(shape), np.stack(conds).reshape(shape)


def matched(ours: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """``ours`` permuted to the order of ``ref`` (the assignment of least total distance)."""
    from scipy.optimize import linear_sum_assignment

    cost = np.abs(ours[:, None] - ref[None, :])
    rows, cols = linear_sum_assignment(cost)
    out = np.empty_like(ours)
    out[cols] = ours[rows]
    return out


def eigenvalue_ratio(A, L, dtype=None) -> float:
    """max_i |L_i - L_i^scipy| / (n eps ||A||_F cond_i), eigenvalues matched by least total
    distance; defective eigenvalues (cond inf) count 0. The maximum over the batch."""
    dtype = dtype or A.dtype
    n = A.shape[-1]
    if n == 0 or A.numel() == 0:
        return 0.0
    ref, cond = scipy_eigenvalues(A)
    ours = wide(L).numpy().reshape(-1, n)
    ref, cond = ref.reshape(-1, n), cond.reshape(-1, n)
    anorm = torch.linalg.matrix_norm(wide(A)).reshape(-1).numpy()
    worst = 0.0
    for o, r, c, a in zip(ours, ref, cond, anorm, strict=True):
        if a == 0:
            worst = max(worst, float(np.abs(o).max()) / eps(dtype))
            continue
        err = np.abs(matched(o, r) - r)
        with np.errstate(invalid="ignore"):
            ratio = np.where(np.isinf(c), 0.0, err / (n * eps(dtype) * a * c))
        worst = max(worst, float(ratio.max()))
    return worst


def eig_ratios(A, L, V) -> dict[str, float]:
    """The two ratios of a decomposition: residual and eigenvalues."""
    return {"residual": residual_ratio(A, L, V), "eigenvalues": eigenvalue_ratio(A, L)}


def conjugate_pairs_exact(A, L, V=None) -> bool:
    """For real A: every non-real eigenvalue is followed by its exact conjugate (positive
    imaginary part first), and so is its eigenvector."""
    if A.is_complex():
        return True
    n = A.shape[-1]
    Lf = L.detach().cpu().reshape(-1, n)
    Vf = None if V is None else V.detach().cpu().reshape(-1, n, n)
    for b in range(Lf.shape[0]):
        k = 0
        while k < n:
            if Lf[b, k].imag == 0:
                k += 1
                continue
            if k + 1 >= n or Lf[b, k].imag < 0 or Lf[b, k + 1] != Lf[b, k].conj():
                return False
            if Vf is not None and not torch.equal(Vf[b, :, k + 1], Vf[b, :, k].conj()):
                return False
            k += 2
    return True


# ---------------------------------------------------------------- generators


def graded(n: int, dtype=torch.float32, batch: tuple = (), seed: int = 0,
           spread: float = 1e6) -> torch.Tensor:
    """D B D^-1 scaled rows and columns (D = diag(1 .. 1/spread)): the eigenvalues of B,
    entries over spread^2; balancing undoes the grading."""
    wide_dtype = torch.complex128 if dtype.is_complex else torch.float64
    B = random_matrix(n, wide_dtype, batch, seed)
    d = torch.logspace(0, -np.log10(spread), n, dtype=torch.float64).to(wide_dtype)
    return (d[:, None] * B / d[None, :]).to(dtype)


def non_normal(n: int, dtype=torch.float32, batch: tuple = (), seed: int = 0,
               coupling: float = 10.0) -> torch.Tensor:
    """Q (D + coupling N) Q^H with N strictly upper triangular random and Q orthogonal: known
    eigenvalues D, far from normal (ill-conditioned eigenvectors)."""
    wide_dtype = torch.complex128 if dtype.is_complex else torch.float64
    g = torch.Generator().manual_seed(seed)
    D = torch.linspace(-1, 1, n, dtype=torch.float64).to(wide_dtype)
    N = torch.randn((*batch, n, n), generator=g, dtype=torch.float64).triu(1).to(wide_dtype)
    Q = torch.linalg.qr(random_matrix(n, wide_dtype, batch, seed + 1)).Q
    return (Q @ (torch.diag_embed(D.expand(*batch, n)) + coupling * N) @ Q.mH).to(dtype)


def companion(roots, dtype=torch.float32) -> torch.Tensor:
    """The companion matrix of the monic polynomial with these roots."""
    coeffs = np.poly(np.asarray(roots))
    n = len(coeffs) - 1
    C = np.zeros((n, n), dtype=coeffs.dtype)
    C[0, :] = -coeffs[1:]
    C[1:, :-1] = np.eye(n - 1)
    return torch.from_numpy(C).to(dtype)


def rotations(n: int, dtype=torch.float32, batch: tuple = (), seed: int = 0) -> torch.Tensor:
    """Q diag of 2 x 2 rotation blocks Q^T: every eigenvalue complex (a conjugate pair)."""
    g = torch.Generator().manual_seed(seed)
    m = n // 2
    blocks = torch.zeros((*batch, n, n), dtype=torch.float64)
    angles = torch.rand((*batch, m), generator=g, dtype=torch.float64) * 3
    radii = 0.5 + torch.rand((*batch, m), generator=g, dtype=torch.float64)
    for k in range(m):
        c, s = radii[..., k] * torch.cos(angles[..., k]), radii[..., k] * torch.sin(angles[..., k])
        blocks[..., 2 * k, 2 * k], blocks[..., 2 * k, 2 * k + 1] = c, -s
        blocks[..., 2 * k + 1, 2 * k], blocks[..., 2 * k + 1, 2 * k + 1] = s, c
    if n % 2:
        blocks[..., n - 1, n - 1] = 1.0
    Q = torch.linalg.qr(random_matrix(n, torch.float64, batch, seed + 1)).Q
    return (Q @ blocks @ Q.mT).to(dtype)


# ---------------------------------------------------------------- checks

_CASES = {
    "random 40x40 float32": lambda: random_matrix(40, torch.float32, (2,), 1),
    "random 30x30 complex64": lambda: random_matrix(30, torch.complex64, (2,), 2),
    "graded 1 .. 1e-6 rows and columns, 16x16 float32": lambda: graded(16, torch.float32, (2,),
                                                                         3),
    "non-normal (coupling 10), 12x12 complex64": lambda: non_normal(12, torch.complex64, (2,),
                                                                    4),
    "conjugate pairs only (rotations), 14x14 float32": lambda: rotations(14, torch.float32,
                                                                          (2,), 5),
    "companion of roots 1 .. 8, float32": lambda: companion(np.arange(1.0, 9.0)),
    "companion of 72 roots in [0.5, 3], coefficients to 1e29": lambda: companion(
        np.linspace(0.5, 3.0, 72)),
    "entries 1e30, float32": lambda: random_matrix(10, torch.float32, (2,), 6) * 1e30,
    "entries 1e-30, complex64": lambda: random_matrix(10, torch.complex64, (2,), 7) * 1e-30,
    "70x70 float32 (multishift, deflation windows)": lambda: random_matrix(70, torch.float32,
                                                                            (), 8),
    "batch of 2000 3x3 (one launch)": lambda: random_matrix(3, torch.float32, (2000,), 9),
}


def _register(name: str, make) -> None:
    @check_case("eig", name)
    def run(device):
        A = make().to(device)
        L, V = mpslinalg.eig(A)
        if not (torch.isfinite(L).all() and torch.isfinite(V).all()):
            raise AssertionError("non-finite eigenvalues or vectors for finite input")
        if not conjugate_pairs_exact(A, L, V):
            raise AssertionError("complex pairs of real input not exactly conjugate")
        return max(eig_ratios(A.cpu(), L.cpu(), V.cpu()).values())


for _name, _make in _CASES.items():
    _register(_name, _make)


@check_case("eigvals", "random 25x25 complex64")
def _eigvals_random(device) -> float:
    A = random_matrix(25, torch.complex64, (2,), 11)
    return eigenvalue_ratio(A, mpslinalg.eigvals(A.to(device)).cpu())


# ---------------------------------------------------------------- benchmarks

#: (case, dtype, batch, n on the CPU, n on a GPU): modest on the CPU, where the metal backend is
#: the emulator (its timings say nothing about speed, but the cases must run quickly).
_BENCH_SHAPES = [
    ("batched 3x3", torch.float32, (10000,), 3, 3),
    ("batched 32x32", torch.float32, (64,), 16, 32),
    ("single 64x64", torch.float32, (), 32, 64),
]


def _register_bench(label, dtype, batch, cpu_n, gpu_n) -> None:
    name = str(dtype).removeprefix("torch.")

    @bench_case("eig", f"{label} n={cpu_n} on cpu, n={gpu_n} on gpu, batch {batch} {name}")
    def run(device, repeats):
        n = cpu_n if device.type == "cpu" else gpu_n
        A = random_matrix(n, dtype, batch, seed=12).to(device)
        return {"mpslinalg": median_time(lambda: mpslinalg.eig(A), device, repeats),
                "torch": median_time(lambda: torch.linalg.eig(A), device, repeats)}


for _shape in _BENCH_SHAPES:
    _register_bench(*_shape)
