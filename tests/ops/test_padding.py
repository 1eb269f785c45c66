"""ops.pad against torch's constant pad, on every backend: random ranks, pads (negative too)
and dtypes, the 5-D temporal case that upstream corrupted, exact fill values, one launch, and
the kernel's 64-bit index arithmetic on sizes and strides past 2^32."""

from __future__ import annotations

import doctest
import importlib

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mpslinalg
from mpslinalg import emulator
from mpslinalg._core import metal as _metal
from mpslinalg._core import metal_params
from mpslinalg.testing import count_host_syncs

pad_module = importlib.import_module("mpslinalg.ops.padding")
FIXTURE_OK = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])

ALL_DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
              torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64,
              torch.complex128)


def _value_for(dtype: torch.dtype, draw) -> object:
    if dtype == torch.bool:
        return draw(st.booleans())
    if not (dtype.is_floating_point or dtype.is_complex):
        info = torch.iinfo(dtype)
        return draw(st.integers(info.min, info.max))
    real = draw(st.one_of(st.floats(-1e4, 1e4), st.sampled_from([float("nan"), float("inf"),
                                                                    -0.0])))
    return complex(real, draw(st.floats(-10, 10))) if dtype.is_complex else real


def _same(ours: torch.Tensor, ref: torch.Tensor) -> None:
    assert ours.dtype == ref.dtype and ours.shape == ref.shape
    torch.testing.assert_close(ours.cpu(), ref, rtol=0, atol=0, equal_nan=True)


@FIXTURE_OK
@given(data=st.data())
def test_pad_matches_torch(backend, data):
    dtype = data.draw(st.sampled_from(ALL_DTYPES), label="dtype")
    ndim = data.draw(st.integers(0, 5), label="ndim")
    shape = data.draw(st.lists(st.integers(0, 4), min_size=ndim, max_size=ndim), label="shape")
    x = torch.testing.make_tensor(shape, dtype=dtype, device="cpu", low=-9, high=9)
    if ndim >= 2 and data.draw(st.booleans(), label="transposed"):
        x = x.transpose(0, -1)
    padded = data.draw(st.integers(0, ndim), label="padded dims")
    pads = []
    for i in range(padded):
        size = x.shape[ndim - 1 - i]
        # torch crops (narrows) before it pads: neither crop may pass what is left
        lo = max(data.draw(st.integers(-3, 3)), -size)
        hi = max(data.draw(st.integers(-3, 3)), -(size + min(lo, 0)))
        pads += [lo, hi]
    value = _value_for(dtype, data.draw)
    ref = torch.constant_pad_nd(x, pads, value)
    _same(mpslinalg.ops.pad(backend.tensor(x), pads, value=value), ref)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("hw", [(256, 256), (128, 1024)])
