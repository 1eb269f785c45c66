// Threadgroup scheduling, barrier resolution and the launch entry point.
#pragma once
#include "emu_runtime.h"

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
  l.lidx = idx; l.slane = idx & 31; l.sgid = idx >> 5;
  l.lid = u3{{idx % tx, (idx / tx) % ty, idx / (tx * ty)}};
  for (int d = 0; d < 3; ++d) l.tid.v[d] = R.tgid.v[d] * R.dtpg.v[d] + l.lid.v[d];
}

inline const char* tgstr(Runtime& R) {
  static thread_local char b[64];
  snprintf(b, sizeof b, "(%u,%u,%u)", R.tgid.v[0], R.tgid.v[1], R.tgid.v[2]);
  return b;
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
      if (!best || l->site.line < best->site.line ||
          (l->site.line == best->site.line && (__builtin_strcmp(l->site.file, best->site.file) < 0 ||
           (same_site(l->site, best->site) && (size_t)l->op < (size_t)best->op))))
        best = l;
    }
    if (!best) continue;
    Lane* parts[32]; int np = 0;
    for (int i = g * 32; i < hi; ++i) {
      Lane* l = &R.lanes[i];
      if (l->state == L_SIMD && l->op == best->op && same_site(l->site, best->site)) parts[np++] = l;
    }
    best->op(parts, np);
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
  }
  if (done && R.la->strict)
    fail("kernel '%s': barrier divergence in threadgroup %s: %d of %u lanes returned (e.g. "
         "thread_index_in_threadgroup %d) while the others wait at threadgroup_barrier at %s:%u (undefined "
         "behaviour on Metal; strict=False treats returned lanes as arrived)",
         kname(), tgstr(R), done, R.nlanes, doneex, first->site.file, first->site.line);
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
  if (R.la->order == 0) {
    for (int i = 0; i < n; ++i) { set_lane(R, l, (uint32_t)i); R.desc->fn(l); }
  } else {
    make_perm(R.perm, n, R.la->order, seed);
    for (int i = 0; i < n; ++i) { set_lane(R, l, (uint32_t)R.perm[i]); R.desc->fn(l); }
  }
  R.cur = nullptr;
}

// A fault inside a kernel (release build overrun, stack overflow into a guard page) returns to the launch
// instead of killing the interpreter; other faults go to the handler that was installed before.
static const int kFaultSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
inline struct sigaction* prev_actions() { static struct sigaction a[4]; return a; }
inline int sig_index(int sig) { for (int i = 0; i < 4; ++i) if (kFaultSignals[i] == sig) return i; return 0; }
inline void on_fault(int sig, siginfo_t* si, void* uc) {
  Runtime& R = rt();
  if (R.in_launch) {
    R.in_launch = 0;
    const char* a = (const char*)si->si_addr;
    const char* st = R.cur && R.fibers ? (const char*)R.cur->stack : nullptr;
    const u3 t = R.cur ? R.cur->tid : R.tgid;
    if (sig == SIGFPE)
      snprintf(R.err, sizeof R.err, "kernel '%s': integer division by zero (or INT_MIN / -1) in "
               "thread_position_in_grid=(%u,%u,%u); undefined behaviour on Metal", kname(), t.v[0], t.v[1], t.v[2]);
    else if (sig == SIGILL)
      snprintf(R.err, sizeof R.err, "kernel '%s': out-of-bounds index into a fixed-size array (threadgroup or "
               "thread-private) in thread_position_in_grid=(%u,%u,%u) (detected by the debug build)", kname(),
               t.v[0], t.v[1], t.v[2]);
    else if (st && a >= st && a < st + kGuard)
      snprintf(R.err, sizeof R.err, "kernel '%s': stack overflow in thread_position_in_grid=(%u,%u,%u): thread-private "
               "data exceeds the emulator's %zu KiB per-lane stack (Metal's is far smaller; move large arrays to "
               "threadgroup or device memory)", kname(), R.cur->tid.v[0], R.cur->tid.v[1], R.cur->tid.v[2],
               (kStackSize - kGuard) >> 10);
    else
      snprintf(R.err, sizeof R.err, "kernel '%s' crashed with %s (invalid memory access at %p); device/constant "
               "pointers are bounds-checked, so this is a threadgroup or thread-private array overrun, a bad pointer "
               "cast or an emulator bug", kname(), sig == SIGSEGV ? "SIGSEGV" : "SIGBUS", si->si_addr);
    R.failed = true;
    siglongjmp(R.jb, 1);
  }
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
    for (int i = 0; i < 4; ++i) sigaction(kFaultSignals[i], &sa, &prev_actions()[i]);
    return true;
  }();
  (void)done;
}

