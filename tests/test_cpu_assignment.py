"""take_by_topology against the kubelet CPU manager's own table tests and our fixture machines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from numasched.api.idset import IdSet
from numasched.api.topology import CpuInfo, NumaTopology
from numasched.plugins.numaaware.providers.cpu import (
    CpuAssignmentError,
    CpuTopologyError,
    SmtAlignmentError,
    take_by_topology,
)
from numasched.plugins.numaaware.providers.cpu_assignment import CpuAccumulator, take_distributed
from numasched.plugins.numaaware.providers.cpu_layout import CpuLayout

MACHINES = Path(__file__).parent / "fixtures" / "machines"


def shape(name: str, cpus: dict[int, tuple[int, ...]], reserved: str = "") -> NumaTopology:
    """cpu -> (core, socket, numa[, uncore]); the kubelet's test shapes leave the uncore id at 0."""
    infos = tuple(
        CpuInfo(cpu=cpu, core=spec[0], socket=spec[1], numa=spec[2], l3=spec[3] if len(spec) > 3 else 0)
        for cpu, spec in sorted(cpus.items())
    )
    numas = tuple(sorted({info.numa for info in infos}))
    return NumaTopology(node_name=name, numa_ids=numas, cpus=infos, reserved_cpus=IdSet.parse(reserved))


def ids(text: str) -> IdSet:
    return IdSet.parse(text)


