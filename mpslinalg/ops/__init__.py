"""mpslinalg.ops: the companion inference kernels Mac users lack (fp8 ``scaled_mm``, gemv for
decode, grouped matmul for mixture-of-experts, constant pad, conv1d, stream helpers, unsigned
comparisons, special polynomials, ...).

Each op family is one module here, one ``metal/ops/<family>.{h,metal}`` pair and one test file,
declared through the same op machinery as the linalg families.
"""

from . import streams
from .attention import scaled_dot_product_attention
from .convolution import conv1d
from .fp8 import ScalingType, SwizzleType, float8_storage, from_float8, scaled_mm, to_float8
from .gemv import linear
from .grouped_gemm import grouped_mm
from .padding import pad
from .random import log_normal, log_normal_
from .search import bucketize, searchsorted
from .special import (
    chebyshev_polynomial_t,
    chebyshev_polynomial_u,
    chebyshev_polynomial_v,
    chebyshev_polynomial_w,
    hermite_polynomial_h,
    hermite_polynomial_he,
    laguerre_polynomial_l,
    legendre_polynomial_p,
    shifted_chebyshev_polynomial_t,
    shifted_chebyshev_polynomial_u,
    shifted_chebyshev_polynomial_v,
    shifted_chebyshev_polynomial_w,
)
from .unsigned import eq, ge, gt, le, lt, maximum, minimum, ne

__all__ = [
    "bucketize",
    "chebyshev_polynomial_t",
    "chebyshev_polynomial_u",
    "chebyshev_polynomial_v",
    "chebyshev_polynomial_w",
    "conv1d",
    "eq",
    "float8_storage",
    "from_float8",
    "ge",
    "grouped_mm",
    "gt",
    "hermite_polynomial_h",
    "hermite_polynomial_he",
    "laguerre_polynomial_l",
    "le",
    "legendre_polynomial_p",
    "linear",
    "log_normal",
    "log_normal_",
    "lt",
    "maximum",
    "minimum",
    "ne",
    "pad",
    "scaled_dot_product_attention",
    "scaled_mm",
    "ScalingType",
    "SwizzleType",
    "searchsorted",
    "shifted_chebyshev_polynomial_t",
    "shifted_chebyshev_polynomial_u",
    "shifted_chebyshev_polynomial_v",
    "shifted_chebyshev_polynomial_w",
    "streams",
    "to_float8",
]
