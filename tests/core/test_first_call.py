"""The first call in a fresh process imports neither sympy nor torch._dynamo.

Importing either costs a fresh process 0.4 s to seconds (sympy comes in through
``torch.fx.experimental.symbolic_shapes``, which ``torch.broadcast_shapes`` imports), which would
make mpslinalg's first call slower than torch.linalg's by that much.
"""

import json
import subprocess
import sys

#: One call per family on batched input (1000 matrices: batches this small go straight to
#: torch.linalg), linalg in float32 and complex64, ops in float32.
CHILD = r"""
import json, sys
import torch
import mpslinalg as m
import mpslinalg.ops as o

torch.manual_seed(0)
for dtype in (torch.float32, torch.complex64):
    A = torch.randn(1000, 3, 3, dtype=dtype) + 4 * torch.eye(3, dtype=dtype)
    B = torch.randn(1, 3, 2, dtype=dtype)
    m.det(A), m.slogdet(A), m.inv(A), m.solve(A, B), m.lu_solve(*m.lu_factor(A), B)
    m.qr(A), m.householder_product(*m.geqrf(A)), m.lstsq(A, B), m.svd(A), m.pinv(A)
    m.eigh(A + A.mH)
x = torch.randn(4, 8, 16)
o.maximum(x, x[:1]), o.eq(x, x[:1]), o.chebyshev_polynomial_t(x, x[:1])
o.scaled_dot_product_attention(x, x, x), o.linear(x, x[0]), o.pad(x, (1, 1))
o.conv1d(x, x[:2, :, :3])
o.searchsorted(torch.arange(5.0), x), o.from_float8(*o.to_float8(x[0]))
o.grouped_mm(x, x.mT), o.log_normal(x)
print(json.dumps({name: name in sys.modules for name in ("sympy", "torch._dynamo")}))
"""


def test_first_calls_import_neither_sympy_nor_dynamo():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True)
    imported = json.loads(out.stdout.strip().splitlines()[-1])
    assert imported == {"sympy": False, "torch._dynamo": False}