SINGLE_SOCKET_HT = shape("single-socket-ht", {cpu: (cpu % 4, 0, 0) for cpu in range(8)})
DUAL_SOCKET_HT = shape("dual-socket-ht", {cpu: (cpu % 6, cpu % 2, cpu % 2) for cpu in range(12)})
DUAL_SOCKET_NO_HT = shape("dual-socket-noht", {cpu: (cpu, cpu // 4, cpu // 4) for cpu in range(8)})
_TRIPLE_SOCKET_OF_CORE = {0: 1, 1: 1, 2: 1, 3: 0, 4: 0, 5: 0, 6: 2, 7: 2, 8: 2}
TRIPLE_SOCKET_HT = shape(
    "triple-socket-ht",
    {cpu: (cpu // 2, _TRIPLE_SOCKET_OF_CORE[cpu // 2], _TRIPLE_SOCKET_OF_CORE[cpu // 2]) for cpu in range(18)},
)
# Dual Xeon Gold 6230: 2 sockets x 20 cores x 2 threads, 4 NUMA nodes of 10 cores.
DUAL_SOCKET_MULTI_NUMA_HT = shape(
    "dual-socket-multi-numa-ht", {cpu: (cpu % 40, (cpu % 40) // 20, (cpu % 40) // 10) for cpu in range(80)}
)
# The same machine with NUMA cells and sockets swapped: 4 sockets, 2 NUMA nodes.
MULTI_SOCKET_PER_NUMA_HT = shape(
    "multi-socket-per-numa-ht", {cpu: (cpu % 40, (cpu % 40) // 10, (cpu % 40) // 20) for cpu in range(80)}
)
# Dual EPYC 7742, NPS4: 2 sockets x 64 cores x 2 threads, 8 NUMA nodes.
DUAL_SOCKET_MULTI_NUMA_HT_LARGE = shape(
    "dual-socket-multi-numa-ht-large",
    {cpu: (cpu % 128, (cpu % 128) // 64, (cpu % 128) // 16) for cpu in range(256)},
)
UNCORE_SINGLE_SOCKET_NO_SMT = shape("uncore-1s-nosmt", {cpu: (cpu, 0, 0, cpu // 4) for cpu in range(16)})
UNCORE_DUAL_SOCKET_NO_SMT = shape("uncore-2s-nosmt", {cpu: (cpu, cpu // 8, cpu // 8, cpu // 4) for cpu in range(16)})
UNCORE_SINGLE_SOCKET_MULTI_NUMA = shape("uncore-1s-2numa", {cpu: (cpu, 0, cpu // 8, cpu // 4) for cpu in range(16)})
UNCORE_SINGLE_SOCKET_SMT = shape("uncore-1s-smt", {cpu: (cpu % 8, 0, 0, (cpu % 8) // 4) for cpu in range(16)})

# KNL SNC4 (hwloc's KNL.SNC4.H50): 4 sockets x 18 cores x 4 threads; core ids are not the lowest
# thread id, which is what makes the kubelet's core order visible.
_QUAD_SOCKET_CORES: dict[int, list[tuple[int, list[int]]]] = {
    0: [
        (0, [0, 169, 109, 229]),
        (1, [50, 170, 110, 230]),
        (64, [1, 25, 13, 38]),
        (65, [2, 26, 14, 39]),
        (72, [9, 33, 21, 46]),
        (73, [10, 34, 22, 47]),
        (8, [57, 177, 117, 237]),
        (9, [58, 178, 118, 238]),
        (24, [71, 191, 131, 251]),
        (25, [72, 192, 132, 252]),
        (32, [79, 199, 139, 259]),
        (33, [80, 200, 140, 260]),
        (40, [87, 207, 147, 267]),
        (41, [88, 208, 148, 268]),
        (48, [95, 215, 155, 275]),
        (49, [96, 216, 156, 276]),
        (56, [103, 223, 163, 283]),
        (57, [104, 224, 164, 284]),
    ],
    1: [
        (66, [3, 27, 15, 40]),
        (67, [4, 28, 16, 41]),
        (74, [11, 35, 23, 48]),
        (75, [12, 36, 24, 49]),
        (2, [51, 171, 111, 231]),
        (3, [52, 172, 112, 232]),
        (10, [59, 179, 119, 239]),
        (11, [60, 180, 120, 240]),
        (18, [65, 185, 125, 245]),
        (19, [66, 186, 126, 246]),
        (26, [73, 193, 133, 253]),
        (27, [74, 194, 134, 254]),
        (34, [81, 201, 141, 261]),
        (35, [82, 202, 142, 262]),
        (42, [89, 209, 149, 269]),
        (43, [90, 210, 150, 270]),
        (50, [97, 217, 157, 277]),
        (51, [98, 218, 158, 278]),
    ],
    2: [
        (68, [5, 29, 17, 42]),
        (69, [6, 30, 18, 43]),
        (4, [53, 173, 113, 233]),
        (5, [54, 174, 114, 234]),
        (12, [61, 181, 121, 241]),
        (13, [62, 182, 122, 242]),
        (20, [67, 187, 127, 247]),
        (21, [68, 188, 128, 248]),
        (28, [75, 195, 135, 255]),
        (29, [76, 196, 136, 256]),
        (36, [83, 203, 143, 263]),
        (37, [84, 204, 144, 264]),
        (44, [91, 211, 151, 271]),
        (45, [92, 212, 152, 272]),
        (52, [99, 219, 159, 279]),
        (53, [100, 220, 160, 280]),
        (60, [105, 225, 165, 285]),
        (61, [106, 226, 166, 286]),
    ],
    3: [
        (70, [7, 31, 19, 44]),
        (71, [8, 32, 20, 45]),
        (63, [37, 168, 108, 228]),
        (62, [107, 227, 167, 287]),
        (6, [55, 175, 115, 235]),
        (7, [56, 176, 116, 236]),
        (14, [63, 183, 123, 243]),
        (15, [64, 184, 124, 244]),
        (22, [69, 189, 129, 249]),
        (23, [70, 190, 130, 250]),
        (30, [77, 197, 137, 257]),
        (31, [78, 198, 138, 258]),
        (38, [85, 205, 145, 265]),
        (39, [86, 206, 146, 266]),
        (46, [93, 213, 153, 273]),
        (47, [94, 214, 154, 274]),
        (54, [101, 221, 161, 281]),
        (55, [102, 222, 162, 282]),
    ],
}
QUAD_SOCKET_FOUR_WAY_HT = shape(
    "quad-socket-four-way-ht",
    {
        cpu: (core, socket, socket)
        for socket, cores in _QUAD_SOCKET_CORES.items()
        for core, threads in cores
        for cpu in threads
    },
)
QUAD_ALL = ids("0-287")
QUAD_SOCKET = {
    socket: IdSet(cpu for _, threads in cores for cpu in threads) for socket, cores in _QUAD_SOCKET_CORES.items()
}


@pytest.mark.parametrize(
    ("topology", "available", "expected"),
    [
        (SINGLE_SOCKET_HT, "0-7", [0, 4, 1, 5, 2, 6, 3, 7]),
        (SINGLE_SOCKET_HT, "3-7", [4, 5, 6, 3, 7]),
        (DUAL_SOCKET_HT, "0-11", [0, 6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11]),
        (DUAL_SOCKET_HT, "1-11", [6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11]),
        (DUAL_SOCKET_HT, "1-5,7-11", [2, 8, 4, 10, 1, 7, 3, 9, 5, 11]),
        (TRIPLE_SOCKET_HT, "0-3,6-13", [12, 13, 0, 1, 2, 3, 6, 7, 8, 9, 10, 11]),
    ],
)
def test_single_thread_order_matches_kubelet(topology: NumaTopology, available: str, expected: list[int]) -> None:
    """TestCPUAccumulatorFreeCPUs: fewest free CPUs in the socket first, then the core, then id."""
    accumulator = CpuAccumulator(CpuLayout.from_topology(topology), ids(available), 0)
    assert accumulator.sorted_cpus() == expected


@pytest.mark.parametrize(
    ("topology", "available", "expected"),
    [
        (DUAL_SOCKET_HT, "0-11", [0, 2, 4, 1, 3, 5]),
        (DUAL_SOCKET_HT, "1-5,7-11", [2, 4, 1, 3, 5]),
        (DUAL_SOCKET_HT, "2-5,8-11", [2, 4, 3, 5]),
        (SINGLE_SOCKET_HT, "0-6", [0, 1, 2]),
    ],
)
def test_free_core_order_matches_kubelet(topology: NumaTopology, available: str, expected: list[int]) -> None:
    """TestCPUAccumulatorFreeCores (core ids; the socket is part of our key)."""
    accumulator = CpuAccumulator(CpuLayout.from_topology(topology), ids(available), 0)
    view = accumulator.view()
    per_core = accumulator.layout.cpus_per_core
    assert [core for core, _ in accumulator.sorted_cores(view) if view.in_core[(core, _)] == per_core] == expected


def test_quad_socket_shape_is_complete() -> None:
    assert len(QUAD_SOCKET_FOUR_WAY_HT.cpus) == 288
    assert QUAD_SOCKET_FOUR_WAY_HT.all_cpus == QUAD_ALL


# (description, topology, available, count, expected) from the kubelet's commonTakeByTopologyTestCases
# and TestTakeByTopologyNUMAPacked.
PACKED_CASES: list[tuple[str, NumaTopology, str, int, str]] = [
    ("zero cpus", SINGLE_SOCKET_HT, "0-7", 0, ""),
    ("one cpu", SINGLE_SOCKET_HT, "0-7", 1, "0"),
    ("one cpu, some taken", SINGLE_SOCKET_HT, "1,3,5-7", 1, "6"),
    ("two cpus", SINGLE_SOCKET_HT, "0-7", 2, "0,4"),
    ("all cpus", SINGLE_SOCKET_HT, "0-7", 8, "0-7"),
    ("two cpus, only one core totally free", SINGLE_SOCKET_HT, "0-3,6", 2, "2,6"),
    ("a socket from dual socket HT", DUAL_SOCKET_HT, "0-11", 6, "0,2,4,6,8,10"),
    ("a socket from multi-numa-per-socket", DUAL_SOCKET_MULTI_NUMA_HT, "0-79", 40, "0-19,40-59"),
    ("a NUMA node from multi-numa-per-socket", DUAL_SOCKET_MULTI_NUMA_HT, "0-79", 20, "0-9,40-49"),
    ("a NUMA node, one NUMA node taken", DUAL_SOCKET_MULTI_NUMA_HT, "10-39,50-79", 20, "10-19,50-59"),
    ("a socket and a NUMA node", DUAL_SOCKET_MULTI_NUMA_HT, "0-79", 60, "0-29,40-69"),
    ("a socket and a NUMA node, a core taken", DUAL_SOCKET_MULTI_NUMA_HT, "1-39,41-79", 60, "10-39,50-79"),
    ("one cpu, core from socket 0", DUAL_SOCKET_HT, "1-5,7-11", 1, "2"),
    ("4 full cores, 3 from the first NUMA node", DUAL_SOCKET_HT, "0-11", 8, "0-2,4,6-8,10"),
    ("32 full cores, 30 from the first 3 NUMA nodes", DUAL_SOCKET_MULTI_NUMA_HT, "0-79", 64, "0-31,40-71"),
    # TestStaticPolicyAdd (no hint, so allocateCPUs is take-by-topology on the free CPUs).
    ("dual socket HT, one socket", DUAL_SOCKET_HT, "1,3-11", 6, "1,3,5,7,9,11"),
    ("dual socket HT, three cores", DUAL_SOCKET_HT, "2-4,6-11", 6, "2-4,8-10"),
    ("dual socket no HT, one socket", DUAL_SOCKET_NO_HT, "1,3-7", 4, "4-7"),
    ("dual socket no HT, four cores", DUAL_SOCKET_NO_HT, "1,3,6,7", 4, "1,3,6,7"),
    ("dual socket HT, one socket and a core", DUAL_SOCKET_HT, "1,3-11", 8, "1,3-5,7,9-11"),
    ("single socket HT, one core", SINGLE_SOCKET_HT, "1,4,5", 2, "1,5"),
    ("single socket HT, sibling of a partial core", SINGLE_SOCKET_HT, "1-7", 1, "4"),
]


@pytest.mark.parametrize(("description", "topology", "available", "count", "expected"), PACKED_CASES)
def test_packed_matches_kubelet(
    description: str, topology: NumaTopology, available: str, count: int, expected: str
) -> None:
    assert take_by_topology(topology, ids(available), count) == ids(expected), description


def test_quad_socket_whole_socket() -> None:
    available = QUAD_ALL - ids("3,11,4,5,6,7")
    assert take_by_topology(QUAD_SOCKET_FOUR_WAY_HT, available, 72) == QUAD_SOCKET[0]


def test_quad_socket_full_cores_from_three_sockets() -> None:
    available = ids("1,25,13,38,2,9,11,35,23,48,12,51,53,173,113,233,54,61")
    assert take_by_topology(QUAD_SOCKET_FOUR_WAY_HT, available, 12) == ids("1,25,13,38,11,35,23,48,53,173,113,233")


def test_quad_socket_socket_plus_full_core() -> None:
    available = QUAD_SOCKET[1] | ids("10,34,22,47,53,173,61,181,108,228,115,235")
    assert take_by_topology(QUAD_SOCKET_FOUR_WAY_HT, available, 76) == QUAD_SOCKET[1] | ids("10,34,22,47")


def test_quad_socket_only_partial_cores() -> None:
    assert take_by_topology(QUAD_SOCKET_FOUR_WAY_HT, ids("10,11,52,53,67"), 5) == ids("10,11,52,53,67")


@pytest.mark.parametrize(
    ("topology", "available", "count", "message"),
    [
        (SINGLE_SOCKET_HT, "0,2,4,6", 5, "requested=5, available=4"),
        (SINGLE_SOCKET_HT, "1-7", 8, "requested=8, available=7"),
        (DUAL_SOCKET_HT, "4-11", 10, "requested=10, available=8"),
        (QUAD_SOCKET_FOUR_WAY_HT, "10,11,37,52,53,55,67", 76, "requested=76, available=7"),
    ],
)
def test_not_enough_cpus(topology: NumaTopology, available: str, count: int, message: str) -> None:
    with pytest.raises(CpuAssignmentError, match=f"not enough cpus available to satisfy request: {message}"):
        take_by_topology(topology, ids(available), count)


def test_bad_input_is_named() -> None:
    with pytest.raises(CpuTopologyError, match="CPUs 12 are not in the node's topology"):
        take_by_topology(DUAL_SOCKET_HT, ids("0-12"), 2)
    with pytest.raises(ValueError, match="negative"):
        take_by_topology(DUAL_SOCKET_HT, ids("0-11"), -1)
    with pytest.raises(TypeError):
        take_by_topology(DUAL_SOCKET_HT, ids("0-11"), 2, spread=True)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="cannot be used at the same time"):
        take_by_topology(DUAL_SOCKET_HT, ids("0-11"), 2, distribute_cpus_across_numa=True, align_by_uncorecache=True)
    with pytest.raises(CpuTopologyError, match="lists no CPUs"):
        take_by_topology(NumaTopology(node_name="empty", numa_ids=(0,)), IdSet(), 1)


# -- full-pcpus-only (kubelet smtalignOptionTestCases) ---------------------------------------------


def test_full_pcpus_only_rejects_a_split_core() -> None:
    with pytest.raises(SmtAlignmentError, match="requested 1 cpus not multiple cpus per core = 2"):
        take_by_topology(
            shape("s", {c: (c % 4, 0, 0) for c in range(8)}, reserved="0"), ids("1-7"), 1, full_pcpus_only=True
        )
    with pytest.raises(SmtAlignmentError, match="requested 15 cpus not multiple cpus per core = 4"):
        take_by_topology(QUAD_SOCKET_FOUR_WAY_HT, QUAD_ALL, 15, full_pcpus_only=True)


def test_full_pcpus_only_counts_reserved_siblings_as_taken() -> None:
    topology = shape("dual", {cpu: (cpu % 6, cpu % 2, cpu % 2) for cpu in range(12)}, reserved="1,6")
    available = ids("0,2-5,7-11") - topology.reserved_cpus
    with pytest.raises(SmtAlignmentError, match="available physical CPUs = 8, requested CPUs = 10") as raised:
        take_by_topology(topology, available, 10, full_pcpus_only=True)
    assert raised.value.available_physical == 8


def test_full_pcpus_only_allocates_whole_cores() -> None:
    topology = shape("dual", {cpu: (cpu % 6, cpu % 2, cpu % 2) for cpu in range(12)}, reserved="0,6")
    available = ids("1-5,7-11")
    assert take_by_topology(topology, available, 10, full_pcpus_only=True) == available


# -- distribute-cpus-across-numa (TestTakeByTopologyNUMADistributed) ------------------------------

COMMON_AS_DISTRIBUTED = [(d, t, a, c, 1, e) for d, t, a, c, e in PACKED_CASES[:12]]
DISTRIBUTED_CASES: list[tuple[str, NumaTopology, str, int, int, str]] = [
    *COMMON_AS_DISTRIBUTED,
    ("4 full cores, 2 per NUMA node", DUAL_SOCKET_HT, "0-11", 8, 1, "0-3,6-9"),
    (
        "32 full cores, 8 per NUMA node",
        DUAL_SOCKET_MULTI_NUMA_HT,
        "0-79",
        64,
        1,
        "0-7,10-17,20-27,30-37,40-47,50-57,60-67,70-77",
    ),
    (
        "24 full cores, first 3 NUMA nodes",
        DUAL_SOCKET_MULTI_NUMA_HT,
        "0-79",
        48,
        1,
        "0-7,10-17,20-27,40-47,50-57,60-67",
    ),
    (
        "24 full cores, all but 2 from NUMA 0",
        DUAL_SOCKET_MULTI_NUMA_HT,
        "1-29,32-39,41-69,72-79",
        48,
        1,
        "1-8,10-17,20-27,41-48,50-57,60-67",
    ),
    (
        "24 full cores, the last 3 NUMA nodes",
        DUAL_SOCKET_MULTI_NUMA_HT,
        "2-29,31-39,42-69,71-79",
        48,
        1,
        "10-17,20-27,31-38,50-57,60-67,71-78",
    ),
    (
        "8 full cores, 2 per NUMA node",
        DUAL_SOCKET_MULTI_NUMA_HT,
        "0-2,10-12,20-22,30-32,40-41,50-51,60-61,70-71",
        16,
        1,
        "0-1,10-11,20-21,30-31,40-41,50-51,60-61,70-71",
    ),
    ("one cpu, core from socket 0", DUAL_SOCKET_HT, "1-5,7-11", 1, 1, "1"),
    ("one cpu, group size 2", DUAL_SOCKET_HT, "1-5,7-11", 1, 2, "2"),
    ("13 full cores over the first 2 NUMA nodes", DUAL_SOCKET_MULTI_NUMA_HT, "0-79", 26, 1, "0-6,10-16,40-45,50-55"),
    ("13 full cores over 2 NUMA nodes, group 2", DUAL_SOCKET_MULTI_NUMA_HT, "0-79", 26, 2, "0-6,10-15,40-46,50-55"),
    (
        "31 cores, 1 spill to NUMA 0 and 1",
        DUAL_SOCKET_MULTI_NUMA_HT,
        "0-79",
        62,
        1,
        "0-7,10-17,20-27,30-37,40-47,50-57,60-66,70-76",
    ),
    (
        "31 cores, group 2 spill to NUMA 0-2",
        DUAL_SOCKET_MULTI_NUMA_HT,
        "0-79",
        62,
        2,
        "0-7,10-17,20-27,30-36,40-47,50-57,60-67,70-76",
    ),
    (
        "31 cores, spill to NUMA 2 and 3 for balance",
        DUAL_SOCKET_MULTI_NUMA_HT,
        "0-8,10-18,20-39,40-48,50-58,60-79",
        62,
        1,
        "0-7,10-17,20-27,30-37,40-46,50-56,60-67,70-77",
    ),
    (
        "31 cores, group 2, spill to NUMA 0, 2, 3",
        DUAL_SOCKET_MULTI_NUMA_HT,
        "0-8,10-18,20-39,40-48,50-58,60-79",
        62,
        2,
        "0-7,10-16,20-27,30-37,40-47,50-56,60-67,70-77",
    ),
    (
        "remainder only where CPUs suffice",
        DUAL_SOCKET_MULTI_NUMA_HT,
        "0-3,10-13,20-23,30-36,40-43,50-53,60-63,70-76",
        34,
        1,
        "0-3,10-13,20-23,30-34,40-43,50-53,60-63,70-74",
    ),
    (
        "live-machine regression",
        DUAL_SOCKET_MULTI_NUMA_HT_LARGE,
        "0,128,30,31,158,159,43-47,171-175,62,63,190,191,75-79,203-207,94,96,222,223,101-111,229-239,126,127,254,255",
        28,
        1,
        "43-47,75-79,96,101-105,171-174,203-206,229-232",
    ),
]


@pytest.mark.parametrize(("description", "topology", "available", "count", "group", "expected"), DISTRIBUTED_CASES)
def test_distributed_matches_kubelet(
    description: str, topology: NumaTopology, available: str, count: int, group: int, expected: str
) -> None:
    full_pcpus_only = group > 1
    if full_pcpus_only and count % 2:
        # The kubelet's table calls the algorithm directly; our entry point applies the SMT check.
        got = IdSet(take_distributed(CpuLayout.from_topology(topology), frozenset(ids(available)), count, group))
    else:
        got = take_by_topology(
            topology, ids(available), count, distribute_cpus_across_numa=True, full_pcpus_only=full_pcpus_only
        )
    assert got == ids(expected), description


# -- prefer-align-cpus-by-uncorecache (TestTakeByTopologyUncore) -----------------------------------

UNCORE_CASES: list[tuple[str, NumaTopology, str, int, str]] = [
    ("two full caches and part of one", UNCORE_SINGLE_SOCKET_NO_SMT, "1-15", 10, "1,2,4-11"),
    # One L3 spans the machine; the odd-request rule keeps one thread of the first free core.
    ("one cpu, core from socket 0", DUAL_SOCKET_HT, "1-5,7-11", 1, "1"),
    ("first free cache of the first socket", UNCORE_DUAL_SOCKET_NO_SMT, "0-15", 4, "0-3"),
    ("all free caches of the first socket", UNCORE_DUAL_SOCKET_NO_SMT, "2-15", 6, "2-7"),
    ("first free cache of the second socket", UNCORE_DUAL_SOCKET_NO_SMT, "8-15", 4, "8-11"),
    ("first free cache of the available NUMA node", UNCORE_SINGLE_SOCKET_MULTI_NUMA, "3,4-8,12", 2, "4,5"),
    ("best cache, SMT", UNCORE_SINGLE_SOCKET_SMT, "2-3,10-11,4-7,12-15", 6, "4-6,12-14"),
    ("several caches, SMT", UNCORE_SINGLE_SOCKET_SMT, "1-7,9-15", 10, "4-7,12-15,1,9"),
]


@pytest.mark.parametrize(("description", "topology", "available", "count", "expected"), UNCORE_CASES)
def test_uncore_matches_kubelet(
    description: str, topology: NumaTopology, available: str, count: int, expected: str
) -> None:
    assert take_by_topology(topology, ids(available), count, align_by_uncorecache=True) == ids(expected), description


def test_uncore_odd_request_keeps_whole_cores() -> None:
    # 3 CPUs in one L3 on an SMT machine: a whole core plus one thread of the next, same cache.
    assert take_by_topology(UNCORE_SINGLE_SOCKET_SMT, ids("0-15"), 3, align_by_uncorecache=True) == ids("0,1,8")


# -- our fixture machines ------------------------------------------------------------------------


def machine(name: str, reserved: str = "") -> NumaTopology:
    data: dict[str, Any] = yaml.safe_load((MACHINES / f"{name}.yaml").read_text())
    cpus: list[CpuInfo] = []
    for row in data["cores"]:
        for cpu in IdSet.parse(str(row["cpus"])):
            cpus.append(
                CpuInfo(
                    cpu=cpu, core=row["core"], socket=row["socket"], numa=row["numa"], l3=row.get("l3", row["socket"])
                )
            )
    numas = tuple(node["id"] for node in data["numa_nodes"])
    return NumaTopology(node_name=name, numa_ids=numas, cpus=tuple(cpus), reserved_cpus=IdSet.parse(reserved))


MACHINE_NAMES = sorted(path.stem for path in MACHINES.glob("*.yaml"))


def test_fixture_machines_parse() -> None:
    for name in MACHINE_NAMES:
        topology = machine(name)
        assert len(topology.cpus) == len(topology.all_cpus) > 0, name


def test_epyc_whole_numa_node_then_core() -> None:
    epyc = machine("epyc-1s-nps4")
    # 1 socket, 4 NUMA nodes: sockets first; the socket is not free, so whole NUMA nodes, then cores
    # from the NUMA node with the fewest free CPUs.
    available = epyc.all_cpus - ids("0,64")
    assert take_by_topology(epyc, available, 34) == ids("16-31,80-95") | ids("1,65")


def test_epyc_uncore_cache_alignment() -> None:
    epyc = machine("epyc-1s-nps4")
    # 16 CPUs = one L3 group (8 cores x 2 threads): the kubelet takes the whole group.
    assert take_by_topology(epyc, epyc.all_cpus, 16, align_by_uncorecache=True) == ids("0-7,64-71")
    # L3 group 0 is partly used: the request goes to the emptiest group that holds it whole.
    available = epyc.all_cpus - ids("0-3,64-67")
    assert take_by_topology(epyc, available, 8, align_by_uncorecache=True) == ids("4-7,68-71")
    # Without the option the same request packs the used NUMA node's remaining cores in core order.
    assert take_by_topology(epyc, available, 12) == ids("4-9,68-73")
    # With it, 12 CPUs fit in L3 group 1 (8-15) alone, rather than spanning groups 0 and 1.
    assert take_by_topology(epyc, available, 12, align_by_uncorecache=True) == ids("8-13,72-77")


def test_dgx_a100_distributes_across_numa() -> None:
    dgx = machine("dgx-a100")
    got = take_by_topology(dgx, dgx.all_cpus, 64, distribute_cpus_across_numa=True, full_pcpus_only=True)
    per_numa = {numa: len(got & dgx.cpus_by_numa[numa]) for numa in dgx.numa_ids}
    assert sorted(per_numa.values()) == [0, 0, 0, 0, 0, 0, 32, 32]
    assert all(len(got & dgx.cpus_by_numa[numa]) % 2 == 0 for numa in dgx.numa_ids)


def test_dgx_a100_packed_prefers_whole_numa_nodes() -> None:
    dgx = machine("dgx-a100")
    assert take_by_topology(dgx, dgx.all_cpus, 32) == dgx.cpus_by_numa[0]
    assert take_by_topology(dgx, dgx.all_cpus, 128) == IdSet(range(64)) | IdSet(range(128, 192))


# -- properties ----------------------------------------------------------------------------------

PROPERTY_SHAPES = [
    DUAL_SOCKET_HT,
    DUAL_SOCKET_MULTI_NUMA_HT,
    MULTI_SOCKET_PER_NUMA_HT,
    UNCORE_SINGLE_SOCKET_MULTI_NUMA,
    machine("epyc-1s-nps4"),
    machine("pcie-8gpu-2numa"),
]


@st.composite
def requests(draw: st.DrawFn) -> tuple[NumaTopology, IdSet, int, dict[str, bool]]:
    topology = draw(st.sampled_from(PROPERTY_SHAPES))
    all_cpus = topology.all_cpus.sorted()
    available = IdSet(draw(st.sets(st.sampled_from(all_cpus), min_size=1)))
    count = draw(st.integers(min_value=0, max_value=len(available)))
    mode = draw(st.sampled_from(["packed", "uncore", "distributed"]))
    options = {
        "packed": {},
        "uncore": {"align_by_uncorecache": True},
        "distributed": {"distribute_cpus_across_numa": True},
    }
    return topology, available, count, options[mode]


@settings(max_examples=150, deadline=None)
@given(requests())
def test_result_is_exactly_count_cpus_from_available(case: tuple[NumaTopology, IdSet, int, dict[str, bool]]) -> None:
    topology, available, count, options = case
    got = take_by_topology(topology, available, count, **options)
    assert len(got) == count
    assert got.is_subset(available)


def numa_span(topology: NumaTopology, cpus: IdSet) -> int:
    return sum(1 for numa in topology.numa_ids if cpus & topology.cpus_by_numa[numa])


@settings(max_examples=100, deadline=None)
@given(requests())
def test_distributed_uses_one_numa_node_when_one_fits(case: tuple[NumaTopology, IdSet, int, dict[str, bool]]) -> None:
    topology, available, count, _ = case
    fits_one = any(len(available & topology.cpus_by_numa[numa]) >= count for numa in topology.numa_ids)
    got = take_by_topology(topology, available, count, distribute_cpus_across_numa=True)
    if count and fits_one:
        assert numa_span(topology, got) == 1
