"""The one path table of the n <= 4 ops (`mpslinalg.small.paths`) and its chooser."""

from __future__ import annotations

import contextlib
import datetime
import types

import path_decisions
import pytest
import torch

import mpslinalg
from mpslinalg.small import cpu_simd, paths
from mpslinalg.small import dispatch as si
from mpslinalg.small import orthogonal as so

#: Decisions the one table makes differently from the choosers it replaced, on purpose (see
#: test_lu_fast_path_condition_is_the_tables):
#: at 51ea8f5 the LU families' shapes-only condition read n = A.shape[-1] alone and any dtype.
_CHANGED = "may_use_small_path|"


@contextlib.contextmanager
def _installed(state):
    """``state`` of `path_decisions.STATES` in force: which native libraries are loaded and
    whether triton is installed and imports."""
    lu, orth, triton = state
    cpu_simd.LIBRARY.wait()  # a build still running would set ``loaded`` under the test
    cpu_simd.ORTH_LIBRARY.wait()
    module = types.ModuleType("triton_kernels") if triton == "ok" else None
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cpu_simd.LIBRARY, "loaded", object() if lu else None)
        patch.setattr(cpu_simd.ORTH_LIBRARY, "loaded", object() if orth else None)
        patch.setattr(paths, "TRITON_INSTALLED", triton != "absent")
        patch.setattr(paths, "import_triton_kernels", lambda: module)
        yield


def test_decisions_are_those_of_the_choosers_it_replaced():
    """Every decision over the grid of `path_decisions` (installation state, device type,
    dtype, m x n up to 5 x 5, batch around every crossover, backend) equals the frozen one of
    the two choosers the table replaced (commit 51ea8f5), but for `_CHANGED`."""
    frozen = path_decisions.load()
    got = path_decisions.decisions(si, so, _installed)
    differ = sorted(key for key in frozen.keys() | got.keys()
                    if frozen.get(key) != got.get(key) and not key.startswith(_CHANGED))
    assert not differ, [(key, frozen.get(key), got.get(key)) for key in differ[:10]]
    changed = [key for key in frozen.keys() | got.keys() if key.startswith(_CHANGED)
               and frozen.get(key) != got.get(key)]
    for key in changed:  # only inputs no row serves: non-square, or a dtype torch does not
        _, device, dtype, shape = key.split("|")
        m, n = shape.split("x")
        assert m != n or dtype in ("float16", "bfloat16"), key
        assert key not in got, key


@pytest.mark.parametrize("call", [
    mpslinalg.inv, mpslinalg.inv_ex, mpslinalg.det, mpslinalg.slogdet, mpslinalg.logdet,
    lambda A: mpslinalg.solve(A, A[..., :1])], ids=["inv", "inv_ex", "det", "slogdet", "logdet",
                                                    "solve"])
def test_lu_fast_path_condition_is_the_tables(call):
    """The LU families' shapes-only condition is the table's (a square kernel shape, a dtype a
    row serves): a batch of non-square matrices gets the same error at every batch size (it
    read n = A.shape[-1] alone, so 2048 3 x 4 matrices went through the op and got its message,
    "got shape (2048, 3, 4)", where 2 got torch's, "but they are 3 by 4 matrices")."""
    with mpslinalg.use_backend("torch"):
        messages = set()
        for batch in (2, 2048, 70000):
            with pytest.raises(RuntimeError) as error:
                call(torch.ones(batch, 3, 4))
            messages.add(str(error.value))
    assert len(messages) == 1, messages
    assert not si.may_use_small_path(torch.ones(2048, 3, 4))
    assert not si.may_use_small_path(torch.ones(2048, 3, 3, dtype=torch.float16))
    assert si.may_use_small_path(torch.ones(1024, 3, 3))


def test_every_crossover_has_its_measurement_and_date():
    """Each row that decides from a batch on says when that batch was measured (a real date,
    not a future one) and where the measurement is, for orders the kernels have; every table
    names the public functions it decides and falls back to an implementation without a
    native kernel."""
    for op, table in paths.TABLES.items():
        assert table.functions and table.shapes
        assert all(max(shape) <= paths.MAX_N for shape in table.shapes), op
        for row in table.rows:
            if row.min_batch is paths.EVERY_BATCH:
                continue
            assert datetime.date.fromisoformat(row.date) <= datetime.date.today(), (op, row)
            assert "benchmarks/results/" in row.measured, (op, row.path)
            assert set(row.min_batch) <= set(range(1, paths.MAX_N + 1)), (op, row.path)
            assert all(batch >= 1 for batch in row.min_batch.values()), (op, row.path)
        assert table.fallback in (paths.TENSOR_OPS, paths.TORCH_LINALG), op
