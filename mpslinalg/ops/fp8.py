"""fp8: ``scaled_mm`` with `torch.nn.functional.scaled_mm` semantics and ``to_float8``.

Ops ``mpslinalg::ops_scaled_mm`` and ``mpslinalg::ops_fp8_encode`` (``metal/ops/fp8.metal``).
The Metal kernels decode float8_e4m3fn / float8_e5m2 bytes in registers and accumulate in
float32; the matrix product is the gemv-shaped kernel of `mpslinalg.ops.gemv` (one
simdgroup per output column, up to 8 rows of ``mat_a`` per pass over ``mat_b``), so at decode
shapes (M <= 8) the weight is streamed once, one byte per element.

MPS tensors cannot hold float8 dtypes, so on MPS the fp8 data travels as its raw bytes: a uint8
tensor of the same shape (`float8_storage` makes one from a CPU float8 tensor without a
copy; `to_float8` returns one for MPS input), and ``scaled_mm`` is told the format with
``storage_dtype=``. Nothing goes through a float copy.

Scale layouts are torch's ``_scaled_mm`` checks, applied to ``mat_a`` and to ``mat_b.t()``:

====================  ================================  ================================
recipe                ``scale_a``, ``mat_a`` (M, K)     ``scale_b``, ``mat_b`` (K, N)
====================  ================================  ================================
TensorWise            one element                       one element
RowWise               ``(M, 1)``                        ``(1, N)``
BlockWise1x128        ``(M, ceil(K/128))``              ``(ceil(K/128), N)``
BlockWise128x128      ``(ceil(M/128), ceil(K/128))``    ``(ceil(K/128), ceil(N/128))``
====================  ================================  ================================

float32 scales; any strides (torch's CUDA kernels also demand particular strides; the Metal
kernel reads through the strides given). Recipes may be mixed freely.
"""

from __future__ import annotations

import enum
import functools
import math

import torch
import torch.nn.functional as F
from torch import Tensor

from .._core import checks
from .._core import metal as _metal
from .._core.backend import resolve_backend
from .._core.metal import launch
from .._core.op import Op
from .gemv import gemv_grid, rows_per_simdgroup, vec4_rows

__all__ = ["ScalingType", "float8_storage", "from_float8", "scaled_mm", "to_float8"]

_SOURCE = "ops/fp8.metal"


class _ScalingType(enum.Enum):
    """The scaling recipes of `torch.nn.functional.scaled_mm` (same names and values), for
    torch versions that do not define ``torch.nn.functional.ScalingType``."""

    TensorWise = 0
    RowWise = 1
    BlockWise1x16 = 2
    BlockWise1x32 = 3
    BlockWise1x128 = 4
    BlockWise128x128 = 5


#: torch's own enum where the installed torch has one, else an enum with its names and values.
ScalingType = getattr(F, "ScalingType", _ScalingType)

TENSORWISE, ROWWISE, BLOCK_1X128, BLOCK_128X128 = 0, 1, 4, 5
SUPPORTED_RECIPES = {TENSORWISE: "TensorWise", ROWWISE: "RowWise",
                     BLOCK_1X128: "BlockWise1x128", BLOCK_128X128: "BlockWise128x128"}
#: Side of a scale block of the blockwise recipes (kGemvStep in metal/ops/gemv.h).
BLOCK = 128
#: Format codes of the kernels (kFp8E4M3FN, kFp8E5M2 in metal/ops/fp8.h).
FP8_FORMATS = {torch.float8_e4m3fn: 0, torch.float8_e5m2: 1}
FP8_BY_CODE = {code: dtype for dtype, code in FP8_FORMATS.items()}
OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
#: Fields of the kernels' parameter structs, in order (each an int64).
SCALED_MM_PARAMS = ("m", "n", "k", "a_row", "a_col", "b_row", "b_col", "a_div", "a_s0", "a_s1",
                    "b_div", "b_s0", "b_s1", "a_format", "b_format", "bias_step", "has_bias",
                    "b_vec4")
