// Barriers, SIMD-group functions (rendezvous of the live lanes of a simdgroup), simdgroup_matrix, atomics.
#pragma once
#include "emu_sched.h"

namespace metal {
enum class mem_flags : int { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4, mem_threadgroup_imageblock = 8, mem_object_data = 16 };
constexpr mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags(int(a) | int(b)); }
enum class thread_scope : int { thread_scope_thread, thread_scope_simdgroup, thread_scope_threadgroup, thread_scope_device };

inline void threadgroup_barrier(mem_flags f = mem_flags::mem_none, emu::Site s = emu::here()) {
  emu::Lane* l = emu::coll_lane("threadgroup_barrier");
  l->bar_flags = int(f);
  emu::block(l, emu::L_BAR, s, nullptr);
}
namespace detail { inline void op_noop(emu::Lane**, int) {} }
inline void simdgroup_barrier(mem_flags = mem_flags::mem_none, emu::Site s = emu::here()) {
  emu::Lane* l = emu::coll_lane("simdgroup_barrier");
  emu::block(l, emu::L_SIMD, s, &detail::op_noop);
}
inline void atomic_thread_fence(mem_flags = mem_flags::mem_none, int = 0, thread_scope = thread_scope::thread_scope_device) {}

struct simd_vote {
  typedef ulong vote_t;
  vote_t v = 0;
  simd_vote() = default;
  explicit constexpr simd_vote(vote_t x) : v(x) {}
  explicit constexpr operator vote_t() const { return v; }
  constexpr bool all() const;
  constexpr bool any() const { return v != 0; }
};

