// log_normal_: fill a tensor with exp(mean + std * z), z standard normal, in place.
//
// Element e of the tensor (its row-major position, whatever its strides) takes normal number
// e of the stream of the seed: Philox4x32-10 of counter (e / 4, 0) gives four uniforms, and
// two Box-Muller transforms (G. E. P. Box, M. E. Muller, Ann. Math. Statist. 29(2), 1958) turn
// them into the normals of elements 4k .. 4k + 3. The numbers therefore depend on the seed and
// the element's position only: not on the grid, the group size or the memory layout.
#pragma once

#include "../common/elementwise.h"
#include "../common/philox.h"

namespace mpsl {

// Elements drawn from one Philox call.
constant constexpr long kNormalsPerBlock = 4;

// Scalars of log_normal.
struct LogNormalParams {
  long ndim;      // entries of sizes / strides
  long numel;     // elements of the tensor
  long seed;      // the 64-bit Philox key
  float mean;     // of the normal's logarithm
  float std_dev;  // likewise
};

}  // namespace mpsl

// x: the tensor's storage at its offset; sizes / strides: its shape and strides (ndim entries);
// one loop iteration per block of four consecutive elements.
template <typename T>
[[kernel]] void log_normal(
    device T* x [[buffer(0)]],
    constant long* sizes [[buffer(1)]],
    constant long* strides [[buffer(2)]],
    constant mpsl::LogNormalParams& p [[buffer(3)]],
    uint gid [[thread_position_in_grid]],
    uint grid_size [[threads_per_grid]]) {
  const long ndim = p.ndim, numel = p.numel, seed = p.seed;
  const float mean = p.mean, std_dev = p.std_dev;
  const ulong key64 = ulong(seed);
  const uint2 key = uint2(uint(key64), uint(key64 >> 32));
  const long blocks = (numel + mpsl::kNormalsPerBlock - 1) / mpsl::kNormalsPerBlock;
  for (long block = long(gid); block < blocks; block += long(grid_size)) {
    const ulong b = ulong(block);
    const uint4 bits = mpsl::philox4x32(uint4(uint(b), uint(b >> 32), 0u, 0u), key);
    float normals[mpsl::kNormalsPerBlock];
    for (int pair = 0; pair < 2; ++pair) {
      const float u1 = mpsl::uniform_open(bits[2 * pair]);
      const float u2 = mpsl::uniform_open(bits[2 * pair + 1]);
      const float radius = metal::sqrt(-2.0f * metal::log(u1));
      const float angle = 2.0f * M_PI_F * u2;
      normals[2 * pair] = radius * metal::cos(angle);
      normals[2 * pair + 1] = radius * metal::sin(angle);
    }
    for (long k = 0; k < mpsl::kNormalsPerBlock; ++k) {
      const long e = block * mpsl::kNormalsPerBlock + k;
      if (e < numel) {
        x[mpsl::strided_offset(e, sizes, strides, ndim)] = T(metal::exp(mean + std_dev * normals[k]));
      }
    }
  }
}
