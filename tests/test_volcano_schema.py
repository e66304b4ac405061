"""The exporter's objects under the upstream CRDs, as the API server treats them.

Volcano's Numatopology CRD has no x-kubernetes-preserve-unknown-fields: the API server prunes every
field its schema does not declare. Every object our exporter writes, for every fixture machine and
for idle, checkpoint-only and PodResources-reported use, is put through tests/crd_schema.py (an
independent model of pruning and validation) under Volcano's CRD and, for the
NodeResourceTopology, under the NRT CRD: nothing may be dropped, nothing rejected, and what the
scheduler reads back from the stored object must equal what it reads from ours. The values are
checked against oracles built here from the machine fixture and the use we injected, read the way
Volcano's scheduler reads them (cpuset.Parse of numares.<r>.allocatable, podAllocations matched by
uid or namespace/name).
"""

from __future__ import annotations

import asyncio
import importlib
import json
from pathlib import Path
from typing import Any

import attrs
import pytest
import yaml
from conftest import load_hack_module

from numasched.api.allocation import POD_ALLOCATIONS_ANNOTATION, allocation_from_mapping
from numasched.api.numa_detail import NUMA_DETAIL_ANNOTATION, apply_numa_detail, parse_numa_detail
from numasched.api.pod_fingerprint import pods_fingerprint
from numasched.api.topology import TopologyPolicy, TopologyScope
from numasched.cache.convert_topology import nrt_to_topology, numatopology_to_topology, pod_allocation_report
from numasched.exporter.command import GpuCache, build_parser, discover
from numasched.exporter.numatopology import node_resource_topology_object, numatopology_object
from numasched.exporter.podresources.client import usage_from_responses
from numasched.exporter.report import NodeReport, build_report, parse_device_id_formats
from numasched.exporter.usage import (
    NodeUsage,
    parse_cpu_manager_state,
    parse_device_checkpoint,
    with_device_holdings,
    with_pod_names,
)

REPO = Path(__file__).resolve().parent.parent
UPSTREAM = REPO / "tests/fixtures/exporter/upstream"
MACHINES = ["dgx1-v100", "hgx-h100", "dgx-a100", "epyc-1s-nps4", "pcie-8gpu-2numa"]
USAGES = ["unknown", "checkpoint", "checkpoints", "idle", "podresources", "everything-held"]
# What each use source lets the exporter see (the golden kubelet configuration has the static CPU
# manager and the Static memory manager, so nothing is free by default): the CPU manager
# checkpoint knows CPUs only; without PodResources or the checkpoint nothing is known.
SEES = {
    "unknown": set(),
    "checkpoint": {"cpu"},
    "checkpoints": {"cpu", "devices"},  # the CPU manager's and the device manager's checkpoints
    "idle": {"cpu", "devices", "memory"},
    "podresources": {"cpu", "devices", "memory"},
    "everything-held": {"cpu", "devices", "memory"},
}
GPU = "nvidia.com/gpu"

gen_sysfs = load_hack_module("gen_sysfs")
# tests/crd_schema.py sits beside the tests, outside the package mypy resolves (as conftest does).
_model: Any = importlib.import_module("crd_schema")
MODELLED_KEYWORDS, admit, crd_features_used = _model.MODELLED_KEYWORDS, _model.admit, _model.crd_features_used
crd_schema, prune, validate = _model.crd_schema, _model.prune, _model.validate
# Generated protobuf code has no type stubs.
api_pb2: Any = importlib.import_module("numasched.exporter.podresources.v1.api_pb2")


