"""Index search in sorted sequences: ``searchsorted`` and ``bucketize`` with torch's semantics
(batched sequences, ``sorter``, ``side`` / ``right``, ``out_int32``, NaN placed as torch
places it).

Op ``mpslinalg::searchsorted``: on the metal backend one launch of ``metal/ops/search.metal``
(a bounded binary search per value, every operand read in place at its strides). On the torch
backend, torch.searchsorted. ``bucketize(input, boundaries)`` is
``searchsorted(boundaries, input)`` with 1-D boundaries.
"""

from __future__ import annotations

import numbers

import torch
from torch import Tensor

from .._core import metal as _metal
from .._core import metal_params
from .._core.declare import Declaration, Operand, Param, Result
from .._core.op import INDEX

__all__ = ["bucketize", "searchsorted"]

_PATH = "ops/search.metal"
#: dtypes with a Metal kernel.
METAL_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64)
_INT32_MAX = 2**31 - 1


def _outer_strides(x: Tensor, ndim: int) -> list[int]:
    """Strides of the row each value searches, along the values' leading ``ndim - 1``
    dimensions (0 for a 1-D tensor shared by all)."""
    if x.dim() == 1:
        return [0] * max(ndim - 1, 1)
    return list(x.stride()[:-1]) or [0]


def _metal_searchsorted(seq: Tensor, values: Tensor, sorter: Tensor | None, out_int32: bool,
                        right: bool) -> Tensor:
    if out_int32 and seq.shape[-1] > _INT32_MAX:
        raise RuntimeError(f"mpslinalg.searchsorted: the size of boundaries ({seq.shape[-1]}) "
                           "does not fit int32 indices; pass out_int32=False")
    out_dtype = torch.int32 if out_int32 else torch.int64
    out = torch.empty(values.shape, dtype=out_dtype, device=values.device)
    numel = values.numel()
    if numel == 0:
        return out
    vals = values.reshape(1) if values.dim() == 0 else values
    ndim = vals.dim()
    has_sorter = sorter is not None
    sorter_arg = sorter if has_sorter else torch.zeros(1, dtype=torch.int64, device=seq.device)
    seq_arg = seq if seq.numel() else torch.zeros(1, dtype=seq.dtype, device=seq.device)
    params = metal_params.pack(
        "ops/search.h", "SearchParams", numel=numel, ndim=ndim, seq_len=seq.shape[-1],
        seq_stride=seq.stride(-1), sorter_stride=sorter.stride(-1) if has_sorter else 0,
        has_sorter=has_sorter, right=right)
    kernel = _metal.kernel(_PATH, "searchsorted", seq.dtype, seq.device, fn="searchsorted",
                           out=32 if out_int32 else 64)
    _metal.launch(kernel, seq_arg, vals, sorter_arg, out, params, list(vals.shape),
                  list(vals.stride()), _outer_strides(seq, ndim),
                  _outer_strides(sorter, ndim) if has_sorter else [0] * max(ndim - 1, 1),
                  threads=_metal.grid_stride_threads(numel), group_size=None)
    return out


def _torch_searchsorted(seq: Tensor, values: Tensor, sorter: Tensor | None, out_int32: bool,
                        right: bool) -> Tensor:
    return torch.searchsorted(seq, values, sorter=sorter, out_int32=out_int32, right=right)


def _search_dtype(fn: str, dtype: torch.dtype, backend: str) -> torch.dtype:
    """The dtype policy: any dtype torch searches in, those with a kernel on metal."""
    if backend == "metal" and dtype not in METAL_DTYPES:
        raise TypeError(f"mpslinalg.{fn}: the metal backend supports "
                        + ", ".join(str(d).removeprefix("torch.") for d in METAL_DTYPES)
                        + f", got {str(dtype).removeprefix('torch.')}; use the torch "
                        "backend (mpslinalg.use_backend('torch')) for it")
    return dtype


