"""What the declarations of mpslinalg.ops give beyond the linalg families' (``_core.declare``):
a mutable operand, result dtypes chosen by an argument, operands whose whole shape is core, a
prepare that answers the call itself, and the torch forward run without the op's dispatch."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import mpslinalg
from mpslinalg import ops
from mpslinalg.ops import grouped_gemm, padding, random, search


def test_mutable_operand_gives_an_in_place_schema_without_results():
    schema = str(random.log_normal_op.overload._schema)
    assert "Tensor(a!) x" in schema and schema.endswith("-> ()")
    with FakeTensorMode():
        x = torch.empty(3, 4)
        assert random.log_normal_op(x, 0.0, 1.0, 7, "torch", False, "") is None


@pytest.mark.parametrize("out_int32, dtype", [(True, torch.int32), (False, torch.int64)])
def test_result_dtype_chosen_by_an_argument(out_int32, dtype):
    with FakeTensorMode():
        seq, values = torch.empty(2, 5), torch.empty(2, 3)
        out = search.searchsorted_op(seq, values, None, out_int32, False, "torch", False, "")
    assert out.dtype == dtype and out.shape == (2, 3)


def test_result_dtype_out_dtype_of_grouped_mm():
    with FakeTensorMode():
        a, b = torch.empty(4, 8, dtype=torch.float16), torch.empty(2, 8, 3, dtype=torch.float16)
        offs = torch.empty(2, dtype=torch.int32)
        out = grouped_gemm.grouped_mm_op(a, b, offs, None, torch.float32, "torch", False, "")
    assert out.dtype == torch.float32 and out.shape == (4, 3)


def test_whole_tensor_operand_has_no_batch_dimensions():
    x = torch.empty(2, 3, 4)
    assert padding.pad_decl.batch_ndims(x, [1, 1], 0) == [0, None, None]
    assert padding.pad_decl.result_shapes(x, [1, 2, -1, 0], 0) == [torch.Size((2, 2, 7))]


def test_prepare_answers_a_call_that_is_not_the_op():
    x = torch.arange(6.0).reshape(1, 2, 3)
    with mpslinalg.use_backend("metal"):
        got = ops.pad(x, (2, 1), "reflect")
    torch.testing.assert_close(got, torch.nn.functional.pad(x, (2, 1), "reflect"))


def test_torch_direct_skips_the_op_only_when_nothing_is_traced_or_differentiated(monkeypatch):
    a, b = torch.randn(4, 8), torch.randn(2, 8, 3)
    offs = torch.tensor([1, 4], dtype=torch.int32)
    op = grouped_gemm.grouped_mm_op
    calls = []
    overload = op.overload
    monkeypatch.setattr(op, "overload", lambda *args: calls.append(1) or overload(*args))
    with mpslinalg.use_backend("torch"):
        expected = ops.grouped_mm(a, b, offs=offs)
        assert calls == []
        got = ops.grouped_mm(a.requires_grad_(), b, offs=offs)
    assert calls == [1]
    torch.testing.assert_close(got, expected)
    got.sum().backward()
    assert a.grad is not None and a.grad.shape == a.shape
