"""The cache's incremental snapshot against an accounting written here from scratch.

The cache keeps every node accounted and rebuilds only the nodes an event touched. After any
sequence of events (pods added, moved, finished, deleted; assumptions made and forgotten; Nodes,
Numatopologies and NodeResourceTopologies changed or broken; bad objects) its snapshot must equal
what a direct accounting of the current objects gives, node by node; a node no event touched keeps
its generation and a node whose state changed gets a new one.

The oracle reads objects with the converters (pod_to_task, node_to_node_info, the topology
readers: their semantics are tested elsewhere) and does the accounting itself: which pods sit on
which node (nodeName, else the assumption), which allocation wins (the node's report, then the
assumption, then the annotation), resources per status, the NUMA ledger, unknown holders counted
from the generated pod's own requests.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
from conftest import load_machine
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from numasched.api.allocation import ALLOCATION_ANNOTATION, ContainerAllocation, PodAllocation, allocation_to_json
from numasched.api.idset import IdSet
from numasched.api.node import NodeInfo
from numasched.api.resource import Resource
from numasched.api.snapshot import ClusterSnapshot
from numasched.api.task import TaskInfo, TaskStatus
from numasched.api.topology import CpuManagerPolicy, NumaTopology
from numasched.cache.cache import Cache, capacity_mismatch
from numasched.cache.convert_pod import ConversionError, bound_pod_allocation, node_to_node_info, pod_to_task
from numasched.cache.convert_topology import (
    nrt_pod_allocation_report,
    nrt_to_topology,
    numatopology_to_topology,
    pod_allocation_report,
)
from numasched.cache.events import EventType, ObjectEvent
from numasched.cache.machine_shapes import machine_objects

GPU = "nvidia.com/gpu"
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
NODE_NAMES = ("n0", "n1", "n2")
# n3 never gets a Node: pods bound or assumed there count on no node.
HOSTS = ("", "n0", "n1", "n2", "n3")
POD_NAMES = tuple(f"p{index}" for index in range(4))
OURS = "numasched"
FINISHED = (TaskStatus.SUCCEEDED, TaskStatus.FAILED)
_MACHINE = load_machine("dgx1-v100")


# ---- the objects ----------------------------------------------------------------------------------


def node_object(name: str, variant: int) -> dict[str, Any]:
    """0 as published; 1 with another label; 2 with fewer CPUs than its topology (rejected);
    3 unreadable (the last good version stays)."""
    node, _ = machine_objects(_MACHINE, name)
    if variant == 1:
        node["metadata"]["labels"]["zone"] = "b"
    elif variant == 2:
        node["status"]["capacity"]["cpu"] = "40"
    elif variant == 3:
        node["status"]["allocatable"]["cpu"] = "lots"
    return node


def numatopology_object(name: str, variant: int) -> dict[str, Any]:
    """0 as published; 1 with pods it reports (p0 by uid, p1 by name); 2 unreadable."""
    _, topology = machine_objects(_MACHINE, name)
    if variant == 1:
        topology["spec"]["podAllocations"] = [
            {
                "uid": "uid-p0",
                "name": "p0",
                "namespace": "default",
                "containerAllocations": [{"name": "main", "allocations": {"cpu": "4-5"}}],
            },
            {
                "name": "p1",
                "namespace": "default",
                "containerAllocations": [{"name": "main", "allocations": {"cpu": "10-11", "memory": "1Gi"}}],
            },
        ]
    elif variant == 2:
        topology["spec"]["cpuDetail"]["3"] = {"numa": 99}
    return topology


def nrt_object(name: str, variant: int) -> dict[str, Any]:
    """0: two NUMA zones with CPU and GPU counts (NFD v1alpha2); 1 unreadable."""
    return {
        "apiVersion": "topology.node.k8s.io/v1alpha2",
        "kind": "NodeResourceTopology",
        "metadata": {"name": name},
        "attributes": [{"name": "topologyManagerPolicy", "value": "single-numa-node"}],
        "zones": "not a list"
        if variant == 1
        else [
            {
                "name": f"node-{numa}",
                "type": "Node",
                "resources": [
                    {"name": "cpu", "capacity": "24", "allocatable": "22", "available": ["2", "22"][numa]},
                    {"name": GPU, "capacity": "4", "allocatable": "4", "available": ["1", "4"][numa]},
                ],
            }
            for numa in (0, 1)
        ],
    }


ALLOCATIONS: dict[str, PodAllocation | None] = {
    "none": None,
    "cpus": PodAllocation((ContainerAllocation("main", IdSet.parse("2-3")),)),
    "cpus+gpu": PodAllocation((ContainerAllocation("main", IdSet.parse("12-13"), devices={GPU: ("3",)}),)),
    "gpu": PodAllocation((ContainerAllocation("main", devices={GPU: ("5", "6")}),)),
}


@attrs.frozen
class PodSpec:
    name: str
    node: str
    phase: str
    deleting: bool
    ours: bool
    cpu: str
    guaranteed: bool
    gpus: int
    annotation: str  # a key of ALLOCATIONS, or "bad"
    grouped: bool
    unreadable: bool

    @property
    def uid(self) -> str:
        return f"uid-{self.name}"

    def exclusive_cpus(self) -> int:
        """CPUs a static CPU manager pins for this pod: Guaranteed with a whole CPU count."""
        return int(self.cpu) if self.guaranteed and self.cpu.isdigit() else 0


def pod_object(spec: PodSpec) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": "bogus" if spec.unreadable else spec.cpu, "memory": "1Gi"}
    if spec.gpus:
        requests[GPU] = str(spec.gpus)
    resources: dict[str, Any] = {"requests": requests}
    if spec.guaranteed:
        resources["limits"] = dict(requests)
    annotations: dict[str, str] = {}
    if spec.annotation == "bad":
        annotations[ALLOCATION_ANNOTATION] = "{oops"
    elif spec.annotation != "none":
        allocation = ALLOCATIONS[spec.annotation]
        assert allocation is not None
        annotations[ALLOCATION_ANNOTATION] = allocation_to_json(allocation)
    if spec.grouped:
        annotations[GROUP_ANNOTATION] = "g"
    metadata: dict[str, Any] = {"name": spec.name, "namespace": "default", "uid": spec.uid, "annotations": annotations}
    if spec.deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    pod_spec: dict[str, Any] = {
        "schedulerName": OURS if spec.ours else "default-scheduler",
        "containers": [{"name": "main", "resources": resources}],
    }
    if spec.node:
        pod_spec["nodeName"] = spec.node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec, "status": {"phase": spec.phase}}


POD_GROUP = {"kind": "PodGroup", "metadata": {"name": "g", "namespace": "default"}, "spec": {"minMember": 1}}


@st.composite
def pod_specs(draw: st.DrawFn) -> PodSpec:
    guaranteed = draw(st.booleans())
    return PodSpec(
        name=draw(st.sampled_from(POD_NAMES)),
        # Pending (no node) as often as on some node: pending pods are the ones assumed.
        node=draw(st.sampled_from(("", "", "", *HOSTS[1:]))),
        phase=draw(st.sampled_from(("Pending", "Running", "Running", "Succeeded", "Failed"))),
        deleting=draw(st.booleans()),
        ours=draw(st.booleans()),
        cpu=draw(st.sampled_from(("2", "3", "1500m"))),
        guaranteed=guaranteed,
        gpus=draw(st.sampled_from((0, 1, 2))) if guaranteed else 0,
        annotation=draw(st.sampled_from((*ALLOCATIONS, "bad"))),
        grouped=draw(st.booleans()),
        unreadable=draw(st.integers(0, 9)) == 0,
    )


Event = tuple[Any, ...]

# Each kind of event with its weight: pods, assumptions and snapshots come more often than the
# rest, since what goes wrong in an incremental cache takes a few of them on one node between two
# snapshots.
EVENT_KINDS: dict[str, tuple[int, st.SearchStrategy[Event]]] = {
    "pod": (6, st.tuples(st.just("pod"), pod_specs())),
    "pod-delete": (1, st.tuples(st.just("pod-delete"), st.sampled_from(POD_NAMES))),
    "node": (1, st.tuples(st.just("node"), st.sampled_from(NODE_NAMES), st.integers(0, 3))),
    "node-delete": (1, st.tuples(st.just("node-delete"), st.sampled_from(NODE_NAMES))),
    "numatopology": (1, st.tuples(st.just("numatopology"), st.sampled_from(NODE_NAMES), st.integers(0, 2))),
    "numatopology-delete": (1, st.tuples(st.just("numatopology-delete"), st.sampled_from(NODE_NAMES))),
    "nrt": (1, st.tuples(st.just("nrt"), st.sampled_from(NODE_NAMES), st.integers(0, 1))),
    "nrt-delete": (1, st.tuples(st.just("nrt-delete"), st.sampled_from(NODE_NAMES))),
    "assume": (
        3,
        st.tuples(
            st.just("assume"),
            st.sampled_from(POD_NAMES),
            st.sampled_from(HOSTS[1:]),
            st.sampled_from(tuple(ALLOCATIONS)),
        ),
    ),
    "forget": (2, st.tuples(st.just("forget"), st.sampled_from(POD_NAMES))),
    "pod-group": (1, st.tuples(st.just("pod-group"), st.booleans())),
    "snapshot": (3, st.tuples(st.just("snapshot"), st.booleans())),
}
events: st.SearchStrategy[Event] = st.sampled_from(
    [kind for kind, (weight, _) in EVENT_KINDS.items() for _ in range(weight)]
).flatmap(lambda kind: EVENT_KINDS[kind][1])
# Every run starts from a cluster whose nodes all have a Node and a Numatopology.
STARTING_CLUSTER: tuple[Event, ...] = tuple(
    event for name in NODE_NAMES for event in (("node", name, 0), ("numatopology", name, 0))
)


# ---- the model and its accounting ------------------------------------------------------------------


@attrs.define
class Model:
    """The objects as the cache should now hold them (last readable version of each)."""

    nodes: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    numatopologies: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    nrts: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    # In the order the cache received them (an update moves a pod to the end).
    pods: dict[str, PodSpec] = attrs.field(factory=dict)
    assumed: dict[str, tuple[str, PodAllocation | None]] = attrs.field(factory=dict)
    pod_group: bool = False

    def host(self, uid: str) -> str:
        spec = self.pods.get(uid)
        if spec is None:
            return ""
        if spec.node:
            return spec.node
        return self.assumed[uid][0] if uid in self.assumed else ""


def status_of(spec: PodSpec) -> TaskStatus:
    if spec.phase == "Succeeded":
        return TaskStatus.SUCCEEDED
    if spec.phase == "Failed":
        return TaskStatus.FAILED
    if spec.deleting:
        return TaskStatus.RELEASING
    if not spec.node:
        return TaskStatus.PENDING
    return TaskStatus.RUNNING if spec.phase == "Running" else TaskStatus.BOUND


@attrs.frozen
class TopologyRead:
    topology: NumaTopology | None
    error: str
    reports: Any  # ReportedAllocations | None


def read_topology(kind: str, name: str, obj: Mapping[str, Any]) -> TopologyRead:
    try:
        if kind == "Numatopology":
            topology = numatopology_to_topology(obj)
            return TopologyRead(topology, "", pod_allocation_report(obj, topology))
        topology = nrt_to_topology(obj)
        return TopologyRead(topology, "", nrt_pod_allocation_report(obj, topology))
    except ConversionError as error:
        return TopologyRead(None, f"{kind} {name}: {error.message}", None)


def node_topology(model: Model, name: str, node: NodeInfo) -> TopologyRead:
    """A readable Numatopology, else a readable NodeResourceTopology, else the first one's error;
    none at all where it contradicts the Node's capacity."""
    reads = [
        (kind, read_topology(kind, name, source[name]))
        for kind, source in (("Numatopology", model.numatopologies), ("NodeResourceTopology", model.nrts))
        if name in source
    ]
    if not reads:
        return TopologyRead(None, "", None)
    kind, chosen = next(((kind, read) for kind, read in reads if read.topology is not None), reads[0])
    if chosen.topology is not None:
        mismatch = capacity_mismatch(chosen.topology, node)
        if mismatch:
            return TopologyRead(None, f"{kind} {name}: {mismatch}", None)
    return chosen


