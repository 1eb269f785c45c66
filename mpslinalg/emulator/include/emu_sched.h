// Threadgroup scheduling, barrier resolution and the launch entry point.
#pragma once
#include <ctime>
#include <pthread.h>
#include <unistd.h>
#include <sys/syscall.h>
#include "emu_runtime.h"
#if EMU_RACECHECK
#include "emu_race.h"
#define EMU_RACE(call) ::emu::race::call
#else
#define EMU_RACE(call) ((void)0)  // release and debug builds pay nothing for the race detector
#endif

namespace emu {
inline void fiber_main(void* arg) {
  Lane* l = (Lane*)arg;
  Runtime& R = rt();
  R.desc->fn(*l);
  l->state = L_DONE;
  fiber_switch(&l->sp, R.sched_sp);
  __builtin_trap();
}

inline uint64_t rng_next(uint64_t& s) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; return s; }
inline void make_perm(int* p, int n, int order, uint64_t& seed) {
  for (int i = 0; i < n; ++i) p[i] = order == 1 ? n - 1 - i : i;
  if (order == 2) for (int i = n - 1; i > 0; --i) { int j = (int)(rng_next(seed) % (uint64_t)(i + 1)); int t = p[i]; p[i] = p[j]; p[j] = t; }
}

inline void set_lane(Runtime& R, Lane& l, uint32_t idx) {
  uint32_t tx = R.tpg.v[0], ty = R.tpg.v[1];
  l.lidx = idx; l.slane = idx & 31; l.sgid = idx >> 5; l.depth = 0; l.rt = &R;
  l.lid = u3{{idx % tx, (idx / tx) % ty, idx / (tx * ty)}};
  for (int d = 0; d < 3; ++d) l.tid.v[d] = R.tgid.v[d] * R.dtpg.v[d] + l.lid.v[d];
}

inline const char* tgstr(Runtime& R) {
  static thread_local char b[64];
  snprintf(b, sizeof b, "(%u,%u,%u)", R.tgid.v[0], R.tgid.v[1], R.tgid.v[2]);
  return b;
}

// Program-order position of a waiting lane: its call path, then the collective's own site.
inline int cmp_site(const Site& a, const Site& b) {
  if (a.line != b.line) return a.line < b.line ? -1 : 1;
  if (a.file == b.file) return 0;
  int c = __builtin_strcmp(a.file, b.file);
  return c < 0 ? -1 : (c > 0 ? 1 : 0);
}
inline int cmp_position(const Lane* a, const Lane* b) {
  int da = a->depth < 16 ? a->depth : 16, db = b->depth < 16 ? b->depth : 16;
  for (int k = 0;; ++k) {
    const Site& sa = k < da ? a->frames[k] : a->site;
    const Site& sb = k < db ? b->frames[k] : b->site;
    int c = cmp_site(sa, sb);
    if (c) return c;
    if (k >= da || k >= db) {
      if (da != db) return 0;  // a collective and a call on the same line: keep order by line only
      return (size_t)a->op < (size_t)b->op ? -1 : ((size_t)a->op > (size_t)b->op ? 1 : 0);
    }
  }
}
inline bool same_position(const Lane* a, const Lane* b) {
  if (a->depth != b->depth || a->op != b->op || !same_site(a->site, b->site)) return false;
  for (int k = 0; k < a->depth && k < 16; ++k) if (!same_site(a->frames[k], b->frames[k])) return false;
  return true;
}

