// concat_and_cache_mla for every rtp-ref MLA layout: the `cuda` built-in kernel (rtp_ref/kernels/cuda_mla.py).
//
// The layout arrives as numbers taken from the reference field table (WritePlan): offsets, value
// modes, the tile-scale rule and the fp8 format's traits. A half warp (a whole warp for tile-scaled
// layouts) writes one token: each of its L lanes owns every L-th chunk of 8 values (16-byte loads of
// bf16/fp16, 8-byte fp8 stores, coalesced across the lanes) and the lanes of a scale tile reduce its
// amax with shuffles. Inputs are read once and entries written once; there are no atomics. Each lane
// issues all of its token's loads at once, and the per-value work is a few instructions
// (docs/performance.md has the measurements).
//
// Numerics (the contract of rtp_ref.fp8 / rtp_ref.kv.entries):
//  * every quotient x / scale is __fdiv_rn, a correctly rounded float32 division, except for
//    power-of-two tile scales, where x * (exact reciprocal) gives the same bits;
//  * hardware path: __nv_cvt_float2_to_fp8x2(..., __NV_SATFINITE, __NV_E4M3), round to nearest even,
//    finite overflow and inf clamp to +-448, NaN written as the canonical code;
//  * software path (fnuz, e5m2, nonsat emulated on NVIDIA): round-half-even on the float32 bits, the
//    algorithm of rtp_ref.fp8.codec.encode.
//
// The host side is plain C (extern "C", called through ctypes) so the build needs no torch headers.

#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "fp8_convert.cuh"

// Mirrors the ctypes Structure in cuda_mla.py field by field: all 8-byte fields, no padding. Outside the
// anonymous namespace: the exported entry point takes it, so it needs external linkage.
struct RtpRefMlaParams {
  int64_t kv_c, k_pe, cache, slots, scale;  // device addresses
  int64_t num_tokens, kv_c_row, k_pe_row, block_size, block_bytes;
  int64_t R, P, nope_mode, rope_mode, nope_off, rope_off, data_bytes, trail_bytes;
  int64_t tile, n_tiles, pow2, scale_ue8m0, scale_trailing, scale_off;
  int64_t man_bits, emin, max_code, nan_code, neg_zero, has_inf, inf_code, satfinite;
  int64_t input_fp16, aligned, hardware, block_shift;
  int64_t capacity, flags;  // slots in the cache; a device int32 set to 1 when a slot >= capacity is skipped
  double divisor, floor_;
};

