import pytest
import torch

import mpslinalg
from mpslinalg import emulator
from mpslinalg._core import copy as _copy
from mpslinalg.testing import count_host_syncs


@pytest.fixture(autouse=True)
def _metal_backend():
    with mpslinalg.use_backend("metal"):
        yield


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64, torch.int32])
@pytest.mark.parametrize(
    "make",
    [
        lambda x: x.mT,  # transposed
        lambda x: x[..., 1:, ::2],  # sliced with storage offset
        lambda x: x[:1].expand(3, -1, -1),  # broadcast batch, stride 0
        lambda x: x.permute(2, 0, 1),
    ],
)
def test_contiguous_matches_torch(dtype, make):
    base = (torch.randn(3, 5, 6, dtype=torch.complex64) * 10)
    base = base.to(dtype) if dtype.is_complex else base.real.to(dtype)
    view = make(base)
    before = base.clone()
    emulator.reset_launch_counts()
    with count_host_syncs() as syncs:
        out = _copy.contiguous(view)
    assert out.is_contiguous() and torch.equal(out, view.contiguous())
    assert torch.equal(base, before)
    assert emulator.total_launches() == 1 and syncs.calls == []


def test_contiguous_input_and_empty_are_free():
    x = torch.randn(4, 4)
    emulator.reset_launch_counts()
    assert _copy.contiguous(x) is x
    empty = torch.randn(0, 3, 4).mT
    assert _copy.contiguous(empty).shape == (0, 4, 3)
    assert emulator.total_launches() == 0
