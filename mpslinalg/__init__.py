"""mpslinalg: torch.linalg-shaped linear algebra with Metal kernels for Apple GPUs.

The same functions run everywhere: on MPS tensors through mpslinalg's Metal kernels, on CPU and
CUDA tensors through torch.linalg (or, with ``use_backend("metal")`` on CPU tensors, through the
Metal kernels in the CPU emulator). See ``python -m mpslinalg info``.
"""

from ._backend import get_backend, set_backend, use_backend
from ._errors import LinAlgError, check_errors

__version__ = "0.1.0"

__all__ = [
    "LinAlgError",
    "check_errors",
    "get_backend",
    "set_backend",
    "use_backend",
]