CONVERT_PARAMS = ("rows", "cols", "x_row", "x_col", "row_div", "col_div", "s0", "s1", "format",
                  "e4m3_overflow_nan")
_CONVERT_GROUP = (32, 8)


def _recipe_value(fn: str, name: str, recipe) -> int:
    if isinstance(recipe, (list, tuple)):
        if len(recipe) != 1:
            raise ValueError(f"mpslinalg.{fn}: {name} must be one scaling recipe, got {recipe!r}")
        recipe = recipe[0]
    value = getattr(recipe, "value", recipe)
    if not isinstance(value, int) or value not in SUPPORTED_RECIPES:
        names = ", ".join(SUPPORTED_RECIPES.values())
        raise ValueError(f"mpslinalg.{fn}: {name} must be one of ScalingType.{{{names}}}, got "
                         f"{recipe!r}")
    return value


def _fp8_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def float8_storage(x: Tensor) -> Tensor:
    """The raw bytes of a float8 tensor: a uint8 view of the same shape, no copy.

    This is how fp8 data reaches MPS, which cannot hold float8 dtypes:
    ``float8_storage(w8).to("mps")``, then ``scaled_mm(..., storage_dtype=w8.dtype)``.

    Parameters
    ----------
    x : Tensor
        float8_e4m3fn or float8_e5m2.

    Returns
    -------
    Tensor
        uint8, sharing ``x``'s memory.

    Examples
    --------
    >>> import torch
    >>> from mpslinalg.ops import float8_storage
    >>> float8_storage(torch.tensor([1.0, -2.0]).to(torch.float8_e4m3fn))
    tensor([ 56, 192], dtype=torch.uint8)
    """
    x = checks.check_tensor("float8_storage", "x", x)
    if x.dtype not in FP8_FORMATS:
        raise TypeError(f"mpslinalg.float8_storage: expected a float8_e4m3fn or float8_e5m2 "
                        f"tensor, got {_fp8_name(x.dtype)}")
    return x.view(torch.uint8)


# ---------------------------------------------------------------- encoding (to_float8)


def _expand_scale(scale: Tensor, rows: int, cols: int, row_div: int, col_div: int) -> Tensor:
    """The scale of every element (rows, cols): scale[i // row_div, j // col_div]."""
    i = torch.arange(rows, device=scale.device) // row_div
    j = torch.arange(cols, device=scale.device) // col_div
    return scale[i[:, None].clamp_max(scale.shape[0] - 1), j[None, :].clamp_max(scale.shape[1] - 1)]


def _encode_torch(x: Tensor, scale: Tensor, row_div: int, col_div: int, fmt: int) -> Tensor:
    full = _expand_scale(scale, x.shape[0], x.shape[1], row_div, col_div)
    return (x.float() / full).to(FP8_BY_CODE[fmt]).view(torch.uint8)


@functools.cache
def e4m3_overflow_is_nan() -> bool:
    """Whether the installed torch encodes float8_e4m3fn overflow and infinities as NaN (torch
    2.11) rather than saturating them to +-448 (torch 2.13): the Metal encoder follows it."""
    code = torch.tensor([math.inf]).to(torch.float8_e4m3fn).view(torch.uint8).item()
    return code & 0x7F == 0x7F


def _convert_metal(op: str, x: Tensor, scale: Tensor, row_div: int, col_div: int, fmt: int,
                   out_dtype: torch.dtype, kernel_dtype: torch.dtype) -> Tensor:
    rows, cols = x.shape
    out = torch.empty((rows, cols), dtype=out_dtype, device=x.device)
    if out.numel() == 0:
        return out
    fn = "to_float8" if op == "fp8_encode" else "from_float8"
    kernel = _metal.kernel(_SOURCE, op, kernel_dtype, x.device, fn=fn)
    params = [rows, cols, x.stride(0), x.stride(1), row_div, col_div, scale.stride(0),
              scale.stride(1), fmt, int(e4m3_overflow_is_nan())]
    gx, gy = _CONVERT_GROUP
    launch(kernel, x, scale, out, params,
           threads=[_metal.ceil_div(cols, gx) * gx, _metal.ceil_div(rows, gy) * gy],
           group_size=[gx, gy])
    return out


