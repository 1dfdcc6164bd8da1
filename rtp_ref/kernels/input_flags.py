"""Where a built-in kernel's value checks go when they must not cost a device sync: a flag word on the device.

A host check of slot values (``slot < capacity``) reads the slots back, which syncs the stream, costs tens of
microseconds at decode sizes and cannot run inside a captured CUDA graph. The built-in kernels' default call
path (``validation="device"``) checks shapes, dtypes and strides on the host from metadata only; each program
checks its own slots on the device, writes nothing for a slot past the cache and sets a bit in a flag word.
``take_input_errors`` reads and clears the word (one sync, when the caller chooses). ``validation="host"``
keeps the reference's full checks before the launch: a bad call raises and writes nothing, at the price of the
sync. What is left to the caller on the device path: a slot used twice, and the scale's value.
"""

from __future__ import annotations

from typing import Literal

import torch

#: how a built-in kernel checks argument values: on the device (no sync, bad slots skipped and flagged) or on
#: the host before the launch (the reference's checks: raises, one device sync)
Validation = Literal["device", "host"]
VALIDATIONS: tuple[Validation, ...] = ("device", "host")
#: bit of the flag word: a program met a slot at or past the cache's capacity and wrote nothing for it
SLOT_PAST_CAPACITY = 1
_MEANINGS = {SLOT_PAST_CAPACITY: "a slot at or past the cache's capacity was skipped (nothing written for it)"}


def check_validation(value: str) -> Validation:
    """``value`` as a ``Validation``; ValueError naming it and the valid values otherwise."""
    if value not in VALIDATIONS:
        raise ValueError(f"validation={value!r}; valid: {', '.join(VALIDATIONS)}")
    return value


class InputFlags:
    """One int32 flag word per device, allocated at a kernel's first call there (a later capture reuses it)."""

    def __init__(self) -> None:
        self._words: dict[torch.device, torch.Tensor] = {}

    def word(self, device: torch.device) -> torch.Tensor:
        """The flag word of ``device`` (zero until a kernel sets a bit); created, zeroed, on first use."""
        word = self._words.get(device)
        if word is None:
            word = self._words[device] = torch.zeros(1, dtype=torch.int32, device=device)
        return word

    def take(self) -> list[str]:
        """What the kernels flagged on every device since the last take, in words, and clear the flags.

        Syncs each device's stream once (it reads the word).
        """
        found = []
        for device, word in self._words.items():
            bits = int(word.item())
            if bits:
                word.zero_()
                found += [f"{device}: {text}" for bit, text in _MEANINGS.items() if bits & bit]
        return found
