// The other cache families in CUDA C++ (rtp_ref/kernels/cuda_families.py): the MHA paged write
// (reshape_and_cache_flash, contract in rtp_ref/kv/mha_paged.py) and the DeepSeek indexer write
// (indexer_k_quant_and_cache, contract in rtp_ref/kv/indexer.py).
//
// Both kernels split a warp into groups of p.lanes lanes (a power of two up to 32, host-chosen so that one
// V-value vector a lane covers a row when it can: 16 lanes for a 128-wide head at V = 8); the 32 / p.lanes groups
// take consecutive rows side by side, and a warp makes p.rows such passes, every pass's loads issued before any
// store. Each lane moves V consecutive values (V = 8, 4, 2 or 1, the widest the host finds every address and
// stride aligned for) by one vector load and one vector store, striding over the row by p.lanes * V.
// MHA: a row is one (token, head); the cache order (NHD or HND) is only strides, in elements. auto moves the 16-bit
// bits; fp8 stores the codes of __fdiv_rn(x, scale) (correctly rounded, as vLLM's x / scale).
// Indexer: a row is one (token, quant slice); its amax folds with fmaxf (NaN dropped, as vLLM's kernel) and
// shuffles within the group, scale = __fdiv_rn(fmaxf(amax, floor), divisor), a power of two for ue8m0 (values are
// then multiplied by its exact reciprocal: the same correctly rounded quotient without a division); the group's
// first lane stores the four scale bytes, as one word where the address allows.
// fp8 codes come from the hardware's saturating conversion (e4m3 or e5m2, p.hardware) or the software encoder of
// fp8_convert.cuh. A slot past the cache is written nowhere and sets the flag word (rtp_ref/kernels/input_flags.py):
// checking slots on the host would sync the stream. All offsets are int64. The host side is plain C, through ctypes.

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "fp8_convert.cuh"

// Mirror the ctypes Structures in cuda_families.py field by field: 8-byte fields, no padding.
struct RtpRefMhaParams {
  int64_t key, value, key_cache, value_cache, slots, k_scale, v_scale;  // device addresses
  int64_t num_tokens, heads, head_size, key_t, key_h, value_t, value_h;
  int64_t kc_block, kc_page, kc_head, vc_block, vc_page, vc_head, block_size;
  int64_t fp8, k_scale_step, v_scale_step, input_fp16;  // a scale step: 1 per head, 0 per tensor
  int64_t hardware;  // the fp8 conversion: kSoftware, kHardwareE4m3 or kHardwareE5m2
  int64_t man_bits, emin, max_code, nan_code, neg_zero, has_inf, inf_code, satfinite;
  int64_t capacity, flags;  // slots in the caches; a device int32 set to 1 when a slot >= capacity is skipped
  int64_t vec;              // values a lane moves at once: 8, 4, 2 or 1 (every address and stride aligned for it)
  int64_t rows;             // passes a warp makes: 1, 2 or 4
  int64_t lanes;            // lanes a (token, head) row: 1, 2, 4, 8, 16 or 32
};

struct RtpRefIndexerParams {
  int64_t k, cache, slots;  // device addresses
  int64_t num_tokens, k_row, block_bytes, block_size, head_dim, quant, n_slices, ue8m0;
  int64_t input_fp16, hardware;  // hardware: as RtpRefMhaParams's
  int64_t man_bits, emin, max_code, nan_code, neg_zero, has_inf, inf_code, satfinite;
  int64_t capacity, flags;
  int64_t vec;   // values a lane moves at once: 8, 4, 2 or 1 (addresses and strides aligned for it)
  int64_t rows;   // passes a warp makes: 1, 2 or 4
  int64_t lanes;  // lanes a (token, quant slice) row: 1, 2, 4, 8, 16 or 32
  double divisor, floor_;
};