def test_temporal_pad_of_5d_video_with_hw_65536_and_more(backend, dtype, hw):
    """pytorch#194922: a temporal pad of (N, C, T, H, W) corrupted 67-80% of the elements once
    H*W >= 65536 on upstream's MPS kernel."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, 2, 3, *hw, generator=gen).to(dtype)
    for pads in ([0, 0, 0, 0, 2, 0], [0, 0, 0, 0, 1, 2], [1, 1, 0, 0, 2, -1]):
        _same(mpslinalg.ops.pad(backend.tensor(x), pads), F.pad(x, pads))


def test_fill_values_are_exact_in_the_dtype(backend):
    cases = [
        (torch.int64, 2**60 + 1), (torch.int64, -(2**62) - 3), (torch.int64, 2**24 + 1),
        (torch.uint8, 255), (torch.int8, -128), (torch.int32, 2**31 - 1), (torch.bool, True),
        (torch.bfloat16, 1 / 3), (torch.float16, 65504.0), (torch.float32, 16777217),
        (torch.float64, 1 / 3), (torch.complex64, 1.5 - 2j), (torch.complex128, 1 / 3 + 1e-300j),
        (torch.float32, float("-inf")),
    ]
    for dtype, value in cases:
        x = torch.zeros(2, 3, dtype=dtype)
        ref = torch.constant_pad_nd(x, [1, 2], value)
        ours = mpslinalg.ops.pad(backend.tensor(x), [1, 2], value=value)
        _same(ours, ref)
        if dtype == torch.int64:
            assert ours[0, 0].item() == value


def test_one_launch_no_copies_and_a_crop_is_not_a_view(metal_backend):
    if metal_backend.name != "emulator":
        pytest.skip("launch counters exist in the emulator only")
    x = torch.randn(4, 6, 8)
    views = {"contiguous": x, "transposed": x.transpose(0, 2), "sliced": x[:, ::2, 1:],
             "expanded": torch.randn(1, 6, 1).expand(4, 6, 8)}
    for pads in ([1, 2, 0, 3], [-1, -2, 0, -1], [0, 0, 0, 0, -1, -1]):
        for name, v in views.items():
            emulator.reset_launch_counts()
            with count_host_syncs() as syncs:
                y = mpslinalg.ops.pad(v, pads, value=0.5)
            assert emulator.launch_counts() == {"pad_int32_wide0": 1}, (name, pads)
            assert syncs.calls == []
            _same(y, F.pad(v, pads, value=0.5))
            assert y.untyped_storage().data_ptr() != v.untyped_storage().data_ptr()
    emulator.reset_launch_counts()
    assert mpslinalg.ops.pad(torch.zeros(3, 0), [0, 0, 1, -4]).shape == (0, 0)
    assert emulator.total_launches() == 0  # an empty output needs no launch


def test_crop_to_a_few_elements_of_a_dimension_past_2_pow_32(backend):
    """Sizes and pads past 2^32 (the input is a broadcast view: no memory behind it): a 32-bit
    bound check would wrap and fill the output instead of reading the input."""
    big = 2**32 + 5
    x = torch.arange(3.0).reshape(3, 1).expand(3, big)
    pads = [-(big - 2), 1]
    ref = torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 0.0], [2.0, 2.0, 0.0]])
    _same(mpslinalg.ops.pad(backend.tensor(x), pads), ref)
    y = torch.zeros(2, 1).expand(2, 2**31 + 1)
    _same(mpslinalg.ops.pad(backend.tensor(y), [-(2**31 - 1), -1], value=7.0), torch.zeros(2, 1))
    if backend.name == "emulator":
        emulator.reset_launch_counts()
        mpslinalg.ops.pad(x, pads)
        assert emulator.launch_counts() == {"pad_int32_wide1": 1}


def _call_params(shape, strides, pads):
    out_shape = pad_module._padded_shape("pad", shape, pads)
    return pad_module.fields(out_shape, shape, strides, pads, (0, 0))


def test_the_32_bit_kernels_are_taken_only_when_everything_fits():
    assert not pad_module.needs_wide_indices(_call_params([4, 5], [5, 1], [1, 1]))
    limit = pad_module.NARROW_LIMIT
    assert not pad_module.needs_wide_indices(_call_params([limit - 1], [1], []))
    assert pad_module.needs_wide_indices(_call_params([limit - 1], [1], [0, 1]))  # numel
    assert pad_module.needs_wide_indices(_call_params([2, 3], [limit - 1, 1], [1, 0]))  # offset
    assert pad_module.needs_wide_indices(_call_params([5], [1], [-limit, limit]))  # padding
    assert pad_module.needs_wide_indices(_call_params([limit, 1], [0, 1], [0, 0, 1 - limit, 0]))


def test_the_64_bit_kernels_agree_with_the_32_bit_ones(monkeypatch):
    gen = torch.Generator().manual_seed(7)
    cases = [((3, 4, 5), [1, 2, -1, 1, 0, 2]), ((2, 3, 4, 8, 8), [0, 0, 0, 0, 2, 1]),
             ((7,), [-2, 3])]
    with mpslinalg.use_backend("metal"):
        narrow = [mpslinalg.ops.pad(torch.randn(shape, generator=gen).transpose(0, -1), pads,
                                    value=0.25) for shape, pads in cases]
        monkeypatch.setattr(pad_module, "NARROW_LIMIT", 0)
        emulator.reset_launch_counts()
        gen.manual_seed(7)
        wide = [mpslinalg.ops.pad(torch.randn(shape, generator=gen).transpose(0, -1), pads,
                                  value=0.25) for shape, pads in cases]
    assert set(emulator.launch_counts()) == {"pad_int32_wide1"}
    for a, b in zip(narrow, wide, strict=True):
        assert torch.equal(a, b)


_PROBE = """
[[kernel]] void pad_offset_probe(constant mpsl::PadParams& p [[buffer(0)]],
                                 device const long* indices [[buffer(1)]],
                                 device long* offsets [[buffer(2)]],
                                 uint i [[thread_position_in_grid]]) {
  offsets[i] = mpsl::pad_source_offset<long>(indices[i], p);
}
"""


def _reference_offset(index: int, out_shape, in_shape, strides, before) -> int:
    coords = []
    for size in reversed(out_shape):
        index, c = divmod(index, size)
        coords.append(c)
    offset = 0
    for c, size, stride, b in zip(reversed(coords), in_shape, strides, before, strict=True):
        if not 0 <= c - b < size:
            return -1
        offset += (c - b) * stride
    return offset


def test_kernel_index_arithmetic_is_64_bit():
    """pad_source_offset of metal/ops/padding.h, run by the emulator on shapes, strides, pads and
    linear indices past 2^32 that no test can allocate: every offset equals Python's."""
    library = emulator.compile_shader(_metal.load_source("ops/padding.h") + _PROBE)

    in_shape = [3, 2**31 + 3, 2**20 - 2]
    strides = [2**53, 2**22, 2]  # not contiguous: no dimensions merged
    pads = [1, 1, 2**31 + 7, -5]  # last dimension first
    out_shape = pad_module._padded_shape("pad", in_shape, pads)
    before = [0, 2**31 + 7, 1]
    call = pad_module.fields(out_shape, in_shape, strides, pads, (0, 0))
    assert call["ndim"] == 3
    numel = call["numel"]
    assert numel > 2**53
    gen = torch.Generator().manual_seed(0)
    indices = torch.cat([
        torch.randint(0, numel, (200,), generator=gen, dtype=torch.int64),
        torch.tensor([0, numel - 1, 2**32, 2**32 - 1, 2**31, (2**31 + 8) * 2**20 + 5]),
    ])
    offsets = torch.empty_like(indices)
    library.pad_offset_probe(metal_params.pack("ops/padding.h", "PadParams", **call), indices,
                             offsets, threads=len(indices))
    expected = [_reference_offset(i, out_shape, in_shape, strides, before)
                for i in indices.tolist()]
    assert offsets.tolist() == expected
    assert max(expected) > 2**52 and expected.count(-1) < len(expected)


