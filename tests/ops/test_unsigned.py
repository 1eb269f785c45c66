"""Unsigned comparisons and minimum / maximum (mpslinalg.ops.unsigned) against NumPy, whose
uint16 / uint32 / uint64 arithmetic is exact, at the boundaries where signed arithmetic goes
wrong (2^15, 2^31, 2^63)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import mpslinalg
from mpslinalg import ops

NAMES = ("eq", "ne", "lt", "le", "gt", "ge", "maximum", "minimum")
NUMPY = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
         "gt": np.greater, "ge": np.greater_equal, "maximum": np.maximum, "minimum": np.minimum}
DTYPES = (torch.uint16, torch.uint32, torch.uint64)


def numpy_reference(name: str):
    """``name`` computed by NumPy, after torch's own promotion and broadcasting checks."""

    def ref(a, b):
        dtype = torch.result_type(a, b)
        b = b if isinstance(b, torch.Tensor) else torch.tensor(b, dtype=dtype)
        shape = torch.broadcast_shapes(a.shape, b.shape)
        a = a.to(dtype).expand(shape).numpy()
        b = b.to(dtype).expand(shape).numpy()
        return torch.from_numpy(np.ascontiguousarray(NUMPY[name](a, b)))

    return ref


def boundary_values(dtype: torch.dtype) -> list[int]:
    """Values around every power of two where a signed type of the same or a narrower size
    wraps, and the extremes."""
    bits = 8 * torch.empty((), dtype=dtype).element_size()
    values = {0, 1, 2, 2**bits - 1, 2**bits - 2}
    for k in (15, 16, 31, 32, 63):
        if k < bits:
            values |= {2**k - 1, 2**k, 2**k + 1}
    return sorted(values)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_all_pairs_of_boundary_values(backend, name, dtype):
    values = boundary_values(dtype)
    a = torch.tensor(values, dtype=dtype).view(-1, 1)
    b = torch.tensor(values, dtype=dtype).view(1, -1)
    ours = getattr(ops, name)(backend.tensor(a), backend.tensor(b))
    assert torch.equal(ours.cpu(), numpy_reference(name)(a, b))


@pytest.mark.parametrize("name", NAMES)
def test_strided_broadcast_and_scalar_operands(backend, name):
    g = torch.Generator().manual_seed(0)
    big = torch.randint(-(2**63), 2**63 - 1, (4, 6), generator=g, dtype=torch.int64)
    a = big.view(torch.uint64)
    b = a.t().contiguous().t()[:, ::2]  # transposed storage, sliced
    fn, ref = getattr(ops, name), numpy_reference(name)
    assert torch.equal(fn(backend.tensor(a[:, ::2]), backend.tensor(b)).cpu(), ref(a[:, ::2], b))
    assert torch.equal(fn(backend.tensor(a[:, :1]), backend.tensor(a[0])).cpu(),
                       ref(a[:, :1], a[0]))
    assert torch.equal(fn(backend.tensor(a), 2**63).cpu(), ref(a, 2**63))


def test_one_launch_and_no_host_sync(metal_backend):
    from mpslinalg import emulator
    from mpslinalg.testing import count_host_syncs

    a = metal_backend.tensor(torch.arange(10).to(torch.uint32))
    emulator.reset_launch_counts()
    with count_host_syncs() as syncs:
        for name in NAMES:
            getattr(ops, name)(a, a[:1])
    assert emulator.total_launches() == len(NAMES) and syncs.calls == []


def test_errors(backend):
    a = backend.tensor(torch.tensor([1, 2], dtype=torch.uint32))
    with pytest.raises(RuntimeError, match="^mpslinalg.lt: .*[Pp]romotion"):
        ops.lt(a, a.to(torch.uint16))
    with pytest.raises(RuntimeError, match="^mpslinalg.maximum: other = -1 is out of the range"):
        ops.maximum(a, -1)
    with pytest.raises(TypeError, match="^mpslinalg.ge: other must be"):
        ops.ge(a, 1.5)
    if backend.is_metal:
        with pytest.raises(TypeError, match="^mpslinalg.gt: the metal backend supports uint16"):
            ops.gt(a.float(), a.float())


def test_other_dtypes_follow_torch():
    x = torch.tensor([1.0, float("nan"), 3.0])
    with mpslinalg.use_backend("torch"):
        for name in NAMES:
            torch.testing.assert_close(getattr(ops, name)(x, 2.0 * torch.ones(3)),
                                       getattr(torch, name)(x, 2.0 * torch.ones(3)),
                                       equal_nan=True, rtol=0, atol=0)


# ---------------------------------------------------------------- op database

from opdb import BadSample, OpInfo, Sample, instantiate_generic_tests  # noqa: E402


def _samples(complex_: bool) -> list[Sample]:
    # Values exactly representable in float64 (the carrier the op database converts from):
    # 2^63 + k * 2048 and 2^63 - k * 1024 straddle the uint64 sign bit.
    big = [2.0**63 + 2048, 2.0**63 - 1024, 2.0**64 - 2048, 2.0**63, 0.0, 1.0]
    mid = [2.0**31 + 1, 2.0**31 - 1, 2.0**32 - 1, 2.0**31, 0.0, 7.0]
    return [
        Sample((torch.tensor(mid), torch.tensor(mid[::-1])), desc="around 2^31"),
        Sample((torch.tensor(big).view(2, 1, 3), torch.tensor(big[::-1]).view(2, 3)),
               desc="around 2^63, broadcast (2, 1, 3) with (2, 3)"),
        Sample((torch.tensor(mid).view(3, 2), torch.tensor(5.0)), desc="with a 0-dim tensor"),
        Sample((torch.zeros(0, 3), torch.zeros(3)), desc="empty"),
    ]


def _bad_samples() -> list[BadSample]:
    return [
        BadSample((torch.zeros(3), torch.zeros(3, dtype=torch.int8)), error=RuntimeError,
                  match="romotion"),
        BadSample((torch.zeros(3), torch.zeros(2)), error=RuntimeError),
    ]


def torch_out_oracle(name: str):
    """``torch.<name>`` as the oracle of the ``out`` test: torch checks ``out`` before it finds
    that it has no CPU kernel for most unsigned dtypes, so its NotImplementedError means that
    ``out`` passed (only the decision and the return type are compared)."""

    def ref(a, b, *, out):
        try:
            return getattr(torch, name)(a, b, out=out)
        except NotImplementedError:
            return out

    return ref


_SKIPS = {
    "upcast": "integer op: there is nothing to upcast",
    "nonfinite": "integer op: integers have no NaN / Inf",
    "layouts": "no floating-point samples for the generic layout test to compare; "
               "test_strided_broadcast_and_scalar_operands covers strided and broadcast views",
}

OPS = [
    OpInfo(f"ops.{name}", getattr(ops, name), numpy_reference(name), _samples,
           bad_samples=_bad_samples, grad_args=(), out_ref=torch_out_oracle(name),
           # uint16 is covered by test_all_pairs_of_boundary_values (the samples exceed 2^16)
           dtypes=(torch.uint32, torch.uint64),
           rtol=dict.fromkeys(DTYPES, 0.0), skips=dict(_SKIPS))
    for name in NAMES
]
instantiate_generic_tests(globals(), OPS)