// All lanes are blocked or done. Fire one SIMD-group collective per simdgroup (the lanes waiting at the
// earliest call site form the SIMT active set), or else release a threadgroup barrier.
inline void resolve(Runtime& R) {
  int n = (int)R.nlanes;
  bool fired = false;
  for (int g = 0; g * 32 < n; ++g) {
    Lane* best = nullptr;
    int hi = n < (g + 1) * 32 ? n : (g + 1) * 32;
    for (int i = g * 32; i < hi; ++i) {
      Lane* l = &R.lanes[i];
      if (l->state != L_SIMD) continue;
      if (!best || cmp_position(l, best) < 0) best = l;
    }
    if (!best) continue;
    Lane* parts[32]; int np = 0;
    for (int i = g * 32; i < hi; ++i) {
      Lane* l = &R.lanes[i];
      if (l->state == L_SIMD && same_position(l, best)) parts[np++] = l;
    }
    best->op(parts, np);
    EMU_RACE(simd_sync(R, g));
    for (int i = 0; i < np; ++i) parts[i]->state = L_READY;
    fired = true;
  }
  if (fired) return;
  Lane* first = nullptr; int done = 0, doneex = -1;
  for (int i = 0; i < n; ++i) {
    Lane* l = &R.lanes[i];
    if (l->state == L_DONE) { ++done; if (doneex < 0) doneex = i; continue; }
    if (l->state != L_BAR) fail("kernel '%s': internal scheduler error (lane %d in state %d)", kname(), i, l->state);
    if (!first) { first = l; continue; }
    if (!same_site(l->site, first->site))
      fail("kernel '%s': lanes of threadgroup %s wait at different threadgroup_barrier calls: %s:%u (e.g. "
           "thread_index_in_threadgroup %u) and %s:%u (e.g. %u); undefined behaviour on Metal",
           kname(), tgstr(R), first->site.file, first->site.line, first->lidx, l->site.file, l->site.line, l->lidx);
    if (!same_position(l, first)) {
      // the same barrier in a helper, reached through different calls (e.g. from both arms of an if)
      const Site& a = first->depth ? first->frames[0] : first->site;
      const Site& b = l->depth ? l->frames[0] : l->site;
      fail("kernel '%s': lanes of threadgroup %s wait at threadgroup_barrier %s:%u reached through different "
           "calls (%s:%u for thread_index_in_threadgroup %u, %s:%u for %u); undefined behaviour on Metal",
           kname(), tgstr(R), l->site.file, l->site.line, a.file, a.line, first->lidx, b.file, b.line, l->lidx);
    }
  }
  if (done && R.la->strict)
    fail("kernel '%s': barrier divergence in threadgroup %s: %d of %u lanes returned (e.g. "
         "thread_index_in_threadgroup %d) while the others wait at threadgroup_barrier at %s:%u (undefined "
         "behaviour on Metal; strict=False treats returned lanes as arrived)",
         kname(), tgstr(R), done, R.nlanes, doneex, first->site.file, first->site.line);
  if (first) EMU_RACE(barrier(R, first->bar_flags));
  for (int i = 0; i < n; ++i) if (R.lanes[i].state == L_BAR) R.lanes[i].state = L_READY;
}

inline void run_group_fibers(Runtime& R, uint64_t& seed) {
  int n = (int)R.nlanes;
  make_perm(R.perm, n, R.la->order, seed);
  for (int i = 0; i < n; ++i) { set_lane(R, R.lanes[i], (uint32_t)i); R.lanes[i].state = L_NEW; R.lanes[i].stack = nullptr; }
  int remaining = n;
  for (;;) {
    for (int k = 0; k < n; ++k) {
      Lane* l = &R.lanes[R.perm[k]];
      if (l->state == L_NEW) {
        l->stack = R.pool.get();
        if (!l->stack) fail("kernel '%s': out of memory for lane stacks", kname());
        l->sp = fiber_init((char*)l->stack + kStackSize, &fiber_main, l);
      } else if (l->state != L_READY) {
        continue;
      }
      R.cur = l;
      fiber_switch(&R.sched_sp, l->sp);
      R.cur = nullptr;
      if (l->state == L_DONE) { R.pool.put(l->stack); l->stack = nullptr; --remaining; }
    }
    if (!remaining) break;
    resolve(R);
  }
}

