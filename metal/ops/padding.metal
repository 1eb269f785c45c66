#include "padding.h"

// One kernel per element width; the host reinterprets every dtype as the type of its width
// (bool/int8/uint8/float8 as uint8; float16/bfloat16 as int16; float32 as int32; float64 and
// complex64 as int64; complex128 as two 8-byte words).
// clang-format off
MPSL_KERNEL_P(pad, uint8, wide0, uchar, int)
MPSL_KERNEL_P(pad, uint8, wide1, uchar, long)
MPSL_KERNEL_P(pad, int16, wide0, short, int)
MPSL_KERNEL_P(pad, int16, wide1, short, long)
MPSL_KERNEL_P(pad, int32, wide0, int, int)
MPSL_KERNEL_P(pad, int32, wide1, int, long)
MPSL_KERNEL_P(pad, int64, wide0, long, int)
MPSL_KERNEL_P(pad, int64, wide1, long, long)
MPSL_KERNEL_P(pad, complex128, wide0, mpsl::PadBits128, int)
MPSL_KERNEL_P(pad, complex128, wide1, mpsl::PadBits128, long)
// clang-format on