namespace {

using namespace rtp_ref_fp8;

constexpr int kCopy16 = 0, kPerTensor = 1, kTiled = 2;
constexpr int kChunk = 8;  // values per lane per step: 16 bytes of bf16/fp16
constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = 8;
// A token is written by L lanes: each holds NC chunks of nope (kv_lora_rank up to L * NC * 8 = 512 for
// every layout's default, or 1024 in a second build) and one chunk of rope (rope_dim up to 128; lanes
// past it hold none); cuda_mla.py checks before launching. Fixed sizes keep the values in registers.
// Copies and per-tensor fp8 take a half warp per token (L = 16); tile-scaled fp8 a whole warp (L = 32),
// which halves each lane's chain of dependent work (tile amax, shuffles, scale, quantisation) and fits
// in 40 registers: measured on an H200, +6 points of the copy roof for fp8_ds_mla, +3 for model1, and
// -10 for per-tensor fp8 (docs/performance.md, v7).
template <int NOPE>
constexpr int lanes_per_token() { return NOPE == kTiled ? 32 : 16; }
// Blocks resident per multiprocessor: at most 64 registers a thread for 4 blocks (32 warps), 40 for 6
// (48 warps), each warp with its tokens' loads in flight: the bytes in flight, not the arithmetic, set
// a memory-bound kernel's speed.
template <int L, int NC>
constexpr int resident_blocks() { return L == 32 && NC <= 2 ? 6 : 4; }

// fp8 codes of 8 values, packed little-endian (value k in byte k).
template <bool HW>
__device__ __forceinline__ uint64_t fp8x8(const float (&v)[kChunk], const Fmt& f) {
  uint64_t out = 0;
#pragma unroll
  for (int k = 0; k < kChunk; k += 2) {
    uint64_t pair;
    if constexpr (HW) {
      // The hardware's saturating e4m3 conversion: round to nearest even, overflow and inf to +-448.
      pair = __nv_cvt_float2_to_fp8x2(make_float2(v[k], v[k + 1]), __NV_SATFINITE, __NV_E4M3);
    } else {
      pair = fp8_software(v[k], f) | (static_cast<uint64_t>(fp8_software(v[k + 1], f)) << 8);
    }
    out |= pair << (8 * k);
  }
  if constexpr (HW) {
    // e4m3's only NaN codes are 0x7F and 0xFF (no finite value has its low 7 bits all set under
    // satfinite): a carry out of the low 7 bits of each byte finds them, and the sign bit is cleared
    // so NaN is written as the canonical 0x7F, 8 bytes at a time.
    const uint64_t low7 = 0x7F7F7F7F7F7F7F7Full, ones = 0x0101010101010101ull, signs = 0x8080808080808080ull;
    out &= ~(((out & low7) + ones) & signs);
  }
  return out;
}

// 1 / ue8m0_value(byte), exactly: 2**(127 - byte); byte 254 gives the subnormal 2**-127.
__device__ __forceinline__ float ue8m0_reciprocal(int byte) {
  if (byte == 254) return __uint_as_float(0x00400000u);
  if (byte == 0xFF) return __uint_as_float(0x7FC00000u);
  return __uint_as_float(static_cast<uint32_t>(254 - byte) << 23);
}

// A token's values are split among its L lanes: chunk i of lane `sub` holds values [(L i + sub) * 8, +8),
// so each load and store instruction covers L consecutive chunks (16 L input bytes, 8 L fp8 bytes) and
// a scale tile of up to 128 values is one chunk index across adjacent lanes. Lanes hold NC nope chunks
// and one rope chunk.
template <int NC>
struct Block {
  uint4 raw[NC];
};

// First value of chunk i of lane `sub` of the L lanes of a token.
template <int L>
__device__ __forceinline__ int64_t chunk_start(int i, int sub) {
  return static_cast<int64_t>(i * L + sub) * kChunk;
}

// Issues the loads of a lane's NC chunks of a row of n values; values past `n` read as 0 bits (0.0,
// which never raises an amax, as the reference pads). Nothing here waits on a load.
template <int L, int NC, bool ALIGNED>
__device__ __forceinline__ void load_block(const uint16_t* __restrict__ row, int64_t n, int sub, bool in_range,
                                           Block<NC>& out) {
#pragma unroll
  for (int i = 0; i < NC; ++i) {
    const int64_t c = chunk_start<L>(i, sub);
    out.raw[i] = make_uint4(0, 0, 0, 0);
    if (!in_range || c >= n) continue;
    if constexpr (ALIGNED) {
      out.raw[i] = __ldg(reinterpret_cast<const uint4*>(row + c));
    } else {
      uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
      for (int k = 0; k < kChunk; ++k)
        if (c + k < n) w[k / 2] |= static_cast<uint32_t>(row[c + k]) << (16 * (k % 2));
      out.raw[i] = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
}

__device__ __forceinline__ void widen(const uint4& raw, bool fp16, float (&v)[kChunk]) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int k = 0; k < kChunk; ++k) {
    const uint32_t bits = (w[k / 2] >> (16 * (k % 2))) & 0xFFFF;
    v[k] = fp16 ? __half2float(__ushort_as_half(static_cast<uint16_t>(bits))) : __uint_as_float(bits << 16);
  }
}

template <bool ALIGNED>
__device__ __forceinline__ void store_bytes(uint8_t* dst, int64_t c, int64_t n, uint64_t bytes) {
  if constexpr (ALIGNED) {
    *reinterpret_cast<uint64_t*>(dst + c) = bytes;
  } else {
#pragma unroll
    for (int k = 0; k < kChunk; ++k)
      if (c + k < n) dst[c + k] = static_cast<uint8_t>(bytes >> (8 * k));
  }
}

template <bool ALIGNED>
__device__ __forceinline__ void store_copy16(uint8_t* dst, int64_t c, int64_t n, const uint4& raw) {
  if constexpr (ALIGNED) {
    *reinterpret_cast<uint4*>(dst + 2 * c) = raw;
  } else {
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      if (c + k < n) {
        const uint32_t bits = w[k / 2] >> (16 * (k % 2));
        dst[2 * (c + k)] = bits & 0xFF;
        dst[2 * (c + k) + 1] = (bits >> 8) & 0xFF;
      }
    }
  }
}

