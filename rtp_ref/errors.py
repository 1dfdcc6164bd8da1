"""User-facing error type shared by every room of rtp-ref."""


class RtpRefError(ValueError):
    """Bad input from a user (file, flag, argument).

    The message names the offending item, its value and what would be valid. The command-line entry
    point turns it into a one-line message and exit code 2, never a traceback. Subclassing
    ``ValueError`` keeps the library contract "bad input raises ValueError".
    """


class UnsupportedLayoutError(NotImplementedError):
    """Raised by a kernel asked for a layout (or device) it does not claim.

    (Kernels import it from ``rtp_ref.kernels.protocol``, the protocol they implement; it lives here so the
    contract module, which raises it too, needs nothing from the protocol module.)
    """