@attrs.frozen
class ExpectedTask:
    uid: str
    node: str
    status: TaskStatus
    allocation: PodAllocation | None
    accounted: bool


def expected_task(model: Model, uid: str, reads: Mapping[str, TopologyRead]) -> ExpectedTask:
    spec = model.pods[uid]
    task = pod_to_task(pod_object(spec))
    try:
        allocation = bound_pod_allocation(task)
    except ConversionError:
        allocation = None
    node, status = spec.node, status_of(spec)
    if not node and uid in model.assumed:
        node, allocation = model.assumed[uid]
        status = TaskStatus.BINDING
    accounted = False
    read = reads.get(node)
    if read is not None and read.reports is not None:
        reported = read.reports.for_pod(uid, f"default/{spec.name}")
        if reported is not None:
            allocation = reported
        accounted = read.reports.accounts_for(uid, f"default/{spec.name}")
    return ExpectedTask(uid, node, status, allocation, accounted)


@attrs.frozen
class ExpectedNode:
    allocatable: Resource
    idle: Resource
    used: Resource
    releasing: Resource
    pipelined: Resource
    labels: dict[str, str]
    task_uids: tuple[str, ...]
    cpus: IdSet
    devices: dict[str, frozenset[str]]
    unknown: dict[str, dict[str, int]]
    topology: NumaTopology | None
    topology_error: str


