"""Check and benchmark cases of the Hermitian eigensolver (eigh, eigvalsh), and the ratios they
(and tests/linalg/test_eigh.py) judge it by.

Checks return the largest of LAPACK's xSYT21-style ratios: ``||A V - V diag(L)|| / (n ||A||
eps)``, ``||V^H V - I|| / (n eps)`` (1-norms, float64) and the eigenvalue error against SciPy,
``max |L - L_scipy| / (n eps max |L_scipy|)``. Benchmarks time mpslinalg against torch.linalg
on the device and SciPy on the host, among them the batched 3 x 3 case.
"""

from __future__ import annotations

import numpy as np
import torch

import mpslinalg

from .._core.registry import bench_case, check_case, median_time
from ..testing import batch_ratio, eps, norm1, orthogonality_ratio, random_matrix, wide
from . import scipy_per_matrix


def hermitian(A: torch.Tensor, UPLO: str = "L") -> torch.Tensor:
    """The Hermitian matrix that ``eigh(A, UPLO)`` sees: the ``UPLO`` triangle of A, its
    conjugate mirrored, the real part of the diagonal."""
    tri = A.tril(-1) if UPLO.upper() == "L" else A.triu(1)
    diag = A.diagonal(dim1=-2, dim2=-1).real.to(A.dtype)
    return tri + tri.mH + torch.diag_embed(diag)


def hermitian_with_spectrum(eigenvalues, dtype=torch.float32, batch: tuple = (),
                            seed: int = 0) -> torch.Tensor:
    """U diag(eigenvalues) U^H with a random unitary U (the Q factor of a standard normal
    matrix; complex for a complex ``dtype``), formed in float64 and rounded to ``dtype``, exactly
    Hermitian. ``eigenvalues`` has shape ``(*batch, n)`` or ``(n,)``."""
    lam = torch.as_tensor(np.asarray(eigenvalues, dtype=np.float64))
    wide_dtype = torch.complex128 if dtype.is_complex else torch.float64
    U = torch.linalg.qr(random_matrix(lam.shape[-1], wide_dtype, batch, seed)).Q
    A = (U * lam.to(wide_dtype)[..., None, :]) @ U.mH
    return hermitian(A, "L").to(dtype)


def random_hermitian(n: int, dtype=torch.float32, batch: tuple = (), seed: int = 0):
    """(B + B^H) / 2 for B with standard normal entries."""
    B = random_matrix(n, torch.complex128 if dtype.is_complex else torch.float64, batch, seed)
    return ((B + B.mH) / 2).to(dtype)


def residual_ratio(A, L, V, UPLO: str = "L", dtype=None) -> float:
    """||A V - V diag(L)|| / (n ||A|| eps) (xSYT21, 1-norms in float64), A the Hermitian matrix
    of the ``UPLO`` triangle; the maximum over the batch."""
    dtype = dtype or A.dtype
    H = hermitian(wide(A), UPLO)
    V, L = wide(V), wide(L)
    n = H.shape[-1]
    num = norm1(H @ V - V * L.to(V.dtype)[..., None, :])
    return batch_ratio(num, n * norm1(H) * eps(dtype))


def eigenvalue_ratio(A, L, UPLO: str = "L", dtype=None) -> float:
    """max |L - L_scipy| / (n eps max |L_scipy|), L_scipy from scipy.linalg.eigvalsh in float64;
    the maximum over the batch."""
    import scipy.linalg

    dtype = dtype or A.dtype
    H = hermitian(wide(A), UPLO).numpy()
    n = H.shape[-1]
    if n == 0 or H.size == 0:
        return 0.0
    ref = np.stack([scipy.linalg.eigvalsh(h) for h in H.reshape(-1, n, n)]).reshape(
        *H.shape[:-1])
    ref = torch.from_numpy(ref)
    num = (wide(L) - ref).abs().amax(-1)
    return batch_ratio(num, n * eps(dtype) * ref.abs().amax(-1))


def eigh_ratios(A, L, V, UPLO: str = "L") -> dict[str, float]:
    """The three ratios of a decomposition: residual, orthogonality, eigenvalues."""
    return {"residual": residual_ratio(A, L, V, UPLO),
            "orthogonality": orthogonality_ratio(V, dtype=A.dtype),
            "eigenvalues": eigenvalue_ratio(A, L, UPLO)}


# ---------------------------------------------------------------- checks


