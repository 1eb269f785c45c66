"""LinAlgError and the one place where ``info`` is read back from the device."""

from __future__ import annotations

import torch


class LinAlgError(torch.linalg.LinAlgError):
    """A numerical failure (singular matrix, ...) reported through ``info``.

    Subclasses :class:`torch.linalg.LinAlgError`, so ``except torch.linalg.LinAlgError`` catches it.
    """


def _failure_text(api_name: str, info: int) -> str:
    # torch's wordings (aten/src/ATen/native/BatchLinearAlgebra.cpp, _linalg_check_errors),
    # chosen by the op's name as torch does.
    if "solve" in api_name:
        return "The solver failed because the input matrix is singular."
    if "inv" in api_name:
        return (
            f"The diagonal element {info} is zero, the inversion could not be completed "
            "because the input matrix is singular."
        )
    if "lu_factor" in api_name:
        return (
            f"U[{info},{info}] is zero and using it on lu_solve would result in a division by "
            "zero. If you still want to perform the factorization, consider calling "
            "linalg.lu(A, pivot) or linalg.lu_factor_ex(A, pivot)"
        )
    if "cholesky" in api_name:
        return (
            "The factorization could not be completed because the input is not positive-definite "
            f"(the leading minor of order {info} is not positive-definite)."
        )
    return (
        "The algorithm failed to converge because the input matrix is ill-conditioned or has too "
        f"many repeated singular values (error code: {info})."
    )


def check_errors(info: torch.Tensor, api_name: str) -> None:
    """Raise :class:`LinAlgError` if any ``info`` is non-zero.

    ``info`` is the int32 tensor (batch shape) an ``*_ex`` op returned. This reads the device once
    (a single host synchronisation) and, for batched input (``info.dim() > 0``), names the first
    failing batch element like torch does.
    """
    if info.numel() == 0:
        return
    flat = info.reshape(-1)
    # One transfer: the first non-zero entry's index (argmax returns the first maximum; 0 when
    # all are zero) and its value, both computed on the device.
    first = torch.argmax((flat != 0).to(torch.uint8))
    index, value = torch.stack([first, flat[first].to(first.dtype)]).tolist()
    if value == 0:
        return
    if value < 0:
        raise RuntimeError(
            f"{api_name}: internal error: info={value} (an argument had an illegal value)"
        )
    where = f": (Batch element {index})" if info.dim() > 0 else ""
    raise LinAlgError(f"{api_name}{where}: {_failure_text(api_name, value)}")
