// The other cache families in CUDA C++ (rtp_ref/kernels/cuda_mha_indexer.py): the MHA paged write
// (reshape_and_cache_flash, contract in rtp_ref/kv/mha_paged.py) and the DeepSeek indexer write
// (indexer_k_quant_and_cache, contract in rtp_ref/kv/indexer.py).
//
// Both kernels split a warp into groups of p.lanes lanes (a power of two up to 32, host-chosen so that one
// V-value vector a lane covers a row when it can: 16 lanes for a 128-wide head at V = 8), the 32 / p.lanes groups
// side by side, every load of a step issued before any store. Each lane moves V consecutive values (V = 8, 4, 2 or
// 1, the widest the host finds every address and stride aligned for) by one vector load and one vector store,
// striding over the row by p.lanes * V. The conversion and the input type are template parameters.
// MHA: p.rows tokens a warp, the groups taking a token's heads side by side and stepping over them; the cache order
// (NHD or HND) is only strides, in elements. auto moves the 16-bit bits; fp8 stores the codes of
// __fdiv_rn(x, scale) (correctly rounded, as vLLM's x / scale).
// Indexer: p.rows passes a warp over (token, quant slice) rows, the groups taking consecutive rows; a row's amax
// folds with fmaxf (NaN dropped, as vLLM's kernel) and shuffles within the group, scale =
// __fdiv_rn(fmaxf(amax, floor), divisor), a power of two for ue8m0 (values are then multiplied by its exact
// reciprocal: the same correctly rounded quotient without a division); the group's first lane stores the four
// scale bytes, as one word where the address allows.
// fp8 codes come from the hardware's saturating conversion (e4m3 or e5m2, p.hardware), whose NaN is kept as the
// instruction writes it (e5m2: 0x7F on an H200, platforms/cuda-sm90.toml [hardware] fp8_nan; any NaN encoding of the
// format is the contract's, rtp_ref.fp8.elements.NanPolicy), or the software encoder of fp8_convert.cuh. A slot past the cache is written nowhere and sets the flag word (rtp_ref/kernels/input_flags.py):
// checking slots on the host would sync the stream. All offsets are int64. The host side is plain C, through ctypes.

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "fp8_convert.cuh"

// Mirror the ctypes Structures in cuda_mha_indexer.py field by field: 8-byte fields, no padding.
struct RtpRefMhaParams {
  int64_t key, value, key_cache, value_cache, slots, k_scale, v_scale;  // device addresses
  int64_t num_tokens, heads, head_size, key_t, key_h, value_t, value_h;
  int64_t kc_block, kc_page, kc_head, vc_block, vc_page, vc_head, block_size;
  int64_t fp8, k_scale_step, v_scale_step, input_fp16;  // a scale step: 1 per head, 0 per tensor
  int64_t hardware;  // the fp8 conversion: kSoftware, kHardwareE4m3 or kHardwareE5m2
  int64_t man_bits, emin, max_code, nan_code, neg_zero, has_inf, inf_code, satfinite;
  int64_t capacity, flags;  // slots in the caches; a device int32 set to 1 when a slot >= capacity is skipped
  int64_t vec;              // values a lane moves at once: 8, 4, 2 or 1 (every address and stride aligned for it)
  int64_t rows;             // tokens a warp: 1 or 2
  int64_t lanes;            // lanes a head: 1, 2, 4, 8, 16 or 32
  int64_t split;            // warps sharing those tokens' heads (more warps for a few tokens): 1 or more
};

struct RtpRefIndexerParams {
  int64_t k, cache, slots;  // device addresses
  int64_t num_tokens, k_row, block_bytes, block_size, head_dim, quant, n_slices, ue8m0;
  int64_t input_fp16, hardware;  // hardware: as RtpRefMhaParams's
  int64_t man_bits, emin, max_code, nan_code, neg_zero, has_inf, inf_code, satfinite;
  int64_t capacity, flags;
  int64_t vec;   // values a lane moves at once: 8, 4, 2 or 1 (addresses and strides aligned for it)
  int64_t rows;   // passes a warp makes: 1 or 2
  int64_t lanes;  // lanes a (token, quant slice) row: 1, 2, 4, 8, 16 or 32
  double divisor, floor_;
};

