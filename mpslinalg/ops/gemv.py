"""``linear``: `torch.nn.functional.linear` with Metal gemv kernels for decode shapes.

Op ``mpslinalg::ops_linear``. On the metal backend every call runs ``metal/ops/gemv.metal``: one
simdgroup per output feature streams its weight row once for up to 8 rows of ``x`` (the tokens
of a decode step), accumulating in float32 and adding the bias before the one rounding to the
output dtype. Larger inputs run the same kernel over blocks of 8 rows, which reads the weight
once per block: it is correct for any M but meant for decode shapes; for prefill-sized M
(compute-bound GEMMs) torch's own matmul (``mpslinalg.use_backend("torch")``) is the faster
choice, and this module does not pretend otherwise. Leading dimensions are flattened into rows
by a view, so ``(B, 1, K)`` inputs take the same kernel as ``(B, K)``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from .._core import checks, metal_params
from .._core import metal as _metal
from .._core.declare import INFERENCE, Call, Declaration, Operand, Prepared, Result
from .._core.metal import SIMD_WIDTH, launch

__all__ = ["linear"]

_SOURCE = "ops/gemv.metal"
#: Elements of one wide load (kGemvLaneElems in metal/ops/gemv.h).
LANE_ELEMS = 4
#: Rows of x per simdgroup the kernels are instantiated for (kGemvMaxRows is the largest).
ROW_BLOCKS = (1, 2, 4, 8)
COLS_PER_GROUP = 4  # kGemvColsPerGroup: simdgroups (output features) per threadgroup


def rows_per_simdgroup(m: int) -> int:
    """The smallest instantiated row block holding ``m`` rows (the largest for ``m > 8``)."""
    return next((r for r in ROW_BLOCKS if r >= m), ROW_BLOCKS[-1])


def gemv_grid(m: int, n: int, rows: int) -> dict:
    """Launch geometry shared by the gemv-shaped kernels (also fp8 ``scaled_mm``)."""
    group = COLS_PER_GROUP * SIMD_WIDTH
    return {"threads": [_metal.ceil_div(n, COLS_PER_GROUP) * group, _metal.ceil_div(m, rows)],
            "group_size": [group, 1]}


def vec4_rows(w: Tensor, k_stride: int, row_stride: int) -> int:
    """1 when every row of ``w`` (along K) can be read with aligned loads of 4 elements: unit
    stride along K, rows starting at multiples of 4 elements from an aligned address."""
    aligned = w.data_ptr() % (LANE_ELEMS * w.element_size()) == 0
    return int(k_stride == 1 and row_stride % LANE_ELEMS == 0 and aligned)


def _linear_metal(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    k = x.shape[-1]
    n = weight.shape[0]
    m = math.prod(x.shape[:-1])
    rows2d = x.reshape(m, k)  # (not -1: with K = 0 the row count would be ambiguous)
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0 or n == 0:
        return out.reshape(*x.shape[:-1], n)
    r = rows_per_simdgroup(m)
    kernel = _metal.kernel(_SOURCE, "gemv", x.dtype, x.device, fn="linear", rows=r)
    has_bias = bias is not None
    params = metal_params.pack(
        "ops/gemv.h", "GemvParams", m=m, n=n, k=k, x_row=rows2d.stride(0),
        x_col=rows2d.stride(1), w_row=weight.stride(0), w_col=weight.stride(1),
        bias_step=bias.stride(0) if has_bias else 0, has_bias=has_bias,
        w_vec4=vec4_rows(weight, weight.stride(1), weight.stride(0)))
    launch(kernel, rows2d, weight, bias if has_bias else out, out, params, **gemv_grid(m, n, r))
    return out.reshape(*x.shape[:-1], n)


def _linear_torch(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    return F.linear(x, weight, bias)


def _linear_backward(ctx, grad: Tensor):
    """y = x W^T + b: gx = g W, gW = g^T x, gb = sum of g over rows (e.g. Giles 2008, "An
    extended collection of matrix derivative results", sec. 2.2.2); both products run through
    this op again, so they take the same backend and are differentiable themselves."""
    x, weight = ctx.saved_tensors
    m = math.prod(x.shape[:-1])
    g2 = grad.reshape(m, weight.shape[0])
    x2 = x.reshape(m, x.shape[-1])
    gx = linear_op(grad, weight.t(), None, ctx.backend, False, "")
    gw = linear_op(g2.t(), x2.t(), None, ctx.backend, False, "")
    has_bias = ctx.input_shapes[2] is not None
    gb = g2.sum(0) if has_bias else None
    return gx, gw, gb


#: input (*, K), weight (N, K), bias (N,) or None -> (*, N), in the inputs' dtype.
linear_decl = Declaration(
    "ops_linear", [Operand("input", 1), Operand("weight", 2), Operand("bias", 1, optional=True)],
    [Result("output", lambda x, w, b: (w[0],), batch="input")],
    forward={"metal": _linear_metal, "torch": _linear_torch},
    backward=_linear_backward, saves=["input", "weight"], dtypes=INFERENCE)
linear_op = linear_decl.op


def _check_shapes(x: Tensor, weight: Tensor) -> None:
    fn = "linear"
    if x.dim() == 0 or weight.dim() not in (1, 2):
        raise RuntimeError(f"mpslinalg.{fn}: expected input of at least 1 dimension and a 1-D or "
                           f"2-D weight, got input {checks.shape_str(x)} and weight "
                           f"{checks.shape_str(weight)}")
    if x.shape[-1] != weight.shape[-1]:
        rows = math.prod(x.shape[:-1])
        w_shape = "x".join(str(s) for s in weight.shape)
        raise RuntimeError(f"mpslinalg.{fn}: mat1 and mat2 shapes cannot be multiplied "
                           f"({rows}x{x.shape[-1]} and {w_shape}): input "
                           f"{checks.shape_str(x)}, weight {checks.shape_str(weight)}")


def _fused_bias(weight: Tensor, bias: Tensor | None) -> bool:
    """Whether the kernel adds ``bias``: ``(N,)``, ``(1,)`` or ``()`` with a 2-D weight, which
    every route of F.linear takes (the other shapes are added after the product)."""
    return (bias is not None and weight.dim() == 2 and bias.dim() <= 1
            and bias.numel() in (1, weight.shape[0]))


def _bias_target(x: Tensor, weight: Tensor, bias: Tensor) -> tuple[int, ...]:
    """The shape F.linear expands a bias it does not fuse to, as torch's route for the call
    decides it (aten/src/ATen/native/Linear.cpp, ``linear``): ``addmm`` on the ``(M, N)``
    rows for 2-D input, and for contiguous input with a bias that is 1-D once squeezed;
    otherwise the product plus the bias, broadcast into the output's shape. Raises the
    RuntimeError torch raises where the bias does not expand to it."""
    fn = "linear"
    lead = tuple(x.shape[:-1])
    rows = math.prod(lead)
    squeezed = bias.squeeze().dim() == 1 or bias.dim() == 1
    if x.dim() == 2 or (squeezed and bias.is_contiguous() and x.is_contiguous()):
        if weight.dim() != 2:
            raise RuntimeError(f"mpslinalg.{fn}: with a bias of shape {checks.shape_str(bias)} "
                               f"and input {checks.shape_str(x)} torch adds the bias through "
                               "addmm, which needs a 2-D weight, got "
                               f"{checks.shape_str(weight)}")
        target = (rows, weight.shape[0])
    else:
        target = (*lead, weight.shape[0]) if weight.dim() == 2 else lead
    expandable = bias.dim() <= len(target) and all(
        b in (1, t) for b, t in zip(reversed(bias.shape), reversed(target), strict=False))
    if not expandable:
        raise RuntimeError(f"mpslinalg.{fn}: bias of shape {checks.shape_str(bias)} does not "
                           f"broadcast to {tuple(target)} (input {checks.shape_str(x)}, weight "
                           f"{checks.shape_str(weight)})")
    return target


def _prepare_linear(call: Call, input: Tensor, weight: Tensor,
                    bias: Tensor | None) -> Prepared:
    """The op's arguments: a 2-D weight, the bias when the kernel fuses it; the squeeze of a
    1-D weight's output and the bias added after the product as F.linear adds it."""
    _check_shapes(input, weight)
    vector_weight = weight.dim() == 1
    w = weight.unsqueeze(0) if vector_weight else weight
    n = w.shape[0]
    if _fused_bias(weight, bias):
        b = bias.reshape(1).expand(n) if bias.numel() != n else bias.reshape(n)
        return Prepared((input, w, b), lambda out: (out,))
    target = None if bias is None else _bias_target(input, weight, bias)

    def finish(out: Tensor) -> tuple[Tensor]:
        out = out.squeeze(-1) if vector_weight else out
        if target is None:
            return (out,)
        return ((out.reshape(target) + bias).reshape(out.shape),)

    return Prepared((input, w, None), finish)


@linear_decl.public(F.linear, torch_name="linear", prepare=_prepare_linear,
                    fast_dtypes=frozenset(checks.OPS_TORCH_DTYPES))
def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    r"""``input @ weight.T + bias``; like `torch.nn.functional.linear`.

    Parameters
    ----------
    input : Tensor
        ``(*, K)``: any leading shape, e.g. ``(B, 1, K)`` at a decode step.
    weight : Tensor
        ``(N, K)`` (or ``(K,)``, giving ``(*)``), same dtype as ``input``: float32, float16 or
        bfloat16 (float64 on the torch backend).
    bias : Tensor, optional
        ``(N,)`` or one element: fused into the kernel. Any other shape F.linear takes (one
        that broadcasts to the output, e.g. ``(M, N)`` or ``(M, 1)`` for 2-D input) is added
        after the product, and the shapes F.linear refuses raise its RuntimeError (which ones
        depend on torch's route: a bias that squeezes to 1-D is added to the flattened
        ``(M, N)`` rows of a contiguous input; a 1-D weight takes a bias only where torch adds
        it after the product, never with 2-D input).

    Returns
    -------
    Tensor
        ``(*, N)`` in the inputs' dtype, accumulated in float32 and rounded once.
        Differentiable in all three arguments. With ``K = 0`` the bias broadcast to the
        output, or zeros.

    Notes
    -----
    On the metal backend one launch, no host synchronisation: the gemv kernel reads the weight
    once for up to 8 rows of ``input`` (see the documentation's ops_llm page).

    Examples
    --------
    >>> import torch, mpslinalg, mpslinalg.ops
    >>> x = torch.ones(2, 1, 3)
    >>> w = torch.tensor([[1., 2., 3.], [0., 0., 1.]])
    >>> with mpslinalg.use_backend("metal"):
    ...     mpslinalg.ops.linear(x, w, torch.tensor([0.5, -1.]))
    tensor([[[6.5000, 0.0000]],
    <BLANKLINE>
            [[6.5000, 0.0000]]])
    """
