"""The numasched.io/numa-detail annotation: format, parse, apply; bad input named, huge ids cheap."""

from __future__ import annotations

import json
import time

import pytest

from numasched.api.idset import IdSet
from numasched.api.numa_detail import (
    NumaDetailError,
    apply_numa_detail,
    format_numa_detail,
    l3_groups,
    parse_numa_detail,
)
from numasched.api.topology import CpuInfo, NumaTopology


def two_node_topology() -> NumaTopology:
    # 8 CPUs: 0-3 on NUMA 0, 4-7 on NUMA 1; the reader's fallback put every L3 group at the socket.
    cpus = tuple(CpuInfo(cpu=cpu, core=cpu % 4, socket=0, numa=cpu // 4, l3=0) for cpu in range(8))
    return NumaTopology(node_name="n1", numa_ids=(0, 1), cpus=cpus)


def test_round_trip_and_idempotent_apply() -> None:
    text = format_numa_detail(
        {0: {0: 10, 1: 21}, 1: {0: 21, 1: 10}},
        {"memory": {0: 100, 1: 200}, "hugepages-1Gi": {1: 1 << 30}},
        {"memory": {0: 90}},
        {0: IdSet([0, 1, 2, 3]), 7: IdSet([4, 5, 6, 7])},
    )
    assert json.loads(text) == {
        "version": 1,
        "distances": {"0": {"0": 10, "1": 21}, "1": {"0": 21, "1": 10}},
        "memory": {
            "0": {"memory": {"total": 100, "allocatable": 90}},
            "1": {
                "hugepages-1Gi": {"total": 1 << 30, "allocatable": 1 << 30},
                "memory": {"total": 200, "allocatable": 200},
            },
        },
        "l3": {"0": "0-3", "7": "4-7"},
    }
    detail = parse_numa_detail(text)
    topology = apply_numa_detail(two_node_topology(), detail)
    assert topology.distance(0, 1) == 21
    assert topology.memory == {"memory": {0: 90, 1: 200}, "hugepages-1Gi": {1: 1 << 30}}
    assert [info.l3 for info in topology.cpus] == [0, 0, 0, 0, 7, 7, 7, 7]
    assert l3_groups(topology) == {0: IdSet([0, 1, 2, 3]), 7: IdSet([4, 5, 6, 7])}
    assert apply_numa_detail(topology, detail) == topology


def test_a_memory_only_numa_node_is_added() -> None:
    text = (
        '{"version": 1, "distances": {"0": {"0": 10, "1": 21, "2": 30}, "1": {"0": 21, "1": 10, "2": 30},'
        ' "2": {"0": 30, "1": 30, "2": 10}}, "memory": {"2": {"memory": {"total": 64, "allocatable": 64}}}}'
    )
    topology = apply_numa_detail(two_node_topology(), parse_numa_detail(text))
    assert topology.numa_ids == (0, 1, 2)
    assert topology.memory == {"memory": {2: 64}}
    assert topology.distance(2, 0) == 30


def test_an_empty_annotation_keeps_what_the_topology_has() -> None:
    topology = two_node_topology()
    assert apply_numa_detail(topology, parse_numa_detail('{"version":1}')) == topology


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1]", "annotation: expected an object"),
        ("{", "not JSON"),
        ('{"version": 2}', "version 2: only version 1 is known"),
        ('{"version": 1, "distances": {"x": {}}}', "distances: 'x' is not an id"),
        ('{"version": 1, "distances": {"²": {}}}', "distances: '²' is not an id"),
        ('{"version": 1, "distances": {"0": {"0": -1}}}', "distances[0][0]: expected a non-negative integer"),
        ('{"version": 1, "distances": {"0": {"0": true}}}', "distances[0][0]: expected a non-negative integer"),
        ('{"version": 1, "memory": {"0": {"memory": {"total": 1, "allocatable": 2}}}}', "exceeds total"),
        ('{"version": 1, "memory": {"0": {"memory": 5}}}', "memory[0][memory]: expected an object"),
        ('{"version": 1, "memory": {"0": {"memory": {}}}}', "memory[0][memory].total: expected a non-negative"),
        ('{"version": 1, "l3": {"0": "0-3", "1": "3"}}', "l3[1]: CPU 3 is also in L3 group 0"),
        ('{"version": 1, "l3": {"0": 5}}', "l3[0]: expected a CPU list"),
        ('{"version": 1, "l3": {"0": "0-1099511627776"}}', "l3[0]: CPU ids above 8191"),
        ('{"version": 1, "l3": {"0": "4294967296"}}', "l3[0]: CPU ids above 8191"),
        ('{"version": 1, "distances": {"99999": {}}}', "distances: 99999 exceeds 1023"),
        ('{"version": 1, "distances": {"1000000000000": {}}}', "distances: '1000000000000' is not an id"),
        ('{"version": 1, "distances": {"1024": {}}}', "distances: 1024 exceeds 1023"),
    ],
)
def test_bad_annotations_are_named(text: str, message: str) -> None:
    started = time.perf_counter()
    with pytest.raises(NumaDetailError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_numa_detail(text)
    assert time.perf_counter() - started < 0.5


def test_deep_nesting_is_an_error_not_a_crash() -> None:
    with pytest.raises(NumaDetailError, match="not JSON"):
        parse_numa_detail("[" * 100_000)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"version": 1, "distances": {"0": {"5": 10}}}', "distances[0]: unknown NUMA node 5"),
        ('{"version": 1, "distances": {"0": {"0": 10}, "2": {"2": 10}}}', "distances[2]: unknown NUMA node 2"),
        ('{"version": 1, "memory": {"64": {"memory": {"total": 1}}}}', "memory[64]: NUMA id 64 exceeds 63"),
        ('{"version": 1, "l3": {"0": "0-8"}}', "l3: CPU 8 is not in cpuDetail"),
    ],
)
def test_entries_the_topology_lacks_are_refused(text: str, message: str) -> None:
    with pytest.raises(NumaDetailError, match=message.replace("[", r"\[").replace("]", r"\]")):
        apply_numa_detail(two_node_topology(), parse_numa_detail(text))
