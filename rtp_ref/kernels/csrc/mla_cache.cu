// concat_and_cache_mla for every rtp-ref MLA layout: the `cuda` built-in kernel (rtp_ref/kernels/cuda_mla.py).
//
// The layout arrives as numbers taken from the reference field table (WritePlan): offsets, value
// modes, the tile-scale rule and the fp8 format's traits. One warp writes one token: each lane owns
// chunks of 8 consecutive values (one 16-byte load of bf16/fp16, one 8-byte fp8 store) and the lanes
// of a scale tile reduce its amax with warp shuffles. Inputs are read once and entries written once;
// there are no atomics. A write is memory-bound, so the kernel is built around latency: each warp
// issues all of its token's loads at once (docs/performance.md has the measurements).
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

// Mirrors the ctypes Structure in cuda_mla.py field by field: all 8-byte fields, no padding. Outside the
// anonymous namespace: the exported entry point takes it, so it needs external linkage.
struct RtpRefMlaParams {
  int64_t kv_c, k_pe, cache, slots, scale;  // device addresses
  int64_t num_tokens, kv_c_row, k_pe_row, block_size, block_bytes;
  int64_t R, P, nope_mode, rope_mode, nope_off, rope_off, data_bytes, trail_bytes;
  int64_t tile, n_tiles, pow2, scale_ue8m0, scale_trailing, scale_off;
  int64_t man_bits, emin, max_code, nan_code, neg_zero, has_inf, inf_code, satfinite;
  int64_t input_fp16, aligned, hardware, block_shift;
  double divisor, floor_;
};

