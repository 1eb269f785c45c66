"""The threadgroup reductions of metal/common/simd.h (group_sum, group_sum_each, group_max,
group_argmax), run
by the emulator on groups of one, partial and many simdgroups, in both lane orders: every
thread gets the result, and a buffer is reused at once by the next reduction (or, without the
releasing barrier, only after a barrier of the caller's)."""

from __future__ import annotations

import pytest
import torch

from mpslinalg import emulator
from mpslinalg._core import metal as _metal

_PROBE = """
[[kernel]] void reduce_probe(device const float* x [[buffer(0)]],
                             device float* sums [[buffer(1)]],
                             device float2* complex_sums [[buffer(2)]],
                             device float* maxima [[buffer(3)]],
                             device float* keys [[buffer(4)]],
                             device int* indices [[buffer(5)]],
                             device float2* each_sums [[buffer(6)]],
                             device float* unreleased [[buffer(7)]],
                             uint tid [[thread_index_in_threadgroup]],
                             uint lane [[thread_index_in_simdgroup]],
                             uint sg [[simdgroup_index_in_threadgroup]],
                             uint nsg [[simdgroups_per_threadgroup]]) {
  using namespace mpsl;
  threadgroup float part[kMaxThreadsPerGroup / kSimdWidth];
  threadgroup float2 complex_part[kMaxThreadsPerGroup / kSimdWidth];
  threadgroup KeyIndex key_part[kMaxThreadsPerGroup / kSimdWidth];
  threadgroup float2 each_part[3 * kMaxThreadsPerGroup / kSimdWidth];
  threadgroup float halves[2 * kMaxThreadsPerGroup / kSimdWidth];
  const float v = x[tid];
  // the same buffer twice in a row: the second must not see the first's partials
  const float first = group_sum(v, part, lane, sg, nsg);
  sums[tid] = first + group_sum(2.0f * v, part, lane, sg, nsg);
  complex_sums[tid] = group_sum(float2(v, -3.0f * v), complex_part, lane, sg, nsg);
  maxima[tid] = group_max(metal::fabs(v), part, lane, sg, nsg);
  // keys with ties (v rounded to its tens); every third thread has no candidate
  const KeyIndex none = KeyIndex{-2.0f, 0x7fffffff};
  const KeyIndex mine = tid % 3 == 2 ? none : KeyIndex{metal::floor(v / 10.0f), int(tid)};
  const KeyIndex best = group_argmax(mine, none, key_part, lane, sg, nsg);
  keys[tid] = best.key;
  indices[tid] = best.index;
  float2 each[3] = {float2(v, 0.0f), float2(2.0f * v, v), float2(-v, 5.0f)};
  group_sum_each<float2, 3>(each, each_part, lane, sg, nsg);
  for (int c = 0; c < 3; ++c) {
    each_sums[3 * tid + c] = each[c];
  }
  // release = false (qr_tsqr_factor's norm): a max and a sum through halves of their own, twice,
  // the caller's barrier between the rounds
  float rounds = 0.0f;
  for (int round = 0; round < 2; ++round) {
    rounds += group_max(metal::fabs(v) + float(round), halves, lane, sg, nsg,
                        metal::mem_flags::mem_threadgroup, false);
    rounds += group_sum(float(round + 1) * v, halves + kMaxThreadsPerGroup / kSimdWidth, lane, sg,
                        nsg, metal::mem_flags::mem_threadgroup, false);
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  }
  unreleased[tid] = rounds;
}
"""


@pytest.fixture(scope="module")
def library():
    return emulator.compile_shader(_metal.load_source("common/simd.h") + _PROBE)