def unknown_holdings(spec: PodSpec, topology: NumaTopology, task: ExpectedTask) -> dict[str, int]:
    holdings: dict[str, int] = {}
    if topology.policies.cpu_manager_policy is CpuManagerPolicy.STATIC and spec.exclusive_cpus():
        holdings["cpu"] = spec.exclusive_cpus()
    if GPU in topology.devices and spec.gpus:
        holdings[GPU] = spec.gpus
    unknown: dict[str, int] = {}
    for resource, count in holdings.items():
        known = 0
        if task.allocation is not None:
            known = len(task.allocation.cpus()) if resource == "cpu" else len(task.allocation.devices(resource))
        stated = topology.available_cpus is not None if resource == "cpu" else resource in topology.available_devices
        if count > known and not (task.accounted and stated):
            unknown[resource] = count - known
    return unknown


def expected_cluster(model: Model) -> tuple[dict[str, ExpectedNode], dict[str, ExpectedTask]]:
    infos = {name: node_to_node_info(obj) for name, obj in model.nodes.items()}
    reads = {name: node_topology(model, name, info) for name, info in infos.items()}
    tasks = {
        uid: expected_task(model, uid, reads)
        for uid, spec in model.pods.items()
        if spec.ours or status_of(spec) not in FINISHED
    }
    nodes: dict[str, ExpectedNode] = {}
    for name, info in infos.items():
        read = reads[name]
        idle, used, releasing = info.allocatable.clone(), Resource(), Resource()
        cpus, devices = IdSet(), dict[str, frozenset[str]]()
        unknown: dict[str, dict[str, int]] = {}
        on_node = [
            t for t in tasks.values() if t.node == name and t.status not in (TaskStatus.SUCCEEDED, TaskStatus.FAILED)
        ]
        for task in on_node:
            spec = model.pods[task.uid]
            request = pod_to_task(pod_object(spec)).resreq
            used.add(request)
            idle.sub(request)
            if task.status is TaskStatus.RELEASING:
                releasing.add(request)
            if task.allocation is not None:
                cpus = cpus | task.allocation.cpus()
                for resource in task.allocation.resources():
                    devices[resource] = devices.get(resource, frozenset()) | task.allocation.devices(resource)
            if read.topology is not None:
                holder = unknown_holdings(spec, read.topology, task)
                if holder:
                    unknown[task.uid] = holder
        nodes[name] = ExpectedNode(
            allocatable=info.allocatable,
            idle=idle,
            used=used,
            releasing=releasing,
            pipelined=Resource(),
            labels=info.labels,
            task_uids=tuple(task.uid for task in on_node),
            cpus=cpus,
            devices={resource: ids for resource, ids in devices.items() if ids},
            unknown=unknown,
            topology=read.topology,
            topology_error=read.error,
        )
    return nodes, tasks


