"""mpslinalg.ops.linear: F.linear semantics, the gemv kernels (launches, host syncs, row
blocks), bias on 1-D/2-D/3-D inputs, autograd; registered in the op database."""

from __future__ import annotations

import doctest
import importlib

import pytest
import torch
import torch.nn.functional as F

import mpslinalg
from mpslinalg import ops
from mpslinalg.emulator import reset_launch_counts, total_launches
from mpslinalg.testing import count_host_syncs

linear_module = importlib.import_module("mpslinalg.ops.gemv")

#: Error of a float32-accumulated result rounded once to the dtype, relative to the largest
#: output: half a unit in the last place (2^-11 float16, 2^-8 bfloat16) plus accumulation slack.
RTOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2, torch.float64: 1e-12}


def _close(got, ref, dtype):
    scale = max(ref.abs().max().item(), 1.0) if ref.numel() else 1.0
    err = (got.double() - ref.double()).abs().max().item() if ref.numel() else 0.0
    assert got.dtype == dtype
    assert got.shape == ref.shape
    assert err <= RTOL[dtype] * scale, (err, scale)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(40,), (1, 40), (3, 1, 40), (5, 40), (8, 40), (9, 40),
                                   (2, 9, 40), (0, 40)])
def test_matches_torch_with_bias(backend, dtype, shape):
    gen = torch.Generator().manual_seed(len(shape) * 10 + shape[0])
    x = torch.randn(shape, generator=gen, dtype=torch.float64)
    w = torch.randn(13, 40, generator=gen, dtype=torch.float64)
    b = torch.randn(13, generator=gen, dtype=torch.float64)
    for bias in (b, None):
        args = [t.to(dtype) for t in (x, w)] + [None if bias is None else bias.to(dtype)]
        got = ops.linear(*(backend.tensor(a) if a is not None else None for a in args))
        ref = F.linear(*(a.double() if a is not None else None for a in args))
        _close(got.cpu(), ref, dtype)


def test_vector_weight_and_scalar_bias(backend):
    x, w = torch.randn(4, 6), torch.randn(6)
    torch.testing.assert_close(ops.linear(backend.tensor(x), backend.tensor(w)).cpu(),
                               F.linear(x, w))
    b = torch.randn(())
    with pytest.raises(RuntimeError, match="^mpslinalg.linear: .*(2-D weight|must be a matrix)"):
        ops.linear(backend.tensor(x), backend.tensor(w), backend.tensor(b))
    x3 = torch.randn(2, 4, 6)  # torch adds a 0-dim bias after the product here
    torch.testing.assert_close(ops.linear(backend.tensor(x3), backend.tensor(w),
                                          backend.tensor(b)).cpu(), F.linear(x3, w, b))


def _inputs_of_every_route():
    """Inputs that take each of F.linear's routes for a bias: 1-D, 2-D, 3-D and 4-D input,
    contiguous or not (a non-contiguous input adds the bias after the product), K = 0."""
    gen = torch.Generator().manual_seed(11)

    def r(*shape):
        return torch.randn(*shape, generator=gen)

    return [r(5), r(4, 5), r(2, 4, 5), r(2, 2, 4, 5), r(2, 5, 4).transpose(1, 2),
            r(5, 4).t(), r(2, 4, 0)]


_BIAS_SHAPES = [(), (1,), (3,), (1, 3), (4, 3), (4, 1), (8, 1), (8, 3), (2, 4, 3), (1, 4, 3),
                (2, 1, 3), (4,), (2, 4), (1, 1), (1, 1, 1), (1, 1, 1, 3), (2,), (5,)]


def test_every_bias_shape_as_torch(backend):
    """A bias of every shape, for inputs on every route of F.linear and a 2-D and a 1-D
    weight: accepted where F.linear accepts it (with its values), refused where it refuses
    (RuntimeError naming mpslinalg.linear)."""
    gen = torch.Generator().manual_seed(12)
    for x in _inputs_of_every_route():
        k = x.shape[-1]
        for w in (torch.randn(3, k, generator=gen), torch.randn(k, generator=gen)):
            for shape in _BIAS_SHAPES:
                b = torch.randn(shape, generator=gen)
                what = f"input {tuple(x.shape)} (strides {x.stride()}), weight " \
                       f"{tuple(w.shape)}, bias {shape}"
                try:
                    want = F.linear(x, w, b)
                except RuntimeError:
                    with pytest.raises(RuntimeError, match="^mpslinalg.linear: "):
                        ops.linear(*map(backend.tensor, (x, w, b)))
                    continue
                got = ops.linear(*map(backend.tensor, (x, w, b)))
                assert got.shape == want.shape, what
                torch.testing.assert_close(got.cpu(), want, msg=what)


