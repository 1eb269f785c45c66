"""mpslinalg: torch.linalg-shaped linear algebra with Metal kernels for Apple GPUs.

The same functions run everywhere: on MPS tensors through mpslinalg's Metal kernels, on CPU and
CUDA tensors through torch.linalg (or, with ``use_backend("metal")`` on CPU tensors, through the
Metal kernels in the CPU emulator). See ``python -m mpslinalg info``.

Layout: `mpslinalg.linalg` (the op families), `mpslinalg.small` (the n <= 4 path),
`mpslinalg.ops` (the companion inference kernels), `mpslinalg.testing` (test helpers),
`mpslinalg.emulator` (Metal on the CPU); ``mpslinalg._core`` holds the shared machinery.
"""

import importlib as _importlib

from . import ops as ops  # the companion module, mpslinalg.ops (documented on its own)
from ._core.backend import get_backend, set_backend, use_backend
from ._core.errors import LinAlgError, check_errors
from .linalg import FAMILIES as _FAMILIES

__all__ = ["LinAlgError", "check_errors", "get_backend", "set_backend", "use_backend"]

# Each family's public functions (mpslinalg.linalg.FAMILIES is the one registration line).
for _family in _FAMILIES:
    _module = _importlib.import_module(f".linalg.{_family}", __name__)
    globals().update({_name: getattr(_module, _name) for _name in _module.__all__})
    __all__ += _module.__all__
__all__.sort()
del _family, _module

__version__ = "0.1.0"