def _encode_metal(x: Tensor, scale: Tensor, row_div: int, col_div: int, fmt: int) -> Tensor:
    return _convert_metal("fp8_encode", x, scale, row_div, col_div, fmt, torch.uint8, x.dtype)


def _decode_metal(data: Tensor, scale: Tensor, row_div: int, col_div: int, fmt: int,
                  dtype: torch.dtype) -> Tensor:
    return _convert_metal("fp8_decode", data, scale, row_div, col_div, fmt, dtype, dtype)


def _decode_torch(data: Tensor, scale: Tensor, row_div: int, col_div: int, fmt: int,
                  dtype: torch.dtype) -> Tensor:
    full = _expand_scale(scale, data.shape[0], data.shape[1], row_div, col_div)
    return (data.view(FP8_BY_CODE[fmt]).float() * full).to(dtype)


#: (rows, cols) in dtype = decode(bytes) * scale[i // row_div, j // col_div], rounded once.
fp8_decode_op = Op(
    "ops_fp8_decode",
    "(Tensor data, Tensor scale, int row_div, int col_div, int fmt, ScalarType dtype) -> Tensor",
    forward={"metal": _decode_metal, "torch": _decode_torch},
    fake=lambda data, scale, row_div, col_div, fmt, dtype: data.new_empty(data.shape,
                                                                          dtype=dtype))


#: bytes (rows, cols) = fp8(x / scale[i // row_div, j // col_div]), x 2-D, scale 2-D float32.
fp8_encode_op = Op(
    "ops_fp8_encode", "(Tensor x, Tensor scale, int row_div, int col_div, int fmt) -> Tensor",
    forward={"metal": _encode_metal, "torch": _encode_torch},
    fake=lambda x, scale, row_div, col_div, fmt: x.new_empty(x.shape, dtype=torch.uint8))


def _divisors(kind: int, rows: int, cols: int) -> tuple[int, int]:
    """(row_div, col_div): element (i, j) of a (rows, cols) tensor quantised with recipe
    ``kind`` along its rows has the scale [i // row_div, j // col_div]."""
    whole_rows, whole_cols = max(rows, 1), max(cols, 1)
    return {TENSORWISE: (whole_rows, whole_cols), ROWWISE: (1, whole_cols),
            BLOCK_1X128: (1, BLOCK), BLOCK_128X128: (BLOCK, BLOCK)}[kind]


def _block_amax(x: Tensor, rows_per_block: int, cols_per_block: int) -> Tensor:
    """max |x| over blocks (rows_per_block, cols_per_block) of the 2-D float32 ``x``."""
    rows, cols = x.shape
    nr, nc = math.ceil(rows / rows_per_block), math.ceil(cols / cols_per_block)
    padded = F.pad(x.abs(), (0, nc * cols_per_block - cols, 0, nr * rows_per_block - rows))
    return padded.reshape(nr, rows_per_block, nc, cols_per_block).amax(dim=(1, 3))