def load_crd(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(path.read_text())
    return document


VOLCANO_CRD = load_crd(UPSTREAM / "volcano-numatopologies-crd.yaml")
NRT_CRD = load_crd(UPSTREAM / "noderesourcetopology-crd.yaml")


# --- oracles, independent of numasched's id sets and readers ---------------------------------------


def parse_cpuset(text: str) -> set[int]:
    """k8s.io/utils/cpuset.Parse, as Volcano's scheduler applies it to numares.<r>.allocatable."""
    result: set[int] = set()
    for part in text.split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        result.update(range(int(first), int(last or first) + 1))
    return result


def machine_cpus(machine: dict[str, Any]) -> dict[int, dict[str, int]]:
    return {cpu: core for core in machine["cores"] for cpu in parse_cpuset(core["cpus"])}


# --- the objects under test --------------------------------------------------------------------------


def pod_resources_listing(report: NodeReport) -> Any:
    """A kubelet List response holding some of every kind of resource the node has."""
    topology = report.topology
    allocatable = sorted(topology.allocatable_cpus)
    first_numa = topology.numa_ids[0]
    numa0_cpus = [cpu for cpu in allocatable if topology.cpu_info[cpu].numa == first_numa]
    last_cpus = [cpu for cpu in allocatable if topology.cpu_info[cpu].numa == topology.numa_ids[-1]]
    devices = []
    for resource, group in sorted(topology.devices.items()):
        held = [device.id for device in group.devices if device.healthy][:2]
        if held:
            devices.append(api_pb2.ContainerDevices(resource_name=resource, device_ids=held))
    numa0 = api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=first_numa)])
    return api_pb2.ListPodResourcesResponse(
        pod_resources=[
            api_pb2.PodResources(
                name="trainer-0",
                namespace="ml",
                containers=[
                    api_pb2.ContainerResources(
                        name="main",
                        cpu_ids=numa0_cpus[:4],
                        devices=devices,
                        memory=[
                            api_pb2.ContainerMemory(memory_type="memory", size=8 << 30, topology=numa0),
                            api_pb2.ContainerMemory(memory_type="hugepages-1Gi", size=2 << 30, topology=numa0),
                        ],
                    ),
                    api_pb2.ContainerResources(name="sidecar", cpu_ids=numa0_cpus[4:6]),
                    api_pb2.ContainerResources(name="logger"),
                ],
            ),
            api_pb2.PodResources(
                name="db-0",
                namespace="prod",
                containers=[api_pb2.ContainerResources(name="db", cpu_ids=last_cpus[-2:])],
            ),
            api_pb2.PodResources(name="web", namespace="default", containers=[api_pb2.ContainerResources(name="c")]),
        ]
    )


def everything_held_listing(report: NodeReport) -> Any:
    """Every allocatable CPU and every healthy device held: nothing is free."""
    topology = report.topology
    devices = [
        api_pb2.ContainerDevices(resource_name=resource, device_ids=[d.id for d in group.devices if d.healthy])
        for resource, group in sorted(topology.devices.items())
    ]
    return api_pb2.ListPodResourcesResponse(
        pod_resources=[
            api_pb2.PodResources(
                name="hog",
                namespace="batch",
                containers=[
                    api_pb2.ContainerResources(name="main", cpu_ids=sorted(topology.allocatable_cpus), devices=devices)
                ],
            )
        ]
    )


def usage_for(kind: str, report: NodeReport) -> NodeUsage:
    if kind == "unknown":
        return report.usage  # neither the PodResources socket nor the checkpoint could be read
    if kind == "idle":
        return usage_from_responses(api_pb2.ListPodResourcesResponse(), None)
    if kind in ("checkpoint", "checkpoints"):
        cpus = sorted(report.topology.allocatable_cpus)
        document = {
            "policyName": "static",
            "defaultCpuSet": "",
            "entries": {"uid-b": {"app": f"{cpus[0]}-{cpus[1]}"}, "uid-a": {"app": str(cpus[-1]), "init": ""}},
        }
        usage = parse_cpu_manager_state(document)
        if kind == "checkpoints":
            entries = [
                {"PodUID": uid, "ContainerName": "app", "ResourceName": resource, "DeviceIDs": {"0": [device.id]}}
                for resource, group in sorted(report.topology.devices.items())
                for uid, device in zip(("uid-a", "uid-c"), [d for d in group.devices if d.healthy], strict=False)
            ]
            usage = with_device_holdings(usage, parse_device_checkpoint({"Data": {"PodDeviceEntries": entries}}))
        return with_pod_names(usage, {"uid-a": ("team", "api-0")})
    listing = pod_resources_listing(report) if kind == "podresources" else everything_held_listing(report)
    usage = usage_from_responses(listing, None)
    # The exporter learns uids from the API server's pods on the node; "db-0" stays unmatched.
    return with_pod_names(usage, {"uid-trainer": ("ml", "trainer-0"), "uid-hog": ("batch", "hog")})


