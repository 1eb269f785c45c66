#include "qr.h"

// One qr_small kernel per (dtype, m, n), m, n = 1 .. kQrSmallMax: host names like
// qr_small_float32_m3_n4.
#define MPSL_QR_SMALL_N(tname, T, M)                   \
  MPSL_KERNEL_P(qr_small, tname, m##M##_n1, T, M, 1) \
  MPSL_KERNEL_P(qr_small, tname, m##M##_n2, T, M, 2) \
  MPSL_KERNEL_P(qr_small, tname, m##M##_n3, T, M, 3) \
  MPSL_KERNEL_P(qr_small, tname, m##M##_n4, T, M, 4)
#define MPSL_QR_SMALL_ALL(tname, T) \
  MPSL_QR_SMALL_N(tname, T, 1)      \
  MPSL_QR_SMALL_N(tname, T, 2)      \
  MPSL_QR_SMALL_N(tname, T, 3)      \
  MPSL_QR_SMALL_N(tname, T, 4)

// clang-format off
MPSL_KERNEL(qr_panel, float32, float)
MPSL_KERNEL(qr_panel, complex64, float2)
MPSL_KERNEL(qr_larft, float32, float)
MPSL_KERNEL(qr_larft, complex64, float2)
MPSL_KERNEL(qr_apply_w, float32, float)
MPSL_KERNEL(qr_apply_w, complex64, float2)
MPSL_KERNEL(qr_apply_update, float32, float)
MPSL_KERNEL(qr_apply_update, complex64, float2)
MPSL_QR_SMALL_ALL(float32, float)
MPSL_QR_SMALL_ALL(complex64, float2)
MPSL_KERNEL(lstsq_gelsy, float32, float)
MPSL_KERNEL(lstsq_gelsy, complex64, float2)
// clang-format on