def to_float8(x: Tensor, dtype: torch.dtype = torch.float8_e4m3fn,
              recipe=ScalingType.TensorWise, *, storage: bool | None = None
              ) -> tuple[Tensor, Tensor]:
    r"""Quantise ``x`` to fp8 with a scaling recipe: ``(data, scale)`` with ``x ~ data * scale``.

    ``scale`` is ``amax / max(dtype)`` over each scaled group (the whole tensor, a row, a 1x128
    or 128x128 block; an all-zero group gets scale 1), and ``data`` is bit for bit torch's own
    cast ``(x.float() / scale).to(dtype)``: round to nearest even; float8_e4m3fn overflow and
    infinities become +-448 (torch 2.13) or NaN (torch 2.11), as the installed torch does;
    float8_e5m2 overflows to +-inf; NaN stays NaN.

    Parameters
    ----------
    x : Tensor
        float32, float16 or bfloat16 (float64 on the torch backend; the quotient is float32).
        Any shape for ``TensorWise``, ``(M, K)`` for the other recipes (groups along the last
        dimension: for ``mat_b`` of ``scaled_mm`` quantise the ``(N, K)`` weight and pass
        ``data.t()``, ``scale.t()``).
    dtype : torch.dtype, optional
        ``torch.float8_e4m3fn`` (default) or ``torch.float8_e5m2``.
    recipe : ScalingType, optional
        ``TensorWise`` (default), ``RowWise``, ``BlockWise1x128`` or ``BlockWise128x128``.
    storage : bool, optional
        Return the data as raw uint8 bytes (`float8_storage`). Default: on MPS tensors,
        which cannot hold float8, and nowhere else.

    Returns
    -------
    data : Tensor
        ``x``'s shape, ``dtype`` (or uint8 bytes).
    scale : Tensor
        float32, in the layout `scaled_mm` takes for ``mat_a``: one element, ``(M, 1)``,
        ``(M, ceil(K/128))`` (column-major, as torch's checks want) or
        ``(ceil(M/128), ceil(K/128))``.

    Examples
    --------
    >>> import torch
    >>> from mpslinalg.ops import ScalingType, to_float8
    >>> data, scale = to_float8(torch.tensor([[1.0, -896.0]]), torch.float8_e4m3fn,
    ...                         ScalingType.RowWise)
    >>> data.float(), scale
    (tensor([[   0.5000, -448.0000]]), tensor([[2.]]))
    """
    fn = "to_float8"
    x = checks.check_tensor(fn, "x", x)
    backend = resolve_backend(x.device, fn)
    checks.check_ops_dtype(fn, backend, x=x)
    if dtype not in FP8_FORMATS:
        raise TypeError(f"mpslinalg.{fn}: dtype must be torch.float8_e4m3fn or "
                        f"torch.float8_e5m2, got {dtype!r}")
    kind = _recipe_value(fn, "recipe", recipe)
    if kind != TENSORWISE and x.dim() != 2:
        raise RuntimeError(f"mpslinalg.{fn}: recipe {SUPPORTED_RECIPES[kind]} needs a 2-D x, "
                           f"got shape {checks.shape_str(x)}")
    x2 = x.reshape(1, -1) if kind == TENSORWISE else x
    fmax = torch.finfo(dtype).max
    rows, cols = x2.shape
    xf = x2.detach().float()
    row_div, col_div = _divisors(kind, rows, cols)
    if xf.numel():
        amax = _block_amax(xf, row_div, col_div)
    else:
        amax = xf.new_zeros(_expected_scale_shape(kind, rows, cols, True) or (1, 1))
    if kind == BLOCK_1X128:
        amax = amax.t().contiguous().t()  # torch wants (M, K/128) with stride (1, M)
    # fmax as a tensor on amax's device: torch's CUDA division by a Python scalar multiplies
    # by its rounded reciprocal, whose last bit moves x / scale off the exact fp8 ties that
    # bfloat16 inputs often hit (the CPU rounds amax / fmax once).
    scale = torch.where(amax > 0, amax / amax.new_full((), fmax), torch.ones_like(amax))
    data = fp8_encode_op(x2.detach(), scale, row_div, col_div, FP8_FORMATS[dtype], backend,
                         False, "")
    data = data.reshape(x.shape)
    if storage is None:
        storage = x.device.type == "mps"
    if not storage and x.device.type == "mps":
        raise TypeError(f"mpslinalg.{fn}: MPS tensors cannot hold {_fp8_name(dtype)}; use "
                        "storage=True (the default on MPS) for the uint8 bytes")
    if not storage:
        data = data.view(dtype)
    if kind == TENSORWISE:
        scale = scale.reshape(())
    return data, scale


