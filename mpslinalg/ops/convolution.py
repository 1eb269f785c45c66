"""1-D convolution: ``conv1d`` with ``F.conv1d`` semantics.

Op ``mpslinalg::conv1d``: on the metal backend one launch of ``metal/ops/convolution.metal``, the
depthwise kernel when every group has one input channel, the implicit-GEMM kernel otherwise,
with the bias fused. float32, float16 and bfloat16 compute natively (float accumulation, one
rounding at the end). Gradients: on the metal backend the input and weight gradients are
implicit GEMMs of their own (one launch each), on the torch backend aten's
``convolution_backward``.
"""

from __future__ import annotations

import numbers

import torch
import torch.nn.functional as F
from torch import Tensor

from .._core import checks, metal_params
from .._core import metal as _metal
from .._core.declare import Declaration, Operand, Param, Prepared, Result

__all__ = ["conv1d"]

_SOURCE = "ops/convolution.metal"

#: Dtypes the Metal kernels are instantiated for.
METAL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
#: kConvDepthwiseRun, kConvSide, kConvTileM / kConvTileN of metal/ops/convolution.h.
DEPTHWISE_RUN = 4
GEMM_SIDE = 16
GEMM_TILE = 32
#: Threads per group of the depthwise kernel (along the output length).
DEPTHWISE_GROUP = 64


def output_length(l_in: int, taps: int, stride: int, pad_left: int, pad_right: int,
                  dilation: int) -> int:
    return (l_in + pad_left + pad_right - dilation * (taps - 1) - 1) // stride + 1


def output_shape(x: Tensor, weight: Tensor, stride: int, pad_left: int, pad_right: int,
                 dilation: int) -> tuple[int, int, int]:
    """(N, C_out, L_out) of batched ``x``. An input without channels gives an output without
    channels, bias or not: torch's rule (ATen's convolution of empty inputs), kept so that a
    model's shapes do not depend on the backend."""
    return (x.shape[0], *_output_core(x.shape[1:], weight.shape, None, stride, pad_left,
                                      pad_right, dilation))


def _output_core(x, weight, bias, stride, pad_left, pad_right, dilation, groups=None):
    """(C_out, L_out) for an input of core shape (C_in, L_in): the op's shape rule."""
    (c_in, l_in), (c_out, _, taps) = x, weight
    return (c_out if c_in else 0,
            output_length(l_in, taps, stride, pad_left, pad_right, dilation))


