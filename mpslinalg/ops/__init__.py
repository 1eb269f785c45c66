"""mpslinalg.ops: the companion inference kernels Mac users lack (fp8 ``scaled_mm``, gemv for
decode, grouped matmul for mixture-of-experts, constant pad, conv1d, stream helpers).

Each op is one module here, one ``metal/ops/<op>.{h,metal}`` pair and one test file, declared
through the same op machinery as the linalg families.
"""

from . import streams
from .convolution import conv1d
from .fp8 import ScalingType, float8_storage, from_float8, scaled_mm, to_float8
from .gemv import linear
from .grouped_gemm import grouped_mm
from .padding import pad

__all__ = ["ScalingType", "conv1d", "float8_storage", "from_float8", "grouped_mm", "linear",
           "pad", "scaled_mm", "streams", "to_float8"]
