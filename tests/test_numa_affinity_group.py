"""numa-affinity-group: pods of a group share a node and a NUMA node, or wait (required); prefer
their peers' node and NUMA nodes (preferred); gangs placed as a unit; within one cycle and across
cycles. Judged by reading the bound pods' decisions (their allocation annotations) and, for the
NUMA nodes their ids sit on, by the machine description, never by asking the plugin."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import load_hack_module, load_machine
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from numasched.api.allocation import (
    ALLOCATION_ANNOTATION,
    ContainerAllocation,
    PodAllocation,
    allocation_from_json,
    allocation_to_json,
)
from numasched.api.numamask import NumaMask
from numasched.api.task import TaskInfo, TaskStatus
from numasched.cache.cache import Cache
from numasched.cache.machine_shapes import machine_objects, reserved_cpus_for
from numasched.cache.simcluster import SimCluster
from numasched.conf.model import PluginOption, SchedulerConfig, Tier
from numasched.plugins.numa_affinity_group import (
    GROUP_ANNOTATION,
    MODE_ANNOTATION,
    AffinityMode,
    GroupAnnotationError,
    NodePeers,
    NumaAffinityGroupPlugin,
    anchor_of,
    peers_by_node,
    preferred_score,
    read_membership,
)
from numasched.plugins.numaaware.restriction import apart, free_after, joined
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.framework.arguments import Arguments
from numasched.scheduler.framework.plugin import DeclaresEquivalence
from numasched.scheduler.loop import schedule_cycle

pytestmark = pytest.mark.anyio
kubelet = load_hack_module("kubelet_model")
GPU = "nvidia.com/gpu"
MACHINE = "pcie-8gpu-2numa"
# The machine description, read independently of the scheduler: GPU id -> NUMA node, CPU -> NUMA node.
_MACHINE = load_machine(MACHINE)


def _gpu_numa() -> dict[str, int]:
    devices = _MACHINE["devices"][GPU]
    return {str(device["id"]): int(device["numa"]) for device in devices}


def _cpu_numa() -> dict[int, int]:
    result: dict[int, int] = {}
    for numa in _MACHINE["numa_nodes"]:
        for part in str(numa["cpus"]).split(","):
            low, _, high = part.partition("-")
            for cpu in range(int(low), int(high or low) + 1):
                result[cpu] = int(numa["id"])
    return result


GPU_NUMA = _gpu_numa()
CPU_NUMA = _cpu_numa()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def config(*, mode_plugin: bool = True) -> SchedulerConfig:
    plugins = [PluginOption("predicates"), PluginOption("numa-aware")]
    if mode_plugin:
        plugins.append(PluginOption("numa-affinity-group"))
    return SchedulerConfig(
        actions=("enqueue", "allocate"),
        tiers=(Tier((PluginOption("priority"), PluginOption("gang"))), Tier(tuple(plugins))),
    )


def pod(
    name: str,
    *,
    gpus: int = 0,
    cpus: int = 1,
    group: str | None = "g1",
    mode: str | None = None,
    pod_group: str | None = None,
    on: tuple[str, tuple[str, ...]] | None = None,
    created: int = 0,
) -> dict[str, Any]:
    """A Guaranteed pod (whole CPUs, so the static CPU manager pins them) in namespace team; one
    already running (`on`) holds the GPUs given and shares the CPU pool."""
    requests: dict[str, str] = {"cpu": str(cpus) if on is None else "500m", "memory": "1Gi"}
    if gpus:
        requests[GPU] = str(gpus)
    annotations: dict[str, str] = {}
    if group is not None:
        annotations[GROUP_ANNOTATION] = group
    if mode is not None:
        annotations[MODE_ANNOTATION] = mode
    if pod_group is not None:
        annotations["scheduling.k8s.io/group-name"] = pod_group
    result: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "team",
            "annotations": annotations,
            "creationTimestamp": f"2026-01-01T00:00:{created:02d}Z",
        },
        "spec": {
            "schedulerName": "numasched",
            "containers": [{"name": "main", "resources": {"requests": requests, "limits": requests}}],
        },
        "status": {"phase": "Pending"},
    }
    if on is not None:
        node_name, gpu_ids = on
        numa = NumaMask.from_ids({GPU_NUMA[gpu] for gpu in gpu_ids})
        allocation = PodAllocation((ContainerAllocation("main", numa=numa, devices={GPU: gpu_ids}),))
        result["spec"]["nodeName"] = node_name
        result["status"]["phase"] = "Running"
        annotations[ALLOCATION_ANNOTATION] = allocation_to_json(allocation)
    return result


def pod_group(name: str, min_member: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "team"},
        "spec": {"minMember": min_member, "queue": "default"},
    }


def cluster_of(*names: str) -> SimCluster:
    cluster = SimCluster(Cache())
    for name in names:
        node, topology = machine_objects(_MACHINE, name)
        cluster.add(node)
        cluster.add(topology)
    return cluster


async def run_cycles(cluster: SimCluster, cfg: SchedulerConfig, cycles: int = 2) -> None:
    registry = default_registry()
    for _ in range(cycles):
        await schedule_cycle(cluster.cache, cfg, registry, cluster, cluster)


def placed(cluster: SimCluster, name: str) -> tuple[str, frozenset[int]] | None:
    """(node, NUMA nodes its pinned CPUs and GPUs sit on, per the machine description) of a bound
    pod; None when it is not bound."""
    found = cluster.objects["Pod"][f"team/{name}"]
    node_name = found["spec"].get("nodeName")
    if not node_name:
        return None
    decision = found["metadata"]["annotations"].get(ALLOCATION_ANNOTATION)
    if decision is None:
        # Nothing pinned: the binding carries no decision.
        return node_name, frozenset()
    allocation = allocation_from_json(decision)
    numa = {CPU_NUMA[cpu] for cpu in allocation.cpus()}
    numa |= {GPU_NUMA[gpu] for gpu in allocation.devices(GPU)}
    # Where the ids are left to the kubelet (unknown holders on the node), the NUMA nodes stay.
    numa |= set(allocation.numa().ids())
    return node_name, frozenset(numa)


def waiting_reason(cluster: SimCluster, name: str) -> str:
    found = cluster.objects["Pod"][f"team/{name}"]
    for condition in found.get("status", {}).get("conditions", []):
        if condition.get("type") == "PodScheduled":
            return str(condition.get("message", ""))
    return ""


def kubelet_numa(cluster: SimCluster, names: list[str], order: tuple[str, ...]) -> dict[str, frozenset[int]]:
    """The NUMA nodes each bound pod of `order` gets from its node's kubelet (hack/kubelet_model),
    after the node's other pods' devices are taken."""
    reserved = reserved_cpus_for(_MACHINE, 2)
    states = {
        name: kubelet.NodeState.empty(kubelet.node_from_machine(_MACHINE, name, reserved_cpus=reserved))
        for name in names
    }
    for key, found in cluster.objects["Pod"].items():
        node_name = found["spec"].get("nodeName")
        if node_name and key.split("/", 1)[1] not in order:
            allocation = allocation_from_json(found["metadata"]["annotations"][ALLOCATION_ANNOTATION])
            states[node_name].take(allocation.cpus(), {GPU: allocation.devices(GPU)})
    given: dict[str, frozenset[int]] = {}
    for name in order:
        found = cluster.objects["Pod"][f"team/{name}"]
        node_name = found["spec"].get("nodeName")
        if not node_name:
            continue
        admission = kubelet.admit(states[node_name], kubelet.pod_from_object(found))
        assert admission.admitted, admission.reason
        kubelet.apply(states[node_name], admission)
        given[name] = frozenset(kubelet.numa_of_ids(states[node_name].node, admission.cpus, admission.devices))
    return given


# -- annotations ------------------------------------------------------------------------------------


def task_with(annotations: dict[str, str]) -> TaskInfo:
    from numasched.api.resource import Resource

    return TaskInfo("u", "team", "p", "team/p", Resource(), Resource(), annotations=annotations)


def test_membership_is_namespace_scoped_and_required_by_default() -> None:
    membership = read_membership(task_with({GROUP_ANNOTATION: " g1 "}))
    assert membership is not None
    assert (membership.group, membership.mode) == ("team/g1", AffinityMode.REQUIRED)
    preferred = read_membership(task_with({GROUP_ANNOTATION: "g1", MODE_ANNOTATION: "Preferred"}))
    assert preferred is not None and preferred.mode is AffinityMode.PREFERRED
    assert read_membership(task_with({})) is None


@pytest.mark.parametrize(
    ("annotations", "named"),
    [
        ({GROUP_ANNOTATION: "g1", MODE_ANNOTATION: "sometimes"}, MODE_ANNOTATION),
        ({GROUP_ANNOTATION: "  "}, GROUP_ANNOTATION),
        ({GROUP_ANNOTATION: "a\nb"}, GROUP_ANNOTATION),
        ({GROUP_ANNOTATION: "x" * 300}, GROUP_ANNOTATION),
        ({MODE_ANNOTATION: "required"}, GROUP_ANNOTATION),
    ],
)
def test_bad_annotations_name_the_annotation(annotations: dict[str, str], named: str) -> None:
    with pytest.raises(GroupAnnotationError, match=named):
        read_membership(task_with(annotations))


def test_plugin_declares_equivalence_and_checks_its_weight() -> None:
    plugin = NumaAffinityGroupPlugin(Arguments({}, plugin="numa-affinity-group"))
    assert isinstance(plugin, DeclaresEquivalence)
    with pytest.raises(ValueError, match="weight"):
        NumaAffinityGroupPlugin(Arguments({"weight": -1}, plugin="numa-affinity-group"))


async def test_bad_mode_waits_with_a_message_naming_the_annotation() -> None:
    cluster = cluster_of("n1")
    cluster.add(pod("a", gpus=1, mode="sometimes"))
    await run_cycles(cluster, config(), cycles=1)
    assert placed(cluster, "a") is None
    reason = waiting_reason(cluster, "a")
    assert MODE_ANNOTATION in reason and "sometimes" in reason


# -- pure parts, against hand-computed answers ---------------------------------------------------


def placed_task(uid: str, node_name: str, numa: tuple[int, ...], status: TaskStatus = TaskStatus.RUNNING) -> TaskInfo:
    from numasched.api.resource import Resource

    allocation = PodAllocation((ContainerAllocation("main", numa=NumaMask.from_ids(numa)),)) if numa else None
    return TaskInfo(
        uid, "team", uid, "team/j", Resource(), Resource(), status=status, node_name=node_name, allocation=allocation
    )


def test_peers_per_node_union_core_and_who_counts() -> None:
    members = {
        task.uid: task
        for task in (
            placed_task("a", "n1", (0, 1)),
            placed_task("b", "n1", (1,)),
            placed_task("c", "n1", ()),  # pins nothing: counted, no NUMA node
            placed_task("d", "n2", (0,)),
            placed_task("e", "n2", (1,), TaskStatus.RELEASING),  # leaving: not a peer
            placed_task("f", "", (), TaskStatus.PENDING),
        )
    }
    peers = peers_by_node(members)
    assert peers == {
        "n1": NodePeers(3, NumaMask.of(0, 1), NumaMask.of(1)),
        "n2": NodePeers(1, NumaMask.of(0), NumaMask.of(0)),
    }
    assert anchor_of(peers) == "n1"
    assert anchor_of({"n2": NodePeers(1, NumaMask(), NumaMask()), "n1": NodePeers(1, NumaMask(), NumaMask())}) == "n1"
    assert anchor_of({}) == ""
    assert preferred_score(peers, "n1", 10) == pytest.approx(750.0)
    assert preferred_score(peers, "n2", 10) == pytest.approx(250.0)
    assert preferred_score(peers, "n3", 10) == 0.0


def test_apart_and_joined() -> None:
    zero, one, both = NumaMask.of(0), NumaMask.of(1), NumaMask.of(0, 1)
    assert apart(NumaMask(), zero, zero) == ""
    assert apart(zero, zero, zero) == ""
    assert "outside NUMA node(s) 0" in apart(one, zero, zero)
    assert "sharing none of NUMA node(s) 0" in apart(one, both, zero)
    assert apart(one, NumaMask(), NumaMask()) == ""
    assert joined(NumaMask(), NumaMask(), one) == (one, one)
    assert joined(both, one, zero) == (both, NumaMask())
    assert joined(zero, zero, NumaMask()) == (zero, zero)


def test_free_after_takes_what_the_pod_holds() -> None:
    from numasched.api.idset import IdSet
    from numasched.plugins.numaaware.providers.base import FreeResources

    free = FreeResources(IdSet([1, 2, 3]), {GPU: ("0", "1", "4")}, {"memory": {0: 100, 1: 50}})
    allocation = PodAllocation(
        (ContainerAllocation("main", IdSet([2]), NumaMask.of(0), {GPU: ("1",)}, {"memory": {0: 30}}),)
    )
    after = free_after(free, allocation)
    assert after.cpus == IdSet([1, 3])
    assert after.devices[GPU] == ("0", "4")
    assert after.memory["memory"] == {0: 70, 1: 50}
    assert NumaMask.of(0) in after.memory_groups


# -- required ---------------------------------------------------------------------------------------


async def test_required_peer_waits_rather_than_split_and_says_why() -> None:
    # NUMA 0 of n1 has one GPU left; a takes it; b would fit only on NUMA 1 or on n2.
    cluster = cluster_of("n1", "n2")
    cluster.add(pod("filler", gpus=3, group=None, on=("n1", ("0", "1", "2"))))
    cluster.add(pod("a", gpus=1, created=1))
    await run_cycles(cluster, config(), cycles=1)
    assert placed(cluster, "a") == ("n1", frozenset({0}))
    cluster.add(pod("b", gpus=1, created=2))
    await run_cycles(cluster, config())
    assert placed(cluster, "b") is None
    reason = waiting_reason(cluster, "b")
    assert "numa affinity group team/g1 (required)" in reason
    assert "n1" in reason and "NUMA node(s) 0" in reason


async def test_without_the_plugin_the_same_pods_split() -> None:
    # The control for the test above: the split it prevents is what happens otherwise.
    cluster = cluster_of("n1", "n2")
    cluster.add(pod("filler", gpus=3, group=None, on=("n1", ("0", "1", "2"))))
    cluster.add(pod("a", gpus=1, created=1))
    cluster.add(pod("b", gpus=1, created=2))
    await run_cycles(cluster, config(mode_plugin=False))
    first, second = placed(cluster, "a"), placed(cluster, "b")
    assert first is not None and second is not None
    assert first[0] != second[0] or not first[1] & second[1]


async def test_required_pair_in_one_cycle_waits_rather_than_split() -> None:
    # Both pending in one session: a is allocated first (statement, not yet bound) and b must
    # read where a went from the session, not from the cache.
    cluster = cluster_of("n1", "n2")
    cluster.add(pod("filler", gpus=3, group=None, on=("n1", ("0", "1", "2"))))
    cluster.add(pod("a", gpus=1, created=1))
    cluster.add(pod("b", gpus=1, created=2))
    await run_cycles(cluster, config(), cycles=1)
    assert placed(cluster, "a") == ("n1", frozenset({0}))
    assert placed(cluster, "b") is None
    assert "numa affinity group team/g1 (required)" in waiting_reason(cluster, "b")


async def test_required_pair_with_room_shares_node_and_numa_node() -> None:
    cluster = cluster_of("n1", "n2")
    cluster.add(pod("filler", gpus=2, group=None, on=("n1", ("0", "1"))))
    cluster.add(pod("a", gpus=1, cpus=4, created=1))
    cluster.add(pod("b", gpus=1, cpus=2, created=2))
    await run_cycles(cluster, config())
    first, second = placed(cluster, "a"), placed(cluster, "b")
    assert first is not None and second is not None
    assert first[0] == second[0] and first[1] & second[1]


async def test_required_pods_that_pin_nothing_are_held_to_the_node_only() -> None:
    # a runs on n1 in the shared CPU pool; b pins nothing either. Without the group b would go to
    # n0 (every score ties, the smaller name wins).
    cluster = cluster_of("n0", "n1")
    cluster.add(pod("a", on=("n1", ())))
    unpinned = pod("b", created=2)
    requests = {"cpu": "500m", "memory": "1Gi"}
    unpinned["spec"]["containers"][0]["resources"] = {"requests": requests, "limits": requests}
    cluster.add(unpinned)
    await run_cycles(cluster, config())
    assert placed(cluster, "b") == ("n1", frozenset())


async def test_other_namespaces_group_of_the_same_name_is_another_group() -> None:
    cluster = cluster_of("n1")
    cluster.add(pod("filler", gpus=3, group=None, on=("n1", ("0", "1", "2"))))
    cluster.add(pod("a", gpus=1, created=1))
    other = pod("b", gpus=1, created=2)
    other["metadata"]["namespace"] = "elsewhere"
    cluster.add(other)
    await run_cycles(cluster, config())
    assert cluster.objects["Pod"]["elsewhere/b"]["spec"].get("nodeName") == "n1"


# -- preferred --------------------------------------------------------------------------------------


async def test_preferred_joins_the_peers_node() -> None:
    # n0 sorts first and is emptier: without the group the second pod would go there.
    cluster = cluster_of("n0", "n1")
    cluster.add(pod("filler-n1", gpus=2, group=None, on=("n1", ("0", "1"))))
    cluster.add(pod("a", gpus=1, mode="preferred", on=("n1", ("5",))))
    cluster.add(pod("b", gpus=1, mode="preferred", created=2))
    await run_cycles(cluster, config())
    # On n1 the kubelet's narrowest, lowest hint for one GPU is NUMA 0 (2 free there).
    assert placed(cluster, "b") == ("n1", frozenset({0}))


async def test_preferred_does_not_wait_for_its_peers_numa_node() -> None:
    # a's NUMA node is full and its node holds nothing more: b goes elsewhere rather than wait.
    cluster = cluster_of("n1", "n2")
    cluster.add(pod("filler", gpus=3, group=None, on=("n1", ("0", "1", "2"))))
    cluster.add(pod("filler-1", gpus=4, group=None, on=("n1", ("4", "5", "6", "7"))))
    cluster.add(pod("a", gpus=1, mode="preferred", on=("n1", ("3",))))
    cluster.add(pod("b", gpus=1, mode="preferred", created=2))
    await run_cycles(cluster, config())
    assert placed(cluster, "b") == ("n2", frozenset({0}))


async def test_preferred_goes_elsewhere_on_the_node_when_the_numa_node_is_full() -> None:
    cluster = cluster_of("n1", "n2")
    cluster.add(pod("filler", gpus=3, group=None, on=("n1", ("4", "6", "7"))))
    cluster.add(pod("a", gpus=1, mode="preferred", on=("n1", ("5",))))
    cluster.add(pod("b", gpus=1, mode="preferred", created=2))
    await run_cycles(cluster, config())
    assert placed(cluster, "b") == ("n1", frozenset({0}))


# -- gangs ------------------------------------------------------------------------------------------


async def test_gang_group_goes_where_the_whole_unit_stays_together() -> None:
    # On n1 (NUMA 0 has 3 GPUs free, NUMA 1 all 4) the kubelet would put the first 2-GPU pod on
    # NUMA 0 and the second on NUMA 1; on n2 both fit on NUMA 0. Without the unit check the first
    # would go to n1 (the smaller name) and the gang would split or fail there.
    cluster = cluster_of("n1", "n2")
    cluster.add(pod("filler", gpus=1, group=None, on=("n1", ("0",))))
    cluster.add(pod_group("job", 2))
    cluster.add(pod("w0", gpus=2, pod_group="job", created=1))
    cluster.add(pod("w1", gpus=2, pod_group="job", created=2))
    await run_cycles(cluster, config())
    assert placed(cluster, "w0") == ("n2", frozenset({0}))
    assert placed(cluster, "w1") == ("n2", frozenset({0}))


async def test_gang_that_no_node_can_hold_together_waits_with_the_group_named() -> None:
    cluster = cluster_of("n1", "n2")
    cluster.add(pod_group("job", 2))
    cluster.add(pod("w0", gpus=3, pod_group="job", created=1))
    cluster.add(pod("w1", gpus=3, pod_group="job", created=2))
    await run_cycles(cluster, config())
    assert placed(cluster, "w0") is None and placed(cluster, "w1") is None
    assert "numa affinity group team/g1 (required)" in waiting_reason(cluster, "w0")


# -- the property -----------------------------------------------------------------------------------

_SHAPES = st.tuples(st.integers(0, 3), st.integers(1, 24))


@given(
    nodes=st.integers(1, 3),
    fillers=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 7)), max_size=8),
    first=_SHAPES,
    second=_SHAPES,
    gang=st.booleans(),
    waves=st.booleans(),
)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
async def test_two_pods_of_a_required_group_share_a_numa_node_or_wait(
    nodes: int,
    fillers: list[tuple[int, int]],
    first: tuple[int, int],
    second: tuple[int, int],
    gang: bool,
    waves: bool,
) -> None:
    names = [f"n{index}" for index in range(nodes)]
    cluster = cluster_of(*names)
    taken: set[tuple[str, str]] = set()
    for index, (node_index, gpu) in enumerate(fillers):
        where = (names[node_index % nodes], str(gpu))
        if where in taken:
            continue
        taken.add(where)
        cluster.add(pod(f"filler-{index}", gpus=1, group=None, on=(where[0], (where[1],))))
    job = "job" if gang else None
    if gang:
        cluster.add(pod_group("job", 2))
    cluster.add(pod("a", gpus=first[0], cpus=first[1], pod_group=job, created=1))
    if waves:
        await run_cycles(cluster, config(), cycles=1)
    cluster.add(pod("b", gpus=second[0], cpus=second[1], pod_group=job, created=2))
    await run_cycles(cluster, config())
    one, other = placed(cluster, "a"), placed(cluster, "b")
    if one is not None and other is not None:
        assert one[0] == other[0], (one, other)
        assert one[1] & other[1], (one, other)
    elif gang:
        assert one is None and other is None
    # What the kubelets will do with these bindings (the independent model, replaying each node's
    # holdings, then a and b in the order they were placed) is what the decisions say, so the
    # pair shares a NUMA node on the machine too.
    given = kubelet_numa(cluster, names, ("a", "b"))
    assert given == {name: where[1] for name, where in (("a", one), ("b", other)) if where is not None}


# -- the engine's memo --------------------------------------------------------------------------------


def test_a_peer_placed_mid_session_gives_the_pods_of_its_group_a_new_class() -> None:
    """b is asked about both nodes (both pass: no peer yet); then a, of b's group, is allocated on
    n0. Asked again in the same session, b passes n0 only: its class moved with its peer, so the
    memo's answer for n1 (a node whose generation did not move) is not reused."""
    from numasched.api.job import JobInfo
    from numasched.api.node import NodeInfo
    from numasched.api.resource import Resource
    from numasched.api.snapshot import ClusterSnapshot
    from numasched.scheduler.actions.allocate import feasible_nodes
    from numasched.scheduler.framework.equivalence import EquivalenceMemo
    from numasched.scheduler.framework.session import Session
    from numasched.scheduler.framework.statement import Statement

    nodes = [NodeInfo.create(name, Resource(milli_cpu=8000, memory=16e9)) for name in ("n0", "n1")]
    jobs = {}
    for name in ("a", "b"):
        request = Resource(milli_cpu=1000, memory=1e9)
        job = JobInfo(uid=f"team/{name}", namespace="team", name=name)
        job.add_task(
            TaskInfo(
                f"uid-{name}", "team", name, job.uid, request, request.clone(), annotations={GROUP_ANNOTATION: "g1"}
            )
        )
        jobs[job.uid] = job
    conf = SchedulerConfig(actions=("allocate",), tiers=(Tier((PluginOption("numa-affinity-group"),)),))
    ssn = Session(ClusterSnapshot(nodes={n.name: n for n in nodes}, jobs=jobs), conf, default_registry())
    ssn.open()
    memo = EquivalenceMemo()
    memo.bind(conf)
    ssn.memo = memo
    a = next(iter(jobs["team/a"].tasks.values()))
    b = next(iter(jobs["team/b"].tasks.values()))
    before = ssn.equivalence_class(b)
    assert [n.name for n in feasible_nodes(ssn, b, nodes, check_resources=True)] == ["n0", "n1"]
    assert Statement(ssn).allocate(a, nodes[0])
    assert ssn.equivalence_class(b) != before
    assert [n.name for n in feasible_nodes(ssn, b, nodes, check_resources=True)] == ["n0"]
    assert "its placed pods are on node n0" in str(ssn.fit_errors[b.uid]["n1"])