namespace {

using namespace rtp_ref_fp8;

constexpr int kMhaWarps = 4;      // warps of one MHA thread block
constexpr int kIndexerWarps = 4;  // warps of one indexer thread block
// The conversion a kernel instance is compiled for (a template parameter: a runtime choice per value costs
// branches that serialise the values; ids as cuda_build.py's HARDWARE_* for the fp8 ones): the integer encoder,
// cvt.rn.satfinite to e4m3 or e5m2, or (MHA auto) the 16-bit bits copied.
constexpr int kSoftware = 0, kHardwareE4m3 = 1, kHardwareE5m2 = 2, kCopy = 3;

// Whether a (token's) slot is written: not padding and inside the cache; a slot past it is flagged by its row's
// first lane (`leader`).
__device__ __forceinline__ bool slot_written(int64_t slot, int64_t capacity, int64_t flags, bool leader) {
  if (slot >= capacity && leader) *reinterpret_cast<int*>(flags) = 1;
  return slot >= 0 && slot < capacity;
}

__device__ __forceinline__ Fmt fmt_of(int64_t man_bits, int64_t emin, int64_t max_code, int64_t nan_code,
                                      int64_t inf_code, int64_t neg_zero, int64_t has_inf, int64_t satfinite) {
  return Fmt{static_cast<int>(man_bits), static_cast<int>(emin), static_cast<int>(max_code),
             static_cast<int>(nan_code), static_cast<int>(inf_code), neg_zero != 0, has_inf != 0, satfinite != 0};
}

// The access of N bytes (N = 16, 8, 4, 2, 1), one load or store instruction.
template <int N> struct Word;
template <> struct Word<16> { using T = uint4; };
template <> struct Word<8> { using T = uint2; };
template <> struct Word<4> { using T = unsigned int; };
template <> struct Word<2> { using T = unsigned short; };
template <> struct Word<1> { using T = unsigned char; };

// V 16-bit values as 32-bit words, value 2i in word i's low half (V = 1: the low half of word 0)
template <int V>
struct Values {
  uint32_t w[(V + 1) / 2];
};

// V fp8 codes as 32-bit words, code i in byte i % 4 of word i / 4
template <int V>
struct Codes {
  uint32_t w[(V + 3) / 4];
};

// V values loaded by one read-only access (ld.global.nc; the host checked the alignment): the kernel never writes
// its inputs, so the compiler may issue these loads ahead of the stores before them
template <int V>
__device__ __forceinline__ Values<V> load_values(const uint16_t* at) {
  using T = typename Word<2 * V>::T;
  const T word = __ldg(reinterpret_cast<const T*>(at));
  Values<V> v;
  if constexpr (V == 1) v.w[0] = word; else memcpy(&v, &word, 2 * V);
  return v;
}

// N bytes of `words` stored by one global access (st.global.wb: a pointer out of a row's struct would otherwise
// become a generic store)
template <int N, typename W>
__device__ __forceinline__ void store_bytes(void* at, const W& words) {
  using T = typename Word<N>::T;
  T word;
  if constexpr (N < 4) word = static_cast<T>(words.w[0]); else memcpy(&word, &words, N);
  __stwb(reinterpret_cast<T*>(at), word);
}

// Value i of v widened to float32 (exact: fp16 through the hardware conversion, bf16 by placing its bits)
template <bool kFp16, int V>
__device__ __forceinline__ float value_at(const Values<V>& v, int i) {
  const uint32_t w = v.w[i / 2];
  if constexpr (kFp16) return __half2float(__ushort_as_half(static_cast<unsigned short>(i % 2 ? w >> 16 : w)));
  return __uint_as_float(i % 2 ? w & 0xFFFF0000u : w << 16);
}

// The fp8 code of x by conversion C (not kCopy); a NaN as the conversion writes it
template <int C>
__device__ __forceinline__ uint32_t code_of(float x, const Fmt& f) {
  if constexpr (C == kSoftware) {
    return fp8_software(x, f);
  } else {
    return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, C == kHardwareE4m3 ? __NV_E4M3 : __NV_E5M2);
  }
}