def from_float8(data: Tensor, scale: Tensor, recipe=ScalingType.TensorWise,
                dtype: torch.dtype = torch.float32, *, storage_dtype: torch.dtype | None = None
                ) -> Tensor:
    r"""Dequantise: ``data * scale`` in ``dtype``, the inverse of `to_float8`.

    Parameters
    ----------
    data : Tensor
        float8_e4m3fn / float8_e5m2 (or its uint8 storage with ``storage_dtype``); any shape for
        ``TensorWise``, ``(M, K)`` otherwise.
    scale : Tensor
        float32 scales in the layout `to_float8` returns for ``recipe``.
    recipe : ScalingType, optional
        ``TensorWise`` (default), ``RowWise``, ``BlockWise1x128`` or ``BlockWise128x128``.
    dtype : torch.dtype, optional
        float32 (default), float16 or bfloat16: the decoded value times its scale, in float32,
        rounded once.
    storage_dtype : torch.dtype, optional
        The fp8 format of uint8 ``data``.

    Returns
    -------
    Tensor
        ``data``'s shape, ``dtype``.

    Examples
    --------
    >>> import torch
    >>> from mpslinalg.ops import from_float8, to_float8
    >>> from_float8(*to_float8(torch.tensor([0.5, -4.0, 1.0])))
    tensor([ 0.5000, -4.0000,  1.0000])
    """
    fn = "from_float8"
    raw, fmt = _fp8_operand(fn, "data", data, storage_dtype)
    kind = _recipe_value(fn, "recipe", recipe)
    if kind != TENSORWISE and raw.dim() != 2:
        raise RuntimeError(f"mpslinalg.{fn}: recipe {SUPPORTED_RECIPES[kind]} needs 2-D data, "
                           f"got shape {checks.shape_str(raw)}")
    if dtype not in OUT_DTYPES:
        raise TypeError(f"mpslinalg.{fn}: dtype must be float32, float16 or bfloat16, got "
                        f"{dtype!r}")
    raw2 = raw.reshape(1, -1) if kind == TENSORWISE else raw
    scale2 = _check_scale(fn, "scale", scale, kind, raw2, True)
    checks.check_same_device(fn, data=raw2, scale=scale2)
    backend = resolve_backend(raw.device, fn)
    out = fp8_decode_op(raw2, scale2, *_divisors(kind, *raw2.shape), fmt, dtype, backend, False,
                        "")
    return out.reshape(raw.shape)


# ---------------------------------------------------------------- scaled_mm


def _scale_layout(kind: int, scale: Tensor, rows_first: bool) -> tuple[int, int, int]:
    """(div, stride of the M/N index, stride of the K block) of a scale tensor, for A
    (``rows_first``: scale indexed (i, kblock)) or B (indexed (kblock, j))."""
    if kind == TENSORWISE:
        return 1, 0, 0
    s_mn, s_k = (scale.stride(0), scale.stride(1)) if rows_first else (scale.stride(1),
                                                                        scale.stride(0))
    if kind == ROWWISE:
        return 1, s_mn, 0
    return (1 if kind == BLOCK_1X128 else BLOCK), s_mn, s_k


def _scaled_mm_metal(a: Tensor, b: Tensor, scale_a: Tensor, recipe_a: int, scale_b: Tensor,
                     recipe_b: int, bias: Tensor | None, out_dtype: torch.dtype, format_a: int,
                     format_b: int) -> Tensor:
    m, k = a.shape
    n = b.shape[1]
    out = torch.empty((m, n), dtype=out_dtype, device=a.device)
    if m == 0 or n == 0:
        return out
    rows = rows_per_simdgroup(m)
    kernel = _metal.kernel(_SOURCE, "scaled_mm", out_dtype, a.device, fn="scaled_mm", rows=rows)
    a_div, a_s0, a_s1 = _scale_layout(recipe_a, scale_a, True)
    b_div, b_s1, b_s0 = _scale_layout(recipe_b, scale_b, False)
    has_bias = bias is not None
    params = [m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), a_div, a_s0, a_s1,
              b_div, b_s0, b_s1, format_a, format_b, bias.stride(0) if has_bias else 0,
              int(has_bias), vec4_rows(b, b.stride(0), b.stride(1))]
    launch(kernel, a, b, scale_a, scale_b, bias if has_bias else out, out, params,
           **gemv_grid(m, n, rows))
    return out


