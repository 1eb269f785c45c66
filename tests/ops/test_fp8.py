"""mpslinalg.ops fp8: every code decoded and every rounding boundary encoded bit for bit as
torch's CPU casts; to_float8 recipes; scaled_mm against torch's F.scaled_mm (TensorWise,
RowWise) and the float64 definition (blockwise, mixed); launches, host syncs, storage."""

from __future__ import annotations

import doctest
import itertools
import math

import pytest
import torch
import torch.nn.functional as F

import mpslinalg
from mpslinalg import ops
from mpslinalg._core import metal as _metal
from mpslinalg.emulator import reset_launch_counts, total_launches
from mpslinalg.ops import ScalingType, float8_storage, from_float8, scaled_mm, to_float8
from mpslinalg.ops import fp8 as fp8_module
from mpslinalg.testing import count_host_syncs

FORMATS = (torch.float8_e4m3fn, torch.float8_e5m2)
RECIPES = (ScalingType.TensorWise, ScalingType.RowWise, ScalingType.BlockWise1x128,
           ScalingType.BlockWise128x128)


def _all_codes(dtype) -> torch.Tensor:
    return torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype)


def _boundaries(dtype) -> torch.Tensor:
    """Every finite code, every midpoint between neighbours (ties), points just either side of
    each midpoint, the overflow threshold region, subnormals of float32, infinities, NaN."""
    codes = _all_codes(dtype).float()
    finite = codes[codes.isfinite()].unique()
    mids = (finite[:-1] + finite[1:]) / 2
    fmax = torch.finfo(dtype).max
    top_step = finite[-1] - finite[-2]
    specials = torch.tensor([math.inf, -math.inf, math.nan, fmax + top_step / 2,
                             fmax + top_step, 2 * fmax, 1e38, 1e-40, -1e-45, 0.0, -0.0])
    near = torch.cat([torch.nextafter(mids, torch.tensor(math.inf)),
                      torch.nextafter(mids, torch.tensor(-math.inf))])
    values = torch.cat([finite, mids, near, specials])
    return torch.cat([values, -values])


@pytest.mark.parametrize("dtype", FORMATS)
def test_decode_of_all_256_codes_is_bit_identical(dtype):
    codes = _all_codes(dtype)
    reset_launch_counts()
    with mpslinalg.use_backend("metal"):
        got = from_float8(codes, torch.ones(()))
    assert total_launches() == 1
    ref = codes.float()
    same = (got.view(torch.int32) == ref.view(torch.int32)) | (got.isnan() & ref.isnan())
    assert same.all(), codes.view(torch.uint8)[~same]


@pytest.mark.parametrize("dtype", FORMATS)
@pytest.mark.parametrize("backend_name", ["torch", "metal"])
def test_encode_of_every_boundary_is_bit_identical(dtype, backend_name):
    x = _boundaries(dtype).reshape(1, -1)
    with mpslinalg.use_backend(backend_name):
        got = fp8_module.fp8_encode_op(x, torch.ones(1, 1), 1, x.shape[1], fp8_module.FP8_FORMATS[
            dtype], backend_name, False, "")
    ref = x.to(dtype).view(torch.uint8)
    assert torch.equal(got, ref), x[got != ref]


def _torch_scaled_mm_runs_on_the_cpu() -> bool:
    """Whether this torch has a CPU kernel for F.scaled_mm (2.13 has; 2.11 only CUDA)."""
    if not hasattr(F, "scaled_mm"):
        return False
    one = torch.ones(16, 16).to(torch.float8_e4m3fn)
    try:
        F.scaled_mm(one, one.t(), torch.ones(()), ScalingType.TensorWise, torch.ones(()),
                    ScalingType.TensorWise)
    except NotImplementedError:
        return False
    return True