template <bool ALIGNED>
__device__ __forceinline__ void store_f32(uint8_t* dst, float value) {
  if constexpr (ALIGNED) {
    *reinterpret_cast<float*>(dst) = value;
  } else {
    const uint32_t bits = __float_as_uint(value);
#pragma unroll
    for (int k = 0; k < 4; ++k) dst[k] = (bits >> (8 * k)) & 0xFF;
  }
}

// Largest |x| of a tile from the raw 16-bit inputs of a lane's chunk. |x| bits order like the values
// for bf16 and fp16, and every NaN's bits exceed inf's, so packed unsigned maxima find both the amax
// and a NaN (torch's amax is NaN if any value is). All 32 lanes take part in the shuffles (a tile's
// lanes are adjacent and within one half warp). One warp reduction (redux.sync) per tile was slower on
// an H200: with a mask per tile the compiler serialises the tiles of a warp.
__device__ __forceinline__ float tile_amax(const uint4& raw, bool fp16, int lanes_per_tile) {
  uint32_t m = __vmaxu2(__vmaxu2(raw.x & 0x7FFF7FFFu, raw.y & 0x7FFF7FFFu),
                        __vmaxu2(raw.z & 0x7FFF7FFFu, raw.w & 0x7FFF7FFFu));
  m = max(m & 0xFFFF, m >> 16);
  // Constant widths, unrolled: the steps of several chunks' reductions can interleave.
#pragma unroll
  for (int width = 8; width > 0; width /= 2) {  // a tile spans at most 16 lanes
    if (width < lanes_per_tile) m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, width));  // uniform condition
  }
  if (m > (fp16 ? 0x7C00u : 0x7F80u)) return __uint_as_float(0x7FC00000u);
  return fp16 ? __half2float(__ushort_as_half(static_cast<uint16_t>(m))) : __uint_as_float(m << 16);
}

// Quantises and stores one chunk: value / s, or value * reciprocal with RECIPROCAL (a power-of-two s:
// x / 2**e and x * 2**-e are the same correctly rounded value).
template <bool ALIGNED, bool HW, bool RECIPROCAL>
__device__ __forceinline__ void quantise_chunk(const Fmt& f, const uint4& raw, bool fp16, int64_t c, int64_t n,
                                               uint8_t* dst, float s, float reciprocal) {
  float v[kChunk], q[kChunk];
  widen(raw, fp16, v);
#pragma unroll
  for (int k = 0; k < kChunk; ++k) q[k] = RECIPROCAL ? __fmul_rn(v[k], reciprocal) : __fdiv_rn(v[k], s);
  uint64_t bytes;
  if constexpr (HW) bytes = fp8x8<true>(q, f);
  else bytes = fp8x8<false>(q, f);
  store_bytes<ALIGNED>(dst, c, n, bytes);
}

// Block and row of a slot. Block sizes are usually powers of two: a shift then replaces the 64-bit
// division (a long software routine on the GPU); slots below 2**32 divide in 32 bits.
__device__ __forceinline__ void split_slot(int64_t slot, const RtpRefMlaParams& p, int64_t& block, int64_t& offset) {
  if (p.block_shift >= 0) {
    block = slot >> p.block_shift;
    offset = slot & (p.block_size - 1);
  } else if (slot <= 0xFFFFFFFFll && p.block_size <= 0xFFFFFFFFll) {
    const uint32_t s = static_cast<uint32_t>(slot), b = static_cast<uint32_t>(p.block_size);
    block = s / b;
    offset = s - static_cast<uint32_t>(block) * b;
  } else {
    block = slot / p.block_size;
    offset = slot - block * p.block_size;
  }
}

