"""scaled_dot_product_attention (mpslinalg.ops.attention) against torch's on the CPU in float64:
shapes (decode, rows past a group, keys past a tile, broadcast batches), grouped-query heads,
boolean / additive / causal masks, fully masked rows, scales, dtypes, gradients, and both
kernels in two lane orders."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import mpslinalg
from mpslinalg import emulator, ops
from mpslinalg._core import metal as _metal
from mpslinalg.ops import attention as attention_module

KERNELS = ("rows", "decode")
#: Max abs error against float64, by dtype (inputs of unit size, outputs averages of them).
TOL = {torch.float32: 2e-6, torch.float16: 2e-3, torch.bfloat16: 2e-2}


def _randn(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def reference(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    wide = [x.double() for x in (q, k, v)]
    if attn_mask is not None and attn_mask.dtype != torch.bool:
        attn_mask = attn_mask.double()
    return F.scaled_dot_product_attention(*wide, attn_mask=attn_mask, is_causal=is_causal,
                                          scale=scale, enable_gqa=enable_gqa)


def cases():
    """(description, q, k, v, kwargs)."""
    m = _randn(37, 45, seed=9) > 0.0
    m[5] = False  # a row that attends to nothing
    return [
        ("4-D, default scale", _randn(2, 3, 37, 16, seed=1), _randn(2, 3, 45, 16, seed=2),
         _randn(2, 3, 45, 8, seed=3), {}),
        ("decode row, GQA 8 / 2", _randn(2, 8, 1, 32, seed=4), _randn(2, 2, 70, 32, seed=5),
         _randn(2, 2, 70, 32, seed=6), {"enable_gqa": True}),
        ("causal, L != S, scale 0.7", _randn(3, 33, 12, seed=7), _randn(3, 20, 12, seed=8),
         _randn(3, 20, 5, seed=10), {"is_causal": True, "scale": 0.7}),
        ("bool mask broadcast (L, S), masked row", _randn(2, 2, 37, 16, seed=11),
         _randn(2, 2, 45, 16, seed=12), _randn(2, 2, 45, 16, seed=13), {"attn_mask": m}),
        ("additive mask (2, 1, L, S), GQA 4 / 2", _randn(2, 4, 37, 8, seed=14),
         _randn(2, 2, 45, 8, seed=15), _randn(2, 2, 45, 8, seed=16),
         {"attn_mask": _randn(2, 1, 37, 45, seed=17), "enable_gqa": True, "scale": 2.0}),
        ("broadcast batch (2, 1) with (1, 3), 2-D mask", _randn(2, 1, 9, 4, seed=18),
         _randn(1, 3, 11, 4, seed=19), _randn(1, 3, 11, 6, seed=20),
         {"attn_mask": _randn(9, 11, seed=21).abs().log()}),
        ("2-D, no batch", _randn(5, 3, seed=22), _randn(7, 3, seed=23), _randn(7, 2, seed=24),
         {}),
    ]


@pytest.mark.parametrize("kernel", KERNELS)
def test_kernels_against_torch(metal_backend, kernel):
    for desc, q, k, v, kw in cases():
        gqa = kw.get("enable_gqa", False)
        scale = kw.get("scale", 1.0 / math.sqrt(q.shape[-1]))
        mask = kw.get("attn_mask")
        ours = attention_module.attention_metal(
            *(metal_backend.tensor(x) for x in (q, k, v)),
            None if mask is None else metal_backend.tensor(mask),
            kw.get("is_causal", False), scale, gqa, kernel=kernel)
        ref = reference(q, k, v, **kw)
        assert ours.shape == ref.shape, desc
        assert (ours.cpu().double() - ref).abs().max() < TOL[torch.float32], desc


@pytest.mark.parametrize(("E", "Ev"), [(64, 64), (65, 3), (40, 129), (256, 200)])
def test_head_dimension_buckets(metal_backend, E, Ev):
    q, k, v = _randn(1, 2, 35, E, seed=E), _randn(1, 2, 41, E, seed=Ev), _randn(1, 2, 41, Ev,
                                                                                  seed=7)
    for kernel in KERNELS:
        ours = attention_module.attention_metal(q, k, v, None, True, 0.1, False, kernel=kernel)
        ref = reference(q, k, v, is_causal=True, scale=0.1)
        assert (ours.double() - ref).abs().max() < TOL[torch.float32], (E, Ev, kernel)


def test_public_function(backend):
    for desc, q, k, v, kw in cases():
        kw = {a: backend.tensor(b) if isinstance(b, torch.Tensor) else b for a, b in kw.items()}
        ours = ops.scaled_dot_product_attention(*(backend.tensor(x) for x in (q, k, v)), **kw)
        ref = reference(q, k, v, **{a: b.cpu() if isinstance(b, torch.Tensor) else b
                                    for a, b in kw.items()})
        assert (ours.cpu().double() - ref).abs().max() < TOL[torch.float32], desc


@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16), ids=str)
def test_low_precision(metal_backend, dtype):
    for desc, q, k, v, kw in cases()[:4]:
        args = [metal_backend.tensor(x).to(dtype) for x in (q, k, v)]
        ours = ops.scaled_dot_product_attention(*args, **kw)
        assert ours.dtype == dtype
        ref = reference(*(a.cpu() for a in args), **kw)
        assert (ours.cpu().double() - ref).abs().max() < TOL[dtype], desc


def test_scale_is_applied_to_every_batch_element_and_head(metal_backend):
    """One distinct scale, many (batch, head) pairs of different content: each output row must
    match its own reference (a per-batch / per-head scale error shows in some pairs only)."""
    q, k, v = _randn(3, 5, 2, 8, seed=30), _randn(3, 5, 40, 8, seed=31), _randn(3, 5, 40, 8,
                                                                                seed=32)
    for scale in (0.05, 0.5, 3.0):
        for kernel in KERNELS:
            ours = attention_module.attention_metal(q, k, v, None, False, scale, False,
                                                    kernel=kernel)
            ref = reference(q, k, v, scale=scale)
            err = (ours.double() - ref).abs().amax(dim=(-2, -1))
            assert (err < TOL[torch.float32]).all(), (scale, kernel, err)


def test_lane_orders_agree(metal_backend, monkeypatch):
    _, q, k, v, kw = cases()[3]
    results = []
    for order in ("forward", "reverse"):
        monkeypatch.setattr(_metal, "LANE_ORDER", order)
        results.append([attention_module.attention_metal(q, k, v, kw["attn_mask"], False, 0.3,
                                                         False, kernel=kernel)
                        for kernel in KERNELS])
    for a, b in zip(*results, strict=True):
        assert torch.equal(a, b)


def test_empty_and_fully_masked(backend):
    q, k, v = _randn(2, 3, 4, seed=40), _randn(2, 0, 4, seed=41), _randn(2, 0, 5, seed=42)
    out = ops.scaled_dot_product_attention(*(backend.tensor(x) for x in (q, k, v)))
    assert out.shape == (2, 3, 5) and (out == 0).all()
    k, v = _randn(2, 6, 4, seed=43), _randn(2, 6, 5, seed=44)
    none = torch.zeros(3, 6, dtype=torch.bool)
    out = ops.scaled_dot_product_attention(*(backend.tensor(x) for x in (q, k, v)),
                                           attn_mask=backend.tensor(none))
    assert (out == 0).all()
    assert ops.scaled_dot_product_attention(*(backend.tensor(x[:0]) for x in (q, k, v))).shape \
        == (0, 3, 5)


def test_gradients_against_torch(backend):
    for desc, q, k, v, kw in cases():
        args = [backend.tensor(x).requires_grad_() for x in (q, k, v)]
        out = ops.scaled_dot_product_attention(*args, **kw)
        weight = _randn(*out.shape, seed=50)
        grads = torch.autograd.grad((out * backend.tensor(weight)).sum(), args)
        wide = [x.double().requires_grad_() for x in (q, k, v)]
        ref = reference(*wide, **kw)
        ref_grads = torch.autograd.grad((ref * weight.double()).sum(), wide)
        for g, r in zip(grads, ref_grads, strict=True):
            assert (g.cpu().double() - r).abs().max() < 1e-4 * max(1.0, r.abs().max()), desc


def test_gradcheck_recompute_path():
    q, k, v = (_randn(1, 4, 2, 3, seed=60).double(), _randn(1, 2, 4, 3, seed=61).double(),
               _randn(1, 2, 4, 2, seed=62).double())
    mask = _randn(2, 4, seed=63).double()
    with mpslinalg.use_backend("torch"):
        torch.autograd.gradcheck(
            lambda q, k, v: attention_module.attention_op(q, k, v, mask, False, 0.4, True, 0.0,
                                                          0, "torch", False, ""),
            [x.requires_grad_() for x in (q, k, v)])


def test_one_launch_no_host_sync(metal_backend):
    from mpslinalg.testing import count_host_syncs

    for _, q, k, v, kw in cases():
        emulator.reset_launch_counts()
        with count_host_syncs() as syncs:
            ops.scaled_dot_product_attention(*(metal_backend.tensor(x) for x in (q, k, v)), **kw)
        assert emulator.total_launches() == 1 and syncs.calls == []


def test_errors(backend):
    q, k, v = (backend.tensor(x) for x in (_randn(2, 4, 3, 8, seed=70),
                                           _randn(2, 3, 5, 8, seed=71),
                                           _randn(2, 3, 5, 8, seed=72)))
    f = ops.scaled_dot_product_attention
    k1, v1 = k[:, :1], v[:, :1]
    cases = [  # (call, error, our message; the torch backend raises torch's, reworded)
        (lambda: f(q, k, v, enable_gqa=True), RuntimeError, "Number of heads"),
        (lambda: f(q, k1, v1, attn_mask=torch.ones(3, 5, dtype=torch.bool), is_causal=True),
         RuntimeError, "should not be set when is_causal"),
        (lambda: f(q, k.half(), v), RuntimeError, "same dtype"),
        (lambda: f(q, k[..., :4], v), RuntimeError, "same last dimension"),
        (lambda: f(q, k1, v1, attn_mask=torch.ones(3, 5, dtype=torch.int32)), RuntimeError,
         "attn_mask dtype"),
        (lambda: f(q, k1, v1, attn_mask=torch.ones(4, 5, dtype=torch.bool)), RuntimeError,
         "do not broadcast"),
    ]
    for call, error, match in cases:
        with pytest.raises(error, match=match if backend.is_metal else None) as err:
            call()
        assert str(err.value).startswith("mpslinalg.scaled_dot_product_attention: ")
    with pytest.raises(ValueError, match="dropout_p must be"):
        f(q, k1, v1, dropout_p=1.5)
    if backend.is_metal:
        with pytest.raises(RuntimeError, match="head dimensions up to 256"):
            f(torch.zeros(1, 2, 257), torch.zeros(1, 3, 257), torch.zeros(1, 3, 2))
    else:  # dropout on the torch backend is torch's
        torch.manual_seed(0)
        a = f(q, k1, v1, dropout_p=0.5)
        torch.manual_seed(0)
        assert torch.equal(a, F.scaled_dot_product_attention(q, k1, v1, dropout_p=0.5))


def test_meta_shapes(backend):
    for _, q, k, v, kw in cases():
        meta_kw = {a: b.to("meta") if isinstance(b, torch.Tensor) else b for a, b in kw.items()}
        out = ops.scaled_dot_product_attention(*(x.to("meta") for x in (q, k, v)), **meta_kw)
        assert out.device.type == "meta" and out.shape == reference(q, k, v, **kw).shape


# ---------------------------------------------------------------- dropout


def _dropout_reference(q, k, v, multipliers, **kw):
    """(softmax(...) * D) V in float64, D the kernel's multipliers."""
    from mpslinalg.ops.attention import attention_weights

    gqa = kw.get("enable_gqa", False) and k.shape[-3] != q.shape[-3]
    group = q.shape[-3] // k.shape[-3] if gqa else 1
    q, k, v = (x.double() for x in (q, k, v))
    if gqa:
        k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
    mask = kw.get("attn_mask")
    if mask is not None and mask.dtype != torch.bool:
        mask = mask.double()
    p = attention_weights(q, k, mask, kw.get("is_causal", False),
                          kw.get("scale", 1.0 / math.sqrt(q.shape[-1])), False)
    return (p * multipliers.double()) @ v


