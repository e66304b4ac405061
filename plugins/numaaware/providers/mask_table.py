"""The NUMA masks of one node shape as arrays, so a provider's hints for a node state not seen
before are a few vector operations rather than a loop over every mask (255 of them on an 8-NUMA
machine): which NUMA nodes each mask holds, its width, and the most of the resource it can ever
hold (which decides whether a hint is preferred).

Hints of equal content are handed out as one tuple (MaskTable.hints): numa-aware remembers what
it merged from a tuple by the tuple's identity, and the tuple (a ReadHints) carries what the merge
reads of it, read once.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np
import numpy.typing as npt

from numasched.api.hint import TopologyHint
from numasched.api.numamask import NumaMask
from numasched.plugins.numaaware.policy import ReadHints

Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]


class MaskTable:
    """Masks in the order given (iterate_masks order), over the NUMA ids given (the columns)."""

    __slots__ = ("bits", "masks", "members", "numa_ids", "row_hints", "totals", "widths")

    def __init__(self, masks: Sequence[tuple[NumaMask, Sequence[int], int]], numa_ids: Sequence[int]) -> None:
        self.numa_ids = tuple(numa_ids)
        column = {numa: position for position, numa in enumerate(self.numa_ids)}
        self.masks = tuple(mask for mask, _, _ in masks)
        # members[m, c]: 1 when mask m holds the NUMA node of column c.
        self.members: Ints = np.zeros((len(masks), len(self.numa_ids)), dtype=np.int64)
        for row, (_, ids, _) in enumerate(masks):
            for numa in ids:
                self.members[row, column[numa]] = 1
        self.widths: Ints = np.array([len(ids) for _, ids, _ in masks], dtype=np.int64)
        # The most of the resource each mask can hold on this shape (what "preferred" is judged on).
        self.totals: Ints = np.array([total for _, _, total in masks], dtype=np.int64)
        self.bits = np.array([mask.bits for mask in self.masks], dtype=np.uint64)
        # Per mask its two hints (not preferred, preferred), made once and shared by every answer.
        self.row_hints = tuple((TopologyHint(mask, False), TopologyHint(mask, True)) for mask in self.masks)

    def narrowest(self, request: int, widest: int) -> int:
        """The fewest NUMA nodes a mask that could ever hold `request` spans; `widest` when none
        narrower can."""
        able = self.widths[self.totals >= request]
        return min(widest, int(able.min())) if len(able) else widest

    def holding(self, required_bits: int) -> Bools:
        """Which masks hold every NUMA node of required_bits."""
        required = np.uint64(required_bits)
        held: Bools = (self.bits & required) == required
        return held

    def hints(
        self, fits: Bools, narrowest: int, interned: dict[Hashable, tuple[TopologyHint, ...]]
    ) -> tuple[TopologyHint, ...]:
        """The hints of the fitting masks, in mask order, preferred where as narrow as can be; one
        tuple per content, kept in `interned` (a table shared by indexes of this mask shape)."""
        key = ("fitting", fits.tobytes(), narrowest)
        found = interned.get(key)
        if found is None:
            rows: list[int] = np.flatnonzero(fits).tolist()
            widths: list[int] = self.widths[rows].tolist()
            row_hints = self.row_hints
            found = interned[key] = ReadHints(
                row_hints[row][width == narrowest] for row, width in zip(rows, widths, strict=True)
            )
        return found
