"""NUMA affinity masks with the kubelet's bitmask semantics.

A mask is a set of NUMA node ids (0-63) stored as an int. "Narrower" means fewer NUMA nodes, ties
broken by the lower integer value, exactly as the kubelet's bitmask.IsNarrowerThan.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import combinations

import attrs

MAX_NUMA_ID = 63


class NumaMaskError(ValueError):
    """A NUMA id outside 0-63."""


@attrs.frozen(slots=True, order=False)
class NumaMask:
    bits: int = 0

    @classmethod
    def of(cls, *numa_ids: int) -> NumaMask:
        return cls.from_ids(numa_ids)

    @classmethod
    def from_ids(cls, numa_ids: Iterable[int]) -> NumaMask:
        bits = 0
        for numa_id in numa_ids:
            if not 0 <= numa_id <= MAX_NUMA_ID:
                raise NumaMaskError(f"NUMA id {numa_id} is outside 0-{MAX_NUMA_ID}")
            bits |= 1 << numa_id
        return cls(bits)

    def ids(self) -> list[int]:
        return [bit for bit in range(self.bits.bit_length()) if self.bits >> bit & 1]

    def count(self) -> int:
        return self.bits.bit_count()

    def is_empty(self) -> bool:
        return self.bits == 0

    def is_set(self, numa_id: int) -> bool:
        return numa_id >= 0 and bool(self.bits >> numa_id & 1)

    def is_subset_of(self, other: NumaMask) -> bool:
        return self.bits & ~other.bits == 0

    def __and__(self, other: NumaMask) -> NumaMask:
        return NumaMask(self.bits & other.bits)

    def __or__(self, other: NumaMask) -> NumaMask:
        return NumaMask(self.bits | other.bits)

    def is_narrower_than(self, other: NumaMask) -> bool:
        """Fewer NUMA nodes, or as many and a lower value (kubelet IsNarrowerThan)."""
        mine, theirs = self.count(), other.count()
        if mine == theirs:
            return self.bits < other.bits
        return mine < theirs

    def format(self) -> str:
        return ",".join(str(numa_id) for numa_id in self.ids())

    def __repr__(self) -> str:
        return f"NumaMask({self.format() or '-'})"


def iterate_masks(numa_ids: Iterable[int]) -> Iterator[NumaMask]:
    """Every non-empty subset of numa_ids: by size, then lexicographic (kubelet IterateBitMasks)."""
    ordered = sorted(numa_ids)
    for size in range(1, len(ordered) + 1):
        for subset in combinations(ordered, size):
            yield NumaMask.from_ids(subset)
