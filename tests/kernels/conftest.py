"""Kernel tests run Triton in its CPU interpreter when torch sees no GPU.

Triton reads TRITON_INTERPRET when a kernel is decorated, i.e. when rtp_ref.kernels.triton_mla is
first imported, so it is set here, before any test module of this folder imports it. A value the
user set is kept.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
