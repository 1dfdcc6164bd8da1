"""The rtp-ref conformance suite: certifies KV-cache write kernels against the reference contract.

Run it with ``rtp-ref certify`` (reports) or ``pytest conformance --platform NAME`` (plain pytest).
Installed as ``rtp_ref.conformance``.
"""
