"""Bugs of torch's own kernels that the torch backend routes around, each with its exact
condition (the reproducers are on the docs' known-issues page).

torch's CPU LU on batches (torch 2.13.0+cpu, oneMKL): with more than one intra-op thread,
``getrf`` on a batch of at least two matrices of more than about 21,000 entries each (e.g.
152 x 152, or 100 x 300) prints "Intel oneMKL ERROR: Parameter 6 was incorrect on entry to
SLASWP" and returns wrong factors (sometimes pivots out of range); one matrix at a time, or one
thread, is right. Everything built on it is wrong too: lu_factor, lu, solve, inv, det, slogdet.
``getrs`` (lu_solve with correct factors) is not affected. The route: factor such batches one
matrix at a time (the factorisation of a matrix this size costs far more than the loop).

torch's ``linalg.cond`` for the orders computed through the inverse (1, -1, inf, -inf, 'fro';
torch 2.13) has no gradient: it fills the inverse where ``inv_ex`` failed in place
(``masked_fill_``), and backward raises "one of the variables needed for gradient computation
has been modified by an inplace operation". The route: where such a call is differentiated, the
same formula out of place (`COND_BY_INVERSE`, `mpslinalg.linalg.norms`).

torch's CPU ``linalg.eigvals`` of non-finite input (torch 2.13.0+cpu, oneMKL): input holding NaN
or Inf prints "Intel oneMKL ERROR: Parameter 3 was incorrect on entry to SGEBAL" (CGEBAL,
ZGEBAL, DGEBAL); in float32, complex64 and complex128 the process then dies of a segmentation
fault, in float64 some of that matrix's eigenvalues come back finite (and meaningless).
(``linalg.eig`` checks its input first and raises.) The route: such calls
go through the op (`eigvals_nonfinite_affected`, one finiteness reduction), whose torch forward
hands torch the poisoned matrices as zeros and returns NaN eigenvalues for them.
"""

from __future__ import annotations

import cmath
import math
from collections.abc import Callable
from typing import Any

import torch

#: Largest matrix (entries) for which the batched CPU factorisation was measured correct with
#: two threads (144 x 144 right, 152 x 152 wrong); below it the batch goes to torch whole.
MKL_BATCHED_GETRF_SAFE_NUMEL = 144 * 144


#: The orders of torch.linalg.cond whose gradient torch cannot compute (module docstring).
COND_BY_INVERSE = (1, -1, math.inf, -math.inf, "fro")


def cond_gradient_affected(A: torch.Tensor, p: object) -> bool:
    """Whether torch's cond would fail to differentiate this call (module docstring)."""
    return (A.requires_grad and torch.is_grad_enabled() and not isinstance(p, bool)
            and p in COND_BY_INVERSE)


def mkl_batched_getrf_affected(A: torch.Tensor) -> bool:
    """Whether torch's batched CPU LU would factor ``A`` (*, m, n) wrongly (module docstring)."""
    shape = A.shape
    if len(shape) < 3 or shape[-1] * shape[-2] <= MKL_BATCHED_GETRF_SAFE_NUMEL:
        return False
    return (A.device.type == "cpu" and math.prod(shape[:-2]) > 1
            and torch.get_num_threads() > 1)


def per_matrix(fn: Callable[..., Any], A: torch.Tensor, *args: Any) -> Any:
    """``fn(A, *args)`` for an ``A`` that `mkl_batched_getrf_affected` flags, computed one
    matrix at a time and stacked back (outputs are tensors or tuples of tensors with A's batch
    dimensions leading); otherwise ``fn(A, *args)`` itself."""
    if not mkl_batched_getrf_affected(A):
        return fn(A, *args)
    batch = A.shape[:-2]
    flat = A.reshape(-1, *A.shape[-2:])
    outs = [fn(flat[i], *args) for i in range(flat.shape[0])]
    if isinstance(outs[0], torch.Tensor):
        return torch.stack(outs).reshape(*batch, *outs[0].shape)
    return tuple(torch.stack(parts).reshape(*batch, *parts[0].shape)
                 for parts in zip(*outs, strict=True))


#: The dtypes whose CPU eigvals fails on non-finite input (module docstring).
EIGVALS_NONFINITE_CRASH = frozenset({torch.float32, torch.float64, torch.complex64,
                                     torch.complex128})


def eigvals_nonfinite_affected(A: torch.Tensor) -> bool:
    """Whether torch's eigvals might fail on ``A`` (module docstring): its sum is not finite
    (one reduction and a host read, as torch's eig makes for the same check; a finite sum
    that overflows sends a call through the op needlessly, never wrongly)."""
    if A.dtype not in EIGVALS_NONFINITE_CRASH:
        return False
    if A.is_cpu and A.dim() == 2 and A.numel() <= _SUM_IN_PYTHON:
        # one small matrix: Python's sum of its entries costs half of a tensor reduction and
        # its .item(), which is what keeps the guarded call within 1.25x of torch's (the
        # checks before it are ordered by their cost for the same reason)
        return not cmath.isfinite(sum(map(sum, A.tolist())))
    if A.numel() == 0 or A.is_meta:
        return False
    return not cmath.isfinite(A.sum().item())


#: The most entries of one CPU matrix whose finiteness `eigvals_nonfinite_affected` sums in
#: Python (0.8 us for a 3 x 3, against 1.7 us for ``A.sum().item()``; the list grows with n^2).
_SUM_IN_PYTHON = 64
