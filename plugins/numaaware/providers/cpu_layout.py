"""An index of a node's CPU topology for the CPU manager's take-by-topology algorithms.

The kubelet's CPUTopology counts sockets, cores, NUMA nodes and uncore caches over every online
CPU (reserved ones included) and assumes they are uniform: "CPUs per core" is all CPUs divided by
all cores, and so on. The same arithmetic is kept here so that "is this core / socket free" means
exactly what it means on the node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from numasched.api.topology import CpuInfo, NumaTopology

# A physical core: (core id, socket id). Core ids may repeat across sockets, so the socket is part
# of the key; the core id comes first because the kubelet orders cores by core id once it has
# already grouped them by socket or NUMA node.
CoreKey = tuple[int, int]


class CpuTopologyError(ValueError):
    """The topology cannot support a CPU assignment (no CPUs, or ids it does not know)."""


def core_key(info: CpuInfo) -> CoreKey:
    return (info.core, info.socket)


@attrs.frozen(slots=True)
class CpuLayout:
    info: Mapping[int, CpuInfo]
    cpus_by_numa: Mapping[int, frozenset[int]]
    cpus_by_socket: Mapping[int, frozenset[int]]
    cpus_by_core: Mapping[CoreKey, frozenset[int]]
    cpus_by_uncore: Mapping[int, frozenset[int]]
    cpus_per_core: int
    cpus_per_socket: int
    cpus_per_uncore: int
    # NUMA nodes are at least as big as sockets (one or more sockets per NUMA node): the kubelet
    # then takes whole NUMA nodes before whole sockets, and groups sockets under NUMA nodes.
    numa_first: bool

    @property
    def all_cpus(self) -> frozenset[int]:
        return frozenset(self.info)

    @classmethod
    def from_topology(cls, topology: NumaTopology) -> CpuLayout:
        if not topology.cpus:
            raise CpuTopologyError(f"node {topology.node_name}: the topology lists no CPUs")
        info: dict[int, CpuInfo] = {}
        by_numa: dict[int, set[int]] = {}
        by_socket: dict[int, set[int]] = {}
        by_core: dict[CoreKey, set[int]] = {}
        by_uncore: dict[int, set[int]] = {}
        for cpu in topology.cpus:
            if cpu.cpu in info:
                raise CpuTopologyError(f"node {topology.node_name}: CPU {cpu.cpu} is listed twice")
            info[cpu.cpu] = cpu
            by_numa.setdefault(cpu.numa, set()).add(cpu.cpu)
            by_socket.setdefault(cpu.socket, set()).add(cpu.cpu)
            by_core.setdefault(core_key(cpu), set()).add(cpu.cpu)
            by_uncore.setdefault(cpu.l3, set()).add(cpu.cpu)
        total = len(info)
        return cls(
            info=info,
            cpus_by_numa={key: frozenset(value) for key, value in by_numa.items()},
            cpus_by_socket={key: frozenset(value) for key, value in by_socket.items()},
            cpus_by_core={key: frozenset(value) for key, value in by_core.items()},
            cpus_by_uncore={key: frozenset(value) for key, value in by_uncore.items()},
            cpus_per_core=total // len(by_core),
            cpus_per_socket=total // len(by_socket),
            cpus_per_uncore=total // len(by_uncore),
            numa_first=len(by_socket) >= len(by_numa),
        )

    def physical_cpus(self, cpus: Iterable[int], excluded: Iterable[int] = ()) -> frozenset[int]:
        """The CPUs of `cpus` whose whole core is in `cpus` and shares no thread with `excluded`.

        This is what full-pcpus-only may hand out: the kubelet treats every sibling of a reserved
        CPU as unavailable so that an allocation never has to split a core.
        """
        pool = frozenset(cpus)
        blocked = {core_key(self.info[cpu]) for cpu in excluded if cpu in self.info}
        result: set[int] = set()
        for key, threads in self.cpus_by_core.items():
            if key not in blocked and threads <= pool:
                result |= threads
        return frozenset(result)
