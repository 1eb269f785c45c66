#include "pad.h"

// One kernel per element width; the host reinterprets every dtype as the type of its width
// (bool/int8/uint8/float8 as uint8; float16/bfloat16 as int16; float32 as int32; float64 and
// complex64 as int64; complex128 as two 8-byte words).
// clang-format off
MPSL_KERNEL(pad, uint8, uchar)
MPSL_KERNEL(pad, int16, short)
MPSL_KERNEL(pad, int32, int)
MPSL_KERNEL(pad, int64, long)
MPSL_KERNEL(pad, complex128, mpsl::PadBits128)
// clang-format on