// The fp8 codes of a (low byte) and b by conversion C: the hardware converts both with one cvt...x2
template <int C>
__device__ __forceinline__ uint32_t codes_of(float a, float b, const Fmt& f) {
  if constexpr (C == kSoftware) {
    return fp8_software(a, f) | (static_cast<uint32_t>(fp8_software(b, f)) << 8);
  } else {
    return __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, C == kHardwareE4m3 ? __NV_E4M3 : __NV_E5M2);
  }
}

// The codes of V quotients q(i) (a functor of the value index) by conversion C
template <int C, int V, typename Q>
__device__ __forceinline__ Codes<V> encode(const Q& q, const Fmt& f) {
  Codes<V> out{};
  if constexpr (V == 1) {
    out.w[0] = code_of<C>(q(0), f);
  } else {
#pragma unroll
    for (int i = 0; i < V; i += 2) out.w[i / 4] |= codes_of<C>(q(i), q(i + 1), f) << (8 * (i % 4));
  }
  return out;
}

// a / b for 0 <= a and 0 < b: a shift for a power of two (block sizes, one slice a token), in 32 bits when both fit
// (a 64-bit division is a long software sequence, and the kernels divide a few times a row), in 64 otherwise, so a
// cache past 2^31 slots or rows stays exact. b is the same for every lane: the branches do not diverge.
__device__ __forceinline__ int64_t quotient(int64_t a, int64_t b) {
  if ((b & (b - 1)) == 0) return a >> (__ffsll(b) - 1);
  if (((a | b) >> 31) == 0) return static_cast<int64_t>(static_cast<uint32_t>(a) / static_cast<uint32_t>(b));
  return a / b;
}