def _decoded(bytes_: Tensor, fmt: int, scale: Tensor, kind: int, rows_first: bool) -> Tensor:
    """float32 values of fp8 bytes times their scales (the reference composition)."""
    values = bytes_.view(FP8_BY_CODE[fmt]).float()
    if rows_first:
        return values * _expand_scale(scale, *values.shape, *_divisors(kind, *values.shape))
    # B (K, N) is quantised along its columns: the divisors of its transpose, swapped.
    col_div, row_div = _divisors(kind, values.shape[1], values.shape[0])
    return values * _expand_scale(scale, *values.shape, row_div, col_div)


#: torch's CUDA scaled_mm (cuBLASLt / CUTLASS fp8) wants K and N multiples of this.
_TORCH_CUDA_FP8_ALIGN = 16


def _torch_alignment(device: torch.device) -> int:
    return _TORCH_CUDA_FP8_ALIGN if device.type == "cuda" else 1


def _torch_scaled_mm(a, b, scale_a, recipe, scale_b, bias, out_dtype, format_a, format_b):
    """F.scaled_mm with one TensorWise / RowWise ``recipe`` for both operands, in the layout
    torch's CUDA kernels require: ``a`` row-major, ``b`` column-major, K and N padded to
    multiples of 16 with zero codes (which add nothing; the padded columns are cut off)."""
    n = b.shape[1]
    align = _torch_alignment(a.device)
    pad_k, pad_n = -a.shape[1] % align, -n % align
    if align > 1:
        a = F.pad(a, (0, pad_k)).contiguous()
        b = F.pad(b.t(), (0, pad_k, 0, pad_n)).contiguous().t()
        if recipe == ScalingType.RowWise:
            scale_b = F.pad(scale_b, (0, pad_n), value=1.0)
        if bias is not None:
            bias = F.pad(bias, (0, pad_n))
    out = F.scaled_mm(a.view(FP8_BY_CODE[format_a]), b.view(FP8_BY_CODE[format_b]),
                      scale_a.contiguous(), recipe, scale_b.contiguous(), recipe, bias=bias,
                      output_dtype=out_dtype)
    return out[:, :n].contiguous() if pad_n else out


def _scaled_mm_torch(a, b, scale_a, recipe_a, scale_b, recipe_b, bias, out_dtype, format_a,
                     format_b):
    same = recipe_a == recipe_b and recipe_a in (TENSORWISE, ROWWISE)
    if same and hasattr(F, "scaled_mm") and a.numel() and b.numel():
        recipe = ScalingType.TensorWise if recipe_a == TENSORWISE else ScalingType.RowWise
        try:
            return _torch_scaled_mm(a, b, scale_a, recipe, scale_b, bias, out_dtype, format_a,
                                    format_b)
        except torch.OutOfMemoryError:
            raise
        except (RuntimeError, ValueError):
            # No kernel of this torch for the device (torch 2.11 has none on the CPU), or one
            # that refuses these formats / this output dtype (the rules vary with the version
            # and the GPU): the definition below.
            pass
    # torch has no kernel for this recipe here (blockwise, mixed, or torch < 2.10): the
    # definition, in float32.
    out = _decoded(a, format_a, scale_a, recipe_a, True) @ _decoded(b, format_b, scale_b,
                                                                      recipe_b, False)
    if bias is not None:
        out = out + bias.float()
    return out.to(out_dtype)


#: fp8 bytes a (M, K), b (K, N) with their scales -> (M, N) in out_dtype.
scaled_mm_op = Op(
    "ops_scaled_mm",
    "(Tensor a, Tensor b, Tensor scale_a, int recipe_a, Tensor scale_b, int recipe_b, "
    "Tensor? bias, ScalarType out_dtype, int format_a, int format_b) -> Tensor",
    forward={"metal": _scaled_mm_metal, "torch": _scaled_mm_torch},
    fake=lambda a, b, *rest: a.new_empty((a.shape[0], b.shape[1]), dtype=rest[5]))


