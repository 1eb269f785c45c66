"""The torch backend routes around torch's wrong batched CPU LU (mpslinalg._core.torch_bugs)."""

from __future__ import annotations

import pytest
import torch

import mpslinalg
from mpslinalg._core import torch_bugs
from mpslinalg.testing import THRESH, lu_ratio, random_matrix, solve_ratio


def test_condition():
    big = torch.zeros(2, 152, 152)
    assert torch_bugs.mkl_batched_getrf_affected(big) == (torch.get_num_threads() > 1)
    assert not torch_bugs.mkl_batched_getrf_affected(big[0])  # one matrix is right
    assert not torch_bugs.mkl_batched_getrf_affected(torch.zeros(2, 144, 144))
    assert not torch_bugs.mkl_batched_getrf_affected(big[:1])


@pytest.mark.skipif(torch.get_num_threads() < 2, reason="the bug needs two intra-op threads")
def test_results_right_where_torch_is_wrong():
    A = random_matrix(160, torch.float32, (3,), seed=1)
    B = random_matrix(2, torch.float32, (3,), seed=2, m=160)
    with mpslinalg.use_backend("torch"):
        X = mpslinalg.solve(A, B)
        P, L, U = mpslinalg.lu(A)
        sign, logabsdet = mpslinalg.slogdet(A)
    assert solve_ratio(A, X, B) < THRESH
    assert lu_ratio(A, P, L, U) < THRESH
    ref = torch.linalg.slogdet(A.double())
    torch.testing.assert_close(logabsdet.double(), ref.logabsdet, rtol=1e-4, atol=1e-3)
