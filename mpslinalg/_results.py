"""Named results of the LU family, with torch.linalg's field names (``torch.return_types``).

torch's result types are structseqs; these NamedTuples have the same fields, order and
unpacking behaviour (``LU, pivots = lu_factor(A)``, ``lu_factor(A).pivots``).
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class LUFactorResult(NamedTuple):
    """Result of :func:`mpslinalg.lu_factor` (``torch.return_types.linalg_lu_factor``)."""

    LU: torch.Tensor
    pivots: torch.Tensor


class LUFactorExResult(NamedTuple):
    """Result of :func:`mpslinalg.lu_factor_ex` (``torch.return_types.linalg_lu_factor_ex``)."""

    LU: torch.Tensor
    pivots: torch.Tensor
    info: torch.Tensor


class LUResult(NamedTuple):
    """Result of :func:`mpslinalg.lu` (``torch.return_types.linalg_lu``): ``A = P @ L @ U``."""

    P: torch.Tensor
    L: torch.Tensor
    U: torch.Tensor


class SolveExResult(NamedTuple):
    """Result of :func:`mpslinalg.solve_ex` (``torch.return_types.linalg_solve_ex``)."""

    result: torch.Tensor
    info: torch.Tensor


class InvExResult(NamedTuple):
    """Result of :func:`mpslinalg.inv_ex` (``torch.return_types.linalg_inv_ex``)."""

    inverse: torch.Tensor
    info: torch.Tensor


class SlogdetResult(NamedTuple):
    """Result of :func:`mpslinalg.slogdet` (``torch.return_types.linalg_slogdet``)."""

    sign: torch.Tensor
    logabsdet: torch.Tensor