#: Insertion indices of ``values`` (any shape: core rank 0) into the rows of ``seq`` (same
#: dtype, shapes checked by the public functions' prepare).
searchsorted_decl = Declaration(
    "searchsorted",
    [Operand("seq", 1), Operand("values", 0), Operand("sorter", 1, same_dtype=False,
                                                         optional=True),
     Param("out_int32", "bool"), Param("right", "bool")],
    [Result("indices", (), batch="values",
            dtype=lambda seq, values, sorter, out_int32, right:
            torch.int32 if out_int32 else torch.int64)],
    forward={"torch": _torch_searchsorted, "metal": _metal_searchsorted},
    dtypes=_search_dtype, torch_direct=True)
searchsorted_op = searchsorted_decl.op


def _dims(x: Tensor) -> str:
    return "[" + ", ".join(str(s) for s in x.shape) + "]"


def _prepare(fn: str, seq: object, values: object, sorter: object, side: object,
             out_int32: bool, right: bool) -> tuple[Tensor, Tensor, Tensor | None, bool, bool]:
    """torch's checks (aten searchsorted_pre_check), with its wording after ``mpslinalg.<fn>``;
    the op's arguments."""
    if not isinstance(seq, Tensor):
        raise TypeError(f"mpslinalg.{fn}: sorted_sequence must be a torch.Tensor, got "
                        f"{type(seq).__name__}")
    if isinstance(values, bool) or not isinstance(values, (Tensor, numbers.Real)):
        raise TypeError(f"mpslinalg.{fn}: values must be a torch.Tensor or a real number, got "
                        f"{type(values).__name__}")
    if side is not None:
        if side not in ("left", "right"):
            raise RuntimeError(f"mpslinalg.{fn}: side can only be 'left' or 'right' but got "
                               f"{side}")
        if side == "left" and right:
            raise RuntimeError(f"mpslinalg.{fn}: side and right can't be set to opposites, got "
                               f"side of left while right was True")
        right = side == "right"
    if seq.dim() == 0:
        raise RuntimeError(f"mpslinalg.{fn}: boundaries tensor should have positive dimension, "
                           "but got 0 dimension")
    if not isinstance(values, Tensor):
        if seq.dim() != 1:
            raise RuntimeError(f"mpslinalg.{fn}: input value can be a scalar only when "
                               f"boundaries tensor dimension is 1, but we got boundaries tensor "
                               f"dim({seq.dim()}) and input value's dim(0) numel(1)")
        values = torch.tensor(values, device=seq.device)
    if seq.dim() != 1 and seq.shape[:-1] != values.shape[:-1]:
        raise RuntimeError(f"mpslinalg.{fn}: boundaries tensor should be 1 dimension or the "
                           "first N-1 dimensions of boundaries tensor and input value tensor "
                           f"must match, but we got boundaries tensor {_dims(seq)} and input "
                           f"value tensor {_dims(values)}")
    if seq.dim() != 1 and values.dim() == 0:
        raise RuntimeError(f"mpslinalg.{fn}: input value can be a scalar only when boundaries "
                           f"tensor dimension is 1, but we got boundaries tensor "
                           f"dim({seq.dim()}) and input value's dim(0) numel(1)")
    if seq.device != values.device:
        raise RuntimeError(f"mpslinalg.{fn}: expected all tensors on one device, got "
                           f"sorted_sequence on {seq.device} and values on {values.device}")
    if sorter is not None:
        if not isinstance(sorter, Tensor):
            raise TypeError(f"mpslinalg.{fn}: sorter must be a torch.Tensor, got "
                            f"{type(sorter).__name__}")
        if sorter.dtype != torch.int64:
            raise RuntimeError(f"mpslinalg.{fn}: sorter must be a tensor of long dtype but got "
                               f"dtype {str(sorter.dtype).removeprefix('torch.')}")
        if sorter.shape != seq.shape:
            raise RuntimeError(f"mpslinalg.{fn}: boundary and sorter must have the same size, "
                               f"but got boundary tensor {_dims(seq)} and got sorter tensor "
                               f"{_dims(sorter)}")
        sorter = sorter.to(seq.device)
    if seq.dtype != values.dtype:
        dtype = torch.result_type(seq, values)  # (not traceable: only when needed)
        seq, values = seq.to(dtype), values.to(dtype)
    if seq.dtype.is_complex:
        raise NotImplementedError(f"mpslinalg.{fn}: not implemented for complex input, got "
                                  f"{str(seq.dtype).removeprefix('torch.')}")
    return seq, values, sorter, bool(out_int32), bool(right)


