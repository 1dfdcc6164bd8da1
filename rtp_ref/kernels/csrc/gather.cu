// The cache reads in CUDA C++ (rtp_ref/kernels/cuda_gather.py): gather_and_maybe_dequant_cache (contract in
// rtp_ref/kv/gather.py) and cp_gather_indexer_k_quant_cache (rtp_ref/kv/indexer_gather.py: bytes copied).
// MLA: One thread block per row of dst; its threads stride over the row's columns. Each block
// finds its sequence by a binary search of cu_seq_lens (no host-side search), its slot through the block table,
// and decodes the entry from the layout's field table (the plan of rtp_ref/kernels/write_plan.py: offsets,
// modes, tile scales). Bytes are read one at a time, so no field needs alignment. fp8 codes are decoded
// exactly in integer arithmetic from the format's traits, multiplied by their scale with __fmul_rn (one
// rounding, no contraction), and rounded to dst's dtype by the _rn conversions; a NaN is stored as the
// dtype's canonical bits. All offsets are int64. The host side is plain C, called through ctypes.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

// Mirror of the ctypes Structure in cuda_gather.py: 8-byte fields, no padding.
struct RtpRefGatherParams {
  int64_t cache, dst, table, cu, starts, scale;  // device addresses (starts 0: no seq_starts)
  int64_t rows, batch, block_size, block_bytes, table_row, table_col, dst_row, dst_col;
  int64_t table_i32, cu_i32, starts_i32;  // index tensors' dtypes: 1 for int32, 0 for int64
  int64_t r, p, nope_mode, rope_mode, nope_off, rope_off, data_bytes, trail_bytes;
  int64_t tile, scale_ue8m0, scale_trailing, scale_off, in_bf16, out;  // out: 0 fp32, 1 bf16, 2 fp16
  int64_t man_bits, emin, max_code, neg_zero, has_inf, inf_code;
};

struct RtpRefIndexerGatherParams {
  int64_t cache, dst_k, dst_scale, table, cu;  // device addresses
  int64_t rows, batch, block_size, block_bytes, table_row, table_col, k_row, scale_row, table_i32, cu_i32;
  int64_t head_dim, scale_bytes;  // a token's value bytes and scale bytes
};

namespace {

constexpr int kThreads = 128;

__device__ __forceinline__ int64_t index_at(int64_t base, int64_t i, int64_t is32) {
  return is32 ? static_cast<int64_t>(reinterpret_cast<const int32_t*>(base)[i])
              : reinterpret_cast<const int64_t*>(base)[i];
}

__device__ __forceinline__ uint32_t bytes_at(const uint8_t* at, int n) {
  uint32_t v = 0;
  for (int k = 0; k < n; ++k) v |= static_cast<uint32_t>(at[k]) << (8 * k);
  return v;
}

// The exact value of fp8 code c of the format the traits describe.
__device__ __forceinline__ float fp8_decode(uint32_t c, const RtpRefGatherParams& p) {
  const int man = static_cast<int>(p.man_bits), emin = static_cast<int>(p.emin);
  const uint32_t mag = c & 0x7F, e = mag >> man, m = mag & ((1u << man) - 1);
  float v = e == 0 ? static_cast<float>(m) * __uint_as_float(static_cast<uint32_t>(emin - man + 127) << 23)
                   : __uint_as_float((static_cast<uint32_t>(static_cast<int>(e) - 1 + emin + 127) << 23) |
                                     (m << (23 - man)));
  if (c >= 128) v = -v;
  bool nan = mag > static_cast<uint32_t>(p.max_code);
  if (p.has_inf && mag == static_cast<uint32_t>(p.inf_code)) {
    v = c >= 128 ? -__uint_as_float(0x7F800000u) : __uint_as_float(0x7F800000u);
    nan = false;
  }
  if (!p.neg_zero && c == 0x80) nan = true;
  return nan ? __uint_as_float(0x7FC00000u) : v;
}

// Column col of one value field of the entry at row (mode 0: 16-bit copy; 1: fp8 x the per-tensor scale;
// 2: fp8 x its tile's scale), as float32.
__device__ __forceinline__ float field_value(const uint8_t* block_base, const uint8_t* row, int64_t offset,
                                             int64_t col, int64_t mode, int64_t off, float tensor_scale,
                                             const RtpRefGatherParams& p) {
  if (mode == 0) {
    const uint32_t bits = bytes_at(row + off + 2 * col, 2);
    return p.in_bf16 ? __uint_as_float(bits << 16) : __half2float(__ushort_as_half(static_cast<uint16_t>(bits)));
  }
  const float v = fp8_decode(row[off + col], p);
  if (mode == 1) return __fmul_rn(v, tensor_scale);
  const uint8_t* scales = p.scale_trailing ? block_base + p.block_size * p.data_bytes + offset * p.trail_bytes
                                           : row;
  const int64_t tile = col / p.tile;
  float s;
  if (p.scale_ue8m0) {  // 2^(e - 127); e = 0 is the subnormal 2^-127, 255 NaN
    const uint32_t e = scales[p.scale_off + tile];
    s = __uint_as_float(e == 0 ? 0x00400000u : e == 0xFF ? 0x7FC00000u : e << 23);
  } else {
    s = __uint_as_float(bytes_at(scales + p.scale_off + 4 * tile, 4));
  }
  return __fmul_rn(v, s);
}

__device__ __forceinline__ void store(const RtpRefGatherParams& p, int64_t r, int64_t col, float v) {
  const int64_t at = r * p.dst_row + col * p.dst_col;
  const bool nan = v != v;
  if (p.out == 0) {
    reinterpret_cast<uint32_t*>(p.dst)[at] = nan ? 0x7FC00000u : __float_as_uint(v);
  } else if (p.out == 1) {
    reinterpret_cast<uint16_t*>(p.dst)[at] = nan ? 0x7FC0 : __bfloat16_as_ushort(__float2bfloat16_rn(v));
  } else {
    reinterpret_cast<uint16_t*>(p.dst)[at] = nan ? 0x7E00 : __half_as_ushort(__float2half_rn(v));
  }
}

// The sequence row r belongs to: the first b with cu[b + 1] > r (cu never decreases); batch when r is past them.
__device__ __forceinline__ int64_t sequence_of(int64_t r, int64_t cu, int64_t batch, int64_t cu_i32) {
  int64_t lo = 0, hi = batch;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (index_at(cu, mid + 1, cu_i32) <= r) lo = mid + 1; else hi = mid;
  }
  return lo;
}