namespace {

using namespace rtp_ref_fp8;

constexpr int kMhaWarps = 4;      // warps of one MHA thread block
constexpr int kIndexerWarps = 4;  // warps of one indexer thread block
// p.hardware: the fp8 conversion (cuda_build.py's HARDWARE_* constants)
constexpr int kSoftware = 0, kHardwareE4m3 = 1, kHardwareE5m2 = 2;

__device__ __forceinline__ float widen(uint16_t bits, bool fp16) {
  return fp16 ? __half2float(__ushort_as_half(bits)) : __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

// Whether a (token's) slot is written: not padding and inside the cache; a slot past it is flagged by its row's
// first lane (`leader`).
__device__ __forceinline__ bool slot_written(int64_t slot, int64_t capacity, int64_t flags, bool leader) {
  if (slot >= capacity && leader) *reinterpret_cast<int*>(flags) = 1;
  return slot >= 0 && slot < capacity;
}

__device__ __forceinline__ uint8_t fp8_code(float q, int64_t hardware, const Fmt& f) {
  if (hardware == kSoftware) return fp8_software(q, f);
  // The hardware's saturating conversion (cvt.rn.satfinite); NaN written as the canonical code.
  const uint8_t code = static_cast<uint8_t>(
      __nv_cvt_float_to_fp8(q, __NV_SATFINITE, hardware == kHardwareE4m3 ? __NV_E4M3 : __NV_E5M2));
  return q != q ? static_cast<uint8_t>(f.nan_code) : code;
}

__device__ __forceinline__ Fmt fmt_of(int64_t man_bits, int64_t emin, int64_t max_code, int64_t nan_code,
                                      int64_t inf_code, int64_t neg_zero, int64_t has_inf, int64_t satfinite) {
  return Fmt{static_cast<int>(man_bits), static_cast<int>(emin), static_cast<int>(max_code),
             static_cast<int>(nan_code), static_cast<int>(inf_code), neg_zero != 0, has_inf != 0, satfinite != 0};
}

// N bytes moved as one access (the host checked the alignment)
template <int N>
struct alignas(N) Chunk {
  uint8_t b[N];
};

// N bytes loaded as one read-only access (ld.global.nc): the kernel never writes its inputs, so the compiler may
// issue these loads ahead of the stores before them (a plain load could alias the flag word or a cache store)
template <int N> struct Word;
template <> struct Word<16> { using T = uint4; };
template <> struct Word<8> { using T = uint2; };
template <> struct Word<4> { using T = unsigned int; };
template <> struct Word<2> { using T = unsigned short; };
template <> struct Word<1> { using T = unsigned char; };

template <int N>
__device__ __forceinline__ Chunk<N> load_input(const void* at) {
  const typename Word<N>::T word = __ldg(reinterpret_cast<const typename Word<N>::T*>(at));
  Chunk<N> chunk;
  memcpy(&chunk, &word, N);
  return chunk;
}

// N bytes stored as one global access: the cache pointers come out of a row's struct, where the compiler no longer
// knows they are global and would emit generic stores
template <int N>
__device__ __forceinline__ void store_output(void* at, const Chunk<N>& chunk) {
  typename Word<N>::T word;
  memcpy(&word, &chunk, N);
  __stwb(reinterpret_cast<typename Word<N>::T*>(at), word);
}

// a / b for 0 <= a and 0 < b: in 32 bits when both fit (a 64-bit division is a long software sequence, and the
// kernels divide a few times a row), in 64 otherwise, so a cache past 2^31 slots or rows stays exact
__device__ __forceinline__ int64_t quotient(int64_t a, int64_t b) {
  if (((a | b) >> 31) == 0) return static_cast<int64_t>(static_cast<uint32_t>(a) / static_cast<uint32_t>(b));
  return a / b;
}

// The slot of row `row`'s token (`per_token` rows a token), through the read-only path; -1 (padding: nothing
// written) past the last of `rows`
__device__ __forceinline__ int64_t load_slot(int64_t slots, int64_t row, int64_t rows, int64_t per_token) {
  if (row >= rows) return -1;
  return __ldg(reinterpret_cast<const long long*>(slots) + quotient(row, per_token));
}

// The i-th 16-bit value of a chunk (little-endian bytes)
template <int N>
__device__ __forceinline__ uint16_t bits16(const Chunk<N>& in, int i) {
  return static_cast<uint16_t>(in.b[2 * i] | (in.b[2 * i + 1] << 8));
}

// Where a warp's lane works: its lane in its row's group, and its group's first row (the rows of pass r follow at
// first + r * side).
struct Place {
  int lane;       // 0 .. lanes - 1
  int64_t first;  // the group's row in the warp's first pass
  int64_t side;   // groups side by side in a warp (32 / lanes): the row step between passes
};

template <int kWarps, int R>
__device__ __forceinline__ Place place(int64_t lanes) {
  const int64_t side = 32 / lanes;
  const int64_t warp = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.y;
  return Place{static_cast<int>(threadIdx.x & (lanes - 1)), warp * R * side + threadIdx.x / lanes, side};
}

// One (token, head) row of the MHA write: where its key and value come from and go, and their scales.
struct MhaRow {
  const uint16_t *key, *value;
  uint8_t *kc, *vc;
  float ks, vs;
  bool written;  // a real row whose slot is inside the cache
};

__device__ __forceinline__ MhaRow mha_row(const RtpRefMhaParams& p, int64_t row, int64_t slot, bool leader) {
  MhaRow r{};
  if (!slot_written(slot, p.capacity, p.flags, leader)) return r;
  const int64_t t = quotient(row, p.heads), h = row - t * p.heads;
  const int64_t block = quotient(slot, p.block_size), page = slot - block * p.block_size;
  const int64_t elem = p.fp8 ? 1 : 2;  // cache element bytes
  r.key = reinterpret_cast<const uint16_t*>(p.key) + t * p.key_t + h * p.key_h;
  r.value = reinterpret_cast<const uint16_t*>(p.value) + t * p.value_t + h * p.value_h;
  r.kc = reinterpret_cast<uint8_t*>(p.key_cache) + (block * p.kc_block + page * p.kc_page + h * p.kc_head) * elem;
  r.vc = reinterpret_cast<uint8_t*>(p.value_cache) + (block * p.vc_block + page * p.vc_page + h * p.vc_head) * elem;
  r.ks = p.fp8 ? __ldg(reinterpret_cast<const float*>(p.k_scale) + h * p.k_scale_step) : 1.0f;
  r.vs = p.fp8 ? __ldg(reinterpret_cast<const float*>(p.v_scale) + h * p.v_scale_step) : 1.0f;
  r.written = true;
  return r;
}

// V values at dst[d..]: the 16-bit bits as they are, or their fp8 codes of __fdiv_rn(x, s).
template <int V>
__device__ __forceinline__ void mha_store(const Chunk<2 * V>& in, uint8_t* dst, int64_t d, float s, const Fmt& f,
                                          const RtpRefMhaParams& p) {
  if (p.fp8) {
    Chunk<V> out;
#pragma unroll
    for (int i = 0; i < V; ++i) out.b[i] = fp8_code(__fdiv_rn(widen(bits16(in, i), p.input_fp16), s), p.hardware, f);
    store_output<V>(dst + d, out);
  } else {
    store_output<2 * V>(dst + 2 * d, in);
  }
}

// R passes a warp, 32 / p.lanes (token, head) rows side by side in each: their slots are loaded together, then every
// row's key and value chunk before any is stored, so a warp waits on two memory latencies, not two a row.
template <int V, int R>
__global__ void __launch_bounds__(32 * kMhaWarps) mha_paged_write(const RtpRefMhaParams p) {
  const Place at = place<kMhaWarps, R>(p.lanes);
  int64_t slots[R];
#pragma unroll
  for (int r = 0; r < R; ++r) slots[r] = load_slot(p.slots, at.first + r * at.side, p.num_tokens * p.heads, p.heads);
  MhaRow rows[R];
#pragma unroll
  for (int r = 0; r < R; ++r) rows[r] = mha_row(p, at.first + r * at.side, slots[r], at.lane == 0);
  const Fmt f = fmt_of(p.man_bits, p.emin, p.max_code, p.nan_code, p.inf_code, p.neg_zero, p.has_inf, p.satfinite);
  for (int64_t d = static_cast<int64_t>(at.lane) * V; d < p.head_size; d += p.lanes * V) {
    Chunk<2 * V> keys[R], values[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (!rows[r].written) continue;
      keys[r] = load_input<2 * V>(rows[r].key + d);
      values[r] = load_input<2 * V>(rows[r].value + d);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (!rows[r].written) continue;
      mha_store<V>(keys[r], rows[r].kc, d, rows[r].ks, f, p);
      mha_store<V>(values[r], rows[r].vc, d, rows[r].vs, f, p);
    }
  }
}

template <int V>
__device__ __forceinline__ float chunk_amax(float amax, const Chunk<2 * V>& in, bool fp16) {
#pragma unroll
  for (int i = 0; i < V; ++i) amax = fmaxf(amax, fabsf(widen(bits16(in, i), fp16)));  // fmaxf drops NaN
  return amax;
}

// R passes a warp, 32 / p.lanes (token, quant slice) rows side by side in each (p.lanes * V <= quant: the host
// picks p.lanes so, for the power-of-two quant blocks the kernel takes). Pass 1 loads every row's V-value chunks
// (lane l takes values l*V.., then p.lanes*V further on), keeping the first in registers, and folds each row's
// amax; shuffles fold the group's lanes; pass 2 quantises the kept chunk and reloads any further one (cache hits),
// so the registers a lane needs do not grow with the quant block.
template <int V, int R>
__global__ void __launch_bounds__(32 * kIndexerWarps) indexer_write(const RtpRefIndexerParams p) {
  const Place at = place<kIndexerWarps, R>(p.lanes);
  const int64_t rows = p.num_tokens * p.n_slices, step = p.lanes * V, d0 = static_cast<int64_t>(at.lane) * V;
  int64_t slot[R];
#pragma unroll
  for (int r = 0; r < R; ++r) slot[r] = load_slot(p.slots, at.first + r * at.side, rows, p.n_slices);
  bool written[R];
  int64_t j[R];  // the row's quant slice
  const uint16_t* k[R];
  Chunk<2 * V> head[R];  // the lane's first chunk of the row
  float amax[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    written[r] = slot_written(slot[r], p.capacity, p.flags, at.lane == 0);  // the same for the whole group
    const int64_t row = at.first + r * at.side, t = quotient(row, p.n_slices);
    j[r] = row - t * p.n_slices;
    k[r] = reinterpret_cast<const uint16_t*>(p.k) + t * p.k_row + j[r] * p.quant;
    if (written[r]) head[r] = load_input<2 * V>(k[r] + d0);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) amax[r] = written[r] ? chunk_amax<V>(0.0f, head[r], p.input_fp16) : 0.0f;
  for (int64_t d = d0 + step; d < p.quant; d += step) {
    Chunk<2 * V> in[R];
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (written[r]) in[r] = load_input<2 * V>(k[r] + d);
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (written[r]) amax[r] = chunk_amax<V>(amax[r], in[r], p.input_fp16);
  }
  // every lane of the warp shuffles (rows not written fold zeros): the xor offsets stay inside a group
#pragma unroll
  for (int r = 0; r < R; ++r)
    for (int64_t offset = p.lanes / 2; offset > 0; offset /= 2)
      amax[r] = fmaxf(amax[r], __shfl_xor_sync(0xffffffffu, amax[r], static_cast<int>(offset)));
  const Fmt f = fmt_of(p.man_bits, p.emin, p.max_code, p.nan_code, p.inf_code, p.neg_zero, p.has_inf, p.satfinite);
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (!written[r]) continue;
    float scale = __fdiv_rn(fmaxf(amax[r], static_cast<float>(p.floor_)), static_cast<float>(p.divisor));
    bool power_of_two = false;
    if (p.ue8m0) {
      const int byte = ue8m0_ceil(scale);
      power_of_two = byte != 0xFF;  // 0xFF only for an infinite scale: keep it
      scale = power_of_two ? ue8m0_value(byte) : scale;
    }
    // x * (1 / 2^e) is x / 2^e exactly rounded (the reciprocal of a power of two is exact, subnormal or not)
    const float reciprocal = power_of_two ? __frcp_rn(scale) : 0.0f;
    const int64_t block = quotient(slot[r], p.block_size), row = slot[r] - block * p.block_size;
    uint8_t* base = reinterpret_cast<uint8_t*>(p.cache) + block * p.block_bytes;
    uint8_t* codes = base + row * p.head_dim + j[r] * p.quant;
    for (int64_t d = d0; d < p.quant; d += step) {
      const Chunk<2 * V> in = d == d0 ? head[r] : load_input<2 * V>(k[r] + d);
      Chunk<V> out;
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const float x = widen(bits16(in, i), p.input_fp16);
        out.b[i] = fp8_code(power_of_two ? __fmul_rn(x, reciprocal) : __fdiv_rn(x, scale), p.hardware, f);
      }
      store_output<V>(codes + d, out);
    }
    if (at.lane == 0) {
      const uint32_t bits = __float_as_uint(scale);
      uint8_t* scale_at = base + p.block_size * p.head_dim + (row * p.n_slices + j[r]) * 4;
      if ((reinterpret_cast<uintptr_t>(scale_at) & 3) == 0) {
        __stwb(reinterpret_cast<unsigned int*>(scale_at), bits);
      } else {
        for (int b = 0; b < 4; ++b) scale_at[b] = static_cast<uint8_t>(bits >> (8 * b));  // no alignment asked
      }
    }
  }
}