def _fp8_operand(fn: str, name: str, x, storage_dtype) -> tuple[Tensor, int]:
    x = checks.check_tensor(fn, name, x)
    if x.dtype in FP8_FORMATS:
        return x.view(torch.uint8), FP8_FORMATS[x.dtype]
    if x.dtype == torch.uint8 and storage_dtype in FP8_FORMATS:
        return x, FP8_FORMATS[storage_dtype]
    if x.dtype == torch.uint8:
        raise TypeError(f"mpslinalg.{fn}: {name} holds raw bytes (uint8); say which format with "
                        "storage_dtype=torch.float8_e4m3fn or torch.float8_e5m2")
    raise TypeError(f"mpslinalg.{fn}: {name} must be float8_e4m3fn or float8_e5m2 (or their "
                    f"uint8 storage), got {_fp8_name(x.dtype)}")


def _expected_scale_shape(kind: int, rows: int, cols: int, is_a: bool) -> tuple[int, ...]:
    """Scale shape for operand (rows, cols) = A (M, K) or B (K, N)."""
    c = math.ceil
    if kind == TENSORWISE:
        return ()
    if is_a:
        return {ROWWISE: (rows, 1), BLOCK_1X128: (rows, c(cols / BLOCK)),
                BLOCK_128X128: (c(rows / BLOCK), c(cols / BLOCK))}[kind]
    return {ROWWISE: (1, cols), BLOCK_1X128: (c(rows / BLOCK), cols),
            BLOCK_128X128: (c(rows / BLOCK), c(cols / BLOCK))}[kind]


def _check_scale(fn: str, name: str, scale, kind: int, operand: Tensor, is_a: bool) -> Tensor:
    scale = checks.check_tensor(fn, name, scale)
    if scale.dtype != torch.float32:
        raise TypeError(f"mpslinalg.{fn}: {name} must be float32, got "
                        f"{_fp8_name(scale.dtype)}")
    want = _expected_scale_shape(kind, *operand.shape, is_a)
    if kind == TENSORWISE:
        if scale.numel() != 1:
            raise ValueError(f"mpslinalg.{fn}: {name} must have one element for TensorWise "
                             f"scaling, got shape {checks.shape_str(scale)}")
        return scale.reshape(1, 1)
    if tuple(scale.shape) != want:
        raise ValueError(f"mpslinalg.{fn}: {name} must have shape {want} for "
                         f"{SUPPORTED_RECIPES[kind]} scaling of a {tuple(operand.shape)} "
                         f"operand, got {checks.shape_str(scale)}")
    return scale