def test_dimensions_are_merged_to_fit_the_kernel():
    dims = pad_module.merged_dims([2, 3, 4, 7], [2, 3, 4, 5], [60, 20, 5, 1], [0, 0, 0, 1])
    assert dims == [(24, 24, 5, 0), (7, 5, 1, 1)]
    x = torch.randn([1] * 20 + [2, 3])  # 22 dimensions: the size-1 ones are dropped
    with mpslinalg.use_backend("metal"):
        _same(mpslinalg.ops.pad(x, [1, 1] * 11), F.pad(x, [1, 1] * 11))
        x = torch.zeros([2] * 17)  # 17 padded dimensions cannot be merged
        with pytest.raises(RuntimeError, match="mpslinalg.pad: .* at most 16"):
            mpslinalg.ops.pad(x, [1, 1] * 17)


def test_gradients_of_pads_and_crops(backend):
    for pads in ([1, 2, -1, 0], [-1, -1, 2, 3]):
        x = backend.tensor(torch.randn(3, 4, 5, dtype=torch.float64)).requires_grad_()
        torch.autograd.gradcheck(lambda t, pads=pads: mpslinalg.ops.pad(t, pads, value=2.0), [x])
        torch.autograd.gradgradcheck(lambda t, pads=pads: mpslinalg.ops.pad(t, pads), [x])


@pytest.mark.parametrize("bad, error, match", [
    (dict(pad=[1, 2, 3]), RuntimeError, "even"),
    (dict(pad=[1] * 6), RuntimeError, "twice the number of dimensions"),
    (dict(pad=[-4, 0]), RuntimeError, "negative output size"),
    (dict(pad=[1.5, 1]), TypeError, "sequence of ints"),
    (dict(pad=torch.tensor([1, 1])), TypeError, "sequence of ints"),
    (dict(pad=[1, 1], value="a"), TypeError, "value must be a number"),
    (dict(x=[1.0, 2.0], pad=[1, 1]), TypeError, "input must be a torch.Tensor"),
    (dict(pad=[1, 1], value=1e39), RuntimeError, "cannot be converted to type float without"),
    (dict(pad=[1, 1], value=1 + 2j), TypeError, "complex"),
])
def test_bad_input(backend, bad, error, match):
    args = dict(x=backend.tensor(torch.randn(2, 3)), value=0.0) | bad
    # the torch backend hands valid-looking calls to torch as they are, with torch's wording
    with pytest.raises(error, match="^mpslinalg.pad: " + (f".*{match}" if backend.is_metal
                                                          else "")):
        mpslinalg.ops.pad(args["x"], args["pad"], value=args["value"])


