"""Check and benchmark cases of mpslinalg.ops.pad and mpslinalg.ops.conv1d.

Pad moves bits, so its checks return the number of elements that differ from torch's
``constant_pad_nd`` (computed on the CPU), which must be 0. Conv1d checks return the worst error
against F.conv1d in float64 as a ratio to the dot product's rounding bound,
``|ours - ref| / ((R * eps32 + eps) * (|w| conv |x| + |b|))``, R the products per output
(accumulated in float32), eps that of the storage dtype (the final rounding).
Benchmarks time both ops against torch on the device.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import mpslinalg

from .._core.registry import bench_case, check_case
from ..testing import eps

#: A count of wrong elements passes only at 0.
EXACT_BOUND = 0.5


def _mismatches(ours: torch.Tensor, ref: torch.Tensor) -> float:
    ours = ours.cpu()
    if ours.shape != ref.shape or ours.dtype != ref.dtype:
        raise AssertionError(f"got {tuple(ours.shape)} {ours.dtype}, expected "
                             f"{tuple(ref.shape)} {ref.dtype}")
    same = (ours == ref) | (ours.isnan() & ref.isnan()) if ref.is_floating_point() else \
        ours == ref
    return float((~same).sum())


@check_case("pad", "5-D temporal pad, H*W = 65536, bfloat16 (pytorch#194922)", bound=EXACT_BOUND)
def _pad_temporal(device) -> float:
    x = torch.randn(1, 4, 5, 256, 256, generator=torch.Generator().manual_seed(0))
    x = x.to(torch.bfloat16)
    pads = [0, 0, 0, 0, 2, 1]
    return _mismatches(mpslinalg.ops.pad(x.to(device), pads), F.pad(x, pads))


@check_case("pad", "int64 fill 2**60 + 1, strided input, crop and pad", bound=EXACT_BOUND)
def _pad_exact(device) -> float:
    x = torch.arange(60, dtype=torch.int64).reshape(3, 4, 5).transpose(0, 2)
    pads = [1, -1, -2, 3, 2, 0]
    value = 2**60 + 1
    return _mismatches(mpslinalg.ops.pad(x.to(device), pads, value=value),
                       torch.constant_pad_nd(x, pads, value))


def _conv_ratio(x, w, b, **kwargs) -> float:
    ours = mpslinalg.ops.conv1d(x, w, b, **kwargs).cpu().double()
    x64, w64, b64 = (t.cpu().double() for t in (x, w, b))
    ref = F.conv1d(x64, w64, b64, **kwargs)
    scale = F.conv1d(x64.abs(), w64.abs(), b64.abs(), **kwargs)
    products = w.shape[1] * w.shape[2]
    # products accumulated in float32, then one rounding to the storage type
    bound = (products * eps(x.dtype) + torch.finfo(x.dtype).eps) * scale
    return float(((ours - ref).abs() / bound.clamp_min(torch.finfo(torch.float64).tiny)).max())


def _conv_inputs(n, c_in, c_out, length, taps, groups, dtype, device, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c_in, length, generator=gen).to(dtype).to(device)
    w = torch.randn(c_out, c_in // groups, taps, generator=gen).to(dtype).to(device)
    b = torch.randn(c_out, generator=gen).to(dtype).to(device)
    return x, w, b


@check_case("conv1d", "depthwise, k=31, padding='same', bfloat16")
def _conv_depthwise(device) -> float:
    x, w, b = _conv_inputs(2, 16, 16, 300, 31, 16, torch.bfloat16, device, seed=1)
    return _conv_ratio(x, w, b, padding="same", groups=16)


@check_case("conv1d", "grouped implicit GEMM, stride 2, dilation 3, float16")
def _conv_grouped(device) -> float:
    x, w, b = _conv_inputs(2, 48, 40, 200, 5, 4, torch.float16, device, seed=2)
    return _conv_ratio(x, w, b, stride=2, dilation=3, groups=4)


@check_case("conv1d", "dense implicit GEMM, 70 output channels, float32")
def _conv_dense(device) -> float:
    x, w, b = _conv_inputs(3, 33, 70, 129, 4, 1, torch.float32, device, seed=3)
    return _conv_ratio(x, w, b, padding="same")


# ---------------------------------------------------------------- benchmarks


def _bench_pad(label: str, shape_cpu, shape_gpu, pads):
    @bench_case("pad", label)
    def run(device, repeats):
        shape = shape_cpu if device.type == "cpu" else shape_gpu
        x = torch.randn(shape).to(torch.bfloat16).to(device)
        return {"mpslinalg": lambda: mpslinalg.ops.pad(x, pads), "torch": lambda: F.pad(x, pads)}


_bench_pad("5-D temporal bf16 (1,4,3,64,64) on cpu, (1,16,8,256,256) on gpu",
           (1, 4, 3, 64, 64), (1, 16, 8, 256, 256), [0, 0, 0, 0, 2, 0])
_bench_pad("2-D crop and pad bf16 (256,256) on cpu, (4096,4096) on gpu",
           (256, 256), (4096, 4096), [-3, 5, 7, -2])


def _bench_conv(label: str, cpu, gpu, groups_of):
    @bench_case("conv1d", label)
    def run(device, repeats):
        n, c, length, taps, c_out = cpu if device.type == "cpu" else gpu
        groups = groups_of(c)
        x, w, b = _conv_inputs(n, c, c_out, length, taps, groups, torch.float32, device)
        kwargs = dict(padding="same", groups=groups)
        return {"mpslinalg": lambda: mpslinalg.ops.conv1d(x, w, b, **kwargs),
                "torch": lambda: F.conv1d(x, w, b, **kwargs)}


_bench_conv("depthwise k=31 float32, 2x64x1000 on cpu, 8x512x16000 on gpu",
            (2, 64, 1000, 31, 64), (8, 512, 16000, 31, 512), lambda c: c)
_bench_conv("dense k=3 float32, 2x64x512 -> 64 on cpu, 8x256x4096 -> 256 on gpu",
            (2, 64, 512, 3, 64), (8, 256, 4096, 3, 256), lambda c: 1)


@bench_case("conv1d", "backward (input and weight gradients), grouped k=5 float32, "
            "2x32x256 on cpu, 8x256x4096 on gpu")
def _bench_conv_backward(device, repeats):
    n, c, length = (2, 32, 256) if device.type == "cpu" else (8, 256, 4096)
    x, w, b = _conv_inputs(n, c, c, length, 5, 4, torch.float32, device)
    x.requires_grad_()
    w.requires_grad_()

    def backward(conv):
        y = conv(x, w, b, padding="same", groups=4)
        return torch.autograd.grad(y, (x, w), torch.ones_like(y))

    return {"mpslinalg": lambda: backward(mpslinalg.ops.conv1d),
            "torch": lambda: backward(F.conv1d)}