namespace detail {
template <class T> struct In { T x; long long a; };
template <class T> inline T& slot_val(emu::Lane* l) { return *reinterpret_cast<T*>(l->slot); }
template <class T> inline void poison(T& v) { __builtin_memset((void*)&v, 0xFF, sizeof(T)); }

template <class T> T sum_(T a, T b) { return a + b; }
template <class T> T prod_(T a, T b) { return a * b; }
template <class T> T max_(T a, T b) { return max(a, b); }
template <class T> T min_(T a, T b) { return min(a, b); }
template <class T> T and_(T a, T b) { return a & b; }
template <class T> T or_(T a, T b) { return a | b; }
template <class T> T xor_(T a, T b) { return a ^ b; }
inline bool and_(bool a, bool b) { return a && b; }
inline bool or_(bool a, bool b) { return a || b; }
inline bool xor_(bool a, bool b) { return a != b; }

// Butterfly order (xor W/2 ... 1) over the active lanes: the same value in every lane of a W-lane block
// (W = 32 for simd_*, 4 for quad_*).
template <class T, T (*F)(T, T), int W = 32> void op_reduce(emu::Lane** p, int n) {
  T v[32]; bool has[32] = {};
  for (int i = 0; i < n; ++i) { v[p[i]->slane] = slot_val<In<T>>(p[i]).x; has[p[i]->slane] = true; }
  for (int off = W / 2; off; off >>= 1)
    for (int i = 0; i < 32; ++i) {
      if (i & off) continue;
      int j = i | off;
      if (has[i] && has[j]) v[i] = F(v[i], v[j]);
      else if (has[j]) { v[i] = v[j]; has[i] = true; }
    }
  for (int i = 0; i < n; ++i) slot_val<T>(p[i]) = v[p[i]->slane & ~(W - 1)];
}
template <class T, T (*F)(T, T), bool Excl> void op_prefix(emu::Lane** p, int n) {
  T acc{};
  for (int i = 0; i < n; ++i) {
    T x = slot_val<In<T>>(p[i]).x;
    T ident = slot_val<In<T>>(p[i]).a ? T(1) : T(0);
    if (i == 0) { slot_val<T>(p[i]) = Excl ? ident : x; acc = x; }
    else { T nv = F(acc, x); slot_val<T>(p[i]) = Excl ? acc : nv; acc = nv; }
  }
}
enum ShufKind { SH_IDX, SH_UP, SH_DOWN, SH_XOR, SH_ROT_UP, SH_ROT_DOWN, SH_BCAST };
inline const char* shuf_name(int k) {
  static const char* nm[] = {"simd_shuffle", "simd_shuffle_up", "simd_shuffle_down", "simd_shuffle_xor",
                             "simd_shuffle_rotate_up", "simd_shuffle_rotate_down", "simd_broadcast"};
  return nm[k];
}
template <class T, int K, int W = 32> void op_shuffle(emu::Lane** p, int n) {
  emu::Lane* by[32] = {};
  In<T> in[32];
  for (int i = 0; i < n; ++i) { by[p[i]->slane] = p[i]; in[p[i]->slane] = slot_val<In<T>>(p[i]); }
  if (K != SH_IDX)
    for (int i = 1; i < n; ++i)
      if (slot_val<In<T>>(p[i]).a != slot_val<In<T>>(p[0]).a)
        emu::fail("kernel '%s': non-uniform %s operand at %s:%u in simdgroup %u of threadgroup %s: lane %u passes "
                  "%lld, lane %u passes %lld (must be the same for all active lanes)", emu::kname(), shuf_name(K),
                  p[0]->site.file, p[0]->site.line, p[0]->sgid, emu::tgstr(emu::rt()), p[0]->slane, slot_val<In<T>>(p[0]).a, p[i]->slane,
                  slot_val<In<T>>(p[i]).a);
  for (int i = 0; i < n; ++i) {
    int lane = (int)p[i]->slane, me = lane % W, base = lane - me; long long a = in[lane].a, src;
    switch (K) {
      case SH_IDX: case SH_BCAST: src = a; break;
      case SH_UP: src = me - a; if (src < 0) src = me; break;
      case SH_DOWN: src = me + a; if (src > W - 1) src = me; break;
      case SH_XOR: src = me ^ (a & (W - 1)); break;
      case SH_ROT_UP: src = ((me - a) % W + W) % W; break;
      default: src = ((me + a) % W + W) % W; break;
    }
    src = (src >= 0 && src < W) ? base + src : -1;
    T r;
    if (src >= 0 && src < 32 && by[src]) r = in[src].x; else poison(r);
    slot_val<T>(p[i]) = r;
  }
}
template <class T> void op_first(emu::Lane** p, int n) { T v = slot_val<In<T>>(p[0]).x; for (int i = 0; i < n; ++i) slot_val<T>(p[i]) = v; }
inline void op_ballot(emu::Lane** p, int n) {
  ulong m = 0;
  for (int i = 0; i < n; ++i) if (slot_val<In<bool>>(p[i]).x) m |= 1ul << p[i]->slane;
  for (int i = 0; i < n; ++i) slot_val<ulong>(p[i]) = m;
}
inline void op_active(emu::Lane** p, int n) {
  ulong m = 0;
  for (int i = 0; i < n; ++i) m |= 1ul << p[i]->slane;
  for (int i = 0; i < n; ++i) { slot_val<ulong>(p[i]) = m; }
}
template <class T> inline T coll(T x, long long a, emu::Site s, emu::CollOp op, const char* what) {
  static_assert(sizeof(In<T>) <= 256, "SIMD-group operand too large");
  emu::Lane* l = emu::coll_lane(what);
  slot_val<In<T>>(l) = In<T>{x, a};
  emu::block(l, emu::L_SIMD, s, op);
  return slot_val<T>(l);
}
}  // namespace detail

constexpr bool simd_vote::all() const { return v == ~vote_t(0); }