def test_the_signature_is_f_pads(backend):
    """F.pad(input, pad, mode="constant", value=None): mode by position or keyword."""
    x = torch.arange(6.0).reshape(2, 3)
    ref = F.pad(x, (1, 2), value=0.0)
    for call in (lambda t: mpslinalg.ops.pad(t, (1, 2), mode="constant"),
                 lambda t: mpslinalg.ops.pad(t, (1, 2), "constant", 0),
                 lambda t: mpslinalg.ops.pad(t, (1, 2), "constant"),
                 lambda t: mpslinalg.ops.pad(input=t, pad=(1, 2), mode="constant", value=None)):
        _same(call(backend.tensor(x)), ref)
    _same(mpslinalg.ops.pad(backend.tensor(x), (1, 2), "constant", 7), F.pad(x, (1, 2), value=7))
    with pytest.raises(TypeError):  # F.pad: "argument 'mode' (position 3) must be str"
        F.pad(x, (1, 2), 2.0)
    with pytest.raises(TypeError, match="^mpslinalg.pad: .*mode"):
        mpslinalg.ops.pad(backend.tensor(x), (1, 2), 2.0)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_other_modes_are_torchs_f_pad(backend, mode):
    x = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(1))
    for pads in ((1, 2), (2, 1, 1, 0)):
        _same(mpslinalg.ops.pad(backend.tensor(x), pads, mode), F.pad(x, pads, mode))
    with pytest.raises(RuntimeError, match="^mpslinalg.pad: .*doesn't take in value"):
        mpslinalg.ops.pad(backend.tensor(x), (1, 1), mode, 2.0)
    with pytest.raises(NotImplementedError, match="^mpslinalg.pad: .*bogus"):
        mpslinalg.ops.pad(backend.tensor(x), (1, 1), "bogus")


def _f_pad_on_the_cpu(x: torch.Tensor, value) -> torch.Tensor:
    """The oracle of the fill values: F.pad, which rounds the value through a Python float;
    integers of integer dtypes beyond 2**53, which it cannot hold, are constant_pad_nd's exact
    ones (F.pad would fill uint64 with 0 for 2**64 - 1 and let int64 take 2**63)."""
    integer_dtype = not (x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool)
    if integer_dtype and isinstance(value, int) and abs(value) > 2**53:
        return torch.constant_pad_nd(x, [1, 2], value)
    return F.pad(x, (1, 2), value=value)


def test_fill_values_at_and_beyond_every_dtypes_range(backend):
    """Issue 22 item 5: int8 128, uint8 300, int32 NaN and float16 1e40 were wrapped or
    saturated on the metal backend, and uint64 2**64 - 1 failed there."""
    check_fill_range(lambda x, value: mpslinalg.ops.pad(x, (1, 2), value=value),
                     _f_pad_on_the_cpu, backend)


def test_docstring_examples():
    failures, tried = doctest.testmod(pad_module, raise_on_error=False)
    assert tried and not failures


# ---------------------------------------------------------------- op database

from opdb import (  # noqa: E402
    BadSample,
    OpInfo,
    Sample,
    check_fill_range,
    instantiate_generic_tests,
)


def _pad_samples(complex_: bool) -> list[Sample]:
    dtype = torch.complex128 if complex_ else torch.float64
    gen = torch.Generator().manual_seed(3)

    def rand(*shape):
        return torch.randn(*shape, generator=gen, dtype=dtype)

    return [
        Sample((rand(3, 4, 5), [1, 2, -1, 1]), {"value": 1.5}, desc="3-D, last two dims"),
        Sample((rand(2, 3, 2, 4, 4), [0, 0, 0, 0, 2, 1]), desc="5-D temporal"),
        Sample((rand(6), [-2, -3]), desc="1-D crop only"),
        Sample((rand(2, 3), [1, 1, 2, 0]), {"value": -2.0}, desc="2-D, both dims"),
        Sample((rand(0, 3), [1, 0, 1, 1]), desc="empty input"),
    ]


def _pad_bad_samples() -> list[BadSample]:
    x = torch.randn(2, 3, dtype=torch.float64)
    return [
        BadSample((x, [1, 2, 3]), error=RuntimeError),
        BadSample((x, [1] * 6), error=RuntimeError),
        BadSample((x, [1.5, 1]), error=TypeError),
        BadSample((x, [1, 1]), {"value": "a"}, error=TypeError),
        BadSample((x, [1, 1]), {"value": 1e40}, error=RuntimeError, match="overflow"),
        BadSample((x, [1, 1], 0.0), error=TypeError, match="mode must be a str"),
        BadSample(([1.0, 2.0], [1, 1]), error=TypeError),
    ]


_EXACT = {d: 0.0 for d in (torch.float16, torch.bfloat16, torch.float32, torch.float64,
                           torch.complex64, torch.complex128)}

OPS = [
    OpInfo("ops.pad", mpslinalg.ops.pad,
           lambda x, pad, mode="constant", value=None: F.pad(x, pad, mode, value),
           _pad_samples, bad_samples=_pad_bad_samples,
           dtypes=(torch.float16, torch.bfloat16, torch.complex64, torch.float32),
           rtol=_EXACT, supports_out=False,
           grad_rtol={torch.float16: 1e-3, torch.bfloat16: 4e-3},
           skips={"upcast": "pad moves bits: float16 / bfloat16 are padded natively, never "
                            "upcast; parity checks them bit for bit"}),
]
instantiate_generic_tests(globals(), OPS)