// The kernels of one family by (V, R); launch_rows picks the instance the host's p.vec and p.rows name.
struct MhaKernel {
  template <int V, int R>
  static void launch(dim3 grid, dim3 block, cudaStream_t s, const RtpRefMhaParams& p) {
    mha_paged_write<V, R><<<grid, block, 0, s>>>(p);
  }
};
struct IndexerKernel {
  template <int V, int R>
  static void launch(dim3 grid, dim3 block, cudaStream_t s, const RtpRefIndexerParams& p) {
    indexer_write<V, R><<<grid, block, 0, s>>>(p);
  }
};

template <typename K, int R, typename P>
void launch_vec(const P& p, dim3 grid, dim3 block, cudaStream_t s) {
  switch (p.vec) {
    case 8: K::template launch<8, R>(grid, block, s, p); break;
    case 4: K::template launch<4, R>(grid, block, s, p); break;
    case 2: K::template launch<2, R>(grid, block, s, p); break;
    default: K::template launch<1, R>(grid, block, s, p); break;
  }
}

// One launch over `rows` rows: p.rows passes of 32 / p.lanes rows a warp, kWarps warps a block.
template <typename P, int kWarps, typename K>
int launch_rows(const P& p, int64_t rows, void* stream) {
  const int64_t per_block = kWarps * p.rows * (32 / p.lanes);
  const dim3 grid(static_cast<unsigned>((rows + per_block - 1) / per_block)), block(32, kWarps);
  const auto s = static_cast<cudaStream_t>(stream);
  switch (p.rows) {
    case 4: launch_vec<K, 4>(p, grid, block, s); break;
    case 2: launch_vec<K, 2>(p, grid, block, s); break;
    default: launch_vec<K, 1>(p, grid, block, s); break;
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

extern "C" {

int rtp_ref_mha_paged_write(const RtpRefMhaParams* p, void* stream) {
  if (p->num_tokens == 0) return 0;
  return launch_rows<RtpRefMhaParams, kMhaWarps, MhaKernel>(*p, p->num_tokens * p->heads, stream);
}

int rtp_ref_indexer_write(const RtpRefIndexerParams* p, void* stream) {
  if (p->num_tokens == 0) return 0;
  return launch_rows<RtpRefIndexerParams, kIndexerWarps, IndexerKernel>(*p, p->num_tokens * p->n_slices, stream);
}

const char* rtp_ref_families_error_string(int code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }

}  // extern "C"
