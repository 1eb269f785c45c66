"""Padding: ``pad(input, pad, mode="constant", value=None)``, the signature of ``F.pad``.

Op ``mpslinalg::pad`` (constant mode): on the metal backend one launch of
``metal/ops/padding.metal`` writes the output directly from the input's storage (any strides, no
intermediate copy), so the peak extra memory of a call is its output. Negative pads crop, in the
same single launch (the result is never a view of the input). The derivative is the opposite pad
of the incoming gradient. The fill value is accepted or refused as torch's ``F.pad`` accepts or
refuses it (`check_fill_value`). The other modes are torch's own ``F.pad``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from .._core import metal as _metal
from .._core import metal_params
from .._core.declare import AS_GIVEN, Answered, Call, Declaration, Operand, Param, Result
from .._core.errors import translate

__all__ = ["pad"]

_SOURCE = "ops/padding.metal"

_HEADER = "ops/padding.h"
#: kPadMaxDims of metal/ops/padding.h: dimensions the kernel takes after merging.
MAX_DIMS = 16
#: Calls whose sizes, linear indices and input offsets are all below this take the 32-bit
#: ("wide0") kernels.
NARROW_LIMIT = 1 << 31
#: The kernel's storage type (as a torch dtype naming its instantiation) for each element size.
_STORAGE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64,
            16: torch.complex128}


def _padded_shape(fn: str, shape: Sequence[int], pad: Sequence[int]) -> list[int]:
    """The output shape, with torch's checks and wording (constant_pad_nd)."""
    if len(pad) % 2:
        raise RuntimeError(f"mpslinalg.{fn}: Length of pad must be even but instead it equals "
                           f"{len(pad)}")
    if len(pad) // 2 > len(shape):
        raise RuntimeError(
            f"mpslinalg.{fn}: Length of pad should be no more than twice the number of "
            f"dimensions of the input. Pad length is {len(pad)} while the input has "
            f"{len(shape)} dimensions.")
    out = list(shape)
    for i in range(len(pad) // 2):
        d = len(shape) - 1 - i
        size = shape[d] + pad[2 * i] + pad[2 * i + 1]
        if size < 0:
            raise RuntimeError(
                f"mpslinalg.{fn}: The input size {shape[d]}, plus negative padding "
                f"{pad[2 * i]} and {pad[2 * i + 1]} resulted in a negative output size, which "
                f"is invalid. Check dimension {d} of your input.")
        out[d] = size
    return out


def _before(ndim: int, pad: Sequence[int]) -> list[int]:
    """Padding before each dimension, outermost first (F.pad lists the last dimension first)."""
    before = [0] * ndim
    for i in range(len(pad) // 2):
        before[ndim - 1 - i] = pad[2 * i]
    return before


def merged_dims(out_shape: Sequence[int], in_shape: Sequence[int], strides: Sequence[int],
                before: Sequence[int]) -> list[tuple[int, int, int, int]]:
    """(out size, in size, in stride, before) per dimension, with size-1 unpadded dimensions
    dropped and adjacent unpadded dimensions merged when the input holds them contiguously, so
    that any rank fits the kernel's `MAX_DIMS`."""
    dims: list[tuple[int, int, int, int]] = []
    for o, i, s, b in zip(out_shape, in_shape, strides, before, strict=True):
        if o == 1 and i == 1 and b == 0:
            continue
        if dims:
            po, pi, ps, pb = dims[-1]
            unpadded = pb == 0 and po == pi and b == 0 and o == i
            if unpadded and ps == s * i:
                dims[-1] = (po * o, pi * i, s, 0)
                continue
        dims.append((o, i, s, b))
    return dims or [(1, 1, 1, 0)]


def _is_integer_dtype(dtype: torch.dtype) -> bool:
    return not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)


def _is_complex_number(value: object) -> bool:
    return isinstance(value, numbers.Complex) and not isinstance(value, numbers.Real)


def check_fill_value(fn: str, value: object, dtype: torch.dtype) -> None:
    """Raise what ``F.pad`` raises for a fill ``value`` it cannot convert to ``dtype``: a
    RuntimeError "value cannot be converted to type ... without overflow" (an integer beyond
    the dtype's range, a float beyond the largest finite one, NaN or infinity for an integer
    dtype), a TypeError for a complex value of a real dtype.

    ``F.pad`` converts the value to a Python float before torch checks it; the check below is
    torch's own on that float, except that an integer fill of an integer dtype is checked
    exactly (as a float, 2**63 would pass for int64 and ``2**53 + 1`` would be rounded).
    Complex dtypes also take complex values (``F.pad`` takes floats only)."""
    if not isinstance(value, numbers.Number):
        raise TypeError(f"mpslinalg.{fn}: value must be a number, got {type(value).__name__}")
    if _is_complex_number(value):
        if not dtype.is_complex:
            raise TypeError(f"mpslinalg.{fn}: a complex value cannot fill a "
                            f"{str(dtype).removeprefix('torch.')} tensor, got {value!r}")
        _raise_torchs_refusal(fn, complex(value), dtype)
    elif isinstance(value, numbers.Integral) and _is_integer_dtype(dtype):
        info = torch.iinfo(dtype)
        if info.min <= value <= info.max:
            return
        # Out of range: torch's refusal, in torch's words. The exact integer first (as a float
        # it could round into the range), then for a negative one F.pad's float: torch lets a
        # negative integer wrap round an unsigned dtype, F.pad refuses it.
        _raise_torchs_refusal(fn, int(value), dtype)
        _raise_torchs_refusal(fn, float(value), dtype)
    else:
        try:
            probe = float(value)
        except OverflowError as error:  # an integer past 1e308, which F.pad refuses alike
            raise OverflowError(f"mpslinalg.{fn}: {error}") from None
        _raise_torchs_refusal(fn, probe, dtype)


def _raise_torchs_refusal(fn: str, probe: numbers.Number, dtype: torch.dtype) -> None:
    """Raise what torch raises when it pads a ``dtype`` tensor with ``probe``, if it does."""
    try:
        # a non-empty input: torch fills an empty input's padding without its float16 check
        torch.constant_pad_nd(torch.zeros(1, dtype=dtype), [1, 0], probe)
    except (RuntimeError, OverflowError) as error:
        raise translate(error, "constant_pad_nd", fn) from None


def fill_bits(value: numbers.Number, dtype: torch.dtype) -> tuple[int, int]:
    """The bit pattern of ``value`` (already checked by `check_fill_value`) converted to
    ``dtype`` as ``F.pad`` converts it, as two int64 words (the second is used by 16-byte
    dtypes only)."""
    if isinstance(value, numbers.Integral) and _is_integer_dtype(dtype):
        scalar = torch.tensor(int(value)).to(dtype)  # exact (a uint64 past 2**63 comes wrapped)
    else:
        # in float64 (complex128) first, so that the value is rounded once, as torch fills
        wide = torch.complex128 if _is_complex_number(value) else torch.float64
        scalar = torch.tensor(value, dtype=wide).to(dtype)
    if scalar.element_size() == 16:
        lo, hi = torch.view_as_real(scalar).view(torch.int64).tolist()
        return lo, hi
    return int(scalar.view(_STORAGE[scalar.element_size()]).item()), 0


def _as_storage(x: Tensor) -> Tensor:
    """``x`` reinterpreted as its kernel's storage type (same strides, same bytes)."""
    if x.element_size() == 16:
        return torch.view_as_real(x).view(torch.int64)
    return x.view(_STORAGE[x.element_size()])


def fields(out_shape: Sequence[int], in_shape: Sequence[int], strides: Sequence[int],
           pad: Sequence[int], bits: tuple[int, int]) -> dict:
    """The PadParams fields of one call (public for the kernel-level tests)."""
    dims = merged_dims(out_shape, in_shape, strides, _before(len(in_shape), pad))
    if len(dims) > MAX_DIMS:
        raise RuntimeError(
            f"mpslinalg.pad: the input has {len(dims)} dimensions that cannot be merged (padded "
            f"or non-contiguous); the metal kernel takes at most {MAX_DIMS}")
    spare = [0] * (MAX_DIMS - len(dims))
    out_sizes, in_sizes, in_strides, before = (list(c) + spare for c in zip(*dims, strict=True))
    return {"ndim": len(dims), "numel": math.prod(out_shape), "value_lo": bits[0],
            "value_hi": bits[1], "out_sizes": out_sizes, "in_sizes": in_sizes,
            "in_strides": in_strides, "before": before}


def needs_wide_indices(call: dict) -> bool:
    """Whether a call (its PadParams fields) needs the 64-bit kernels: some size, linear index,
    padding or input offset reaches 2**31."""
    ndim, numel = call["ndim"], call["numel"]
    out_sizes, in_sizes, in_strides, before = (
        call[name][:ndim] for name in ("out_sizes", "in_sizes", "in_strides", "before"))
    last_offset = sum((s - 1) * t for s, t in zip(in_sizes, in_strides, strict=True) if s > 0)
    largest = max([numel, last_offset, *out_sizes, *in_sizes, *(abs(b) for b in before)])
    return largest >= NARROW_LIMIT


def _pad_metal(x: Tensor, pad: list[int], value) -> Tensor:
    out_shape = _padded_shape("pad", x.shape, pad)
    if math.prod(out_shape) == 0:
        return x.new_empty(out_shape)
    call = fields(out_shape, x.shape, x.stride(), pad, fill_bits(value, x.dtype))
    out = x.new_empty(out_shape)
    x = x.resolve_conj().resolve_neg()
    # An empty input (a padded empty dimension) is never read: bind the output in its place.
    source = _as_storage(x if x.numel() else out)
    kernel = _metal.kernel(_SOURCE, "pad", _STORAGE[x.element_size()], x.device, fn="pad",
                           wide=needs_wide_indices(call))
    params = metal_params.pack(_HEADER, "PadParams", **call)
    _metal.launch(kernel, source, _as_storage(out), params,
                  threads=_metal.grid_stride_threads(out.numel()), group_size=None)
    return out


def _pad_torch(x: Tensor, pad: list[int], value) -> Tensor:
    out = torch.constant_pad_nd(x, pad, value)
    # torch may answer a crop with (a copy of) a view; the op's output never aliases its input
    if out.untyped_storage().data_ptr() == x.untyped_storage().data_ptr() and x.numel():
        out = out.clone()
    return out


def _pad_backward(ctx, grad: Tensor):
    """The output is the input with rows added or removed at the borders, so the gradient is the
    incoming one with those borders removed or added back (zeros): pad by -pad (the derivative
    of aten's constant_pad_nd, tools/autograd/derivatives.yaml)."""
    back = [-p for p in ctx.pad]
    return pad_op(grad, back, 0, ctx.backend, False, ""), None, None


def _takes_the_general_path(input, pad, mode="constant", value=None) -> bool:
    """F.pad takes float fill values only: complex fills of complex tensors are the op's."""
    return _is_complex_number(value)


#: ``input`` (the whole of it is core: the shape rule reads every dimension) padded by ``pad``
#: (F.pad order: last dimension first) with ``value``.
pad_decl = Declaration(
    "pad", [Operand("input", None), Param("pad", "int[]"), Param("value", "Scalar")],
    [Result("output", lambda x, pad, value: _padded_shape("pad", x, pad))],
    forward={"metal": _pad_metal, "torch": _pad_torch}, through_op=_takes_the_general_path,
    backward=_pad_backward, dtypes=AS_GIVEN)
pad_op = pad_decl.op


def _check_args(fn: str, pad: object, mode: object) -> list[int]:
    if isinstance(pad, Tensor) or not isinstance(pad, Sequence) or not all(
            isinstance(p, numbers.Integral) and not isinstance(p, bool) for p in pad):
        raise TypeError(f"mpslinalg.{fn}: pad must be a sequence of ints, got {pad!r}")
    if not isinstance(mode, str):
        raise TypeError(f"mpslinalg.{fn}: mode must be a str, got {type(mode).__name__} (the "
                        "fill value is the fourth argument, or value=)")
    return [int(p) for p in pad]


def _prepare_pad(call: Call, input: Tensor, pad: object, mode: object,
                 value: object) -> tuple | Answered:
    pad = _check_args("pad", pad, mode)
    if mode != "constant":
        try:
            return Answered(F.pad(input, pad, mode, value))
        except (RuntimeError, ValueError, TypeError, NotImplementedError) as error:
            raise translate(error, "nn.functional.pad", "pad") from None
    value = 0 if value is None else value
    check_fill_value("pad", value, input.dtype)
    if isinstance(value, numbers.Integral) and not _is_integer_dtype(input.dtype):
        value = float(value)  # as F.pad (the op's Scalar could not hold 1e38 as an integer)
    elif isinstance(value, numbers.Integral) and value >= 2**63:
        # uint64 past 2**63: the op's Scalar holds an int64, so the int64 of the same bits
        # (torch wraps a negative integer fill of an unsigned dtype back, as fill_bits does)
        value -= 2**64
    _padded_shape("pad", input.shape, pad)
    return input, pad, value


@pad_decl.public(F.pad, torch_name="nn.functional.pad", prepare=_prepare_pad)
def pad(input: Tensor, pad: Sequence[int], mode: str = "constant",
        value: numbers.Number | None = None) -> Tensor:
    r"""Pad ``input``; like ``torch.nn.functional.pad(input, pad, mode, value)``.

    Parameters
    ----------
    input : Tensor
        Any shape and any dtype torch pads.
    pad : sequence of int
        ``(before_last, after_last, before_second_last, after_second_last, ...)``: padding of
        the last ``len(pad) // 2`` dimensions, last dimension first. Negative entries crop.
    mode : str, optional
        ``"constant"`` (default): the op of this module, on every backend. ``"reflect"``,
        ``"replicate"`` and ``"circular"`` are torch's own ``F.pad`` on every backend
        (torch has them on MPS), with torch's rules on shapes and dtypes.
    value : number, optional
        The fill value of ``"constant"`` mode (default 0), converted to ``input``'s dtype as
        ``F.pad`` converts it, and refused as ``F.pad`` refuses it: a value out of the
        dtype's range raises RuntimeError "value cannot be converted to type ... without
        overflow" (int8 128, uint8 -1, int32 NaN, float16 1e40). An integer fill of an
        integer dtype is exact over the whole range (int64 past 2**53, uint64 up to
        2**64 - 1), and a complex dtype also takes a complex value (``F.pad`` takes floats).

    Returns
    -------
    Tensor
        A new tensor (in constant mode never a view of ``input``, also for crop-only pads).
        Differentiable.

    Notes
    -----
    On the metal backend a single kernel launch reads ``input`` through its strides and writes
    every output element, so a call needs no memory beyond its output; index arithmetic is
    64-bit whenever a size, index or offset of the call reaches 2**31.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> mpslinalg.ops.pad(torch.tensor([[1, 2], [3, 4]]), (1, 0, 0, 1), value=9)
    tensor([[9, 1, 2],
            [9, 3, 4],
            [9, 9, 9]])
    >>> mpslinalg.ops.pad(torch.tensor([[1.0, 2.0, 3.0]]), (2, 1), "reflect")
    tensor([[3., 2., 1., 2., 3., 2.]])
    """