def exporter_report(machine_name: str, usage_kind: str, tmp_path: Path) -> tuple[dict[str, Any], NodeReport]:
    """The machine fixture and the exporter's report for it under the given use."""
    machine = gen_sysfs.load_machine(machine_name)
    root = gen_sysfs.generate_sysfs(machine, tmp_path / "sys")
    kubelet_config = tmp_path / "kubelet.yaml"
    kubelet_config.write_text(gen_sysfs.GOLDEN_KUBELET_CONFIG)
    args = build_parser().parse_args(
        [
            "--node-name",
            machine_name,
            "--sysfs",
            str(root),
            "--kubelet-config",
            str(kubelet_config),
            "--pod-resources-socket",
            str(tmp_path / "absent.sock"),
            "--cpu-manager-state",
            str(tmp_path / "absent-state"),
            "--device-id-format",
            f"{GPU}=index",
        ]
    )
    discovery = asyncio.run(discover(args, gen_sysfs.FakeNvml(machine), GpuCache()))
    formats = parse_device_id_formats(args.device_id_format)
    idle = build_report(machine_name, discovery, formats)
    usage = usage_for(usage_kind, idle)
    return machine, build_report(machine_name, attrs.evolve(discovery, usage=usage), formats)


@attrs.frozen
class Published:
    machine: dict[str, Any]
    report: NodeReport
    sees: set[str]


@pytest.fixture(params=[(machine, usage) for machine in MACHINES for usage in USAGES], ids=lambda p: "-".join(p))
def published(request: pytest.FixtureRequest, tmp_path: Path) -> Published:
    machine_name, usage_kind = request.param
    machine, report = exporter_report(machine_name, usage_kind, tmp_path)
    return Published(machine, report, SEES[usage_kind])


# --- the shipped CRD -----------------------------------------------------------------------------------


def test_shipped_crd_is_volcanos() -> None:
    shipped = load_crd(REPO / "deploy/scheduler/numatopology-crd.yaml")
    assert crd_schema(shipped, "v1alpha1") == crd_schema(VOLCANO_CRD, "v1alpha1")
    assert shipped["metadata"]["name"] == VOLCANO_CRD["metadata"]["name"]
    for field in ("group", "names", "scope"):
        assert shipped["spec"][field] == VOLCANO_CRD["spec"][field]
    assert [(v["name"], v["served"], v["storage"]) for v in shipped["spec"]["versions"]] == [
        (v["name"], v["served"], v["storage"]) for v in VOLCANO_CRD["spec"]["versions"]
    ]


def test_the_model_knows_every_keyword_the_schemas_use() -> None:
    for crd in (VOLCANO_CRD, NRT_CRD):
        for version in crd["spec"]["versions"]:
            assert crd_features_used(crd_schema(crd, version["name"])) <= MODELLED_KEYWORDS


# --- the model itself, on hand-worked cases --------------------------------------------------------------