// L lanes per token. Every load of the token (its slot, its nope and rope values) is issued before
// anything waits on one, so a token costs one memory round trip, not one per field or chunk.
template <int NOPE, int ROPE, bool ALIGNED, bool HW, int L, int NC, bool POW2>
__global__ void __launch_bounds__(kWarp* kWarpsPerBlock, resident_blocks<L, NC>()) mla_cache_write(const RtpRefMlaParams p) {
  const int lane = threadIdx.x % kWarp;
  const int sub = lane % L;
  const int64_t token = (static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp) * (kWarp / L) +
                        lane / L;
  const bool in_range = token < p.num_tokens;
  const int64_t slot = in_range ? __ldg(reinterpret_cast<const int64_t*>(p.slots) + token) : -1;
  Block<NC> nope;
  Block<1> rope;
  load_block<L, NC, ALIGNED>(reinterpret_cast<const uint16_t*>(p.kv_c) + token * p.kv_c_row, p.R, sub, in_range, nope);
  load_block<L, 1, ALIGNED>(reinterpret_cast<const uint16_t*>(p.k_pe) + token * p.k_pe_row, p.P, sub, in_range, rope);
  const float tensor_scale = (NOPE == kPerTensor || ROPE == kPerTensor)
                                 ? *reinterpret_cast<const float*>(p.scale) : 1.0f;
  // A slot past the cache is flagged, not written: checking it on the host would sync the stream.
  if (slot >= p.capacity && sub == 0) *reinterpret_cast<int*>(p.flags) = 1;
  // padding tokens, slots past the cache and lanes past the last token write nothing
  const bool writes = slot >= 0 && slot < p.capacity;
  // Lanes stay until after the tile shuffles, in which all 32 take part.
  if (NOPE != kTiled && !writes) return;
  const bool fp16 = p.input_fp16 != 0;
  const Fmt f{static_cast<int>(p.man_bits), static_cast<int>(p.emin), static_cast<int>(p.max_code),
              static_cast<int>(p.nan_code), static_cast<int>(p.inf_code), p.neg_zero != 0,
              p.has_inf != 0, p.satfinite != 0};
  int64_t block = 0, offset = 0;
  if (writes) split_slot(slot, p, block, offset);
  uint8_t* block_base = reinterpret_cast<uint8_t*>(p.cache) + block * p.block_bytes;
  uint8_t* row = block_base + offset * p.data_bytes;
  uint8_t* nope_dst = row + p.nope_off;

  // ---- nope (kv_c) ----
  if constexpr (NOPE == kTiled) {
    // A tile is a power-of-two number of adjacent lanes (cuda_mla.py checks), so tile indices are shifts.
    const int lanes_per_tile = static_cast<int>(p.tile / kChunk);
    const int tile_shift = __ffs(lanes_per_tile) - 1;
    // Every chunk's amax first: independent shuffle chains, which the compiler overlaps (chunks
    // past the field hold zeros and store nothing).
    float amax[NC];
#pragma unroll
    for (int i = 0; i < NC; ++i) amax[i] = tile_amax(nope.raw[i], fp16, lanes_per_tile);
    if (!writes) return;
    uint8_t* scales = p.scale_trailing
                          ? block_base + p.block_size * p.data_bytes + offset * p.trail_bytes + p.scale_off
                          : row + p.scale_off;
    const float divisor = static_cast<float>(p.divisor), floor_value = static_cast<float>(p.floor_);
#pragma unroll
    for (int i = 0; i < NC; ++i) {
      const int64_t c = chunk_start<L>(i, sub);
      if (c >= p.R) continue;
      const float raw_scale = __fdiv_rn(amax[i], divisor);
      float s = raw_scale < floor_value ? floor_value : raw_scale;  // max(raw, floor) keeping a NaN raw
      const int byte = ue8m0_ceil(s);
      if constexpr (POW2) s = ue8m0_value(byte);
      if ((sub & (lanes_per_tile - 1)) == 0) {
        const int t = (i * L + sub) >> tile_shift;
        if (p.scale_ue8m0) scales[t] = static_cast<uint8_t>(byte);
        else store_f32<ALIGNED>(scales + 4 * t, s);
      }
      quantise_chunk<ALIGNED, HW, POW2>(f, nope.raw[i], fp16, c, p.R, nope_dst, s, POW2 ? ue8m0_reciprocal(byte) : 0.0f);
    }
  } else {
#pragma unroll
    for (int i = 0; i < NC; ++i) {
      const int64_t c = chunk_start<L>(i, sub);
      if (c >= p.R) continue;
      if constexpr (NOPE == kCopy16) store_copy16<ALIGNED>(nope_dst, c, p.R, nope.raw[i]);
      else quantise_chunk<ALIGNED, HW, false>(f, nope.raw[i], fp16, c, p.R, nope_dst, tensor_scale, 0.0f);
    }
  }

  // ---- rope (k_pe) ----
  const int64_t rc = chunk_start<L>(0, sub);
  if (rc < p.P) {
    if constexpr (ROPE == kCopy16) store_copy16<ALIGNED>(row + p.rope_off, rc, p.P, rope.raw[0]);
    else quantise_chunk<ALIGNED, HW, false>(f, rope.raw[0], fp16, rc, p.P, row + p.rope_off, tensor_scale, 0.0f);
  }
}