@pytest.mark.parametrize("bias_shape", [None, (4,), (), (3, 4), (2, 1, 4)])
def test_no_inner_dimension_gives_the_bias_or_zeros_with_gradients(backend, bias_shape):
    """K = 0: F.linear gives the bias broadcast to the output (or zeros), and gradients: the
    bias's is the output gradient summed to its shape; input and weight have empty ones."""
    gen = torch.Generator().manual_seed(13)
    x, w = torch.randn(2, 3, 0, generator=gen), torch.randn(4, 0, generator=gen)
    b = None if bias_shape is None else torch.randn(bias_shape, generator=gen)
    g = torch.randn(2, 3, 4, generator=gen)
    ref = [t.clone().requires_grad_() if t is not None else None for t in (x, w, b)]
    ours = [backend.tensor(t).requires_grad_() if t is not None else None for t in (x, w, b)]
    want, got = F.linear(*ref), ops.linear(*ours)
    torch.testing.assert_close(got.detach().cpu(), want.detach())
    want.backward(g)
    got.backward(backend.tensor(g))
    for a, r in zip(ours, ref, strict=True):
        if a is not None:
            torch.testing.assert_close(a.grad.cpu(), r.grad)


def test_broadcast_bias_gradients_against_torch(backend):
    """A bias of the output's shape, or broadcast to it, gets torch's gradient (summed over
    the broadcast dimensions)."""
    gen = torch.Generator().manual_seed(14)
    x = torch.randn(2, 4, 5, generator=gen, dtype=torch.float64)
    w = torch.randn(3, 5, generator=gen, dtype=torch.float64)
    g = torch.randn(2, 4, 3, generator=gen, dtype=torch.float64)
    for shape in ((4, 3), (2, 1, 3), (1, 1)):
        b = torch.randn(shape, generator=gen, dtype=torch.float64)
        ref = [t.clone().requires_grad_() for t in (x, w, b)]
        ours = [backend.tensor(t.float()).requires_grad_() for t in (x, w, b)]
        torch.autograd.backward(F.linear(*ref), g)
        torch.autograd.backward(ops.linear(*ours), backend.tensor(g.float()))
        for a, r in zip(ours, ref, strict=True):
            torch.testing.assert_close(a.grad.double().cpu(), r.grad, rtol=1e-4, atol=1e-4)


def test_one_launch_no_host_sync_and_the_row_block(metal_backend):
    w = metal_backend.tensor(torch.randn(16, 64, dtype=torch.bfloat16))
    for m in (1, 3, 8, 20):
        x = metal_backend.tensor(torch.randn(m, 1, 64, dtype=torch.bfloat16))
        reset_launch_counts()
        with count_host_syncs() as syncs:
            ops.linear(x, w, w[:, 0])
        assert syncs.calls == []
        if metal_backend.device.type == "cpu":
            assert total_launches() == 1
    assert [linear_module.rows_per_simdgroup(m) for m in (1, 2, 3, 5, 8, 9)] == [1, 2, 4, 8, 8, 8]


@pytest.mark.parametrize("k", [64, 66, 131])
def test_vector_and_scalar_weight_loads_agree_bitwise(metal_backend, k):
    x = metal_backend.tensor(torch.randn(3, k, dtype=torch.bfloat16))
    w = torch.randn(10, k, dtype=torch.bfloat16)
    column_major = w.t().contiguous().t()
    assert linear_module.vec4_rows(w, w.stride(1), w.stride(0)) == int(k % 4 == 0)
    assert linear_module.vec4_rows(column_major, column_major.stride(1),
                                   column_major.stride(0)) == 0
    assert torch.equal(ops.linear(x, metal_backend.tensor(w)),
                       ops.linear(x, metal_backend.tensor(column_major)))


def test_results_do_not_depend_on_lane_order(metal_backend, monkeypatch):
    x = metal_backend.tensor(torch.randn(3, 300))
    w = metal_backend.tensor(torch.randn(7, 300))
    forward = ops.linear(x, w)
    monkeypatch.setattr(mpslinalg._core.metal, "LANE_ORDER", "reverse")
    assert torch.equal(ops.linear(x, w), forward)


