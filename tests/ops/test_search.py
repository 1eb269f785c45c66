"""searchsorted / bucketize (mpslinalg.ops.search) against torch on the CPU: random and edge
inputs (duplicates, NaN and infinities on both sides, empty sequences), batched sequences,
sorter, side / right, out_int32, every dtype with a kernel."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mpslinalg import ops

FIXTURE_OK = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64)


def _data(shape, dtype, g, specials: bool) -> torch.Tensor:
    if dtype.is_floating_point:
        x = torch.randint(-6, 7, shape, generator=g).float() / 2  # duplicates likely
        if specials and x.numel() >= 3:
            flat = x.view(-1)
            flat[0], flat[1], flat[2] = math.nan, math.inf, -math.inf
        return x.to(dtype)
    return torch.randint(-6, 7, shape, generator=g).to(dtype)


@FIXTURE_OK
@given(data=st.data())
def test_random_against_torch(backend, data):
    dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
    batch = data.draw(st.sampled_from([(), (3,), (2, 2)]), label="batch")
    m = data.draw(st.sampled_from([0, 1, 5, 17]), label="M")
    n = data.draw(st.sampled_from([1, 4]), label="N")
    right = data.draw(st.booleans(), label="right")
    out_int32 = data.draw(st.booleans(), label="out_int32")
    use_sorter = data.draw(st.booleans(), label="sorter")
    specials = data.draw(st.booleans(), label="NaN / inf")
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 99), label="seed"))
    seq = _data((*batch, m), dtype, g, specials).sort(-1).values
    values = _data((*batch, n), dtype, g, specials)
    sorter = None
    if use_sorter and m:
        perm = torch.randperm(m, generator=g)
        seq = seq[..., perm]
        sorter = seq.float().argsort(dim=-1, stable=True)  # NaN sorted last, as sort puts it
    kwargs = {"right": right, "out_int32": out_int32, "sorter": sorter}
    ref = torch.searchsorted(seq, values, **kwargs)
    ours = ops.searchsorted(backend.tensor(seq), backend.tensor(values),
                            **{**kwargs, "sorter": None if sorter is None
                               else backend.tensor(sorter)})
    assert ours.dtype == ref.dtype and torch.equal(ours.cpu(), ref)


def test_one_dimensional_sequence_any_values_shape(backend):
    g = torch.Generator().manual_seed(1)
    seq = torch.tensor([-math.inf, -1.0, 0.0, 0.0, 2.5, math.inf, math.nan])
    values = _data((2, 3, 5), torch.float32, g, True)
    for side in ("left", "right"):
        ref = torch.searchsorted(seq, values, side=side)
        assert torch.equal(ops.searchsorted(backend.tensor(seq), backend.tensor(values),
                                            side=side).cpu(), ref)
        # strided views of both, read in place
        seq2 = torch.stack([seq, seq], -1)[:, 0]
        assert torch.equal(ops.searchsorted(backend.tensor(seq2), backend.tensor(values.mT),
                                            side=side).cpu(),
                           torch.searchsorted(seq, values.mT.contiguous(), side=side))


def test_scalars_and_bucketize(backend):
    b = backend.tensor(torch.tensor([1.0, 2.0, 2.0, 3.0]))
    for v in (0.0, 2.0, 3.5, math.nan):
        for right in (False, True):
            assert torch.equal(ops.searchsorted(b, v, right=right).cpu(),
                               torch.searchsorted(b.cpu(), v, right=right))
            assert torch.equal(ops.bucketize(v, b, right=right).cpu(),
                               torch.bucketize(v, b.cpu(), right=right))
    x = torch.tensor([[0.5, 2.0], [3.0, math.nan]])
    assert torch.equal(ops.bucketize(backend.tensor(x), b, out_int32=True).cpu(),
                       torch.bucketize(x, b.cpu(), out_int32=True))
    assert torch.equal(ops.searchsorted(b, backend.tensor(torch.tensor([2, 3]))).cpu(),
                       torch.searchsorted(b.cpu(), torch.tensor([2, 3])))


def test_errors(backend):
    s = backend.tensor(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    cases = [
        (lambda: ops.searchsorted(s, s[:1]), "first N-1 dimensions"),
        (lambda: ops.searchsorted(s, s, side="left", right=True), "opposites"),
        (lambda: ops.searchsorted(s, s, side="middle"), "side can only be"),
        (lambda: ops.searchsorted(s, s, sorter=s.int()), "long dtype"),
        (lambda: ops.searchsorted(s, s, sorter=s[:, :1].long()), "same size"),
        (lambda: ops.searchsorted(s, 1.0), "scalar only when"),
        (lambda: ops.searchsorted(s[0, 0], s), "positive dimension"),
        (lambda: ops.bucketize(s, s), "must be 1 dimension"),
    ]
    for call, match in cases:
        with pytest.raises(RuntimeError, match=match) as err:
            call()
        assert str(err.value).startswith("mpslinalg."), str(err.value)
    with pytest.raises(NotImplementedError, match="^mpslinalg.searchsorted: .*[Cc]omplex"):
        ops.searchsorted(s[0].to(torch.complex64), s[0].to(torch.complex64))


def test_one_launch_no_host_sync(metal_backend):
    from mpslinalg import emulator
    from mpslinalg.testing import count_host_syncs

    s = metal_backend.tensor(torch.arange(12.0).view(3, 4))
    v = metal_backend.tensor(torch.rand(4, 3) * 12).mT  # non-contiguous values
    emulator.reset_launch_counts()
    with count_host_syncs() as syncs:
        ops.searchsorted(s, v, sorter=torch.arange(4).expand(3, 4))
    assert emulator.total_launches() == 1 and syncs.calls == []


# ---------------------------------------------------------------- op database

from opdb import BadSample, OpInfo, Sample, instantiate_generic_tests  # noqa: E402


def _sorter_positional(fn):
    """``fn`` taking ``sorter`` third in line, so that the generic tests, which place the
    positional tensors on the backend's device, place it there too (torch's CUDA searchsorted
    refuses a sorter on another device than the sequence)."""
    def call(sorted_sequence, values, sorter=None, **kwargs):
        return fn(sorted_sequence, values, sorter=sorter, **kwargs)

    return call


def _search_samples(complex_: bool) -> list[Sample]:
    g = torch.Generator().manual_seed(0)
    seq = (torch.randint(-5, 6, (2, 3, 6), generator=g) / 2).double().sort(-1).values
    values = (torch.randint(-6, 7, (2, 3, 4), generator=g) / 2).double()
    perm = torch.randperm(6, generator=g)
    return [
        Sample((seq, values), desc="batched (2, 3, 6) with (2, 3, 4)"),
        Sample((seq[0, 0], values), {"right": True}, desc="1-D sequence, right"),
        Sample((seq[..., perm], values, seq[..., perm].argsort(-1)), {"side": "right"},
               desc="sorter, side='right'"),
        Sample((seq, values), {"out_int32": True}, desc="out_int32"),
        Sample((seq[0, 0], torch.zeros(0, dtype=torch.float64)), desc="no values"),
    ]


def _bucketize_samples(complex_: bool) -> list[Sample]:
    g = torch.Generator().manual_seed(1)
    boundaries = torch.tensor([-2.0, -0.5, 0.0, 0.0, 1.5], dtype=torch.float64)
    x = (torch.randint(-6, 7, (2, 3, 4), generator=g) / 2).double()
    return [
        Sample((x, boundaries), desc="(2, 3, 4)"),
        Sample((x, boundaries), {"right": True, "out_int32": True}, desc="right, int32"),
        Sample((x[0, 0, 0], boundaries), desc="0-dim input"),
    ]


def _search_bad() -> list[BadSample]:
    return [
        BadSample((torch.zeros(2, 3), torch.zeros(3, 3)), error=RuntimeError,
                  match="first N-1 dimensions"),
        BadSample((torch.zeros(3), torch.zeros(3)), {"side": "left", "right": True},
                  error=RuntimeError, match="opposites"),
        BadSample((torch.zeros(3), torch.zeros(3), torch.zeros(3, dtype=torch.int32)),
                  error=RuntimeError, match="long dtype"),
        BadSample(([1.0, 2.0], torch.zeros(3)), error=TypeError),
    ]


def _bucketize_bad() -> list[BadSample]:
    return [BadSample((torch.zeros(3), torch.zeros(2, 2)), error=RuntimeError,
                      match="1 dimension")]


_SKIPS = {
    "upcast": "integer outputs: torch searches float16 / bfloat16 natively, without upcasting; "
              "test_random_against_torch compares them",
    "nonfinite": "integer outputs (indices), which the nonfinite test does not compare; NaN and "
                 "infinities in the sequence and the values are among test_random_against_torch's "
                 "inputs",
}
OPS = [
    OpInfo("ops.searchsorted", _sorter_positional(ops.searchsorted),
           _sorter_positional(torch.searchsorted), _search_samples,
           bad_samples=_search_bad, dtypes=(torch.float32,), grad_args=(), nonfinite_args=(1,),
           skips=dict(_SKIPS)),
    OpInfo("ops.bucketize", ops.bucketize, torch.bucketize, _bucketize_samples,
           bad_samples=_bucketize_bad, dtypes=(torch.float32,), grad_args=(),
           skips=dict(_SKIPS)),
]
instantiate_generic_tests(globals(), OPS)