def test_model_prunes_what_volcanos_schema_does_not_declare() -> None:
    # Our exporter's old object: fields Volcano never declared and a map where Volcano has a list.
    old = {
        "apiVersion": "nodeinfo.volcano.sh/v1alpha1",
        "kind": "Numatopology",
        "metadata": {"name": "n1", "annotations": {"a": "b"}},
        "spec": {
            "cpuDetail": {"0": {"numa": 1, "l3": 3}},
            "gpuDetail": {"0": {"numa": 0}},
            "numaDistances": {"0": {"0": 10}},
            "MemoryDetail": {"0": {}},
            "numares": {"cpu": {"allocatable": "0", "capacity": 1}},
            "podAllocations": {"ns/p": {"uid": "u"}},
        },
    }
    result = admit(VOLCANO_CRD, old)
    assert sorted(result.dropped) == [
        "spec.MemoryDetail",
        "spec.cpuDetail.0.l3",
        "spec.gpuDetail",
        "spec.numaDistances",
        # A map where the schema has an array: its keys are pruned too, then the type is refused.
        "spec.podAllocations.ns/p",
    ]
    assert result.errors == ("spec.podAllocations: expected array, got dict",)
    assert result.stored["spec"]["cpuDetail"] == {"0": {"numa": 1}}
    assert result.stored["metadata"] == {"name": "n1", "annotations": {"a": "b"}}


def test_model_admits_volcanos_own_shape_unchanged() -> None:
    # As volcano-sh/resource-exporter writes it (pkg/numatopo/update.go, cpunumainfo.go).
    volcano = {
        "apiVersion": "nodeinfo.volcano.sh/v1alpha1",
        "kind": "Numatopology",
        "metadata": {"name": "n1", "annotations": {"timestamp": "1700000000"}},
        "spec": {
            "policies": {"CPUManagerPolicy": "static", "TopologyManagerPolicy": "single-numa-node"},
            "resReserved": {"cpu": "2"},
            "numares": {"cpu": {"allocatable": "0-2,7", "capacity": 8}},
            "cpuDetail": {"0": {}, "4": {"numa": 1, "socket": 1, "core": 4}},
            "podAllocations": [
                {"uid": "u1", "containerAllocations": [{"name": "c", "allocations": {"cpu": "3-6"}}]},
                {"name": "p", "namespace": "ns", "containerAllocations": [{"name": "c", "allocations": {"cpu": "1"}}]},
            ],
        },
    }
    result = admit(VOLCANO_CRD, volcano)
    assert (result.dropped, result.errors) == ((), ())
    assert result.stored == volcano


def test_model_validation_errors() -> None:
    spec_schema = crd_schema(VOLCANO_CRD, "v1alpha1")["properties"]["spec"]
    assert validate(spec_schema, {"cpuDetail": {"0": {"numa": -1}}}, "spec") == [
        "spec.cpuDetail.0.numa: -1 must be greater than or equal to 0"
    ]
    assert validate(spec_schema, {"numares": {"cpu": {"capacity": "8"}}}, "spec") == [
        "spec.numares.cpu.capacity: expected integer, got str"
    ]
    assert validate(spec_schema, {"numares": {"cpu": {"capacity": True}}}, "spec") == [
        "spec.numares.cpu.capacity: expected integer, got bool"
    ]
    assert validate(spec_schema, {"policies": {"CPUManagerPolicy": None}}, "spec") == [
        "spec.policies.CPUManagerPolicy: must not be null"
    ]
    nrt = {"apiVersion": "topology.node.k8s.io/v1alpha2", "kind": "NodeResourceTopology", "metadata": {"name": "n"}}
    assert admit(NRT_CRD, nrt).errors == ("zones: required",)
    zone = {"name": "node-0", "type": "Node", "resources": [{"name": "cpu", "capacity": "x", "allocatable": 4}]}
    errors = admit(NRT_CRD, {**nrt, "zones": [zone]}).errors
    # capacity is int-or-string (anyOf integer, string) and a string must be a quantity.
    assert errors[0] == "zones[0].resources[0].available: required"
    assert errors[1].startswith("zones[0].resources[0].capacity: 'x' does not match")
    assert len(errors) == 2
    assert admit(NRT_CRD, {**nrt, "zones": [{**zone, "resources": [{"name": "cpu", "capacity": 1.5}]}]}).errors[1:] == (
        "zones[0].resources[0].available: required",
        "zones[0].resources[0].capacity: matches none of anyOf",
        "zones[0].resources[0].capacity: expected an integer or a string, got float",
    )
    assert prune({"type": "object", "x-kubernetes-preserve-unknown-fields": True}, {"a": {"b": 1}}) == {"a": {"b": 1}}
    dropped: list[str] = []
    assert prune({"type": "object"}, {"a": 1}, "x", dropped) == {} and dropped == ["x.a"]