@pytest.mark.parametrize("kernel", KERNELS)
def test_dropout_against_its_multipliers(metal_backend, kernel):
    p_drop, seed = 0.3, 1234
    for desc, q, k, v, kw in cases()[:5]:
        gqa = kw.get("enable_gqa", False)
        scale = kw.get("scale", 1.0 / math.sqrt(q.shape[-1]))
        D = attention_module.dropout_multipliers(q, k, v, gqa, p_drop, seed)
        kept = (D > 0).double().mean().item()
        assert abs(kept - (1 - p_drop)) < 5 * math.sqrt(p_drop * (1 - p_drop) / D.numel()), desc
        assert ((D == 0) | (D == torch.tensor(1 / (1 - p_drop), dtype=torch.float32))).all()
        ours = attention_module.attention_metal(q, k, v, kw.get("attn_mask"),
                                                kw.get("is_causal", False), scale, gqa, p_drop,
                                                seed, kernel=kernel)
        ref = _dropout_reference(q, k, v, D, **kw)
        assert (ours.double() - ref).abs().max() < 1e-5, desc


def test_dropout_public_reproducible_and_differentiable(metal_backend):
    _, q, k, v, kw = cases()[1]
    torch.manual_seed(3)
    a = ops.scaled_dot_product_attention(q, k, v, dropout_p=0.4, **kw)
    torch.manual_seed(3)
    args = [x.clone().requires_grad_() for x in (q, k, v)]
    b = ops.scaled_dot_product_attention(*args, dropout_p=0.4, **kw)
    assert torch.equal(a, b)
    assert not torch.equal(a, ops.scaled_dot_product_attention(q, k, v, dropout_p=0.4, **kw))
    torch.manual_seed(3)
    from mpslinalg._core.seed import draw_seed

    D = attention_module.dropout_multipliers(q, k, v, True, 0.4, draw_seed("test", None))
    weight = _randn(*b.shape, seed=77)
    grads = torch.autograd.grad((b * weight).sum(), args)
    wide = [x.double().requires_grad_() for x in (q, k, v)]
    ref = _dropout_reference(*wide, D, **kw)
    ref_grads = torch.autograd.grad((ref * weight.double()).sum(), wide)
    for g, r in zip(grads, ref_grads, strict=True):
        assert (g.double() - r).abs().max() < 1e-4 * max(1.0, r.abs().max())
    everything = ops.scaled_dot_product_attention(q, k, v, dropout_p=1.0, **kw)
    assert (everything == 0).all()


