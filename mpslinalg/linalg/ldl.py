"""LDL^T factorisation of symmetric or Hermitian (possibly indefinite) matrices and solves with
its factors: ``ldl_factor``, ``ldl_factor_ex``, ``ldl_solve``, with torch.linalg's signatures,
semantics and result types.

Ops: ``mpslinalg::ldl_factor_ex`` (LAPACK sytrf / hetrf, UPLO='L', Bunch-Kaufman pivoting) and
``mpslinalg::ldl_solve`` (sytrs / hetrs); on the metal backend they run the kernels of
`mpslinalg.linalg.ldl_metal`. torch defines no derivative for either; neither does mpslinalg:
the forward accepts inputs that require grad, and backward raises, as torch's does.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._core import checks
from .._core.declare import Call, Declaration, Matrix, Operand, Param, Result, info
from .._core.errors import check_errors, read_device
from .._core.platform import torch_at_least
from . import ldl_metal

__all__ = ["ldl_factor", "ldl_factor_ex", "ldl_solve"]


def _no_derivative(name: str):
    """The backward of an op torch defines no derivative for: raises at backward, as torch's
    ``derivative for aten::linalg_<name> is not implemented`` does."""

    def backward(ctx, *grads):
        raise RuntimeError(f"mpslinalg.{name}: derivative for mpslinalg::{name} is not "
                           f"implemented (torch defines none for aten::linalg_{name})")

    return backward


# ---------------------------------------------------------------- mpslinalg::ldl_factor_ex


def _ldl_factor_torch(A: Tensor, hermitian: bool) -> tuple[Tensor, Tensor, Tensor]:
    return tuple(torch.linalg.ldl_factor_ex(A, hermitian=hermitian))


#: (LD, pivots, info) of LAPACK's sytrf (hetrf for complex ``hermitian``), lower triangle.
ldl_factor_ex_decl = Declaration(
    "ldl_factor_ex", [Matrix("A"), Param("hermitian", "bool")],
    [Result("LD", "A"), Result("pivots", lambda A, hermitian: (A[0],), torch.int32), info()],
    forward={"metal": lambda A, hermitian: ldl_metal.ldl_factor_metal(A, hermitian=hermitian),
             "torch": _ldl_factor_torch},
    backward=_no_derivative("ldl_factor_ex"), saves=[])
ldl_factor_ex_op = ldl_factor_ex_decl.op


# ---------------------------------------------------------------- mpslinalg::ldl_solve


def _ldl_solve_torch(LD: Tensor, pivots: Tensor, B: Tensor, hermitian: bool) -> Tensor:
    # torch.linalg.ldl_solve does not broadcast LD itself (a smaller batch of LD than B's is
    # read past its end): the factors come expanded to B's batch (prepare broadcast B).
    batch = B.shape[:-2]
    return torch.linalg.ldl_solve(LD.expand(*batch, *LD.shape[-2:]),
                                  pivots.expand(*batch, pivots.shape[-1]), B,
                                  hermitian=hermitian)


def _check_pivots(LD: Tensor, pivots: Tensor, B: Tensor, hermitian: bool, *, api: str) -> None:
    """Pivots with |p| outside 1..n raise RuntimeError in torch's words (one device read);
    torch checks its own inputs, the Metal kernel would only clamp them."""
    if pivots.numel() == 0 or pivots.device.type == "meta":
        return
    size = pivots.abs()
    low, high = read_device(torch.stack(torch.aminmax(size)), "ldl_solve pivots").tolist()
    if low < 1:
        raise RuntimeError(f"{api}: Pivots given to ldl_solve must all satisfy |pivot| >= 1. "
                           "Did you properly pass the result of ldl_factor?")
    if high > LD.shape[-2]:
        raise RuntimeError(f"{api}: Pivots given to ldl_solve must all satisfy |pivot| <= "
                           "LD.size(-2). Did you properly pass the result of ldl_factor?")


def _prepare_ldl_solve(call: Call, LD: Tensor, pivots: Tensor, B: Tensor,
                       hermitian: bool) -> tuple:
    fn = call.fn
    if B.dim() < 2:
        raise RuntimeError(f"mpslinalg.{fn}: B must have at least 2 dimensions, got shape "
                           f"{checks.shape_str(B)}")
    if pivots.is_floating_point() or pivots.is_complex() or pivots.dtype == torch.bool:
        raise RuntimeError(f"mpslinalg.{fn}: Expected pivots to be integers. Got "
                           f"{str(pivots.dtype).removeprefix('torch.')}")
    if pivots.shape != LD.shape[:-1]:
        raise RuntimeError(f"mpslinalg.{fn}: Expected LD.shape[:-1] and pivots.shape to be the "
                           f"same, but got pivots with shape {list(pivots.shape)} instead")
    n = LD.shape[-1]
    if B.shape[-2] != n:
        raise RuntimeError(f"mpslinalg.{fn}: Incompatible matrix sizes for ldl_solve: each A "
                           f"matrix is {n} by {n} but each b matrix is {B.shape[-2]} by "
                           f"{B.shape[-1]}")
    batch = checks.broadcast_batch(fn, ("LD", LD.shape[:-2]), ("B", B.shape[:-2]))
    return LD, pivots, B.expand(*batch, *B.shape[-2:]), bool(hermitian)


#: Where torch's own ldl_solve takes pivots outside 1..n unchecked, and mpslinalg checks them
#: first (one device read): CUDA (cuSOLVER's sytrs reads out of bounds and the process's CUDA
#: context is lost), and the CPU before torch 2.13 (LAPACK's sytrs writes out of bounds: a heap
#: corruption that aborts the process, pytorch#136714, fixed by pytorch#181032; torch 2.11
#: aborts, 2.13 raises).
UNCHECKED_PIVOTS_ON = ("cuda",) if torch_at_least(2, 13) else ("cuda", "cpu")

#: X with A X = B for A = L D L^T given by ldl_factor's (LD, pivots); LD and pivots broadcast to
#: B's batch inside. On the metal backend, and where torch's own kernel does not check them
#: (`UNCHECKED_PIVOTS_ON`), the pivots are validated first (one device read).
ldl_solve_decl = Declaration(
    "ldl_solve", [Matrix("LD"), Operand("pivots", 1, same_dtype=False), Operand("B", 2),
                  Param("hermitian", "bool")],
    [Result("X", "B")],
    forward={"metal": lambda LD, pivots, B, hermitian: ldl_metal.ldl_solve_metal(
                 LD, pivots, B, hermitian=hermitian),
             "torch": _ldl_solve_torch},
    prepare=_prepare_ldl_solve, check_inputs=_check_pivots, check_inputs_on=UNCHECKED_PIVOTS_ON,
    backward=_no_derivative("ldl_solve"), saves=[])
ldl_solve_op = ldl_solve_decl.op


# ---------------------------------------------------------------- public API


def _zero_pivot_error(error: RuntimeError, A: Tensor, hermitian: bool, fn: str) -> None:
    """torch's error for an exactly zero D(k, k) is an internal assert ("Unknown error code"):
    raise ours, which names the entry and the batch element, in its place."""
    if "Unknown error code" in str(error):
        check_errors(torch.linalg.ldl_factor_ex(A, hermitian=hermitian).info, f"mpslinalg.{fn}")


def _torch_ldl_factor(A: Tensor, *, hermitian: bool = False,
                      out: tuple[Tensor, Tensor] | None = None):
    """The fast path of ldl_factor: torch.linalg.ldl_factor, with `_zero_pivot_error`."""
    try:
        if hermitian is False and out is None:  # torch parses keywords slowly
            return torch.linalg.ldl_factor(A)
        return torch.linalg.ldl_factor(A, hermitian=hermitian, out=out)
    except RuntimeError as error:
        _zero_pivot_error(error, A, hermitian, "ldl_factor")
        raise


def _torch_ldl_factor_ex(A: Tensor, *, hermitian: bool = False, check_errors: bool = False,
                         out: tuple[Tensor, Tensor, Tensor] | None = None):
    """The fast path of ldl_factor_ex: torch.linalg.ldl_factor_ex, with `_zero_pivot_error`."""
    try:
        if hermitian is False and check_errors is False and out is None:
            return torch.linalg.ldl_factor_ex(A)
        return torch.linalg.ldl_factor_ex(A, hermitian=hermitian, check_errors=check_errors,
                                          out=out)
    except RuntimeError as error:
        _zero_pivot_error(error, A, hermitian, "ldl_factor_ex")
        raise


@ldl_factor_ex_decl.public(_torch_ldl_factor_ex, torch_name="linalg.ldl_factor_ex")
def ldl_factor_ex(A: Tensor, *, hermitian: bool = False, check_errors: bool = False,
                  out: tuple[Tensor, Tensor, Tensor] | None = None):
    r"""LDL^T factorisation of a symmetric or Hermitian, possibly indefinite, matrix with
    Bunch-Kaufman pivoting, in LAPACK's packed form, plus ``info``; like
    `torch.linalg.ldl_factor_ex`.

    Parameters
    ----------
    A : Tensor
        ``(*, n, n)``, float32 / complex64 (metal) or also float64 / complex128 (torch
        backend); float16 / bfloat16 are computed in float32 and cast back. Only the lower
        triangle is read (the imaginary part of the diagonal too is ignored when
        ``hermitian``).
    hermitian : bool, optional
        For complex ``A``: factor it as Hermitian, ``A = L D L^H`` (LAPACK hetrf), rather than
        complex symmetric, ``A = L D L^T`` (sytrf). No effect for real ``A``.
    check_errors : bool, optional
        Raise `mpslinalg.LinAlgError` if a diagonal entry of D is exactly zero (one device
        read); by default nothing synchronises with the device.
    out : tuple of Tensor, optional
        ``(LD, pivots, info)`` to write the results into.

    Returns
    -------
    LD : Tensor
        ``(*, n, n)``: D's 1 x 1 and 2 x 2 blocks on the diagonal (a block's off-diagonal
        entry below it) and L's multipliers below, zeros above (LAPACK sytrf, UPLO='L').
    pivots : Tensor
        ``(*, n)`` int32, LAPACK's: ``p > 0`` a 1 x 1 block whose row and column were
        interchanged with row and column ``p`` (1-based); ``pivots[k] = pivots[k + 1] = -p <
        0`` a 2 x 2 block whose second row and column were interchanged with ``p``.
    info : Tensor
        ``(*)`` int32: 0, or the 1-based index of the first exactly-zero D(k, k) (the
        factorisation is complete, D is singular).

    Notes
    -----
    The pivots are LAPACK's (torch's on the CPU), not SciPy's `scipy.linalg.ldl` permutation.
    Inputs that require grad are accepted, but no derivative exists (as in torch): backward
    raises RuntimeError.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> A = torch.tensor([[0., 1.], [1., 0.]])
    >>> LD, pivots, info = mpslinalg.ldl_factor_ex(A)
    >>> LD, pivots, info
    (tensor([[0., 0.],
            [1., 0.]]), tensor([-2, -2], dtype=torch.int32), tensor(0, dtype=torch.int32))
    """


@ldl_factor_ex_decl.public(_torch_ldl_factor, torch_name="linalg.ldl_factor")
def ldl_factor(A: Tensor, *, hermitian: bool = False,
               out: tuple[Tensor, Tensor] | None = None):
    r"""LDL^T factorisation with Bunch-Kaufman pivoting in LAPACK's packed form; like
    `torch.linalg.ldl_factor`.

    Parameters
    ----------
    A : Tensor
        ``(*, n, n)`` symmetric or Hermitian; see `ldl_factor_ex`.
    hermitian : bool, optional
        Hermitian (``A = L D L^H``) rather than complex symmetric factorisation of complex
        ``A``; see `ldl_factor_ex`.
    out : tuple of Tensor, optional
        ``(LD, pivots)`` to write the results into.

    Returns
    -------
    LD, pivots : Tensor
        As `ldl_factor_ex`.

    Raises
    ------
    mpslinalg.LinAlgError
        "D[k,k] is zero ..." (with "(Batch element i)" for batches) when a diagonal entry of D
        is exactly zero; this reads ``info`` from the device once. (torch raises an internal
        assert, "Unknown error code", for the same input.)

    Examples
    --------
    >>> import torch, mpslinalg
    >>> A = torch.tensor([[4., 2.], [2., -3.]])
    >>> LD, pivots = mpslinalg.ldl_factor(A)
    >>> LD
    tensor([[ 4.0000,  0.0000],
            [ 0.5000, -4.0000]])
    >>> pivots
    tensor([1, 2], dtype=torch.int32)
    """


def _torch_ldl_solve(LD: Tensor, pivots: Tensor, B: Tensor, *, hermitian: bool = False,
                     out: Tensor | None = None) -> Tensor:
    """The fast path: torch.linalg.ldl_solve, with LD and pivots expanded to the broadcast
    batch first when B's batch is larger (torch would read past the end of LD)."""
    if isinstance(B, Tensor) and isinstance(pivots, Tensor) and B.dim() >= 2 \
            and LD.shape[:-2] != B.shape[:-2] and pivots.shape == LD.shape[:-1]:
        try:
            batch = checks.broadcast_shapes(LD.shape[:-2], B.shape[:-2])
        except RuntimeError:  # torch words the error
            batch = LD.shape[:-2]
        if batch != LD.shape[:-2]:
            LD = LD.expand(*batch, *LD.shape[-2:])
            pivots = pivots.expand(*batch, pivots.shape[-1])
    if hermitian is False and out is None:  # torch parses keywords slowly
        return torch.linalg.ldl_solve(LD, pivots, B)
    return torch.linalg.ldl_solve(LD, pivots, B, hermitian=hermitian, out=out)


