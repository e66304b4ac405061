"""The availability rule on a node, topologies the cache must reject or read with a warning, the
NodeResourceTopology pods fingerprint, and numa-aware arguments that are configuration errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest
import yaml
from test_avail_e2e import holder_yaml, node_yaml, numatopology_yaml

from numasched.api.allocation import ContainerAllocation, PodAllocation
from numasched.api.idset import IdSet
from numasched.api.node import NodeInfo
from numasched.api.numamask import NumaMask
from numasched.api.pod_fingerprint import pods_fingerprint, xxh64
from numasched.api.resource import Resource
from numasched.api.task import ContainerInfo, QosClass, TaskInfo, TaskStatus
from numasched.api.topology import (
    CpuInfo,
    CpuManagerPolicy,
    DeviceGroup,
    DeviceInfo,
    KubeletPolicies,
    NumaTopology,
)
from numasched.cache.cache import Cache
from numasched.cache.events import EventType, ObjectEvent
from numasched.conf.loader import ConfigError, load_config_text
from numasched.plugins.numaaware.providers.cpu import cpu_hint_table
from numasched.scheduler.builtin import default_registry

GPU = "nvidia.com/gpu"
FIXTURES = Path(__file__).parent / "fixtures"


def load(text: str) -> dict[str, Any]:
    document = yaml.safe_load(text)
    assert isinstance(document, dict)
    return document


def apply(cache: Cache, *texts: str) -> None:
    for text in texts:
        obj = load(text)
        cache.apply(ObjectEvent(str(obj["kind"]), EventType.ADDED, obj))


# -- the reading rule ------------------------------------------------------------------------------------


def small_topology(**changes: Any) -> NumaTopology:
    """8 CPUs (0-3 NUMA 0, 4-7 NUMA 1), CPU 0 reserved; GPUs a, b on NUMA 0 and c, d on NUMA 1."""
    gpus = (
        DeviceInfo("a", 0),
        DeviceInfo("b", 0, healthy=False),
        DeviceInfo("c", 1),
        DeviceInfo("d", 1),
    )
    base = NumaTopology(
        node_name="n1",
        numa_ids=(0, 1),
        cpus=tuple(CpuInfo(cpu, cpu, 0, cpu // 4, cpu // 4) for cpu in range(8)),
        devices={GPU: DeviceGroup(GPU, gpus)},
        reserved_cpus=IdSet([0]),
        policies=KubeletPolicies(cpu_manager_policy=CpuManagerPolicy.STATIC),
    )
    return attrs.evolve(base, **changes)


def node_with(topology: NumaTopology, held_cpus: str = "", held_gpus: tuple[str, ...] = ()) -> NodeInfo:
    node = NodeInfo.create("n1", Resource(8000, 1 << 36, {GPU: 4000}))
    node.topology = topology
    if held_cpus or held_gpus:
        requests = Resource(1000 * len(IdSet.parse(held_cpus)), 1 << 30, {GPU: 1000 * len(held_gpus)})
        task = TaskInfo(
            uid="held",
            namespace="default",
            name="held",
            job_id="held",
            resreq=requests,
            init_resreq=requests.clone(),
            containers=(ContainerInfo("main", requests, requests),),
            qos=QosClass.GUARANTEED,
            node_name="n1",
            status=TaskStatus.RUNNING,
            allocation=PodAllocation(
                (ContainerAllocation("main", IdSet.parse(held_cpus), devices={GPU: held_gpus} if held_gpus else {}),)
            ),
        )
        node.add_task(task)
    return node


def test_an_id_is_free_only_when_every_source_agrees() -> None:
    # No statement from the source: all but reserved, unhealthy and held.
    node = node_with(small_topology(), held_cpus="5", held_gpus=("c",))
    assert node.free_cpus() == IdSet.parse("1-4,6-7")
    assert node.free_devices(GPU) == ("a", "d")
    # The source states what is free (Volcano's numares allocatable): intersected, never widened.
    stated = small_topology(available_cpus=IdSet.parse("0-3,5"), available_devices={GPU: frozenset({"b", "c", "d"})})
    node = node_with(stated, held_cpus="5", held_gpus=("c",))
    assert node.free_cpus() == IdSet.parse("1-3")
    assert node.free_devices(GPU) == ("d",)
    # A stated empty set means nothing is free; a resource absent from the dict is no statement.
    empty = small_topology(available_cpus=IdSet(), available_devices={GPU: frozenset()})
    assert node_with(empty).free_cpus() == IdSet() and node_with(empty).free_devices(GPU) == ()


def test_preferred_cpu_hints_follow_the_node_not_what_is_free() -> None:
    # 2 CPUs of NUMA 0 and 3 of NUMA 1 are free; 4 CPUs fit only on both NUMA nodes, and that hint
    # is not preferred: one NUMA node of the machine has 4 CPUs (the kubelet counts every CPU of a
    # mask), even though no single NUMA node has 4 free now.
    topology = small_topology(reserved_cpus=IdSet(), available_cpus=IdSet.parse("0-1,4-6"))
    hints = cpu_hint_table(topology, node_with(topology).free_cpus(), 4)
    assert [(hint.affinity, hint.preferred) for hint in hints] == [(NumaMask.from_ids([0, 1]), False)]


# -- rejected and warned topologies --------------------------------------------------------------------


def test_a_topology_with_more_cpus_than_the_node_is_rejected_until_it_agrees() -> None:
    cache = Cache()
    small_node = node_yaml("node-a").replace('cpu: "16"', 'cpu: "8"')
    apply(cache, small_node, numatopology_yaml("node-a", "0-7"))
    problem = cache.problems[("Numatopology", "node-a")]
    assert problem == (
        "the topology lists 16 CPUs, more than Node node-a status.capacity.cpu 8; its NUMA topology is not used"
    )
    node = cache.snapshot().nodes["node-a"]
    assert node.topology is None and node.topology_error.startswith("Numatopology node-a: the topology lists 16 CPUs")
    assert cache.nodes_without_topology() == {"node-a": f"rejected: Numatopology node-a: {problem}"}
    # The Node grows (or the object is fixed): the topology is used again and the problem is gone.
    apply(cache, node_yaml("node-a"))
    assert ("Numatopology", "node-a") not in cache.problems
    assert cache.snapshot().nodes["node-a"].topology is not None
    assert cache.nodes_without_topology() == {}


def test_a_device_count_other_than_the_node_capacity_is_rejected() -> None:
    cache = Cache()
    apply(cache, node_yaml("node-a").replace('nvidia.com/gpu: "8"', 'nvidia.com/gpu: "4"'))
    apply(cache, numatopology_yaml("node-a", "0-7"))
    assert cache.problems[("Numatopology", "node-a")] == (
        "the topology lists 8 nvidia.com/gpu devices, Node node-a status.capacity[nvidia.com/gpu] is 4; "
        "its NUMA topology is not used"
    )
    assert cache.snapshot().nodes["node-a"].topology is None
    # A Node that does not list the resource (its device plugin not registered yet) says nothing.
    apply(cache, node_yaml("node-a").replace(', nvidia.com/gpu: "8"', ""))
    assert ("Numatopology", "node-a") not in cache.problems
    assert cache.snapshot().nodes["node-a"].topology is not None


def test_a_cluster_scoped_topology_with_a_namespace_is_read_with_a_warning() -> None:
    cache = Cache()
    stray = load(numatopology_yaml("node-a", "0-7"))
    stray["metadata"]["namespace"] = "volcano-system"
    apply(cache, node_yaml("node-a"))
    cache.apply(ObjectEvent("Numatopology", EventType.ADDED, stray))
    assert cache.snapshot().nodes["node-a"].topology is not None
    assert cache.warnings == {
        ("Numatopology", "node-a"): "metadata.namespace 'volcano-system' ignored: Numatopology is cluster-scoped"
    }
    assert not cache.problems
    cache.apply(ObjectEvent("Numatopology", EventType.DELETED, stray))
    assert cache.warnings == {} and cache.snapshot().nodes["node-a"].topology is None


# -- the pods fingerprint ----------------------------------------------------------------------------------


def test_xxh64_and_the_upstream_fingerprint_vector() -> None:
    # Reference XXH64 values (xxHash's own sanity checks) and the fingerprint that
    # k8stopologyawareschedwg/podfingerprint's TestCheck expects for its testdata/pods.json
    # (copied to tests/fixtures/avail_podfingerprint_pods.json, Apache-2.0).
    assert xxh64(b"") == 0xEF46DB3751D8E999
    assert xxh64(b"a") == 0xD24EC4F1A98C6E5B
    assert xxh64(b"abc") == 0x44BC2CF5AD770999
    pods = json.loads((FIXTURES / "avail_podfingerprint_pods.json").read_text())
    pairs = [(pod["namespace"], pod["name"]) for pod in pods]
    assert pods_fingerprint(pairs) == "pfp0v001e477a4e3b2fc0ec6"
    assert pods_fingerprint(reversed(pairs)) == "pfp0v001e477a4e3b2fc0ec6"
    assert pods_fingerprint(pairs[1:]) != "pfp0v001e477a4e3b2fc0ec6"


def nrt_yaml(fingerprint: str) -> str:
    """NUMA 0: 2 of 4 GPUs available; NUMA 1: 4 of 4 (v1alpha2, as RTE publishes it)."""
    return f"""
