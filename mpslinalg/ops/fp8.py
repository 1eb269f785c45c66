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

``scaled_mm`` accepts the recipe pairs and scale layouts that torch's own shape check accepts
(the meta function of ``aten._scaled_mm_v2``; tests/ops/test_fp8.py compares the two), with
``L4 = round_up(K / 128, 4)``; ``mat_b``'s scale is that of ``mat_b.t()`` (N, K):

================================  ============================  ============================
recipes (a, b)                    ``scale_a``: shape, stride    ``scale_b``: shape, stride
================================  ============================  ============================
TensorWise, TensorWise            one element                   one element
RowWise, RowWise                  ``(M, 1)``, ``(., 1)``        N elements, ``(., 1)``
BlockWise1x128, BlockWise1x128    ``(M, K/128)``, ``(1, M)``    ``(N, K/128)``, ``(1, N)``
BlockWise128x128, BlockWise1x128  ``(L4, M/128)``, ``(1, L4)``  ``(N, K/128)``, ``(1, N)``
BlockWise1x128, BlockWise128x128  ``(M, K/128)``, ``(1, M)``    ``(L4, N/128)``, ``(1, L4)``
================================  ============================  ============================

float32 scales. A blockwise scale of one column may also have stride 1 there. Other pairs
torch's check refuses (RuntimeError); the MX and NVFP4 recipes (``BlockWise1x32``,
``BlockWise1x16``), which it accepts, are not implemented (NotImplementedError). Blockwise
sizes must be multiples of 128: torch's check counts ``K // 128`` blocks, so a partial block
would have no scale (ValueError). The operands themselves may have any strides and sizes
(torch's CUDA kernels want a row-major ``mat_a``, a column-major ``mat_b`` and multiples of 16).
"""

from __future__ import annotations

import enum
import functools
import math

import torch
import torch.nn.functional as F
from torch import Tensor

from .._core import checks, metal_params
from .._core import metal as _metal
from .._core.declare import (
    AS_GIVEN,
    INFERENCE,
    Call,
    Declaration,
    Operand,
    Param,
    Prepared,
    Result,
)
from .._core.metal import launch
from .gemv import gemv_grid, rows_per_simdgroup, vec4_rows

__all__ = ["ScalingType", "SwizzleType", "float8_storage", "from_float8", "scaled_mm",
           "to_float8"]

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


class _SwizzleType(enum.Enum):
    """The scale swizzles of `torch.nn.functional.scaled_mm` (same names and values), for torch
    versions that do not define ``torch.nn.functional.SwizzleType``."""

    NO_SWIZZLE = 0
    SWIZZLE_32_4_4 = 1


#: torch's own enums where the installed torch has them, else enums with their names and values.
ScalingType = getattr(F, "ScalingType", _ScalingType)
SwizzleType = getattr(F, "SwizzleType", _SwizzleType)

TENSORWISE, ROWWISE, BLOCK_1X16, BLOCK_1X32, BLOCK_1X128, BLOCK_128X128 = 0, 1, 2, 3, 4, 5
#: The values of every ScalingType.
RECIPE_VALUES = frozenset(r.value for r in _ScalingType)
SUPPORTED_RECIPES = {TENSORWISE: "TensorWise", ROWWISE: "RowWise",
                     BLOCK_1X128: "BlockWise1x128", BLOCK_128X128: "BlockWise128x128"}
#: The recipe pairs (recipes of mat_a, recipes of mat_b) torch's shape check of
#: ``aten._scaled_mm_v2`` accepts and the kernels implement ...
SCALED_MM_PAIRS = {((TENSORWISE,), (TENSORWISE,)), ((ROWWISE,), (ROWWISE,)),
                   ((BLOCK_1X128,), (BLOCK_1X128,)), ((BLOCK_128X128,), (BLOCK_1X128,)),
                   ((BLOCK_1X128,), (BLOCK_128X128,))}
#: ... and those it accepts that are not implemented: MX (1x32 blocks, float8_e8m0fnu scales),
#: NVFP4 with one or two levels of scales (1x16 blocks), all with swizzled scales.
UNIMPLEMENTED_PAIRS = {((BLOCK_1X32,), (BLOCK_1X32,)): "MX (BlockWise1x32)",
                       ((BLOCK_1X16,), (BLOCK_1X16,)): "NVFP4 (BlockWise1x16)",
                       ((BLOCK_1X16, TENSORWISE), (BLOCK_1X16, TENSORWISE)):
                           "NVFP4 (BlockWise1x16, TensorWise)"}
#: Side of a scale block of the blockwise recipes (kGemvStep in metal/ops/gemv.h).
BLOCK = 128
#: Format codes of the kernels (kFp8E4M3FN, kFp8E5M2 in metal/ops/fp8.h).
FP8_FORMATS = {torch.float8_e4m3fn: 0, torch.float8_e5m2: 1}
FP8_BY_CODE = {code: dtype for dtype, code in FP8_FORMATS.items()}
OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
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


def _recipe_list(fn: str, name: str, recipe) -> tuple[int, ...]:
    """The ScalingType values of a recipe or a list of them (as ``F.scaled_mm`` takes)."""
    recipes = recipe if isinstance(recipe, (list, tuple)) else [recipe]
    values = tuple(getattr(r, "value", r) for r in recipes)
    if not values or not all(isinstance(v, int) and v in RECIPE_VALUES for v in values):
        raise ValueError(f"mpslinalg.{fn}: {name} must be a ScalingType or a list of them, got "
                         f"{recipe!r}")
    return values


def _recipe_names(values: tuple[int, ...]) -> str:
    return ", ".join(_ScalingType(v).name for v in values)


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
    params = metal_params.pack(
        "ops/fp8.h", "Fp8ConvertParams", rows=rows, cols=cols, x_row=x.stride(0),
        x_col=x.stride(1), row_div=row_div, col_div=col_div, s0=scale.stride(0),
        s1=scale.stride(1), format=fmt, e4m3_overflow_nan=e4m3_overflow_is_nan())
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


_BLOCKS = [Param("row_div", "int"), Param("col_div", "int"), Param("fmt", "int")]

#: (rows, cols) in dtype = decode(bytes) * scale[i // row_div, j // col_div], rounded once.
fp8_decode_decl = Declaration(
    "ops_fp8_decode",
    [Operand("codes", 2), Operand("grid", 2, same_dtype=False), *_BLOCKS,
     Param("dtype", "ScalarType")],
    [Result("output", "codes", batch="codes",
            dtype=lambda codes, grid, row_div, col_div, fmt, dtype: dtype)],
    forward={"metal": _decode_metal, "torch": _decode_torch}, dtypes=AS_GIVEN)
fp8_decode_op = fp8_decode_decl.op


#: bytes (rows, cols) = fp8(x / scale[i // row_div, j // col_div]), x 2-D, scale 2-D float32.
fp8_encode_decl = Declaration(
    "ops_fp8_encode", [Operand("x", 2), Operand("scale", 2, same_dtype=False), *_BLOCKS],
    [Result("data", "x", torch.uint8, batch="x")],
    forward={"metal": _encode_metal, "torch": _encode_torch}, dtypes=INFERENCE)
fp8_encode_op = fp8_encode_decl.op


def _divisors(kind: int, rows: int, cols: int) -> tuple[int, int]:
    """(row_div, col_div): element (i, j) of a (rows, cols) tensor quantised with recipe
    ``kind`` along its rows has the scale grid[i // row_div, j // col_div] (`_grid_shape`)."""
    whole_rows, whole_cols = max(rows, 1), max(cols, 1)
    return {TENSORWISE: (whole_rows, whole_cols), ROWWISE: (1, whole_cols),
            BLOCK_1X128: (1, BLOCK), BLOCK_128X128: (BLOCK, BLOCK)}[kind]


def _grid_shape(kind: int, rows: int, cols: int) -> tuple[int, int]:
    """The scale grid of a (rows, cols) tensor quantised along its rows: one scale per group,
    indexed (row group, column group); the kernels read every recipe's scales this way."""
    c = math.ceil
    return {TENSORWISE: (1, 1), ROWWISE: (rows, 1), BLOCK_1X128: (rows, c(cols / BLOCK)),
            BLOCK_128X128: (c(rows / BLOCK), c(cols / BLOCK))}[kind]


def _round_up_4(blocks: int) -> int:
    """torch's ``round_up(K / 128, 4)``: the K blocks of a BlockWise128x128 scale, padded."""
    return -(-blocks // 4) * 4


def _public_scale_shape(kind: int, rows: int, cols: int) -> tuple[int, ...]:
    """The layout of a scale that `to_float8` returns and torch's checks take: the grid,
    except a BlockWise128x128 scale, which torch takes K-major with its K blocks padded to a
    multiple of 4: (round_up(K blocks, 4), row blocks)."""
    if kind == TENSORWISE:
        return ()
    grid = _grid_shape(kind, rows, cols)
    return (_round_up_4(grid[1]), grid[0]) if kind == BLOCK_128X128 else grid


def _public_scale(kind: int, grid: Tensor) -> Tensor:
    """A scale grid in the layout of `_public_scale_shape`, column-major where torch's checks
    want it (the padding K blocks of BlockWise128x128 hold ones)."""
    if kind == TENSORWISE:
        return grid.reshape(())
    if kind == BLOCK_1X128:
        # (M, K/128) with stride (1, M), also for M = 1 (t().contiguous() keeps a size-1 view)
        return grid.new_empty(grid.shape[::-1]).t().copy_(grid)
    if kind == BLOCK_128X128:
        row_blocks, k_blocks = grid.shape
        padded = grid.new_ones(row_blocks, _round_up_4(k_blocks))
        padded[:, :k_blocks] = grid
        return padded.t()  # (L4, M/128) with stride (1, L4)
    return grid


def _grid(kind: int, scale: Tensor, k_blocks: int) -> Tensor:
    """The scale grid (`_grid_shape`) of a scale in its public layout (a view)."""
    if kind == TENSORWISE:
        return scale.reshape(1, 1)
    if kind == ROWWISE:
        return scale.reshape(-1, 1)
    return scale[:k_blocks].t() if kind == BLOCK_128X128 else scale


def _block_amax(x: Tensor, rows_per_block: int, cols_per_block: int) -> Tensor:
    """max |x| over blocks (rows_per_block, cols_per_block) of the 2-D float32 ``x``."""
    rows, cols = x.shape
    nr, nc = math.ceil(rows / rows_per_block), math.ceil(cols / cols_per_block)
    padded = F.pad(x.abs(), (0, nc * cols_per_block - cols, 0, nr * rows_per_block - rows))
    return padded.reshape(nr, rows_per_block, nc, cols_per_block).amax(dim=(1, 3))


def _prepare_to_float8(call: Call, x: Tensor, dtype: torch.dtype, recipe,
                       storage: bool | None) -> Prepared:
    fn = call.fn
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
        amax = xf.new_zeros(_grid_shape(kind, rows, cols))
    # fmax as a tensor on amax's device: torch's CUDA division by a Python scalar multiplies
    # by its rounded reciprocal, whose last bit moves x / scale off the exact fp8 ties that
    # bfloat16 inputs often hit (the CPU rounds amax / fmax once).
    scale = torch.where(amax > 0, amax / amax.new_full((), fmax), torch.ones_like(amax))
    if storage is None:
        storage = x.device.type == "mps"
    if not storage and x.device.type == "mps":
        raise TypeError(f"mpslinalg.{fn}: MPS tensors cannot hold {_fp8_name(dtype)}; use "
                        "storage=True (the default on MPS) for the uint8 bytes")

    def finish(data: Tensor) -> tuple[Tensor, Tensor]:
        data = data.reshape(x.shape)
        return data if storage else data.view(dtype), _public_scale(kind, scale)

    return Prepared((x2.detach(), scale, row_div, col_div, FP8_FORMATS[dtype]), finish, whole=True)


@fp8_encode_decl.public(None, prepare=_prepare_to_float8)
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
        ``data.t()`` with ``scale`` as it is).
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
        float32, in the layout `scaled_mm` takes (torch's): one element, ``(M, 1)``,
        ``(M, ceil(K/128))`` column-major, or for BlockWise128x128
        ``(round_up(ceil(K/128), 4), ceil(M/128))`` column-major (K-major, the padding K
        blocks hold ones).

    Examples
    --------
    >>> import torch
    >>> from mpslinalg.ops import ScalingType, to_float8
    >>> data, scale = to_float8(torch.tensor([[1.0, -896.0]]), torch.float8_e4m3fn,
    ...                         ScalingType.RowWise)
    >>> data.float(), scale
    (tensor([[   0.5000, -448.0000]]), tensor([[2.]]))
    """


def _prepare_from_float8(call: None, data: Tensor, scale: Tensor, recipe, dtype: torch.dtype,
                         storage_dtype: torch.dtype | None) -> Prepared:
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
    scale2 = _grid(kind, _check_scale(fn, "scale", scale, kind, *raw2.shape),
                   math.ceil(raw2.shape[1] / BLOCK))
    checks.check_same_device(fn, data=raw2, scale=scale2)
    return Prepared((raw2, scale2, *_divisors(kind, *raw2.shape), fmt, dtype),
                    lambda out: (out.reshape(raw.shape),))




@fp8_decode_decl.public(None, prepare=_prepare_from_float8)
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


# ---------------------------------------------------------------- scaled_mm


def _scale_layout(kind: int, grid: Tensor) -> tuple[int, int, int]:
    """(row div, row group stride, K block stride) of a scale grid, as the kernel reads it."""
    if kind == TENSORWISE:
        return 1, 0, 0
    if kind == ROWWISE:
        return 1, grid.stride(0), 0
    return (1 if kind == BLOCK_1X128 else BLOCK), grid.stride(0), grid.stride(1)


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
    a_div, a_s0, a_s1 = _scale_layout(recipe_a, scale_a)
    b_div, b_s1, b_s0 = _scale_layout(recipe_b, scale_b)
    has_bias = bias is not None
    params = metal_params.pack(
        "ops/fp8.h", "ScaledMmParams", m=m, n=n, k=k, a_row=a.stride(0), a_col=a.stride(1),
        b_row=b.stride(0), b_col=b.stride(1), a_div=a_div, a_s0=a_s0, a_s1=a_s1, b_div=b_div,
        b_s0=b_s0, b_s1=b_s1, a_format=format_a, b_format=format_b,
        bias_step=bias.stride(0) if has_bias else 0, has_bias=has_bias,
        b_vec4=vec4_rows(b, b.stride(0), b.stride(1)))
    launch(kernel, a, b, scale_a, scale_b, bias if has_bias else out, out, params,
           **gemv_grid(m, n, rows))
    return out


def _decoded(bytes_: Tensor, fmt: int, grid: Tensor, kind: int) -> Tensor:
    """float32 values of the fp8 bytes of an operand (rows, K) (``mat_a`` or ``mat_b.t()``)
    times their scales (the reference composition)."""
    values = bytes_.view(FP8_BY_CODE[fmt]).float()
    return values * _expand_scale(grid, *values.shape, *_divisors(kind, *values.shape))


#: torch's CUDA scaled_mm (cuBLASLt / CUTLASS fp8) wants K and N multiples of this.
_TORCH_CUDA_FP8_ALIGN = 16


def _torch_alignment(device: torch.device) -> int:
    return _TORCH_CUDA_FP8_ALIGN if device.type == "cuda" else 1


def _torch_scaled_mm(a, b, scale_a, recipe, scale_b, bias, out_dtype, format_a, format_b):
    """F.scaled_mm with one TensorWise / RowWise ``recipe`` for both operands, in the layout
    torch's CUDA kernels require: ``a`` row-major, ``b`` column-major, K and N padded to
    multiples of 16 with zero codes (which add nothing; the padded columns are cut off)."""
    n = b.shape[1]
    scale_b = scale_b.reshape(1, -1)  # the grid of a RowWise scale_b is (N, 1)
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
    out = _decoded(a, format_a, scale_a, recipe_a) @ _decoded(b.t(), format_b, scale_b,
                                                               recipe_b).t()
    if bias is not None:
        out = out + bias.float()
    return out.to(out_dtype)


#: fp8 bytes a (M, K), b (K, N) with their scale grids (of the recipes' shapes) -> (M, N) in
#: out_dtype.
scaled_mm_decl = Declaration(
    "ops_scaled_mm",
    [Operand("a", 2), Operand("b", 2), Operand("scale_a", None, same_dtype=False),
     Param("recipe_a", "int"), Operand("scale_b", None, same_dtype=False),
     Param("recipe_b", "int"), Operand("bias", 1, same_dtype=False, optional=True),
     Param("out_dtype", "ScalarType"), Param("format_a", "int"), Param("format_b", "int")],
    [Result("output", lambda a, b, *rest: (a[0], b[1]), batch="a",
            dtype=lambda *args: args[7])],
    forward={"metal": _scaled_mm_metal, "torch": _scaled_mm_torch}, dtypes=AS_GIVEN)
scaled_mm_op = scaled_mm_decl.op


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


def _check_scale(fn: str, name: str, scale, kind: int, rows: int, cols: int) -> Tensor:
    """A scale of `to_float8`'s layout for (rows, cols) data."""
    scale = checks.check_tensor(fn, name, scale)
    if scale.dtype != torch.float32:
        raise TypeError(f"mpslinalg.{fn}: {name} must be float32, got "
                        f"{_fp8_name(scale.dtype)}")
    if kind == TENSORWISE:
        if scale.numel() != 1:
            raise ValueError(f"mpslinalg.{fn}: {name} must have one element for TensorWise "
                             f"scaling, got shape {checks.shape_str(scale)}")
        return scale
    want = _public_scale_shape(kind, rows, cols)
    if tuple(scale.shape) != want:
        raise ValueError(f"mpslinalg.{fn}: {name} must have shape {want} for "
                         f"{SUPPORTED_RECIPES[kind]} scaling of a {(rows, cols)} operand, got "
                         f"{checks.shape_str(scale)}")
    return scale


def _single_scale(fn: str, name: str, scale) -> Tensor:
    """The scale tensor of a recipe of one scale (``F.scaled_mm`` also takes a list)."""
    if isinstance(scale, (list, tuple)):
        if len(scale) != 1:
            raise ValueError(f"mpslinalg.{fn}: {name} must be one tensor or a list of one for "
                             f"these recipes, got {len(scale)} tensors")
        scale = scale[0]
    return checks.check_tensor(fn, name, scale)


def _check_mm_scale(fn: str, name: str, scale: Tensor, kind: int, rows: int, k: int,
                    is_a: bool) -> Tensor:
    """torch's shape check of ``aten._scaled_mm_v2`` for the scale of one operand (rows, K),
    ``mat_a`` or ``mat_b.t()`` (``_check_scaled_mm_sizes_v2`` of torch/_meta_registrations.py,
    torch 2.13; with its exception types), then the scale's grid (`_grid_shape`)."""
    got = (f"got {checks.shape_str(scale)} {_fp8_name(scale.dtype)} with stride "
           f"{tuple(scale.stride())}")
    recipe = SUPPORTED_RECIPES[kind]
    if kind == TENSORWISE:
        if scale.numel() != 1 or scale.dtype != torch.float32:
            raise ValueError(f"mpslinalg.{fn}: {name} must have one float32 element for "
                             f"TensorWise scaling, {got}")
        return scale.reshape(1, 1)
    if scale.dim() < 2:  # torch reads size(1) / stride(1)
        raise IndexError(f"mpslinalg.{fn}: {name} must have two dimensions for {recipe} "
                         f"scaling, {got}")
    if kind == ROWWISE:
        # torch checks the shape of scale_a and the element count of both
        shape_ok = not is_a or (scale.shape[0] == rows and scale.shape[1] == 1)
        if (not shape_ok or scale.numel() != rows or scale.dtype != torch.float32
                or scale.stride(1) != 1):
            want = f"shape ({rows}, 1)" if is_a else f"{rows} elements"
            raise ValueError(f"mpslinalg.{fn}: {name} must have {want} of float32 and stride 1 "
                             f"in dimension 1 for RowWise scaling, {got}")
        return scale.reshape(rows, 1)
    blocks = k // BLOCK
    want = (rows, blocks) if kind == BLOCK_1X128 else (_round_up_4(blocks), rows // BLOCK)
    lead = want[0]
    strides_ok = scale.stride(0) == 1 and (scale.stride(1) == lead or (
        scale.shape[1] == 1 and scale.stride(1) == 1))
    if (scale.dim() != 2 or scale.dtype != torch.float32 or tuple(scale.shape) != want
            or not strides_ok):
        operand = f"mat_a ({rows}, {k})" if is_a else f"mat_b.t() ({rows}, {k})"
        padded = f" (L4 = round_up(K / 128, 4) = {lead})" if kind == BLOCK_128X128 else ""
        raise RuntimeError(f"mpslinalg.{fn}: {name} must be float32 of shape {want} and "
                           f"stride (1, {lead}) for {recipe} scaling of {operand}{padded}, {got}")
    if k % BLOCK or (kind == BLOCK_128X128 and rows % BLOCK):
        dims = "K" if kind == BLOCK_1X128 else f"K and the {'M' if is_a else 'N'} of {name}"
        raise ValueError(f"mpslinalg.{fn}: {recipe} scaling needs {dims} to be multiples of "
                         f"{BLOCK}: torch's scale layout has whole blocks only, which leaves "
                         f"part of the ({rows}, {k}) operand without a scale")
    return _grid(kind, scale, blocks)


def _check_swizzle(fn: str, name: str, swizzle) -> None:
    """A SwizzleType, a list of them, or None. torch's check reads swizzles for the MX and
    NVFP4 recipes only; so does this one, which implements neither."""
    swizzles = swizzle if isinstance(swizzle, (list, tuple)) else [swizzle]
    for one in swizzles:
        if one is not None and getattr(one, "value", one) not in (0, 1):
            raise ValueError(f"mpslinalg.{fn}: {name} must be None or a SwizzleType, got "
                             f"{swizzle!r}")


def _prepare_scaled_mm(call: None, mat_a, mat_b, scale_a, scale_recipe_a, scale_b,
                       scale_recipe_b, swizzle_a, swizzle_b, bias, output_dtype,
                       contraction_dim, use_fast_accum, storage_dtype) -> tuple:
    fn = "scaled_mm"
    a, format_a = _fp8_operand(fn, "mat_a", mat_a, storage_dtype)
    b, format_b = _fp8_operand(fn, "mat_b", mat_b, storage_dtype)
    checks.check_same_device(fn, mat_a=a, mat_b=b)
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise RuntimeError(f"mpslinalg.{fn}: expected mat_a (M, K) and mat_b (K, N), got "
                           f"{checks.shape_str(a)} and {checks.shape_str(b)}")
    recipes = (_recipe_list(fn, "scale_recipe_a", scale_recipe_a),
               _recipe_list(fn, "scale_recipe_b", scale_recipe_b))
    _check_swizzle(fn, "swizzle_a", swizzle_a)
    _check_swizzle(fn, "swizzle_b", swizzle_b)
    if recipes in UNIMPLEMENTED_PAIRS:
        raise NotImplementedError(f"mpslinalg.{fn}: {UNIMPLEMENTED_PAIRS[recipes]} scaling is "
                                  "not implemented")
    if recipes not in SCALED_MM_PAIRS:
        raise RuntimeError(
            f"mpslinalg.{fn}: invalid scaling configuration ({_recipe_names(recipes[0])}) x "
            f"({_recipe_names(recipes[1])}); the pairs are TensorWise x TensorWise, RowWise x "
            "RowWise, BlockWise1x128 x BlockWise1x128 and BlockWise1x128 with "
            "BlockWise128x128 either way round")
    (recipe_a,), (recipe_b,) = recipes
    if tuple(contraction_dim) not in ((), (1, 0)):
        raise ValueError(f"mpslinalg.{fn}: only contraction_dim=() (K = mat_a dim 1, mat_b dim "
                         f"0) is supported, got {contraction_dim!r}")
    if output_dtype not in OUT_DTYPES:
        raise TypeError(f"mpslinalg.{fn}: output_dtype must be bfloat16, float16 or float32, "
                        f"got {output_dtype!r}")
    (m, k), n = a.shape, b.shape[1]
    sa = _check_mm_scale(fn, "scale_a", _single_scale(fn, "scale_a", scale_a), recipe_a, m, k,
                         True)
    sb = _check_mm_scale(fn, "scale_b", _single_scale(fn, "scale_b", scale_b), recipe_b, n, k,
                         False)
    if bias is not None:
        bias = checks.check_tensor(fn, "bias", bias)
        if bias.shape != (n,) or bias.dtype != output_dtype:
            raise ValueError(f"mpslinalg.{fn}: bias must be ({n},) of dtype "
                             f"{_fp8_name(output_dtype)}, got {checks.shape_str(bias)} "
                             f"{_fp8_name(bias.dtype)}")
    checks.check_same_device(fn, mat_a=a, scale_a=sa, scale_b=sb,
                             **({"bias": bias} if bias is not None else {}))
    return a, b, sa, recipe_a, sb, recipe_b, bias, output_dtype, format_a, format_b


@scaled_mm_decl.public(None, prepare=_prepare_scaled_mm)
def scaled_mm(mat_a: Tensor, mat_b: Tensor, scale_a: Tensor | list[Tensor], scale_recipe_a,
              scale_b: Tensor | list[Tensor], scale_recipe_b, swizzle_a=None, swizzle_b=None,
              bias: Tensor | None = None, output_dtype: torch.dtype | None = torch.bfloat16,
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
    scale_a, scale_b : Tensor or list of one Tensor
        float32 decoding scales, in the layouts torch's check of ``F.scaled_mm`` accepts
        (module docstring table): for ``mat_b = weight.t()``, the scale `to_float8` gives for
        ``weight`` as it is (RowWise: or its transpose ``(1, N)``, which torch's CPU kernel
        needs).
    scale_recipe_a, scale_recipe_b : ScalingType or list of ScalingType
        The pairs torch accepts: ``TensorWise`` twice, ``RowWise`` twice, ``BlockWise1x128``
        twice, or ``BlockWise1x128`` with ``BlockWise128x128`` either way round. Other pairs
        raise RuntimeError; the MX and NVFP4 recipes NotImplementedError.
    swizzle_a, swizzle_b : SwizzleType, optional
        Accepted and not read, as torch's check does for these recipes.
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