def observed_node(node: NodeInfo) -> ExpectedNode:
    return ExpectedNode(
        allocatable=node.allocatable,
        idle=node.idle,
        used=node.used,
        releasing=node.releasing,
        pipelined=node.pipelined,
        labels=node.labels,
        task_uids=tuple(node.tasks),
        cpus=node.numa_usage.cpus,
        devices={resource: ids for resource, ids in node.numa_usage.devices.items() if ids},
        unknown={uid: dict(holder.holdings) for uid, holder in node.unknown_holders.items()},
        topology=node.topology,
        topology_error=node.topology_error,
    )


def job_of(spec: PodSpec, model: Model) -> str | None:
    if spec.grouped:
        return "default/g" if model.pod_group else None
    return f"default/{spec.name}"


def check_snapshot(snapshot: ClusterSnapshot, model: Model) -> dict[str, ExpectedNode]:
    nodes, tasks = expected_cluster(model)
    assert set(snapshot.nodes) == set(nodes)
    for name, expected in nodes.items():
        observed = observed_node(snapshot.nodes[name])
        assert observed == expected, name
        assert not any(snapshot.nodes[name].numa_usage.memory.values()), name
    for uid, task in tasks.items():
        spec = model.pods[uid]
        job_id = job_of(spec, model)
        if not spec.ours or job_id is None:
            assert not any(uid in job.tasks for job in snapshot.jobs.values()), uid
            continue
        placed = snapshot.jobs[job_id].tasks[uid]
        assert (placed.node_name, placed.status, placed.allocation) == (task.node, task.status, task.allocation), uid
        host = snapshot.nodes.get(task.node)
        if host is not None and uid in host.tasks:
            # The session moves one object: the job's task is the node's task.
            assert host.tasks[uid] is placed, uid
    assert {uid for job in snapshot.jobs.values() for uid in job.tasks} == {
        uid for uid, spec in model.pods.items() if uid in tasks and spec.ours and job_of(spec, model) is not None
    }
    return nodes