@ldl_solve_decl.public(_torch_ldl_solve, torch_name="linalg.ldl_solve")
def ldl_solve(LD: Tensor, pivots: Tensor, B: Tensor, *, hermitian: bool = False,
              out: Tensor | None = None) -> Tensor:
    r"""Solve ``A X = B`` given the LDL^T factorisation of ``A`` from `ldl_factor`; like
    `torch.linalg.ldl_solve`.

    Parameters
    ----------
    LD : Tensor
        ``(*, n, n)`` packed factors.
    pivots : Tensor
        ``(*, n)`` integers (LAPACK's convention), as `ldl_factor` returns them.
    B : Tensor
        ``(*, n, k)``; batch dimensions broadcast with those of ``LD``.
    hermitian : bool, optional
        The factors are of a Hermitian ``A`` (``ldl_factor(..., hermitian=True)``, LAPACK
        hetrs) rather than a complex symmetric one (sytrs). No effect for real input.
    out : Tensor, optional
        Tensor to write the result into.

    Returns
    -------
    Tensor
        X, shaped like the broadcast ``B``.

    Notes
    -----
    On the metal backend the pivots are validated as torch does on the CPU (RuntimeError for
    ``|p|`` outside 1..n), which reads them from the device once. torch's own function reads
    past the end of ``LD`` when B's batch is larger than LD's (it does not broadcast LD); the
    torch backend expands LD and pivots first. Backward raises RuntimeError, as torch's (no
    derivative is defined).

    Examples
    --------
    >>> import torch, mpslinalg
    >>> A = torch.tensor([[0., 1.], [1., 0.]])
    >>> LD, pivots = mpslinalg.ldl_factor(A)
    >>> mpslinalg.ldl_solve(LD, pivots, torch.tensor([[2.], [3.]]))
    tensor([[3.],
            [2.]])
    """
