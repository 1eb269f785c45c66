import pytest
import torch

from mpslinalg._core import checks as _checks


def test_check_matrix_messages():
    with pytest.raises(TypeError, match=r"^mpslinalg.inv: A must be a torch.Tensor, got list$"):
        _checks.check_matrix("inv", "A", [[1.0]])
    with pytest.raises(RuntimeError, match=r"^mpslinalg.inv: A must have at least 2 dimensions, "
                       r"got shape \(3\)$"):
        _checks.check_matrix("inv", "A", torch.ones(3))
    with pytest.raises(RuntimeError, match=r"square matrices, got shape \(2, 3, 4\)$"):
        _checks.check_matrix("inv", "A", torch.ones(2, 3, 4))
    assert _checks.check_matrix("lu_factor", "A", torch.ones(3, 4), square=False).shape == (3, 4)


def test_same_device_and_dtype():
    _checks.check_same_device("solve", A=torch.ones(1), B=torch.ones(1))
    _checks.check_same_dtype("solve", A=torch.ones(1), B=torch.ones(1))
    with pytest.raises(RuntimeError, match=r"mpslinalg.solve: .*A of dtype float32, B of dtype "
                       r"float64"):
        _checks.check_same_dtype("solve", A=torch.ones(1), B=torch.ones(1, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="one device, got A on cpu, B on meta"):
        _checks.check_same_device("solve", A=torch.ones(1), B=torch.ones(1, device="meta"))


@pytest.mark.parametrize(
    "dtype, backend, expected",
    [
        (torch.float32, "metal", torch.float32),
        (torch.complex64, "metal", torch.complex64),
        (torch.float16, "metal", torch.float32),
        (torch.bfloat16, "metal", torch.float32),
        (torch.float64, "torch", torch.float64),
        (torch.complex128, "torch", torch.complex128),
        (torch.float16, "torch", torch.float32),
    ],
)
def test_compute_dtype(dtype, backend, expected):
    assert _checks.compute_dtype("det", dtype, backend) == expected


def test_metal_rejects_64_bit_with_a_pointer_to_the_torch_backend():
    for dtype in (torch.float64, torch.complex128):
        with pytest.raises(TypeError, match=r"^mpslinalg.det: the metal backend supports float32, "
                           r"complex64 .*use the torch backend"):
            _checks.compute_dtype("det", dtype, "metal")


def test_integer_input_is_a_type_error():
    for backend in ("metal", "torch"):
        with pytest.raises(TypeError, match="mpslinalg.det: expected a floating point or complex "
                           "tensor .* got int64"):
            _checks.compute_dtype("det", torch.int64, backend)


def test_broadcast_batch():
    assert _checks.broadcast_batch("solve", ("A", torch.Size([2, 1])),
                                   ("B", torch.Size([3]))) == (2, 3)
    with pytest.raises(RuntimeError, match=r"mpslinalg.solve: batch dimensions do not broadcast: "
                       r"A batch shape \(2,\), B batch shape \(3,\)"):
        _checks.broadcast_batch("solve", ("A", torch.Size([2])), ("B", torch.Size([3])))


@pytest.mark.parametrize("shapes", [
    (), ((),), ((2, 3),), ((2, 1), (3,)), ((1,), (0,)), ((0, 1), (1, 4)), ((5, 1, 3), (2, 1), ()),
    ((1, 1), (1,)), ((2,), (3,)), ((2, 0), (3,)), ((4, 1), (3, 4, 2)), ((0,), (2,)),
])
def test_broadcast_shapes_follows_torch(shapes):
    try:
        expected = torch.broadcast_shapes(*shapes)
    except RuntimeError:
        with pytest.raises(RuntimeError, match=r"^shape mismatch: the shapes .* do not broadcast$"):
            _checks.broadcast_shapes(*shapes)
        return
    got = _checks.broadcast_shapes(*shapes)
    assert type(got) is torch.Size and got == expected
