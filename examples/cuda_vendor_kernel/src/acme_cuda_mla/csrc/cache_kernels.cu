// ACME's concat_and_cache_mla: one MLA KV-cache entry per token, written the way serving engines'
// production kernels are written (see ../../../README.md for what that implies, on purpose):
//
//   * one thread block per token, `num_tokens` blocks, launched on torch's current stream and never
//     checked afterwards (a launch error stays pending for whoever asks next);
//   * the input rows are read 16 bytes at a time through `uint4` loads at `row + token * row_stride`,
//     so a row that is not 16-byte aligned faults ("misaligned address");
//   * slots are not validated: a negative slot is a padding token, any other slot is written.
//
// torch's extension builder compiles this with -D__CUDA_NO_HALF_OPERATORS__,
// -D__CUDA_NO_HALF_CONVERSIONS__, -D__CUDA_NO_BFLOAT16_CONVERSIONS__ and
// -D__CUDA_NO_HALF2_OPERATORS__: no implicit __half / __nv_bfloat16 <-> float conversion compiles,
// so every conversion below is spelled out (__ushort_as_bfloat16 + __bfloat162float, ...).

#include "ops.h"

#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace acme {

// What the kernel stores for each input value.
enum class Store {
  kCopy,       // "auto": the 16-bit value, bit for bit
  kFp8,        // "fp8": e4m3(x / scale), one byte
  kFp8Astray,  // the crashy variant's "fp8": the same byte, at a wildly wrong address
};

constexpr int kThreads = 128;        // threads per token
constexpr int kValuesPerLoad = 8;    // 16-bit values in one 16-byte load
// The crashy variant's destination offset: 64 TiB past the cache, where nothing is mapped.
constexpr int64_t kAstrayBytes = int64_t{1} << 46;

// The input element type's bits, as a float (exact for bf16 and fp16).
template <typename T>
struct Input;

template <>
struct Input<__nv_bfloat16> {
  static __device__ __forceinline__ float to_float(uint32_t bits) {
    return __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(bits)));
  }
};

template <>
struct Input<__half> {
  static __device__ __forceinline__ float to_float(uint32_t bits) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
  }
};

// x / scale as an OCP e4m3 byte: round to nearest even, saturating (finite overflow and +-inf become
// +-448). A true division, as the contract says: x * (1 / scale) can round differently. Every NaN,
// whatever its sign, becomes the one canonical code 0x7F: the hardware conversion (sm_89 and later)
// does that (measured on an H200: +-qNaN and +-sNaN all give 0x7F), and so does cuda_fp8.hpp's
// software path on older GPUs, so no NaN test is needed here.
__device__ __forceinline__ uint32_t to_e4m3(float x, float scale) {
  return __nv_cvt_float_to_fp8(x / scale, __NV_SATFINITE, __NV_E4M3);
}

// Four 16-bit inputs (two 32-bit words, little-endian) as four e4m3 bytes, value k in byte k.
template <typename T>
__device__ __forceinline__ uint32_t e4m3x4(uint32_t lo, uint32_t hi, float scale) {
  return to_e4m3(Input<T>::to_float(lo & 0xFFFFu), scale) |
         to_e4m3(Input<T>::to_float(lo >> 16), scale) << 8 |
         to_e4m3(Input<T>::to_float(hi & 0xFFFFu), scale) << 16 |
         to_e4m3(Input<T>::to_float(hi >> 16), scale) << 24;
}

// Writes the n values of one input row to element `pos` of the cache: 8 values per thread and step
// (one 16-byte load, one 16-byte or 8-byte store), then the n % 8 left one by one.
template <typename T, Store kStore>
__device__ __forceinline__ void write_row(const T* __restrict__ row, void* __restrict__ cache,
                                          int64_t pos, int n, float scale) {
  const uint4* __restrict__ src = reinterpret_cast<const uint4*>(row);
  const uint16_t* __restrict__ src16 = reinterpret_cast<const uint16_t*>(row);
  const int vectors = n / kValuesPerLoad;
  if constexpr (kStore == Store::kCopy) {
    uint16_t* __restrict__ dst16 = static_cast<uint16_t*>(cache) + pos;
    uint4* __restrict__ dst = reinterpret_cast<uint4*>(dst16);
    for (int i = threadIdx.x; i < vectors; i += blockDim.x) {
      dst[i] = src[i];
    }
    for (int i = vectors * kValuesPerLoad + threadIdx.x; i < n; i += blockDim.x) {
      dst16[i] = src16[i];
    }
  } else {
    uint8_t* __restrict__ dst8 = static_cast<uint8_t*>(cache) + pos;
    if constexpr (kStore == Store::kFp8Astray) {
      dst8 += kAstrayBytes;
    }
    uint2* __restrict__ dst = reinterpret_cast<uint2*>(dst8);
    for (int i = threadIdx.x; i < vectors; i += blockDim.x) {
      const uint4 v = src[i];
      dst[i] = make_uint2(e4m3x4<T>(v.x, v.y, scale), e4m3x4<T>(v.z, v.w, scale));
    }
    for (int i = vectors * kValuesPerLoad + threadIdx.x; i < n; i += blockDim.x) {
      dst8[i] = static_cast<uint8_t>(to_e4m3(Input<T>::to_float(src16[i]), scale));
    }
  }
}