#define EMU_SIMD_RED(name, F)                                                                     \
  template <class T> inline T name(T x, emu::Site s = emu::here()) {                              \
    return detail::coll<T>(x, 0, s, &detail::op_reduce<T, &detail::F<T>>, #name); }
EMU_SIMD_RED(simd_sum, sum_) EMU_SIMD_RED(simd_product, prod_) EMU_SIMD_RED(simd_max, max_)
EMU_SIMD_RED(simd_min, min_) EMU_SIMD_RED(simd_and, and_) EMU_SIMD_RED(simd_or, or_) EMU_SIMD_RED(simd_xor, xor_)
#undef EMU_SIMD_RED
#define EMU_SIMD_PFX(name, F, ex, ident)                                                          \
  template <class T> inline T name(T x, emu::Site s = emu::here()) {                              \
    return detail::coll<T>(x, ident, s, &detail::op_prefix<T, &detail::F<T>, ex>, #name); }
EMU_SIMD_PFX(simd_prefix_inclusive_sum, sum_, false, 0) EMU_SIMD_PFX(simd_prefix_exclusive_sum, sum_, true, 0)
EMU_SIMD_PFX(simd_prefix_inclusive_product, prod_, false, 1) EMU_SIMD_PFX(simd_prefix_exclusive_product, prod_, true, 1)
#undef EMU_SIMD_PFX
#define EMU_SIMD_SHUF(name, K)                                                                    \
  template <class T, class I> inline T name(T x, I a, emu::Site s = emu::here()) {                \
    return detail::coll<T>(x, (long long)a, s, &detail::op_shuffle<T, detail::K>, #name); }
EMU_SIMD_SHUF(simd_shuffle, SH_IDX) EMU_SIMD_SHUF(simd_shuffle_up, SH_UP) EMU_SIMD_SHUF(simd_shuffle_down, SH_DOWN)
EMU_SIMD_SHUF(simd_shuffle_xor, SH_XOR) EMU_SIMD_SHUF(simd_shuffle_rotate_up, SH_ROT_UP)
EMU_SIMD_SHUF(simd_shuffle_rotate_down, SH_ROT_DOWN) EMU_SIMD_SHUF(simd_broadcast, SH_BCAST)
#undef EMU_SIMD_SHUF
#define EMU_QUAD_RED(name, F)                                                                     \
  template <class T> inline T name(T x, emu::Site s = emu::here()) {                              \
    return detail::coll<T>(x, 0, s, &detail::op_reduce<T, &detail::F<T>, 4>, #name); }
EMU_QUAD_RED(quad_sum, sum_) EMU_QUAD_RED(quad_product, prod_) EMU_QUAD_RED(quad_max, max_)
EMU_QUAD_RED(quad_min, min_) EMU_QUAD_RED(quad_and, and_) EMU_QUAD_RED(quad_or, or_) EMU_QUAD_RED(quad_xor, xor_)
#undef EMU_QUAD_RED
#define EMU_QUAD_SHUF(name, K)                                                                    \
  template <class T, class I> inline T name(T x, I a, emu::Site s = emu::here()) {                \
    return detail::coll<T>(x, (long long)a, s, &detail::op_shuffle<T, detail::K, 4>, #name); }
EMU_QUAD_SHUF(quad_shuffle, SH_IDX) EMU_QUAD_SHUF(quad_shuffle_up, SH_UP) EMU_QUAD_SHUF(quad_shuffle_down, SH_DOWN)
EMU_QUAD_SHUF(quad_shuffle_xor, SH_XOR) EMU_QUAD_SHUF(quad_shuffle_rotate_up, SH_ROT_UP)
EMU_QUAD_SHUF(quad_shuffle_rotate_down, SH_ROT_DOWN) EMU_QUAD_SHUF(quad_broadcast, SH_BCAST)
#undef EMU_QUAD_SHUF
inline bool quad_all(bool b, emu::Site s = emu::here()) {
  return detail::coll<bool>(b, 0, s, &detail::op_reduce<bool, &detail::and_, 4>, "quad_all"); }
inline bool quad_any(bool b, emu::Site s = emu::here()) {
  return detail::coll<bool>(b, 0, s, &detail::op_reduce<bool, &detail::or_, 4>, "quad_any"); }
// simd_shuffle_and_fill_{up,down}(data, filling, delta[, modulo]): lanes shifted out are taken from `filling`
namespace detail {
template <class T> struct Fill { T x, f; long long a, m; };
template <class T, bool Up> void op_shuffle_fill(emu::Lane** p, int n) {
  emu::Lane* by[32] = {};
  Fill<T> in[32];
  for (int i = 0; i < n; ++i) { by[p[i]->slane] = p[i]; in[p[i]->slane] = slot_val<Fill<T>>(p[i]); }
  for (int i = 1; i < n; ++i)
    if (slot_val<Fill<T>>(p[i]).a != slot_val<Fill<T>>(p[0]).a || slot_val<Fill<T>>(p[i]).m != slot_val<Fill<T>>(p[0]).m)
      emu::fail("kernel '%s': non-uniform simd_shuffle_and_fill operands at %s:%u in simdgroup %u of threadgroup %s",
                emu::kname(), p[0]->site.file, p[0]->site.line, p[0]->sgid, emu::tgstr(emu::rt()));
  for (int i = 0; i < n; ++i) {
    int lane = (int)p[i]->slane;
    long long d = in[lane].a, m = in[lane].m > 0 ? in[lane].m : 32;
    int me = (int)(lane % m), base = (int)(lane - me);
    long long src = Up ? me - d : me + d;
    T r;
    if (src >= 0 && src < m) {
      int s = base + (int)src;
      if (by[s]) r = in[s].x; else poison(r);
    } else {
      int s = base + (int)(Up ? src + m : src - m);
      if (s >= 0 && s < 32 && by[s]) r = in[s].f; else poison(r);
    }
    slot_val<T>(p[i]) = r;
  }
}
template <class T, bool Up> inline T shuffle_fill(T x, T f, long long d, long long m, emu::Site s, const char* what) {
  static_assert(sizeof(Fill<T>) <= 256, "SIMD-group operand too large");
  emu::Lane* l = emu::coll_lane(what);
  slot_val<Fill<T>>(l) = Fill<T>{x, f, d, m};
  emu::block(l, emu::L_SIMD, s, &op_shuffle_fill<T, Up>);
  return slot_val<T>(l);
}
}  // namespace detail
template <class T, class I> inline T simd_shuffle_and_fill_up(T x, T fill, I d, emu::Site s = emu::here()) {
  return detail::shuffle_fill<T, true>(x, fill, (long long)d, 32, s, "simd_shuffle_and_fill_up"); }
template <class T, class I> inline T simd_shuffle_and_fill_down(T x, T fill, I d, emu::Site s = emu::here()) {
  return detail::shuffle_fill<T, false>(x, fill, (long long)d, 32, s, "simd_shuffle_and_fill_down"); }
template <class T, class I, class M>
inline T simd_shuffle_and_fill_up(T x, T fill, I d, M m, emu::Site s = emu::here()) {
  return detail::shuffle_fill<T, true>(x, fill, (long long)d, (long long)m, s, "simd_shuffle_and_fill_up"); }
template <class T, class I, class M>
inline T simd_shuffle_and_fill_down(T x, T fill, I d, M m, emu::Site s = emu::here()) {
  return detail::shuffle_fill<T, false>(x, fill, (long long)d, (long long)m, s, "simd_shuffle_and_fill_down"); }

template <class T> inline T simd_broadcast_first(T x, emu::Site s = emu::here()) {
  return detail::coll<T>(x, 0, s, &detail::op_first<T>, "simd_broadcast_first"); }
inline simd_vote simd_ballot(bool b, emu::Site s = emu::here()) {
  return simd_vote(detail::coll<ulong>(b, 0, s, (emu::CollOp)&detail::op_ballot, "simd_ballot")); }
inline simd_vote simd_active_threads_mask(emu::Site s = emu::here()) {
  return simd_vote(detail::coll<ulong>(0, 0, s, &detail::op_active, "simd_active_threads_mask")); }
inline bool simd_all(bool b, emu::Site s = emu::here()) {
  return detail::coll<bool>(b, 0, s, &detail::op_reduce<bool, &detail::and_>, "simd_all"); }
inline bool simd_any(bool b, emu::Site s = emu::here()) {
  return detail::coll<bool>(b, 0, s, &detail::op_reduce<bool, &detail::or_>, "simd_any"); }
inline bool simd_is_first(emu::Site s = emu::here()) {
  emu::Lane* l = emu::coll_lane("simd_is_first");
  ulong m = (ulong)simd_active_threads_mask(s);
  return (ulong)__builtin_ctzll(m) == l->slane;
}

// ---- simdgroup_matrix: every lane holds the full 8x8 tile after a load (a product leaves each lane its
// own two elements, see simdgroup_multiply_accumulate); load/store are collectives that check the
// operands are uniform, so the tile is the same in every lane ----
namespace detail {
// The two elements lane `l` holds of an 8x8 simdgroup matrix: row r, columns c and c+1 (the layout MLX
// relies on in BaseMMAFrag::get_coord).
inline void owned(unsigned l, int& r, int& c) {
  unsigned q = l / 4;
  r = (int)((q & 4) + ((l / 2) % 4));
  c = (int)((q & 2) * 2 + (l % 2) * 2);
}
inline unsigned my_lane() { emu::Runtime& R = emu::rt(); return R.cur ? R.cur->slane : 0; }
}  // namespace detail
template <class T, int R, int C> struct simdgroup_matrix {
  static_assert(R == 8 && C == 8, "only 8x8 simdgroup matrices exist");
  T e[8][8];  // every lane holds the whole tile
  vec<T, 2> te;  // thread_elements(): this lane's two elements while `dirty`
  bool dirty = false;
  simdgroup_matrix() = default;
  explicit simdgroup_matrix(T d) { for (int i = 0; i < 8; ++i) for (int j = 0; j < 8; ++j) e[i][j] = i == j ? d : T(0); }
  vec<T, 2>& thread_elements() {
    if (!dirty) { int r, c; detail::owned(detail::my_lane(), r, c); te = vec<T, 2>(e[r][c], e[r][c + 1]); dirty = true; }
    return te;
  }
  vec<T, 2> thread_elements() const {
    if (dirty) return te;
    int r, c; detail::owned(detail::my_lane(), r, c); return vec<T, 2>(e[r][c], e[r][c + 1]);
  }
};
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<bfloat, 8, 8> simdgroup_bfloat8x8;
template <class T, int R, int C> inline simdgroup_matrix<T, R, C> make_filled_simdgroup_matrix(T v) {
  simdgroup_matrix<T, R, C> m; for (int i = 0; i < 8; ++i) for (int j = 0; j < 8; ++j) m.e[i][j] = v; return m; }
namespace detail {
struct MatOp { const void* base; unsigned long epr; unsigned long ox, oy; long long tr; };
// simdgroup_load/simdgroup_store are simdgroup-wide on Apple GPUs: every element of the tile has an
// owner lane (see `owned`), so a partial or divergent simdgroup leaves some without one.
constexpr int kMatrixLanes = 32;
inline void op_matuni(emu::Lane** p, int n) {
  if (n != kMatrixLanes)
    emu::fail("kernel '%s': simdgroup_load/simdgroup_store at %s:%u reached by %d lanes of simdgroup %u of "
              "threadgroup %s: simdgroup_matrix operations need all %d lanes (each lane owns two elements of "
              "the tile), so the simdgroup must be full and the call uniform",
              emu::kname(), p[0]->site.file, p[0]->site.line, n, p[0]->sgid, emu::tgstr(emu::rt()), kMatrixLanes);
  const MatOp& a = slot_val<MatOp>(p[0]);
  for (int i = 1; i < n; ++i) {
    const MatOp& b = slot_val<MatOp>(p[i]);
    if (a.base != b.base || a.epr != b.epr || a.ox != b.ox || a.oy != b.oy || a.tr != b.tr)
      emu::fail("kernel '%s': non-uniform simdgroup_load/simdgroup_store operands at %s:%u in simdgroup %u of "
                "threadgroup %s (lanes %u and %u differ in pointer, elements_per_row, origin or transpose)",
                emu::kname(), p[0]->site.file, p[0]->site.line, p[0]->sgid, emu::tgstr(emu::rt()), p[0]->slane, p[i]->slane);
  }
  for (int i = 0; i < n; ++i) p[i]->slot[200] = i == 0;  // the first active lane performs a store
}
template <class T> void op_matsync(emu::Lane** p, int n) {
  typedef simdgroup_matrix<T, 8, 8> M;
  for (int i = 0; i < n; ++i) {
    M* src = *reinterpret_cast<M**>(p[i]->slot);
    int r, c; owned(p[i]->slane, r, c);
    for (int j = 0; j < n; ++j) {
      M* dst = *reinterpret_cast<M**>(p[j]->slot);
      dst->e[r][c] = src->e[r][c]; dst->e[r][c + 1] = src->e[r][c + 1];
    }
  }
  for (int i = 0; i < n; ++i) (*reinterpret_cast<M**>(p[i]->slot))->dirty = false;
}
// After thread_elements() writes, each lane's copy is only right in its own two elements: gather them.
template <class T> inline void sync(const simdgroup_matrix<T, 8, 8>& cm, emu::Site s) {
  simdgroup_matrix<T, 8, 8>& m = const_cast<simdgroup_matrix<T, 8, 8>&>(cm);
  if (!m.dirty) return;
  emu::Lane* l = emu::coll_lane("simdgroup_matrix thread_elements() merge");
  int r, c; owned(l->slane, r, c);
  m.e[r][c] = m.te.x; m.e[r][c + 1] = m.te.y;
  *reinterpret_cast<simdgroup_matrix<T, 8, 8>**>(l->slot) = &m;
  emu::block(l, emu::L_SIMD, s, &op_matsync<T>);
}
}  // namespace detail
template <class T, class P>
inline void simdgroup_load(simdgroup_matrix<T, 8, 8>& d, P src, ulong elements_per_row = 8,
                           ulong2 origin = ulong2(0, 0), bool transpose = false, emu::Site s = emu::here()) {
  emu::Lane* l = emu::coll_lane("simdgroup_load");
  detail::slot_val<detail::MatOp>(l) = detail::MatOp{(const void*)&*(src + 0), elements_per_row, origin.x, origin.y, transpose};
  emu::block(l, emu::L_SIMD, s, &detail::op_matuni);
  d.dirty = false;
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 8; ++c)
      d.e[r][c] = transpose ? T(src[(long long)((origin.y + c) * elements_per_row + origin.x + r)])
                            : T(src[(long long)((origin.y + r) * elements_per_row + origin.x + c)]);
}
template <class T, class P>
inline void simdgroup_store(const simdgroup_matrix<T, 8, 8>& m, P dst, ulong elements_per_row = 8,
                            ulong2 origin = ulong2(0, 0), bool transpose = false, emu::Site s = emu::here()) {
  emu::Lane* l = emu::coll_lane("simdgroup_store");
  detail::slot_val<detail::MatOp>(l) = detail::MatOp{(const void*)&*(dst + 0), elements_per_row, origin.x, origin.y, transpose};
  emu::block(l, emu::L_SIMD, s, &detail::op_matuni);
  if (m.dirty) {  // a product's result: each lane holds its own two elements only, and stores them
    int r, c; detail::owned(l->slane, r, c);
    for (int j = 0; j < 2; ++j) {
      long long i = transpose ? (long long)((origin.y + c + j) * elements_per_row + origin.x + r)
                              : (long long)((origin.y + r) * elements_per_row + origin.x + c + j);
      dst[i] = j == 0 ? m.te.x : m.te.y;
    }
    return;
  }
  if (!l->slot[200]) return;
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 8; ++c) {
      long long i = transpose ? (long long)((origin.y + c) * elements_per_row + origin.x + r)
                              : (long long)((origin.y + r) * elements_per_row + origin.x + c);
      dst[i] = m.e[r][c];
    }
}
// Each lane computes only the two elements it owns, as the hardware does (a lane that computed the whole
// tile would do 32x the simdgroup's work, which made GEMM-shaped kernels crawl here). The result stays
// lane-local (`dirty`); it is gathered only where a lane needs other lanes' elements: as the A or B
// operand of another product. As the accumulator C only the lane's own elements are read.
template <class T, class TA, class TB, class TC>
inline void simdgroup_multiply_accumulate(simdgroup_matrix<T, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                                          const simdgroup_matrix<TB, 8, 8>& b, const simdgroup_matrix<TC, 8, 8>& c,
                                          emu::Site s = emu::here()) {
  detail::sync(a, s); detail::sync(b, s);
  int r, col; detail::owned(detail::my_lane(), r, col);
  float acc[2];
  for (int j = 0; j < 2; ++j) {
    acc[j] = float(c.dirty ? (j == 0 ? c.te.x : c.te.y) : c.e[r][col + j]);
    for (int k = 0; k < 8; ++k) acc[j] = __builtin_fmaf(float(a.e[r][k]), float(b.e[k][col + j]), acc[j]);
  }
  d.te = vec<T, 2>(T(acc[0]), T(acc[1]));
  d.dirty = true;
}
template <class T, class TA, class TB>
inline void simdgroup_multiply(simdgroup_matrix<T, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                               const simdgroup_matrix<TB, 8, 8>& b, emu::Site s = emu::here()) {
  simdgroup_matrix<T, 8, 8> z = make_filled_simdgroup_matrix<T, 8, 8>(T(0));
  simdgroup_multiply_accumulate(d, a, b, z, s);
}

// ---- atomics: real atomic read-modify-writes (threadgroups of barrier-free kernels may run on several
// OS threads), done as compare-and-swap on the value's bits so float/half atomics work too ----
enum memory_order { memory_order_relaxed, memory_order_acquire, memory_order_release, memory_order_acq_rel, memory_order_seq_cst };
template <class T> struct atomic { T v; };
typedef atomic<int> atomic_int;
typedef atomic<uint> atomic_uint;
typedef atomic<float> atomic_float;
typedef atomic<bool> atomic_bool;
typedef atomic<ulong> atomic_ulong;
typedef atomic<long> atomic_long;
namespace detail {
template <class A> inline A* aptr(A* p) { return p; }
template <class A> inline A* aptr(const emu::dptr<A>& p) { return p.get(); }
template <class T> using ubits = std::conditional_t<sizeof(T) == 1, uint8_t, std::conditional_t<sizeof(T) == 2, uint16_t,
                                 std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;
template <class T> inline ubits<T> to_bits(T v) { ubits<T> u; __builtin_memcpy(&u, &v, sizeof(T)); return u; }
template <class T> inline T from_bits(ubits<T> u) { T v; __builtin_memcpy(&v, &u, sizeof(T)); return v; }
template <class T, class F> inline T atomic_update(T* p, F f) {
  ubits<T>* up = reinterpret_cast<ubits<T>*>(p);
  ubits<T> old = __atomic_load_n(up, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(up, &old, to_bits<T>(f(from_bits<T>(old))), true, __ATOMIC_SEQ_CST,
                                      __ATOMIC_RELAXED)) {
  }
  return from_bits<T>(old);
}
}  // namespace detail
#define EMU_ATOMIC_RMW(name, expr)                                                                  \
  template <class P, class U> inline auto name(P obj, U val, memory_order = memory_order_relaxed) { \
    auto* a = detail::aptr(obj); using T = decltype(a->v); T x = T(val);                            \
    return detail::atomic_update<T>(&a->v, [x](T old) { return T(expr); }); }
EMU_ATOMIC_RMW(atomic_fetch_add_explicit, old + x) EMU_ATOMIC_RMW(atomic_fetch_sub_explicit, old - x)
EMU_ATOMIC_RMW(atomic_fetch_and_explicit, old & x) EMU_ATOMIC_RMW(atomic_fetch_or_explicit, old | x)
EMU_ATOMIC_RMW(atomic_fetch_xor_explicit, old ^ x) EMU_ATOMIC_RMW(atomic_fetch_min_explicit, (x < old ? x : old))
EMU_ATOMIC_RMW(atomic_fetch_max_explicit, (old < x ? x : old)) EMU_ATOMIC_RMW(atomic_exchange_explicit, ((void)old, x))
#undef EMU_ATOMIC_RMW
template <class P> inline auto atomic_load_explicit(P obj, memory_order = memory_order_relaxed) {
  auto* a = detail::aptr(obj); using T = decltype(a->v);
  return detail::from_bits<T>(__atomic_load_n(reinterpret_cast<detail::ubits<T>*>(&a->v), __ATOMIC_SEQ_CST)); }
template <class P, class U> inline void atomic_store_explicit(P obj, U val, memory_order = memory_order_relaxed) {
  auto* a = detail::aptr(obj); using T = decltype(a->v);
  __atomic_store_n(reinterpret_cast<detail::ubits<T>*>(&a->v), detail::to_bits<T>(T(val)), __ATOMIC_SEQ_CST); }
template <class P, class E, class U>
inline bool atomic_compare_exchange_weak_explicit(P obj, E* expected, U desired, memory_order = memory_order_relaxed,
                                                  memory_order = memory_order_relaxed) {
  auto* a = detail::aptr(obj); using T = decltype(a->v);
  detail::ubits<T> exp = detail::to_bits<T>(T(*expected));
  bool ok = __atomic_compare_exchange_n(reinterpret_cast<detail::ubits<T>*>(&a->v), &exp, detail::to_bits<T>(T(desired)),
                                        false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  if (!ok) *expected = E(detail::from_bits<T>(exp));
  return ok;
}
template <class P, class E, class U>
inline bool atomic_compare_exchange_strong_explicit(P obj, E* expected, U desired, memory_order m1 = memory_order_relaxed,
                                                    memory_order m2 = memory_order_relaxed) {
  return atomic_compare_exchange_weak_explicit(obj, expected, desired, m1, m2); }
}  // namespace metal
namespace emu { template <class T> struct scal<metal::atomic<T>> { static constexpr int code = scal<T>::code, lanes = 1; }; }
