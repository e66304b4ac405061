"""Reading NodeResourceTopology v1alpha1 and v1alpha2 (k8stopologyawareschedwg/noderesourcetopology-api
pkg/apis/topology/v1alpha1|v1alpha2/types.go) as NFD's topology-updater, RTE and scheduler-plugins'
examples publish it, and the kubelet's topology-manager options wherever a topology carries them."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest

from numasched.api.topology import (
    DEFAULT_MAX_ALLOWABLE_NUMA_NODES,
    CpuManagerPolicy,
    KubeletOptionError,
    KubeletPolicies,
    TopologyPolicy,
    TopologyScope,
    check_topology_manager_options,
    parse_go_bool,
    parse_go_int,
)
from numasched.cache.convert_pod import ConversionError
from numasched.cache.convert_topology import nrt_to_topology

# NFD docs/usage/custom-resources.md, the NodeResourceTopology example (v1alpha1), verbatim values.
NFD_EXAMPLE: dict[str, Any] = {
    "apiVersion": "topology.node.k8s.io/v1alpha1",
    "kind": "NodeResourceTopology",
    "metadata": {"name": "node1"},
    "topologyPolicies": ["SingleNUMANodeContainerLevel"],
    "zones": [
        {
            "name": "node-0",
            "type": "Node",
            "resources": [
                {"name": "cpu", "capacity": 20, "allocatable": 16, "available": 10},
                {"name": "vendor/nic1", "capacity": 3, "allocatable": 3, "available": 3},
            ],
        },
        {
            "name": "node-1",
            "type": "Node",
            "resources": [
                {"name": "cpu", "capacity": 30, "allocatable": 30, "available": 15},
                {"name": "vendor/nic2", "capacity": 6, "allocatable": 6, "available": 6},
            ],
        },
        {
            "name": "node-2",
            "type": "Node",
            "resources": [
                {"name": "cpu", "capacity": 30, "allocatable": 30, "available": 15},
                {"name": "vendor/nic1", "capacity": 3, "allocatable": 3, "available": 3},
            ],
        },
    ],
}

# scheduler-plugins manifests/noderesourcetopology/worker-node-A.yaml (v1alpha2), with zones named
# "numa-node-<n>" as its README's worker-node-B does.
SCHEDULER_PLUGINS_EXAMPLE: dict[str, Any] = {
    "apiVersion": "topology.node.k8s.io/v1alpha2",
    "kind": "NodeResourceTopology",
    "metadata": {"name": "worker-node-a", "namespace": "default"},
    "topologyPolicies": ["SingleNUMANodeContainerLevel"],
    "zones": [
        {
            "name": f"numa-node-{numa}",
            "type": "Node",
            "resources": [
                {"name": "cpu", "capacity": "4", "allocatable": "3", "available": "3"},
                {"name": "example.com/deviceA", "capacity": 1 + numa, "allocatable": 1 + numa, "available": 1 + numa},
                {"name": "example.com/deviceB", "capacity": 2 - numa, "allocatable": 2 - numa, "available": 2 - numa},
            ],
        }
        for numa in (0, 1)
    ],
}


def v1alpha2(**fields: Any) -> dict[str, Any]:
    """Two NUMA zones as an RTE / NFD v1alpha2 object with attributes, costs and a socket zone."""
    obj: dict[str, Any] = {
        "apiVersion": "topology.node.k8s.io/v1alpha2",
        "kind": "NodeResourceTopology",
        "metadata": {"name": "n1"},
        "attributes": [
            {"name": "topologyManagerPolicy", "value": "single-numa-node"},
            {"name": "topologyManagerScope", "value": "pod"},
            {"name": "nodeTopologyPodsFingerprint", "value": "pfp0v001fe53c4dbd2c1a3"},
        ],
        "zones": [
            {"name": "socket-0", "type": "Socket"},
            *[
                {
                    "name": f"node-{numa}",
                    "type": "Node",
                    "costs": [{"name": "node-0", "value": [10, 21][numa]}, {"name": "node-1", "value": [21, 10][numa]}],
                    "resources": [
                        {"name": "cpu", "capacity": "24", "allocatable": "22", "available": ["2", "22"][numa]},
                        {"name": "memory", "capacity": "64Gi", "allocatable": "60Gi", "available": "10Gi"},
                        {"name": "hugepages-1Gi", "capacity": "8Gi", "allocatable": "8Gi", "available": "8Gi"},
                        {"name": "nvidia.com/gpu", "capacity": "4", "allocatable": "4", "available": ["1", "4"][numa]},
                        {"name": "vendor/nic", "capacity": "2", "allocatable": "2"},
                    ],
                }
                for numa in (0, 1)
            ],
        ],
    }
    obj.update(fields)
    return obj


def free_per_numa(obj: dict[str, Any]) -> tuple[dict[int, int], dict[str, dict[int, int]]]:
    topology = nrt_to_topology(obj)
    assert topology.available_cpus is not None
    cpus = {numa: len(topology.available_cpus & cpus) for numa, cpus in topology.cpus_by_numa.items()}
    devices = {
        resource: {
            numa: sum(1 for d in group.devices if d.numa == numa and d.id in topology.available_devices[resource])
            for numa in topology.numa_ids
        }
        for resource, group in topology.devices.items()
        if resource in topology.available_devices
    }
    return cpus, devices


def test_nfd_example_counts_per_zone_and_what_is_free() -> None:
    topology = nrt_to_topology(NFD_EXAMPLE)
    assert topology.numa_ids == (0, 1, 2)
    assert {numa: len(cpus) for numa, cpus in topology.cpus_by_numa.items()} == {0: 16, 1: 30, 2: 30}
    assert free_per_numa(NFD_EXAMPLE)[0] == {0: 10, 1: 15, 2: 15}
    assert [d.numa for d in topology.devices["vendor/nic1"].devices] == [0, 0, 0, 2, 2, 2]
    assert topology.policies.topology_manager_policy is TopologyPolicy.SINGLE_NUMA_NODE
    assert topology.policies.topology_manager_scope is TopologyScope.CONTAINER
    assert topology.policies.cpu_manager_policy is CpuManagerPolicy.STATIC
    assert not topology.cpu_ids_known and topology.pods_fingerprint is None


def test_scheduler_plugins_example_loads_unchanged() -> None:
    topology = nrt_to_topology(SCHEDULER_PLUGINS_EXAMPLE)
    assert topology.numa_ids == (0, 1)
    assert free_per_numa(SCHEDULER_PLUGINS_EXAMPLE) == (
        {0: 3, 1: 3},
        {"example.com/deviceA": {0: 1, 1: 2}, "example.com/deviceB": {0: 2, 1: 1}},
    )


def test_v1alpha2_attributes_zone_available_costs_and_fingerprint() -> None:
    obj = v1alpha2()
    topology = nrt_to_topology(obj)
    assert topology.numa_ids == (0, 1)  # the Socket zone is not a NUMA node
    assert topology.policies.topology_manager_policy is TopologyPolicy.SINGLE_NUMA_NODE
    assert topology.policies.topology_manager_scope is TopologyScope.POD
    assert topology.pods_fingerprint == "pfp0v001fe53c4dbd2c1a3"
    assert topology.distance(0, 1) == 21 and topology.distance(1, 1) == 10
    assert topology.memory == {"memory": {0: 60 << 30, 1: 60 << 30}, "hugepages-1Gi": {0: 8 << 30, 1: 8 << 30}}
    cpus, devices = free_per_numa(obj)
    assert cpus == {0: 2, 1: 22}
    # A resource whose zones give no `available` makes no statement.
    assert devices == {"nvidia.com/gpu": {0: 1, 1: 4}}
    assert "vendor/nic" not in topology.available_devices and len(topology.devices["vendor/nic"].devices) == 4


NRT_POLICY_VALUES = [
    ("None", TopologyPolicy.NONE, TopologyScope.CONTAINER),
    ("BestEffort", TopologyPolicy.BEST_EFFORT, TopologyScope.CONTAINER),
    ("BestEffortContainerLevel", TopologyPolicy.BEST_EFFORT, TopologyScope.CONTAINER),
    ("BestEffortPodLevel", TopologyPolicy.BEST_EFFORT, TopologyScope.POD),
    ("Restricted", TopologyPolicy.RESTRICTED, TopologyScope.CONTAINER),
    ("RestrictedContainerLevel", TopologyPolicy.RESTRICTED, TopologyScope.CONTAINER),
    ("RestrictedPodLevel", TopologyPolicy.RESTRICTED, TopologyScope.POD),
    ("SingleNUMANode", TopologyPolicy.SINGLE_NUMA_NODE, TopologyScope.CONTAINER),
    ("SingleNUMANodeContainerLevel", TopologyPolicy.SINGLE_NUMA_NODE, TopologyScope.CONTAINER),
    ("SingleNUMANodePodLevel", TopologyPolicy.SINGLE_NUMA_NODE, TopologyScope.POD),
]


@pytest.mark.parametrize("version", ["v1alpha1", "v1alpha2"])
@pytest.mark.parametrize(("value", "policy", "scope"), NRT_POLICY_VALUES)
def test_every_topology_policies_value(version: str, value: str, policy: TopologyPolicy, scope: TopologyScope) -> None:
    obj = copy.deepcopy(NFD_EXAMPLE)
    obj.update(apiVersion=f"topology.node.k8s.io/{version}", topologyPolicies=[value])
    policies = nrt_to_topology(obj).policies
    assert (policies.topology_manager_policy, policies.topology_manager_scope) == (policy, scope)


@pytest.mark.parametrize(
    ("policy", "scope"),
    [(p, s) for p in ("none", "best-effort", "restricted", "single-numa-node") for s in ("container", "pod")],
)
def test_attributes_carry_the_kubelets_values_and_win_over_the_deprecated_list(policy: str, scope: str) -> None:
    obj = v1alpha2(
        topologyPolicies=["None"],
        attributes=[
            {"name": "topologyManagerPolicy", "value": policy},
            {"name": "topologyManagerScope", "value": scope},
        ],
    )
    policies = nrt_to_topology(obj).policies
    assert (policies.topology_manager_policy.value, policies.topology_manager_scope.value) == (policy, scope)


def test_the_first_of_a_repeated_attribute_wins() -> None:
    obj = v1alpha2(
        attributes=[
            {"name": "topologyManagerPolicy", "value": "restricted"},
            {"name": "topologyManagerPolicy", "value": "none"},
        ]
    )
    assert nrt_to_topology(obj).policies.topology_manager_policy is TopologyPolicy.RESTRICTED


def test_published_topology_manager_options_are_read() -> None:
    obj = v1alpha2(
        attributes=[
            {"name": "topologyManagerPolicy", "value": "restricted"},
            {"name": "topologyManagerOptionPreferClosestNumaNodes", "value": "T"},
            {"name": "topologyManagerMaxNUMANodes", "value": "16"},
        ]
    )
    policies = nrt_to_topology(obj).policies
    assert policies.prefer_closest_numa_nodes and policies.max_allowable_numa_nodes == 16
    obj = v1alpha2(attributes=[{"name": "topologyManagerPolicyOptions", "value": "max-allowable-numa-nodes=12"}])
    assert nrt_to_topology(obj).policies.max_allowable_numa_nodes == 12


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda o: o.update(topologyPolicies=["SingleNumaNode"]), r"topologyPolicies\[0\]: unknown policy"),
        (lambda o: o.update(topologyPolicies=["None", "Strict"]), r"topologyPolicies\[1\]: unknown policy"),
        (lambda o: o.update(topologyPolicies="None"), "topologyPolicies: expected a list"),
        (lambda o: o["attributes"][0].update(value="Single-NUMA-Node"), r"attributes\[topologyManagerPolicy\]"),
        (lambda o: o["attributes"][1].update(value="node"), r"attributes\[topologyManagerScope\]"),
        (
            lambda o: o["attributes"].append({"name": "topologyManagerOptionPreferClosestNumaNodes", "value": "yes"}),
            "prefer-closest-numa-nodes",
        ),
        (
            lambda o: o["attributes"].append({"name": "topologyManagerMaxNUMANodes", "value": "4"}),
            "max-allowable-numa-nodes",
        ),
        (
            lambda o: o["attributes"].append({"name": "topologyManagerOptionAlignBySocket", "value": "true"}),
            "unknown Topology Manager Policy option 'align-by-socket'",
        ),
        (lambda o: o["attributes"].append({"name": 3}), r"attributes\[3\].name: expected a string"),
        (lambda o: o.update(attributes={}), "attributes: expected a list"),
        (lambda o: o.update(apiVersion="topology.node.k8s.io/v9"), "apiVersion"),
        (lambda o: o.update(zones=[]), "zones is missing or empty"),
        (lambda o: o.update(zones=[{"name": "node-0", "type": "Socket"}]), "no zone of type Node"),
        (lambda o: o["zones"][1].update(name="node-99"), r"zones\[1\].name: zone 'node-99'"),
        (lambda o: o["zones"][1].update(name="node-²"), r"zones\[1\].name: zone 'node-²'"),
        (lambda o: o["zones"][2].update(name="node-0"), r"zones\[2\].name: NUMA node 0 appears twice"),
        (
            lambda o: o["zones"][1]["resources"][0].update(available="lots"),
            r"zones\[node-0\].resources\[cpu\].available: invalid quantity",
        ),
        (
            lambda o: o["zones"][1]["resources"][0].update(allocatable="-2"),
            r"zones\[node-0\].resources\[cpu\].allocatable: negative",
        ),
        (
            lambda o: o["zones"][1]["resources"][0].update(allocatable="9000"),
            r"zones\[node-0\].resources\[cpu\].allocatable: 9000 is too many",
        ),
        (
            lambda o: o["zones"][1]["resources"][3].update(allocatable="2000"),
            r"zones\[node-0\].resources\[nvidia.com/gpu\].allocatable: 2000 is too many",
        ),
        (
            lambda o: o["zones"][1]["resources"].append({"name": "cpu", "allocatable": "1"}),
            r"zones\[node-0\].resources\[cpu\]: listed twice",
        ),
        (lambda o: o["zones"][1]["costs"][0].update(value="10"), r"zones\[node-0\].costs\[0\].value"),
        (lambda o: o["zones"][1].update(resources={}), r"zones\[node-0\].resources: expected a list"),
    ],
)
def test_bad_node_resource_topologies_are_refused_naming_the_field(mutate: Any, field: str) -> None:
    obj = v1alpha2()
    mutate(obj)
    with pytest.raises(ConversionError, match=field) as caught:
        nrt_to_topology(obj)
    assert caught.value.kind == "NodeResourceTopology"


@pytest.mark.parametrize("value", ["1e400", "9" * 5000, "1e999999999", "1099511627776", 1 << 70])
def test_huge_counts_are_refused_quickly(value: Any) -> None:
    obj = v1alpha2()
    obj["zones"][1]["resources"][0]["allocatable"] = value
    started = time.perf_counter()
    with pytest.raises(ConversionError):
        nrt_to_topology(obj)
    assert time.perf_counter() - started < 0.5


# -- kubelet topology-manager options, as pkg/kubelet/cm/topologymanager/policy_options.go parses them


@pytest.mark.parametrize(
    ("text", "value"),
    [
        *[(t, True) for t in ("1", "t", "T", "TRUE", "true", "True")],
        *[(f, False) for f in ("0", "f", "F", "FALSE", "false", "False")],
    ],
)
def test_go_parse_bool_spellings(text: str, value: bool) -> None:
    assert parse_go_bool(text) is value


@pytest.mark.parametrize("text", ["yes", "no", "on", "tRUE", "", " true", "2"])
def test_go_parse_bool_refuses_everything_else(text: str) -> None:
    with pytest.raises(KubeletOptionError):
        parse_go_bool(text)


@pytest.mark.parametrize(("text", "value"), [("8", 8), ("+16", 16), ("-3", -3), ("0012", 12)])
def test_go_atoi(text: str, value: int) -> None:
    assert parse_go_int(text) == value


@pytest.mark.parametrize("text", ["", "8.0", " 8", "0x10", "1_0", "²", "٣", "9223372036854775808", "9" * 5000])
def test_go_atoi_refuses(text: str) -> None:
    with pytest.raises(KubeletOptionError):
        parse_go_int(text)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"prefer-closest-numa-nodes": "yes"}, "bad value for option 'prefer-closest-numa-nodes'"),
        ({"max-allowable-numa-nodes": "7"}, "should not be less than 8"),
        ({"max-allowable-numa-nodes": "x"}, "unable to convert policy option to integer"),
        ({"align-by-socket": "true"}, "unknown Topology Manager Policy option"),
    ],
)
def test_options_the_kubelet_refuses(options: dict[str, str], message: str) -> None:
    with pytest.raises(KubeletOptionError, match=message):
        check_topology_manager_options(options)


def test_options_read_as_the_kubelet_reads_them() -> None:
    check_topology_manager_options({"prefer-closest-numa-nodes": "1", "max-allowable-numa-nodes": "8"})
    policies = KubeletPolicies(
        topology_manager_options={"prefer-closest-numa-nodes": "1", "max-allowable-numa-nodes": "+9"}
    )
    assert policies.prefer_closest_numa_nodes and policies.max_allowable_numa_nodes == 9
    assert KubeletPolicies().max_allowable_numa_nodes == DEFAULT_MAX_ALLOWABLE_NUMA_NODES
    assert not KubeletPolicies().prefer_closest_numa_nodes
