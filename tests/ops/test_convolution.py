"""ops.conv1d against F.conv1d in float64, on every backend: strides, dilations, groups, padding
modes, depthwise, unbatched input, float16 / bfloat16, gradients for input, weight and bias,
and one launch of the kernel each shape should take."""

from __future__ import annotations

import doctest
import importlib
import warnings

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mpslinalg
from mpslinalg import emulator
from mpslinalg._core import metal as _metal
from mpslinalg.testing import count_host_syncs

conv1d_module = importlib.import_module("mpslinalg.ops.convolution")
FIXTURE_OK = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
#: Error relative to the largest output, by dtype: float32 accumulates in float32; float16 and
#: bfloat16 too, with the one final rounding to the storage type.
RTOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float64: 1e-12}
#: float32 convolutions of the torch backend on CUDA: cuDNN multiplies in TensorFloat-32 (10-bit
#: mantissas) by torch's default (1e-3 relative seen on an H200 with 3 groups).
TF32_RTOL = 1e-2


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """These convolutions are tiny: on a busy 2-core machine torch's intra-op thread pool makes
    each F.conv1d call thousands of times slower (64 ms instead of 14 us measured here),
    which gradcheck multiplies by the number of inputs."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _quiet_same_padding():
    with warnings.catch_warnings():  # torch warns that even kernels with "same" copy the input
        warnings.filterwarnings("ignore", "Using padding='same'")
        yield


def _check(ours: torch.Tensor, x, w, b, rtol, **kwargs) -> None:
    ref = F.conv1d(x.double().cpu(), w.double().cpu(), None if b is None else b.double().cpu(),
                   **kwargs)
    assert ours.shape == ref.shape and ours.dtype == x.dtype
    scale = max(ref.abs().max().item(), 1.0) if ref.numel() else 1.0
    err = (ours.double().cpu() - ref).abs().max().item() if ref.numel() else 0.0
    assert err <= rtol * scale, (err, scale, kwargs)


def _conv_inputs(n, c_in, c_out, length, taps, groups, dtype, seed=0, bias=True):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c_in, length, generator=gen).to(dtype)
    w = torch.randn(c_out, c_in // groups, taps, generator=gen).to(dtype)
    b = torch.randn(c_out, generator=gen).to(dtype) if bias else None
    return x, w, b


@FIXTURE_OK
@given(data=st.data())
def test_conv1d_matches_torch(backend, data):
    dtype = data.draw(st.sampled_from(
        [torch.float32, torch.float16, torch.bfloat16]
        + ([] if backend.is_metal else [torch.float64])), label="dtype")
    groups = data.draw(st.sampled_from([1, 2, 3]), label="groups")
    c_in = groups * data.draw(st.integers(1, 4), label="in per group")
    depthwise = data.draw(st.booleans(), label="depthwise")
    if depthwise:
        groups = c_in
    c_out = groups * data.draw(st.integers(1, 3), label="out per group")
    taps = data.draw(st.integers(1, 5), label="taps")
    dilation = data.draw(st.integers(1, 3), label="dilation")
    padding = data.draw(st.sampled_from([0, 1, 3, "valid", "same"]), label="padding")
    stride = 1 if padding == "same" else data.draw(st.integers(1, 3), label="stride")
    length = data.draw(st.integers(dilation * (taps - 1) + 1, 40), label="length")
    n = data.draw(st.integers(1, 3), label="batch")
    x, w, b = _conv_inputs(n, c_in, c_out, length, taps, groups, dtype,
                           data.draw(st.integers(0, 99)), data.draw(st.booleans(), label="bias"))
    if data.draw(st.booleans(), label="strided views"):
        x, w = x.transpose(1, 2).contiguous().transpose(1, 2), w.flip(0).contiguous().flip(0)
    kwargs = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    ours = mpslinalg.ops.conv1d(*(backend.tensor(t) if t is not None else None for t in (x, w, b)),
                                **kwargs)
    rtol = RTOL[dtype]
    if backend.name == "cuda" and dtype == torch.float32 and torch.backends.cudnn.allow_tf32:
        rtol = TF32_RTOL  # torch's own cuDNN call, in TensorFloat-32 as torch's default
    _check(ours, x, w, b, rtol, **kwargs)


@pytest.mark.parametrize("groups, c_in, c_out, kernel", [
    (8, 8, 8, "conv1d_depthwise"), (4, 4, 8, "conv1d_depthwise"), (1, 6, 5, "conv1d_gemm"),
    (2, 6, 4, "conv1d_gemm"), (2, 6, 70, "conv1d_gemm")])
def test_one_launch_of_the_right_kernel(metal_backend, groups, c_in, c_out, kernel):
    if metal_backend.name != "emulator":
        pytest.skip("launch counters exist in the emulator only")
    x, w, b = _conv_inputs(2, c_in, c_out, 45, 3, groups, torch.float32)
    emulator.reset_launch_counts()
    with count_host_syncs() as syncs:
        y = mpslinalg.ops.conv1d(x, w, b, padding="same", groups=groups)
    assert emulator.launch_counts() == {f"{kernel}_float32": 1}
    assert syncs.calls == []
    _check(y, x, w, b, RTOL[torch.float32], padding="same", groups=groups)


def test_backward_is_one_launch_per_gradient(metal_backend):
    if metal_backend.name != "emulator":
        pytest.skip("launch counters exist in the emulator only")
    x, w, b = (t.requires_grad_() for t in _conv_inputs(2, 6, 4, 30, 3, 2, torch.float32))
    y = mpslinalg.ops.conv1d(x, w, b, stride=2, groups=2)
    emulator.reset_launch_counts()
    with count_host_syncs() as syncs:
        y.backward(torch.ones_like(y))
    assert emulator.launch_counts() == {"conv1d_input_grad_float32": 1,
                                        "conv1d_weight_grad_float32": 1}
    assert syncs.calls == []
    emulator.reset_launch_counts()
    x2 = x.detach().requires_grad_()
    mpslinalg.ops.conv1d(x2, w.detach(), None, stride=2, groups=2).sum().backward()
    assert emulator.launch_counts() == {"conv1d_gemm_float32": 1,
                                        "conv1d_input_grad_float32": 1}


def test_large_tiles_and_lane_orders(metal_backend, monkeypatch):
    """Several GEMM tiles along every axis (channels past 32, positions past 32, a reduction
    past 16), in forward and reverse lane order: the result must not depend on it."""
    x, w, b = _conv_inputs(2, 20, 70, 100, 5, 1, torch.float32, seed=4)
    results = []
    for order in ("forward", "reverse"):
        monkeypatch.setattr(_metal, "LANE_ORDER", order)
        inputs = [metal_backend.tensor(t).requires_grad_() for t in (x, w, b)]
        y = mpslinalg.ops.conv1d(*inputs, stride=2, dilation=2)
        results.append([y, *torch.autograd.grad(y, inputs, torch.ones_like(y))])
    for a, b_ in zip(*results, strict=True):
        assert torch.equal(a, b_)
    _check(results[0][0], x, w, b, RTOL[torch.float32], stride=2, dilation=2)


def test_unbatched_and_tuple_arguments(backend):
    x, w, b = _conv_inputs(1, 4, 6, 20, 3, 2, torch.float32)
    ours = mpslinalg.ops.conv1d(backend.tensor(x[0]), backend.tensor(w), backend.tensor(b),
                                stride=(2,), padding=(1,), dilation=(1,), groups=2)
    assert ours.shape == (6, 10)
    _check(ours[None], x, w, b, RTOL[torch.float32], stride=2, padding=1, groups=2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_gradients_for_input_weight_and_bias(backend, dtype):
    for padding, groups, c_in in (("same", 1, 4), (2, 2, 4), ("same", 4, 4)):
        x, w, b = _conv_inputs(2, c_in, 4, 17, 4, groups, dtype, seed=5)
        wide = [t.double().requires_grad_() for t in (x, w, b)]
        ours = [backend.tensor(t).requires_grad_() for t in (x, w, b)]
        kwargs = dict(padding=padding, groups=groups, dilation=2 if padding == "same" else 1)
        out = mpslinalg.ops.conv1d(*ours, **kwargs)
        ref = F.conv1d(*wide, **kwargs)
        weight = torch.randn(ref.shape, generator=torch.Generator().manual_seed(1),
                             dtype=torch.float64)
        grads = torch.autograd.grad((out * weight.to(out)).sum(), ours)
        grads_ref = torch.autograd.grad((ref * weight).sum(), wide)
        for g, r in zip(grads, grads_ref, strict=True):
            assert (g.double().cpu() - r).abs().max() <= 4 * RTOL[dtype] * max(
                r.abs().max().item(), 1.0)
    if dtype == torch.float32 and not backend.is_metal:
        args = [t.double().requires_grad_() for t in _conv_inputs(1, 2, 2, 9, 2, 1, dtype)]
        torch.autograd.gradcheck(lambda *a: mpslinalg.ops.conv1d(*a, padding="same"), args)


def test_metal_refuses_float64_with_a_clear_error(metal_backend):
    x, w, b = _conv_inputs(1, 2, 2, 9, 3, 1, torch.float64)
    with pytest.raises(TypeError, match="mpslinalg.conv1d: the metal backend supports float32"):
        mpslinalg.ops.conv1d(metal_backend.tensor(x), metal_backend.tensor(w))


def test_docstring_examples():
    failures, tried = doctest.testmod(conv1d_module, raise_on_error=False)
    assert tried and not failures


# ---------------------------------------------------------------- op database

from opdb import BadSample, OpInfo, Sample, instantiate_generic_tests  # noqa: E402


def _conv_samples(complex_: bool) -> list[Sample]:
    def inputs(n, c_in, c_out, length, taps, groups, seed, bias=True):
        return tuple(t.double() if t is not None else None for t in
                     _conv_inputs(n, c_in, c_out, length, taps, groups, torch.float32, seed,
                                  bias))

    return [
        # the first two are small: gradcheck differentiates them numerically
        Sample(inputs(2, 4, 2, 9, 3, 2, 1), {"stride": 2, "padding": 1, "groups": 2},
               desc="grouped"),
        Sample(inputs(2, 2, 4, 8, 4, 2, 2), {"padding": "same", "groups": 2, "dilation": 2},
               desc="depthwise x2, same"),
        Sample(inputs(2, 6, 4, 23, 3, 2, 1), {"stride": 2, "padding": 1, "groups": 2},
               desc="grouped, longer"),
        Sample(inputs(1, 5, 3, 16, 5, 1, 3, bias=False), {"padding": "valid"},
               desc="no bias, valid"),
        Sample(inputs(2, 3, 35, 40, 2, 1, 4), {"dilation": 3}, desc="two channel tiles"),
        # torch's rules for empty inputs: no input channels give no output channels
        Sample(inputs(2, 0, 3, 9, 3, 1, 5), {"padding": 1}, desc="no input channels"),
        Sample(inputs(0, 4, 2, 9, 3, 2, 6), {"stride": 2, "groups": 2}, desc="empty batch"),
    ]


def _conv_bad_samples() -> list[BadSample]:
    x, w, b = (t.double() for t in _conv_inputs(2, 4, 6, 10, 3, 1, torch.float32))
    return [
        BadSample((x, w[:, :3], b), error=RuntimeError, match="channels"),
        BadSample((x, w, b[:5]), error=RuntimeError, match="bias"),
        BadSample((x, w, b), {"padding": "full"}, error=RuntimeError, match="padding"),
        BadSample((x, w, b), {"padding": "same", "stride": 2}, error=RuntimeError,
                  match="strided"),
        BadSample((x, w, b), {"stride": 0}, error=RuntimeError, match="stride"),
        BadSample((x, w, b), {"groups": 4}, error=RuntimeError, match="groups"),
        BadSample((x[..., :1], w, b), error=RuntimeError, match="Kernel size"),
        BadSample((x[None], w, b), error=RuntimeError, match="input"),
        BadSample((x, w[:0], b[:0]), error=RuntimeError, match="at least 1"),
        BadSample((x, w[..., :0], b), error=RuntimeError),
    ]


OPS = [
    OpInfo("ops.conv1d", mpslinalg.ops.conv1d, F.conv1d, _conv_samples,
           bad_samples=_conv_bad_samples, dtypes=(torch.float16, torch.bfloat16, torch.float32),
           rtol={torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 1e-5,
                 torch.float64: 1e-10},
           grad_args=(0, 1, 2), supports_out=False,
           grad_rtol={torch.float16: 1e-2, torch.bfloat16: 5e-2},
           skips={"upcast": "conv1d computes natively in float16 / bfloat16 (float32 "
                            "accumulation, one rounding), as F.conv1d does; parity checks "
                            "those dtypes against float64 instead"}),
]
instantiate_generic_tests(globals(), OPS)
