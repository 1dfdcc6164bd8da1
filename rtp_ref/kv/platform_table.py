"""What the KV room reads of a platform table, as a protocol: rtp_ref.platform.Platform is one, but the platform
loader stands on this room (it validates ``[layout_flags]`` and layout names with it), so this room names only the
attributes it reads and never imports the loader."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from rtp_ref.fp8.formats import FormatSource
from rtp_ref.kv.flags import FlagSource


class PlatformTable(FlagSource, FormatSource, Protocol):
    """A platform table as layouts and golden files use it: its layout flags and fp8 encoding (``FlagSource``,
    ``FormatSource``), the name and hash a golden file records, and the bytes per token it states by hand."""

    @property
    def name(self) -> str: ...

    @property
    def sha256(self) -> str: ...

    @property
    def layout_bytes(self) -> Mapping[str, int]: ...