# ---------------------------------------------------------------- op database

from opdb import BadSample, OpInfo, Sample, instantiate_generic_tests  # noqa: E402


def _samples(complex_: bool) -> list[Sample]:
    """Small shapes (gradcheck runs on them); masks positional, so that the generic tests
    convert additive ones with the operands."""
    def r(*shape, seed):
        return _randn(*shape, seed=seed).double()

    keep = _randn(6, 7, seed=88) > -0.5
    keep[2] = False
    return [
        Sample((r(2, 2, 6, 4, seed=80), r(2, 2, 7, 4, seed=81), r(2, 2, 7, 3, seed=82)),
               desc="(2, 2, 6, 4), S 7"),
        Sample((r(2, 4, 1, 4, seed=83), r(2, 2, 9, 4, seed=84), r(2, 2, 9, 4, seed=85)),
               {"enable_gqa": True, "scale": 0.8}, desc="decode row, GQA 4 / 2, scale 0.8"),
        Sample((r(3, 6, 4, seed=86), r(3, 7, 4, seed=87), r(3, 7, 2, seed=89)),
               {"is_causal": True}, desc="causal, L != S"),
        Sample((r(2, 1, 6, 4, seed=90), r(1, 2, 7, 4, seed=91), r(1, 2, 7, 2, seed=92), keep),
               desc="broadcast batch, bool mask with a row that attends to nothing"),
        Sample((r(2, 6, 4, seed=93), r(2, 7, 4, seed=94), r(2, 7, 5, seed=95),
                r(2, 1, 7, seed=96)), desc="additive mask (2, 1, S)"),
    ]