def scribble(snapshot: ClusterSnapshot) -> None:
    """What a session may do to its snapshot; none of it may reach the cache."""
    for node in snapshot.nodes.values():
        for task in list(node.tasks.values())[:1]:
            node.remove_task(task)
        node.idle.milli_cpu = -1.0
        node.set_unknown_holder("someone", None)
    for job in snapshot.jobs.values():
        for task in job.tasks.values():
            task.status = TaskStatus.PIPELINED
            task.node_name = "elsewhere"
            task.allocation = None


# ---- driving both ------------------------------------------------------------------------------------


def apply(cache: Cache, model: Model, event: Event, touched: set[str]) -> None:
    """Apply the event to the cache and to the model; add to `touched` the nodes whose accounting
    it may change."""
    kind = event[0]
    if kind == "pod":
        spec: PodSpec = event[1]
        cache.apply(ObjectEvent("Pod", EventType.MODIFIED, pod_object(spec)))
        if spec.unreadable:
            return
        touched.add(model.host(spec.uid))
        model.pods.pop(spec.uid, None)
        model.pods[spec.uid] = spec
        if spec.node:
            model.assumed.pop(spec.uid, None)
        touched.add(model.host(spec.uid))
    elif kind == "pod-delete":
        uid = f"uid-{event[1]}"
        if uid in model.pods:
            cache.apply(ObjectEvent("Pod", EventType.DELETED, pod_object(model.pods[uid])))
            touched.add(model.host(uid))
            del model.pods[uid]
            model.assumed.pop(uid, None)
    elif kind in ("node", "numatopology", "nrt"):
        name, variant = event[1], event[2]
        build, source, api_kind = {
            "node": (node_object, model.nodes, "Node"),
            "numatopology": (numatopology_object, model.numatopologies, "Numatopology"),
            "nrt": (nrt_object, model.nrts, "NodeResourceTopology"),
        }[kind]
        obj = build(name, variant)
        cache.apply(ObjectEvent(api_kind, EventType.MODIFIED, obj))
        touched.add(name)
        if not (kind == "node" and variant == 3):
            source[name] = obj
    elif kind.endswith("-delete"):
        name = event[1]
        source, api_kind = {
            "node-delete": (model.nodes, "Node"),
            "numatopology-delete": (model.numatopologies, "Numatopology"),
            "nrt-delete": (model.nrts, "NodeResourceTopology"),
        }[kind]
        if name in source:
            cache.apply(ObjectEvent(api_kind, EventType.DELETED, source.pop(name)))
            touched.add(name)
    elif kind == "assume":
        uid, host, allocation = f"uid-{event[1]}", event[2], ALLOCATIONS[event[3]]
        touched.add(model.host(uid))
        cache.assume(uid, host, allocation)
        model.assumed[uid] = (host, allocation)
        touched.add(model.host(uid))
    elif kind == "forget":
        uid = f"uid-{event[1]}"
        touched.add(model.host(uid))
        cache.forget(uid)
        model.assumed.pop(uid, None)
    elif kind == "pod-group":
        present = event[1]
        cache.apply(ObjectEvent("PodGroup", EventType.ADDED if present else EventType.DELETED, POD_GROUP))
        model.pod_group = present
    else:
        raise AssertionError(f"unknown event {event!r}")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(events, min_size=10, max_size=40))