def _prepare_searchsorted(call: None, sorted_sequence: object, values: object, out_int32: bool,
                          right: bool, side: object, sorter: object) -> tuple:
    return _prepare("searchsorted", sorted_sequence, values, sorter, side, out_int32, right)


def _prepare_bucketize(call: None, input: object, boundaries: object, out_int32: bool,
                       right: bool) -> tuple:
    if isinstance(boundaries, Tensor) and boundaries.dim() != 1:
        raise RuntimeError(f"mpslinalg.bucketize: boundaries tensor must be 1 dimension, but "
                           f"got dim({boundaries.dim()})")
    return _prepare("bucketize", boundaries, input, None, None, out_int32, right)


#: The dtypes torch.searchsorted / bucketize search natively: the fast path's (complex input is
#: refused in our own words by the general path).
_REAL_DTYPES = frozenset((torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                          torch.float16, torch.bfloat16, torch.float32, torch.float64))


@searchsorted_decl.public(torch.searchsorted, torch_name="searchsorted", fast_dtypes=_REAL_DTYPES,
                          prepare=_prepare_searchsorted, casting=INDEX)
def searchsorted(sorted_sequence: Tensor, values: Tensor | float, *, out_int32: bool = False,
                 right: bool = False, side: str | None = None, sorter: Tensor | None = None,
                 out: Tensor | None = None) -> Tensor:
    """Indices at which ``values`` would be inserted to keep each row of ``sorted_sequence``
    sorted; like `torch.searchsorted`.

    Parameters
    ----------
    sorted_sequence : Tensor
        ``(M,)``, shared by every value, or ``(*, M)`` with the leading dimensions of
        ``values``; sorted along its last dimension (or through ``sorter``).
    values : Tensor or float
        ``(*, N)`` (any shape for a 1-D sequence) or a number.
    out_int32 : bool, optional
        int32 indices instead of int64.
    right : bool, optional
        The last suitable index (first element ``> value``) instead of the first (``>=``).
    side : {"left", "right"}, optional
        Same as ``right``; may not contradict it.
    sorter : Tensor, optional
        int64 indices that sort each row of an unsorted ``sorted_sequence`` (as from
        ``argsort``). On the metal backend out-of-range entries are clamped, not checked (a
        check would read the device).
    out : Tensor, optional
        Tensor to write the result into.

    Returns
    -------
    Tensor
        The shape of ``values``; int64, or int32 with ``out_int32``. NaN values go after every
        element, as in torch.

    Examples
    --------
    >>> import torch
    >>> from mpslinalg import ops
    >>> ops.searchsorted(torch.tensor([1.0, 3.0, 5.0]), torch.tensor([3.0, 6.0, float("nan")]))
    tensor([1, 3, 3])
    >>> ops.searchsorted(torch.tensor([1.0, 3.0, 5.0]), 3.0, side="right")
    tensor(2)
    """


@searchsorted_decl.public(torch.bucketize, torch_name="bucketize", fast_dtypes=_REAL_DTYPES,
                          prepare=_prepare_bucketize,
                          casting=INDEX)
def bucketize(input: Tensor | float, boundaries: Tensor, *, out_int32: bool = False,
              right: bool = False, out: Tensor | None = None) -> Tensor:
    """Index of the bucket of each element of ``input``; like `torch.bucketize`.

    Parameters
    ----------
    input : Tensor or float
        Any shape, or a number.
    boundaries : Tensor
        1-D, increasing.
    out_int32 : bool, optional
        int32 indices instead of int64.
    right : bool, optional
        ``False``: ``boundaries[i-1] < x <= boundaries[i]``; ``True``:
        ``boundaries[i-1] <= x < boundaries[i]``.
    out : Tensor, optional
        Tensor to write the result into.

    Returns
    -------
    Tensor
        The shape of ``input``; int64, or int32 with ``out_int32``.

    Examples
    --------
    >>> import torch
    >>> from mpslinalg import ops
    >>> ops.bucketize(torch.tensor([0.5, 1.0, 9.0]), torch.tensor([1.0, 2.0]))
    tensor([0, 0, 2])
    """
