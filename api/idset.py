"""Immutable sets of small non-negative integer ids (CPU ids, device indices) on bitarray.

Parsed from and printed as the Linux list format used by cpusets and sysfs: "0-3,8,10-11".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from bitarray import bitarray, frozenbitarray
from bitarray.util import count_and, zeros

from numasched.api.quantity import quoted

# A set costs one bit per id up to its largest, so ids are bounded before anything is allocated:
# an id of 2**40 in a topology object must be a cheap error, not a MemoryError.
MAX_ID = (1 << 16) - 1
# The Linux list grammar: ASCII digits only. int() alone would also take "٣", "3_0" and " 3".
_NUMBER = re.compile(r"[0-9]{1,20}")


class IdSetError(ValueError):
    """Text that is not a Linux list ("0-3,8")."""


class IdSet:
    """A frozen set of ints backed by a bit per id; cheap union/intersection/difference."""

    __slots__ = ("_bits", "_hash")

    def __init__(self, ids: Iterable[int] = ()) -> None:
        id_list = list(ids)
        size = (max(id_list) + 1) if id_list else 0
        if size > MAX_ID + 1:
            raise IdSetError(f"id {size - 1} is too large (at most {MAX_ID})")
        bits = zeros(size)
        if id_list:
            lowest = min(id_list)
            if lowest < 0:
                raise IdSetError(f"negative id {lowest}")
            # Every bit at once (bitarray's index lists, 2.8 and later).
            bits[id_list] = 1
        self._bits = frozenbitarray(bits)
        self._hash: int | None = None

    @classmethod
    def _from_bits(cls, bits: bitarray) -> IdSet:
        result = cls.__new__(cls)
        # Trailing zeros would make equal sets compare unequal; strip them.
        last = bits.find(1, right=True) if bits.any() else -1
        trimmed = bits if last + 1 == len(bits) else bits[: last + 1]
        result._bits = trimmed if isinstance(trimmed, frozenbitarray) else frozenbitarray(trimmed)
        result._hash = None
        return result

    @classmethod
    def parse(cls, text: str, max_id: int = MAX_ID) -> IdSet:
        """Parse the Linux list format; empty or whitespace text is the empty set.

        Every id must be at most max_id (checked before any memory is spent on the range).
        """
        ids: list[int] = []
        stripped = text.strip()
        if not stripped:
            return cls()
        limit = min(max_id, MAX_ID)
        for part in stripped.split(","):
            item = part.strip()
            if not item:
                raise IdSetError(f"invalid list {quoted(text)}: empty element")
            low_text, dash, high_text = item.partition("-")
            if not _NUMBER.fullmatch(low_text) or (dash and not _NUMBER.fullmatch(high_text)):
                raise IdSetError(f"invalid list {quoted(text)}: {quoted(item)} is not a number or range")
            low = int(low_text)
            high = int(high_text) if dash else low
            if high < low:
                raise IdSetError(f"invalid list {quoted(text)}: bad range {quoted(item)}")
            if high > limit:
                raise IdSetError(f"invalid list {quoted(text)}: id {high} is too large (at most {limit})")
            ids.extend(range(low, high + 1))
        return cls(ids)

    def format(self) -> str:
        """Linux list format, ranges collapsed: "0-3,8"."""
        parts: list[str] = []
        start = previous = -2
        for value in self:
            if value == previous + 1:
                previous = value
                continue
            if start >= 0:
                parts.append(str(start) if start == previous else f"{start}-{previous}")
            start = previous = value
        if start >= 0:
            parts.append(str(start) if start == previous else f"{start}-{previous}")
        return ",".join(parts)

    @classmethod
    def _exact(cls, bits: frozenbitarray) -> IdSet:
        """A set of bits known to end in a one (or to be empty): nothing to strip."""
        result = cls.__new__(cls)
        result._bits = bits
        result._hash = None
        return result

    @property
    def bits(self) -> frozenbitarray:
        """Bit i set for id i, ending at the largest id (for array work on sets)."""
        return self._bits

    @classmethod
    def from_bits(cls, bits: bitarray) -> IdSet:
        """The ids whose bits are set; trailing zeros are allowed."""
        return cls._from_bits(bits)

    def count_common(self, other: IdSet) -> int:
        """len(self & other), without building the intersection."""
        size = min(len(self._bits), len(other._bits))
        if size == 0:
            return 0
        left = self._bits if len(self._bits) == size else self._bits[:size]
        right = other._bits if len(other._bits) == size else other._bits[:size]
        return count_and(left, right)

    # The operations below read the invariant kept by every constructor: the bits end at the
    # largest id, so the empty set has no bits and the longer operand holds the larger id. Each
    # returns an operand itself where the answer is that operand (sets are immutable).

    def union(self, other: IdSet) -> IdSet:
        if len(self._bits) < len(other._bits):
            return other.union(self)
        longer, shorter = self._bits, other._bits
        if not shorter:
            return self
        if len(shorter) == len(longer):
            # The longer operand ends in a one, so the union does too.
            return IdSet._exact(longer | shorter)
        # OR into the front of a copy of the longer one (no padded copy of the shorter is made).
        merged = bitarray(longer)
        merged[: len(shorter)] |= shorter
        return IdSet._exact(frozenbitarray(merged))

    def intersection(self, other: IdSet) -> IdSet:
        size = min(len(self._bits), len(other._bits))
        if size == 0:
            return _EMPTY
        left = self._bits if len(self._bits) == size else self._bits[:size]
        right = other._bits if len(other._bits) == size else other._bits[:size]
        return IdSet._from_bits(left & right)

    def difference(self, other: IdSet) -> IdSet:
        bits, removed = self._bits, other._bits
        if not bits or not removed:
            return self
        size = len(bits)
        if len(removed) >= size:
            return IdSet._from_bits(bits & ~(removed if len(removed) == size else removed[:size]))
        # Clear within the front of a copy (no padded copy of the removed bits is made).
        left = bitarray(bits)
        left[: len(removed)] &= ~removed
        return IdSet._from_bits(frozenbitarray(left))

    def is_subset(self, other: IdSet) -> bool:
        return self.count_common(other) == len(self)

    def __or__(self, other: IdSet) -> IdSet:
        return self.union(other)

    def __and__(self, other: IdSet) -> IdSet:
        return self.intersection(other)

    def __sub__(self, other: IdSet) -> IdSet:
        return self.difference(other)

    def __len__(self) -> int:
        return int(self._bits.count(1))

    def __bool__(self) -> bool:
        return bool(self._bits.any())

    def __iter__(self) -> Iterator[int]:
        return iter(self._bits.search(1))

    def __contains__(self, value: object) -> bool:
        return isinstance(value, int) and 0 <= value < len(self._bits) and bool(self._bits[value])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IdSet) and self._bits == other._bits

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(self._bits)
        return self._hash

    def __repr__(self) -> str:
        return f"IdSet({self.format()!r})"

    def sorted(self) -> list[int]:
        return list(self)


_EMPTY = IdSet()
