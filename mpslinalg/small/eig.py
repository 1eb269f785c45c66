"""Eigenvalues and eigenvectors of batches of n <= 4 matrices in one pass over the batch:
the entry points and their queries of the path tables (``paths.TABLES["eig"]``,
``["eigvals"]``).

The algorithm is `mpslinalg.small.codegen.emit_eig` (LAPACK's geev without balancing: Hessenberg
reduction, dlahqr's Francis double-shift sweeps with deflation and exceptional shifts, dlanv2's
standardised 2 x 2 blocks, so that a complex pair of a real matrix is exactly conjugate,
dtrevc's back-substitution and geev's normalisation) for float32 and
`mpslinalg.small.codegen.emit_eig_complex` (zgeev's: complex Hessenberg reduction, zlahqr's
single-shift sweeps with Wilkinson's shift, ztrevc; the largest component of each vector real
and positive) for complex64, generated for the metal backend
(``metal/linalg/small_eig.{h,metal}``, float32 and complex64, one launch per call, one thread
per matrix), as C++ for the torch backend on CPU (`mpslinalg.small.cpu_simd`,
``native/small_cpu_eig.cpp``, float32) and as Triton for the torch backend on CUDA
(`mpslinalg.small.triton_kernels`, float32), bit-identical where they overlap. Where no row of a
table serves a call (float64, complex128, complex64 on the torch backend), torch's own function
runs.

The eigenvalues come in the order of the Schur form's diagonal, as LAPACK's (and so torch's CPU
eig's, balancing aside); each eigenvector has unit 2-norm, and one of a complex eigenvalue is
rotated so that its first component of largest modulus is real with the sign of its real part
(geev's dlartg, LAPACK 3.10's); the sign of a vector (real or complex) follows the Schur basis
(x_k = 1 there for a real eigenvalue), so it may differ from torch's, whose LAPACK balances
first: eigenvectors are only defined up to a unit factor. Where LAPACK's iteration converges
in another order the eigenvalues' order differs from torch's too (a few percent of random
3 x 3 matrices). A
defective matrix (a Jordan block) has no basis of eigenvectors: as LAPACK, the kernels return
for each copy of the eigenvalue the vector of its own back-substitution, a near-zero pivot
replaced by eps max(|lambda|, 1) of the matrix scaled to entries of at most 1 (dtrevc's
perturbation, with a floor that keeps x finite), so the copies' vectors are nearly parallel and
V is numerically singular there (each column still satisfies A v = lambda v to working
accuracy). A matrix with a NaN or an infinity gets NaN in every eigenvalue and eigenvector; one
whose iteration did not converge within ``codegen.EIG_MAX_SWEEPS`` sweeps likewise (geev would
report info > 0 and torch raise; no such matrix was found in testing).

The interface the family module (``mpslinalg/linalg/eig.py``) wires into its declarations
(``small=`` / ``small_when=``); the argument is validated and square (the tables serve float32
and complex64), and the functions only compute (forward only, no host synchronisation, the
input never modified, complex64 results as torch's):

- ``small_eig(A, backend=None) -> (eigenvalues, eigenvectors)``: A (*, n, n); eigenvalues
  (*, n) and eigenvectors (*, n, n) complex64, as torch.linalg.eig;
  ``use_small_eig(A, backend)`` / ``may_use_small_eig(A)``.
- ``small_eigvals(A, backend=None) -> eigenvalues``: as torch.linalg.eigvals (the same
  eigenvalues as small_eig's, bit for bit); ``use_small_eigvals(A, backend)`` /
  ``may_use_small_eigvals(A)``.

``backend`` None means the backend in force (``resolve_backend``). In a declaration (see
``mpslinalg/linalg/matrix_exp.py``): ``forward={..., "small": small_eig}``, ``small_when=lambda
backend, A: use_small_eig(A, backend)``, ``through_op=may_use_small_eig`` (the ``may_use_*``
predicates read the public arguments by position and ignore those after A).

Examples
--------
>>> import torch
>>> from mpslinalg.small.eig import small_eig
>>> w, V = small_eig(torch.tensor([[[0.0, -1.0], [1.0, 0.0]]]), backend="torch")
>>> w
tensor([[0.+1.j, 0.-1.j]])
>>> bool(torch.allclose(torch.tensor([[[0.0, -1.0], [1.0, 0.0]]]).cfloat() @ V, V * w[:, None]))
True
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch

from .._core import metal as _metal
from . import paths


def _torch_eig(A: torch.Tensor, compute_v: bool = True
               ) -> tuple[torch.Tensor, torch.Tensor | None]:
    if compute_v:
        return tuple(torch.linalg.eig(A))
    return torch.linalg.eigvals(A), None


#: Metal source of the kernels.
_SOURCE = "linalg/small_eig.metal"

#: Threads per threadgroup of the one-thread-per-matrix kernels.
_GROUP = 256


def _metal_eig(A: torch.Tensor, compute_v: bool = True
               ) -> tuple[torch.Tensor, torch.Tensor | None]:
    from .._core.copy import contiguous

    *batch_shape, n, _ = A.shape
    E = torch.empty((*batch_shape, n), dtype=torch.complex64, device=A.device)
    V = torch.empty(A.shape, dtype=torch.complex64, device=A.device) if compute_v else None
    batch = math.prod(batch_shape)
    if batch:
        kern = _metal.kernel(_SOURCE, "small_eig", A.dtype, A.device, fn="eig", n=n,
                             vectors=compute_v)
        outputs = (E, V) if compute_v else (E,)
        _metal.launch(kern, contiguous(A, "eig"), *outputs, batch, threads=batch,
                      group_size=min(_GROUP, batch))
    return E, V


#: The functions of the paths this family binds itself (`paths.functions` has the generated
#: kernels').
_OWN = {paths.METAL: SimpleNamespace(small_eig=_metal_eig),
        paths.TORCH_LINALG: SimpleNamespace(small_eig=_torch_eig)}


# ------------------------------------------------------------------------------ queries

def may_use_small_eig(A: torch.Tensor, *_: object) -> bool:
    """A cheap necessary condition of `use_small_eig` on the torch backend (shapes only:
    `mpslinalg.small.paths.may_take_small_path`; further arguments are ignored)."""
    return paths.may_take_small_path("eig", A)


def use_small_eig(A: torch.Tensor, backend: str | None = None) -> bool:
    """True when the small path should compute eig of ``A`` on ``backend`` (default: the one in
    force): n <= 4, a dtype a row serves, from the table's crossover."""
    return paths.takes_small_path("eig", A, backend)


def may_use_small_eigvals(A: torch.Tensor, *_: object) -> bool:
    """`may_use_small_eig` for eigvals' table."""
    return paths.may_take_small_path("eigvals", A)


def use_small_eigvals(A: torch.Tensor, backend: str | None = None) -> bool:
    """`use_small_eig` for eigvals' table."""
    return paths.takes_small_path("eigvals", A, backend)


# ------------------------------------------------------------------------------ entry points

def small_eig(A: torch.Tensor, backend: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(eigenvalues, eigenvectors) of torch.linalg.eig(A) for A (*, n, n), n <= 4, by the path
    the table chooses for ``backend``."""
    path = paths.choose("eig", A, backend)
    return tuple(paths.functions(path, _OWN).small_eig(A, True))


def small_eigvals(A: torch.Tensor, backend: str | None = None) -> torch.Tensor:
    """torch.linalg.eigvals(A) for A (*, n, n), n <= 4, by the path the table chooses for
    ``backend``."""
    path = paths.choose("eigvals", A, backend)
    return paths.functions(path, _OWN).small_eig(A, False)[0]