def _bad_samples() -> list[BadSample]:
    return [
        BadSample((torch.zeros(2, 3, 4), torch.zeros(2, 5, 3), torch.zeros(2, 5, 4)),
                  error=RuntimeError),
        BadSample((torch.zeros(2, 3, 4), torch.zeros(2, 5, 4), torch.zeros(2, 5, 4)),
                  {"attn_mask": torch.zeros(3, 5, dtype=torch.bool), "is_causal": True},
                  error=RuntimeError, match="is_causal"),
        BadSample((torch.zeros(1, 4, 3, 4), torch.zeros(1, 3, 5, 4), torch.zeros(1, 3, 5, 4)),
                  {"enable_gqa": True}, error=RuntimeError, match="[Nn]umber of heads"),
    ]


OPS = [
    OpInfo("ops.scaled_dot_product_attention", ops.scaled_dot_product_attention,
           F.scaled_dot_product_attention, _samples, bad_samples=_bad_samples,
           dtypes=(torch.float32,), grad_args=(0, 1, 2), supports_out=False,
           rtol={torch.float32: 2e-5, torch.float64: 1e-10},
           skips={"meta": "the generic meta test leaves keyword tensors (the masks) on the CPU; "
                          "test_meta_shapes moves them too",
                  "upcast": "torch computes attention natively in float16 / bfloat16 (the torch "
                            "backend is torch's); the metal kernels read them and compute in "
                            "float32, checked by test_low_precision"}),
]
instantiate_generic_tests(globals(), OPS)
