import pytest
import torch

import mpslinalg
from mpslinalg.testing import count_host_syncs


def test_linalg_error_is_torch_linalg_error():
    assert issubclass(mpslinalg.LinAlgError, torch.linalg.LinAlgError)


def test_no_error_for_zero_info():
    mpslinalg.check_errors(torch.zeros(3, 2, dtype=torch.int32), "mpslinalg.solve")
    mpslinalg.check_errors(torch.zeros(0, dtype=torch.int32), "mpslinalg.solve")
    mpslinalg.check_errors(torch.tensor(0, dtype=torch.int32), "mpslinalg.solve")


def test_first_failing_batch_element_in_torch_wording():
    info = torch.tensor([0, 0, 3, 1], dtype=torch.int32)
    with pytest.raises(mpslinalg.LinAlgError) as exc:
        mpslinalg.check_errors(info, "mpslinalg.inv")
    assert str(exc.value) == (
        "mpslinalg.inv: (Batch element 2): The diagonal element 3 is zero, the inversion could "
        "not be completed because the input matrix is singular."
    )
    with pytest.raises(mpslinalg.LinAlgError, match=r"^mpslinalg.solve: \(Batch element 1\): "
                       r"The solver failed because the input matrix is singular.$"):
        mpslinalg.check_errors(info[1:], "mpslinalg.solve")


def test_single_matrix_has_no_batch_index_and_matches_torch():
    A = torch.zeros(2, 2)
    with pytest.raises(torch.linalg.LinAlgError) as theirs:
        torch.linalg.inv(A)
    with pytest.raises(mpslinalg.LinAlgError) as ours:
        mpslinalg.check_errors(torch.tensor(1, dtype=torch.int32), "linalg.inv")
    assert str(ours.value) == str(theirs.value)
    with pytest.raises(RuntimeError) as theirs:  # torch raises a plain RuntimeError here
        torch.linalg.lu_factor(A)
    with pytest.raises(mpslinalg.LinAlgError) as ours:
        mpslinalg.check_errors(torch.tensor(1, dtype=torch.int32), "torch.linalg.lu_factor")
    assert str(ours.value) == str(theirs.value)


def test_batched_wording_matches_torch():
    A = torch.eye(2).repeat(3, 1, 1)
    A[1] = 0
    with pytest.raises(torch.linalg.LinAlgError) as theirs:
        torch.linalg.solve(A, torch.ones(3, 2, 1))
    with pytest.raises(mpslinalg.LinAlgError) as ours:
        mpslinalg.check_errors(torch.tensor([0, 1, 0], dtype=torch.int32), "torch.linalg.solve")
    assert str(ours.value) == str(theirs.value)


def test_routine_words_the_failure_of_the_call_that_failed():
    """torch words a failure after the LAPACK call that reported it: matrix_rank with
    hermitian=True fails in eigh, and says eigh's "repeated eigenvalues" after its own name."""
    A = torch.eye(3).repeat(2, 1, 1)
    A[1, 1, 1] = float("nan")
    with pytest.raises(torch.linalg.LinAlgError) as theirs:
        torch.linalg.eigvalsh(A)
    info = torch.tensor([0, 1], dtype=torch.int32)
    with pytest.raises(mpslinalg.LinAlgError) as ours:
        mpslinalg.check_errors(info, "linalg.eigh")
    assert str(ours.value) == str(theirs.value)
    with pytest.raises(mpslinalg.LinAlgError) as ours:
        mpslinalg.check_errors(info, "mpslinalg.matrix_rank", routine="eigh")
    assert str(ours.value) == "mpslinalg.matrix_rank: " + str(theirs.value).partition(": ")[2]


def test_reads_the_device_once():
    info = torch.tensor([[0, 2], [0, 0]], dtype=torch.int32)
    with count_host_syncs() as syncs, pytest.raises(mpslinalg.LinAlgError, match="element 1"):
        mpslinalg.check_errors(info, "mpslinalg.solve")
    assert len(syncs.calls) == 1


def test_negative_info_is_an_internal_error():
    with pytest.raises(RuntimeError, match="illegal value"):
        mpslinalg.check_errors(torch.tensor([-2], dtype=torch.int32), "mpslinalg.solve")


@pytest.mark.parametrize(("info", "got"), [
    ([0, 1], "got list"), (1, "got int"), (None, "got NoneType"),
    (torch.tensor([0.0, 1.0]), "got float32 tensor"),
])
def test_info_that_is_not_an_integer_tensor_is_a_type_error(info, got):
    with pytest.raises(TypeError, match=rf"^mpslinalg.check_errors: info must be the integer "
                                        rf"tensor an \*_ex function returned, {got}$"):
        mpslinalg.check_errors(info, "mpslinalg.inv")


def test_api_name_that_is_not_a_str_is_a_type_error():
    with pytest.raises(TypeError, match="^mpslinalg.check_errors: api_name must be a str"):
        mpslinalg.check_errors(torch.tensor([0], dtype=torch.int32), mpslinalg.inv)