def _conv1d_metal(x, weight, bias, stride, pad_left, pad_right, dilation, groups) -> Tensor:
    n, c_in, _ = x.shape
    c_out = weight.shape[0]
    out = x.new_empty(output_shape(x, weight, stride, pad_left, pad_right, dilation))
    l_out = out.shape[-1]
    if out.numel() == 0:
        return out
    x, weight = x.resolve_conj().resolve_neg(), weight.resolve_conj().resolve_neg()
    params = _params(x, weight, l_out, stride, pad_left, dilation, groups, bias is not None)
    bias_arg = bias.contiguous() if bias is not None else weight  # not read without a bias
    if c_in == groups:
        kernel = _metal.kernel(_SOURCE, "conv1d_depthwise", x.dtype, x.device, fn="conv1d")
        runs = _metal.ceil_div(l_out, DEPTHWISE_RUN)
        _metal.launch(kernel, x, weight, bias_arg, out, params, threads=[runs, c_out, n],
                      group_size=[min(runs, DEPTHWISE_GROUP), 1, 1])
    else:
        _gemm("conv1d_gemm", x, weight, bias_arg, out, params,
              rows=c_out // groups, cols=l_out, slices=n * groups)
    return out


def _params(x, weight, l_out, stride, pad_left, dilation, groups, has_bias) -> list[int]:
    """The Conv1dParams struct (x and weight read through their strides)."""
    n, c_in, l_in = x.shape
    c_out, _, taps = weight.shape
    return metal_params.pack(
        "ops/convolution.h", "Conv1dParams", batch=n, c_in=c_in, l_in=l_in, c_out=c_out,
        l_out=l_out, taps=taps, stride=stride, pad_left=pad_left, dilation=dilation,
        groups=groups, has_bias=has_bias, x_strides=x.stride(), w_strides=weight.stride())


def _gemm(name, x, weight, aux, out, params, *, rows, cols, slices) -> None:
    """One launch of an implicit-GEMM kernel: a threadgroup per output tile and slice."""
    kernel = _metal.kernel(_SOURCE, name, x.dtype, x.device, fn="conv1d")
    tiles = [_metal.ceil_div(cols, GEMM_TILE) * GEMM_SIDE,
             _metal.ceil_div(rows, GEMM_TILE) * GEMM_SIDE, slices]
    _metal.launch(kernel, x, weight, aux, out, params, threads=tiles,
                  group_size=[GEMM_SIDE, GEMM_SIDE, 1])


def _conv1d_grads_metal(grad, x, weight, stride, pad_left, pad_right, dilation, groups,
                        needs_input, needs_weight):
    """(dx, dw) by the conv1d_input_grad and conv1d_weight_grad kernels, one launch each."""
    n, c_in, l_in = x.shape
    c_out, cin_g, taps = weight.shape
    grad = grad.resolve_conj().resolve_neg().contiguous()
    x, weight = x.resolve_conj().resolve_neg(), weight.resolve_conj().resolve_neg()
    params = _params(x, weight, grad.shape[-1], stride, pad_left, dilation, groups, False)
    dx = dw = None
    if needs_input:
        dx = x.new_empty(x.shape)
        if dx.numel():
            if grad.numel():
                _gemm("conv1d_input_grad", x, weight, grad, dx, params,
                      rows=cin_g, cols=l_in, slices=n * groups)
            else:
                dx.zero_()
    if needs_weight:
        dw = weight.new_empty(weight.shape)
        if dw.numel():
            if grad.numel() and x.numel():
                _gemm("conv1d_weight_grad", x, weight, grad, dw, params,
                      rows=c_out // groups, cols=cin_g * taps, slices=groups)
            else:
                dw.zero_()
    return dx, dw


def _conv1d_torch(x, weight, bias, stride, pad_left, pad_right, dilation, groups) -> Tensor:
    if pad_right != pad_left:  # F.conv1d pads symmetrically; the extra zeros go on the right
        x = F.pad(x, (0, pad_right - pad_left))
    return F.conv1d(x, weight, bias, stride, pad_left, dilation, groups)


def _grads_torch(grad, x, weight, stride, pad_left, pad_right, dilation, groups, needs_input,
                 needs_weight):
    """(dx, dw) by aten's convolution_backward, on the input padded by the asymmetric extra of
    padding="same" and cropped back."""
    extra = pad_right - pad_left
    xp = torch.constant_pad_nd(x, [0, extra]) if extra else x
    dx, dw, _ = torch.ops.aten.convolution_backward(
        grad, xp, weight, None, [stride], [pad_left], [dilation], False, [0], groups,
        [needs_input, needs_weight, False])
    if dx is not None and extra:
        dx = torch.constant_pad_nd(dx, [0, -extra])
    return dx, dw


def _unused_as_empty(fn):
    """A (dx, dw) implementation for the op, an empty tensor standing for an unneeded one."""
    def run(grad, x, weight, *geometry):
        dx, dw = fn(grad, x, weight, *geometry)
        return (x.new_empty(0) if dx is None else dx, weight.new_empty(0) if dw is None else dw)
    return run


_GEOMETRY = [Param("stride", "int"), Param("pad_left", "int"), Param("pad_right", "int"),
             Param("dilation", "int"), Param("groups", "int")]

#: (dx, dw) of conv1d for the output gradient ``grad`` (empty where not needed).
conv1d_backward_decl = Declaration(
    "conv1d_backward",
    [Operand("grad", None), Operand("x", None), Operand("weight", None), *_GEOMETRY,
     Param("needs_input", "bool"), Param("needs_weight", "bool")],
    [Result("grad_input", lambda g, x, w, *geometry: x if geometry[-2] else (0,)),
     Result("grad_weight", lambda g, x, w, *geometry: w if geometry[-1] else (0,))],
    forward={"metal": _unused_as_empty(_conv1d_grads_metal),
             "torch": _unused_as_empty(_grads_torch)})
conv1d_backward_op = conv1d_backward_decl.op


def _conv1d_backward(ctx, grad: Tensor):
    """dx is the transposed convolution of dy with w, dw the correlation of dy with x summed
    over batch and positions, db the sum of dy over batch and positions (e.g. Dumoulin &
    Visin 2016, "A guide to convolution arithmetic for deep learning", sec. 4). The metal
    backend computes dx and dw with its own implicit-GEMM kernels (op conv1d_backward), the
    torch backend with aten's convolution_backward."""
    x, weight = ctx.saved_tensors
    needs_input, needs_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    geometry = (ctx.stride, ctx.pad_left, ctx.pad_right, ctx.dilation, ctx.groups)
    gx, gw = conv1d_backward_op(grad, x, weight, *geometry, needs_input, needs_weight,
                                ctx.backend, False, "")
    has_bias = ctx.input_shapes[2] is not None
    # no output channels (an input without channels): the bias reached no output
    gb = None if not has_bias else (
        grad.sum((0, 2)) if grad.shape[1] else grad.new_zeros(weight.shape[0]))
    return (gx if needs_input else None, gw if needs_weight else None, gb,
            None, None, None, None, None)


def _conv1d_dtype(fn: str, dtype: torch.dtype, backend: str) -> torch.dtype:
    """The dtype policy: natively, in the dtypes with a kernel on metal."""
    if backend == "metal" and dtype not in METAL_DTYPES:
        raise TypeError(
            f"mpslinalg.{fn}: the metal backend supports float32, float16 and bfloat16, got "
            f"{str(dtype).removeprefix('torch.')}; use the torch backend "
            "(mpslinalg.use_backend('torch')) for other dtypes")
    return dtype


#: F.conv1d of batched ``input`` (N, C_in, L) with explicit (left, right) zero padding. The
#: public function validates everything itself, in torch's order (shapes before dtypes), so the
#: op's first input is not one of its parameters.
conv1d_decl = Declaration(
    "conv1d",
    [Operand("input", 2), Operand("weight", 3), Operand("bias", 1, optional=True), *_GEOMETRY],
    [Result("output", _output_core, batch="input")],
    forward={"metal": _conv1d_metal, "torch": _conv1d_torch},
    backward=_conv1d_backward, saves=["input", "weight"], dtypes=_conv1d_dtype)
conv1d_op = conv1d_decl.op


def _single(fn: str, name: str, value: object) -> int:
    """An int or a one-element sequence of int (F.conv1d's ``_size_1_t``)."""
    if isinstance(value, (tuple, list)) and len(value) == 1:
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"mpslinalg.{fn}: {name} must be an int or a 1-tuple of int, got "
                        f"{value!r}")
    return int(value)


def _padding(fn: str, padding: object, taps: int, stride: int, dilation: int) -> tuple[int, int]:
    if isinstance(padding, str):
        if padding == "valid":
            return 0, 0
        if padding != "same":
            raise RuntimeError(f"mpslinalg.{fn}: Invalid padding string: {padding!r}")
        if stride != 1:
            raise RuntimeError(f"mpslinalg.{fn}: padding='same' is not supported for strided "
                               "convolutions")
        total = dilation * (taps - 1)
        return total // 2, total - total // 2  # torch puts the odd zero on the right
    pad = _single(fn, "padding", padding)
    if pad < 0:
        raise RuntimeError(f"mpslinalg.{fn}: negative padding is not supported")
    return pad, pad


def _validate(fn, x, weight, bias, stride, padding, dilation, groups):
    checks.check_tensor(fn, "input", x)
    checks.check_tensor(fn, "weight", weight)
    if bias is not None:
        checks.check_tensor(fn, "bias", bias)
    stride, dilation = _single(fn, "stride", stride), _single(fn, "dilation", dilation)
    if isinstance(groups, bool) or not isinstance(groups, numbers.Integral):
        raise TypeError(f"mpslinalg.{fn}: groups must be an int, got {groups!r}")
    if stride <= 0:
        raise RuntimeError(f"mpslinalg.{fn}: non-positive stride is not supported")
    if dilation <= 0:
        raise RuntimeError(f"mpslinalg.{fn}: dilation should be greater than zero")
    if groups <= 0:
        raise RuntimeError(f"mpslinalg.{fn}: non-positive groups is not supported")
    if x.dim() not in (2, 3):
        raise RuntimeError(f"mpslinalg.{fn}: Expected 2D (unbatched) or 3D (batched) input "
                           f"to conv1d, but got input of size: {list(x.shape)}")
    if weight.dim() != 3:
        raise RuntimeError(f"mpslinalg.{fn}: weight must be 3-dimensional (out_channels, "
                           f"in_channels / groups, kernel_size), got {list(weight.shape)}")
    c_in, c_out, taps = x.shape[-2], weight.shape[0], weight.shape[2]
    if c_out == 0:
        raise RuntimeError(f"mpslinalg.{fn}: Given groups={groups}, expected weight to be at "
                           f"least 1 at dimension 0, but got weight of size {list(weight.shape)}"
                           " instead")
    if taps == 0:
        raise RuntimeError(f"mpslinalg.{fn}: kernel size should be greater than zero, but got "
                           f"weight of size {list(weight.shape)}")
    if c_out % groups:
        raise RuntimeError(f"mpslinalg.{fn}: Given groups={groups}, expected weight to be "
                           f"divisible by {groups} at dimension 0, but got weight of size "
                           f"{list(weight.shape)} instead")
    if weight.shape[1] * groups != c_in:
        raise RuntimeError(f"mpslinalg.{fn}: Given groups={groups}, weight of size "
                           f"{list(weight.shape)}, expected input{list(x.shape)} to have "
                           f"{weight.shape[1] * groups} channels, but got {c_in} channels "
                           "instead")
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != c_out):
        raise RuntimeError(f"mpslinalg.{fn}: Given weight of size {list(weight.shape)}, "
                           f"expected bias to be 1-dimensional with {c_out} elements, but got "
                           f"bias of size {list(bias.shape)} instead")
    pad_left, pad_right = _padding(fn, padding, taps, stride, dilation)
    padded = x.shape[-1] + pad_left + pad_right
    if padded < dilation * (taps - 1) + 1:
        raise RuntimeError(f"mpslinalg.{fn}: Calculated padded input size per channel: "
                           f"({padded}). Kernel size: ({dilation * (taps - 1) + 1}). Kernel size "
                           "can't be greater than actual input size")
    tensors = {"input": x, "weight": weight} | ({"bias": bias} if bias is not None else {})
    checks.check_same_device(fn, **tensors)
    checks.check_same_dtype(fn, **tensors)
    return stride, pad_left, pad_right, dilation, int(groups)


