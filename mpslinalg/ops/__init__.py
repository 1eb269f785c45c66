"""mpslinalg.ops: the companion inference kernels Mac users lack (fp8 ``scaled_mm``, gemv for
decode, grouped matmul for mixture-of-experts, constant pad, conv1d, stream helpers, unsigned
comparisons, ...).

Each op family is one module here, one ``metal/ops/<family>.{h,metal}`` pair and one test file,
declared through the same op machinery as the linalg families.
"""

from .unsigned import eq, ge, gt, le, lt, maximum, minimum, ne

__all__ = ["eq", "ge", "gt", "le", "lt", "maximum", "minimum", "ne"]
