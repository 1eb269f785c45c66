#include "qr.h"
// qr_small_<dtype>_m<m>_n<n>, m, n = 1 .. kQrSmallMax (generated from the n <= 4 description).
#include "qr_small.h"

// clang-format off
MPSL_KERNEL(qr_panel, float32, float)
MPSL_KERNEL(qr_panel, complex64, float2)
MPSL_KERNEL(qr_larft, float32, float)
MPSL_KERNEL(qr_larft, complex64, float2)
MPSL_KERNEL(qr_explicit_v, float32, float)
MPSL_KERNEL(qr_explicit_v, complex64, float2)
MPSL_KERNEL(qr_apply_sum, float32, float)
MPSL_KERNEL(qr_apply_sum, complex64, float2)
MPSL_KERNEL(qr_tsqr_factor, float32, float)
MPSL_KERNEL(qr_tsqr_factor, complex64, float2)
MPSL_KERNEL(qr_tsqr_q, float32, float)
MPSL_KERNEL(qr_tsqr_q, complex64, float2)
MPSL_KERNEL(qr_tsqr_signs, float32, float)
MPSL_KERNEL(qr_tsqr_signs, complex64, float2)
MPSL_KERNEL(qr_tsqr_scale, float32, float)
MPSL_KERNEL(qr_tsqr_scale, complex64, float2)
MPSL_KERNEL(qr_apply_w, float32, float)
MPSL_KERNEL(qr_apply_w, complex64, float2)
MPSL_KERNEL(qr_apply_update, float32, float)
MPSL_KERNEL(qr_apply_update, complex64, float2)
MPSL_KERNEL(lstsq_gelsy, float32, float)
MPSL_KERNEL(lstsq_gelsy, complex64, float2)
// clang-format on
