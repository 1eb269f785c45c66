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
