"""static-burst (ACK `cpu-policy: static-burst`): a pinned container's CPUs rounded up to whole
last-level-cache (L3) groups, such as an AMD CCX, where those CPUs are free.

The request itself is placed as usual (packed by L3 group, so a request that fits in one group
takes it); then each container whose CPUs sit on one NUMA node also gets the other free CPUs of
the L3 groups it touches: a 6-CPU container on a CCX of 8 threads gets those 8. The CPUs added
are part of the decision (its cpuset) and so of the node's accounting: no later pod is given them.
A container whose CPUs span NUMA nodes keeps exactly what it asked for.
"""

from __future__ import annotations

import attrs

from numasched.api.allocation import ContainerAllocation, PodAllocation
from numasched.api.idset import IdSet
from numasched.api.topology import NumaTopology


def l3_groups(topology: NumaTopology) -> dict[int, IdSet]:
    """CPUs per L3 group id."""
    groups: dict[int, set[int]] = {}
    for info in topology.cpus:
        groups.setdefault(info.l3, set()).add(info.cpu)
    return {group: IdSet(cpus) for group, cpus in groups.items()}


def burst_cpus(chosen: IdSet, topology: NumaTopology, free: IdSet) -> IdSet:
    """chosen plus the free CPUs of the L3 groups it touches, on chosen's one NUMA node; chosen
    unchanged when it spans NUMA nodes or is empty."""
    cpu_info = topology.cpu_info
    numa_ids = {cpu_info[cpu].numa for cpu in chosen if cpu in cpu_info}
    if len(numa_ids) != 1:
        return chosen
    (numa,) = numa_ids
    touched = {cpu_info[cpu].l3 for cpu in chosen if cpu in cpu_info}
    extra = {
        info.cpu
        for info in topology.cpus
        if info.l3 in touched and info.numa == numa and info.cpu in free and info.cpu in topology.allocatable_cpus
    }
    return chosen | IdSet(extra)


def burst_allocation(allocation: PodAllocation, topology: NumaTopology, free: IdSet) -> PodAllocation:
    """Every container's cpuset rounded up (burst_cpus); `free` are the CPUs nobody holds, the
    allocation's own included or not. Containers are served in order, none takes another's."""
    available = free - allocation.cpus()
    containers: list[ContainerAllocation] = []
    for container in allocation.containers:
        if not container.cpuset:
            containers.append(container)
            continue
        cpus = burst_cpus(container.cpuset, topology, available | container.cpuset)
        available = available - cpus
        containers.append(attrs.evolve(container, cpuset=cpus))
    return PodAllocation(tuple(containers))
