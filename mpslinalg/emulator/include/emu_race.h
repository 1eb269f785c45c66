// Race detector of race-check builds (EMU_RACECHECK=1; compile_shader(race_check=True)).
//
// The compiler instruments every memory access of the kernel (-fsanitize=thread, without the
// ThreadSanitizer runtime): loads and stores call the __tsan_* hooks defined here. Accesses to
// threadgroup memory and to the launch's bound buffers are kept in shadow memory, one cell per
// aligned 4-byte word holding the last write and up to two reads since it, each with the bytes it
// touched, the thread, the return address of the hook (a source line, through the library's line
// tables), the memory epoch and the simdgroup's collective count at the time. Two accesses race
// when they touch a common byte from different threads, at least one writes, they are not both
// atomic, and nothing orders them:
//   * threadgroup memory: a threadgroup_barrier whose flags include mem_threadgroup;
//   * device memory: nothing across threadgroups of one launch; within a threadgroup, a
//     threadgroup_barrier whose flags include mem_device;
//   * either, between lanes of one simdgroup: a SIMD-group function or simdgroup_barrier that the
//     simdgroup executed since the earlier access.
// The first race of a launch ends it with an error naming both threads and both source lines.
// A word keeps one write: when threads write different bytes of one word (neighbouring halfs), the
// earlier writer is forgotten, which can hide a later race on its bytes but never invents one.
#pragma once
#include <dlfcn.h>
#include "emu_runtime.h"

// Everything here runs uninstrumented (and GCC inlines only between functions of the same kind),
// or the hooks would call themselves.
// Not instrumented: GCC's no_sanitize_thread leaves every access alone; clang's still
// instruments atomics (the hooks' own atomics would call themselves), so clang takes
// disable_sanitizer_instrumentation (clang >= 14).
#if defined(__clang__)
#define EMU_NO_TSAN disable_sanitizer_instrumentation
#else
#define EMU_NO_TSAN no_sanitize_thread
#endif
#define EMU_RACE_FN __attribute__((EMU_NO_TSAN)) inline

