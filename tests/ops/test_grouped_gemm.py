"""mpslinalg.ops.grouped_mm: the four shapes against a per-group float64 reference, empty and
uneven groups, bias, out_dtype, invalid offsets (no out-of-bounds access, check_offsets),
one launch whatever the number of groups, no host sync, autograd; op database entry."""

from __future__ import annotations

import doctest
import importlib

import pytest
import torch
import torch.nn.functional as F

import mpslinalg
from mpslinalg.emulator import reset_launch_counts, total_launches
from mpslinalg.ops import grouped_mm
from mpslinalg.testing import count_host_syncs

gmm_module = importlib.import_module("mpslinalg.ops.grouped_gemm")

#: float32 accumulation, one rounding to the output dtype, relative to the largest output.
RTOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2, torch.float64: 1e-12}


def reference(a, b, offs=None, bias=None):
    """Per group, with the offsets read on the host, in float64; uncovered entries zero."""
    a, b = a.double(), b.double()
    bias = None if bias is None else bias.double()
    ends = [] if offs is None else offs.tolist()
    starts = [0] + ends[:-1]

    def add_bias(block, g):
        if bias is None:
            return block
        return block + (bias[g] if bias.dim() == 2 else bias)

    if a.dim() == 3 and b.dim() == 3:
        return torch.stack([add_bias(a[g] @ b[g], g) for g in range(a.shape[0])])
    if a.dim() == 2 and b.dim() == 3:
        out = a.new_zeros(a.shape[0], b.shape[2])
        for g, (s, e) in enumerate(zip(starts, ends, strict=True)):
            out[s:e] = add_bias(a[s:e] @ b[g], g)
        return out
    if a.dim() == 3 and b.dim() == 2:
        out = a.new_zeros(a.shape[1], b.shape[1])
        for g, (s, e) in enumerate(zip(starts, ends, strict=True)):
            out[:, s:e] = a[g] @ b[:, s:e] + (0 if bias is None else bias[s:e])
        return out
    return torch.stack([add_bias(a[:, s:e] @ b[s:e], g)
                        for g, (s, e) in enumerate(zip(starts, ends, strict=True))])


def _r(gen, *shape):
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


def _cases(gen):
    offs = torch.tensor([3, 3, 4, 10, 10], dtype=torch.int32)  # empty, one-row and uneven groups
    return {
        "rows": (_r(gen, 12, 16), _r(gen, 5, 16, 8), offs, _r(gen, 5, 8)),
        "cols": (_r(gen, 5, 6, 16), _r(gen, 16, 12), offs, _r(gen, 12)),
        "inner": (_r(gen, 6, 12), _r(gen, 12, 8), offs, _r(gen, 8)),
        "batched": (_r(gen, 5, 6, 16), _r(gen, 5, 16, 8), None, _r(gen, 5, 8)),
    }


def _close(got, ref, dtype):
    scale = max(ref.abs().max().item(), 1.0) if ref.numel() else 1.0
    assert got.shape == ref.shape
    if ref.numel():
        err = (got.double().cpu() - ref).abs().max().item()
        assert err <= RTOL[dtype] * scale, (err, scale)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", ["rows", "cols", "inner", "batched"])
def test_matches_the_per_group_reference(backend, dtype, shape):
    a, b, offs, bias = _cases(torch.Generator().manual_seed(1))[shape]
    a, b, bias = a.to(dtype), b.to(dtype), bias.to(dtype)
    for with_bias in (False, True):
        got = grouped_mm(backend.tensor(a), backend.tensor(b),
                         offs=None if offs is None else backend.tensor(offs),
                         bias=backend.tensor(bias) if with_bias else None)
        assert got.dtype == dtype
        _close(got, reference(a, b, offs, bias if with_bias else None), dtype)


@pytest.mark.skipif(not hasattr(F, "grouped_mm"), reason="this torch has no F.grouped_mm")
def test_matches_torch_grouped_mm_on_cpu(backend):
    """torch's own CPU kernel (no bias, 16-byte aligned strides, offs[-1] = the full length)."""
    gen = torch.Generator().manual_seed(2)
    offs = torch.tensor([0, 5, 9, 16], dtype=torch.int32)
    a, b = _r(gen, 16, 8).float(), _r(gen, 4, 8, 8).float()
    ref = F.grouped_mm(a, b, offs=offs)
    got = grouped_mm(backend.tensor(a), backend.tensor(b), offs=backend.tensor(offs))
    torch.testing.assert_close(got.cpu(), ref, rtol=1e-5, atol=1e-5)
    a3 = _r(gen, 4, 8, 8).float()
    torch.testing.assert_close(grouped_mm(backend.tensor(a3), backend.tensor(b)).cpu(),
                               F.grouped_mm(a3, b), rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not hasattr(F, "grouped_mm"), reason="this torch has no F.grouped_mm")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", ["rows", "cols", "inner"])