@pytest.mark.parametrize("source", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
@pytest.mark.parametrize("dtype", FORMATS)
def test_to_float8_is_torchs_cast_of_x_over_scale(backend, source, recipe, dtype):
    gen = torch.Generator().manual_seed(1)
    x = (torch.randn(130, 260, generator=gen) * 30).to(source)
    x[3] = 0  # an all-zero row (and, blockwise, part of a block)
    x[:, :128][:128] *= 1e-3
    data, scale = to_float8(backend.tensor(x), dtype, recipe)
    assert data.dtype == dtype and data.shape == x.shape and scale.dtype == torch.float32
    kind = recipe.value
    if kind == 0:
        assert scale.shape == ()
        full = scale.expand(x.shape)
    elif kind == 1:
        assert scale.shape == (130, 1)
        full = scale.expand(x.shape)
    elif kind == 4:
        assert scale.shape == (130, 3) and scale.stride() == (1, 130)
        full = scale.repeat_interleave(128, 1)[:, :260]
    else:  # torch's layout: K-major, the K blocks padded to a multiple of 4 (with ones)
        assert scale.shape == (4, 2) and scale.stride() == (1, 4)
        assert (scale[3:] == 1).all()
        full = scale[:3].t().repeat_interleave(128, 0)[:130].repeat_interleave(128, 1)[:, :260]
    ref = (x.float() / full.cpu()).to(dtype)
    assert torch.equal(data.cpu().view(torch.uint8), ref.view(torch.uint8))
    amax = (data.cpu().float() * full.cpu()).abs()
    assert (amax <= x.float().abs().max() * 1.07).all()
    if kind == 1:
        assert scale[3].item() == 1.0
        assert (data.cpu().float().abs().amax(1)[torch.arange(130) != 3]
                == torch.finfo(dtype).max).all()


@pytest.mark.parametrize("out", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_from_float8_is_decoded_times_scale_rounded_once(backend, recipe, out):
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(130, 200, generator=gen) * 7
    data, scale = to_float8(x, torch.float8_e5m2, recipe)
    got = from_float8(backend.tensor(data), backend.tensor(scale), recipe, out).cpu()
    with mpslinalg.use_backend("torch"):
        ref = from_float8(data, scale, recipe, out)
    assert torch.equal(got, ref)
    assert ((got.float() - x).abs() <= x.abs() * 0.13 + 1e-2).all()  # e5m2: 2 mantissa bits
    if recipe == ScalingType.TensorWise:  # a transposed (strided) view of the data
        strided = from_float8(backend.tensor(data).t(), backend.tensor(scale))
        assert torch.equal(strided.cpu(), from_float8(data, scale).t())


def test_to_float8_storage_and_float8_storage():
    x = torch.randn(4, 8)
    data, scale = to_float8(x, torch.float8_e5m2, storage=True)
    assert data.dtype == torch.uint8
    data8, _ = to_float8(x, torch.float8_e5m2)
    assert torch.equal(float8_storage(data8), data)
    assert float8_storage(data8).data_ptr() == data8.data_ptr()
    with pytest.raises(TypeError, match="^mpslinalg.float8_storage: "):
        float8_storage(x)


def _full_scale(scale, kind, rows, k):
    """float64 scale of every element of an operand (rows, K), ``mat_a`` or ``mat_b.t()``, from
    its scale in torch's layout (whole 128 blocks)."""
    if kind == 0:
        return scale.double().reshape(1, 1).expand(rows, k)
    if kind == 1:
        return scale.double().reshape(rows, 1).expand(rows, k)
    grid = scale if kind == 4 else scale[:k // 128].t()  # 128x128: (L4, rows / 128)
    return grid.double().repeat_interleave(1 if kind == 4 else 128, 0).repeat_interleave(128, 1)


def _definition(a8, b8, sa, sb, kind_a, kind_b, bias):
    """float64 (A * scale_a) (B * scale_b) + bias from the decoded operands."""
    (m, k), n = a8.shape, b8.shape[1]
    out = (a8.double() * _full_scale(sa, kind_a, m, k)) @ (
        b8.double().t() * _full_scale(sb, kind_b, n, k)).t()
    return out if bias is None else out + bias.double()


PAIRS = [(ScalingType.TensorWise, ScalingType.TensorWise),
         (ScalingType.RowWise, ScalingType.RowWise),
         (ScalingType.BlockWise1x128, ScalingType.BlockWise128x128),
         (ScalingType.BlockWise128x128, ScalingType.BlockWise1x128),
         (ScalingType.BlockWise1x128, ScalingType.BlockWise1x128)]
#: float32 accumulation of K products of fp8 values, then one rounding to the output: relative
#: to the largest output, K * 2^-24 plus half an ulp of the output dtype.
OUT_RTOL = {torch.float32: 2e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}
#: (pair, M): decode shapes, except BlockWise128x128 of mat_a, which takes whole 128-row blocks.
PAIRS_AND_M = [(pair, m) for pair in PAIRS
               for m in ((128,) if pair[0] == ScalingType.BlockWise128x128 else (1, 3, 8, 11))]


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("pair, m", PAIRS_AND_M,
                         ids=lambda p: f"{p[0].name}-{p[1].name}" if isinstance(p, tuple) else p)
def test_scaled_mm_against_the_definition(backend, out_dtype, pair, m):
    gen = torch.Generator().manual_seed(m)
    k, n = 384, 256
    x = torch.randn(m, k, generator=gen)
    w = torch.randn(n, k, generator=gen) * 0.1
    bias = torch.randn(n, generator=gen).to(out_dtype)
    a8, sa = to_float8(x, torch.float8_e4m3fn, pair[0])
    w8, sw = to_float8(w, torch.float8_e5m2, pair[1])
    # mat_b's scale is that of mat_b.t(), the weight; RowWise as (1, N), which torch's CPU
    # kernel needs too (its check also takes (N, 1))
    b8, sb = w8.t(), sw.t() if pair[1] == ScalingType.RowWise else sw
    got = scaled_mm(backend.tensor(a8), backend.tensor(b8), backend.tensor(sa), pair[0],
                    backend.tensor(sb), pair[1], bias=backend.tensor(bias),
                    output_dtype=out_dtype).cpu()
    ref = _definition(a8.float(), b8.float(), sa, sb, pair[0].value, pair[1].value, bias)
    assert got.dtype == out_dtype and got.shape == (m, n)
    err = (got.double() - ref).abs().max() / ref.abs().max()
    assert err <= OUT_RTOL[out_dtype], err
    if pair[0] == pair[1] and pair[0].value <= 1 and _torch_scaled_mm_runs_on_the_cpu():
        # torch runs these two recipes on the CPU (2.13; not 2.11): compare with it too
        torch_out = F.scaled_mm(a8, b8, sa, pair[0], sb.contiguous(), pair[1], bias=bias,
                                output_dtype=out_dtype)
        assert ((got.double() - torch_out.double()).abs().max() / ref.abs().max()
                <= OUT_RTOL[out_dtype])


def test_uint8_storage_and_mixed_formats(backend):
    gen = torch.Generator().manual_seed(5)
    a8, sa = to_float8(torch.randn(2, 64, generator=gen), torch.float8_e5m2)
    b8, sb = to_float8(torch.randn(16, 64, generator=gen), torch.float8_e4m3fn)
    one = ScalingType.TensorWise
    ref = scaled_mm(a8, b8.t(), sa, one, sb, one, output_dtype=torch.float32)
    # both uint8: one storage_dtype for both operands; so mixed formats keep their float8 dtype
    got = scaled_mm(backend.tensor(a8), backend.tensor(float8_storage(b8)).t(), backend.tensor(
        sa), one, backend.tensor(sb), one, output_dtype=torch.float32,
        storage_dtype=torch.float8_e4m3fn)
    if backend.name == "cuda":  # cuBLASLt's e5m2 x e4m3 product: errors of bfloat16's order
        assert (got.cpu() - ref).abs().max() <= OUT_RTOL[torch.bfloat16] * ref.abs().max()
    else:
        torch.testing.assert_close(got.cpu(), ref)
    with pytest.raises(TypeError, match="^mpslinalg.scaled_mm: .*storage_dtype"):
        scaled_mm(float8_storage(a8), b8.t(), sa, one, sb, one)


def test_one_launch_and_no_host_sync(metal_backend):
    gen = torch.Generator().manual_seed(6)
    for m in (1, 4, 8, 17):
        a8, sa = to_float8(torch.randn(m, 256, generator=gen), recipe=ScalingType.BlockWise1x128)
        w8, sw = to_float8(torch.randn(128, 256, generator=gen),
                           recipe=ScalingType.BlockWise128x128)
        args = [metal_backend.tensor(t) for t in (a8, w8.t(), sa, sw)]
        reset_launch_counts()
        with count_host_syncs() as syncs:
            scaled_mm(args[0], args[1], args[2], ScalingType.BlockWise1x128, args[3],
                      ScalingType.BlockWise128x128)
        assert syncs.calls == []
        if metal_backend.device.type == "cpu":
            assert total_launches() == 1
    x = metal_backend.tensor(torch.randn(8, 300))
    reset_launch_counts()
    with count_host_syncs() as syncs:
        to_float8(x, recipe=ScalingType.RowWise)
    assert syncs.calls == []


def test_vector_and_scalar_byte_loads_agree_bitwise(metal_backend):
    a8, sa = to_float8(torch.randn(5, 260))
    w8, sw = to_float8(torch.randn(12, 260), torch.float8_e5m2)
    one = ScalingType.TensorWise
    args = [metal_backend.tensor(t) for t in (a8, sa, sw)]
    loaded_by_4 = scaled_mm(args[0], metal_backend.tensor(w8).t(), args[1], one, args[2], one)
    row_major = metal_backend.tensor(w8.t().contiguous())  # K not contiguous: byte by byte
    assert torch.equal(scaled_mm(args[0], row_major, args[1], one, args[2], one), loaded_by_4)


def test_nan_and_inf_propagate(backend):
    a = torch.tensor([[1.0, 2.0], [3.0, 4.0]]).to(torch.float8_e5m2)
    a_storage = float8_storage(a).clone()
    a_storage[0, 0] = 0x7F  # NaN
    a_storage[1, 1] = 0x7C  # +inf
    b = torch.ones(2, 1).to(torch.float8_e4m3fn)
    one = backend.tensor(torch.ones(()))
    out = scaled_mm(backend.tensor(a_storage.view(torch.float8_e5m2)), backend.tensor(b), one,
                    ScalingType.TensorWise, one, ScalingType.TensorWise,
                    output_dtype=torch.float32).cpu()
    assert out[0, 0].isnan() and out[1, 0] == math.inf


def test_results_do_not_depend_on_lane_order(monkeypatch):
    a8, sa = to_float8(torch.randn(3, 500))
    b8, sb = to_float8(torch.randn(10, 500))
    args = (a8, b8.t(), sa, ScalingType.TensorWise, sb, ScalingType.TensorWise)
    with mpslinalg.use_backend("metal"):
        forward = scaled_mm(*args)
        monkeypatch.setattr(_metal, "LANE_ORDER", "reverse")
        assert torch.equal(scaled_mm(*args), forward)


def test_scaling_type_is_torchs_where_torch_has_one():
    assert ops.ScalingType is getattr(F, "ScalingType", fp8_module._ScalingType)
    assert ops.SwizzleType is getattr(F, "SwizzleType", fp8_module._SwizzleType)
    assert [r.value for r in RECIPES] == [0, 1, 4, 5]
    for ours, theirs in ((fp8_module._ScalingType, ops.ScalingType),
                         (fp8_module._SwizzleType, ops.SwizzleType)):
        assert {m.name: m.value for m in ours} == {
            name: m.value for name, m in theirs.__members__.items()}


def test_bad_input(backend):
    a8, sa = to_float8(torch.randn(4, 8))
    b8, sb = to_float8(torch.randn(6, 8))
    a8, b8t, sa, sb = (backend.tensor(t) for t in (a8, b8.t(), sa, sb))
    tw, rw = ScalingType.TensorWise, ScalingType.RowWise
    rows = backend.tensor(torch.ones(4, 1))
    cases = [
        ((a8.float(), b8t, sa, tw, sb, tw), {}, TypeError, "mat_a must be float8"),
        ((a8, b8t[:4], sa, tw, sb, tw), {}, RuntimeError, "mat_a .M, K. and mat_b"),
        ((a8, b8t, rows[:3], rw, rows[:1].expand(1, 6), rw), {}, ValueError, "scale_a"),
        ((a8, b8t, rows, rw, sb, tw), {}, RuntimeError, "invalid scaling configuration"),
        ((a8, b8t, sa, tw, sb, ScalingType.BlockWise1x16), {}, RuntimeError,
         "invalid scaling configuration"),
        ((a8, b8t, sa, ScalingType.BlockWise1x32, sb, ScalingType.BlockWise1x32), {},
         NotImplementedError, "MX"),
        ((a8, b8t, sa, tw, sb, 9), {}, ValueError, "scale_recipe_b"),
        ((a8, b8t, sa.double(), tw, sb, tw), {}, ValueError, "scale_a must have one float32"),
        ((a8, b8t, sa, tw, sb, tw), {"output_dtype": torch.float8_e4m3fn}, TypeError,
         "output_dtype"),
        ((a8, b8t, sa, tw, sb, tw), {"bias": backend.tensor(torch.zeros(5))}, ValueError, "bias"),
        ((a8, b8t, sa, tw, sb, tw), {"swizzle_a": 7}, ValueError, "swizzle_a"),
        ((a8, b8t, sa, tw, sb, tw), {"contraction_dim": (0, 1)}, ValueError, "contraction_dim"),
    ]
    for args, kwargs, error, match in cases:
        with pytest.raises(error, match=f"^mpslinalg.scaled_mm: .*{match}"):
            scaled_mm(*args, **kwargs)
    x = backend.tensor(torch.randn(2, 3, 4))
    with pytest.raises(RuntimeError, match="^mpslinalg.to_float8: .*2-D"):
        to_float8(x, recipe=ScalingType.RowWise)
    with pytest.raises(TypeError, match="^mpslinalg.to_float8: dtype"):
        to_float8(x, torch.float16)


def test_inputs_unmodified_and_meta(backend):
    x = backend.tensor(torch.randn(5, 256))
    before = x.clone()
    a8, sa = to_float8(x, recipe=ScalingType.BlockWise1x128)
    assert torch.equal(x, before)
    a_bytes = float8_storage(a8).clone()
    scaled_mm(a8, a8.t(), sa, ScalingType.BlockWise1x128, sa, ScalingType.BlockWise1x128)
    assert torch.equal(float8_storage(a8), a_bytes)
    meta = torch.empty(5, 130, device="meta")
    m8, ms = to_float8(meta, recipe=ScalingType.RowWise)
    assert m8.device.type == "meta" and m8.shape == (5, 130) and ms.shape == (5, 1)


def test_docstring_examples():
    failures, tried = doctest.testmod(fp8_module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert tried > 0 and failures == 0


# ---------------------------------------------------------------- torch's check of the layouts

#: torch's shape check of F.scaled_mm: the meta function of aten._scaled_mm_v2 (torch 2.10+).
#: mpslinalg follows the shape check of torch 2.13's aten._scaled_mm_v2 (the CI's torch); torch
#: 2.10-2.12 have the function with a laxer check (a 1-D RowWise scale_a, seen on 2.11), which
#: mpslinalg refuses with a clear error (docs/known_issues.rst).
TORCH_CHECKS_SCALED_MM = (hasattr(F, "scaled_mm") and hasattr(torch.ops.aten, "_scaled_mm_v2")
                          and tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 13))
#: Every recipe torch knows, alone, and NVFP4's two-level recipe.
ALL_RECIPES = [[r] for r in ops.ScalingType.__members__.values()] + [
    [ScalingType.BlockWise1x16, ScalingType.TensorWise]]
#: (M, K, N): K padded from 5 to 8 blocks in a BlockWise128x128 scale; one block of M or N (a
#: blockwise scale of one column); partial blocks of M, K and N; of M and N only (multiples of
#: 16, as torch's CUDA-side checks of meta operands want). Each with one swizzle argument.
LAYOUT_SIZES = [(256, 640, 384), (128, 256, 128), (200, 272, 144), (200, 256, 144)]
SWIZZLES = [None, ops.SwizzleType.NO_SWIZZLE, ops.SwizzleType.SWIZZLE_32_4_4,
            ops.SwizzleType.SWIZZLE_32_4_4]


def _scale_candidates(rows: int, k: int) -> dict[str, object]:
    """Scales of an operand (rows, K) (``mat_a`` or ``mat_b.t()``), meta tensors in the layouts
    of every recipe, transposed, with wrong or unpadded sizes, contiguous and column-major, of
    wrong dtypes, and the MX / NVFP4 element counts."""
    kb, kc, rb = k // 128, -(-k // 128), rows // 128
    l4 = -(-kb // 4) * 4

    def row_major(*shape, dtype=torch.float32):
        return torch.empty(shape, device="meta", dtype=dtype)

    def col_major(r, c, dtype=torch.float32):
        return torch.empty(c, r, device="meta", dtype=dtype).t()

    def swizzled(block, dtype):  # round_up(rows, 128) * round_up(ceil(K / block), 4) elements
        return row_major(math.ceil(rows / 128) * 128 * math.ceil(math.ceil(k / block) / 4) * 4,
                         dtype=dtype)

    return {
        "()": row_major(), "(1,)": row_major(1), "(1, 1)": row_major(1, 1), "(2,)": row_major(2),
        "() float64": row_major(dtype=torch.float64), "(rows,)": row_major(rows),
        "(rows, 1)": row_major(rows, 1), "(rows, 1) stride (1, rows)": col_major(rows, 1),
        "(1, rows)": row_major(1, rows), "(1, rows) stride (1, 1)": col_major(1, rows),
        "(rows, 1, 1)": row_major(rows, 1, 1), "(rows + 1, 1)": row_major(rows + 1, 1),
        "(rows, K/128) col": col_major(rows, kb), "(rows, K/128) row": row_major(rows, kb),
        "(rows, K/128) col, padded stride": torch.empty(kb, rows + 4, device="meta")[
            :, :rows].t(),
        "(rows, ceil(K/128)) col": col_major(rows, kc), "(K/128, rows) col": col_major(kb, rows),
        "(K/128, rows) row": row_major(kb, rows),
        "(rows, K/128) col float16": col_major(rows, kb, torch.float16),
        "(L4, rows/128) col": col_major(l4, rb), "(L4, rows/128) row": row_major(l4, rb),
        "(K/128, rows/128) col": col_major(kb, rb), "(rows/128, K/128) row": row_major(rb, kb),
        "(rows/128, L4) col": col_major(rb, l4),
        "(L4, rows/128) col float64": col_major(l4, rb, torch.float64),
        "MX e8m0": swizzled(32, torch.float8_e8m0fnu), "NVFP4 e4m3": swizzled(16,
                                                                              torch.float8_e4m3fn),
    }


def _accepts(call) -> bool:
    try:
        call()
    except (RuntimeError, ValueError, IndexError, TypeError, NotImplementedError):
        return False
    return True


def _scales_for(recipes, scale):
    # the second level of NVFP4's two-level recipe is one float32 element
    return [scale, torch.empty((), device="meta")] if len(recipes) == 2 else scale


@pytest.mark.skipif(not TORCH_CHECKS_SCALED_MM,
                    reason="the check compared with is torch 2.13's aten._scaled_mm_v2 (older "
                           "torch: none, or a laxer one)")
def test_scale_layouts_are_exactly_those_torchs_check_accepts():
    """Issue 22 item 2: scale_b of BlockWise1x128 was required as (K/128, N) where torch takes
    (N, K/128) with stride (1, N). For every recipe pair torch knows, every swizzle and the
    candidate layouts of both scales, mpslinalg accepts exactly what the meta function of
    aten._scaled_mm_v2 accepts, but the MX / NVFP4 pairs (not implemented, always refused) and
    layouts that torch's whole-block counts leave partly without a scale (refused)."""
    accepted = {}
    for (m, k, n), swizzle in zip(LAYOUT_SIZES, SWIZZLES, strict=True):
        a8 = torch.empty(m, k, device="meta", dtype=torch.float8_e4m3fn)
        b8 = torch.empty(n, k, device="meta", dtype=torch.float8_e4m3fn).t()  # column-major
        cands_a, cands_b = _scale_candidates(m, k), _scale_candidates(n, k)
        for ra in ALL_RECIPES:
            for rb in ALL_RECIPES:
                pair = (tuple(r.value for r in ra), tuple(r.value for r in rb))
                for (name_a, sa), (name_b, sb) in itertools.product(cands_a.items(),
                                                                    cands_b.items()):
                    args = (a8, b8, _scales_for(ra, sa), ra, _scales_for(rb, sb), rb, swizzle,
                            swizzle)
                    theirs = _accepts(lambda args=args: F.scaled_mm(*args))
                    ours = _accepts(lambda args=args: scaled_mm(*args))
                    case = (m, k, n, swizzle, [r.name for r in ra], name_a,
                            [r.name for r in rb], name_b)
                    partial = (any(r.value >= 4 for r in ra + rb) and k % 128
                               or ra == [ScalingType.BlockWise128x128] and m % 128
                               or rb == [ScalingType.BlockWise128x128] and n % 128)
                    if pair in fp8_module.UNIMPLEMENTED_PAIRS or (partial and theirs):
                        assert not ours, case
                    else:
                        assert ours == theirs, case
                    if ours:
                        accepted.setdefault(pair, []).append(case)
    assert set(accepted) == fp8_module.SCALED_MM_PAIRS
    assert any("(N, K/128)" in c[7] or c[7] == "(rows, K/128) col"
               for c in accepted[((4,), (4,))])


def _real_scale(meta_scale: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """A float32 CPU tensor of ``meta_scale``'s shape and strides, of positive values."""
    out = torch.empty_strided(meta_scale.shape, meta_scale.stride())
    return out.copy_(torch.rand(meta_scale.shape, generator=gen) + 0.5)


@pytest.mark.skipif(not TORCH_CHECKS_SCALED_MM,
                    reason="the check compared with is torch 2.13's aten._scaled_mm_v2 (older "
                           "torch: none, or a laxer one)")
def test_every_accepted_layout_computes_the_definition(backend):
    """Each scale layout torch's check accepts, in each implemented pair, gives the float64
    product of the decoded operands times their scales, read through the layout."""
    m, k, n = LAYOUT_SIZES[1]
    gen = torch.Generator().manual_seed(9)
    a8 = (torch.randn(m, k, generator=gen) * 4).to(torch.float8_e4m3fn)
    b8 = (torch.randn(n, k, generator=gen) * 4).to(torch.float8_e5m2).t()
    cands_a, cands_b = _scale_candidates(m, k), _scale_candidates(n, k)
    computed = set()
    for ra, rb in sorted(fp8_module.SCALED_MM_PAIRS):
        for (name_a, sa), (name_b, sb) in itertools.product(cands_a.items(), cands_b.items()):
            meta_args = (a8.to("meta"), b8.to("meta"), sa, [ScalingType(v) for v in ra], sb,
                         [ScalingType(v) for v in rb])
            if not _accepts(lambda args=meta_args: F.scaled_mm(*args)):
                continue
            real_a, real_b = _real_scale(sa, gen), _real_scale(sb, gen)
            got = scaled_mm(backend.tensor(a8), backend.tensor(b8), backend.tensor(real_a),
                            ScalingType(ra[0]), backend.tensor(real_b), ScalingType(rb[0]),
                            output_dtype=torch.float32).cpu()
            ref = _definition(a8.float(), b8.float(), real_a, real_b, ra[0], rb[0], None)
            err = (got.double() - ref).abs().max() / ref.abs().max()
            # torch's CUDA kernel (cuBLASLt) accumulates FP8 products on Hopper's tensor cores
            # in less than float32 precision (2e-4 relative seen on an H200)
            rtol = 1e-3 if backend.name == "cuda" else OUT_RTOL[torch.float32]
            assert err <= rtol, (ra, name_a, rb, name_b, err)
            computed.add((ra, rb))
    assert computed == fp8_module.SCALED_MM_PAIRS


# ---------------------------------------------------------------- op database

from opdb import BadSample, OpInfo, Sample, instantiate_generic_tests  # noqa: E402


def _quantised_linear(x, w, bias=None):
    """fp8 path of a linear layer: x BlockWise1x128 e4m3fn, the weight BlockWise128x128 e4m3fn,
    the product in x's dtype (the op-database entry of to_float8 + scaled_mm)."""
    a8, sa = to_float8(x, torch.float8_e4m3fn, ScalingType.BlockWise1x128)
    w8, sw = to_float8(w, torch.float8_e4m3fn, ScalingType.BlockWise128x128)
    out_dtype = x.dtype if x.dtype in fp8_module.OUT_DTYPES else torch.float32
    return scaled_mm(a8, w8.t(), sa, ScalingType.BlockWise1x128, sw,
                     ScalingType.BlockWise128x128,
                     bias=None if bias is None else bias.to(out_dtype), output_dtype=out_dtype)


def _quantised_linear_ref(x, w, bias=None):
    with mpslinalg.use_backend("torch"):
        a8, sa = to_float8(x, torch.float8_e4m3fn, ScalingType.BlockWise1x128)
        w8, sw = to_float8(w, torch.float8_e4m3fn, ScalingType.BlockWise128x128)
    return _definition(a8.float(), w8.float().t(), sa, sw, 4, 5, bias)


def _samples(complex_: bool) -> list[Sample]:
    gen = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    return [
        Sample((r(2, 256), r(128, 256), r(128)), desc="decode (2, 256) x (128, 256) with bias"),
        Sample((r(9, 640), r(256, 640)), desc="(9, 640): the weight's 5 K blocks padded to 8"),
        Sample((r(1, 128), r(384, 128), r(384)), desc="one K block, three N blocks"),
    ]


def _bad_samples() -> list[BadSample]:
    return [BadSample((torch.zeros(2, 128), torch.zeros(4, 5)), match="mat_a"),
            BadSample((torch.zeros(2, 128), torch.zeros(128, 128), torch.zeros(5)),
                      error=ValueError, match="bias")]


OPS = [
    OpInfo("ops.scaled_mm", _quantised_linear, _quantised_linear_ref, _samples,
           bad_samples=_bad_samples, dtypes=(torch.float32, torch.float16, torch.bfloat16),
           grad_args=(), supports_out=False,
           rtol={torch.float32: 2e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3,
                 torch.float64: 2e-5},
           skips={"upcast": "computes natively: fp8 operands, float32 accumulation, the output "
                            "in the requested dtype",
                  "nonfinite": "2-D operands only; NaN / Inf codes are tested in "
                               "test_nan_and_inf_propagate",
                  "bad_input_torch": "the reference is the float64 definition, not a torch "
                                     "function that validates"}),
]
instantiate_generic_tests(globals(), OPS)


@pytest.mark.parametrize("overflow_nan", [False, True])
def test_e4m3_overflow_rule_of_either_torch(monkeypatch, overflow_nan):
    # torch 2.13 saturates float8_e4m3fn overflow to +-448, torch 2.11 gives NaN: the Metal
    # encoder follows whichever torch is installed, so both rules are exercised here.
    monkeypatch.setattr(fp8_module, "e4m3_overflow_is_nan", lambda: overflow_nan)
    x = torch.tensor([[math.inf, -math.inf, 480.0, -896.0, 1e38, 448.0, 464.0, math.nan]])
    with mpslinalg.use_backend("metal"):
        got = fp8_module.fp8_encode_op(x, torch.ones(1, 1), 1, x.shape[1],
                                       fp8_module.FP8_FORMATS[torch.float8_e4m3fn], "metal",
                                       False, "")
    over = 0x7F if overflow_nan else 0x7E
    assert got.tolist() == [[over, over | 0x80, over, over | 0x80, over, 0x7E, 0x7E, 0x7F]]