inline void run_group_plain(Runtime& R, uint64_t& seed) {
  int n = (int)R.nlanes;
  Lane& l = R.lanes[0];
  R.cur = &l;
  l.rt = &R; l.depth = 0;
  void (*fn)(Lane&) = R.desc->fn;
  if (R.la->order == 0) {
    // incremental coordinates: no divisions per lane
    uint32_t idx = 0;
    for (uint32_t z = 0; z < R.tpg.v[2]; ++z)
      for (uint32_t y = 0; y < R.tpg.v[1]; ++y)
        for (uint32_t x = 0; x < R.tpg.v[0]; ++x, ++idx) {
          l.lidx = idx; l.slane = idx & 31; l.sgid = idx >> 5;
          l.lid = u3{{x, y, z}};
          l.tid = u3{{R.tgid.v[0] * R.dtpg.v[0] + x, R.tgid.v[1] * R.dtpg.v[1] + y, R.tgid.v[2] * R.dtpg.v[2] + z}};
          fn(l);
        }
  } else {
    make_perm(R.perm, n, R.la->order, seed);
    for (int i = 0; i < n; ++i) { set_lane(R, l, (uint32_t)R.perm[i]); R.desc->fn(l); }
  }
  R.cur = nullptr;
}

#if EMU_DEBUG
// Debug builds check indices into fixed-size arrays (-fsanitize=bounds): the compiler calls this with
// the index and the source location (which follows the #line markers, so it is the Metal line).
namespace ubsan {
struct SourceLocation { const char* file; uint32_t line, column; };
struct TypeDescriptor { uint16_t kind, info; char name[1]; };
struct OutOfBoundsData { SourceLocation loc; const TypeDescriptor* array_type; const TypeDescriptor* index_type; };
[[noreturn]] inline void out_of_bounds(OutOfBoundsData* d, uintptr_t v) {
  Runtime& R = rt();
  const u3 t = R.cur ? R.cur->tid : R.tgid;
  // integers up to 64 bits are passed by value; info: bit 0 signed, bits 1.. log2 of the width
  bool is_signed = d->index_type->kind == 0 && (d->index_type->info & 1);
  unsigned width = d->index_type->kind == 0 ? 1u << (d->index_type->info >> 1) : 64u;
  long long idx = (long long)v;
  if (is_signed && width < 64) idx = (long long)(v << (64 - width)) >> (64 - width);
  char num[32];
  if (is_signed) snprintf(num, sizeof num, "%lld", idx); else snprintf(num, sizeof num, "%llu", (unsigned long long)v);
  fail("kernel '%s': out-of-bounds index %s into a fixed-size array of type %s (threadgroup or thread-private) at "
       "%s:%u in thread_position_in_grid=(%u,%u,%u) (detected by the debug build's bounds check)", kname(), num,
       d->array_type->name, d->loc.file, d->loc.line, t.v[0], t.v[1], t.v[2]);
}
}  // namespace ubsan
#define EMU_UBSAN_HOOK extern "C" __attribute__((weak, visibility("hidden")))
EMU_UBSAN_HOOK void __ubsan_handle_out_of_bounds(ubsan::OutOfBoundsData* d, uintptr_t v) { ubsan::out_of_bounds(d, v); }
EMU_UBSAN_HOOK void __ubsan_handle_out_of_bounds_abort(ubsan::OutOfBoundsData* d, uintptr_t v) {
  ubsan::out_of_bounds(d, v);
}
#undef EMU_UBSAN_HOOK
#endif