inline int launch(const KernelDesc* d, const Launch* la, char* err, int errlen) {
  Runtime& R = rt();
  R.desc = d; R.la = la; R.failed = false; R.err[0] = 0; R.fibers = d->sync != 0; R.cur = nullptr;
  uint64_t seed = la->seed | 1;
  for (int i = 0; i < 3; ++i) {
    R.grid.v[i] = (uint32_t)la->grid[i]; R.dtpg.v[i] = (uint32_t)la->group[i];
    R.ngroups.v[i] = (uint32_t)((la->grid[i] + la->group[i] - 1) / la->group[i]);
  }
  uint64_t total = (uint64_t)R.ngroups.v[0] * R.ngroups.v[1] * R.ngroups.v[2];
  uint32_t dn = R.dtpg.v[0] * R.dtpg.v[1] * R.dtpg.v[2];
  R.dnsg = (dn + 31) / 32;
  install_fault_handler();
  // Random group order: an affine walk k -> (k*step + off) % total with step coprime to total.
  uint64_t step = 1, off = 0;
  if (la->order == 2 && total > 1) {
    step = rng_next(seed) % total; if (step == 0) step = 1;
    auto gcd = [](uint64_t a, uint64_t b) { while (b) { uint64_t t = a % b; a = b; b = t; } return a; };
    while (gcd(step, total) != 1) step = step % total + 1;
    off = rng_next(seed) % total;
  }
  int rc = 0;
  if (sigsetjmp(R.jb, 1) == 0) {
    R.in_launch = 1;
    {
      for (uint64_t k = 0; k < total; ++k) {
        uint64_t g = k;
        if (la->order == 1) g = total - 1 - k;
        else if (la->order == 2) g = (uint64_t)(((unsigned __int128)k * step + off) % total);
        uint64_t gx = g % R.ngroups.v[0], gy = (g / R.ngroups.v[0]) % R.ngroups.v[1], gz = g / ((uint64_t)R.ngroups.v[0] * R.ngroups.v[1]);
        R.tgid = u3{{(uint32_t)gx, (uint32_t)gy, (uint32_t)gz}};
        for (int i = 0; i < 3; ++i) {
          uint64_t rem = la->grid[i] - (uint64_t)R.tgid.v[i] * la->group[i];
          R.tpg.v[i] = (uint32_t)(rem < la->group[i] ? rem : la->group[i]);
        }
        R.nlanes = R.tpg.v[0] * R.tpg.v[1] * R.tpg.v[2];
        R.nsg = (R.nlanes + 31) / 32;
        R.tg_top = 0; ++R.tg_gen;
        if (R.fibers) run_group_fibers(R, seed); else run_group_plain(R, seed);
      }
    }
  } else {
    rc = 1;
  }
  R.in_launch = 0;
  R.cur = nullptr;
  // Lanes abandoned by an error keep their stacks; give them back.
  for (uint32_t i = 0; i < 1024 && R.fibers; ++i) if (R.lanes[i].stack) { R.pool.put(R.lanes[i].stack); R.lanes[i].stack = nullptr; }
  R.pool.trim();
  if (rc) { snprintf(err, (size_t)errlen, "%s", R.err[0] ? R.err : "kernel failed"); }
  R.desc = nullptr; R.la = nullptr;
  return rc;
}
}  // namespace emu
