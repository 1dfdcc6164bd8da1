"""available_builtin_kernels / unavailable_builtin_kernels: never fail, always explain."""

from __future__ import annotations

import torch

from rtp_ref.kernels.builtin import available_builtin_kernels, unavailable_builtin_kernels
from rtp_ref.kernels.cuda_mla import unavailable_reason
from rtp_ref.kernels.gather_builtin import gather_kernels
from rtp_ref.kernels.mha_indexer_builtin import mha_indexer_kernels
from rtp_ref.kernels.protocol import check_kernel, device_to_run
from rtp_ref.ops import OPS


def test_every_builtin_is_either_available_or_has_a_reason() -> None:
    """Every write op has torch-eager, triton and cuda kernels, the read op triton and cuda ones (named with the
    op's suffix): each runs here or has a reason; the other ops' references are kernels too (the MLA one is
    discovery's)."""
    available = {k.name for k in [*available_builtin_kernels(), *mha_indexer_kernels(), *gather_kernels()]}
    missing = unavailable_builtin_kernels()
    writes = [op.name_suffix for op in OPS.values() if not op.reads]
    assert {f"torch-eager{s}" for s in writes} <= available
    every = {f"{impl}{s}" for impl in ("torch-eager", "triton", "cuda") for s in writes} | {
        f"{impl}{op.name_suffix}" for impl in ("triton", "cuda") for op in OPS.values() if op.reads}
    assert available | set(missing) == every | {"reference-mha", "reference-indexer", "reference-gather",
                                                "reference-indexer-gather"}
    assert not available & set(missing)
    assert all(isinstance(reason, str) and reason for reason in missing.values())


def test_available_builtins_satisfy_the_protocol_and_bind() -> None:
    for kernel in [*available_builtin_kernels(), *mha_indexer_kernels(), *gather_kernels()]:
        check_kernel(kernel, "builtin")
        assert callable(getattr(kernel, "bind", None))


def test_cuda_kernel_reason_matches_this_machine() -> None:
    reason = unavailable_reason()
    if not torch.cuda.is_available():
        assert reason == "torch sees no CUDA GPU" or (torch.version.hip is not None and "ROCm" in str(reason))


def test_builtins_are_bindable_kernels() -> None:
    from rtp_ref.kernels.protocol import BindableKernel

    assert all(isinstance(k, BindableKernel) for k in available_builtin_kernels())



def test_device_to_run_prefers_a_gpu_only_when_asked_and_present() -> None:
    gpu = torch.cuda.is_available()
    assert device_to_run(["cpu"]) == "cpu"
    assert device_to_run(["cpu", "cuda"], prefer_gpu=False) == "cpu"
    assert device_to_run(["cpu", "cuda"]) == ("cuda" if gpu else "cpu")
    assert device_to_run(["cuda"]) == ("cuda" if gpu else None)
    assert device_to_run(["cuda"], prefer_gpu=False) == ("cuda" if gpu else None)
    assert device_to_run([]) is None


def test_the_cuda_kernel_declares_its_limits_as_data() -> None:
    """Its register budget is a declared limit (``supports``), so the suite reports such cases as refused."""
    from rtp_ref.contract import WriteContract
    from rtp_ref.kernels.cuda_mla import CudaMlaKernel
    from rtp_ref.platform import load_platform

    contract = WriteContract.for_platform(load_platform("cuda-sm90"))
    kernel = CudaMlaKernel()
    assert kernel.supports(contract.layout("fp8_ds_mla", 512, 64)) is None
    assert kernel.supports(contract.layout("auto", 256, 32)) is None
    reason = kernel.supports(contract.layout("auto", 4096, 64))
    assert reason is not None and "kv_lora_rank <= " in reason


def test_the_mha_indexer_kernels_declare_their_quant_block_limits() -> None:
    """triton-indexer and cuda-indexer take power-of-two quant blocks only: declared, not only raised."""
    import dataclasses

    import torch

    from rtp_ref.kernels.cuda_mha_indexer import CUDA_MAX_QUANT_BLOCK, prepare_cuda_indexer
    from rtp_ref.kernels.mha_indexer_builtin import IndexerKernel
    from rtp_ref.kv.indexer import indexer_layout
    from rtp_ref.platform import load_platform

    kernel = IndexerKernel("cuda", prepare_cuda_indexer, ("cuda",), lambda contract: "hardware",
                           max_quant_block=CUDA_MAX_QUANT_BLOCK)
    layout = indexer_layout(load_platform("cuda-sm90"), 128, 64)
    assert kernel.supports(layout) is None
    odd = kernel.supports(dataclasses.replace(layout, quant_block_size=96))
    assert odd is not None and "power of two up to 1024" in odd
    assert kernel.bind(kernel.contract_for(torch.device("cpu"))).max_quant_block == CUDA_MAX_QUANT_BLOCK