namespace {

constexpr int kCopy16 = 0, kPerTensor = 1, kTiled = 2;
constexpr int kChunk = 8;  // values per lane per step: 16 bytes of bf16/fp16
constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = 8;
// Chunks a lane holds per field: kv_lora_rank up to 32 * 8 * 2 = 512 (every layout's default) or, in a
// second build, 1024; rope_dim up to 256 (cuda_mla.py checks before launching). Fixed sizes keep the
// chunks in registers; a chunk past the field is skipped.
constexpr int kRopeChunks = 1;
// At most 64 registers a thread, so that 4 blocks (32 warps, each with its token's loads in flight) fit
// on a multiprocessor: the bytes in flight, not the arithmetic, set a memory-bound kernel's speed.
constexpr int kMinBlocksPerSm = 4;

// Per-launch constants in registers (float copies of the doubles, int32 format traits).
struct Fmt {
  int man_bits, emin, max_code, nan_code, inf_code;
  bool neg_zero, has_inf, satfinite;
};

// Round-half-even fp8 encoding in integer arithmetic (rtp_ref.fp8.codec.encode).
__device__ __forceinline__ uint8_t fp8_software(float x, const Fmt& f) {
  const uint32_t bits = __float_as_uint(x);
  const int sign = bits >> 31;
  const int exp_field = (bits >> 23) & 0xFF;
  const int man = bits & 0x7FFFFF;
  const bool is_nan = exp_field == 0xFF && man != 0;
  const bool is_inf = exp_field == 0xFF && man == 0;
  const bool normal = exp_field != 0;
  const int sig = normal ? (man | 0x800000) : man;
  const int e = normal ? exp_field - 127 : -126;
  const int target = e > f.emin ? e : f.emin;
  int shift = 23 - f.man_bits + target - e;
  shift = shift < 25 ? shift : 25;  // 25 already rounds any 24-bit significand to 0
  const int q = sig >> shift;
  const int rem = sig - (q << shift);
  const int half = (1 << shift) >> 1;
  const bool up = rem > half || (rem == half && shift > 0 && (q & 1));
  int mag = ((target - f.emin) << f.man_bits) + q + (up ? 1 : 0);
  const bool overflow = mag > f.max_code || is_inf;
  bool nan_out = is_nan;
  if (overflow) {
    if (f.satfinite) mag = f.max_code;
    else if (f.has_inf) mag = f.inf_code;
    else nan_out = true;
  }
  int sign_bit = sign << 7;
  if (!f.neg_zero && mag == 0) sign_bit = 0;
  return static_cast<uint8_t>(nan_out ? f.nan_code : (sign_bit | mag));
}

// Two values through the hardware's saturating e4m3 conversion; NaN forced to the canonical code.
__device__ __forceinline__ uint16_t fp8x2_hardware(float a, float b, const Fmt& f) {
  const __nv_fp8x2_storage_t packed = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
  uint16_t lo = packed & 0xFF, hi = packed >> 8;
  if (isnan(a)) lo = f.nan_code;
  if (isnan(b)) hi = f.nan_code;
  return static_cast<uint16_t>(lo | (hi << 8));
}

// fp8 codes of 8 values, packed little-endian (value k in byte k).
template <bool HW>
__device__ __forceinline__ uint64_t fp8x8(const float (&v)[kChunk], const Fmt& f) {
  uint64_t out = 0;
#pragma unroll
  for (int k = 0; k < kChunk; k += 2) {
    uint64_t pair;
    if constexpr (HW) {
      pair = fp8x2_hardware(v[k], v[k + 1], f);
    } else {
      pair = fp8_software(v[k], f) | (static_cast<uint64_t>(fp8_software(v[k + 1], f)) << 8);
    }
    out |= pair << (8 * k);
  }
  return out;
}

// Smallest power of two >= s as a ue8m0 byte (rtp_ref.fp8.ue8m0 'ceil'); s > 0 or NaN/inf.
__device__ __forceinline__ int ue8m0_ceil(float s) {
  const bool subnormal = s < 1.1754943508222875e-38f;
  const uint32_t bits = __float_as_uint(subnormal ? s * 16777216.0f : s);  // exact rescale
  const int exp_field = (bits >> 23) & 0xFF;
  if (exp_field == 0xFF) return 0xFF;
  int byte = exp_field + ((bits & 0x7FFFFF) != 0 ? 1 : 0) - (subnormal ? 24 : 0);
  byte = byte < 0 ? 0 : byte;
  return byte > 254 ? 0xFF : byte;
}

__device__ __forceinline__ float ue8m0_value(int byte) {
  if (byte == 0) return __uint_as_float(0x00400000u);  // 2**-127, a float32 subnormal
  if (byte == 0xFF) return __uint_as_float(0x7FC00000u);
  return __uint_as_float(static_cast<uint32_t>(byte) << 23);
}

// 1 / ue8m0_value(byte), exactly: 2**(127 - byte); byte 254 gives the subnormal 2**-127.
__device__ __forceinline__ float ue8m0_reciprocal(int byte) {
  if (byte == 254) return __uint_as_float(0x00400000u);
  if (byte == 0xFF) return __uint_as_float(0x7FC00000u);
  return __uint_as_float(static_cast<uint32_t>(254 - byte) << 23);
}

// A lane's share of one field (nope or rope) of one token: chunk i holds values
// [(i * 32 + lane) * 8, +8), read as raw 16-bit words. NC is the most chunks any lane holds.
template <int NC>
struct FieldChunks {
  uint4 raw[NC];
};

// Issues the loads of a lane's chunks of a row of n values; values past `n` read as 0 bits (0.0, which
// never raises an amax, as the reference pads). Nothing here waits on a load.
template <int NC, bool ALIGNED>
__device__ __forceinline__ void load_field(const uint16_t* __restrict__ row, int64_t n, int lane,
                                           FieldChunks<NC>& out) {
#pragma unroll
  for (int i = 0; i < NC; ++i) {
    const int64_t c = static_cast<int64_t>(i * kWarp + lane) * kChunk;
    out.raw[i] = make_uint4(0, 0, 0, 0);
    if (c >= n) continue;
    if constexpr (ALIGNED) {
      // Inputs are read once: the streaming load keeps them from evicting cache lines being written.
      out.raw[i] = __ldcs(reinterpret_cast<const uint4*>(row + c));
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

// Largest |v| of a tile as float32 bits: |x| bits order like the values, and every NaN's bits exceed
// inf's, so one unsigned max finds both the amax and a NaN (torch's amax is NaN if any value is).
__device__ __forceinline__ float tile_amax(const float (&v)[kChunk], int lanes_per_tile) {
  uint32_t m = 0;
#pragma unroll
  for (int k = 0; k < kChunk; ++k) m = max(m, __float_as_uint(v[k]) & 0x7FFFFFFFu);
  // Every lane takes part; lanes past the field hold zeros (padding, as in the reference).
  for (int width = lanes_per_tile / 2; width > 0; width /= 2) m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, width));
  return m > 0x7F800000u ? __uint_as_float(0x7FC00000u) : __uint_as_float(m);
}

// Writes one field (nope or rope) of one token from the chunks a lane loaded.
template <int MODE, bool ALIGNED, bool HW, int NC>
__device__ __forceinline__ void write_field(const RtpRefMlaParams& p, const Fmt& f, const FieldChunks<NC>& in,
                                            int64_t n, uint8_t* dst, uint8_t* scale_dst, float tensor_scale,
                                            int lane) {
  const bool fp16 = p.input_fp16 != 0;
  // A tile is a power-of-two number of lanes (cuda_mla.py checks that tiles divide 32 chunks), so tile
  // indices are shifts: a 64-bit division per tile would cost more than the tile's arithmetic.
  const int lanes_per_tile = MODE == kTiled ? static_cast<int>(p.tile / kChunk) : 1;
  const int lanes_shift = __ffs(lanes_per_tile) - 1;
#pragma unroll
  for (int i = 0; i < NC; ++i) {
    if (static_cast<int64_t>(i) * kWarp * kChunk >= n) break;  // warp-uniform: no lane has chunk i
    const int64_t c = static_cast<int64_t>(i * kWarp + lane) * kChunk;
    const bool active = c < n;
    if constexpr (MODE == kCopy16) {
      if (active) store_copy16<ALIGNED>(dst, c, n, in.raw[i]);
      continue;
    }
    float v[kChunk];
    widen(in.raw[i], fp16, v);
    float s = tensor_scale;
    float reciprocal = 0.0f;  // used instead of dividing when the tile scale is a power of two
    if constexpr (MODE == kTiled) {
      const float amax = tile_amax(v, lanes_per_tile);
      const float raw_scale = __fdiv_rn(amax, static_cast<float>(p.divisor));
      const float floor_value = static_cast<float>(p.floor_);
      s = raw_scale < floor_value ? floor_value : raw_scale;  // max(raw, floor) keeping a NaN raw
      const int byte = ue8m0_ceil(s);
      if (p.pow2) {
        s = ue8m0_value(byte);
        reciprocal = ue8m0_reciprocal(byte);
      }
      if (active && (lane & (lanes_per_tile - 1)) == 0) {
        const int t = (i * kWarp + lane) >> lanes_shift;
        if (p.scale_ue8m0) scale_dst[t] = static_cast<uint8_t>(byte);
        else store_f32<ALIGNED>(scale_dst + 4 * t, s);
      }
    }
    if (!active) continue;
    float q[kChunk];
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      // x / 2**e and x * 2**-e are the same correctly rounded value; other scales need the division.
      q[k] = MODE == kTiled && p.pow2 ? __fmul_rn(v[k], reciprocal) : __fdiv_rn(v[k], s);
    }
    uint64_t bytes;
    if constexpr (HW) bytes = fp8x8<true>(q, f);
    else bytes = fp8x8<false>(q, f);
    store_bytes<ALIGNED>(dst, c, n, bytes);
  }
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

// One warp per token. Every load of the token (its slot, all nope and rope chunks) is issued before
// anything waits on one, so a warp pays one memory round trip, not one per field or chunk.
template <int NOPE, int ROPE, bool ALIGNED, bool HW, int NOPE_CHUNKS>
__global__ void __launch_bounds__(kWarp* kWarpsPerBlock, kMinBlocksPerSm) mla_cache_write(const RtpRefMlaParams p) {
  const int64_t token = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (token >= p.num_tokens) return;
  const int lane = threadIdx.x % kWarp;
  const int64_t slot = __ldcs(reinterpret_cast<const int64_t*>(p.slots) + token);
  FieldChunks<NOPE_CHUNKS> nope;
  FieldChunks<kRopeChunks> rope;
  load_field<NOPE_CHUNKS, ALIGNED>(reinterpret_cast<const uint16_t*>(p.kv_c) + token * p.kv_c_row, p.R, lane, nope);
  load_field<kRopeChunks, ALIGNED>(reinterpret_cast<const uint16_t*>(p.k_pe) + token * p.k_pe_row, p.P, lane, rope);
  const float tensor_scale = (NOPE == kPerTensor || ROPE == kPerTensor)
                                 ? *reinterpret_cast<const float*>(p.scale) : 1.0f;
  if (slot < 0) return;  // padding: write nothing
  const Fmt f{static_cast<int>(p.man_bits), static_cast<int>(p.emin), static_cast<int>(p.max_code),
              static_cast<int>(p.nan_code), static_cast<int>(p.inf_code), p.neg_zero != 0,
              p.has_inf != 0, p.satfinite != 0};
  int64_t block, offset;
  split_slot(slot, p, block, offset);
  uint8_t* block_base = reinterpret_cast<uint8_t*>(p.cache) + block * p.block_bytes;
  uint8_t* row = block_base + offset * p.data_bytes;
  uint8_t* scales = p.scale_trailing
                        ? block_base + p.block_size * p.data_bytes + offset * p.trail_bytes + p.scale_off
                        : row + p.scale_off;
  write_field<NOPE, ALIGNED, HW>(p, f, nope, p.R, row + p.nope_off, scales, tensor_scale, lane);
  write_field<ROPE, ALIGNED, HW>(p, f, rope, p.P, row + p.rope_off, scales, tensor_scale, lane);
}

template <int NOPE, int ROPE, int NOPE_CHUNKS>
void launch_variant(const RtpRefMlaParams& p, dim3 grid, dim3 block, cudaStream_t stream) {
  if (p.aligned && p.hardware) mla_cache_write<NOPE, ROPE, true, true, NOPE_CHUNKS><<<grid, block, 0, stream>>>(p);
  else if (p.aligned) mla_cache_write<NOPE, ROPE, true, false, NOPE_CHUNKS><<<grid, block, 0, stream>>>(p);
  else if (p.hardware) mla_cache_write<NOPE, ROPE, false, true, NOPE_CHUNKS><<<grid, block, 0, stream>>>(p);
  else mla_cache_write<NOPE, ROPE, false, false, NOPE_CHUNKS><<<grid, block, 0, stream>>>(p);
}

template <int NOPE, int ROPE>
cudaError_t launch_modes(const RtpRefMlaParams& p, cudaStream_t stream) {
  const int64_t blocks = (p.num_tokens + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > 0x7FFFFFFF) return cudaErrorInvalidConfiguration;
  const dim3 grid(static_cast<unsigned>(blocks)), block(kWarp * kWarpsPerBlock);
  if (p.R <= 2 * kWarp * kChunk) launch_variant<NOPE, ROPE, 2>(p, grid, block, stream);
  else launch_variant<NOPE, ROPE, 4>(p, grid, block, stream);
  return cudaGetLastError();
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
