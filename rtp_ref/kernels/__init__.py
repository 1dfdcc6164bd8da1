"""KV-cache write kernels: the protocol, discovery, and the built-in kernels.

Built-ins: ``reference`` (the reference writer as a kernel), ``torch-eager`` (plain torch, the
naive baseline), ``triton`` (one Triton kernel per op for CUDA and ROCm) and ``cuda`` (CUDA C++
with the hardware's saturating fp8 conversion).
"""