def scaled_mm(mat_a: Tensor, mat_b: Tensor, scale_a: Tensor, scale_recipe_a, scale_b: Tensor,
              scale_recipe_b, swizzle_a=None, swizzle_b=None, bias: Tensor | None = None,
              output_dtype: torch.dtype | None = torch.bfloat16,
              contraction_dim: list[int] | tuple[int, ...] = (), use_fast_accum: bool = False,
              *, storage_dtype: torch.dtype | None = None) -> Tensor:
    r"""``(mat_a * scale_a) @ (mat_b * scale_b) + bias`` from fp8 operands; like
    `torch.nn.functional.scaled_mm`.

    Parameters
    ----------
    mat_a : Tensor
        ``(M, K)`` float8_e4m3fn or float8_e5m2 (or its uint8 storage, see ``storage_dtype``).
    mat_b : Tensor
        ``(K, N)``, same choices (the formats of ``mat_a`` and ``mat_b`` may differ). Any
        strides; ``weight.t()`` of an ``(N, K)`` weight is the fast layout.
    scale_a, scale_b : Tensor
        float32 decoding scales in the layout of the recipe (module docstring table).
    scale_recipe_a, scale_recipe_b : ScalingType
        ``TensorWise``, ``RowWise``, ``BlockWise1x128`` or ``BlockWise128x128`` (or a list of
        one of them), in any combination.
    swizzle_a, swizzle_b : SwizzleType, optional
        Only ``None`` / ``NO_SWIZZLE``.
    bias : Tensor, optional
        ``(N,)`` in ``output_dtype``, added before the output is rounded.
    output_dtype : torch.dtype, optional
        bfloat16 (default), float16 or float32.
    contraction_dim : sequence of int, optional
        Only the default (``mat_a``'s dim 1 with ``mat_b``'s dim 0).
    use_fast_accum : bool, optional
        Accepted for compatibility; the Metal kernels always accumulate in float32.
    storage_dtype : torch.dtype, optional
        The fp8 format of uint8 operands (how fp8 data lives on MPS; see
        `float8_storage`).

    Returns
    -------
    Tensor
        ``(M, N)`` in ``output_dtype``. Not differentiable (as in torch).

    Examples
    --------
    >>> import torch, mpslinalg
    >>> from mpslinalg.ops import ScalingType, scaled_mm, to_float8
    >>> a8, sa = to_float8(torch.tensor([[1., 2.], [4., 8.]]))      # exact in fp8
    >>> w8, sw = to_float8(torch.tensor([[1., 0.], [0., 1.], [1., 1.]]))
    >>> with mpslinalg.use_backend("metal"):
    ...     scaled_mm(a8, w8.t(), sa, ScalingType.TensorWise, sw, ScalingType.TensorWise)
    tensor([[ 1.,  2.,  3.],
            [ 4.,  8., 12.]], dtype=torch.bfloat16)
    """
    fn = "scaled_mm"
    a, format_a = _fp8_operand(fn, "mat_a", mat_a, storage_dtype)
    b, format_b = _fp8_operand(fn, "mat_b", mat_b, storage_dtype)
    checks.check_same_device(fn, mat_a=a, mat_b=b)
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise RuntimeError(f"mpslinalg.{fn}: expected mat_a (M, K) and mat_b (K, N), got "
                           f"{checks.shape_str(a)} and {checks.shape_str(b)}")
    recipe_a = _recipe_value(fn, "scale_recipe_a", scale_recipe_a)
    recipe_b = _recipe_value(fn, "scale_recipe_b", scale_recipe_b)
    for name, swizzle in (("swizzle_a", swizzle_a), ("swizzle_b", swizzle_b)):
        if isinstance(swizzle, (list, tuple)):
            swizzle = swizzle[0] if len(swizzle) == 1 else swizzle
        if swizzle is not None and getattr(swizzle, "value", swizzle) != 0:
            raise ValueError(f"mpslinalg.{fn}: {name} must be None or NO_SWIZZLE, got "
                             f"{swizzle!r}")
    if tuple(contraction_dim) not in ((), (1, 0)):
        raise ValueError(f"mpslinalg.{fn}: only contraction_dim=() (K = mat_a dim 1, mat_b dim "
                         f"0) is supported, got {contraction_dim!r}")
    if output_dtype not in OUT_DTYPES:
        raise TypeError(f"mpslinalg.{fn}: output_dtype must be bfloat16, float16 or float32, "
                        f"got {output_dtype!r}")
    sa = _check_scale(fn, "scale_a", scale_a, recipe_a, a, True)
    sb = _check_scale(fn, "scale_b", scale_b, recipe_b, b, False)
    if bias is not None:
        bias = checks.check_tensor(fn, "bias", bias)
        if bias.shape != (b.shape[1],) or bias.dtype != output_dtype:
            raise ValueError(f"mpslinalg.{fn}: bias must be ({b.shape[1]},) of dtype "
                             f"{_fp8_name(output_dtype)}, got {checks.shape_str(bias)} "
                             f"{_fp8_name(bias.dtype)}")
    checks.check_same_device(fn, mat_a=a, scale_a=sa, scale_b=sb,
                             **({"bias": bias} if bias is not None else {}))
    backend = resolve_backend(a.device, fn)
    return scaled_mm_op(a, b, sa, recipe_a, sb, recipe_b, bias, output_dtype, format_a,
                        format_b, backend, False, "")