// A fault inside a kernel (release build overrun, stack overflow into a guard page) returns to the launch
// instead of killing the interpreter; other faults go to the handler that was installed before.
// The watchdog is a per-thread timer delivering a real-time signal (Python itself uses none of them).
inline int watchdog_signal() { return SIGRTMIN + 3; }
static const int kNumSignals = 6;
inline int fault_signal(int i) {
  static const int s[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP};
  return i < 5 ? s[i] : watchdog_signal();
}
inline struct sigaction* prev_actions() { static struct sigaction a[kNumSignals]; return a; }
inline int sig_index(int sig) { for (int i = 0; i < kNumSignals; ++i) if (fault_signal(i) == sig) return i; return 0; }
inline void on_fault(int sig, siginfo_t* si, void* uc) {
  Runtime& R = rt();
  if (R.in_launch) {
    R.in_launch = 0;
    const char* a = (const char*)si->si_addr;
    const char* st = R.cur && R.fibers ? (const char*)R.cur->stack : nullptr;
    const u3 t = R.cur ? R.cur->tid : R.tgid;
    if (sig == watchdog_signal())
      snprintf(R.err, sizeof R.err, "kernel '%s' did not finish within %g s (an endless loop? e.g. a loop on a "
               "NaN comparison); the launch was aborted (timeout= or MPSLINALG_EMULATOR_TIMEOUT change the limit)",
               kname(), R.la ? R.la->timeout : 0.0);
    else if (sig == SIGFPE)
      snprintf(R.err, sizeof R.err, "kernel '%s': %s in thread_position_in_grid=(%u,%u,%u) (SIGFPE); undefined "
               "behaviour on Metal", kname(),
               si->si_code == FPE_INTDIV ? "integer division by zero (or INT_MIN / -1, which the CPU reports alike)"
               : si->si_code == FPE_INTOVF ? "integer overflow in a division" : "arithmetic exception",
               t.v[0], t.v[1], t.v[2]);
    else if (sig == SIGILL || sig == SIGTRAP)
      // the debug build's bounds check reports through ubsan::out_of_bounds, not a trap; user code
      // cannot emit traps (compiler builtins are rejected), so this is the emulator's own code
      snprintf(R.err, sizeof R.err, "kernel '%s' stopped at a trap instruction (%s at %p) in "
               "thread_position_in_grid=(%u,%u,%u): an internal check of the emulator failed; please report the "
               "kernel", kname(), sig == SIGILL ? "SIGILL, illegal instruction" : "SIGTRAP, breakpoint",
               si->si_addr, t.v[0], t.v[1], t.v[2]);
    else if (st && a >= st && a < st + kGuard)
      snprintf(R.err, sizeof R.err, "kernel '%s': stack overflow in thread_position_in_grid=(%u,%u,%u): thread-private "
               "data exceeds the emulator's %zu KiB per-lane stack (Metal's is far smaller; move large arrays to "
               "threadgroup or device memory)", kname(), R.cur->tid.v[0], R.cur->tid.v[1], R.cur->tid.v[2],
               (kStackSize - kGuard) >> 10);
    else if ((uintptr_t)a < 65536)
      snprintf(R.err, sizeof R.err, "kernel '%s' crashed with %s: access to address %p, a null (or nearly null) "
               "pointer, in thread_position_in_grid=(%u,%u,%u)", kname(), sig == SIGSEGV ? "SIGSEGV" : "SIGBUS",
               si->si_addr, t.v[0], t.v[1], t.v[2]);
    else
      snprintf(R.err, sizeof R.err, "kernel '%s' crashed with %s: invalid memory access at %p in "
               "thread_position_in_grid=(%u,%u,%u), outside every buffer, threadgroup memory and the thread's stack. "
               "device/constant pointers are bounds-checked, so this is a pointer made by a cast or from an integer, "
               "or an overrun of a threadgroup or thread-private array (compile_shader(debug=True) checks their "
               "indices)", kname(), sig == SIGSEGV ? "SIGSEGV" : "SIGBUS", si->si_addr, t.v[0], t.v[1], t.v[2]);
    R.failed = true;
    siglongjmp(R.jb, 1);
  }
  if (sig == watchdog_signal()) return;  // a late tick after the launch ended
  struct sigaction& p = prev_actions()[sig_index(sig)];
  if (p.sa_flags & SA_SIGINFO) { if (p.sa_sigaction) { p.sa_sigaction(sig, si, uc); return; } }
  else if (p.sa_handler != SIG_DFL && p.sa_handler != SIG_IGN) { p.sa_handler(sig); return; }
  signal(sig, SIG_DFL);
  raise(sig);
}
inline void install_fault_handler() {
  static thread_local bool alt = false;
  if (!alt) {
    alt = true;
    stack_t cur;
    if (sigaltstack(nullptr, &cur) == 0 && (cur.ss_flags & SS_DISABLE)) {
      stack_t ss; ss.ss_size = 1 << 16; ss.ss_sp = mmap(nullptr, ss.ss_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      ss.ss_flags = 0;
      if (ss.ss_sp != MAP_FAILED) sigaltstack(&ss, nullptr);
    }
  }
  static bool done = [] {
    struct sigaction sa; __builtin_memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault; sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER; sigemptyset(&sa.sa_mask);
    for (int i = 0; i < kNumSignals; ++i) sigaction(fault_signal(i), &sa, &prev_actions()[i]);
    return true;
  }();
  (void)done;
}

inline void arm_watchdog(double secs) {
  static thread_local timer_t timer;
  static thread_local bool have_timer = false, tried = false;
  if (!tried && secs > 0) {
    tried = true;
    struct sigevent ev; __builtin_memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_THREAD_ID; ev.sigev_signo = watchdog_signal();
    ev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
    have_timer = timer_create(CLOCK_MONOTONIC, &ev, &timer) == 0;
  }
  if (!have_timer) return;
  struct itimerspec its; __builtin_memset(&its, 0, sizeof its);
  its.it_value.tv_sec = (time_t)secs; its.it_value.tv_nsec = (long)((secs - (double)(time_t)secs) * 1e9);
  timer_settime(timer, 0, &its, nullptr);
}

// The threadgroups of one launch, shared by the threads that run them.
struct Job {
  const KernelDesc* d;
  const Launch* la;
  uint64_t total, step, off, chunk;
  uint64_t next;      // next group index to claim (atomic)
  int abort;          // set by the first thread that fails (atomic)
  int race;           // the failure is a data race (race-check builds)
  char err[2048];
};

inline void run_one_group(Runtime& R, uint64_t g, uint64_t& seed) {
  const Launch* la = R.la;
  uint64_t gx = g % R.ngroups.v[0], gy = (g / R.ngroups.v[0]) % R.ngroups.v[1];
  uint64_t gz = g / ((uint64_t)R.ngroups.v[0] * R.ngroups.v[1]);
  R.tgid = u3{{(uint32_t)gx, (uint32_t)gy, (uint32_t)gz}};
  for (int i = 0; i < 3; ++i) {
    uint64_t rem = la->grid[i] - (uint64_t)R.tgid.v[i] * la->group[i];
    R.tpg.v[i] = (uint32_t)(rem < la->group[i] ? rem : la->group[i]);
  }
  R.nlanes = R.tpg.v[0] * R.tpg.v[1] * R.tpg.v[2];
  R.nsg = (R.nlanes + 31) / 32;
  R.tg_top = 0; ++R.tg_gen;
  EMU_RACE(group_start(R, (uint32_t)g));
  if (R.fibers) run_group_fibers(R, seed); else run_group_plain(R, seed);
}

// Runs groups of the job on the calling thread until none is left; returns 1 on error.
inline int work(Job* job) {
  Runtime& R = rt();
  const Launch* la = job->la;
  R.desc = job->d; R.la = la; R.failed = false; R.err[0] = 0; R.fibers = job->d->sync != 0; R.cur = nullptr;
  uint64_t seed = la->seed | 1;
  for (int i = 0; i < 3; ++i) {
    R.grid.v[i] = (uint32_t)la->grid[i]; R.dtpg.v[i] = (uint32_t)la->group[i];
    R.ngroups.v[i] = (uint32_t)((la->grid[i] + la->group[i] - 1) / la->group[i]);
  }
  R.dnsg = (R.dtpg.v[0] * R.dtpg.v[1] * R.dtpg.v[2] + 31) / 32;
  install_fault_handler();
  EMU_RACE(launch_begin(R, la));
  int rc = 0;
  if (sigsetjmp(R.jb, 1) == 0) {
    R.in_launch = 1;
    if (la->timeout > 0) arm_watchdog(la->timeout);
    for (;;) {
      if (__atomic_load_n(&job->abort, __ATOMIC_RELAXED)) break;
      uint64_t k0 = __atomic_fetch_add(&job->next, job->chunk, __ATOMIC_RELAXED);
      if (k0 >= job->total) break;
      uint64_t k1 = k0 + job->chunk < job->total ? k0 + job->chunk : job->total;
      for (uint64_t k = k0; k < k1; ++k) {
        uint64_t g = k;
        if (la->order == 1) g = job->total - 1 - k;
        else if (la->order == 2) g = (uint64_t)(((unsigned __int128)k * job->step + job->off) % job->total);
        run_one_group(R, g, seed);
      }
    }
  } else {
    rc = 1;
  }
  R.in_launch = 0;
  EMU_RACE(launch_end(R));
  if (la->timeout > 0) arm_watchdog(0.0);
  R.cur = nullptr;
  // Lanes abandoned by an error keep their stacks; give them back.
  for (uint32_t i = 0; i < 1024 && R.fibers; ++i)
    if (R.lanes[i].stack) { R.pool.put(R.lanes[i].stack); R.lanes[i].stack = nullptr; }
  R.pool.trim();
  if (rc && !__atomic_exchange_n(&job->abort, 1, __ATOMIC_ACQ_REL)) {
    snprintf(job->err, sizeof job->err, "%s", R.err[0] ? R.err : "kernel failed");
    job->race = R.race_found;
  }
  R.desc = nullptr; R.la = nullptr;
  return rc;
}

inline void* work_thread(void* job) { work((Job*)job); return nullptr; }

// Threadgroups of a sync-free kernel are independent (as on the GPU), so large forward-order launches
// spread them over `threads` OS threads; everything else runs on the calling thread.
inline int launch(const KernelDesc* d, const Launch* la, char* err, int errlen, int threads) {
  Job job;
  job.d = d; job.la = la; job.next = 0; job.abort = 0; job.race = 0; job.err[0] = 0;
  uint64_t ng[3];
  for (int i = 0; i < 3; ++i) ng[i] = (la->grid[i] + la->group[i] - 1) / la->group[i];
  job.total = ng[0] * ng[1] * ng[2];
  // Random group order: an affine walk k -> (k*step + off) % total with step coprime to total.
  uint64_t seed = la->seed | 1;
  job.step = 1; job.off = 0;
  if (la->order == 2 && job.total > 1) {
    job.step = rng_next(seed) % job.total; if (job.step == 0) job.step = 1;
    auto gcd = [](uint64_t a, uint64_t b) { while (b) { uint64_t t = a % b; a = b; b = t; } return a; };
    while (gcd(job.step, job.total) != 1) job.step = job.step % job.total + 1;
    job.off = rng_next(seed) % job.total;
  }
  uint64_t lanes = la->grid[0] * la->grid[1] * la->grid[2];
  int nt = (d->sync || la->order != 0 || lanes < 32768 || job.total < 2) ? 1 : threads;
#if EMU_RACECHECK
  nt = 1;  // the shadow memory is not shared between OS threads
#endif
  if ((uint64_t)nt > job.total) nt = (int)job.total;
  job.chunk = nt > 1 ? (job.total / ((uint64_t)nt * 8) > 0 ? job.total / ((uint64_t)nt * 8) : 1) : job.total;
  pthread_t tids[64];
  int started = 0;
  for (int t = 1; t < nt && t < 64; ++t)
    if (pthread_create(&tids[started], nullptr, &work_thread, &job) == 0) ++started;
  work(&job);
  for (int t = 0; t < started; ++t) pthread_join(tids[t], nullptr);
  if (job.abort) { snprintf(err, (size_t)errlen, "%s", job.err); return job.race ? 2 : 1; }
  return 0;
}
}  // namespace emu
