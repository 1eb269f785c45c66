#include "convolution.h"

// clang-format off
MPSL_KERNEL(conv1d_depthwise, float32, float)
MPSL_KERNEL(conv1d_depthwise, float16, half)
MPSL_KERNEL(conv1d_depthwise, bfloat16, bfloat)
MPSL_KERNEL(conv1d_gemm, float32, float)
MPSL_KERNEL(conv1d_gemm, float16, half)
MPSL_KERNEL(conv1d_gemm, bfloat16, bfloat)
MPSL_KERNEL(conv1d_input_grad, float32, float)
MPSL_KERNEL(conv1d_input_grad, float16, half)
MPSL_KERNEL(conv1d_input_grad, bfloat16, bfloat)
MPSL_KERNEL(conv1d_weight_grad, float32, float)
MPSL_KERNEL(conv1d_weight_grad, float16, half)
MPSL_KERNEL(conv1d_weight_grad, bfloat16, bfloat)
// clang-format on
