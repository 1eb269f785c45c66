"""The op database's generic tests tell the truth: a check that checked nothing fails (it
never passes), and an opt-out is reported as a skip with its reason."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from opdb import GENERIC_TESTS, OpInfo, assert_checked_some, instantiate_generic_tests

TORCH = SimpleNamespace(name="torch", backend="torch", is_metal=False,
                        device=torch.device("cpu"))
#: Checks that take the first sample without looking: an op without samples fails there.
_FIRST_SAMPLE = {"out", "compile"}


def _nothing_to_check(**overrides) -> OpInfo:
    """An op that every generic test applies to, with no sample of any kind."""
    return OpInfo("ops.nothing", torch.neg, torch.neg, lambda complex_: [],
                  orthonormal=lambda out: [], degenerate=lambda complex_: [],
                  small_path=True, rank_output=0, **overrides)


def _generated(test_name: str, info: OpInfo):
    namespace: dict = {}
    instantiate_generic_tests(namespace, [info])
    return namespace[f"test_generic_{test_name}"]


@pytest.mark.parametrize("test_name", sorted(GENERIC_TESTS))
def test_a_check_that_checked_nothing_fails(test_name):
    info = _nothing_to_check()
    test = _generated(test_name, info)
    if test_name in _FIRST_SAMPLE:
        with pytest.raises(IndexError):
            test(TORCH, info)
        return
    with pytest.raises(AssertionError, match=rf"^ops.nothing: the generic {test_name} test "
                       rf"checked 0 cases; .* OpInfo.skips\['{test_name}'\]"):
        test(TORCH, info)


@pytest.mark.parametrize("test_name", sorted(GENERIC_TESTS))
def test_an_opt_out_is_a_skip_with_its_reason(test_name):
    info = _nothing_to_check(skips={test_name: "no samples here, on purpose"})
    with pytest.raises(pytest.skip.Exception, match=rf"ops.nothing opts out of the generic "
                       rf"{test_name} test: no samples here, on purpose"):
        _generated(test_name, info)(TORCH, info)


def test_a_check_that_returns_no_count_fails():
    with pytest.raises(AssertionError, match="checked None cases"):
        assert_checked_some(_nothing_to_check(), "parity", None)
    assert_checked_some(_nothing_to_check(), "parity", 1)
