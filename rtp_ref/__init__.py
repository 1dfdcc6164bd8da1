"""rtp-ref: a conformance kit for LLM-inference KV-cache kernels.

Rooms: ``fp8`` (bit-exact numerics), ``platform`` (target tables), ``kv`` (KV-cache specs and MLA
layouts), ``args`` / ``plugins`` (server plumbing), ``kernels`` and ``certify`` (the suite's runner).
"""

__version__ = "0.1.0"
