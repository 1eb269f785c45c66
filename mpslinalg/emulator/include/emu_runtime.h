// Per-thread runtime state, lanes, device/constant pointer wrappers, threadgroup memory and argument
// binding. The scheduler itself is in emu_sched.h.
#pragma once
#include <csignal>
#include <csetjmp>
#include <cstdarg>
#include <cstdio>
#include "emu_fiber.h"
#include "emu_math.h"

namespace emu {
struct Site { const char* file; unsigned line; };
// __builtin_FILE/LINE in a default argument evaluate at the caller, and follow the #line markers of the
// translated source, so every collective knows its metal/<file>:<line> without rewriting calls.
inline Site here(const char* f = __builtin_FILE(), unsigned l = __builtin_LINE()) { return Site{f, l}; }
inline bool same_site(const Site& a, const Site& b) {
  return a.line == b.line && (a.file == b.file || __builtin_strcmp(a.file, b.file) == 0);
}

struct u3 { uint32_t v[3]; };
template <int...> struct iseq {};
enum LaneState : int { L_NEW, L_READY, L_BAR, L_SIMD, L_DONE };
struct Lane;
struct Runtime;
typedef void (*CollOp)(Lane** parts, int n);

struct Lane {
  Runtime* rt;  // the lane's runtime, so that launchers need no thread-local lookup per lane
  void* sp;
  int state;
  Site site;
  CollOp op;
  void* stack;
  u3 tid, lid;
  uint32_t lidx, slane, sgid;
  int depth;          // call path of user functions that reach collectives (see Frame)
  int bar_flags;      // mem_flags of the threadgroup_barrier the lane waits at
  Site frames[16];
  alignas(64) unsigned char slot[256];  // operands in, results out of SIMD-group collectives
};


struct ParamDesc { int buf; int kind; int code; int lanes; uint64_t size; int is_const; const char* name; };
struct KernelDesc {
  void (*fn)(Lane&);
  int sync;          // 1 = may reach a barrier or SIMD-group function: run lanes as fibers
  int nparams;
  const ParamDesc* params;
  uint64_t max_threads;
  uint64_t tg_mem;
  const char* name;
};
struct Launch {
  void** bufs; const uint64_t* sizes; int nbufs; int order; int strict; int pad_;
  uint64_t grid[3]; uint64_t group[3]; uint64_t seed;
  double timeout;  // seconds of wall time before the launch is aborted (0: none)
};

static const size_t kTgLimit = 32768;
static const int kMaxSlots = 512;
namespace race { struct Cell; }
struct RaceRegion { uintptr_t lo, hi; race::Cell* cells; size_t bytes; };  // see emu_race.h

struct Runtime {
  const KernelDesc* desc = nullptr;
  const Launch* la = nullptr;
  Lane* cur = nullptr;
  bool fibers = false;
  void* sched_sp = nullptr;
  u3 tgid, tpg, dtpg, grid, ngroups;
  uint32_t nlanes = 0, nsg = 0, dnsg = 0;
  char err[2048];
  bool failed = false;
  // threadgroup memory arena
  alignas(64) unsigned char tg[kTgLimit + 4096];
  size_t tg_top = 0;
  uint32_t tg_gen = 1;
  uint32_t slot_gen[kMaxSlots];
  uint32_t slot_off[kMaxSlots];
  Lane lanes[1024];
  int perm[1024];
  StackPool pool;
  sigjmp_buf jb;
  volatile sig_atomic_t in_launch = 0;
  // race-check builds only (emu_race.h): shadow memory and the orderings between accesses
  race::Cell* race_tg = nullptr;
  RaceRegion race_regions[32];
  int race_nregions = 0;
  int race_found = 0;
  bool race_pw = false, race_cw = false;  // whether the two racing accesses write
  uintptr_t race_base = 0;
  uint32_t race_tg_ep = 0, race_dev_ep = 0, race_group = 0;
  uint32_t race_sgsync[32] = {};
  Runtime() {
    __builtin_memset((void*)lanes, 0, sizeof lanes);
    __builtin_memset(slot_gen, 0, sizeof slot_gen);
  }
};
inline Runtime& rt() { static thread_local Runtime* r = new Runtime(); return *r; }

inline void vfmt(const char* fmt, va_list ap) {
  Runtime& R = rt();
  if (!R.failed) { vsnprintf(R.err, sizeof R.err, fmt, ap); R.failed = true; }
}
// Errors unwind by siglongjmp to the launch (built with -fno-exceptions: smaller code, faster compiles);
// lanes abandoned on their fiber stacks hold no resources.
[[noreturn]] inline void fail(const char* fmt, ...) {
  va_list ap; va_start(ap, fmt); vfmt(fmt, ap); va_end(ap);
  siglongjmp(rt().jb, 1);
}
inline const char* kname() { return rt().desc ? rt().desc->name : "?"; }
inline const char* bufname(int b) {
  const KernelDesc* d = rt().desc;
  if (d) for (int i = 0; i < d->nparams; ++i) if (d->params[i].buf == b) return d->params[i].name;
  return "?";
}

// ---- device/constant pointers ----
// A wrapper, not a raw pointer: it keeps `device` distinct from thread/threadgroup pointers for overloading,
// and carries the buffer bounds that debug builds check on every access.
template <class T> struct dptr;
template <class T> struct cptr;
// A cast never moves a pointer between the device and constant address spaces (Metal rejects it: a
// constant buffer is read-only and may be cached as such); the static_assert's message is what the
// compiler shows, at the user's line (build._at_user_line).
template <class> struct addr_space_cast : std::false_type {};
#define EMU_NO_CONSTANT_TO_DEVICE                                                                  \
  template <class U> explicit dptr(const cptr<U>&) {                                               \
    static_assert(addr_space_cast<U>::value, "Metal cannot cast a constant pointer to a device pointer"); }
[[noreturn]] inline void oob(int buf, long long idx, long long n, size_t esz) {
  Runtime& R = rt();
  const u3& t = R.cur ? R.cur->tid : R.tgid;
  fail("kernel '%s': out-of-bounds access to buffer '%s' (buffer %d): element index %lld of %lld (element size %zu) "
       "in thread_position_in_grid=(%u,%u,%u)", kname(), bufname(buf), buf, idx, n, esz, t.v[0], t.v[1], t.v[2]);
}
// Bounds checks are on in every build: they cost ~1% on an elementwise kernel and turn an overrun into an
// exception instead of silent corruption of the Python process's heap.
#ifndef EMU_BOUNDS
#define EMU_BOUNDS 1
#endif
template <class T> struct dptr<const T> {
  T* p = nullptr;
#if EMU_BOUNDS
  const char* lo = nullptr; const char* hi = nullptr; int buf = -1;
  void chk(const T* q) const {
    if (lo && ((const char*)q < lo || (const char*)q + sizeof(T) > hi)) {
      long long esz = (long long)sizeof(T);
      long long d = (long long)((const char*)q - lo);
      oob(buf, d >= 0 ? d / esz : -((-d + esz - 1) / esz), (long long)(hi - lo) / esz, sizeof(T));
    }
  }
  dptr(T* q, const char* l, const char* h, int b) : p(q), lo(l), hi(h), buf(b) {}
  template <class U> void copy_bounds(const dptr<U>& o) { lo = o.lo; hi = o.hi; buf = o.buf; }
#else
  void chk(const T*) const {}
  dptr(T* q, const char*, const char*, int) : p(q) {}
  template <class U> void copy_bounds(const dptr<U>&) {}
#endif
  dptr() = default;
  dptr(std::nullptr_t) {}
  dptr(const T* q) : p(const_cast<T*>(q)) {}
  explicit dptr(const void* q) : p((T*)q) {}  // (device T*)void_pointer
  // GPU addresses (a list of tensors is bound as 64-bit addresses); such pointers carry no bounds
  template <class I, std::enable_if_t<std::is_integral<I>::value && sizeof(I) == 8, int> = 0>
  explicit dptr(I addr) : p((T*)(uintptr_t)addr) {}
  EMU_NO_CONSTANT_TO_DEVICE
  explicit operator unsigned long() const { return (unsigned long)(uintptr_t)p; }
  explicit operator long() const { return (long)(uintptr_t)p; }
  // pointer casts (reinterpret_cast<device U*>(...), C-style casts) keep the bounds of the source buffer
  template <class U, std::enable_if_t<!std::is_same<std::remove_cv_t<U>, std::remove_cv_t<T>>::value, int> = 0>
  explicit dptr(const dptr<U>& o) : p((T*)(void*)o.p) { copy_bounds(o); }
  const T& operator*() const { chk(p); return *p; }
  const T* operator->() const { chk(p); return p; }
  const T& operator[](long long i) const { chk(p + i); return p[i]; }
  dptr operator+(long long i) const { dptr r = *this; r.p += i; return r; }
  dptr operator-(long long i) const { dptr r = *this; r.p -= i; return r; }
  dptr& operator+=(long long i) { p += i; return *this; }
  dptr& operator-=(long long i) { p -= i; return *this; }
  dptr& operator++() { ++p; return *this; }
  dptr& operator--() { --p; return *this; }
  dptr operator++(int) { dptr r = *this; ++p; return r; }
  dptr operator--(int) { dptr r = *this; --p; return r; }
  explicit operator bool() const { return p != nullptr; }
  const T* get() const { chk(p); return p; }
};
template <class T> struct dptr : dptr<const T> {
  using B = dptr<const T>;
  using B::B;
  dptr() = default;
  dptr(T* q) { this->p = q; }
  EMU_NO_CONSTANT_TO_DEVICE
  T& operator*() const { this->chk(this->p); return *this->p; }
  T* operator->() const { this->chk(this->p); return this->p; }
  T& operator[](long long i) const { this->chk(this->p + i); return this->p[i]; }
  dptr operator+(long long i) const { dptr r = *this; r.p += i; return r; }
  dptr operator-(long long i) const { dptr r = *this; r.p -= i; return r; }
  dptr& operator+=(long long i) { this->p += i; return *this; }
  dptr& operator-=(long long i) { this->p -= i; return *this; }
  dptr& operator++() { ++this->p; return *this; }
  dptr& operator--() { --this->p; return *this; }
  dptr operator++(int) { dptr r = *this; ++this->p; return r; }
  dptr operator--(int) { dptr r = *this; --this->p; return r; }
  T* get() const { this->chk(this->p); return this->p; }
};
// `constant T*`: read-only like `device const T*`, but a distinct type so overloads on the two compile.
template <class T> struct cptr : dptr<const T> {
  using B = dptr<const T>;
  using B::B;
  cptr() = default;
  cptr(const B& b) : B(b) {}
  // (constant U*)p: from constant, fine (hides the inherited device-only constructor); from device, not
  template <class U> explicit cptr(const cptr<U>& o) : B(static_cast<const dptr<const U>&>(o)) {}
  template <class U> explicit cptr(const dptr<U>&) {
    static_assert(addr_space_cast<U>::value, "Metal cannot cast a device pointer to a constant pointer");
  }
  cptr operator+(long long i) const { cptr r = *this; r.p += i; return r; }
  cptr operator-(long long i) const { cptr r = *this; r.p -= i; return r; }
  cptr& operator+=(long long i) { this->p += i; return *this; }
  cptr& operator-=(long long i) { this->p -= i; return *this; }
  cptr& operator++() { ++this->p; return *this; }
  cptr& operator--() { --this->p; return *this; }
  cptr operator++(int) { cptr r = *this; ++this->p; return r; }
  cptr operator--(int) { cptr r = *this; --this->p; return r; }
};
template <class T> dptr<T> operator+(long long i, const dptr<T>& a) { return a + i; }
template <class T> cptr<T> operator+(long long i, const cptr<T>& a) { return a + i; }
template <class T, class U> long long operator-(const dptr<T>& a, const dptr<U>& b) { return a.p - b.p; }
#define EMU_PCMP(op) \
  template <class T, class U> bool operator op(const dptr<T>& a, const dptr<U>& b) { return a.p op b.p; } \
  template <class T> bool operator op(const dptr<T>& a, std::nullptr_t) { return a.p op (decltype(a.p))nullptr; }
EMU_PCMP(==) EMU_PCMP(!=) EMU_PCMP(<) EMU_PCMP(>) EMU_PCMP(<=) EMU_PCMP(>=)
#undef EMU_PCMP
// reinterpret_cast<...>(x) is rewritten to reinterpret_cast_<...>(x): casts to device/constant pointers keep
// the source buffer's bounds, casts of a device pointer to an integer see the raw address.
template <class To> struct ptr_cast_t {
  template <class F> static To cast(F& f) { return reinterpret_cast<To>(f); }
  template <class T> static To cast(const dptr<T>& f) { return reinterpret_cast<To>(f.p); }
  template <class T> static To cast(dptr<T>& f) { return reinterpret_cast<To>(f.p); }
  template <class T> static To cast(const cptr<T>& f) { return reinterpret_cast<To>(f.p); }
  template <class T> static To cast(cptr<T>& f) { return reinterpret_cast<To>(f.p); }
};
template <class T> struct ptr_cast_t<cptr<T>> {
  template <class U> static cptr<T> cast(const cptr<U>& f) { return cptr<T>(f); }
  template <class U> static cptr<T> cast(const dptr<U>& f) {
    static_assert(addr_space_cast<U>::value, "Metal cannot cast a device pointer to a constant pointer");
    return cptr<T>(dptr<const T>(f));
  }
  static cptr<T> cast(const void* f) { return cptr<T>((const T*)f); }
  template <class I, std::enable_if_t<std::is_integral<I>::value, int> = 0>
  static cptr<T> cast(I f) { return cptr<T>((const T*)(uintptr_t)f); }
};
template <class T> struct ptr_cast_t<dptr<T>> {
  template <class U> static dptr<T> cast(const dptr<U>& f) { return dptr<T>(f); }
  template <class U> static dptr<T> cast(const cptr<U>& f) {
    static_assert(addr_space_cast<U>::value, "Metal cannot cast a constant pointer to a device pointer");
    return dptr<T>(f);
  }
  static dptr<T> cast(const void* f) { return dptr<T>((T*)f); }
  template <class I, std::enable_if_t<std::is_integral<I>::value, int> = 0>
  static dptr<T> cast(I f) { return dptr<T>((T*)(uintptr_t)f); }
};
template <class To, class F> To reinterpret_cast_(F&& f) { return ptr_cast_t<To>::cast(f); }

// ---- threadgroup memory ----
inline int new_slot() { static int n = 0; return __atomic_fetch_add(&n, 1, __ATOMIC_RELAXED); }
// One allocation per (declaration site, type): all lanes of a group get the same storage, poisoned with 0xFF
// (NaN for floats) when the group first touches it.
template <int Site_, class T> T& tg_alloc() {
  static const int slot = new_slot();
  Runtime& R = rt();
  if (slot >= kMaxSlots) fail("kernel '%s': too many threadgroup declarations", kname());
  if (R.slot_gen[slot] != R.tg_gen) {
    size_t a = alignof(T) < 16 ? 16 : alignof(T);
    size_t off = (R.tg_top + a - 1) & ~(a - 1);
    if (off + sizeof(T) > kTgLimit)
      fail("kernel '%s': threadgroup memory use %zu bytes exceeds the 32768-byte limit of Apple GPUs",
           kname(), off + sizeof(T));
    __builtin_memset(R.tg + off, 0xFF, sizeof(T));
    R.tg_top = off + sizeof(T);
    R.slot_off[slot] = (uint32_t)off;
    R.slot_gen[slot] = R.tg_gen;
  }
  return *reinterpret_cast<T*>(R.tg + R.slot_off[slot]);
}

// Pushed for the duration of a call of a user function that can reach a collective (the translator wraps such
// calls); the scheduler orders waiting lanes by their call paths.
struct Frame {
  Lane* l;
  explicit Frame(Site s) {
    Runtime& R = rt();
    l = R.fibers ? R.cur : nullptr;
    if (l) { if (l->depth < 16) l->frames[l->depth] = s; ++l->depth; }
  }
  ~Frame() { if (l) --l->depth; }
  Frame(const Frame&) = delete;
};

inline bool in_threadgroup(const volatile void* p) {
  const unsigned char* c = (const unsigned char*)p;
  Runtime& R = rt();
  return c >= R.tg && c < R.tg + sizeof R.tg;
}

// ---- blocking (fiber mode only) ----
inline Lane* coll_lane(const char* what) {
  Runtime& R = rt();
  if (!R.fibers || !R.cur)
    fail("kernel '%s': %s reached in a kernel the emulator classified as free of synchronisation "
         "(internal error: please report the kernel)", kname(), what);
  return R.cur;
}
inline void block(Lane* l, int st, Site s, CollOp op) {
  l->state = st; l->site = s; l->op = op;
  fiber_switch(&l->sp, rt().sched_sp);
}

// ---- argument binding ----
template <class P> struct binder {  // by value (not valid MSL for buffers, but harmless)
  static P get(Runtime& R, int b) { P v; __builtin_memcpy(&v, R.la->bufs[b], sizeof(P)); return v; }
};
template <class T> struct binder<T&> { static T& get(Runtime& R, int b) { return *(T*)R.la->bufs[b]; } };
template <class T> struct binder<dptr<T>> {
  static dptr<T> get(Runtime& R, int b) {
    char* p = (char*)R.la->bufs[b];
    return dptr<T>((std::remove_const_t<T>*)p, p, p + R.la->sizes[b], b);
  }
};
template <class T> struct binder<cptr<T>> {
  static cptr<T> get(Runtime& R, int b) { return cptr<T>(binder<dptr<const T>>::get(R, b)); }
};
template <class T> struct binder<T*> {  // `device void*` stays a raw pointer
  static T* get(Runtime& R, int b) { return (T*)R.la->bufs[b]; }
};
template <class P> inline P bind(Runtime& R, int b) { return binder<P>::get(R, b); }

template <class P> struct bconv { static P get(const u3& u) { return P(u.v[0]); } };
template <class T> struct bconv<metal::vec<T, 2>> { static metal::vec<T, 2> get(const u3& u) { return metal::vec<T, 2>(T(u.v[0]), T(u.v[1])); } };
template <class T> struct bconv<metal::vec<T, 3>> { static metal::vec<T, 3> get(const u3& u) { return metal::vec<T, 3>(T(u.v[0]), T(u.v[1]), T(u.v[2])); } };
template <class P> inline std::remove_cv_t<std::remove_reference_t<P>> builtin(const u3& u) {
  return bconv<std::remove_cv_t<std::remove_reference_t<P>>>::get(u);
}
inline u3 U(uint32_t a) { return u3{{a, 0, 0}}; }

template <class F> struct fn_args;
template <class R_, class... A> struct fn_args<R_ (*)(A...)> {
  template <int I, class... B> struct at;
  template <class H, class... Tl> struct at<0, H, Tl...> { using type = H; };
  template <int I, class H, class... Tl> struct at<I, H, Tl...> { using type = typename at<I - 1, Tl...>::type; };
  template <int I> using arg = typename at<I, A...>::type;
};
template <class F, int I> using arg_t = typename fn_args<F>::template arg<I>;

// Parameter description for Python-side validation: kind 1 pointer, 2 reference, 3 value.
template <class T> struct scal { static constexpr int code = 0, lanes = 1; };
#define EMU_SC(T, c) template <> struct scal<T> { static constexpr int code = c, lanes = 1; };
EMU_SC(float, 1) EMU_SC(half, 2) EMU_SC(bfloat, 3) EMU_SC(signed char, 4) EMU_SC(char, 4) EMU_SC(unsigned char, 5)
EMU_SC(short, 6) EMU_SC(unsigned short, 7) EMU_SC(int, 8) EMU_SC(unsigned int, 9) EMU_SC(long, 10)
EMU_SC(unsigned long, 11) EMU_SC(long long, 10) EMU_SC(unsigned long long, 11) EMU_SC(bool, 12)
#undef EMU_SC
template <class T, int N> struct scal<metal::vec<T, N>> { static constexpr int code = scal<T>::code, lanes = N; };
template <class T, int N> struct scal<metal::packed_vec<T, N>> { static constexpr int code = scal<T>::code, lanes = N; };
template <class T> struct pinfo { static constexpr int kind = 3; using E = T; };
template <class T> struct pinfo<T&> { static constexpr int kind = 2; using E = T; };
template <class T> struct pinfo<dptr<T>> { static constexpr int kind = 1; using E = T; };
template <class T> struct pinfo<cptr<T>> { static constexpr int kind = 1; using E = const T; };
template <class T> struct pinfo<T*> { static constexpr int kind = 1; using E = T; };
template <class T> constexpr uint64_t size_of() { return sizeof(T); }
template <> constexpr uint64_t size_of<void>() { return 0; }
template <class E> struct elem_info { using S = std::remove_cv_t<E>; };
template <class P> ParamDesc pdesc(int buf, const char* name) {
  using E = typename pinfo<P>::E;
  using S = typename elem_info<E>::S;
  return ParamDesc{buf, pinfo<P>::kind, scal<S>::code, scal<S>::lanes, size_of<S>(), (int)std::is_const<E>::value,
                   name};
}
}  // namespace emu
