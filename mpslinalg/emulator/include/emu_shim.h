// Everything a translated Metal source sees; included first by every generated translation unit.
#pragma once
#include "emu_types.h"
#include "emu_math.h"
#include "emu_runtime.h"
#include "emu_sched.h"
#include "emu_simd.h"
#include "emu_matrix.h"

#define METAL_FUNC inline __attribute__((always_inline))