def _clustered(n: int, dtype, batch: tuple, seed: int) -> torch.Tensor:
    lam = np.concatenate([np.full(n // 2, 1.0), 1.0 + 1e-6 * np.arange(n - n // 2)])
    return hermitian_with_spectrum(lam, dtype, batch, seed)


_CASES = {
    "random 40x40 float32": lambda: random_hermitian(40, torch.float32, (2,), 1),
    "random 30x30 complex64": lambda: random_hermitian(30, torch.complex64, (2,), 2),
    "repeated and clustered eigenvalues 24x24 complex64": lambda: _clustered(
        24, torch.complex64, (2,), 3),
    "rank 5 of 20, float32": lambda: hermitian_with_spectrum(
        np.r_[np.linspace(1, 2, 5), np.zeros(15)], torch.float32, (2,), 4),
    "eigenvalues 1 .. 1e-7 (ill-conditioned), float32": lambda: hermitian_with_spectrum(
        np.geomspace(1, 1e-7, 16) * np.r_[1, -1] .repeat(8), torch.float32, (2,), 5),
    "entries 1e30, complex64": lambda: random_hermitian(12, torch.complex64, (2,), 6) * 1e30,
    "entries 1e-30, float32": lambda: random_hermitian(12, torch.float32, (2,), 7) * 1e-30,
    "70x70 float32 (device-memory path)": lambda: random_hermitian(70, torch.float32, (), 8),
    "160x160 float32 (tridiagonal path)": lambda: random_hermitian(160, torch.float32, (), 13),
    "130x130 complex64, clustered (tridiagonal path)": lambda: _clustered(
        130, torch.complex64, (), 14),
    "batch of 10000 3x3 (one launch)": lambda: random_hermitian(3, torch.float32, (10000,), 9),
    "batch of 1000 4x4 complex64": lambda: random_hermitian(4, torch.complex64, (1000,), 10),
}


def _register(name: str, make) -> None:
    @check_case("eigh", name)
    def run(device):
        A = make().to(device)
        L, V = mpslinalg.eigh(A)
        if not (torch.isfinite(L).all() and torch.isfinite(V).all()):
            raise AssertionError("non-finite eigenvalues or vectors for finite input")
        if (L.cpu()[..., 1:] < L.cpu()[..., :-1]).any():
            raise AssertionError("eigenvalues not ascending")
        return max(eigh_ratios(A, L, V).values())


for _name, _make in _CASES.items():
    _register(_name, _make)


@check_case("eigvalsh", "upper triangle, garbage below, 25x25 complex64")
def _eigvalsh_upper(device) -> float:
    A = random_hermitian(25, torch.complex64, (2,), 11)
    garbage = A.clone()
    garbage.tril(-1).fill_(0)
    garbage = garbage + torch.full_like(A, 1e3).tril(-1)
    L = mpslinalg.eigvalsh(garbage.to(device), UPLO="U")
    return eigenvalue_ratio(garbage, L, "U")


# ---------------------------------------------------------------- benchmarks

#: (case, dtype, batch, n on the CPU, n on a GPU): modest on the CPU, where the metal backend is
#: the emulator (its timings say nothing about speed, but the cases must run quickly).
_BENCH_SHAPES = [
    ("batched 3x3", torch.float32, (100000,), 3, 3),
    ("batched 4x4 complex", torch.complex64, (10000,), 4, 4),
    ("batched 16x16", torch.float32, (64,), 16, 32),
    ("single 60x60", torch.float32, (), 40, 60),
    ("single 128x128 (tridiagonal path on a GPU)", torch.float32, (), 64, 128),
    ("single 512x512 (tridiagonal path on a GPU)", torch.complex64, (), 64, 512),
]


def _register_bench(label, dtype, batch, cpu_n, gpu_n) -> None:
    name = str(dtype).removeprefix("torch.")
    @bench_case("eigh", f"{label} n={cpu_n} on cpu, n={gpu_n} on gpu, batch {batch} {name}")
    def run(device, repeats):
        n = cpu_n if device.type == "cpu" else gpu_n
        A = random_hermitian(n, dtype, batch, seed=12).to(device)
        times = {"mpslinalg": median_time(lambda: mpslinalg.eigh(A), device, repeats),
                 "torch": median_time(lambda: torch.linalg.eigh(A), device, repeats)}
        scipy_eigh = scipy_per_matrix("eigh")
        if scipy_eigh is not None and len(batch) == 0:  # a Python loop over 1e5 is no baseline
            An = A.cpu().numpy()
            times["scipy"] = median_time(lambda: scipy_eigh(An), torch.device("cpu"), repeats)
        return times


for _shape in _BENCH_SHAPES:
    _register_bench(*_shape)
