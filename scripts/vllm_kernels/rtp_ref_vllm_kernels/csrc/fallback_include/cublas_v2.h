// rtp-ref's stand-in for cuBLAS's header, on the include path only where the CUDA toolkit has no cublas_v2.h (a
// toolkit installed without its cuBLAS development files). vLLM's csrc/torch_utils.h includes cublas_v2.h for one
// helper that returns a cublasHandle_t; the cache ops never call cuBLAS, so the opaque handle type is all they need.
#pragma once
typedef struct cublasContext* cublasHandle_t;