apiVersion: topology.node.k8s.io/v1alpha2
kind: NodeResourceTopology
metadata: {{name: node-a}}
topologyPolicies: [SingleNUMANodeContainerLevel]
attributes:
- {{name: topologyManagerPolicy, value: single-numa-node}}
- {{name: topologyManagerScope, value: container}}
- {{name: nodeTopologyPodsFingerprint, value: {fingerprint}}}
zones:
- name: node-0
  type: Node
  resources:
  - {{name: cpu, capacity: "8", allocatable: "8", available: "8"}}
  - {{name: nvidia.com/gpu, capacity: "4", allocatable: "4", available: "2"}}
- name: node-1
  type: Node
  resources:
  - {{name: cpu, capacity: "8", allocatable: "8", available: "8"}}
  - {{name: nvidia.com/gpu, capacity: "4", allocatable: "4", available: "4"}}
"""


@pytest.mark.parametrize("matching", [True, False])
def test_a_matching_pods_fingerprint_accounts_for_every_pod(matching: bool) -> None:
    pods = [("default", "busy")] if matching else [("default", "busy"), ("default", "gone")]
    cache = Cache()
    apply(cache, node_yaml("node-a"), nrt_yaml(pods_fingerprint(pods)), holder_yaml("busy", "node-a", gpus=2))
    node = cache.snapshot().nodes["node-a"]
    assert node.topology is not None
    assert node.unknown_holdings() == ({} if matching else {GPU: (2, ("default/busy",))})


def test_a_report_that_lists_the_holder_accounts_for_it() -> None:
    listed = json.dumps([{"uid": "uid-busy", "name": "busy", "namespace": "default", "containerAllocations": []}])
    for pod_allocations, expected in (("[]", {GPU: (4, ("default/busy",))}), (listed, {})):
        cache = Cache()
        apply(cache, node_yaml("node-a"), numatopology_yaml("node-a", "0-3", pod_allocations))
        apply(cache, holder_yaml("busy", "node-a"))
        assert cache.snapshot().nodes["node-a"].unknown_holdings() == expected


def test_a_listed_pod_is_accounted_only_for_resources_whose_availability_the_report_states() -> None:
    # Our exporter lists a pod it saw in the CPU checkpoint but leaves nvidia.com/gpu out of numares
    # when it cannot see devices: the pod's GPUs are then still unknown holdings.
    listed = json.dumps([{"uid": "uid-busy", "name": "busy", "namespace": "default", "containerAllocations": []}])
    text = numatopology_yaml("node-a", "0-7", listed)
    document = load(text)
    del document["spec"]["numares"][GPU]
    cache = Cache()
    apply(cache, node_yaml("node-a"), holder_yaml("busy", "node-a"))
    cache.apply(ObjectEvent("Numatopology", EventType.ADDED, document))
    assert cache.snapshot().nodes["node-a"].unknown_holdings() == {GPU: (4, ("default/busy",))}


def test_a_bound_pod_whose_update_cannot_be_read_keeps_its_last_good_version() -> None:
    cache = Cache()
    apply(cache, node_yaml("node-a"), numatopology_yaml("node-a", "0-7"), holder_yaml("busy", "node-a"))
    poisoned = load(holder_yaml("busy", "node-a"))
    poisoned["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1e400"
    cache.apply(ObjectEvent("Pod", EventType.MODIFIED, poisoned))
    assert ("Pod", "default/busy") in cache.problems
    node = cache.snapshot().nodes["node-a"]
    assert "uid-busy" in node.tasks
    assert node.unknown_holdings() == {GPU: (4, ("default/busy",))}


# -- arguments -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "argument"),
    [
        ("devices: 42", "devices"),
        ("unknown-topology: sometimes", "unknown-topology"),
        ("unknown-topology: [allow]", "unknown-topology"),
        ("nic-alignment: 3", "nic-alignment"),
        ("nic-resources: {a: b}", "nic-resources"),
        ("full-pcpus-only: maybe", "full-pcpus-only"),
        ("weight: -1", "weight"),
    ],
)
def test_wrong_numa_aware_arguments_refuse_the_configuration(arguments: str, argument: str) -> None:
    config = f"""\
