"""``out=`` through `mpslinalg._core.op.write_out`: the cases the issue reported (the op
database's generic ``out`` test checks every function, output and dtype against torch)."""

import pytest
import torch

import mpslinalg


def _square(backend):
    gen = torch.Generator().manual_seed(5)
    return backend.tensor(torch.randn(4, 4, generator=gen) + 4 * torch.eye(4))


def test_a_wider_out_takes_the_cast_result(backend):
    """torch casts pinv, geqrf and householder_product results into a float64 out."""
    A = _square(backend)
    wide = backend.tensor(torch.empty(0, dtype=torch.float64))
    assert mpslinalg.pinv(A, out=wide) is wide
    torch.testing.assert_close(wide, mpslinalg.pinv(A).double())
    a, tau = (backend.tensor(torch.empty(0, dtype=torch.float64)) for _ in range(2))
    got = mpslinalg.geqrf(A, out=(a, tau))
    assert type(got) is torch.return_types.geqrf_out and got.a is a and got.tau is tau
    Q = backend.tensor(torch.empty(0, dtype=torch.float64))
    mpslinalg.householder_product(*mpslinalg.geqrf(A), out=Q)
    torch.testing.assert_close(Q, mpslinalg.householder_product(*mpslinalg.geqrf(A)).double())


def test_refusals_in_torchs_words(backend):
    A = _square(backend)
    with pytest.raises(RuntimeError, match=r"^mpslinalg.det: Expected out tensor to have dtype "
                                           r"float, but got double instead$"):
        mpslinalg.det(A, out=backend.tensor(torch.empty(0, dtype=torch.float64)))
    with pytest.raises(RuntimeError, match=r"^mpslinalg.pinv: Expected result to be safely "
                                           r"castable from Float dtype, but got result with "
                                           r"dtype Int$"):
        mpslinalg.pinv(A, out=backend.tensor(torch.empty(0, dtype=torch.int32)))
    with pytest.raises(RuntimeError, match="^mpslinalg.inv: "):
        mpslinalg.inv(A, out=torch.empty(0, device="meta"))


def test_tuple_results_are_torchs_out_types(backend):
    A = _square(backend)
    for fn, n in ((mpslinalg.slogdet, 2), (mpslinalg.lu_factor_ex, 3), (mpslinalg.svd, 3)):
        results = fn(A)
        outs = tuple(torch.empty(0, dtype=r.dtype, device=r.device) for r in results)
        got = fn(A, out=outs)
        assert type(got).__name__ == type(results).__name__ + "_out", fn.__name__
        assert len(got) == n and all(g is o for g, o in zip(got, outs, strict=True))
