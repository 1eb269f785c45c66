// Everything a translated Metal source sees; included first by every generated translation unit.
#pragma once
#include "emu_types.h"
#include "emu_math.h"
#include "emu_runtime.h"
#include "emu_sched.h"
#include "emu_simd.h"
#include "emu_matrix.h"

namespace metal {
using ::half;
}
#define METAL_FUNC inline __attribute__((always_inline))
#define EMU_KINFO_TG(...) sizeof(__VA_ARGS__)