actions: "allocate"
tiers:
- plugins:
  - name: numa-aware
    arguments:
      {arguments}
"""
    registry = default_registry()
    with pytest.raises(ConfigError) as error:
        load_config_text(config, "test", registry.known_plugin_names(), registry.known_action_names())
    assert f"arguments.{argument}: plugin numa-aware:" in str(error.value)


class _GoodProvider:
    """A minimal provider: handles one resource and never pins anything."""

    name = "good"
    resources = frozenset({"example.com/thing"})

    def hints(self, request: object, topology: object, free: object) -> None:
        return None

    def allocate(self, request: object, hint: object, topology: object, free: object) -> dict[str, object]:
        return {}


def _failing_factory(arguments: object) -> object:
    raise ValueError("needs a 'thing-count' argument")


@pytest.mark.parametrize(
    ("providers", "expected"),
    [
        ("[nope]", "unknown hint provider 'nope' (known: broken, good, not-a-provider)"),
        ("[broken]", "hint provider 'broken' cannot be built: ValueError: needs a 'thing-count' argument"),
        ("[not-a-provider]", "hint provider 'not-a-provider' does not implement HintProvider"),
        ("[good]", ""),
    ],
)
def test_hint_providers_that_do_not_exist_or_build_refuse_the_configuration(providers: str, expected: str) -> None:
    registry = default_registry()
    registry.register_hint_provider("good", lambda arguments: _GoodProvider())
    registry.register_hint_provider("broken", _failing_factory)
    registry.register_hint_provider("not-a-provider", lambda arguments: object())
    config = f"""\
actions: "allocate"
tiers:
- plugins:
  - name: numa-aware
    arguments:
      hint-providers: {providers}
"""
    if not expected:
        load_config_text(config, "test", registry.known_plugin_names(), registry.known_action_names())
        return
    with pytest.raises(ConfigError) as error:
        load_config_text(config, "test", registry.known_plugin_names(), registry.known_action_names())
    assert "arguments.hint-providers: plugin numa-aware:" in str(error.value)
    assert expected in str(error.value)
