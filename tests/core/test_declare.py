"""The op declaration (`mpslinalg._core.declare`): what it derives from what a family states."""

import pytest
import torch

import mpslinalg
from mpslinalg._core.declare import NOT_COMPUTED, Declaration, Matrix, Param, Result, info
from mpslinalg.linalg import FAMILIES


def test_every_public_function_is_generated_from_a_declaration():
    machinery = {"LinAlgError", "check_errors", "get_backend", "set_backend", "use_backend"}
    undeclared = [name for name in mpslinalg.__all__ if name not in machinery
                  and not isinstance(getattr(getattr(mpslinalg, name), "declaration", None),
                                     Declaration)]
    assert undeclared == []


def test_the_families_registration_is_what_mpslinalg_exports():
    import importlib

    names = set()
    for family in FAMILIES:
        names |= set(importlib.import_module(f"mpslinalg.linalg.{family}").__all__)
    assert names == set(mpslinalg.__all__) - {
        "LinAlgError", "check_errors", "get_backend", "set_backend", "use_backend"}


def test_shape_rule_and_batch_dimensions_follow_from_the_core_ranks():
    decl = mpslinalg.solve.declaration
    A, B = torch.empty(2, 3, 4, 4), torch.empty(3, 4, 2)
    assert decl.batch_ndims(A, B, True) == [2, 1, None]
    assert decl.result_shapes(A, B, True) == [torch.Size((2, 3, 4, 2)), torch.Size((2, 3))]
    svd = mpslinalg.svd.declaration
    M = torch.empty(5, 3, 2)
    assert svd.result_shapes(M, False, None) == [(5, 3, 2), (5, 2), (5, 2, 2)]
    assert svd.result_shapes(M, True, None) == [(5, 3, 3), (5, 2), (5, 2, 2)]
    assert mpslinalg.qr.declaration.result_shapes(M, "r")[0] == (0,)


@pytest.mark.parametrize(("name", "shapes", "kwargs"), [
    ("solve", [(2, 3, 3), (3,)], {}), ("svd", [(4, 5, 3)], {}), ("qr", [(4, 5, 3)], {}),
    ("eigh", [(4, 3, 3)], {}), ("lstsq", [(4, 5, 3), (4, 5, 2)], {"driver": "gelsd"}),
    ("lu_factor", [(4, 5, 3)], {}), ("pinv", [(4, 5, 3)], {}), ("slogdet", [(2, 3, 3)], {})])
def test_fake_outputs_follow_the_shape_rule(name, shapes, kwargs):
    """Meta tensors on the metal backend reach the op's fake, made from the declared shape
    rule: the shapes and dtypes of torch's results."""
    with mpslinalg.use_backend("metal"):
        got = getattr(mpslinalg, name)(*(torch.empty(s, device="meta") for s in shapes),
                                       **kwargs)
    want = getattr(torch.linalg, name)(*(torch.randn(s) for s in shapes), **kwargs)
    got = (got,) if isinstance(got, torch.Tensor) else tuple(got)
    want = (want,) if isinstance(want, torch.Tensor) else tuple(want)
    assert [(g.device.type, g.shape, g.dtype) for g in got] == [
        ("meta", w.shape, w.dtype) for w in want]


def _toy_torch(A, double):
    """(A doubled or copied, zeros per row when ``double`` else not computed, info: 1 where
    A[..., 0, 0] is zero)."""
    first = (torch.zeros(A.shape[:-1], dtype=torch.int64, device=A.device) if double
             else A.new_empty(0, dtype=torch.int64))
    return 2 * A if double else A.clone(), first, (A[..., 0, 0] == 0).to(torch.int32)


def _toy_ex_torch(A, *, check_errors=False):
    raise AssertionError("through_op sends every call through the op")


_TOY = Declaration(
    "test_declare_toy", [Matrix("A", square=False), Param("double", "bool")],
    [Result("doubled", "A"),
     Result("first", lambda A, double: (A[0],) if double else NOT_COMPUTED, torch.int64),
     info()],
    forward={"torch": _toy_torch}, through_op=lambda A: True)


@_TOY.public(_toy_ex_torch, torch_name="toy_ex")
def toy_ex(A, double=True, *, check_errors=False, out=None):
    """The _ex form."""


@_TOY.public(_toy_ex_torch, torch_name="toy")
def toy(A, double=True, *, out=None):
    """The checking form."""


def test_the_ex_pair_and_out_are_generated():
    A = torch.ones(2, 3, 2)
    doubled, first, status = toy_ex(A)
    assert torch.equal(doubled, 2 * A) and first.shape == (2, 3) and status.dtype == torch.int32
    assert toy_ex(A, False)[1].shape == (0,)
    assert len(toy(A)) == 2  # the checking form returns no info
    A[1, 0, 0] = 0
    assert toy_ex(A)[2].tolist() == [0, 1]
    with pytest.raises(mpslinalg.LinAlgError, match=r"mpslinalg.toy:.*\(Batch element 1\)"):
        toy(A)
    with pytest.raises(mpslinalg.LinAlgError, match="mpslinalg.toy_ex"):
        toy_ex(A, check_errors=True)
    out = (torch.empty(0), torch.empty(0, dtype=torch.int64), torch.empty(0, dtype=torch.int32))
    got = toy_ex(A, out=out)
    assert got[0] is out[0] and out[0].shape == A.shape
    with pytest.raises(TypeError, match="mpslinalg.toy: A must be a torch.Tensor"):
        toy("A")
    with pytest.raises(TypeError, match="mpslinalg.toy: expected a floating point"):
        toy(torch.ones(2, 2, dtype=torch.int32))