namespace emu {
namespace race {
static const uint32_t kAtomic = 0x80000000u;
static const int kMaskShift = 27;                         // bits 27..30: the bytes of the word
static const uint32_t kPcBits = (1u << kMaskShift) - 1;  // bits 0..26: the code address
// The runtime of the launch in progress on this thread. Not rt(): that is instrumented code, and
// it may construct the runtime, whose stores call the hooks again.
inline thread_local Runtime* active = nullptr;
struct Acc {
  uint32_t pc;   // return address of the hook, relative to the library's base; byte mask; atomic
  uint32_t who;  // linear index of the thread in the grid + 1; 0: no access
  uint32_t ep;   // memory epoch of the access (threadgroup or device, by the memory's kind)
  uint32_t sg;   // collectives its simdgroup had executed
};
struct Cell { Acc w, r1, r2; };

EMU_RACE_FN uint32_t who_of(const Runtime& R, const u3& t) {
  return 1u + t.v[0] + R.grid.v[0] * (t.v[1] + R.grid.v[1] * t.v[2]);
}
EMU_RACE_FN u3 tid_of(const Runtime& R, uint32_t who) {
  uint32_t g = who - 1;
  return u3{{g % R.grid.v[0], (g / R.grid.v[0]) % R.grid.v[1], g / (R.grid.v[0] * R.grid.v[1])}};
}
EMU_RACE_FN uint32_t group_of(const Runtime& R, const u3& t) {
  uint32_t g[3];
  for (int d = 0; d < 3; ++d) g[d] = t.v[d] / R.dtpg.v[d];
  return g[0] + R.ngroups.v[0] * (g[1] + R.ngroups.v[1] * g[2]);
}
// thread_index_in_threadgroup of a thread of the current group
EMU_RACE_FN uint32_t lidx_of(const Runtime& R, const u3& t) {
  uint32_t l[3];
  for (int d = 0; d < 3; ++d) l[d] = t.v[d] % R.dtpg.v[d];
  return l[0] + R.tpg.v[0] * (l[1] + R.tpg.v[1] * l[2]);
}

// Whether the earlier access p is ordered before the current access c of the current group.
EMU_RACE_FN bool ordered(const Runtime& R, const Acc& p, const Acc& c, bool tg) {
  if (p.who == c.who || (p.pc & c.pc & kAtomic) || !(p.pc & c.pc & ~kAtomic & ~kPcBits)) return true;
  u3 t = tid_of(R, p.who);
  // threadgroup epochs start anew with every group, so an older one is another group's memory
  if (!tg && group_of(R, t) != R.race_group) return false;
  if (p.ep < c.ep) return true;
  uint32_t sg = lidx_of(R, t) >> 5;
  return sg == R.cur->sgid && p.sg != R.race_sgsync[sg];
}

[[noreturn]] EMU_RACE_FN void report(Runtime& R, const Acc& p, const Acc& c, bool tg, uintptr_t word) {
  R.race_found = 1;
  uintptr_t addr = word + __builtin_ctz((p.pc & c.pc) >> kMaskShift);  // the first common byte
  u3 a = tid_of(R, p.who), b = tid_of(R, c.who);
  uint32_t ga = group_of(R, a), gb = group_of(R, b);
  auto kind = [](const Acc& x, bool w) { return (x.pc & kAtomic) ? (w ? "atomic write" : "atomic read") : (w ? "write" : "read"); };
  char where[256];
  int buf = 0;
  while (!tg && buf < R.la->nbufs &&
         !(addr >= (uintptr_t)R.la->bufs[buf] && addr < (uintptr_t)R.la->bufs[buf] + R.la->sizes[buf])) ++buf;
  if (tg)
    snprintf(where, sizeof where, "threadgroup memory (byte %zu of the group's threadgroup allocations)",
             (size_t)(addr - (uintptr_t)R.tg));
  else
    snprintf(where, sizeof where, "device memory: buffer '%s' (buffer %d), byte offset %zu", bufname(buf), buf,
             (size_t)(addr - (uintptr_t)R.la->bufs[buf]));
  const char* why = tg ? "with no threadgroup_barrier(mem_flags::mem_threadgroup) between them"
                       : (ga != gb ? "threads of different threadgroups are not ordered within one launch"
                                   : "with no threadgroup_barrier(mem_flags::mem_device) between them");
  // hazard names as in CUDA's racecheck, by the order in which the two accesses ran here
  const char* hazard = R.race_pw ? (R.race_cw ? "write-after-write" : "read-after-write") : "write-after-read";
  fail("kernel '%s': data race (%s hazard) on %s: %s by thread_position_in_grid=(%u,%u,%u) (threadgroup %u, "
       "thread_index_in_threadgroup %u) at @@PC:%x@@ and %s by thread_position_in_grid=(%u,%u,%u) (threadgroup %u, "
       "thread_index_in_threadgroup %u) at @@PC:%x@@, %s; the result depends on the order in which threads run",
       kname(), hazard, where, kind(p, R.race_pw), a.v[0], a.v[1], a.v[2], ga, ga == gb ? lidx_of(R, a) : ~0u,
       p.pc & kPcBits, kind(c, R.race_cw), b.v[0], b.v[1], b.v[2], gb, R.cur->lidx, c.pc & kPcBits, why);
}

__attribute__((EMU_NO_TSAN, noinline)) inline void access(const void* addr, size_t n, bool write,
                                                                bool atomic, void* ret) {
  if (!active) return;
  Runtime& R = *active;
  if (!R.in_launch || !R.cur) return;  // the scheduler's own work is not a thread's access
  uintptr_t a = (uintptr_t)addr, tg0 = (uintptr_t)R.tg, lo, hi;
  Cell* cells;
  bool tg;
  if (a >= tg0 && a < tg0 + sizeof R.tg) {
    if (!R.race_tg) return;
    tg = true; cells = R.race_tg; lo = tg0; hi = tg0 + sizeof R.tg;
  } else {
    int k = 0;
    while (k < R.race_nregions && !(a >= R.race_regions[k].lo && a < R.race_regions[k].hi)) ++k;
    if (k == R.race_nregions) return;
    const RaceRegion& rg = R.race_regions[k];
    tg = false; cells = rg.cells; lo = rg.lo; hi = rg.hi;
  }
  uintptr_t end = a + n < hi ? a + n : hi;
  Dl_info info;
  if (!R.race_base) R.race_base = dladdr((void*)&access, &info) ? (uintptr_t)info.dli_fbase : 1;
  Lane& L = *R.cur;
  Acc c{((uint32_t)((uintptr_t)ret - R.race_base - 1) & kPcBits) | (atomic ? kAtomic : 0u), who_of(R, L.tid),
        tg ? R.race_tg_ep : R.race_dev_ep, R.race_sgsync[L.sgid]};
  const uint32_t pc = c.pc;
  for (uintptr_t w = a & ~(uintptr_t)3; w < end; w += 4) {  // lo is 4-aligned
    uintptr_t b0 = w > a ? w : a, b1 = w + 4 < end ? w + 4 : end;
    c.pc = pc | (((1u << (b1 - b0)) - 1u) << (b0 - w) << kMaskShift);
    Cell& s = cells[(w - lo) >> 2];
    const Acc* bad = nullptr;
    bool bad_w = false;
    if (s.w.who && !ordered(R, s.w, c, tg)) { bad = &s.w; bad_w = true; }
    else if (write && s.r1.who && !ordered(R, s.r1, c, tg)) bad = &s.r1;
    else if (write && s.r2.who && !ordered(R, s.r2, c, tg)) bad = &s.r2;
    if (bad) { R.race_pw = bad_w; R.race_cw = write; report(R, *bad, c, tg, w); }
    if (write) { s.w = c; s.r1.who = 0; s.r2.who = 0; }
    else if (!s.r1.who || s.r1.who == c.who || ordered(R, s.r1, c, tg)) s.r1 = c;
    else s.r2 = c;
  }
}

// Shadow cells for the launch's buffers: overlapping bindings (views of one tensor) share cells.
EMU_RACE_FN void launch_begin(Runtime& R, const Launch* la) {
  active = &R;
  R.race_found = 0; R.race_nregions = 0;
  if (!R.race_tg) {
    void* m = mmap(nullptr, sizeof(Cell) * (sizeof R.tg / 4), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    R.race_tg = m == MAP_FAILED ? nullptr : (Cell*)m;
  }
  // the bound buffers as word-aligned intervals, sorted and merged
  RaceRegion iv[32];
  int n = 0;
  for (int b = 0; b < la->nbufs && b < 32; ++b) {
    if (!la->sizes[b]) continue;
    uintptr_t lo = (uintptr_t)la->bufs[b] & ~(uintptr_t)3;
    uintptr_t hi = ((uintptr_t)la->bufs[b] + la->sizes[b] + 3) & ~(uintptr_t)3;
    int k = n++;
    while (k > 0 && iv[k - 1].lo > lo) { iv[k] = iv[k - 1]; --k; }
    iv[k] = RaceRegion{lo, hi, nullptr, 0};
  }
  for (int k = 0; k < n; ++k) {
    RaceRegion* last = R.race_nregions ? &R.race_regions[R.race_nregions - 1] : nullptr;
    if (last && iv[k].lo <= last->hi) { if (iv[k].hi > last->hi) last->hi = iv[k].hi; }
    else R.race_regions[R.race_nregions++] = iv[k];
  }
  for (int k = 0; k < R.race_nregions; ++k) {
    RaceRegion& rg = R.race_regions[k];
    rg.bytes = sizeof(Cell) * ((rg.hi - rg.lo) / 4);
    void* m = mmap(nullptr, rg.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    rg.cells = m == MAP_FAILED ? nullptr : (Cell*)m;
    if (!rg.cells) rg.hi = rg.lo;  // no shadow: not checked
  }
}
EMU_RACE_FN void launch_end(Runtime& R) {
  active = nullptr;
  for (int k = 0; k < R.race_nregions; ++k)
    if (R.race_regions[k].cells) munmap(R.race_regions[k].cells, R.race_regions[k].bytes);
  R.race_nregions = 0;
}
// A new group: its threadgroup memory is fresh and its device accesses unordered with the others'.
EMU_RACE_FN void group_start(Runtime& R, uint32_t group) { ++R.race_tg_ep; ++R.race_dev_ep; R.race_group = group; }
EMU_RACE_FN void barrier(Runtime& R, int flags) {
  if (flags & 2) ++R.race_tg_ep;   // mem_threadgroup
  if (flags & 1) ++R.race_dev_ep;  // mem_device
}
EMU_RACE_FN void simd_sync(Runtime& R, int sg) { ++R.race_sgsync[sg]; }
}  // namespace race
}  // namespace emu

// The hooks -fsanitize=thread calls. Weak: every translation unit of a library defines them.
#define EMU_TSAN_HOOK extern "C" __attribute__((weak, EMU_NO_TSAN, visibility("hidden")))
#define EMU_TSAN_RW(n)                                                                                     \
  EMU_TSAN_HOOK void __tsan_read##n(void* a) { emu::race::access(a, n, false, false, __builtin_return_address(0)); } \
  EMU_TSAN_HOOK void __tsan_write##n(void* a) { emu::race::access(a, n, true, false, __builtin_return_address(0)); } \
  EMU_TSAN_HOOK void __tsan_unaligned_read##n(void* a) { emu::race::access(a, n, false, false, __builtin_return_address(0)); } \
  EMU_TSAN_HOOK void __tsan_unaligned_write##n(void* a) { emu::race::access(a, n, true, false, __builtin_return_address(0)); } \
  EMU_TSAN_HOOK void __tsan_volatile_read##n(void* a) { emu::race::access(a, n, false, false, __builtin_return_address(0)); } \
  EMU_TSAN_HOOK void __tsan_volatile_write##n(void* a) { emu::race::access(a, n, true, false, __builtin_return_address(0)); }
EMU_TSAN_RW(1) EMU_TSAN_RW(2) EMU_TSAN_RW(4) EMU_TSAN_RW(8) EMU_TSAN_RW(16)
#undef EMU_TSAN_RW
EMU_TSAN_HOOK void __tsan_read_range(void* a, unsigned long n) { emu::race::access(a, n, false, false, __builtin_return_address(0)); }
EMU_TSAN_HOOK void __tsan_write_range(void* a, unsigned long n) { emu::race::access(a, n, true, false, __builtin_return_address(0)); }
// clang's instrumentation routes memset / memcpy / memmove through these (GCC's calls the C
// library's, which are not instrumented).
EMU_TSAN_HOOK void* __tsan_memset(void* d, int c, unsigned long n) {
  emu::race::access(d, n, true, false, __builtin_return_address(0));
  return __builtin_memset(d, c, n);
}
EMU_TSAN_HOOK void* __tsan_memcpy(void* d, const void* s, unsigned long n) {
  emu::race::access(s, n, false, false, __builtin_return_address(0));
  emu::race::access(d, n, true, false, __builtin_return_address(0));
  return __builtin_memcpy(d, s, n);
}
EMU_TSAN_HOOK void* __tsan_memmove(void* d, const void* s, unsigned long n) {
  emu::race::access(s, n, false, false, __builtin_return_address(0));
  emu::race::access(d, n, true, false, __builtin_return_address(0));
  return __builtin_memmove(d, s, n);
}
EMU_TSAN_HOOK void __tsan_init() {}
EMU_TSAN_HOOK void __tsan_func_entry(void*) {}
EMU_TSAN_HOOK void __tsan_func_exit() {}
EMU_TSAN_HOOK void __tsan_vptr_read(void**) {}
EMU_TSAN_HOOK void __tsan_vptr_update(void**, void*) {}
EMU_TSAN_HOOK void __tsan_atomic_thread_fence(int) {}
EMU_TSAN_HOOK void __tsan_atomic_signal_fence(int) {}
// Atomics: the operation itself (sequentially consistent, which is at least what was asked for),
// recorded as an atomic access.
#define EMU_TSAN_ATOMIC(bits, T)                                                                         \
  EMU_TSAN_HOOK T __tsan_atomic##bits##_load(const volatile T* a, int) {                                \
    emu::race::access((const void*)a, sizeof(T), false, true, __builtin_return_address(0));              \
    return __atomic_load_n(a, __ATOMIC_SEQ_CST); }                                                       \
  EMU_TSAN_HOOK void __tsan_atomic##bits##_store(volatile T* a, T v, int) {                             \
    emu::race::access((const void*)a, sizeof(T), true, true, __builtin_return_address(0));               \
    __atomic_store_n(a, v, __ATOMIC_SEQ_CST); }                                                          \
  EMU_TSAN_ATOMIC_RMW(bits, T, exchange, exchange_n) EMU_TSAN_ATOMIC_RMW(bits, T, fetch_add, fetch_add)  \
  EMU_TSAN_ATOMIC_RMW(bits, T, fetch_sub, fetch_sub) EMU_TSAN_ATOMIC_RMW(bits, T, fetch_and, fetch_and)  \
  EMU_TSAN_ATOMIC_RMW(bits, T, fetch_or, fetch_or) EMU_TSAN_ATOMIC_RMW(bits, T, fetch_xor, fetch_xor)    \
  EMU_TSAN_ATOMIC_RMW(bits, T, fetch_nand, fetch_nand)                                                  \
  EMU_TSAN_HOOK int __tsan_atomic##bits##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) {  \
    emu::race::access((const void*)a, sizeof(T), true, true, __builtin_return_address(0));               \
    return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); }            \
  EMU_TSAN_HOOK int __tsan_atomic##bits##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) {    \
    emu::race::access((const void*)a, sizeof(T), true, true, __builtin_return_address(0));               \
    return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); }            \
  EMU_TSAN_HOOK T __tsan_atomic##bits##_compare_exchange_val(volatile T* a, T c, T v, int, int) {        \
    emu::race::access((const void*)a, sizeof(T), true, true, __builtin_return_address(0));               \
    __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); return c; }
#define EMU_TSAN_ATOMIC_RMW(bits, T, op, builtin)                                                        \
  EMU_TSAN_HOOK T __tsan_atomic##bits##_##op(volatile T* a, T v, int) {                                 \
    emu::race::access((const void*)a, sizeof(T), true, true, __builtin_return_address(0));               \
    return __atomic_##builtin(a, v, __ATOMIC_SEQ_CST); }
EMU_TSAN_ATOMIC(8, uint8_t) EMU_TSAN_ATOMIC(16, uint16_t) EMU_TSAN_ATOMIC(32, uint32_t) EMU_TSAN_ATOMIC(64, uint64_t)
#undef EMU_TSAN_ATOMIC
#undef EMU_TSAN_ATOMIC_RMW
#undef EMU_TSAN_HOOK