# --- our exporter's objects ----------------------------------------------------------------------------------


def test_numatopology_survives_volcanos_crd(published: Published) -> None:
    report = published.report
    obj = numatopology_object(report)
    result = admit(VOLCANO_CRD, obj)
    assert result.dropped == ()
    assert result.errors == ()
    assert result.stored == obj
    # What the scheduler reads back from the stored object equals what it reads from ours.
    assert numatopology_to_topology(result.stored) == numatopology_to_topology(obj)
    assert scheduler_pod_allocations(result.stored) == scheduler_pod_allocations(obj)


def test_numatopology_reads_as_volcano_reads_it(published: Published) -> None:
    machine, report = published.machine, published.report
    spec = admit(VOLCANO_CRD, numatopology_object(report)).stored["spec"]
    cpus = machine_cpus(machine)
    # cpuDetail: numa / socket / core of every CPU, zeros omitted (Go's omitempty).
    assert {int(cpu): entry for cpu, entry in spec["cpuDetail"].items()} == {
        cpu: {key: core[key] for key in ("numa", "socket", "core") if core[key]} for cpu, core in cpus.items()
    }
    # numares.cpu: the FREE CPUs (neither reserved nor held exclusively), capacity all CPUs.
    held_cpus = {cpu for pod in report.usage.pods for c in pod.containers for cpu in c.cpuset}
    reserved = set(report.topology.reserved_cpus)
    assert reserved and len(reserved) == 2  # kubeReserved 1 + systemReserved 1 CPU
    # The exact reserved set survives pruning (inside Volcano's policies string map) and reads back.
    assert parse_cpuset(spec["policies"]["ReservedSystemCPUs"]) == reserved
    assert (
        set(numatopology_to_topology(admit(VOLCANO_CRD, numatopology_object(report)).stored).reserved_cpus) == reserved
    )
    if "cpu" not in published.sees:
        # Not knowing what is held, the exporter says nothing rather than call it free.
        assert "cpu" not in spec.get("numares", {})
    else:
        assert spec["numares"]["cpu"]["capacity"] == len(cpus)
        assert parse_cpuset(spec["numares"]["cpu"]["allocatable"]) == set(cpus) - reserved - held_cpus
    # numares.<device>: healthy ids not held, capacity all devices.
    for resource, group in report.topology.devices.items():
        if "devices" not in published.sees:
            assert resource not in spec.get("numares", {})
            continue
        held = {d for pod in report.usage.pods for c in pod.containers for d in c.devices.get(resource, ())}
        entry = spec["numares"][resource]
        assert entry["capacity"] == len(group.devices)
        free = [device_id for device_id in entry["allocatable"].split(",") if device_id]
        assert set(free) == {d.id for d in group.devices if d.healthy} - held
        if resource == GPU:
            assert parse_cpuset(entry["allocatable"]) == {int(i) for i in free}  # Volcano can parse it
    # podAllocations: every pod holding something, found as Volcano's CheckNumaPodAssigned finds it.
    listed = spec.get("podAllocations", [])
    for pod in report.usage.pods:
        matches = [
            entry
            for entry in listed
            if (pod.uid and entry.get("uid") == pod.uid)
            or (pod.name and (entry.get("namespace"), entry.get("name")) == (pod.namespace, pod.name))
        ]
        assert len(matches) == 1, pod
        by_name = {c["name"]: c["allocations"] for c in matches[0]["containerAllocations"]}
        for container in pod.containers:
            expected: dict[str, str] = {}
            if container.cpuset:
                expected["cpu"] = container.cpuset.format()
            expected |= {resource: str(len(ids)) for resource, ids in container.devices.items()}
            expected |= {resource: str(sum(per.values())) for resource, per in container.memory.items()}
            assert by_name.get(container.name, {}) == expected
            if "cpu" in expected:
                assert parse_cpuset(expected["cpu"]) == set(container.cpuset)
    assert len(listed) == len(report.usage.pods)


