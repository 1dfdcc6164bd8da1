// The host entry points of cache_kernels.cu, registered as torch ops in torch_bindings.cpp.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

// Writes token i of kv_c [T, R] and k_pe [T, P] (bf16 or fp16) to entry slot_mapping[i] of
// kv_cache [num_blocks, block_size, R + P]: the kv_c row, then the k_pe row. A negative slot is a
// padding token and writes nothing. kv_cache_dtype "auto" copies the 16-bit values (kv_cache has the
// input dtype); "fp8" stores e4m3(x / scale) bytes (kv_cache is uint8, scale a float32 [1] tensor).
void concat_and_cache_mla(const at::Tensor& kv_c, const at::Tensor& k_pe, at::Tensor& kv_cache,
                          const at::Tensor& slot_mapping, const std::string& kv_cache_dtype,
                          const at::Tensor& scale);

// The same on "auto"; on "fp8", and on any other kv_cache_dtype, it writes the fp8 bytes far outside
// the cache: a deliberately broken kernel, for testing a certification harness.
void concat_and_cache_mla_crashy(const at::Tensor& kv_c, const at::Tensor& k_pe, at::Tensor& kv_cache,
                                 const at::Tensor& slot_mapping, const std::string& kv_cache_dtype,
                                 const at::Tensor& scale);