template <int NOPE, int ROPE, int L, int NC, bool POW2>
void launch_variant(const RtpRefMlaParams& p, dim3 grid, dim3 block, cudaStream_t stream) {
  if (p.aligned && p.hardware) mla_cache_write<NOPE, ROPE, true, true, L, NC, POW2><<<grid, block, 0, stream>>>(p);
  else if (p.aligned) mla_cache_write<NOPE, ROPE, true, false, L, NC, POW2><<<grid, block, 0, stream>>>(p);
  else if (p.hardware) mla_cache_write<NOPE, ROPE, false, true, L, NC, POW2><<<grid, block, 0, stream>>>(p);
  else mla_cache_write<NOPE, ROPE, false, false, L, NC, POW2><<<grid, block, 0, stream>>>(p);
}

template <int NOPE, int ROPE, int L, int NC>
void launch_scale_rule(const RtpRefMlaParams& p, dim3 grid, dim3 block, cudaStream_t stream) {
  // Only tile scales have a rule; a power-of-two one multiplies by the exact reciprocal.
  if constexpr (NOPE == kTiled) {
    if (p.pow2) {
      launch_variant<NOPE, ROPE, L, NC, true>(p, grid, block, stream);
      return;
    }
  }
  launch_variant<NOPE, ROPE, L, NC, false>(p, grid, block, stream);
}

template <int NOPE, int ROPE, int L>
cudaError_t launch_lanes(const RtpRefMlaParams& p, cudaStream_t stream) {
  const int64_t tokens_per_block = kWarpsPerBlock * (kWarp / L);
  const int64_t blocks = (p.num_tokens + tokens_per_block - 1) / tokens_per_block;
  if (blocks > 0x7FFFFFFF) return cudaErrorInvalidConfiguration;
  const dim3 grid(static_cast<unsigned>(blocks)), block(kWarp * kWarpsPerBlock);
  constexpr int kSmall = 512 / (L * kChunk);  // chunks a lane holds for kv_lora_rank <= 512
  if (p.R <= L * kSmall * kChunk) launch_scale_rule<NOPE, ROPE, L, kSmall>(p, grid, block, stream);
  else launch_scale_rule<NOPE, ROPE, L, 2 * kSmall>(p, grid, block, stream);
  return cudaGetLastError();
}

template <int NOPE, int ROPE>
cudaError_t launch_modes(const RtpRefMlaParams& p, cudaStream_t stream) {
  return launch_lanes<NOPE, ROPE, lanes_per_token<NOPE>()>(p, stream);
}

}  // namespace

extern "C" {

// Launches the write on `stream`; returns 0, or a CUDA error code (see rtp_ref_mla_error_string).
// Unknown mode combinations return -1: the Python side only sends the combinations of WritePlan.
int rtp_ref_mla_cache_write(const RtpRefMlaParams* p, void* stream) {
  if (p->num_tokens == 0) return 0;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (p->nope_mode == kCopy16 && p->rope_mode == kCopy16) return launch_modes<kCopy16, kCopy16>(*p, s);
  if (p->nope_mode == kPerTensor && p->rope_mode == kPerTensor) return launch_modes<kPerTensor, kPerTensor>(*p, s);
  if (p->nope_mode == kTiled && p->rope_mode == kCopy16) return launch_modes<kTiled, kCopy16>(*p, s);
  return -1;
}

const char* rtp_ref_mla_error_string(int code) {
  return code == -1 ? "unsupported mode combination" : cudaGetErrorString(static_cast<cudaError_t>(code));
}

}  // extern "C"