__global__ void __launch_bounds__(kThreads) mla_gather(const RtpRefGatherParams p) {
  const int64_t r = blockIdx.x;
  const int64_t b = sequence_of(r, p.cu, p.batch, p.cu_i32);
  if (b >= p.batch) return;  // a row past cu[batch]: left alone
  int64_t pos = r - index_at(p.cu, b, p.cu_i32);
  if (p.starts) pos += index_at(p.starts, b, p.starts_i32);
  const int64_t logical = pos / p.block_size, offset = pos - logical * p.block_size;
  const int64_t block = index_at(p.table, b * p.table_row + logical * p.table_col, p.table_i32);
  const uint8_t* block_base = reinterpret_cast<const uint8_t*>(p.cache) + block * p.block_bytes;
  const uint8_t* row = block_base + offset * p.data_bytes;
  const float tensor_scale = (p.nope_mode == 1 || p.rope_mode == 1) ? *reinterpret_cast<const float*>(p.scale)
                                                                    : 1.0f;
  for (int64_t col = threadIdx.x; col < p.r + p.p; col += blockDim.x) {
    const bool nope = col < p.r;
    const float v = field_value(block_base, row, offset, nope ? col : col - p.r, nope ? p.nope_mode : p.rope_mode,
                                nope ? p.nope_off : p.rope_off, tensor_scale, p);
    store(p, r, col, v);
  }
}

__global__ void __launch_bounds__(kThreads) indexer_gather(const RtpRefIndexerGatherParams p) {
  const int64_t r = blockIdx.x;
  const int64_t b = sequence_of(r, p.cu, p.batch, p.cu_i32);
  if (b >= p.batch) return;
  const int64_t pos = r - index_at(p.cu, b, p.cu_i32);
  const int64_t logical = pos / p.block_size, offset = pos - logical * p.block_size;
  const int64_t block = index_at(p.table, b * p.table_row + logical * p.table_col, p.table_i32);
  const uint8_t* base = reinterpret_cast<const uint8_t*>(p.cache) + block * p.block_bytes;
  uint8_t* k = reinterpret_cast<uint8_t*>(p.dst_k) + r * p.k_row;
  uint8_t* s = reinterpret_cast<uint8_t*>(p.dst_scale) + r * p.scale_row;
  for (int64_t i = threadIdx.x; i < p.head_dim; i += blockDim.x) k[i] = base[offset * p.head_dim + i];
  for (int64_t i = threadIdx.x; i < p.scale_bytes; i += blockDim.x) {
    s[i] = base[p.block_size * p.head_dim + offset * p.scale_bytes + i];
  }
}

}  // namespace

extern "C" {

int rtp_ref_indexer_gather(const RtpRefIndexerGatherParams* p, void* stream) {
  if (p->rows == 0) return 0;
  indexer_gather<<<static_cast<unsigned>(p->rows), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(*p);
  return static_cast<int>(cudaGetLastError());
}

int rtp_ref_mla_gather(const RtpRefGatherParams* p, void* stream) {
  if (p->rows == 0) return 0;
  mla_gather<<<static_cast<unsigned>(p->rows), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(*p);
  return static_cast<int>(cudaGetLastError());
}

const char* rtp_ref_gather_error_string(int code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }

}  // extern "C"
