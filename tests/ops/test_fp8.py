"""mpslinalg.ops fp8: every code decoded and every rounding boundary encoded bit for bit as
torch's CPU casts; to_float8 recipes; scaled_mm against torch's F.scaled_mm (TensorWise,
RowWise) and the float64 definition (blockwise, mixed); launches, host syncs, storage."""

from __future__ import annotations

import doctest
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
    else:
        assert scale.shape == (2, 3)
        full = scale.repeat_interleave(128, 0)[:130].repeat_interleave(128, 1)[:, :260]
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


def _definition(a8, b8, sa, sb, kind_a, kind_b, bias):
    """float64 (A * scale_a) (B * scale_b) + bias from the decoded operands."""
    def full(scale, kind, shape, is_a):
        rows, cols = shape
        if kind == 0:
            return scale.double().reshape(1, 1).expand(shape)
        if kind == 1:
            return scale.double().expand(shape)
        rd = 128 if (kind == 5 or not is_a) else 1
        cd = 128 if (kind == 5 or is_a) else 1
        return scale.double().repeat_interleave(rd, 0)[:rows].repeat_interleave(cd, 1)[:, :cols]
    A = a8.double() * full(sa, kind_a, a8.shape, True)
    B = b8.double() * full(sb, kind_b, b8.shape, False)
    out = A @ B
    return out if bias is None else out + bias.double()


PAIRS = [(ScalingType.TensorWise, ScalingType.TensorWise),
         (ScalingType.RowWise, ScalingType.RowWise),
         (ScalingType.BlockWise1x128, ScalingType.BlockWise128x128),
         (ScalingType.BlockWise128x128, ScalingType.BlockWise1x128),
         (ScalingType.BlockWise1x128, ScalingType.BlockWise1x128),
         (ScalingType.RowWise, ScalingType.BlockWise128x128)]
