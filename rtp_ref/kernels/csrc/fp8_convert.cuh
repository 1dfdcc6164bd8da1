// fp8 and ue8m0 conversion shared by rtp-ref's CUDA kernels (mla_cache.cu, mha_indexer.cu).
//
// fp8_software is round-half-even on the float32 bits, the algorithm of rtp_ref.fp8.codec.encode, for any
// format and mode given as traits; ue8m0_ceil/ue8m0_value are rtp_ref.fp8.ue8m0's 'ceil' rule.

#pragma once

#include <stdint.h>

namespace rtp_ref_fp8 {

// Per-launch constants in registers (float copies of the doubles, int32 format traits).
struct Fmt {
  int man_bits, emin, max_code, nan_code, inf_code;
  bool neg_zero, has_inf, satfinite;
};

// Round-half-even fp8 encoding in integer arithmetic (rtp_ref.fp8.codec.encode).
static __device__ __forceinline__ uint8_t fp8_software(float x, const Fmt& f) {
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

// Smallest power of two >= s as a ue8m0 byte (rtp_ref.fp8.ue8m0 'ceil'); s > 0 or NaN/inf.
static __device__ __forceinline__ int ue8m0_ceil(float s) {
  const bool subnormal = s < 1.1754943508222875e-38f;
  const uint32_t bits = __float_as_uint(subnormal ? s * 16777216.0f : s);  // exact rescale
  const int exp_field = (bits >> 23) & 0xFF;
  if (exp_field == 0xFF) return 0xFF;
  int byte = exp_field + ((bits & 0x7FFFFF) != 0 ? 1 : 0) - (subnormal ? 24 : 0);
  byte = byte < 0 ? 0 : byte;
  return byte > 254 ? 0xFF : byte;
}

static __device__ __forceinline__ float ue8m0_value(int byte) {
  if (byte == 0) return __uint_as_float(0x00400000u);  // 2**-127, a float32 subnormal
  if (byte == 0xFF) return __uint_as_float(0x7FC00000u);
  return __uint_as_float(static_cast<uint32_t>(byte) << 23);
}


}  // namespace rtp_ref_fp8