def test_torch_cuda_route_gives_torch_aligned_groups(dtype, shape):
    """The route to torch's CUDA kernel, run with torch's CPU kernel: every group but the last
    starts 16 bytes after the previous one (torch's CUDA kernels assert on the device otherwise,
    which kills the CUDA context: the H200 run of the suite), the result is the definition's, and
    offsets out of order or range still give a result of the right shape."""
    a, b, offs, _ = _cases(torch.Generator().manual_seed(4))[shape]
    a, b = a.to(dtype), b.to(dtype)
    mode = gmm_module.mode_of(a, b)
    length = {"rows": a.shape[0], "cols": b.shape[1], "inner": a.shape[1]}[shape]
    ends = gmm_module._torch_cuda_groups(offs, length, 16 // a.element_size())[0]
    assert (torch.diff(ends[:-1], prepend=ends.new_zeros(1)) * a.element_size() % 16 == 0).all()
    got = gmm_module._covered_only(gmm_module._grouped_mm_torch_cuda(a, b, offs, mode), offs,
                                   mode)
    _close(got, reference(a, b, offs), dtype)
    wild = torch.tensor([5, 2, 40, 1, 7], dtype=torch.int32)
    assert gmm_module._grouped_mm_torch_cuda(a, b, wild, mode).shape == got.shape


def test_out_dtype_float32_from_bfloat16(backend):
    a, b, offs, _ = _cases(torch.Generator().manual_seed(3))["rows"]
    a, b = a.bfloat16(), b.bfloat16()
    got = grouped_mm(backend.tensor(a), backend.tensor(b), offs=backend.tensor(offs),
                     out_dtype=torch.float32)
    assert got.dtype == torch.float32
    _close(got, reference(a, b, offs), torch.float32)


def test_one_launch_whatever_the_number_of_groups_and_no_host_sync(metal_backend):
    gen = torch.Generator().manual_seed(4)
    for groups in (1, 4, 32):
        a = metal_backend.tensor(_r(gen, 40, 8).float())
        b = metal_backend.tensor(_r(gen, groups, 8, 4).float())
        offs = metal_backend.tensor(torch.linspace(0, 40, groups + 1)[1:].round().int())
        reset_launch_counts()
        with count_host_syncs() as syncs:
            grouped_mm(a, b, offs=offs, bias=b[:, 0, :].contiguous())
        assert syncs.calls == []
        if metal_backend.device.type == "cpu":
            assert total_launches() == 1


@pytest.mark.parametrize("offs", [[5, 2, 12], [4, 30, 40], [-7, 3, 9], [12, 12, 99999],
                                  [-(2 ** 31), 2 ** 31 - 1, 0]])
def test_invalid_offsets_stay_in_bounds_and_check_offsets_raises(offs):
    """The emulator bounds-checks every device pointer access (an out-of-bounds read or write
    raises), so a clean run shows the kernel stays inside its buffers."""
    gen = torch.Generator().manual_seed(5)
    offs = torch.tensor(offs, dtype=torch.int32)
    cases = {"rows": (_r(gen, 12, 8).float(), _r(gen, 3, 8, 4).float()),
             "cols": (_r(gen, 3, 4, 8).float(), _r(gen, 8, 12).float()),
             "inner": (_r(gen, 4, 12).float(), _r(gen, 12, 4).float())}
    with mpslinalg.use_backend("metal"):
        for a, b in cases.values():
            out = grouped_mm(a, b, offs=offs, bias=b.new_ones(b.shape[-1]))
            assert out.isfinite().all()
            with pytest.raises(ValueError, match="^mpslinalg.grouped_mm: offs"):
                grouped_mm(a, b, offs=offs, check_offsets=True)


def test_check_offsets_reads_the_device_once_and_passes_valid_offsets(backend):
    a, b, offs, _ = _cases(torch.Generator().manual_seed(6))["rows"]
    with count_host_syncs() as syncs:
        grouped_mm(backend.tensor(a.float()), backend.tensor(b.float()),
                   offs=backend.tensor(offs), check_offsets=True)
    assert len(syncs.calls) == 1


def test_rows_past_the_last_offset_are_zero(backend):
    a, b = torch.ones(6, 8), torch.ones(2, 8, 4)
    out = grouped_mm(backend.tensor(a), backend.tensor(b),
                     offs=backend.tensor(torch.tensor([1, 3], dtype=torch.int32)),
                     bias=backend.tensor(torch.ones(4))).cpu()
    assert (out[:3] == 9).all() and (out[3:] == 0).all()


@pytest.mark.parametrize("shape", ["rows", "cols", "inner", "batched"])
def test_gradients_against_torch_autograd_of_the_reference(backend, shape):
    a, b, offs, bias = _cases(torch.Generator().manual_seed(7))[shape]
    ours = [t.float().to(backend.device).requires_grad_() for t in (a, b, bias)]
    ref = [t.clone().requires_grad_() for t in (a, b, bias)]
    out = grouped_mm(ours[0], ours[1], offs=None if offs is None else backend.tensor(offs),
                     bias=ours[2])
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    torch.autograd.backward(out, g.float().to(backend.device))
    torch.autograd.backward(reference(*ref[:2], offs, ref[2]), g)
    for x, r in zip(ours, ref, strict=True):
        torch.testing.assert_close(x.grad.double().cpu(), r.grad, rtol=1e-4, atol=1e-4)


def test_gradcheck_and_opcheck():
    gen = torch.Generator().manual_seed(9)
    offs = torch.tensor([2, 2, 5], dtype=torch.int32)
    a = _r(gen, 5, 4).requires_grad_()
    b = _r(gen, 3, 4, 3).requires_grad_()
    bias = _r(gen, 3, 3).requires_grad_()
    torch.autograd.gradcheck(
        lambda a, b, bias: gmm_module.grouped_mm_op(a, b, offs, bias, torch.float64, "torch",
                                                    False, ""), (a, b, bias))
    torch.library.opcheck(gmm_module.grouped_mm_op.overload,
                          (a, b, offs, bias, torch.float64, "torch", False, ""))


def test_errors_name_the_function(backend):
    a, b = backend.tensor(torch.randn(6, 8)), backend.tensor(torch.randn(2, 8, 4))
    offs = backend.tensor(torch.tensor([3, 6], dtype=torch.int32))
    with pytest.raises(RuntimeError, match="^mpslinalg.grouped_mm: Have to provide offsets"):
        grouped_mm(a, b)
    with pytest.raises(RuntimeError, match="^mpslinalg.grouped_mm: offs must be a 1-D int32"):
        grouped_mm(a, b, offs=offs.long())
    with pytest.raises(RuntimeError, match="^mpslinalg.grouped_mm: contraction"):
        grouped_mm(a[:, :7], b, offs=offs)
    with pytest.raises(RuntimeError, match="^mpslinalg.grouped_mm: offs has 2 groups"):
        grouped_mm(a, b[:1], offs=offs)
    with pytest.raises(RuntimeError, match="^mpslinalg.grouped_mm: bias"):
        grouped_mm(a, b, offs=offs, bias=backend.tensor(torch.zeros(5)))
    with pytest.raises(RuntimeError, match="^mpslinalg.grouped_mm: out_dtype"):
        grouped_mm(a, b, offs=offs, out_dtype=torch.float16)


def test_docstring_examples():
    failures, tried = doctest.testmod(gmm_module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert tried > 0 and failures == 0


# ---------------------------------------------------------------- op database

from opdb import BadSample, OpInfo, Sample, instantiate_generic_tests  # noqa: E402


def _op(a, b, offs=None, bias=None):
    return grouped_mm(a, b, offs=offs, bias=bias)


def _samples(complex_: bool) -> list[Sample]:
    cases = _cases(torch.Generator().manual_seed(10))
    order = ("batched", "rows", "cols", "inner")
    return [Sample(cases[name], desc=name) for name in order] + [
        Sample((cases["rows"][0][:0], cases["rows"][1], torch.zeros(5, dtype=torch.int32)),
               desc="no tokens, every group empty"),
    ]


def _bad_samples() -> list[BadSample]:
    return [
        BadSample((torch.zeros(6, 8), torch.zeros(2, 8, 4)), match="offsets"),
        BadSample((torch.zeros(6, 8), torch.zeros(2, 7, 4),
                   torch.tensor([3, 6], dtype=torch.int32)), match="contraction"),
        BadSample((torch.zeros(6, 8, 1, 1), torch.zeros(2, 8, 4)), match="2-D or 3-D"),
    ]


OPS = [
    OpInfo("ops.grouped_mm", _op, reference, _samples, bad_samples=_bad_samples,
           dtypes=(torch.float32, torch.float16, torch.bfloat16), grad_args=(0, 1, 3),
           grad_dtypes=(torch.float32,), supports_out=False, nonfinite_args=(0, 1),
           rtol=dict(RTOL),
           skips={"upcast": "computes natively in float16/bfloat16 with float32 accumulation "
                            "(F.grouped_mm semantics), so low-precision inputs are not upcast",
                  "bad_input_torch": "the reference is a per-group loop, not a function that "
                                     "validates"}),
]
instantiate_generic_tests(globals(), OPS)
