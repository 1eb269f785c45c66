// Instantiation macros and hardware limits shared by every mpslinalg kernel.
//
// Kernel host names follow one rule, mirrored by mpslinalg._core.metal.kernel_name:
//   <op>_<dtype>[_<param><value>...]
// e.g. lu_panel_complex64_bs32. The template function is named <op>, so the macro never repeats
// a kernel signature (decltype of the instantiation).
#pragma once

#include <metal_stdlib>

// One instantiation line per dtype: MPSL_KERNEL(op, float32, float) -> host name "op_float32".
#define MPSL_KERNEL(op, tname, ...) \
  template [[host_name(#op "_" #tname)]] [[kernel]] decltype(op<__VA_ARGS__>) op<__VA_ARGS__>;

// With compile-time parameters spelled in the name:
// MPSL_KERNEL_P(op, complex64, bs32, float2, 32) -> host name "op_complex64_bs32".
#define MPSL_KERNEL_P(op, tname, params, ...) \
  template [[host_name(#op "_" #tname "_" #params)]] [[kernel]] \
  decltype(op<__VA_ARGS__>) op<__VA_ARGS__>;

namespace mpsl {

// Apple GPU limits (Metal feature set tables); the emulator enforces the same numbers.
constant constexpr int kSimdWidth = 32;
constant constexpr int kMaxThreadsPerGroup = 1024;
constant constexpr int kMaxThreadgroupMemoryBytes = 32768;

}  // namespace mpsl
