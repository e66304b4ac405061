"""A node the cache rebuilds into the very state a session left it in keeps that state's generation
(Cache.offer_session_nodes, NodeInfo.same_state), so what the session derived from it holds in the
next session; a node found in any other state gets a new one."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from numasched.api.allocation import ALLOCATION_ANNOTATION
from numasched.api.idset import IdSet
from numasched.api.node import NodeInfo, NumaUsage, Taint, UnknownHolder
from numasched.api.resource import Resource
from numasched.api.task import TaskInfo, TaskStatus
from numasched.api.topology import NumaTopology
from numasched.cache.cache import Cache
from numasched.cache.simcluster import SimCluster
from numasched.conf.loader import load_config_text
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.loop import schedule_cycle

CONFIG = """\
actions: "allocate"
tiers:
- plugins:
  - name: predicates
  - name: nodeorder
  - name: numa-aware
"""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def task(uid: str, status: TaskStatus = TaskStatus.RUNNING, **changes: Any) -> TaskInfo:
    request = Resource(milli_cpu=1000, memory=1e9)
    made = TaskInfo(
        uid=uid, namespace="ns", name=uid, job_id=uid, resreq=request, init_resreq=request.clone(), status=status
    )
    return attrs.evolve(made, **changes)


def node_with(*tasks: TaskInfo) -> NodeInfo:
    node = NodeInfo.create("n0", Resource(milli_cpu=8000, memory=1e10))
    for placed in tasks:
        node.add_task(placed)
    return node


def test_nodes_holding_the_same_tasks_are_in_one_state_whichever_step_of_binding_a_task_is_at() -> None:
    assert node_with(task("a", TaskStatus.ALLOCATED)).same_state(node_with(task("a", TaskStatus.RUNNING)))
    assert node_with(task("a", TaskStatus.BINDING)).same_state(node_with(task("a", TaskStatus.BOUND)))


@pytest.mark.parametrize(
    ("first", "second"),
    [
        # Releasing resources are accounted apart from held ones.
        (task("a", TaskStatus.RELEASING), task("a", TaskStatus.RUNNING)),
        (task("a", TaskStatus.PIPELINED), task("a", TaskStatus.ALLOCATED)),
        # Anything else a plugin may read of a task on the node.
        (task("a", annotations={"x": "1"}), task("a")),
        (task("a", labels={"app": "web"}), task("a")),
        (task("a"), task("b")),
    ],
)
def test_nodes_whose_tasks_differ_otherwise_are_not(first: TaskInfo, second: TaskInfo) -> None:
    assert not node_with(first).same_state(node_with(second))


def test_every_other_node_field_tells_states_apart() -> None:
    base = node_with(task("a"))
    assert base.same_state(node_with(task("a")))
    topology = NumaTopology(node_name="n0", numa_ids=(0,))
    # One change per field of NodeInfo that is part of its state; a field added to NodeInfo fails
    # here until it is given one (or named as not part of the state).
    changes: dict[str, Any] = {
        "name": "n1",
        "allocatable": Resource(milli_cpu=1),
        "capacity": Resource(milli_cpu=1),
        "idle": Resource(milli_cpu=1),
        "used": Resource(milli_cpu=1),
        "releasing": Resource(milli_cpu=1),
        "pipelined": Resource(milli_cpu=1),
        "max_pods": 10,
        "labels": {"zone": "b"},
        "taints": (Taint("k", "v", "NoSchedule"),),
        "unschedulable": True,
        "ready": False,
        "tasks": {},
        "topology": topology,
        "topology_error": "x",
        "numa_usage": NumaUsage(cpus=IdSet([3])),
        "unknown_holders": {"a": UnknownHolder("ns/a", {"cpu": 1})},
        "dra": object(),
    }
    numbering = {"generation", "numa_generation", "touch_log", "numa_step"}
    assert set(changes) | numbering == {field.name for field in attrs.fields(NodeInfo)}
    for field, value in changes.items():
        other = node_with(task("a"))
        setattr(other, field, value)
        assert not base.same_state(other), field
    # The numbering fields do not tell states apart.
    other = node_with(task("a"))
    other.touch()
    other.numa_step = None
    assert base.same_state(other)
    # The topology is compared as the same object, not as equal content.
    first, second = node_with(task("a")), node_with(task("a"))
    first.topology, second.topology = topology, attrs.evolve(topology)
    assert not first.same_state(second)


def node_object(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {
            "capacity": {"cpu": "16", "memory": "64Gi", "pods": "110"},
            "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def numatopology_object(name: str) -> dict[str, Any]:
    """16 CPUs, 0-7 on NUMA 0 and 8-15 on NUMA 1, the static CPU manager, single-numa-node."""
    return {
        "apiVersion": "nodeinfo.volcano.sh/v1alpha1",
        "kind": "Numatopology",
        "metadata": {"name": name},
        "spec": {
            "policies": {"CPUManagerPolicy": "static", "TopologyManagerPolicy": "single-numa-node"},
            "cpuDetail": {str(cpu): {"numa": cpu // 8, "socket": 0, "core": cpu} for cpu in range(16)},
            "numares": {"cpu": {"allocatable": "0-15", "capacity": 16}},
        },
    }


def pod_object(name: str, node: str = "", scheduler: str = "numasched") -> dict[str, Any]:
    # Guaranteed: the decision (pinned CPUs) goes on the pod with the binding.
    resources = {"cpu": "2", "memory": "1Gi"}
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [{"name": "main", "resources": {"requests": resources, "limits": resources}}],
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


class RecordingCache(Cache):
    """The cache, noting the generations of the nodes each session left."""

    def __init__(self) -> None:
        super().__init__(("numasched",))
        self.left: dict[str, int] = {}

    def offer_session_nodes(self, nodes: Any) -> None:
        self.left = {name: node.generation for name, node in nodes.items()}
        super().offer_session_nodes(nodes)


@pytest.mark.anyio
async def test_a_node_the_session_placed_on_keeps_the_sessions_generation_once_the_pod_is_bound() -> None:
    registry = default_registry()
    config = load_config_text(CONFIG, "test", registry.known_plugin_names(), registry.known_action_names())
    cache = RecordingCache()
    cluster = SimCluster(cache)
    for name in ("n0", "n1"):
        cluster.add(node_object(name))
        cluster.add(numatopology_object(name))
    before = cache.snapshot()
    cluster.add(pod_object("web"))
    await schedule_cycle(cache, config, registry, cluster, cluster)
    assert len(cluster.bind_count) == 1
    placed = next(name for name in ("n0", "n1") if cache.left[name] != before.nodes[name].generation)
    after = cache.snapshot()
    # The pod is bound (Running, with the decision annotations): the node is as the session left it.
    assert ALLOCATION_ANNOTATION in cache.snapshot().nodes[placed].tasks["uid-web"].annotations
    assert after.nodes[placed].generation == cache.left[placed]
    other = "n1" if placed == "n0" else "n0"
    assert after.nodes[other].generation == before.nodes[other].generation

    # The same again, but a pod of another scheduler lands there before the next snapshot.
    cluster.add(pod_object("api"))
    await schedule_cycle(cache, config, registry, cluster, cluster)
    changed = [name for name in ("n0", "n1") if cache.left[name] != after.nodes[name].generation]
    assert len(changed) == 1
    cluster.add(pod_object("intruder", node=changed[0], scheduler="default-scheduler"))
    again = cache.snapshot()
    assert again.nodes[changed[0]].generation != cache.left[changed[0]]


def test_a_task_holding_no_ids_changes_the_generation_but_not_the_numa_generation() -> None:
    from numasched.api.allocation import ContainerAllocation, PodAllocation
    from numasched.api.node import UnknownHolder

    node = node_with()
    generation, numa_generation = node.generation, node.numa_generation
    plain = task("plain")
    node.add_task(plain)
    assert node.generation != generation and node.numa_generation == numa_generation
    node.remove_task(plain)
    assert node.numa_generation == numa_generation
    pinned = task("pinned", allocation=PodAllocation((ContainerAllocation("main", IdSet([1])),)))
    node.add_task(pinned)
    assert node.numa_generation != numa_generation
    numa_generation = node.numa_generation
    # A task that is an unknown holder changes what is free when it comes or goes.
    node.set_unknown_holder("holder", UnknownHolder("ns/holder", {"cpu": 2}))
    assert node.numa_generation != numa_generation
    numa_generation = node.numa_generation
    node.add_task(task("holder"))
    assert node.numa_generation != numa_generation
    assert node.clone().numa_generation == node.numa_generation