def test_errors_name_the_function(backend):
    x, w = backend.tensor(torch.randn(2, 3)), backend.tensor(torch.randn(4, 5))
    with pytest.raises(RuntimeError, match="^mpslinalg.linear: .*cannot be multiplied"):
        ops.linear(x, w)
    with pytest.raises(RuntimeError, match="^mpslinalg.linear: "):
        ops.linear(x, backend.tensor(torch.randn(4, 3)), backend.tensor(torch.randn(5)))
    with pytest.raises(RuntimeError, match="^mpslinalg.linear: .*dtype"):
        ops.linear(x.half(), backend.tensor(torch.randn(4, 3)))
    if backend.is_metal:
        with pytest.raises(TypeError, match="^mpslinalg.linear: .*torch backend"):
            ops.linear(x.double(), backend.tensor(torch.randn(4, 3)).double())


def test_gradients_against_torch_autograd(backend):
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 10, generator=gen, dtype=torch.float64)
    w = torch.randn(5, 10, generator=gen, dtype=torch.float64)
    b = torch.randn(5, generator=gen, dtype=torch.float64)
    ours = [t.float().to(backend.device).requires_grad_() for t in (x, w, b)]
    ref = [t.clone().requires_grad_() for t in (x, w, b)]
    g = torch.randn(2, 3, 5, generator=gen, dtype=torch.float64)
    torch.autograd.backward(ops.linear(*ours), g.float().to(backend.device))
    torch.autograd.backward(F.linear(*ref), g)
    for a, r in zip(ours, ref, strict=True):
        torch.testing.assert_close(a.grad.double().cpu(), r.grad, rtol=1e-4, atol=1e-4)


def test_opcheck():
    x, w, b = torch.randn(3, 4, dtype=torch.float64, requires_grad=True), torch.randn(
        2, 4, dtype=torch.float64, requires_grad=True), torch.randn(2, dtype=torch.float64)
    torch.library.opcheck(linear_module.linear_op.overload, (x, w, b, "torch", False, ""))
    torch.autograd.gradcheck(lambda x, w: linear_module.linear_op(x, w, None, "torch", False, ""),
                             (x, w))


def test_docstring_examples():
    failures, tried = doctest.testmod(linear_module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert tried > 0 and failures == 0


# ---------------------------------------------------------------- op database

from opdb import BadSample, OpInfo, Sample, instantiate_generic_tests  # noqa: E402


def _samples(complex_: bool) -> list[Sample]:
    gen = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    return [
        Sample((r(2, 1, 24), r(6, 24), r(6)), desc="(2, 1, 24) decode step with bias"),
        Sample((r(3, 24), r(6, 24), r(6)), desc="(3, 24) with bias"),
        Sample((r(24), r(6, 24), None), desc="1-D input"),
        Sample((r(2, 5, 24), r(6, 24), r(6)), desc="(2, 5, 24): 10 rows, two row blocks"),
        Sample((r(0, 24), r(6, 24), r(6)), desc="no rows"),
        Sample((r(3, 24), r(6, 24), r(3, 6)), desc="(3, 6) bias, one per output element"),
        Sample((r(2, 4, 24), r(6, 24), r(4, 1, 6)[:, 0]), desc="(4, 6) bias broadcast over "
               "the batch"),
        Sample((r(2, 3, 0), r(6, 0), r(6)), desc="K = 0: the bias"),
        Sample((r(3, 0), r(6, 0), None), desc="K = 0 without bias: zeros"),
    ]


def _bad_samples() -> list[BadSample]:
    return [
        BadSample((torch.zeros(2, 3), torch.zeros(4, 5)), match="cannot be multiplied"),
        BadSample((torch.zeros(2, 3), torch.zeros(4, 3), torch.zeros(5))),
        BadSample(([[1.0]], torch.zeros(1, 1)), error=(TypeError, AttributeError)),
        BadSample((torch.zeros(2, 3), torch.zeros(4, 3), torch.zeros(3, 4)),
                  match="does not broadcast|expanded size"),
        # a bias that squeezes to 1-D goes to addmm over the (8, 4) rows of a contiguous input
        BadSample((torch.zeros(2, 4, 3), torch.zeros(4, 3), torch.zeros(4, 1)),
                  match="does not broadcast|expanded size"),
        BadSample((torch.zeros(2, 3), torch.zeros(3), torch.zeros(())),
                  match="2-D weight|must be a matrix"),
    ]


OPS = [
    OpInfo("ops.linear", ops.linear, F.linear, _samples, bad_samples=_bad_samples,
           dtypes=(torch.float32, torch.float16, torch.bfloat16), grad_args=(0, 1),
           grad_dtypes=(torch.float32,),
           rtol={torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2,
                 torch.float64: 1e-12},
           supports_out=False,
           skips={"upcast": "computes natively in float16/bfloat16 with float32 accumulation "
                            "(F.linear semantics), so low-precision inputs are not upcast"}),
]
instantiate_generic_tests(globals(), OPS)
