"""torch.compile(fullgraph=True) with inductor, one op per family, on every backend; the
checking forms raise LinAlgError from compiled code. (The op database runs every op under the
cheaper aot_eager backend.)"""

from __future__ import annotations

import pytest
import torch

import mpslinalg
from mpslinalg.testing import matrix_with_spread

FAMILY_CALLS = {
    "lu": lambda A: mpslinalg.lu_solve(*mpslinalg.lu_factor(A), A[..., :2]),
    "solve": lambda A: mpslinalg.solve(A, A[..., :1]),
    "det": lambda A: mpslinalg.slogdet(A).logabsdet,
    "inverse": lambda A: mpslinalg.inv(A),
}


@pytest.mark.parametrize("family", sorted(FAMILY_CALLS))
def test_inductor_matches_eager(backend, family):
    torch._dynamo.reset()
    call = FAMILY_CALLS[family]
    A = backend.tensor(matrix_with_spread(5, 10.0, torch.float32, (2,), seed=1))
    compiled = torch.compile(call, fullgraph=True, backend="inductor")
    torch.testing.assert_close(compiled(A), call(A), rtol=1e-5, atol=1e-5)
    Ag = A.clone().requires_grad_()
    (grad,) = torch.autograd.grad(compiled(Ag).sum(), Ag)
    (ref,) = torch.autograd.grad(call(Ag).sum(), Ag)
    torch.testing.assert_close(grad, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["solve", "inv", "lu_factor"])
def test_checking_forms_raise_under_compile(backend, name):
    torch._dynamo.reset()
    A = torch.eye(4).repeat(3, 1, 1)
    A[1, 2] = 0  # batch element 1 singular
    A = backend.tensor(A)
    fn = {"solve": lambda A: mpslinalg.solve(A, A[..., :1]),
          "inv": mpslinalg.inv, "lu_factor": lambda A: mpslinalg.lu_factor(A)[0]}[name]
    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    with pytest.raises(torch.linalg.LinAlgError, match=r"\(Batch element 1\)"):
        compiled(A)
    good = backend.tensor(torch.eye(4).repeat(3, 1, 1))
    torch.testing.assert_close(compiled(good), fn(good))
