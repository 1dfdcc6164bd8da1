// rtp-ref's registration of vLLM's KV-cache ops, under the torch library namespace `rtp_vllm`.
//
// This file is rtp-ref's own. It is compiled together with vLLM's csrc/cache_kernels.cu (taken unmodified from the
// directory $VLLM_SRC, never part of this repository) and replaces vLLM's csrc/torch_bindings.cpp, which registers
// every op of vLLM and needs the rest of its sources: here only the cache ops rtp-ref's kernels call are registered.
//
// vLLM's host functions take torch's stable-ABI tensors (torch::stable::Tensor), so they are registered through the
// stable registration macros (STABLE_TORCH_LIBRARY / TORCH_BOX), as vLLM registers them. The declarations below
// restate the signatures of the definitions in cache_kernels.cu; a mismatch is a link error (an undefined symbol
// when the library is loaded), never a silent call with the wrong arguments.

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>

#include <cstdint>
#include <optional>
#include <string>

using torch::stable::Tensor;

// --- vLLM's functions (defined in csrc/cache_kernels.cu) ---

void reshape_and_cache_flash(Tensor& key, Tensor& value, Tensor& key_cache, Tensor& value_cache, Tensor& slot_mapping,
                             const std::string& kv_cache_dtype, Tensor& k_scale, Tensor& v_scale);

void concat_and_cache_mla(Tensor& kv_c, Tensor& k_pe, Tensor& kv_cache, Tensor& slot_mapping,
                          const std::string& kv_cache_dtype, Tensor& scale, bool skip_scale);

void indexer_k_quant_and_cache(Tensor& k, Tensor& kv_cache, Tensor& slot_mapping, int64_t quant_block_size,
                               const std::string& scale_fmt);

void gather_and_maybe_dequant_cache(Tensor const& src_cache, Tensor const& dst, Tensor const& block_table,
                                    Tensor const& cu_seq_lens, Tensor const& token_to_seq, int64_t num_tokens,
                                    const std::string& kv_cache_dtype, Tensor const& scale,
                                    std::optional<Tensor> seq_starts);

void cp_gather_and_upconvert_fp8_kv_cache(Tensor const& src_cache, Tensor const& dst, Tensor const& block_table,
                                          Tensor const& workspace_starts, int64_t batch_size,
                                          std::optional<Tensor> seq_starts, std::optional<Tensor> host_cache,
                                          std::optional<Tensor> host_row_ids, std::optional<Tensor> device_row_ids);

void cp_gather_indexer_k_quant_cache(const Tensor& kv_cache, Tensor& dst_k, Tensor& dst_scale,
                                     const Tensor& block_table, const Tensor& cu_seq_lens);

// --- the schemas: the functions' parameters in order, outputs marked mutable (Tensor!) ---

STABLE_TORCH_LIBRARY(rtp_vllm, m) {
  m.def("reshape_and_cache_flash(Tensor key, Tensor value, Tensor! key_cache, Tensor! value_cache, "
        "Tensor slot_mapping, str kv_cache_dtype, Tensor k_scale, Tensor v_scale) -> ()");
  m.def("concat_and_cache_mla(Tensor kv_c, Tensor k_pe, Tensor! kv_cache, Tensor slot_mapping, "
        "str kv_cache_dtype, Tensor scale, bool skip_scale=False) -> ()");
  m.def("indexer_k_quant_and_cache(Tensor k, Tensor! kv_cache, Tensor slot_mapping, int quant_block_size, "
        "str scale_fmt) -> ()");
  m.def("gather_and_maybe_dequant_cache(Tensor src_cache, Tensor! dst, Tensor block_table, Tensor cu_seq_lens, "
        "Tensor token_to_seq, int num_tokens, str kv_cache_dtype, Tensor scale, Tensor? seq_starts=None) -> ()");
  m.def("cp_gather_and_upconvert_fp8_kv_cache(Tensor src_cache, Tensor! dst, Tensor block_table, "
        "Tensor workspace_starts, int batch_size, Tensor? seq_starts=None, Tensor? host_cache=None, "
        "Tensor? host_row_ids=None, Tensor? device_row_ids=None) -> ()");
  m.def("cp_gather_indexer_k_quant_cache(Tensor kv_cache, Tensor! dst_k, Tensor! dst_scale, Tensor block_table, "
        "Tensor cu_seq_lens) -> ()");
}

STABLE_TORCH_LIBRARY_IMPL(rtp_vllm, CUDA, m) {
  m.impl("reshape_and_cache_flash", TORCH_BOX(&reshape_and_cache_flash));
  m.impl("concat_and_cache_mla", TORCH_BOX(&concat_and_cache_mla));
  m.impl("indexer_k_quant_and_cache", TORCH_BOX(&indexer_k_quant_and_cache));
  m.impl("gather_and_maybe_dequant_cache", TORCH_BOX(&gather_and_maybe_dequant_cache));
  m.impl("cp_gather_and_upconvert_fp8_kv_cache", TORCH_BOX(&cp_gather_and_upconvert_fp8_kv_cache));
  m.impl("cp_gather_indexer_k_quant_cache", TORCH_BOX(&cp_gather_indexer_k_quant_cache));
}
