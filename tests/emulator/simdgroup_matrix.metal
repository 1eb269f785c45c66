#include <metal_stdlib>
#include <metal_simdgroup_matrix>
using namespace metal;

// One simdgroup computes one 8x8 tile of C = A * B (row-major, M x K times K x N).
template <typename T>
kernel void sg_gemm(device const T* A [[buffer(0)]],
                    device const T* B [[buffer(1)]],
                    device T* C [[buffer(2)]],
                    constant uint& N [[buffer(3)]],
                    constant uint& K [[buffer(4)]],
                    uint tg [[threadgroup_position_in_grid]],
                    uint sg [[simdgroup_index_in_threadgroup]],
                    uint dtpg [[dispatch_threads_per_threadgroup]]) {
    uint t = tg * (dtpg / 32) + sg;   // a partial last group has fewer simdgroups
    uint tm = t / (N / 8), tn = t % (N / 8);
    simdgroup_matrix<T, 8, 8> acc = make_filled_simdgroup_matrix<T, 8, 8>(T(0));
    for (uint k = 0; k < K; k += 8) {
        simdgroup_matrix<T, 8, 8> a;
        simdgroup_matrix<T, 8, 8> b;
        simdgroup_load(a, A + tm * 8 * K + k, K);
        simdgroup_load(b, B + k * N + tn * 8, N);
        simdgroup_multiply_accumulate(acc, a, b, acc);
    }
    simdgroup_store(acc, C + tm * 8 * N + tn * 8, N);
}
template [[host_name("sg_gemm_float")]] kernel void sg_gemm<float>(
    device const float*, device const float*, device float*, constant uint&, constant uint&,
    uint, uint, uint);
template [[host_name("sg_gemm_half")]] kernel void sg_gemm<half>(
    device const half*, device const half*, device half*, constant uint&, constant uint&,
    uint, uint, uint);
template [[host_name("sg_gemm_bfloat")]] kernel void sg_gemm<bfloat>(
    device const bfloat*, device const bfloat*, device bfloat*, constant uint&, constant uint&,
    uint, uint, uint);

// The same GEMM staged through threadgroup memory, with matrix origins.
kernel void sg_gemm_tg(device const float* A [[buffer(0)]],
                       device const float* B [[buffer(1)]],
                       device float* C [[buffer(2)]],
                       constant uint& N [[buffer(3)]],
                       constant uint& K [[buffer(4)]],
                       uint tg [[threadgroup_position_in_grid]],
                       ushort lane [[thread_index_in_simdgroup]]) {
    threadgroup float As[8 * 16];
    threadgroup float Bs[16 * 8];
    uint tm = tg / (N / 8), tn = tg % (N / 8);
    simdgroup_float8x8 acc(0.0f);
    for (uint k = 0; k < K; k += 16) {
        for (uint e = lane; e < 128; e += 32) {
            As[e] = A[(tm * 8 + e / 16) * K + k + e % 16];
            Bs[e] = B[(k + e / 8) * N + tn * 8 + e % 8];
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        simdgroup_float8x8 a0, a1, b0, b1;
        simdgroup_load(a0, As, 16, ulong2(0, 0));
        simdgroup_load(a1, As, 16, ulong2(8, 0));
        simdgroup_load(b0, Bs, 8, ulong2(0, 0));
        simdgroup_load(b1, Bs, 8, ulong2(0, 8));
        simdgroup_multiply_accumulate(acc, a0, b0, acc);
        simdgroup_multiply_accumulate(acc, a1, b1, acc);
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    simdgroup_store(acc, C + tm * 8 * N + tn * 8, N);
}

kernel void sg_variants(device const float* M16 [[buffer(0)]],
                        device float* out [[buffer(1)]],
                        uint i [[thread_position_in_grid]]) {
    simdgroup_float8x8 m;
    simdgroup_load(m, M16, 16, ulong2(2, 3));                 // x = column 2, y = row 3
    simdgroup_store(m, out + 0, 8);
    simdgroup_float8x8 t;
    simdgroup_load(t, M16, 16, ulong2(0, 0), true);           // transposed load
    simdgroup_store(t, out + 64, 8);
    simdgroup_float8x8 d = simdgroup_float8x8(3.0f);          // diagonal
    simdgroup_store(d, out + 128, 8);
    simdgroup_float8x8 f = make_filled_simdgroup_matrix<float, 8, 8>(1.5f);
    simdgroup_store(f, out + 192, 8);
    simdgroup_float8x8 p;
    simdgroup_multiply(p, m, d);                              // m * 3I
    simdgroup_store(p, out + 256, 8);
    simdgroup_store(m, out + 320, 16, ulong2(8, 0));          // right half of an 8x16 block
    simdgroup_store(m, out + 448, 8, ulong2(0, 0), true);     // transposed store
    simdgroup_float8x8 q;
    simdgroup_multiply_accumulate(q, m, t, f);                // m * t + f
    simdgroup_store(q, out + 512, 8);
}

// Each lane writes which elements it owns (thread_elements), then scales them in place and
// stores the tile: the per-lane layout is observable only this way.
kernel void sg_elements(device const float* M [[buffer(0)]],
                        device float* owned [[buffer(1)]],
                        device float* out [[buffer(2)]],
                        ushort lane [[thread_index_in_simdgroup]]) {
    simdgroup_float8x8 m;
    simdgroup_load(m, M, 8);
    float2 e = m.thread_elements();
    owned[2 * lane] = e.x;
    owned[2 * lane + 1] = e.y;
    m.thread_elements() *= 2.0f;
    simdgroup_store(m, out, 8);
    // the changed tile as a factor: its new elements, not the ones loaded
    simdgroup_float8x8 l, p;
    simdgroup_load(l, M, 8);
    simdgroup_multiply(p, m, l);
    simdgroup_store(p, out + 64, 8);
}

// A load reached by a partial simdgroup (the CPU emulator refuses it).
kernel void sg_partial(device const float* M [[buffer(0)]],
                       device float* out [[buffer(1)]]) {
    simdgroup_float8x8 m;
    simdgroup_load(m, M, 8);
    simdgroup_store(m, out, 8);
}

// Mixed operand types: half inputs, float accumulator; a transposed store at an origin.
kernel void sg_mixed(device const half* A [[buffer(0)]],
                     device const half* B [[buffer(1)]],
                     device const float* C [[buffer(2)]],
                     device float* D [[buffer(3)]]) {
    simdgroup_half8x8 a, b;
    simdgroup_float8x8 c, d;
    simdgroup_load(a, A, 8);
    simdgroup_load(b, B, 16, ulong2(4, 2), true);
    simdgroup_load(c, C, 8);
    simdgroup_multiply_accumulate(d, a, b, c);
    simdgroup_store(d, D, 12, ulong2(3, 1), true);
}

// A product's result used again: as the A operand and the accumulator of a second product, through
// thread_elements(), and stored transposed (each lane of a product holds only its own elements).
kernel void sg_chain(device const float* M [[buffer(0)]],
                     device const float* T [[buffer(1)]],
                     device float* out [[buffer(2)]]) {
    simdgroup_float8x8 m, t, p, q;
    simdgroup_load(m, M, 8);
    simdgroup_load(t, T, 8);
    simdgroup_multiply(p, m, t);
    simdgroup_store(p, out + 0, 8);
    simdgroup_multiply_accumulate(q, p, m, p);
    q.thread_elements() += 1.0f;
    simdgroup_store(q, out + 64, 8, ulong2(0, 0), true);
    simdgroup_multiply_accumulate(p, m, q, p);
    simdgroup_store(p, out + 128, 8);
}
