"""The matrix exponential: ``matrix_exp`` with torch.linalg semantics.

Op ``mpslinalg::matrix_exp``. On the metal backend: scaling and squaring with a diagonal Padé
approximant (Higham 2005, "The scaling and squaring method for the matrix exponential
revisited", SIAM J. Matrix Anal. Appl. 26(4), algorithm 2.3, with the degree and the thresholds
theta_m of its single-precision analysis, table 2.1: degree 7, theta_7 = 3.9257; n <= 4: the
same algorithm in one kernel, `mpslinalg.small.matrix_exp`): each matrix is
scaled by its own 2^-s (s = ceil(log2(||A||_1 / theta_7)), at least 0), the Padé numerator and
denominator are formed from A^2, A^4, A^6 (torch's products), the denominator solved by the LU
kernels (one n <= 4 launch for batches of small matrices), and each result squared its own s
times. The number of squarings of a batch (its largest s) is the one value read from the device.

The derivative is the Fréchet derivative in the direction of the output gradient, evaluated by
the block-triangular identity exp([[A^H, G], [0, A^H]]) = [[e^(A^H), L(A^H, G)], [0, e^(A^H)]]
(Mathias 1996, "A chain rule for matrix functions and applications", SIAM J. Matrix Anal. Appl.
17(3), theorem 2.1; L(A^H, .) is the adjoint of L(A, .)), one exponential of twice the order.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .. import small
from .._core.declare import Declaration, Matrix, Result
from .._core.errors import read_device
from ..small import matrix_exp as small_expm
from ..small.codegen import EXPM_MAX_SQUARINGS, EXPM_PADE_7, EXPM_THETA_7
from .solve import solve_ex_op

__all__ = ["matrix_exp"]

# theta_7, the Padé coefficients and the most squarings: those of the n <= 4 kernels'
# description (one algorithm, two implementations).
THETA_7, PADE_7, MAX_SQUARINGS = EXPM_THETA_7, EXPM_PADE_7, EXPM_MAX_SQUARINGS


def _squarings(A: Tensor) -> Tensor:
    """s per matrix: ceil(log2(||A||_1 / theta_7)), at least 0; 0 where ||A||_1 is not finite
    (its result is NaN whatever s is)."""
    norm = A.abs().sum(-2).amax(-1)
    s = torch.ceil(torch.log2(norm / THETA_7)).clamp(0, MAX_SQUARINGS)
    return torch.where(norm.isfinite(), s, torch.zeros_like(s)).to(torch.int32)


def _pade_7(A: Tensor, backend: str) -> Tensor:
    """r_7(A) = (V - U)^-1 (V + U), U the odd and V the even part of the numerator."""
    b = PADE_7
    eye = torch.zeros_like(A)
    eye.diagonal(dim1=-2, dim2=-1).fill_(1)
    A2 = A @ A
    A4 = A2 @ A2
    A6 = A4 @ A2
    U = A @ (b[7] * A6 + b[5] * A4 + b[3] * A2 + b[1] * eye)
    V = b[6] * A6 + b[4] * A4 + b[2] * A2 + b[0] * eye
    D, N = V - U, V + U
    R, _ = solve_ex_op(D, N, True, backend, small.use_small_path(D, backend), "")
    return R


def _expm_metal(A: Tensor) -> Tensor:
    if A.numel() == 0:
        return A.clone()
    s = _squarings(A)
    scale = torch.exp2(-s.to(A.real.dtype))[..., None, None].to(A.dtype)
    X = _pade_7(A * scale, "metal")
    # the one device read: how many squarings the batch needs
    steps = int(read_device(s.max(), "matrix_exp: the number of squarings"))
    for k in range(steps):
        X = torch.where((s > k)[..., None, None], X @ X, X)
    return X


def _expm_backward(ctx, gX: Tensor):
    """gA = L(A^H, gX), the (1, 2) block of exp([[A^H, gX], [0, A^H]]) (module docstring)."""
    (A,) = ctx.saved_tensors
    n = A.shape[-1]
    AH = A.mH
    M = torch.zeros((*A.shape[:-2], 2 * n, 2 * n), dtype=A.dtype, device=A.device)
    M[..., :n, :n] = AH
    M[..., n:, n:] = AH
    M[..., :n, n:] = gX
    return (matrix_exp_op(M, ctx.backend, _small_when(ctx.backend, M), "")[..., :n, n:],)


def _small_when(backend: str, A: Tensor) -> bool:
    """Whether exp(``A``) takes the n <= 4 path (`mpslinalg.small.matrix_exp`)."""
    return small_expm.use_small_matrix_exp(A, backend)


#: exp(A) of square ``A``.
matrix_exp_decl = Declaration(
    "matrix_exp", [Matrix("A")], [Result("exp", "A")],
    forward={"metal": _expm_metal, "torch": torch.linalg.matrix_exp,
             "small": small_expm.small_matrix_exp},
    small_when=_small_when, through_op=small_expm.may_use_small_matrix_exp,
    backward=_expm_backward, saves=["A"])
matrix_exp_op = matrix_exp_decl.op


@matrix_exp_decl.public(torch.linalg.matrix_exp)
def matrix_exp(A: Tensor) -> Tensor:
    r"""The matrix exponential ``sum_k A^k / k!``; like `torch.linalg.matrix_exp`.

    Parameters
    ----------
    A : Tensor
        ``(*, n, n)``.

    Returns
    -------
    Tensor
        ``(*, n, n)``. Differentiable (the Fréchet derivative by the block-triangular
        identity).

    Notes
    -----
    On the metal backend: scaling and squaring with the [7/7] Padé approximant (Higham 2005),
    the denominator solved by the LU kernels; one device read per call (the number of
    squarings the batch needs). n <= 4 takes one kernel launch for any batch (the same
    algorithm, each matrix scaled and squared its own number of times, no device read; a
    matrix holding NaN or Inf gives NaN). On the torch backend: torch's own, but float32
    batches of n = 2..4 take the same kernel generated for the CPU (SIMD) and CUDA (Triton)
    from the batch at which it beats torch (``python -m mpslinalg info`` prints the table);
    float64 and complex keep torch's. The derivative of n <= 2 runs on the same path (its
    exponential is 2n x 2n).

    Examples
    --------
    >>> import torch, mpslinalg
    >>> mpslinalg.matrix_exp(torch.zeros(2, 2))
    tensor([[1., 0.],
            [0., 1.]])
    >>> mpslinalg.matrix_exp(torch.tensor([[0., 1.], [0., 0.]]))
    tensor([[1., 1.],
            [0., 1.]])
    """

