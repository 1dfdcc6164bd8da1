"""rtp-ref's built-in kernels of the other cache families, as protocol kernels (rtp_ref.ops).

Each wraps one writer of ``(layout, ...)`` (the reference, torch-eager, triton, cuda) into the op's call:
the layout is worked out from the bound contract (the platform's fp8 format, conversion mode and layout
flags) and the call's shapes, as an engine's kernel reads them from its arguments. Unbound, a kernel follows
the platform table of the tensors' device, as the MLA built-ins do. Names: ``<impl>-mha``, ``<impl>-indexer``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Mapping
from typing import Any, Literal, cast

import torch

from rtp_ref.contract import DeviceContracts, WriteContract, default_contract
from rtp_ref.errors import RtpRefError, UnsupportedLayoutError
from rtp_ref.kernels.call_signature import Launch, LaunchCache, call_signature
from rtp_ref.kernels.input_flags import InputFlags, Validation, check_validation
from rtp_ref.kv.indexer import (
    FP8_SCALE_FORMATS,
    SCALE_FORMATS,
    IndexerLayout,
    indexer_layout_for,
    validate_indexer_args,
)
from rtp_ref.kv.mha_paged import (
    FP8_MHA_CACHE_DTYPES,
    MHA_CACHE_DTYPES,
    MhaPagedLayout,
    mha_head_size,
    mha_layout,
    validate_mha_args,
)
from rtp_ref.kv.padding import as_negative
from rtp_ref.kv.validate import accepted_slot_dtypes
from rtp_ref.ops import INDEXER_OP, MHA_OP, OPS, op_reference

#: a writer of the op's call with the layout first (the reference, torch-eager), or a lean writer's preparer
#: (``lean``: it returns the launch, rtp_ref.kernels.call_signature)
MhaWriter = Callable[..., Any]
IndexerWriter = Callable[..., Any]
#: how a writer converts fp8 under a contract (``software``/``torch`` whatever the contract)
PathRule = Callable[[WriteContract], str]
ConversionPath = Literal["hardware", "software", "torch"]


class _MhaIndexerKernel:
    """What the two ops' kernels share: a name, devices, the contract they follow and its conversion path, and
    how argument values are checked. A ``lean`` writer (triton, cuda) is a preparer: given the layout, a call's
    arguments and a ``flags`` word it returns the launch for calls of that metadata (rtp_ref.kernels.call_signature),
    which checks nothing and flags the slots past the cache it skipped (rtp_ref.kernels.input_flags); the kernel
    checks the metadata once per signature, and values too under ``validation="host"``, as the reference does.
    Other writers (the reference, torch-eager) check everything themselves, on the host, every call. A writer
    that takes fewer argument values than the op's states them as its ``input_domain`` (the CUDA writers: int64 slot
    mappings only), and the lean path refuses the others before writing."""

    writer: Callable[..., Any]
    #: the declared input domain (rtp_ref.kernels.protocol), set only where the writer narrows the op's
    input_domain: Mapping[str, tuple[str, ...]]

    def __init__(self, impl: str, suffix: str, devices: Collection[str], path_rule: PathRule,
                 contract: WriteContract | None, lean: bool, validation: Validation,
                 input_domain: Mapping[str, tuple[str, ...]] | None) -> None:
        self.impl, self.name, self.devices = impl, f"{impl}{suffix}", tuple(devices)
        self.path_rule, self.contract, self.lean = path_rule, contract, lean
        if input_domain is not None:
            self.input_domain = input_domain
        # the writers that are not lean read values on the host whatever is asked
        self.validation: Validation = check_validation(validation) if lean else "host"
        self.input_flags = InputFlags()
        self._contracts = DeviceContracts()
        self._checked = LaunchCache()

    @property
    def domain(self) -> Mapping[str, tuple[str, ...]] | None:
        """The declared input domain, None where the writer takes every value (what ``bind`` passes on)."""
        return getattr(self, "input_domain", None)

    def slot_dtypes(self) -> tuple[torch.dtype, ...]:
        """The slot_mapping dtypes the writer takes (its declared domain's, every one without)."""
        return accepted_slot_dtypes(self.domain or {})

    def contract_for(self, device: torch.device) -> WriteContract:
        """The bound contract, or the platform table of ``device`` when unbound (looked up once per device)."""
        return self.contract or self._contracts.of(device)

    @property
    def graph_safe(self) -> bool:
        """Whether a call can be captured in a CUDA graph and replayed with new inputs: a lean writer that checks
        values on the device (the others read values on the host)."""
        return self.lean and self.validation == "device"

    def take_input_errors(self) -> list[str]:
        """What the device-side checks flagged since the last take (one sync per device), and clear it."""
        return self.input_flags.take()

    def _negative(self, slot_mapping: torch.Tensor) -> torch.Tensor:
        """``slot_mapping`` in the negative padding convention the writers follow (rtp_ref.kv.padding)."""
        return as_negative(slot_mapping, self._contracts.padding_slot(self.contract, slot_mapping))

    def _bound(self, layout: object, *args: Any) -> Launch:
        """The write of ``layout`` for a checked call: a lean writer's prepared launch (it takes the flag word of
        the device of the call's first tensor), or the writer itself with the layout bound."""
        if self.lean:
            return cast(Launch, self.writer(layout, *args, flags=self.input_flags.word(args[0].device)))
        return functools.partial(self.writer, layout)

    def _write(self, signature: tuple[object, ...] | None, checked_layout: Callable[[], object], *args: Any) -> None:
        """Write through the checked launch of ``signature``; without one, ``checked_layout()`` checks the call and
        returns its layout, and the launch made for it is kept (``args``: what the launch is called with)."""
        write = self._checked.get(signature)
        if write is None:
            write = self._bound(checked_layout(), *args)
            self._checked.put(signature, write)
        write(*args)

    def _signature(self, *args: object) -> tuple[object, ...] | None:
        """The call's signature (rtp_ref.kernels.call_signature): a lean writer under device validation reuses
        the checked call of the same signature; every other call is checked afresh."""
        return call_signature(*args) if self.graph_safe else None

    @property
    def conversion_path(self) -> str:
        """``hardware``, ``software`` or ``torch``: how fp8 values are converted under the bound contract (the
        cpu table's when unbound: the suite always binds)."""
        return self.path_rule(self.contract or default_contract(torch.device("cpu")))


class MhaPagedKernel(_MhaIndexerKernel):
    """``reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale,
    v_scale)`` by one MHA writer: heads and head size come from the caches' shape. ``kv_cache_dtypes``: the variants
    it writes (every one by default; the torch-eager and CUDA writers: the fp8 ones and ``auto``)."""

    op = MHA_OP

    def __init__(self, impl: str, writer: MhaWriter, devices: Collection[str], path_rule: PathRule,
                 contract: WriteContract | None = None, *, lean: bool = False,
                 validation: Validation = "device", input_domain: Mapping[str, tuple[str, ...]] | None = None,
                 kv_cache_dtypes: Collection[str] = MHA_CACHE_DTYPES) -> None:
        super().__init__(impl, OPS[MHA_OP].name_suffix, devices, path_rule, contract, lean, validation, input_domain)
        self.writer = writer
        self.kv_cache_dtypes: Collection[str] = tuple(kv_cache_dtypes)

    def bind(self, contract: WriteContract, *, validation: Validation | None = None) -> MhaPagedKernel:
        """This kernel following ``contract`` (and checking values by ``validation``, when given)."""
        return MhaPagedKernel(self.impl, self.writer, self.devices, self.path_rule, contract, lean=self.lean,
                              validation=validation or self.validation, input_domain=self.domain,
                              kv_cache_dtypes=self.kv_cache_dtypes)

    def __call__(self, key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                 slot_mapping: torch.Tensor, kv_cache_dtype: str, k_scale: torch.Tensor,
                 v_scale: torch.Tensor) -> None:
        slot_mapping = self._negative(slot_mapping)

        def checked_layout() -> MhaPagedLayout:
            if kv_cache_dtype not in self.kv_cache_dtypes:
                raise UnsupportedLayoutError(f"{self.name}: kv_cache_dtype {kv_cache_dtype!r}; valid: "
                                             f"{', '.join(self.kv_cache_dtypes)}")
            if not isinstance(key_cache, torch.Tensor) or key_cache.dim() != 4:
                raise RtpRefError(f"key_cache: {getattr(key_cache, 'shape', key_cache)}; valid: a tensor "
                                  f"[num_blocks, block_size, num_kv_heads, head_size]")
            layout = mha_layout(self.contract_for(key_cache.device), kv_cache_dtype, key_cache.shape[2],
                                mha_head_size(kv_cache_dtype, key_cache.shape[3]))
            if self.lean:  # the lean writers check nothing themselves
                validate_mha_args(layout, key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale,
                                  values=self.validation == "host", slot_dtypes=self.slot_dtypes())
            return layout

        tensors = (key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale)
        self._write(self._signature(kv_cache_dtype, *tensors), checked_layout, *tensors)


class IndexerKernel(_MhaIndexerKernel):
    """``indexer_k_quant_and_cache(k, kv_cache, slot_mapping, quant_block_size, scale_fmt)`` by one indexer
    writer: head_dim comes from ``k``'s shape. ``max_quant_block``: the writer takes power-of-two quant blocks
    up to it only (a Triton block, a CUDA block of threads), declared through ``supports``; ``scale_fmts``: the
    variants it writes (every one by default; the CUDA writer: the fp8 ones)."""

    op = INDEXER_OP

    def __init__(self, impl: str, writer: IndexerWriter, devices: Collection[str], path_rule: PathRule,
                 contract: WriteContract | None = None, max_quant_block: int | None = None, *, lean: bool = False,
                 validation: Validation = "device", input_domain: Mapping[str, tuple[str, ...]] | None = None,
                 scale_fmts: Collection[str] = SCALE_FORMATS) -> None:
        super().__init__(impl, OPS[INDEXER_OP].name_suffix, devices, path_rule, contract, lean, validation,
                         input_domain)
        self.writer, self.max_quant_block = writer, max_quant_block
        self.scale_fmts: Collection[str] = tuple(scale_fmts)

    def bind(self, contract: WriteContract, *, validation: Validation | None = None) -> IndexerKernel:
        """This kernel following ``contract`` (and checking values by ``validation``, when given)."""
        return IndexerKernel(self.impl, self.writer, self.devices, self.path_rule, contract, self.max_quant_block,
                             lean=self.lean, validation=validation or self.validation, input_domain=self.domain,
                             scale_fmts=self.scale_fmts)

    def supports(self, layout: IndexerLayout) -> str | None:
        """None when the writer takes this layout's quant block, else why not (the protocol's ``supports``)."""
        quant, most = layout.quant_block_size, self.max_quant_block
        if most is None or (quant & (quant - 1) == 0 and quant <= most):
            return None
        return f"quant_block_size {quant}: it needs a power of two up to {most}"

    def __call__(self, k: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor, quant_block_size: int,
                 scale_fmt: str) -> None:
        slot_mapping = self._negative(slot_mapping)

        def checked_layout() -> IndexerLayout:
            if scale_fmt not in self.scale_fmts:
                raise UnsupportedLayoutError(f"{self.name}: scale_fmt {scale_fmt!r}; valid: "
                                             f"{', '.join(self.scale_fmts)}")
            if not isinstance(k, torch.Tensor) or k.dim() != 2:
                raise RtpRefError(f"k: {getattr(k, 'shape', k)}; valid: a tensor [num_tokens, head_dim]")
            contract = self.contract_for(k.device)
            layout = indexer_layout_for(contract, contract.flags, k.shape[1], quant_block_size, scale_fmt=scale_fmt)
            if self.lean:  # the lean writers check nothing themselves
                validate_indexer_args(layout, k, kv_cache, slot_mapping, scale_fmt, values=self.validation == "host",
                                      slot_dtypes=self.slot_dtypes())
            return layout

        self._write(self._signature(scale_fmt, quant_block_size, k, kv_cache, slot_mapping), checked_layout,
                    k, kv_cache, slot_mapping, scale_fmt)


def _software(contract: WriteContract) -> str:
    return "software"


def _torch(contract: WriteContract) -> str:
    return "torch"


def _triton_path(contract: WriteContract) -> str:
    from rtp_ref.kernels.triton_fp8 import SW, hardware_selector

    return "software" if hardware_selector(contract.element_format, contract.conversion_mode) == SW else "hardware"


def _cuda_path(contract: WriteContract) -> str:
    from rtp_ref.kernels.cuda_build import HARDWARE_NONE, hardware_conversion

    none = hardware_conversion(contract.element_format, contract.conversion_mode) == HARDWARE_NONE
    return "software" if none else "hardware"


def mha_indexer_kernels() -> list[MhaPagedKernel | IndexerKernel]:
    """The built-in kernels of ``reshape_and_cache_flash`` and ``indexer_k_quant_and_cache`` that can run here,
    unbound: the reference and torch-eager always, triton and cuda where the MLA ones can run."""
    from rtp_ref.kernels.builtin import unavailable_builtin_kernels
    from rtp_ref.kernels.torch_eager_mha_indexer import (
        torch_eager_indexer_k_quant_and_cache,
        torch_eager_reshape_and_cache_flash,
    )

    everywhere = ("cpu", "cuda")
    kernels: list[MhaPagedKernel | IndexerKernel] = [
        MhaPagedKernel("reference", reference_on_cpu_mha, everywhere, _software),
        IndexerKernel("reference", reference_on_cpu_indexer, everywhere, _software),
        MhaPagedKernel("torch-eager", torch_eager_reshape_and_cache_flash, everywhere, _torch,
                       kv_cache_dtypes=FP8_MHA_CACHE_DTYPES),
        IndexerKernel("torch-eager", torch_eager_indexer_k_quant_and_cache, everywhere, _torch),
    ]
    missing = unavailable_builtin_kernels()
    if "triton" not in missing:
        from rtp_ref.kernels.triton_fp8 import interpreted
        from rtp_ref.kernels.triton_indexer import TRITON_MAX_QUANT_BLOCK, prepare_triton_indexer
        from rtp_ref.kernels.triton_mha_paged import prepare_triton_mha

        # the interpreter runs on CPU tensors only; compiled Triton on CUDA/ROCm ("cuda" in torch)
        devices = ("cpu",) if interpreted() else ("cuda",)
        kernels += [MhaPagedKernel("triton", prepare_triton_mha, devices, _triton_path, lean=True),
                    IndexerKernel("triton", prepare_triton_indexer, devices, _triton_path,
                                  max_quant_block=TRITON_MAX_QUANT_BLOCK, lean=True)]
    if "cuda" not in missing:
        from rtp_ref.kernels.cuda_build import CUDA_SLOT_DOMAIN
        from rtp_ref.kernels.cuda_mha_indexer import CUDA_MAX_QUANT_BLOCK, prepare_cuda_indexer, prepare_cuda_mha

        kernels += [MhaPagedKernel("cuda", prepare_cuda_mha, ("cuda",), _cuda_path, lean=True,
                                   input_domain=CUDA_SLOT_DOMAIN, kv_cache_dtypes=FP8_MHA_CACHE_DTYPES),
                    # the CUDA writer stores fp8 only: it claims no E2M1 variant, and raises for one
                    IndexerKernel("cuda", prepare_cuda_indexer, ("cuda",), _cuda_path,
                                  max_quant_block=CUDA_MAX_QUANT_BLOCK, lean=True, input_domain=CUDA_SLOT_DOMAIN,
                                  scale_fmts=FP8_SCALE_FORMATS)]
    return kernels


def reference_on_cpu_mha(layout: MhaPagedLayout, key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                         value_cache: torch.Tensor, slot_mapping: torch.Tensor, k_scale: torch.Tensor,
                         v_scale: torch.Tensor) -> None:
    """The MHA reference on tensors of any device: it runs on the CPU (where it is defined) and writes back."""
    host = [t.cpu() for t in (key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale)]
    op_reference(MHA_OP)(layout, *host)
    key_cache.copy_(host[2])
    value_cache.copy_(host[3])


def reference_on_cpu_indexer(layout: IndexerLayout, k: torch.Tensor, kv_cache: torch.Tensor,
                             slot_mapping: torch.Tensor, scale_fmt: str) -> None:
    """The indexer reference on tensors of any device: it runs on the CPU and writes back."""
    cache = kv_cache.cpu()
    op_reference(INDEXER_OP)(layout, k.cpu(), cache, slot_mapping.cpu(), scale_fmt)
    kv_cache.copy_(cache)
