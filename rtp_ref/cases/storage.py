"""The locator every op's checks share: which token, slot, field and element a byte of a case storage belongs to,
and the example a failed check prints for it.

A case keeps all its tensors (caches, outputs) as views into one canary-filled byte storage between guard zones.
An op describes its storage once, as fields: for each field, a view over the storage whose first dimensions index
the slot (or output row) and whose other dimensions index the field's elements there, and the field's element
format. ``byte_positions`` turns any such view, strided or permuted (an HND cache), into the storage positions of
its bytes, so the map is derived from the very views the kernel was given, never from a second copy of the layout
arithmetic. From the fields, ``StorageMap`` names any byte (``token 3 (slot 17) key head 2 [5]``), decodes the
element it belongs to with the element's traits, and says ``not written`` where the kernel left an element as the
canary had it: a reader of the cache would get the canary there, which is not a number the kernel computed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

import torch

from rtp_ref.cases.value_checks import MAX_EXAMPLES
from rtp_ref.fp8.elements import ANY_NAN, ElementTraits, NanPolicy, element_bits


def _strided_positions(origin: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> torch.Tensor:
    """Storage positions of a byte-strided view at ``origin``: int64 ``shape`` (CPU)."""
    span = 1 + sum((n - 1) * s for n, s in zip(shape, strides, strict=True) if n > 0)
    return origin + torch.as_strided(torch.arange(span), shape, strides)


def _byte_layout(view: torch.Tensor, storage: torch.Tensor) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """``view`` as bytes of ``storage``: its first byte's position, and shape and byte strides with the element's
    bytes as one more, innermost dimension."""
    item = view.element_size()
    origin = view.data_ptr() - storage.data_ptr()
    assert 0 <= origin <= storage.numel(), "the view does not start inside the storage"
    return origin, (*view.shape, item), (*(s * item for s in view.stride()), 1)


def byte_positions(view: torch.Tensor, storage: torch.Tensor) -> torch.Tensor:
    """Where each byte of each element of ``view`` sits in ``storage``, a flat uint8 tensor ``view`` is a view of:
    int64 ``[*view.shape, view.element_size()]`` (any strides, any dtype; CPU result)."""
    return _strided_positions(*_byte_layout(view, storage))


@dataclass(frozen=True)
class FieldPlaces:
    """One field of a storage at every slot: ``positions[slot, i]`` is where byte ``i`` of the field's bytes at that
    slot sits in the storage. The field's elements lie there side by side, ``element.size`` bytes each, indexed by
    ``shape`` (``(heads, head_size)``: element ``k`` is head ``k // head_size``); ``labels`` names every index of
    ``shape`` but the last (``("head",)``). Of a format narrower than a byte, an "element" here is one unit, the
    byte holding ``element.per_unit`` values (two E2M1 codes), and its index the unit's.

    The places are kept as the strided byte view they come from (``origin``, ``view_shape``, ``view_strides``:
    slot dimensions first, the element's bytes last), so that a field's bytes of any storage-sized tensor are a view
    (``bytes_in``) and ``positions`` is built only when asked for (a 65,536-token case has 75 million)."""

    name: str
    element: ElementTraits
    origin: int
    view_shape: tuple[int, ...]
    view_strides: tuple[int, ...]
    slots: int
    shape: tuple[int, ...]
    labels: tuple[str, ...] = ()

    @cached_property
    def positions(self) -> torch.Tensor:
        """int64 ``[slots, field bytes]``: the storage position of every byte of the field at every slot."""
        return _strided_positions(self.origin, self.view_shape, self.view_strides).reshape(self.slots, -1)

    def view_in(self, storage: torch.Tensor) -> torch.Tensor:
        """The field's bytes of ``storage`` (any flat tensor as long as the storage, uint8 or a mask) as a view
        shaped ``view_shape``: writing it writes ``storage``."""
        return storage.as_strided(self.view_shape, self.view_strides, storage.storage_offset() + self.origin)

    def bytes_in(self, storage: torch.Tensor) -> torch.Tensor:
        """The field's bytes of ``storage`` as ``[slots, field bytes]`` (``positions``' order; a copy where the
        field is not dense)."""
        return self.view_in(storage).reshape(self.slots, -1)

    def slot_positions(self, slot: int) -> torch.Tensor:
        """The storage positions of every byte of the field at ``slot``."""
        width = math.prod(self.view_shape) // max(self.slots, 1)
        return torch.tensor([self._position(slot, byte) for byte in range(width)])

    def element_bytes(self, slot: int, index: int) -> torch.Tensor:
        """The storage positions of element ``index`` (flat over ``shape``) at ``slot``."""
        size = self.element.size
        return torch.tensor([self._position(slot, index * size + k) for k in range(size)])

    def _position(self, slot: int, byte: int) -> int:
        """The storage position of byte ``byte`` of the field at ``slot`` (both flat, row-major)."""
        pos, flat = self.origin, slot * math.prod(self.view_shape) // max(self.slots, 1) + byte
        for n, stride in zip(reversed(self.view_shape), reversed(self.view_strides), strict=True):
            flat, i = divmod(flat, n)
            pos += i * stride
        return pos

    def index_text(self, index: int) -> str:
        """``key head 2 [5]`` for flat element index ``index`` (``nope[5]`` for a one-dimensional field). Dimensions
        whose label is ``""`` form one index with the last (a field whose elements are split over two strided
        dimensions: NVFP4's swizzled scales)."""
        parts, rest = [], index
        for n in reversed(self.shape):
            rest, i = divmod(rest, n)
            parts.append(i)
        parts.reverse()
        split = len(self.labels)
        while split and not self.labels[split - 1]:
            split -= 1
        merged = 0
        for n, i in zip(self.shape[split:], parts[split:], strict=True):
            merged = merged * n + i
        lead = "".join(f" {label} {i}" for label, i in zip(self.labels[:split], parts[:split], strict=True))
        per = self.element.per_unit
        last = ",".join(str(merged * per + k) for k in range(per))
        return f"{self.name}{lead}{' ' if lead else ''}[{last}]"


def field_places(name: str, view: torch.Tensor, storage: torch.Tensor, element: ElementTraits, slot_dims: int,
                 labels: tuple[str, ...] = ()) -> FieldPlaces:
    """The places of field ``name``, given as ``view`` over ``storage``: its first ``slot_dims`` dimensions index the
    slot (``(block, row)``, slots counted block-major, or ``(row,)``), the others the field's elements at a slot. A
    uint8 view of a wider element counts bytes in its last dimension."""
    origin, shape, strides = _byte_layout(view, storage)
    slots = math.prod(view.shape[:slot_dims])
    inner = tuple(view.shape[slot_dims:])
    if view.element_size() != element.size:
        assert view.element_size() == 1 and inner[-1] % element.size == 0, f"{name}: bytes do not hold whole elements"
        inner = (*inner[:-1], inner[-1] // element.size)
    return FieldPlaces(name, element, origin, shape, strides, slots, inner, labels)


def hex_bytes(raw: torch.Tensor) -> str:
    """An element's little-endian bytes as one hex word (``0x3c800000`` for the fp32 value 2^-6)."""
    return f"0x{int.from_bytes(bytes(raw.tolist()), 'little'):0{2 * raw.numel()}x}"


def value_text(element: ElementTraits, raw: torch.Tensor) -> str:
    """``0.015625 (0x3c800000)``: an element's value and its bytes (the bytes alone where it holds no value); a unit
    of several values shows each, in index order (``1.5 -0 (0x83)``: two E2M1 codes, the low nibble first)."""
    if element.decode is None:
        return hex_bytes(raw)
    values = " ".join(f"{float(v):.6g}" for v in element.values(raw.reshape(1, -1))[0])
    return f"{values} ({hex_bytes(raw)})"


@dataclass(frozen=True)
class Place:
    """The element a storage byte belongs to: its field, slot and flat index, and the positions of its bytes."""

    field: FieldPlaces
    slot: int
    index: int
    positions: torch.Tensor


class StorageMap:
    """Every field of a case storage, and the guard zones and areas between them (module doc).

    ``areas``: the named byte ranges ``(name, start, end)`` of the storage's tensors (``key_cache``...), so that a
    byte in no field is named by where it is (``guard byte +3 (after value_cache)``); ``slot_name`` names a slot
    (``token 3 (slot 17)``, ``slot 9 (no token)``, ``row 4``); ``describe_gap`` names a byte inside an area but in no
    field where the op knows better (an MLA cache's padding rows), returning None where it does not.
    """

    def __init__(self, size: int, fields: Sequence[FieldPlaces], areas: Sequence[tuple[str, int, int]],
                 slot_name: Callable[[int], str], describe_gap: Callable[[int], str | None] | None = None) -> None:
        self.size, self.fields, self.areas, self.slot_name = size, list(fields), sorted(areas, key=lambda a: a[1]), \
            slot_name
        self.describe_gap = describe_gap

    @cached_property
    def _owners(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per storage byte: its field's index, slot and byte within the field there (-1: in no field). Built at the
        first ``place``: only a failed check's examples ask."""
        owner = torch.full((3, self.size), -1, dtype=torch.int64)
        for i, f in enumerate(self.fields):
            slots, width = f.positions.shape
            owner[0, f.positions] = i
            owner[1, f.positions] = torch.arange(slots)[:, None].expand(slots, width)
            owner[2, f.positions] = torch.arange(width)[None, :].expand(slots, width)
        return owner[0], owner[1], owner[2]

    def field(self, name: str) -> FieldPlaces:
        """The field called ``name``."""
        return next(f for f in self.fields if f.name == name)

    def slot_mask(self, slot: int) -> torch.Tensor:
        """bool ``[size]``: the bytes of every field at ``slot`` (an entry's, per token and block-trailing)."""
        mask = torch.zeros(self.size, dtype=torch.bool)
        for f in self.fields:
            mask[f.slot_positions(slot)] = True
        return mask

    def place(self, pos: int) -> Place | None:
        """The element storage byte ``pos`` belongs to, None for a byte in no field."""
        owner, slot_of, byte_of = self._owners
        i = int(owner[pos])
        if i < 0:
            return None
        f = self.fields[i]
        slot, index = int(slot_of[pos]), int(byte_of[pos]) // f.element.size
        return Place(f, slot, index, f.element_bytes(slot, index))

    def at(self, name: str, slot: int, index: int) -> Place:
        """Element ``index`` of field ``name`` at ``slot``."""
        f = self.field(name)
        return Place(f, slot, index, f.element_bytes(slot, index))

    def mismatched(self, got: torch.Tensor, want: torch.Tensor, nan: NanPolicy) -> torch.Tensor:
        """The storage bytes where ``got`` is not ``want``, element by element: a byte in no field differs when the
        bytes do; an element where ``want`` holds a NaN of its field's format differs (every byte of it) unless
        ``got`` holds a NaN ``nan`` accepts there, whatever the bytes (so a pinned NaN fails even the contract's
        other NaN); any other element, where its bytes do."""
        differ = got != want
        for f in self.fields:
            if f.element.nan is None:
                continue
            nan_at = f.element.nan.is_nan(element_bits(f.bytes_in(want).reshape(-1, f.element.size)))
            if bool(nan_at.any()):
                at = f.positions.reshape(-1, f.element.size)[nan_at]
                accepted = nan.matches(f.element, element_bits(want[at]), element_bits(got[at]))
                differ[at] = ~accepted[:, None].expand_as(at)
        return differ

    def alike(self, a: torch.Tensor, b: torch.Tensor, within: torch.Tensor | None = None) -> bool:
        """Whether storages ``a`` and ``b`` hold the same elements over the bytes of ``within`` (default: all), any
        NaN of a field's format alike: how a wrong hypothesis's bytes are recognised, whichever NaN a kernel
        writes."""
        differ = self.mismatched(a, b, ANY_NAN)
        return not bool((differ if within is None else differ & within).any())

    def outside(self, pos: int) -> str:
        """Where a byte in no field is: ``key_cache byte 40 (in no field)``, ``guard byte -3 (before key_cache)``."""
        for name, start, end in self.areas:
            if start <= pos < end:
                known = self.describe_gap(pos) if self.describe_gap is not None else None
                return known or f"{name} byte {pos - start} (in no field)"
        before = [a for a in self.areas if a[2] <= pos]
        if before:
            name, _, end = before[-1]
            return f"guard byte +{pos - end} (after {name})"
        name, start, _ = self.areas[0]
        return f"guard byte {pos - start} (before {name})"

    def where(self, place: Place) -> str:
        """``token 3 (slot 17) key head 2 [5]``."""
        return f"{self.slot_name(place.slot)} {place.field.index_text(place.index)}"

    def example(self, place: Place, got: torch.Tensor, want: torch.Tensor, before: torch.Tensor,
                versus: str) -> str:
        """One element as a failed check shows it: the kernel's value against ``versus``'s (``want``), or ``not
        written`` where the kernel left the element as it was ``before`` and ``want`` differs from that."""
        w = want[place.positions]
        shown = hex_bytes(w) if versus == "untouched" else value_text(place.field.element, w)
        return f"{self.where(place)}: kernel {kernel_text(place, got, before, w)} vs {versus} {shown}"

    def examples(self, positions: torch.Tensor, got: torch.Tensor, want: torch.Tensor, before: torch.Tensor,
                 versus: str = "reference") -> list[str]:
        """Up to ``MAX_EXAMPLES`` examples for the storage bytes ``positions`` (ascending), one per element; a byte
        in no field is shown as bytes, with where it is."""
        seen: set[int] = set()
        out: list[str] = []
        # an element has at most 4 bytes, so the first 4 * MAX_EXAMPLES positions hold enough elements
        for pos in positions[: 4 * MAX_EXAMPLES].tolist():
            place = self.place(pos)
            if place is None:
                out.append(f"{self.outside(pos)}: kernel {int(got[pos]):#04x} vs {versus} {int(want[pos]):#04x}")
                continue
            start = int(place.positions[0])
            if start not in seen:
                seen.add(start)
                out.append(self.example(place, got, want, before, versus))
        return out[:MAX_EXAMPLES]


def kernel_text(place: Place, got: torch.Tensor, before: torch.Tensor, want: torch.Tensor | None = None) -> str:
    """What the kernel left in an element: its value and bytes, or ``not written (still 0xa5a5)`` where the bytes
    are as they were ``before`` and the contract's bytes ``want`` (when given) differ from those."""
    g, b = got[place.positions], before[place.positions]
    if torch.equal(g, b) and (want is None or not torch.equal(want, b)):
        return f"not written (still {hex_bytes(g)})"
    return value_text(place.field.element, g)


def slot_width_note(slot_mapping: torch.Tensor) -> str:
    """What a ``layout.slot_mapping`` failure adds for a case whose slot mapping is int32: a kernel that reads it
    through an int64 pointer takes two slots for one (AITER #4697); "" for int64."""
    if slot_mapping.dtype != torch.int32:
        return ""
    return "; slot_mapping is int32 here: a kernel that reads it as int64 takes two slots for one (AITER #4697)"


def slot_namer(slot_mapping: torch.Tensor, reserved: int | None = None) -> Callable[[int], str]:
    """Names slot ``s`` after the token that writes it (the last one, as a write leaves it): ``token 3 (slot 17)``,
    or ``slot 9 (no token)``; the engine's ``reserved`` padding slot (rtp_ref.kv.padding) as ``slot 0 (the reserved
    padding slot)``."""
    writer = {int(s): t for t, s in enumerate(slot_mapping.cpu().tolist()) if s >= 0}

    def name(slot: int) -> str:
        if slot == reserved:
            return f"slot {slot} (the reserved padding slot)"
        token = writer.get(slot)
        return f"slot {slot} (no token)" if token is None else f"token {token} (slot {slot})"

    return name
