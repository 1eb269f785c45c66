"""mpslinalg.ops: the companion inference kernels Mac users lack (fp8 ``scaled_mm``, gemv for
decode, grouped matmul for mixture-of-experts, constant pad, conv1d, stream helpers).

Each op is one module here, one ``metal/ops/<op>.{h,metal}`` pair and one test file, declared
through the same op machinery as the linalg families.
"""

from . import streams
from .conv1d import conv1d
from .pad import pad

__all__: list[str] = ["conv1d", "pad", "streams"]