def _prepare_conv1d(call: None, x, weight, bias, stride, padding, dilation, groups) -> Prepared:
    geometry = _validate("conv1d", x, weight, bias, stride, padding, dilation, groups)
    if x.dim() == 2:  # unbatched
        return Prepared((x[None], weight, bias, *geometry), lambda out: (out[0],))
    return (x, weight, bias, *geometry)


@conv1d_decl.public(F.conv1d, torch_name="conv1d", prepare=_prepare_conv1d)
def conv1d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
           dilation=1, groups: int = 1) -> Tensor:
    r"""1-D convolution (cross-correlation) over ``(N, C_in, L)``; like
    `torch.nn.functional.conv1d`.

    Parameters
    ----------
    x : Tensor
        ``(N, C_in, L)`` or unbatched ``(C_in, L)``.
    weight : Tensor
        ``(C_out, C_in / groups, K)``.
    bias : Tensor, optional
        ``(C_out,)``, added to every output position (fused into the kernel).
    stride, dilation : int or tuple of one int, optional
    padding : int, tuple of one int, ``"valid"`` or ``"same"``, optional
        Zeros on both sides; ``"same"`` keeps the length (stride 1 only; an odd total puts
        the extra zero on the right, as torch does).
    groups : int, optional
        Input and output channels split into ``groups`` independent convolutions.

    Returns
    -------
    Tensor
        ``(N, C_out, L_out)`` (``(C_out, L_out)`` for unbatched input), in ``x``'s dtype.
        Differentiable in ``x``, ``weight`` and ``bias``. As in torch, an input with no
        channels gives an output with no channels, ``(N, 0, L_out)``, bias or not.

    Notes
    -----
    On the metal backend float32, float16 and bfloat16 are computed natively, accumulating in
    float32: groups of one input channel (depthwise) take a direct kernel, every other grouping
    an implicit GEMM; one launch either way.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> x = torch.tensor([[[1., 2., 3., 4.]]])
    >>> mpslinalg.ops.conv1d(x, torch.tensor([[[1., -1.]]]), padding="same")
    tensor([[[-1., -1., -1.,  4.]]])
    """
