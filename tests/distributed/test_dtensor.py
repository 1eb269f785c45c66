"""DTensors (torch.distributed.tensor) in mpslinalg's public functions, on gloo worlds of CPU
processes that the tests spawn themselves (`dtensor_world.run`: a file:// rendezvous in the
test's temporary directory, a deadline after which every rank is killed and the test fails).
What each rank checks is in ``dtensor_scenarios.py``: on 2 ranks, every op family on
batch-sharded DTensors with no collective (counted), replicated inputs, the checking forms'
one all-reduce and the same LinAlgError on every rank, autograd, torch.compile, the
redistribution warnings and the metal backend through the emulator; on 4 ranks, TSQR (qr,
lstsq) against the single-process results, a 2-D mesh and the checking forms again."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch.distributed as dist
from dtensor_world import run

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch without the gloo backend")


@pytest.mark.parametrize(("scenario", "size"), [("batch_world", 2), ("tsqr_world", 4)])
def test_world(scenario, size, tmp_path):
    outputs = run(scenario, size, tmp_path)
    assert all(f"{scenario} passed" in text for text in outputs), outputs


def test_import_leaves_torch_distributed_tensor_alone():
    """No DTensor can exist before the user imports torch.distributed.tensor; mpslinalg's import
    must not pay for it."""
    code = ("import sys, mpslinalg, mpslinalg.ops, mpslinalg.distributed; "
            "print('torch.distributed.tensor' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_core_ranks_come_from_the_declarations():
    import mpslinalg
    from mpslinalg import ops
    from mpslinalg._core.distributed import core_ranks

    def ranks(function, **values):
        return core_ranks(function, values, [n for n, v in values.items() if v == "tensor"])

    assert ranks(mpslinalg.lu_solve, LU="tensor", pivots="tensor", B="tensor", left=True,
                 adjoint=False, out=None) == {"LU": 2, "pivots": 1, "B": 2}
    # public names that differ from the declaration's: its rank where unambiguous
    assert ranks(ops.chebyshev_polynomial_t, input="tensor", n=3, out=None) == {"input": 0}
    assert ranks(ops.bucketize, input="tensor", boundaries="tensor", out_int32=False,
                 right=False, out=None) == {"input": None, "boundaries": None}
    assert ranks(mpslinalg.cond, A="tensor", p=None, out=None) == {"A": None}