// The slot of row `row`'s token (`per_token` rows a token), through the read-only path; -1 (padding: nothing
// written) past the last of `rows`
__device__ __forceinline__ int64_t load_slot(int64_t slots, int64_t row, int64_t rows, int64_t per_token) {
  if (row >= rows) return -1;
  return __ldg(reinterpret_cast<const long long*>(slots) + quotient(row, per_token));
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

// One token of the MHA write: where its key and value rows start and where its cache rows go (head 0).
struct MhaToken {
  const uint16_t *key, *value;
  uint8_t *kc, *vc;
  bool real;     // a token of the call: its values are loaded whatever its slot (in flight with the slot)
  bool written;  // a real token whose slot is inside the cache
};

// Token t's input rows (t < p.num_tokens: real), before its slot has arrived.
__device__ __forceinline__ MhaToken mha_inputs(const RtpRefMhaParams& p, int64_t t) {
  MhaToken r{};
  r.real = t < p.num_tokens;
  r.key = reinterpret_cast<const uint16_t*>(p.key) + t * p.key_t;
  r.value = reinterpret_cast<const uint16_t*>(p.value) + t * p.value_t;
  return r;
}

// Where token r goes, once its slot is known.
template <int C>
__device__ __forceinline__ void mha_outputs(const RtpRefMhaParams& p, MhaToken& r, int64_t slot, bool leader) {
  r.written = slot_written(slot, p.capacity, p.flags, leader);
  if (!r.written) return;
  const int64_t block = quotient(slot, p.block_size), page = slot - block * p.block_size;
  constexpr int64_t elem = C == kCopy ? 2 : 1;  // cache element bytes
  r.kc = reinterpret_cast<uint8_t*>(p.key_cache) + (block * p.kc_block + page * p.kc_page) * elem;
  r.vc = reinterpret_cast<uint8_t*>(p.value_cache) + (block * p.vc_block + page * p.vc_page) * elem;
}

// V values at dst[d..]: the 16-bit bits as they are (kCopy), or the codes of __fdiv_rn(x, s) by conversion C.
template <int C, bool kFp16, int V>
__device__ __forceinline__ void mha_store(const Values<V>& in, uint8_t* dst, int64_t d, float s, const Fmt& f) {
  if constexpr (C == kCopy) {
    store_bytes<2 * V>(dst + 2 * d, in);
  } else {
    store_bytes<V>(dst + d, encode<C, V>([&](int i) { return __fdiv_rn(value_at<kFp16>(in, i), s); }, f));
  }
}

// R tokens a warp (p.split warps share them: a few tokens then still fill the GPU); within a token the 32 / p.lanes
// groups take its heads side by side, p.lanes lanes a head, and step over the heads (the token's slot, block and
// page are worked out once, not per head; every warp of a split has a head for its first lane, which flags). Per
// step every token's key and value chunks are loaded before any is stored, and the first step's with the slots, so
// a warp waits on one memory latency a step.
template <int V, int R, int C, bool kFp16>
__global__ void __launch_bounds__(32 * kMhaWarps) mha_paged_write(const RtpRefMhaParams p) {
  const int64_t lanes = p.lanes, side = 32 / lanes, group = threadIdx.x / lanes;
  const int64_t warp = static_cast<int64_t>(blockIdx.x) * kMhaWarps + threadIdx.y, tokens_at = quotient(warp, p.split);
  const int64_t first = tokens_at * R, heads_from = (warp - tokens_at * p.split) * side + group;
  const int lane = static_cast<int>(threadIdx.x & (lanes - 1));
  int64_t slots[R];
#pragma unroll
  for (int r = 0; r < R; ++r) slots[r] = load_slot(p.slots, first + r, p.num_tokens, 1);
  MhaToken tokens[R];
#pragma unroll
  for (int r = 0; r < R; ++r) tokens[r] = mha_inputs(p, first + r);
  const Fmt f = fmt_of(p.man_bits, p.emin, p.max_code, p.nan_code, p.inf_code, p.neg_zero, p.has_inf, p.satfinite);
  constexpr int64_t elem = C == kCopy ? 2 : 1;
  // the tokens' cache rows are worked out after the first step's loads are issued, so that those loads and the
  // slots' are in flight together (an instruction that reads a slot stalls the warp until it has arrived)
  bool placed = false;
  for (int64_t h = heads_from; h < p.heads; h += side * p.split) {
    float ks = 1.0f, vs = 1.0f;
    if constexpr (C != kCopy) {
      ks = __ldg(reinterpret_cast<const float*>(p.k_scale) + h * p.k_scale_step);
      vs = __ldg(reinterpret_cast<const float*>(p.v_scale) + h * p.v_scale_step);
    }
    const int64_t key_h = h * p.key_h, value_h = h * p.value_h;
    const int64_t kc_h = h * p.kc_head * elem, vc_h = h * p.vc_head * elem;
    for (int64_t d = static_cast<int64_t>(lane) * V; d < p.head_size; d += lanes * V) {
      Values<V> keys[R], values[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (!tokens[r].real) continue;
        keys[r] = load_values<V>(tokens[r].key + key_h + d);
        values[r] = load_values<V>(tokens[r].value + value_h + d);
      }
      if (!placed) {
#pragma unroll
        for (int r = 0; r < R; ++r) mha_outputs<C>(p, tokens[r], slots[r], threadIdx.x == 0);
        placed = true;
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (!tokens[r].written) continue;
        mha_store<C, kFp16, V>(keys[r], tokens[r].kc + kc_h, d, ks, f);
        mha_store<C, kFp16, V>(values[r], tokens[r].vc + vc_h, d, vs, f);
      }
    }
  }
}

template <bool kFp16, int V>
__device__ __forceinline__ float chunk_amax(float amax, const Values<V>& in) {
#pragma unroll
  for (int i = 0; i < V; ++i) amax = fmaxf(amax, fabsf(value_at<kFp16>(in, i)));  // fmaxf drops NaN
  return amax;
}

// The codes of one row's V-value chunk: x * reciprocal for a power-of-two scale (kPow2: the same correctly rounded
// quotient as x / scale, without a division), __fdiv_rn(x, scale) otherwise.
template <int C, bool kFp16, bool kPow2, int V>
__device__ __forceinline__ void indexer_store(const Values<V>& in, uint8_t* at, float scale, float reciprocal,
                                              const Fmt& f) {
  store_bytes<V>(at, encode<C, V>([&](int i) {
    const float x = value_at<kFp16>(in, i);
    return kPow2 ? __fmul_rn(x, reciprocal) : __fdiv_rn(x, scale);
  }, f));
}

// One row's codes: the lane's first chunk from registers, any further one reloaded (cache hits).
template <int C, bool kFp16, bool kPow2, int V>
__device__ __forceinline__ void indexer_row(const RtpRefIndexerParams& p, const Values<V>& head, const uint16_t* k,
                                            uint8_t* codes, int64_t d0, float scale, const Fmt& f) {
  // x * (1 / 2^e) is x / 2^e exactly rounded (the reciprocal of a power of two is exact, subnormal or not)
  const float reciprocal = kPow2 ? __frcp_rn(scale) : 0.0f;
  indexer_store<C, kFp16, kPow2, V>(head, codes + d0, scale, reciprocal, f);
  for (int64_t d = d0 + p.lanes * V; d < p.quant; d += p.lanes * V)
    indexer_store<C, kFp16, kPow2, V>(load_values<V>(k + d), codes + d, scale, reciprocal, f);
}

// R passes a warp, 32 / p.lanes (token, quant slice) rows side by side in each (p.lanes * V <= quant: the host
// picks p.lanes so, for the power-of-two quant blocks the kernel takes). Pass 1 loads every row's V-value chunks
// (lane l takes values l*V.., then p.lanes*V further on), keeping the first in registers, and folds each row's
// amax; shuffles fold the group's lanes; pass 2 quantises the kept chunk and reloads any further one, so the
// registers a lane needs do not grow with the quant block.
template <int V, int R, int C, bool kFp16>
__global__ void __launch_bounds__(32 * kIndexerWarps) indexer_write(const RtpRefIndexerParams p) {
  const Place at = place<kIndexerWarps, R>(p.lanes);
  const int64_t rows = p.num_tokens * p.n_slices, step = p.lanes * V, d0 = static_cast<int64_t>(at.lane) * V;
  int64_t slot[R];
#pragma unroll
  for (int r = 0; r < R; ++r) slot[r] = load_slot(p.slots, at.first + r * at.side, rows, p.n_slices);
  bool written[R], real[R];  // real: a row of the call (its values may be loaded before its slot has arrived)
  int64_t j[R];  // the row's quant slice
  const uint16_t* k[R];
  Values<V> head[R];  // the lane's first chunk of the row
  float amax[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t row = at.first + r * at.side, t = quotient(row, p.n_slices);
    real[r] = row < rows;
    j[r] = row - t * p.n_slices;
    k[r] = reinterpret_cast<const uint16_t*>(p.k) + t * p.k_row + j[r] * p.quant;
    // loaded whatever the slot says, so that the values and the slot are in flight together (a load that waited
    // for the slot would cost a second memory latency a row); padding rows' values are loaded and dropped
    if (real[r]) head[r] = load_values<V>(k[r] + d0);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    written[r] = slot_written(slot[r], p.capacity, p.flags, at.lane == 0);  // the same for the whole group
    amax[r] = real[r] ? chunk_amax<kFp16>(0.0f, head[r]) : 0.0f;
  }
  for (int64_t d = d0 + step; d < p.quant; d += step) {
    Values<V> in[R];
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (real[r]) in[r] = load_values<V>(k[r] + d);
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (real[r]) amax[r] = chunk_amax<kFp16>(amax[r], in[r]);
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
    const int64_t block = quotient(slot[r], p.block_size), row = slot[r] - block * p.block_size;
    uint8_t* base = reinterpret_cast<uint8_t*>(p.cache) + block * p.block_bytes;
    uint8_t* codes = base + row * p.head_dim + j[r] * p.quant;
    if (power_of_two) indexer_row<C, kFp16, true, V>(p, head[r], k[r], codes, d0, scale, f);
    else indexer_row<C, kFp16, false, V>(p, head[r], k[r], codes, d0, scale, f);
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

// The kernels of one family by (V, R, C, kFp16); launch_rows picks the instance the host's parameters name.
struct MhaKernel {
  static constexpr bool kCopies = true;  // auto: the 16-bit bits copied
  template <int V, int R, int C, bool kFp16>
  static void launch(dim3 grid, dim3 block, cudaStream_t s, const RtpRefMhaParams& p) {
    mha_paged_write<V, R, C, kFp16><<<grid, block, 0, s>>>(p);
  }
};
struct IndexerKernel {
  static constexpr bool kCopies = false;  // always quantises
  template <int V, int R, int C, bool kFp16>
  static void launch(dim3 grid, dim3 block, cudaStream_t s, const RtpRefIndexerParams& p) {
    indexer_write<V, R, C, kFp16><<<grid, block, 0, s>>>(p);
  }
};

template <typename K, int V, int R, int C, typename P>
void launch_input(const P& p, dim3 grid, dim3 block, cudaStream_t s) {
  if constexpr (C == kCopy) K::template launch<V, R, C, false>(grid, block, s, p);  // bits: one for both inputs
  else if (p.input_fp16) K::template launch<V, R, C, true>(grid, block, s, p);
  else K::template launch<V, R, C, false>(grid, block, s, p);
}

template <typename K, int V, int R, typename P>
void launch_conversion(const P& p, int conversion, dim3 grid, dim3 block, cudaStream_t s) {
  if constexpr (K::kCopies) {
    if (conversion == kCopy) return launch_input<K, V, R, kCopy>(p, grid, block, s);
  }
  switch (conversion) {
    case kHardwareE4m3: launch_input<K, V, R, kHardwareE4m3>(p, grid, block, s); break;
    case kHardwareE5m2: launch_input<K, V, R, kHardwareE5m2>(p, grid, block, s); break;
    default: launch_input<K, V, R, kSoftware>(p, grid, block, s); break;
  }
}

template <typename K, int R, typename P>
void launch_vec(const P& p, int conversion, dim3 grid, dim3 block, cudaStream_t s) {
  switch (p.vec) {
    case 8: launch_conversion<K, 8, R>(p, conversion, grid, block, s); break;
    case 4: launch_conversion<K, 4, R>(p, conversion, grid, block, s); break;
    case 2: launch_conversion<K, 2, R>(p, conversion, grid, block, s); break;
    default: launch_conversion<K, 1, R>(p, conversion, grid, block, s); break;
  }
}

// One launch over `rows` rows, `per_warp` a warp, kWarps warps a block, by `conversion`.
template <typename P, int kWarps, typename K>
int launch_rows(const P& p, int64_t rows, int64_t per_warp, int conversion, void* stream) {
  const int64_t per_block = kWarps * per_warp;
  const dim3 grid(static_cast<unsigned>((rows + per_block - 1) / per_block)), block(32, kWarps);
  const auto s = static_cast<cudaStream_t>(stream);
  if (p.rows == 2) launch_vec<K, 2>(p, conversion, grid, block, s);
  else launch_vec<K, 1>(p, conversion, grid, block, s);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

extern "C" {

int rtp_ref_mha_paged_write(const RtpRefMhaParams* p, void* stream) {
  if (p->num_tokens == 0) return 0;
  const int conversion = p->fp8 ? static_cast<int>(p->hardware) : kCopy;
  return launch_rows<RtpRefMhaParams, kMhaWarps, MhaKernel>(*p, p->num_tokens * p->split, p->rows, conversion,
                                                            stream);
}

int rtp_ref_indexer_write(const RtpRefIndexerParams* p, void* stream) {
  if (p->num_tokens == 0) return 0;
  return launch_rows<RtpRefIndexerParams, kIndexerWarps, IndexerKernel>(
      *p, p->num_tokens * p->n_slices, p->rows * (32 / p->lanes), static_cast<int>(p->hardware), stream);
}

const char* rtp_ref_mha_indexer_error_string(int code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }

}  // extern "C"
