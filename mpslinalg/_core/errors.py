"""LinAlgError and the one place where ``info`` is read back from the device."""

from __future__ import annotations

import re

import numpy as np
import torch

from . import metal as _metal

#: Callbacks told of every device read ``check_errors`` makes (``mpslinalg.testing
#: .count_host_syncs`` listens: the read may happen inside a registered op, where torch
#: function modes do not reach).
read_listeners: list = []


class LinAlgError(torch.linalg.LinAlgError):
    """A numerical failure (singular matrix, ...) reported through ``info``.

    Subclasses `torch.linalg.LinAlgError`, so ``except torch.linalg.LinAlgError`` catches it.
    """

    __module__ = "mpslinalg"  # where users import it from


#: ``info`` of an SVD-based op whose input held NaN: LAPACK 3.10+ ``gesdd`` returns -4 for it,
#: which torch's ``_linalg_check_errors`` reports with its own wording (NONFINITE_TEXT).
NONFINITE_INFO = -4
NONFINITE_TEXT = ("The algorithm failed to converge because the input matrix contained "
                  "non-finite values.")

#: ``info`` of a float64 / complex128 solve or inverse on the metal backend whose iterative
#: refinement did not reach float64-class accuracy (the matrix is too ill-conditioned for its
#: float32 LU factors, about cond(A) > 1e7): reported, never returned as if it had.
UNREFINED_INFO = -5
UNREFINED_TEXT = ("The iterative refinement did not reach float64 accuracy because the input "
                  "matrix is too ill-conditioned for float32 factors (the metal backend's "
                  "float64 path); solve it on the torch backend (LAPACK).")


def _failure_text(api_name: str, info: int) -> str:
    # torch's wordings (aten/src/ATen/native/BatchLinearAlgebra.cpp, _linalg_check_errors),
    # chosen by the failing op's name as torch does.
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
    if "ldl_factor" in api_name:
        return (
            f"D[{info},{info}] is zero and using it on ldl_solve would result in a division by "
            "zero. If you still want to perform the factorization, consider calling "
            "linalg.ldl_factor_ex(A)"
        )
    if "cholesky" in api_name:
        return (
            "The factorization could not be completed because the input is not positive-definite "
            f"(the leading minor of order {info} is not positive-definite)."
        )
    if "eig" in api_name:
        return (
            "The algorithm failed to converge because the input matrix is ill-conditioned or has "
            f"too many repeated eigenvalues (error code: {info})."
        )
    return (
        "The algorithm failed to converge because the input matrix is ill-conditioned or has too "
        f"many repeated singular values (error code: {info})."
    )


def read_device(x: torch.Tensor, why: str) -> np.ndarray:
    """``x`` on the host as a NumPy array: the one device read of a checking call, told to
    `read_listeners`, and no torch kernel on the host (nothing competes with a running
    kernel for CPU threads). On an emulator stream it first waits for the work queued on it
    (`mpslinalg._core.metal.wait_for_host_read`)."""
    for listener in read_listeners:
        listener(why)
    _metal.wait_for_host_read(x)
    if (type(x) is torch.Tensor and x.device.type == "cpu" and not x.requires_grad
            and not x.is_conj() and not x.is_neg()
            and not torch._C._is_torch_function_mode_enabled()):
        return x.numpy()  # the common case, a microsecond cheaper than the general one below
    with torch._C.DisableTorchFunction():  # counted once, by the listeners above
        return x.detach().numpy(force=True)


