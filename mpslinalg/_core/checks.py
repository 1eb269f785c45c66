"""Input validation with uniform messages, and the dtype policy.

Every message starts with ``mpslinalg.<fn>:`` and shows what was received.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .metal import LINALG_DTYPES

#: dtypes each backend computes in natively.
METAL_DTYPES = LINALG_DTYPES
TORCH_DTYPES = (torch.float32, torch.float64, torch.complex64, torch.complex128)
#: low-precision inputs are computed in float32 and cast back (Metal and torch alike).
UPCAST_DTYPES = {torch.float16: torch.float32, torch.bfloat16: torch.float32}


def _names(dtypes) -> str:
    return ", ".join(str(d).removeprefix("torch.") for d in dtypes)


def shape_str(x: torch.Tensor) -> str:
    return "(" + ", ".join(str(s) for s in x.shape) + ")"


def check_tensor(fn: str, name: str, x: object) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"mpslinalg.{fn}: {name} must be a torch.Tensor, got {type(x).__name__}")
    return x


def check_matrix(fn: str, name: str, x: object, *, square: bool = True) -> torch.Tensor:
    """``x`` is a tensor of shape (*, m, n), with m == n when ``square``."""
    x = check_tensor(fn, name, x)
    if x.dim() < 2:
        raise RuntimeError(
            f"mpslinalg.{fn}: {name} must have at least 2 dimensions, got shape {shape_str(x)}"
        )
    if square and x.shape[-1] != x.shape[-2]:
        raise RuntimeError(
            f"mpslinalg.{fn}: {name} must be batches of square matrices, got shape {shape_str(x)}"
        )
    return x


def check_same_device(fn: str, **tensors: torch.Tensor) -> None:
    devices = {name: t.device for name, t in tensors.items()}
    if len(set(devices.values())) > 1:
        got = ", ".join(f"{n} on {d}" for n, d in devices.items())
        raise RuntimeError(f"mpslinalg.{fn}: expected all tensors on one device, got {got}")


def check_same_dtype(fn: str, **tensors: torch.Tensor) -> None:
    dtypes = {name: t.dtype for name, t in tensors.items()}
    if len(set(dtypes.values())) > 1:
        got = ", ".join(f"{n} of dtype {str(d).removeprefix('torch.')}" for n, d in dtypes.items())
        raise RuntimeError(f"mpslinalg.{fn}: expected all inputs to have the same dtype, got {got}")


#: The functions whose metal backend takes float64 / complex128, computed by iterative
#: refinement on float32 kernels (mpslinalg.linalg.refine_metal; docs/float64.rst).
METAL_REFINED_FUNCTIONS = ("solve", "solve_ex", "inv", "inv_ex", "lstsq")


def compute_dtype(fn: str, dtype: torch.dtype, backend: str) -> torch.dtype:
    """The dtype ``fn`` computes in for an input of ``dtype`` on ``backend``; raises TypeError for
    dtypes the backend cannot compute in. Results are cast back to ``dtype``."""
    dtype_in = dtype
    dtype = UPCAST_DTYPES.get(dtype, dtype)
    if dtype in METAL_DTYPES or (backend == "torch" and dtype in TORCH_DTYPES):
        return dtype
    if backend == "metal" and dtype in TORCH_DTYPES:
        raise TypeError(
            f"mpslinalg.{fn}: the metal backend supports {_names(METAL_DTYPES)} "
            f"(and float16/bfloat16, computed in float32), got {_names([dtype_in])}; Metal has no "
            "64-bit floating point: use the torch backend (mpslinalg.use_backend('torch')) "
            "for float64/complex128 (on the metal backend only "
            f"{', '.join(METAL_REFINED_FUNCTIONS)} take them, by iterative refinement)"
        )
    raise TypeError(
        f"mpslinalg.{fn}: expected a floating point or complex tensor of dtype "
        f"{_names(TORCH_DTYPES + tuple(UPCAST_DTYPES))}, got {_names([dtype_in])}"
    )


def refined_compute_dtype(fn: str, dtype: torch.dtype, backend: str) -> torch.dtype:
    """`compute_dtype` for the functions of `METAL_REFINED_FUNCTIONS`: the metal backend also
    takes float64 / complex128 (its forward refines them on float32 kernels)."""
    if backend == "metal" and dtype in (torch.float64, torch.complex128):
        return dtype
    return compute_dtype(fn, dtype, backend)


def broadcast_shapes(*shapes: Sequence[int]) -> torch.Size:
    """``torch.broadcast_shapes`` in plain Python (sizes may be SymInts under torch.compile).

    torch's own goes through ``torch.fx.experimental.symbolic_shapes``, whose import pulls in
    sympy: about 0.4 s of the first call in a fresh process. Raises RuntimeError when the shapes
    do not broadcast.
    """
    ndim = max([0, *(len(shape) for shape in shapes)])
    common = [1] * ndim
    for shape in shapes:
        for dim, size in enumerate(shape, ndim - len(shape)):
            if size == 1 or size == common[dim]:
                continue
            if common[dim] != 1:
                got = ", ".join(str(tuple(s)) for s in shapes)
                raise RuntimeError(f"shape mismatch: the shapes {got} do not broadcast")
            common[dim] = size
    return torch.Size(common)


def broadcast_batch(fn: str, *shapes_named: tuple[str, torch.Size]) -> torch.Size:
    """Broadcast batch shapes like torch, naming the inputs when they do not broadcast."""
    try:
        return broadcast_shapes(*(s for _, s in shapes_named))
    except RuntimeError:
        got = ", ".join(f"{n} batch shape {tuple(s)}" for n, s in shapes_named)
        raise RuntimeError(f"mpslinalg.{fn}: batch dimensions do not broadcast: {got}") from None


def prepare(fn: str, A: object, *, square: bool = True) -> tuple[torch.Tensor, torch.Tensor, str]:
    """Validate the matrix argument ``A`` of ``fn``: returns (A, A in its compute dtype, the
    concrete backend)."""
    from .backend import resolve_backend

    A = check_matrix(fn, "A", A, square=square)
    backend = resolve_backend(A.device, fn)
    dtype = compute_dtype(fn, A.dtype, backend)
    return A, (A if A.dtype == dtype else A.to(dtype)), backend


#: dtypes the inference ops (mpslinalg.ops) compute in natively, accumulating in float32.
OPS_METAL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
OPS_TORCH_DTYPES = OPS_METAL_DTYPES + (torch.float64,)


def check_ops_dtype(fn: str, backend: str, **tensors: torch.Tensor) -> torch.dtype:
    """The common dtype of an inference op's floating inputs (mpslinalg.ops: computed natively
    in float16 / bfloat16, no upcast); TypeError when a backend cannot compute in it."""
    check_same_dtype(fn, **tensors)
    return ops_compute_dtype(fn, next(iter(tensors.values())).dtype, backend)


def ops_compute_dtype(fn: str, dtype: torch.dtype, backend: str) -> torch.dtype:
    """The dtype an inference op computes in for inputs of ``dtype``: itself (no upcast), or
    TypeError when ``backend`` cannot compute in it."""
    allowed = OPS_METAL_DTYPES if backend == "metal" else OPS_TORCH_DTYPES
    if dtype not in allowed:
        extra = ("; Metal has no 64-bit floating point: use the torch backend "
                 "(mpslinalg.use_backend('torch')) for float64"
                 if backend == "metal" and dtype == torch.float64 else "")
        raise TypeError(f"mpslinalg.{fn}: expected a tensor of dtype {_names(allowed)}, "
                        f"got {_names([dtype])}{extra}")
    return dtype