def test_incremental_snapshot_equals_an_accounting_from_scratch(steps: list[Event]) -> None:
    cache = Cache((OURS,), on_problem=lambda kind, name, message: None)
    model = Model()
    touched: set[str] = set()
    previous: dict[str, tuple[int, ExpectedNode]] = {}
    previous_tasks: dict[tuple[str, str], TaskInfo] = {}
    for step in [*STARTING_CLUSTER, *steps, ("snapshot", False)]:
        if step[0] != "snapshot":
            apply(cache, model, step, touched)
            continue
        snapshot = cache.snapshot()
        expected = check_snapshot(snapshot, model)
        for name, state in expected.items():
            generation = snapshot.nodes[name].generation
            if name not in previous:
                continue
            old_generation, old_state = previous[name]
            if name not in touched:
                assert generation == old_generation, f"{name} was not touched, its generation changed"
            if state != old_state:
                assert generation != old_generation, f"{name} changed, its generation did not"
        for name, node in snapshot.nodes.items():
            for uid, task in node.tasks.items():
                # Fresh copies every snapshot: the last session's objects are not handed out again.
                assert previous_tasks.get((name, uid)) is not task
        previous = {name: (snapshot.nodes[name].generation, state) for name, state in expected.items()}
        # The objects themselves (not their ids): held, so that no id is reused.
        previous_tasks = {(name, uid): task for name, on in snapshot.nodes.items() for uid, task in on.tasks.items()}
        touched = set()
        if step[1]:
            scribble(snapshot)


# ---- generations, by example --------------------------------------------------------------------------


