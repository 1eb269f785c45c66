"""mpslinalg: torch.linalg-shaped linear algebra with Metal kernels for Apple GPUs.

The same functions run everywhere: on MPS tensors through mpslinalg's Metal kernels, on CPU and
CUDA tensors through torch.linalg (or, with ``use_backend("metal")`` on CPU tensors, through the
Metal kernels in the CPU emulator). See ``python -m mpslinalg info``.

Layout: `mpslinalg.linalg` (the op families), `mpslinalg.small` (the n <= 4 path),
`mpslinalg.ops` (the companion inference kernels), `mpslinalg.testing` (test helpers),
`mpslinalg.emulator` (Metal on the CPU); ``mpslinalg._core`` holds the shared machinery.
"""

from . import ops as ops  # the companion module, mpslinalg.ops (documented on its own)
from ._core.backend import get_backend, set_backend, use_backend
from ._core.errors import LinAlgError, check_errors
from .linalg.det import det, logdet, slogdet
from .linalg.eigh import eigh, eigvalsh
from .linalg.inverse import inv, inv_ex
from .linalg.lu import lu, lu_factor, lu_factor_ex, lu_solve
from .linalg.qr import geqrf, householder_product, lstsq, qr
from .linalg.solve import solve, solve_ex
from .linalg.svd import matrix_rank, pinv, svd, svdvals

__version__ = "0.1.0"

# The native CPU kernels of the n <= 4 path build (or load from the cache) in the background, so
# that no call ever waits for a compiler (MPSLINALG_NATIVE=0 turns this off).
from .small import cpu_simd as _cpu_simd  # noqa: E402

_cpu_simd.LIBRARY.start()
_cpu_simd.ORTH_LIBRARY.start()

__all__ = [
    "LinAlgError",
    "check_errors",
    "det",
    "eigh",
    "eigvalsh",
    "geqrf",
    "get_backend",
    "householder_product",
    "inv",
    "inv_ex",
    "logdet",
    "lstsq",
    "lu",
    "lu_factor",
    "lu_factor_ex",
    "lu_solve",
    "matrix_rank",
    "pinv",
    "qr",
    "set_backend",
    "slogdet",
    "solve",
    "solve_ex",
    "svd",
    "svdvals",
    "use_backend",
]
