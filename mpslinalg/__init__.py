"""mpslinalg: torch.linalg-shaped linear algebra with Metal kernels for Apple GPUs.

The same functions run everywhere: on MPS tensors through mpslinalg's Metal kernels, on CPU and
CUDA tensors through torch.linalg (or, with ``use_backend("metal")`` on CPU tensors, through the
Metal kernels in the CPU emulator). See ``python -m mpslinalg info``.
"""

from ._backend import get_backend, set_backend, use_backend
from ._errors import LinAlgError, check_errors
from .det import det, logdet, slogdet
from .inverse import inv, inv_ex
from .lu import lu, lu_factor, lu_factor_ex, lu_solve
from .solve import solve, solve_ex

__version__ = "0.1.0"

__all__ = [
    "LinAlgError",
    "check_errors",
    "det",
    "get_backend",
    "inv",
    "inv_ex",
    "logdet",
    "lu",
    "lu_factor",
    "lu_factor_ex",
    "lu_solve",
    "set_backend",
    "slogdet",
    "solve",
    "solve_ex",
    "use_backend",
]