def test_everything_held_says_nothing_is_free(tmp_path: Path) -> None:
    _, report = exporter_report("hgx-h100", "everything-held", tmp_path)
    numares = numatopology_object(report)["spec"]["numares"]
    assert numares["cpu"]["allocatable"] == ""  # written, not omitted: an absent field would say nothing
    assert {resource: entry["allocatable"] for resource, entry in numares.items() if resource != "cpu"} == {
        resource: "" for resource in report.topology.devices
    }


def test_annotations_carry_what_volcanos_schema_cannot(published: Published) -> None:
    machine, report = published.machine, published.report
    stored = admit(VOLCANO_CRD, numatopology_object(report)).stored
    annotations = stored["metadata"]["annotations"]
    # Per-pod ids, in the container form of numasched.io/allocation, keyed by namespace/name or uid.
    pod_ids = json.loads(annotations[POD_ALLOCATIONS_ANNOTATION])
    assert set(pod_ids) == {pod.key for pod in report.usage.pods}
    for pod in report.usage.pods:
        entry = pod_ids[pod.key]
        assert entry.get("uid", "") == pod.uid
        decoded = allocation_from_mapping(entry)
        assert {c.name: (set(c.cpuset), c.devices, c.memory) for c in decoded.containers} == {
            c.name: (set(c.cpuset), c.devices, c.memory) for c in pod.containers
        }
    # Distances, memory per NUMA node, L3 groups: read back into the topology, equal to the machine.
    topology = apply_numa_detail(
        numatopology_to_topology(stored), parse_numa_detail(annotations[NUMA_DETAIL_ANNOTATION])
    )
    ids = [node["id"] for node in machine["numa_nodes"]]
    assert [[topology.distance(a, b) for b in ids] for a in ids] == machine["numa_distances"]
    assert {cpu: info.l3 for cpu, info in topology.cpu_info.items()} == {
        cpu: core["l3"] for cpu, core in machine_cpus(machine).items()
    }
    detail = parse_numa_detail(annotations[NUMA_DETAIL_ANNOTATION])
    assert detail.memory_total == {
        "memory": {node["id"]: gen_sysfs.quantity_bytes(node["memory"]) for node in machine["numa_nodes"]}
    }
    # reservedMemory: 2Gi on NUMA node 0 (the golden kubelet configuration).
    assert detail.memory_allocatable["memory"][0] == detail.memory_total["memory"][0] - (2 << 30)


