"""Topology hints as the kubelet's hint providers produce them."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from numasched.api.numamask import NumaMask


@attrs.frozen(slots=True)
class TopologyHint:
    """affinity None means "any NUMA node will do" (no preference)."""

    affinity: NumaMask | None
    preferred: bool

    def describe(self) -> str:
        where = "any" if self.affinity is None else self.affinity.format()
        return f"{where}{' (preferred)' if self.preferred else ''}"


# What a provider returns per resource: None = no preference; [] = cannot be satisfied anywhere.
# A tuple is a provider's own remembered answer, never changed: admission may remember what it
# merged from it by identity (numa-aware's merge memo); a list is taken as made for this call.
ResourceHints = dict[str, Sequence[TopologyHint] | None]