// Grid: one block per token. Strides are in elements of their own tensor (the cache's in cache
// elements: 2-byte for "auto", 1-byte for "fp8"); block_stride may exceed block_size * entry_stride
// (padded blocks).
template <typename T, Store kStore>
__global__ void concat_and_cache_mla_kernel(const T* __restrict__ kv_c,               // [T, R]
                                            const T* __restrict__ k_pe,               // [T, P]
                                            void* __restrict__ kv_cache,              // [B, S, R+P]
                                            const int64_t* __restrict__ slot_mapping, // [T]
                                            const int64_t block_stride, const int64_t entry_stride,
                                            const int64_t kv_c_stride, const int64_t k_pe_stride,
                                            const int kv_lora_rank, const int pe_dim,
                                            const int block_size, const float* __restrict__ scale) {
  const int64_t token = blockIdx.x;
  const int64_t slot = slot_mapping[token];
  if (slot < 0) {
    return;  // a padding token
  }
  const int64_t entry = (slot / block_size) * block_stride + (slot % block_size) * entry_stride;
  const float s = kStore == Store::kCopy ? 1.0f : *scale;
  write_row<T, kStore>(kv_c + token * kv_c_stride, kv_cache, entry, kv_lora_rank, s);
  write_row<T, kStore>(k_pe + token * k_pe_stride, kv_cache, entry + kv_lora_rank, pe_dim, s);
}

template <typename T, Store kStore>
void launch(const at::Tensor& kv_c, const at::Tensor& k_pe, at::Tensor& kv_cache,
            const at::Tensor& slot_mapping, const at::Tensor& scale) {
  // slot_mapping may be shorter than kv_c (inputs padded for CUDA graphs): it gives the token count.
  const int64_t num_tokens = slot_mapping.size(0);
  const dim3 grid(static_cast<unsigned int>(num_tokens));  // zero tokens: an empty grid, launched anyway
  const dim3 block(kThreads);
  const c10::cuda::OptionalCUDAGuard device_guard(kv_c.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  concat_and_cache_mla_kernel<T, kStore><<<grid, block, 0, stream>>>(
      reinterpret_cast<const T*>(kv_c.data_ptr()), reinterpret_cast<const T*>(k_pe.data_ptr()),
      kv_cache.data_ptr(), slot_mapping.data_ptr<int64_t>(), kv_cache.stride(0), kv_cache.stride(1),
      kv_c.stride(0), k_pe.stride(0), static_cast<int>(kv_c.size(1)), static_cast<int>(k_pe.size(1)),
      static_cast<int>(kv_cache.size(1)), scale.data_ptr<float>());
  // No launch check (C10_CUDA_KERNEL_LAUNCH_CHECK), as in the production kernels this imitates.
}

template <Store kStore>
void dispatch_input(const at::Tensor& kv_c, const at::Tensor& k_pe, at::Tensor& kv_cache,
                    const at::Tensor& slot_mapping, const at::Tensor& scale) {
  switch (kv_c.scalar_type()) {
    case at::ScalarType::BFloat16:
      launch<__nv_bfloat16, kStore>(kv_c, k_pe, kv_cache, slot_mapping, scale);
      break;
    case at::ScalarType::Half:
      launch<__half, kStore>(kv_c, k_pe, kv_cache, slot_mapping, scale);
      break;
    default:
      TORCH_CHECK(false, "acme concat_and_cache_mla: kv_c must be bfloat16 or float16, got ",
                  kv_c.scalar_type());
  }
}

}  // namespace acme

void concat_and_cache_mla(const at::Tensor& kv_c, const at::Tensor& k_pe, at::Tensor& kv_cache,
                          const at::Tensor& slot_mapping, const std::string& kv_cache_dtype,
                          const at::Tensor& scale) {
  if (kv_cache_dtype == "auto") {
    acme::dispatch_input<acme::Store::kCopy>(kv_c, k_pe, kv_cache, slot_mapping, scale);
  } else if (kv_cache_dtype == "fp8") {
    acme::dispatch_input<acme::Store::kFp8>(kv_c, k_pe, kv_cache, slot_mapping, scale);
  } else {
    TORCH_CHECK_NOT_IMPLEMENTED(false, "acme concat_and_cache_mla: unsupported kv_cache_dtype '",
                                kv_cache_dtype, "'; supported: auto, fp8");
  }
}

void concat_and_cache_mla_crashy(const at::Tensor& kv_c, const at::Tensor& k_pe, at::Tensor& kv_cache,
                                 const at::Tensor& slot_mapping, const std::string& kv_cache_dtype,
                                 const at::Tensor& scale) {
  if (kv_cache_dtype == "auto") {
    acme::dispatch_input<acme::Store::kCopy>(kv_c, k_pe, kv_cache, slot_mapping, scale);
  } else {
    // "fp8", and every layout it does not claim: the (broken) fp8 path, no questions asked.
    acme::dispatch_input<acme::Store::kFp8Astray>(kv_c, k_pe, kv_cache, slot_mapping, scale);
  }
}