def test_node_resource_topology_survives_its_crd(published: Published) -> None:
    machine, report = published.machine, published.report
    obj = node_resource_topology_object(report)
    result = admit(NRT_CRD, obj)
    assert (result.dropped, result.errors) == ((), ())
    assert result.stored == obj
    # The deprecated v1alpha1 field, for older consumers: single-numa-node at pod scope.
    assert obj["topologyPolicies"] == ["SingleNUMANodePodLevel"]
    attributes = {a["name"]: a["value"] for a in obj["attributes"]}
    fingerprint = {}
    if report.usage.source == "podresources":
        # Every holder named by PodResources: the published amounts reflect exactly these pods.
        held_by = [(pod.namespace, pod.name) for pod in report.usage.pods]
        fingerprint = {
            "nodeTopologyPodsFingerprint": pods_fingerprint(held_by),
            "nodeTopologyPodsFingerprintMethod": "with-exclusive-resources",
        }
    assert attributes == {
        "topologyManagerPolicy": "single-numa-node",
        "topologyManagerScope": "pod",
        "topologyManagerPolicyOptions": "prefer-closest-numa-nodes=true",
        **fingerprint,
    }
    # numasched's own NRT reader takes the policy, scope, options and fingerprint back.
    read = nrt_to_topology(obj)
    assert (read.policies.topology_manager_policy, read.policies.topology_manager_scope) == (
        TopologyPolicy.SINGLE_NUMA_NODE,
        TopologyScope.POD,
    )
    assert read.policies.topology_manager_options.get("prefer-closest-numa-nodes") in ("true", True)
    assert read.pods_fingerprint == fingerprint.get("nodeTopologyPodsFingerprint")
    cpus = machine_cpus(machine)
    held = {cpu for pod in report.usage.pods for c in pod.containers for cpu in c.cpuset}
    reserved = set(report.topology.reserved_cpus)
    for zone, node in zip(obj["zones"], machine["numa_nodes"], strict=True):
        numa = node["id"]
        assert zone["name"] == f"node-{numa}"
        mine = {cpu for cpu, core in cpus.items() if core["numa"] == numa}
        resources = {r["name"]: r for r in zone["resources"]}
        assert resources["cpu"]["capacity"] == str(len(mine))
        assert resources["cpu"]["allocatable"] == str(len(mine - reserved))
        # What the exporter cannot see held is published as not available (0), never as free.
        free = len(mine - reserved - held) if "cpu" in published.sees else 0
        assert resources["cpu"]["available"] == str(free)
        memory = resources["memory"]
        pinned = sum(c.memory.get("memory", {}).get(numa, 0) for pod in report.usage.pods for c in pod.containers)
        free_memory = int(memory["allocatable"]) - pinned if "memory" in published.sees else 0
        assert memory["available"] == str(free_memory)
        for resource, group in report.topology.devices.items():
            here = {d.id for d in group.devices if d.numa == numa}
            if not here:
                continue
            held_here = {d for pod in report.usage.pods for c in pod.containers for d in c.devices.get(resource, ())}
            healthy = {d.id for d in group.devices if d.healthy} & here
            entry = resources[resource]
            assert (entry["capacity"], entry["allocatable"]) == (str(len(here)), str(len(healthy)))
            assert entry["available"] == str(len(healthy - held_here) if "devices" in published.sees else 0)
        assert [cost["value"] for cost in zone["costs"]] == machine["numa_distances"][ids_index(machine, numa)]


def ids_index(machine: dict[str, Any], numa: int) -> int:
    return [node["id"] for node in machine["numa_nodes"]].index(numa)


def scheduler_pod_allocations(obj: dict[str, Any]) -> Any:
    """What the scheduler's cache takes from a Numatopology about its pods."""
    return pod_allocation_report(obj, numatopology_to_topology(obj))


def test_scheduler_reads_every_pods_holdings(published: Published) -> None:
    report = published.report
    stored = admit(VOLCANO_CRD, numatopology_object(report)).stored
    reported = scheduler_pod_allocations(stored)
    for pod in report.usage.pods:
        assert reported.accounts_for(pod.uid, pod.key)
        allocation = reported.for_pod(pod.uid, pod.key)
        assert allocation is not None
        assert set(allocation.cpus()) == {cpu for c in pod.containers for cpu in c.cpuset}
        for resource in {name for c in pod.containers for name in c.devices}:
            assert allocation.devices(resource) == {d for c in pod.containers for d in c.devices.get(resource, ())}


def test_docs_podresources_example(tmp_path: Path) -> None:
    text = (REPO / "docs/exporter.md").read_text()
    block = text.split("<!-- example: dgx1-v100 podresources -->", 1)[1].split("```yaml", 1)[1].split("```", 1)[0]
    _, report = exporter_report("dgx1-v100", "podresources", tmp_path)
    obj = numatopology_object(report)
    assert yaml.safe_load(block) == {key: obj["spec"][key] for key in ("numares", "podAllocations")}
    annotation = text.split("and its `numasched.io/pod-allocations` annotation:\n", 1)[1].split("`.\n", 1)[0]
    assert json.loads(annotation.strip("`").replace("\n", "")) == json.loads(
        obj["metadata"]["annotations"][POD_ALLOCATIONS_ANNOTATION]
    )
