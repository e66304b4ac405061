"""Reading the NodeResourceTopology koordlet writes (koordinator pkg/koordlet/statesinformer/impl/
states_noderesourcetopology.go): zones whose `available` is every CPU, and the real CPU state in
koordinator's annotations (apis/extension/numa_aware.go). The objects are the conformance corpus'
(tests/fixtures/thirdparty/koordlet)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from numasched.api.idset import IdSet
from numasched.api.topology import CpuManagerPolicy
from numasched.cache.convert_topology import nrt_pod_allocation_report, nrt_to_topology
from numasched.cache.convert_topology_koordlet import (
    CPU_MANAGER_POLICY_ANNOTATION,
    CPU_SHARED_POOLS_ANNOTATION,
    CPU_TOPOLOGY_ANNOTATION,
    POD_CPU_ALLOCS_ANNOTATION,
)

CLUSTER = Path(__file__).parent / "fixtures" / "thirdparty" / "koordlet" / "cluster.yaml"


def koordlet_nrt(name: str) -> dict[str, Any]:
    for document in yaml.safe_load_all(CLUSTER.read_text()):
        if document and document["kind"] == "NodeResourceTopology" and document["metadata"]["name"] == name:
            return dict(document)
    raise AssertionError(f"no NodeResourceTopology {name} in {CLUSTER}")


def free_per_numa(obj: dict[str, Any]) -> dict[int, int]:
    topology = nrt_to_topology(obj)
    assert topology.available_cpus is not None
    usable = topology.available_cpus & topology.allocatable_cpus
    return {numa: len(usable & cpus) for numa, cpus in topology.cpus_by_numa.items()}


def test_koordlet_annotations_give_real_cpu_ids_reserved_and_free_cpus() -> None:
    topology = nrt_to_topology(koordlet_nrt("koord-b"))
    assert topology.cpu_ids_known
    assert [(c.cpu, c.numa, c.socket, c.core) for c in topology.cpus[:2]] == [(0, 0, 0, 0), (1, 0, 0, 1)]
    assert topology.cpus_by_numa == {0: IdSet.parse("0-3,8-11"), 1: IdSet.parse("4-7,12-15")}
    assert topology.policies.cpu_manager_policy is CpuManagerPolicy.STATIC
    assert topology.reserved_cpus == IdSet.parse("0,8")
    # Shared pools: web holds 1-3,9; reserved 0,8 stay in the pool but are not allocatable.
    assert topology.available_cpus == IdSet.parse("0,4-8,10-15")
    assert free_per_numa(koordlet_nrt("koord-b")) == {0: 2, 1: 8}
    assert free_per_numa(koordlet_nrt("koord-a")) == {0: 6, 1: 0}


def test_koordlet_pod_cpu_allocs_are_an_accounted_report() -> None:
    obj = koordlet_nrt("koord-b")
    report = nrt_pod_allocation_report(obj, nrt_to_topology(obj))
    web = report.for_pod("9c1d2e3f-0000-4000-8000-000000000eb0", "default/web")
    assert web is not None and web.cpus() == IdSet.parse("1-3,9")
    assert report.accounts_for("", "default/web") and not report.accounts_for("", "default/db")


def test_without_shared_pools_nothing_is_accounted() -> None:
    obj = koordlet_nrt("koord-b")
    del obj["metadata"]["annotations"][CPU_SHARED_POOLS_ANNOTATION]
    topology = nrt_to_topology(obj)
    assert topology.cpu_ids_known and topology.available_cpus is None
    assert nrt_pod_allocation_report(obj, topology).accounted == frozenset()


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (CPU_TOPOLOGY_ANNOTATION, "{", "not JSON"),
        (CPU_TOPOLOGY_ANNOTATION, '{"detail": [{"id": 0, "node": 5}]}', "NUMA node 5 is not a zone"),
        (CPU_TOPOLOGY_ANNOTATION, '{"detail": [{"id": 8192}]}', "expected an integer 0-8191"),
        (CPU_TOPOLOGY_ANNOTATION, '{"detail": [{"id": 1}, {"id": 1}]}', "CPU 1 is listed twice"),
        (CPU_TOPOLOGY_ANNOTATION, '{"detail": []}', "expected 1-8192 CPUs"),
        (CPU_MANAGER_POLICY_ANNOTATION, '{"policy": "Static"}', "unknown policy"),
        (CPU_MANAGER_POLICY_ANNOTATION, '{"policy": "static", "reservedCPUs": "0-99"}', "CPUs 16-99"),
        (CPU_SHARED_POOLS_ANNOTATION, '[{"cpuset": "0-1099511627776"}]', "too large"),
        (POD_CPU_ALLOCS_ANNOTATION, '[{"uid": 3}]', "uid: expected a string"),
        (POD_CPU_ALLOCS_ANNOTATION, "[" * 100000, "not JSON"),
    ],
)
def test_a_bad_koordlet_annotation_is_reported_and_the_zones_are_read_alone(key: str, value: str, message: str) -> None:
    obj = copy.deepcopy(koordlet_nrt("koord-b"))
    obj["metadata"]["annotations"][key] = value
    warnings: list[str] = []
    topology = nrt_to_topology(obj, on_warning=warnings.append)
    assert len(warnings) == 1 and key in warnings[0] and message in warnings[0]
    # The zones alone: placeholder ids, every CPU "available" as koordlet says, nothing accounted.
    assert not topology.cpu_ids_known and len(topology.cpus) == 16
    assert nrt_pod_allocation_report(obj, topology).accounted == frozenset()


def test_pod_cpu_allocs_written_as_null_mean_no_pods() -> None:
    obj = copy.deepcopy(koordlet_nrt("koord-b"))
    obj["metadata"]["annotations"][POD_CPU_ALLOCS_ANNOTATION] = json.dumps(None)
    assert nrt_pod_allocation_report(obj, nrt_to_topology(obj)).accounted == frozenset()