def check_errors(info: torch.Tensor, api_name: str, *, routine: str | None = None) -> None:
    """Raise `LinAlgError` if any entry of ``info`` is non-zero.

    Parameters
    ----------
    info : Tensor
        The int32 tensor (batch shape) an ``*_ex`` function returned; anything but an integer
        tensor raises TypeError.
    api_name : str
        The function named in the message, e.g. ``"mpslinalg.solve"``.
    routine : str, optional
        The decomposition that reported ``info``, when it is not the one ``api_name`` names
        (torch words a failure after the call that failed: ``matrix_rank(A, hermitian=True)``'s
        is eigh's), e.g. ``"eigh"``; its wording is used.

    Notes
    -----
    Reads the device once (a single host synchronisation); on the CPU it runs no torch kernel,
    so it never competes with a running kernel for CPU threads, and on a GPU it moves two
    numbers. For batched input
    (``info.dim() > 0``) the message names the first failing batch element, in torch's wording.
    `NONFINITE_INFO` (an SVD of input holding NaN) raises with torch's wording for it,
    `UNREFINED_INFO` (a float64 solve on the metal backend that did not converge) with its
    own; other negative values are internal errors (RuntimeError). Meta tensors hold no values
    and are not checked.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> mpslinalg.check_errors(torch.tensor([0, 2], dtype=torch.int32), "mpslinalg.inv")
    Traceback (most recent call last):
        ...
    mpslinalg.LinAlgError: mpslinalg.inv: (Batch element 1): The diagonal element 2 is zero, \
the inversion could not be completed because the input matrix is singular.
    """
    if not isinstance(info, torch.Tensor) or info.is_floating_point() or info.is_complex():
        got = str(info.dtype).removeprefix("torch.") + " tensor" if isinstance(
            info, torch.Tensor) else type(info).__name__
        raise TypeError("mpslinalg.check_errors: info must be the integer tensor an *_ex "
                        f"function returned, got {got}")
    if not isinstance(api_name, str):
        raise TypeError("mpslinalg.check_errors: api_name must be a str (the function to name, "
                        f"e.g. 'mpslinalg.inv'), got {type(api_name).__name__}")
    if info.numel() == 0 or info.device.type == "meta":
        return
    flat = info.reshape(-1)
    if flat.device.type == "cpu":  # no kernel at all: NumPy finds the first failure
        values = read_device(flat, "check_errors")
        failing = values.nonzero()[0]
        if failing.size == 0:
            return
        index = int(failing[0])
        value = int(values[index])
    else:  # on a GPU: find it there, and move two numbers instead of the whole batch
        first = torch.argmax((flat != 0).to(torch.uint8))
        index, value = (int(v) for v in read_device(
            torch.stack([first, flat[first].to(first.dtype)]), "check_errors"))
        if value == 0:
            return
    where = f": (Batch element {index})" if info.dim() > 0 else ""
    if value == NONFINITE_INFO:
        raise LinAlgError(f"{api_name}{where}: {NONFINITE_TEXT}")
    if value == UNREFINED_INFO:
        raise LinAlgError(f"{api_name}{where}: {UNREFINED_TEXT}")
    if value < 0:
        raise RuntimeError(
            f"{api_name}: internal error: info={value} (an argument had an illegal value)"
        )
    raise LinAlgError(f"{api_name}{where}: {_failure_text(routine or api_name, value)}")


#: The op name torch puts before its messages ("linalg.solve: ", "torch.lu_factor: ").
_TORCH_PREFIX = re.compile(r"^(torch\.)?(linalg\.)?\w+: ")
#: Phrases of torch's numerical-failure messages (_linalg_check_errors), as _failure_text.
_FAILURE_MARKERS = ("is zero", "singular", "not positive-definite", "failed to converge")


def translate(error: Exception, torch_name: str, fn: str) -> Exception:
    """``error`` raised by ``torch.<torch_name>`` for a call of ``mpslinalg.<fn>``, reworded to
    name ``mpslinalg.<fn>``, with the same type (``torch.linalg.LinAlgError`` becomes
    `LinAlgError`, as do numerical failures torch raises as RuntimeError). Errors that name
    mpslinalg already (raised by mpslinalg's own checks on a general path) and types that do
    not take a message are returned as they are."""
    if str(error).startswith("mpslinalg."):
        return error
    text = _TORCH_PREFIX.sub("", str(error), count=1)
    text = f"mpslinalg.{fn}: {text}"
    # torch raises some numerical failures (a zero pivot of lu_factor) as plain RuntimeError.
    numerical = isinstance(error, RuntimeError) and any(m in text for m in _FAILURE_MARKERS)
    kind = LinAlgError if isinstance(error, torch.linalg.LinAlgError) or numerical else type(error)
    try:
        new = kind(text)
    except Exception:
        return error
    return new.with_traceback(error.__traceback__)