#: float32 accumulation of K products of fp8 values, then one rounding to the output: relative
#: to the largest output, K * 2^-24 plus half an ulp of the output dtype.
OUT_RTOL = {torch.float32: 2e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{p[0].name}-{p[1].name}")
@pytest.mark.parametrize("m", [1, 3, 8, 11])
def test_scaled_mm_against_the_definition(backend, out_dtype, pair, m):
    gen = torch.Generator().manual_seed(m)
    k, n = 300, 136
    x = torch.randn(m, k, generator=gen)
    w = torch.randn(n, k, generator=gen) * 0.1
    bias = torch.randn(n, generator=gen).to(out_dtype)
    a8, sa = to_float8(x, torch.float8_e4m3fn, pair[0])
    w8, sw = to_float8(w, torch.float8_e5m2, pair[1])
    b8, sb = w8.t(), sw.t() if sw.dim() else sw
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
        w8, sw = to_float8(torch.randn(64, 256, generator=gen),
                           recipe=ScalingType.BlockWise128x128)
        args = [metal_backend.tensor(t) for t in (a8, w8.t(), sa, sw.t())]
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


def test_params_layout_matches_the_kernel_structs():
    text = open(_metal.metal_root() / "ops" / "fp8.h").read()
    for struct, fields in (("ScaledMmParams", fp8_module.SCALED_MM_PARAMS),
                           ("Fp8ConvertParams", fp8_module.CONVERT_PARAMS)):
        start = text.index(f"struct {struct} {{")
        body = text[start:text.index("};", start)]
        names = [name.strip().rstrip(";") for line in body.splitlines()[1:] if "long" in line
                 for name in line.split("//")[0].replace("long", "").split(",")]
        assert tuple(n for n in names if n) == fields


def test_scaling_type_is_torchs_where_torch_has_one():
    assert ops.ScalingType is getattr(F, "ScalingType", fp8_module._ScalingType)
    assert [r.value for r in RECIPES] == [0, 1, 4, 5]


def test_bad_input(backend):
    a8, sa = to_float8(torch.randn(4, 8))
    b8, sb = to_float8(torch.randn(6, 8))
    a8, b8t, sa, sb = (backend.tensor(t) for t in (a8, b8.t(), sa, sb))
    tw = ScalingType.TensorWise
    cases = [
        ((a8.float(), b8t, sa, tw, sb, tw), {}, TypeError, "mat_a must be float8"),
        ((a8, b8t[:4], sa, tw, sb, tw), {}, RuntimeError, "mat_a .M, K. and mat_b"),
        ((a8, b8t, sa.expand(3, 1), ScalingType.RowWise, sb, tw), {}, ValueError, "scale_a"),
        ((a8, b8t, sa, tw, sb, ScalingType.BlockWise1x16), {}, ValueError, "scale_recipe_b"),
        ((a8, b8t, sa.double(), tw, sb, tw), {}, TypeError, "scale_a must be float32"),
        ((a8, b8t, sa, tw, sb, tw), {"output_dtype": torch.float8_e4m3fn}, TypeError,
         "output_dtype"),
        ((a8, b8t, sa, tw, sb, tw), {"bias": backend.tensor(torch.zeros(5))}, ValueError, "bias"),
        ((a8, b8t, sa, tw, sb, tw), {"swizzle_a": 1}, ValueError, "swizzle_a"),
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
    x = backend.tensor(torch.randn(5, 130))
    before = x.clone()
    a8, sa = to_float8(x, recipe=ScalingType.BlockWise1x128)
    assert torch.equal(x, before)
    a_bytes = float8_storage(a8).clone()
    scaled_mm(a8, a8.t(), sa, ScalingType.BlockWise1x128, sa.t(), ScalingType.BlockWise1x128)
    assert torch.equal(float8_storage(a8), a_bytes)
    meta = torch.empty(5, 130, device="meta")
    m8, ms = to_float8(meta, recipe=ScalingType.RowWise)
    assert m8.device.type == "meta" and m8.shape == (5, 130) and ms.shape == (5, 1)


def test_docstring_examples():
    failures, tried = doctest.testmod(fp8_module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert tried > 0 and failures == 0


# ---------------------------------------------------------------- op database

from opdb import BadSample, OpInfo, Sample, instantiate_generic_tests  # noqa: E402


def _quantised_linear(x, w, bias=None):
    """fp8 path of a linear layer: x RowWise e4m3fn, the weight BlockWise128x128 e4m3fn, the
    product in x's dtype (the op-database entry of to_float8 + scaled_mm)."""
    a8, sa = to_float8(x, torch.float8_e4m3fn, ScalingType.RowWise)
    w8, sw = to_float8(w, torch.float8_e4m3fn, ScalingType.BlockWise128x128)
    out_dtype = x.dtype if x.dtype in fp8_module.OUT_DTYPES else torch.float32
    return scaled_mm(a8, w8.t(), sa, ScalingType.RowWise, sw.t(), ScalingType.BlockWise128x128,
                     bias=None if bias is None else bias.to(out_dtype), output_dtype=out_dtype)


def _quantised_linear_ref(x, w, bias=None):
    with mpslinalg.use_backend("torch"):
        a8, sa = to_float8(x, torch.float8_e4m3fn, ScalingType.RowWise)
        w8, sw = to_float8(w, torch.float8_e4m3fn, ScalingType.BlockWise128x128)
    return _definition(a8.float(), w8.float().t(), sa, sw.t(), 1, 5, bias)


def _samples(complex_: bool) -> list[Sample]:
    gen = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    return [
        Sample((r(2, 200), r(24, 200), r(24)), desc="decode (2, 200) x (24, 200) with bias"),
        Sample((r(9, 130), r(16, 130)), desc="(9, 130): two row blocks, a partial K block"),
        Sample((r(1, 64), r(140, 64), r(140)), desc="N = 140: a partial 128 block of N"),
    ]


def _bad_samples() -> list[BadSample]:
    return [BadSample((torch.zeros(2, 3), torch.zeros(4, 5)), match="mat_a"),
            BadSample((torch.zeros(2, 3), torch.zeros(4, 3), torch.zeros(5)), error=ValueError,
                      match="bias")]


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