def loaded_cache() -> Cache:
    cache = Cache((OURS,))
    for name in NODE_NAMES:
        cache.apply(ObjectEvent("Node", EventType.ADDED, node_object(name, 0)))
        cache.apply(ObjectEvent("Numatopology", EventType.ADDED, numatopology_object(name, 0)))
    for index, name in enumerate(NODE_NAMES):
        spec = PodSpec(f"p{index}", name, "Running", False, True, "2", True, 1, "cpus", False, False)
        cache.apply(ObjectEvent("Pod", EventType.ADDED, pod_object(spec)))
    cache.apply(
        ObjectEvent(
            "Pod",
            EventType.ADDED,
            pod_object(PodSpec("p9", "", "Pending", False, True, "2", True, 0, "none", False, False)),
        )
    )
    return cache


def generations(snapshot: ClusterSnapshot) -> dict[str, int]:
    return {name: node.generation for name, node in snapshot.nodes.items()}


def test_an_untouched_node_keeps_its_generation_across_snapshots() -> None:
    cache = loaded_cache()
    first = cache.snapshot()
    # The session's changes to its copies stay there and do not renumber the cache's nodes.
    first.nodes["n0"].remove_task(first.nodes["n0"].tasks["uid-p0"])
    second = cache.snapshot()
    assert generations(second) == {name: node.generation for name, node in first.nodes.items() if name != "n0"} | {
        "n0": second.nodes["n0"].generation
    }
    assert second.nodes["n0"].generation != first.nodes["n0"].generation
    third = cache.snapshot()
    assert generations(third)["n0"] == generations(second)["n0"]
    assert generations(cache.snapshot()) == generations(second)


def test_a_touched_node_gets_a_new_generation_and_only_it() -> None:
    cache = loaded_cache()
    before = generations(cache.snapshot())
    moved = PodSpec("p0", "n1", "Running", False, True, "2", True, 1, "cpus", False, False)
    cache.apply(ObjectEvent("Pod", EventType.MODIFIED, pod_object(moved)))
    after_move = generations(cache.snapshot())
    assert after_move["n0"] != before["n0"] and after_move["n1"] != before["n1"]
    assert after_move["n2"] == before["n2"]
    cache.assume("uid-p9", "n2", None)
    after_assume = generations(cache.snapshot())
    assert after_assume["n2"] != after_move["n2"]
    assert after_assume["n0"] == after_move["n0"] and after_assume["n1"] == after_move["n1"]
    cache.apply(ObjectEvent("Numatopology", EventType.MODIFIED, numatopology_object("n0", 1)))
    after_topology = generations(cache.snapshot())
    assert after_topology["n0"] != after_assume["n0"]
    assert {name: after_topology[name] for name in ("n1", "n2")} == {name: after_assume[name] for name in ("n1", "n2")}


def test_a_snapshots_tasks_are_its_own_and_shared_by_node_and_job() -> None:
    cache = loaded_cache()
    first = cache.snapshot()
    task = first.jobs["default/p0"].tasks["uid-p0"]
    assert first.nodes["n0"].tasks["uid-p0"] is task
    task.status = TaskStatus.RELEASING
    first.jobs["default/p9"].tasks["uid-p9"].node_name = "n1"
    second = cache.snapshot()
    assert second.nodes["n0"].tasks["uid-p0"] is not task
    assert second.nodes["n0"].tasks["uid-p0"].status is TaskStatus.RUNNING
    assert second.jobs["default/p9"].tasks["uid-p9"].node_name == ""
    assert second.nodes["n0"].tasks["uid-p0"] is second.jobs["default/p0"].tasks["uid-p0"]


def test_a_node_arriving_after_its_pods_accounts_them() -> None:
    cache = Cache((OURS,))
    spec = PodSpec("p0", "n0", "Running", False, False, "3", True, 0, "cpus", False, False)
    cache.apply(ObjectEvent("Pod", EventType.ADDED, pod_object(spec)))
    assert "n0" not in cache.snapshot().nodes
    cache.apply(ObjectEvent("Node", EventType.ADDED, node_object("n0", 0)))
    node = cache.snapshot().nodes["n0"]
    assert list(node.tasks) == ["uid-p0"] and node.used.milli_cpu == 3000
    cache.apply(ObjectEvent("Node", EventType.DELETED, node_object("n0", 0)))
    assert cache.snapshot().nodes == {}
