"""Comparisons and minimum / maximum of unsigned integers: ``eq ne lt le gt ge maximum
minimum`` for uint16, uint32 and uint64, with torch's semantics.

Ops ``mpslinalg::unsigned_<name>``: on the metal backend one launch of
``metal/ops/unsigned.metal``, which compares in the operands' own unsigned type (right above
2^31 and 2^63, where a signed reinterpretation orders large values below zero) and reads both
operands in place at their broadcast strides. On the torch backend, where torch's CPU kernels
lack the ordered comparisons of these dtypes (and its CUDA kernels their torch.where), uint16 /
uint32 are compared and reduced widened to int64 (exact) and uint64 with its sign bit flipped
(an order-preserving map onto int64), then mapped back. Other dtypes go to torch unchanged.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from .._core import elementwise
from .._core import metal as _metal
from .._core.declare import SAME, Declaration, Operand, Result
from .._core.errors import translate
from .._core.op import ANY_DTYPE, ITERATOR_CAST

__all__ = ["eq", "ge", "gt", "le", "lt", "maximum", "minimum", "ne"]

_PATH = "ops/unsigned.metal"
#: dtypes with a Metal kernel here.
UNSIGNED_DTYPES = (torch.uint16, torch.uint32, torch.uint64)
#: Kernel codes; mirror kCompare* / kExtremum* in metal/ops/unsigned.h.
_COMPARISONS = {"eq": 0, "ne": 1, "lt": 2, "le": 3, "gt": 4, "ge": 5}
_EXTREMA = {"maximum": 0, "minimum": 1}
_SIGN_BIT = -(2**63)


def _ordered_int64(x: Tensor) -> Tensor:
    """An int64 tensor ordered like the unsigned ``x``."""
    if x.dtype == torch.uint64:
        return x.view(torch.int64) ^ _SIGN_BIT
    return x.to(torch.int64)


def _from_ordered_int64(x: Tensor, dtype: torch.dtype) -> Tensor:
    """The inverse of `_ordered_int64`: ``x`` back in the unsigned ``dtype``."""
    if dtype == torch.uint64:
        return (x ^ _SIGN_BIT).view(torch.uint64)
    return x.to(dtype)


def _torch_forward(name: str):
    torch_fn = getattr(torch, name)

    def forward(a: Tensor, b: Tensor) -> Tensor:
        if a.dtype not in UNSIGNED_DTYPES:  # torch's own
            return torch_fn(a, b)
        if name in _EXTREMA:
            # Mapped back rather than selected with torch.where, which torch's CUDA build does
            # not implement for uint16 / uint32 / uint64.
            return _from_ordered_int64(torch_fn(_ordered_int64(a), _ordered_int64(b)), a.dtype)
        if name in ("eq", "ne"):
            return torch_fn(a, b)
        return torch_fn(_ordered_int64(a), _ordered_int64(b))

    return forward


def _metal_forward(name: str):
    def forward(a: Tensor, b: Tensor) -> Tensor:
        shape, (va, vb) = elementwise.broadcast_views(name, a, b)
        if name in _EXTREMA:
            kernel_op, code, out_dtype = "unsigned_extremum", _EXTREMA[name], a.dtype
        else:
            kernel_op, code, out_dtype = "unsigned_compare", _COMPARISONS[name], torch.bool
        out = torch.empty(shape, dtype=out_dtype, device=a.device)
        numel = out.numel()
        if numel == 0:
            return out
        kernel = _metal.kernel(_PATH, kernel_op, a.dtype, a.device, fn=name, code=code)
        sizes, a_strides, b_strides = elementwise.layout(shape, va, vb)
        _metal.launch(kernel, va, vb, out, sizes, a_strides, b_strides, len(sizes), numel,
                      threads=_metal.grid_stride_threads(numel), group_size=None)
        return out

    return forward


def _unsigned_dtype(fn: str, dtype: torch.dtype, backend: str) -> torch.dtype:
    """The dtype policy: the unsigned dtypes on metal; every dtype on torch (the others are
    torch's own call)."""
    if backend == "metal" and dtype not in UNSIGNED_DTYPES:
        raise TypeError(f"mpslinalg.{fn}: the metal backend supports uint16, uint32 and "
                        f"uint64, got {str(dtype).removeprefix('torch.')}; use the torch "
                        "backend (mpslinalg.use_backend('torch')) or torch." + fn)
    return dtype


#: One declaration per function: ``mpslinalg::unsigned_<name>(a, b)`` of two tensors of one
#: dtype, elementwise (core rank 0: the output has their broadcast shape); booleans from the
#: comparisons. Not differentiable, so the torch backend calls the torch forward without the
#: op's dispatch.
DECLARATIONS = {name: Declaration(
    f"unsigned_{name}", [Operand("a", 0), Operand("b", 0)],
    [Result("output", dtype=SAME if name in _EXTREMA else torch.bool)],
    forward={"torch": _torch_forward(name), "metal": _metal_forward(name)},
    dtypes=_unsigned_dtype, torch_direct=True) for name in (*_COMPARISONS, *_EXTREMA)}
OPS = {name: declaration.op for name, declaration in DECLARATIONS.items()}


def _prepare(call: None, input: object, other: object, *, fn: str) -> tuple[Tensor, Tensor]:
    """The op's arguments (made here, so the call has no context yet: the dtype policy
    refuses after)."""
    return _operands(fn, input, other)


def _operands(fn: str, a: object, b: object) -> tuple[Tensor, Tensor]:
    """Both operands as tensors of one dtype on one device, broadcastable (torch's rules:
    an int takes ``a``'s dtype; different unsigned dtypes do not promote)."""
    if not isinstance(a, Tensor):
        raise TypeError(f"mpslinalg.{fn}: input must be a torch.Tensor, got {type(a).__name__}")
    if isinstance(b, bool) or not isinstance(b, (Tensor, int)):
        raise TypeError(f"mpslinalg.{fn}: other must be a torch.Tensor or an int, got "
                        f"{type(b).__name__}")
    if isinstance(b, int):
        if a.dtype in UNSIGNED_DTYPES:
            high = 2 ** (8 * a.element_size()) - 1
            if not 0 <= b <= high:
                raise RuntimeError(f"mpslinalg.{fn}: other = {b} is out of the range of "
                                   f"{str(a.dtype).removeprefix('torch.')} (0 .. {high})")
            b = torch.tensor(b, dtype=a.dtype, device=a.device)
        else:
            b = torch.tensor(b, device=a.device)
    if a.dtype != b.dtype:
        try:
            dtype = torch.result_type(a, b)  # raises for unsigned mixed with other dtypes
        except RuntimeError as error:
            raise translate(error, "result_type", fn) from None
        a, b = a.to(dtype), b.to(dtype)
    if a.device != b.device and b.dim() > 0 and a.dim() > 0:
        raise RuntimeError(f"mpslinalg.{fn}: expected all tensors on one device, got input on "
                           f"{a.device}, other on {b.device}")
    elementwise.broadcast_views(fn, a, b)
    return a, b.to(a.device)


def _doc(fn: str, what: str, returns: str, example: str) -> str:
    return f"""{what}; like `torch.{fn}`, with uint16 / uint32 / uint64 computed in
    their own unsigned type.

    Parameters
    ----------
    input : Tensor
        Any dtype; uint16 / uint32 / uint64 run the Metal kernel on the metal backend.
    other : Tensor or int
        Broadcastable to ``input``; an int is taken in ``input``'s dtype. Different unsigned
        dtypes do not promote (as in torch).
    out : Tensor, optional
        Tensor to write the result into.

    Returns
    -------
    Tensor
        {returns}

    Examples
    --------
    >>> import torch
    >>> from mpslinalg import ops
    >>> a = torch.tensor([2**63 + 1, 1], dtype=torch.uint64)
    >>> b = torch.tensor([1, 2**63 + 1], dtype=torch.uint64)
    >>> ops.{fn}(a, b)
    {example}
    """


def _make(fn: str, what: str, returns: str, example: str):
    def function(input: Tensor, other: Tensor | int, *, out: Tensor | None = None) -> Tensor:
        """(The docstring, set below.)"""

    function.__name__ = function.__qualname__ = fn
    function.__module__ = __name__
    function.__doc__ = _doc(fn, what, returns, example)
    # comparisons cast their booleans into any out dtype; extrema only where safe
    casting = ANY_DTYPE if fn in _COMPARISONS else ITERATOR_CAST
    return DECLARATIONS[fn].public(getattr(torch, fn), torch_name=fn,
                                   prepare=functools.partial(_prepare, fn=fn),
                                   casting=casting)(function)


_BOOL = "Boolean, of the broadcast shape."
eq = _make("eq", "Elementwise ``input == other``", _BOOL, "tensor([False, False])")
ne = _make("ne", "Elementwise ``input != other``", _BOOL, "tensor([True, True])")
lt = _make("lt", "Elementwise ``input < other``", _BOOL, "tensor([False,  True])")
le = _make("le", "Elementwise ``input <= other``", _BOOL, "tensor([False,  True])")
gt = _make("gt", "Elementwise ``input > other``", _BOOL, "tensor([ True, False])")
ge = _make("ge", "Elementwise ``input >= other``", _BOOL, "tensor([ True, False])")
maximum = _make("maximum", "Elementwise maximum", "Of ``input``'s dtype and the broadcast shape.",
                "tensor([9223372036854775809, 9223372036854775809], dtype=torch.uint64)")
minimum = _make("minimum", "Elementwise minimum", "Of ``input``'s dtype and the broadcast shape.",
                "tensor([1, 1], dtype=torch.uint64)")
