"""The launch-size case: every write op called with more tokens than 65,535, the most blocks a CUDA grid's y and z
dimensions hold.

A kernel that puts its tokens (or rows of them) on grid.y or grid.z fails to launch, or writes only the first
65,535, once a prefill batch passes that many tokens (ik_llama.cpp #2367); every other case of the suite has a few
dozen tokens. So each write op has one case of kind ``launch`` per variant (``OpCases.launch``): a random case of
``GPU_LAUNCH_TOKENS`` tokens in blocks of ``LAUNCH_BLOCK_SIZE``, bf16 inputs, graded like any other case, in the
regular tier.

Its size depends on where the kernel runs, which is why the op gives the case per device (``OpCases.keys``): on a
GPU it is ``GPU_LAUNCH_TOKENS``; on the CPU (the reference and torch-eager there, and the Triton kernels in Triton's
interpreter, which pays Python for every program it runs) it is reduced to ``CPU_LAUNCH_TOKENS``: the same kind and
code path at a size the CPU writes and grades in a tenth of a second, its id saying so (``launch-t256-b16-bf16``).
A CPU has no grid limit to find; the reduced case keeps the case's construction and grading tested on every run.
"""

from __future__ import annotations

#: the kind of the launch-size cases (a deviation may name it: rtp_ref.platform.CASE_KINDS)
LAUNCH_KIND = "launch"
#: tokens of the case on a GPU: one more than a grid's y or z dimension holds
GPU_LAUNCH_TOKENS = 65_536
#: tokens of the reduced case on the CPU: four programs of the Triton kernels' interpreter block (64 tokens)
CPU_LAUNCH_TOKENS = 256
#: the case's block size (vLLM's default)
LAUNCH_BLOCK_SIZE = 16
#: the case's seed (the other cases of a variant count from 1)
LAUNCH_SEED = 65_536


def launch_blocks(tokens: int) -> int:
    """Blocks of the launch-size case's cache: one more than ``tokens`` fill, not the other cases' two slots a token
    (the grader keeps copies of the case's bytes on the host: for a 65,536-token MLA case that halves them); a stray
    write still lands in the spare block, a padding slot's entry or the guard bytes."""
    return -(-tokens // LAUNCH_BLOCK_SIZE) + 1


def launch_tokens(device: str) -> int:
    """Tokens of the launch-size case for a kernel on torch device type ``device``: ``CPU_LAUNCH_TOKENS`` on the
    CPU, ``GPU_LAUNCH_TOKENS`` on any other device."""
    return CPU_LAUNCH_TOKENS if device == "cpu" else GPU_LAUNCH_TOKENS
