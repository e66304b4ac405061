"""One copy of each machine shape's topology parts across the cache's topologies.

A cluster is a dozen machine shapes repeated, and every update of a node's topology object (a
NodeResourceTopology or Numatopology write) converts to a new NumaTopology. Left as converted,
each holds its own equal copy of the machine (CPU rows, device groups, links) and computes its own
views of it (CPUs per NUMA node, the CPU rows' plain form), and everything keyed by the machine's
content (the numa-aware plugin's node classes, the providers' per-machine tables) compares the
copies element by element. The cache passes each converted topology through MachineParts, which
gives it the parts of an earlier topology of the same content (api.topology.with_machine_of).
"""

from __future__ import annotations

from numasched.api.topology import NumaTopology, topology_shape_key, with_machine_of

# Shapes kept; past this the oldest is forgotten (a topology of it is then kept as converted and
# becomes the shape's new holder). Far above the number of machine shapes of a real cluster.
DEFAULT_SHAPES = 256


class MachineParts:
    """The first topology seen of each machine shape (topology_shape_key), newest shapes kept."""

    __slots__ = ("_by_shape", "_limit")

    def __init__(self, limit: int = DEFAULT_SHAPES) -> None:
        self._by_shape: dict[tuple[object, ...], NumaTopology] = {}
        self._limit = limit

    def shared(self, topology: NumaTopology) -> NumaTopology:
        """topology, holding the parts of the earlier topology of its shape when there is one."""
        key = topology_shape_key(topology)
        like = self._by_shape.get(key)
        if like is None:
            if len(self._by_shape) >= self._limit:
                del self._by_shape[next(iter(self._by_shape))]
            self._by_shape[key] = topology
            return topology
        return with_machine_of(topology, like)

    def __len__(self) -> int:
        return len(self._by_shape)