@pytest.mark.parametrize("order", [None, "reverse"])
@pytest.mark.parametrize("threads", [1, 31, 32, 33, 100, 1024])
def test_every_thread_gets_the_groups_reduction(library, threads, order):
    gen = torch.Generator().manual_seed(threads)
    x = torch.randint(-50, 51, (threads,), generator=gen).float()  # integers: exact sums
    out = [torch.empty(threads), torch.empty(threads, 2), torch.empty(threads),
           torch.empty(threads), torch.empty(threads, dtype=torch.int32),
           torch.empty(threads, 3, 2), torch.empty(threads)]
    extra = {} if order is None else {"order": order}
    library.reduce_probe(x, *out, threads=threads, group_size=threads, **extra)
    sums, complex_sums, maxima, keys, indices, each_sums, unreleased = out
    total = x.sum().item()
    assert (sums == 3 * total).all()
    assert (complex_sums == torch.tensor([total, -3 * total])).all()
    assert (each_sums == torch.tensor([[total, 0], [2 * total, total], [-total, 5 * threads]])
            ).all()
    assert (maxima == x.abs().max()).all()
    assert (unreleased == 2 * x.abs().max() + 1 + 3 * total).all()
    candidates = torch.arange(threads) % 3 != 2
    tens = torch.floor(x / 10)
    best = tens[candidates].max()
    lowest = int(torch.nonzero(candidates & (tens == best))[0])
    assert (keys == best).all() and (indices == lowest).all()


_SCATTER_PROBE = """
template <int N>
inline void scatter_case(device const float* x, device float* out, device float2* cout,
                         uint tid, uint lane) {
  using namespace mpsl;
  float v[N];
  float2 c[N];
  for (int i = 0; i < N; ++i) {
    v[i] = x[tid * 32 + i];
    c[i] = float2(x[tid * 32 + i], -2.0f * x[tid * 32 + (i + 1) % 32]);
  }
  out[tid] = simd_sum_scatter<float, N>(v, lane);
  cout[tid] = simd_sum_scatter<float2, N>(c, lane);
}

[[kernel]] void scatter_probe(device const float* x [[buffer(0)]],
                              device float* out1 [[buffer(1)]], device float2* cout1 [[buffer(2)]],
                              device float* out4 [[buffer(3)]], device float2* cout4 [[buffer(4)]],
                              device float* out16 [[buffer(5)]],
                              device float2* cout16 [[buffer(6)]],
                              device float* out32 [[buffer(7)]],
                              device float2* cout32 [[buffer(8)]],
                              uint tid [[thread_index_in_threadgroup]],
                              uint lane [[thread_index_in_simdgroup]]) {
  scatter_case<1>(x, out1, cout1, tid, lane);
  scatter_case<4>(x, out4, cout4, tid, lane);
  scatter_case<16>(x, out16, cout16, tid, lane);
  scatter_case<32>(x, out32, cout32, tid, lane);
}
"""


@pytest.mark.parametrize("order", [None, "reverse", "random"])
def test_simd_sum_scatter(order):
    """simd_sum_scatter<T, N> leaves at lane l of each simdgroup the simdgroup's sum of value
    l % N (real and complex; N = 1, 4, 16, 32), whatever order the lanes run in."""
    lib = emulator.compile_shader(_metal.load_source("common/simd.h") + _SCATTER_PROBE)
    threads = 64
    gen = torch.Generator().manual_seed(4)
    x = torch.randint(-50, 51, (threads, 32), generator=gen).float()  # integers: exact sums
    outs = []
    for _ in (1, 4, 16, 32):
        outs += [torch.empty(threads), torch.empty(threads, 2)]
    extra = {} if order is None else {"order": order}
    lib.scatter_probe(x, *outs, threads=threads, group_size=threads, **extra)
    lane = torch.arange(threads) % 32
    sg = torch.arange(threads) // 32
    for k, n in enumerate((1, 4, 16, 32)):
        real, cplx = outs[2 * k], outs[2 * k + 1]
        per_sg = x.view(2, 32, 32).sum(1)  # (simdgroup, value)
        shifted = torch.roll(x, -1, dims=1).view(2, 32, 32).sum(1)
        want = per_sg[sg, lane % n]
        assert torch.equal(real, want), (n, real, want)
        assert torch.equal(cplx, torch.stack([want, -2 * shifted[sg, lane % n]], 1)), n
