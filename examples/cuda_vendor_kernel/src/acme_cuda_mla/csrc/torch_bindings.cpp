// Registers the kernels of cache_kernels.cu as torch ops: torch.ops.acme_cuda_mla.<name>(...).
// (A TORCH_LIBRARY registration needs only torch/library.h: no pybind11, no Python headers, a faster
// build than torch/extension.h.)

#include "ops.h"

#include <torch/library.h>

TORCH_LIBRARY(acme_cuda_mla, m) {
  m.def(
      "concat_and_cache_mla(Tensor kv_c, Tensor k_pe, Tensor(a!) kv_cache, Tensor slot_mapping, "
      "str kv_cache_dtype, Tensor scale) -> ()");
  m.def(
      "concat_and_cache_mla_crashy(Tensor kv_c, Tensor k_pe, Tensor(a!) kv_cache, Tensor slot_mapping, "
      "str kv_cache_dtype, Tensor scale) -> ()");
}

// CUDA tensors only: called with CPU tensors the op raises (no kernel for the CPU backend).
TORCH_LIBRARY_IMPL(acme_cuda_mla, CUDA, m) {
  m.impl("concat_and_cache_mla", &concat_and_cache_mla);
  m.impl("concat_and_cache_mla_crashy", &concat_and_cache_mla_crashy);
}
