"""The node agent on a fake cgroupfs: it pins what numasched decided, re-pins after a restart,
leaves everything else alone, survives cgroups that vanish or refuse, restores only its own
writes, and reports decisions the node did not follow (once each)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from numasched.api.allocation import ContainerAllocation
from numasched.api.idset import IdSet
from numasched.cache.events import EventType, ObjectEvent
from numasched.exporter.enforce_agent import EnforceMetrics, Enforcer, report_mismatches
from numasched.exporter.enforce_cgroup import ContainerId, QosClass, container_cgroup_candidates
from numasched.exporter.enforce_plan import PodView, pinned_cpus, pod_view, with_observed
from numasched.exporter.usage import NodeUsage, PodUsage

NODE = "node-a"
UID = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
UID_ESCAPED = "1b4e28ba_2fa1_11d2_883f_0016d3cca427"
FIRST = "a" * 64
SECOND = "b" * 64
# Two NUMA nodes of 8 CPUs each.
NUMA_OF_CPU = {cpu: cpu // 8 for cpu in range(16)}
ALL_CPUS = IdSet(range(16))

# Where each driver and runtime puts a container, written out from the kubelet's and the runtimes'
# naming (not from the code under test). Relative to the cpuset hierarchy.
LAYOUTS = {
    ("systemd", "containerd", "Burstable"): (
        f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_ESCAPED}.slice/cri-containerd-{FIRST}.scope"
    ),
    ("systemd", "cri-o", "Burstable"): (
        f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_ESCAPED}.slice/crio-{FIRST}.scope"
    ),
    (
        "systemd",
        "containerd",
        "Guaranteed",
    ): f"kubepods.slice/kubepods-pod{UID_ESCAPED}.slice/cri-containerd-{FIRST}.scope",
    ("systemd", "containerd", "BestEffort"): (
        f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_ESCAPED}.slice/cri-containerd-{FIRST}.scope"
    ),
    ("cgroupfs", "containerd", "Burstable"): f"kubepods/burstable/pod{UID}/{FIRST}",
    ("cgroupfs", "cri-o", "Burstable"): f"kubepods/burstable/pod{UID}/crio-{FIRST}",
    ("cgroupfs", "containerd", "Guaranteed"): f"kubepods/pod{UID}/{FIRST}",
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def make_root(root: Path, version: str) -> Path:
    """An empty cgroup mount of the given version; returns the cpuset hierarchy's root."""
    if version == "v2":
        root.mkdir(parents=True, exist_ok=True)
        (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
        return root
    (root / "cpuset").mkdir(parents=True, exist_ok=True)
    return root / "cpuset"


def make_cgroup(hierarchy: Path, relative: str, cpus: str = "0-15", mems: str = "0-1") -> Path:
    directory = hierarchy / relative
    directory.mkdir(parents=True)
    (directory / "cpuset.cpus").write_text(cpus + "\n")
    (directory / "cpuset.mems").write_text(mems + "\n")
    return directory


def cpuset(directory: Path) -> tuple[str, str]:
    return (directory / "cpuset.cpus").read_text().strip(), (directory / "cpuset.mems").read_text().strip()


def pod(
    *,
    uid: str = UID,
    name: str = "web-0",
    node: str = NODE,
    qos: str = "Burstable",
    allocation: dict[str, Any] | str | None = None,
    containers: dict[str, str | None] | None = None,
    cpu: str = "4",
    runtime: str = "containerd",
) -> dict[str, Any]:
    """A pod as the API server serves it; containers: name -> running container id (or None)."""
    containers = containers if containers is not None else {"app": FIRST}
    annotations: dict[str, str] = {}
    if allocation is not None:
        annotations["numasched.io/allocation"] = allocation if isinstance(allocation, str) else json.dumps(allocation)
    resources = {"requests": {"cpu": cpu, "memory": "1Gi"}, "limits": {"cpu": cpu, "memory": "1Gi"}}
    if qos == "Burstable":
        resources = {"requests": {"cpu": cpu}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": uid, "annotations": annotations},
        "spec": {"nodeName": node, "containers": [{"name": n, "resources": resources} for n in containers]},
        "status": {
            "qosClass": qos,
            "containerStatuses": [
                {"name": n, "containerID": f"{runtime}://{i}", "state": {"running": {}}}
                if i is not None
                else {"name": n, "state": {"waiting": {}}}
                for n, i in containers.items()
            ],
        },
    }


def decision(
    cpus: str = "2-5", numa: list[int] | None = None, devices: dict[str, list[str]] | None = None
) -> dict[str, Any]:
    entry: dict[str, Any] = {"cpuset": cpus}
    if numa is not None:
        entry["numa"] = numa
    if devices:
        entry["devices"] = devices
    return {"containers": {"app": entry}}


def enforcer(root: Path) -> tuple[Enforcer, EnforceMetrics]:
    metrics = EnforceMetrics(CollectorRegistry())
    return Enforcer(NODE, root, metrics), metrics


def sample(metrics: EnforceMetrics, name: str, **labels: str) -> float:
    for metric in (metrics.mismatches, metrics.pins, metrics.failures, metrics.event_failures):
        for family in metric.collect():
            for found in family.samples:
                if found.name == name and found.labels == labels:
                    return float(found.value)
    return 0.0


@pytest.mark.parametrize(("driver", "runtime", "qos"), sorted(LAYOUTS))
@pytest.mark.parametrize("version", ["v1", "v2"])
def test_pins_the_decided_cpus_and_memory_nodes(
    tmp_path: Path, version: str, driver: str, runtime: str, qos: str
) -> None:
    hierarchy = make_root(tmp_path / "cgroup", version)
    target = make_cgroup(hierarchy, LAYOUTS[(driver, runtime, qos)])
    agent, metrics = enforcer(tmp_path / "cgroup")
    agent.replace("Pod", [pod(qos=qos, runtime=runtime, cpu="2500m", allocation=decision("2-5", numa=[0]))])
    agent.enforce(static_cpu_manager=False, numa_of_cpu=NUMA_OF_CPU)
    assert cpuset(target) == ("2-5", "0")
    assert sample(metrics, "numasched_enforce_pins_total", action="pinned") == 1
    # Enforcing again writes nothing: the cgroup already holds the decision.
    agent.enforce(static_cpu_manager=False, numa_of_cpu=NUMA_OF_CPU)
    assert sample(metrics, "numasched_enforce_pins_total", action="pinned") == 1


def test_candidates_refuse_a_uid_that_could_leave_the_tree() -> None:
    with pytest.raises(ValueError, match="not a UID"):
        container_cgroup_candidates("../../etc", QosClass.BURSTABLE, ContainerId("containerd", FIRST))
    assert pod_view(pod(containers={"app": None})).containers[0].container_id is None
    hostile = pod()
    hostile["status"]["containerStatuses"][0]["containerID"] = "containerd://../../x"
    assert pod_view(hostile).containers[0].container_id is None


def test_memory_nodes_default_to_those_of_the_decided_cpus(tmp_path: Path) -> None:
    hierarchy = make_root(tmp_path / "cgroup", "v2")
    target = make_cgroup(hierarchy, LAYOUTS[("systemd", "containerd", "Burstable")])
    agent, _ = enforcer(tmp_path / "cgroup")
    agent.replace("Pod", [pod(allocation=decision("6-9"))])
    agent.enforce(False, NUMA_OF_CPU)
    assert cpuset(target) == ("6-9", "0-1")


def test_repins_after_a_container_restart(tmp_path: Path) -> None:
    hierarchy = make_root(tmp_path / "cgroup", "v2")
    first = make_cgroup(hierarchy, LAYOUTS[("systemd", "containerd", "Burstable")])
    agent, metrics = enforcer(tmp_path / "cgroup")
    agent.replace("Pod", [pod(allocation=decision("2-5", numa=[0]))])
    agent.enforce(False, NUMA_OF_CPU)
    assert cpuset(first) == ("2-5", "0")
    # The container restarts: the runtime removes the old cgroup and makes a new one, unpinned.
    for file in first.iterdir():
        file.unlink()
    first.rmdir()
    second = make_cgroup(hierarchy, LAYOUTS[("systemd", "containerd", "Burstable")].replace(FIRST, SECOND))
    agent.changed = type(agent.changed)()
    agent.apply(
        ObjectEvent("Pod", EventType.MODIFIED, pod(allocation=decision("2-5", numa=[0]), containers={"app": SECOND}))
    )
    assert agent.changed.is_set()
    agent.enforce(False, NUMA_OF_CPU)
    assert cpuset(second) == ("2-5", "0")
    assert sample(metrics, "numasched_enforce_pins_total", action="pinned") == 2
    # The vanished cgroup of the old container is forgotten, not a failure.
    assert list(agent.written) == [f"containerd://{SECOND}"]
    assert sample(metrics, "numasched_enforce_failures_total", reason="gone") == 0


def test_leaves_alone_what_it_did_not_decide(tmp_path: Path) -> None:
    hierarchy = make_root(tmp_path / "cgroup", "v1")
    undecided = make_cgroup(hierarchy, f"kubepods/burstable/pod{UID}/{FIRST}")
    other_uid = "2c5f39cb-3fb2-22e3-994f-1127e4ddb538"
    elsewhere = make_cgroup(hierarchy, f"kubepods/burstable/pod{other_uid}/{FIRST}")
    kubelet_uid = "3d6f4adc-4fc3-33f4-aa5f-2238f5eec649"
    kubelet_pinned = make_cgroup(hierarchy, f"kubepods/pod{kubelet_uid}/{SECOND}", cpus="8-9")
    agent, metrics = enforcer(tmp_path / "cgroup")
    agent.replace(
        "Pod",
        [
            pod(),  # no decision
            pod(uid=other_uid, name="other", node="node-b", allocation=decision("2-5")),  # another node's
            # Guaranteed with whole CPUs under a static CPU manager: the kubelet's to pin.
            pod(
                uid=kubelet_uid,
                name="db",
                qos="Guaranteed",
                cpu="2",
                containers={"app": SECOND},
                allocation=decision("0-1"),
            ),
        ],
    )
    agent.enforce(static_cpu_manager=True, numa_of_cpu=NUMA_OF_CPU)
    assert cpuset(undecided) == ("0-15", "0-1")
    assert cpuset(elsewhere) == ("0-15", "0-1")
    assert cpuset(kubelet_pinned) == ("8-9", "0-1")
    assert sample(metrics, "numasched_enforce_pins_total", action="pinned") == 0
    # Without a static CPU manager nobody pins that container: the agent does.
    agent.enforce(static_cpu_manager=False, numa_of_cpu=NUMA_OF_CPU)
    assert cpuset(kubelet_pinned) == ("0-1", "0")


def test_survives_a_vanished_cgroup_and_a_refused_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hierarchy = make_root(tmp_path / "cgroup", "v2")
    uids = ["4e7a5bed-5ad4-44a5-bb6a-3349a6ffd75a", "5f8b6cfe-6be5-55b6-cc7b-445ab7aae86b", UID]
    refused = make_cgroup(hierarchy, f"kubepods/burstable/pod{uids[1]}/{SECOND}")
    healthy = make_cgroup(hierarchy, LAYOUTS[("systemd", "containerd", "Burstable")])
    agent, metrics = enforcer(tmp_path / "cgroup")
    agent.replace(
        "Pod",
        [
            pod(uid=uids[0], name="gone", allocation=decision("2-5")),  # no cgroup at all
            pod(uid=uids[1], name="refused", containers={"app": SECOND}, allocation=decision("2-5")),
            pod(uid=uids[2], name="fine", allocation=decision("6-7")),
        ],
    )
    real_open = os.open

    def refusing_open(path: Any, flags: int, *args: Any) -> int:
        if str(path).startswith(str(refused)) and flags & os.O_WRONLY:
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", refusing_open)
    agent.enforce(False, NUMA_OF_CPU)
    assert cpuset(healthy) == ("6-7", "0")
    assert cpuset(refused) == ("0-15", "0-1")
    assert sample(metrics, "numasched_enforce_failures_total", reason="gone") == 1
    assert sample(metrics, "numasched_enforce_failures_total", reason="permission") == 1


def test_an_unreadable_decision_is_counted_once_and_nothing_is_written(tmp_path: Path) -> None:
    hierarchy = make_root(tmp_path / "cgroup", "v2")
    target = make_cgroup(hierarchy, LAYOUTS[("systemd", "containerd", "Burstable")])
    agent, metrics = enforcer(tmp_path / "cgroup")
    agent.replace("Pod", [pod(allocation='{"containers": {"app": {"cpuset": "banana"}}}')])
    agent.enforce(False, NUMA_OF_CPU)
    agent.enforce(False, NUMA_OF_CPU)
    assert cpuset(target) == ("0-15", "0-1")
    assert sample(metrics, "numasched_enforce_failures_total", reason="annotation") == 1


def test_restores_only_its_own_writes(tmp_path: Path) -> None:
    hierarchy = make_root(tmp_path / "cgroup", "v2")
    target = make_cgroup(hierarchy, LAYOUTS[("systemd", "containerd", "Burstable")], cpus="0-11", mems="0-1")
    other_uid = "6a9c7d0f-7cf6-66c7-dd8c-556bc8bbf97c"
    other = make_cgroup(hierarchy, f"kubepods/burstable/pod{other_uid}/{SECOND}")
    agent, metrics = enforcer(tmp_path / "cgroup")
    pods: list[Mapping[str, Any]] = [
        pod(allocation=decision("2-5", numa=[0])),
        pod(uid=other_uid, name="other", containers={"app": SECOND}, allocation=decision("8-9", numa=[1])),
    ]
    agent.replace("Pod", pods)
    agent.enforce(False, NUMA_OF_CPU)
    assert cpuset(target) == ("2-5", "0") and cpuset(other) == ("8-9", "1")
    # Someone else rewrites the second container's cpuset; then both decisions are withdrawn.
    (other / "cpuset.cpus").write_text("10-11")
    agent.replace("Pod", [pod(), pod(uid=other_uid, name="other", containers={"app": SECOND})])
    agent.enforce(False, NUMA_OF_CPU)
    assert cpuset(target) == ("0-11", "0-1")  # back to what it held before the agent
    assert cpuset(other) == ("10-11", "1")  # not the agent's value any more: left as it is
    assert sample(metrics, "numasched_enforce_pins_total", action="restored") == 1
    assert agent.written == {}


def podresources_usage(cpus: str, gpus: tuple[str, ...] = ()) -> NodeUsage:
    devices = {"nvidia.com/gpu": gpus} if gpus else {}
    return NodeUsage(
        source="podresources",
        pods=(
            PodUsage(
                namespace="default",
                name="db",
                containers=(ContainerAllocation("app", cpuset=IdSet.parse(cpus), devices=devices),),
            ),
        ),
    )


@pytest.mark.anyio
async def test_a_decision_the_kubelet_did_not_follow_is_reported_once(tmp_path: Path) -> None:
    make_root(tmp_path / "cgroup", "v2")
    agent, metrics = enforcer(tmp_path / "cgroup")
    agent.replace(
        "Pod",
        [
            pod(
                name="db",
                qos="Guaranteed",
                cpu="2",
                allocation=decision("0-1", numa=[0], devices={"nvidia.com/gpu": ["GPU-a"]}),
            )
        ],
    )
    usage = podresources_usage("8-9", gpus=("GPU-b",))
    observed, mismatches = agent.observe(usage, ALL_CPUS, static_cpu_manager=True, numa_of_cpu=NUMA_OF_CPU)
    assert observed == []  # the kubelet's own holdings are already in the usage
    assert {(m.resource, m.predicted, m.observed) for m in mismatches} == {
        ("cpu", "0-1", "8-9"),
        ("nvidia.com/gpu", "GPU-a", "GPU-b"),
    }
    sent: list[tuple[str, str, str]] = []

    async def emit(view: PodView, reason: str, message: str) -> bool:
        sent.append((view.key, reason, message))
        return len(sent) == 1  # the second event is refused

    await report_mismatches(mismatches, emit, metrics)
    assert [key for key, _, _ in sent] == ["default/db", "default/db"]
    assert all(reason == "NumaschedDecisionMismatch" for _, reason, _ in sent)
    assert any("cpu decided 0-1, the node has 8-9" in message for _, _, message in sent)
    assert sample(metrics, "numasched_enforce_event_failures_total") == 1
    assert sample(metrics, "numasched_decision_mismatch_total", resource="cpu") == 1
    # The same mismatch next period: neither counted nor sent again.
    _, again = agent.observe(usage, ALL_CPUS, True, NUMA_OF_CPU)
    assert again == []
    assert sample(metrics, "numasched_decision_mismatch_total", resource="cpu") == 1
    # A followed decision is no mismatch.
    _, none = agent.observe(podresources_usage("0-1", gpus=("GPU-a",)), ALL_CPUS, True, NUMA_OF_CPU)
    assert none == []


def test_a_pin_undone_on_the_node_is_observed_and_published(tmp_path: Path) -> None:
    hierarchy = make_root(tmp_path / "cgroup", "v2")
    target = make_cgroup(hierarchy, LAYOUTS[("systemd", "containerd", "Burstable")])
    agent, metrics = enforcer(tmp_path / "cgroup")
    agent.replace("Pod", [pod(allocation=decision("2-5", numa=[0]))])
    agent.enforce(False, NUMA_OF_CPU)
    usage = NodeUsage(source="podresources")
    observed, mismatches = agent.observe(usage, ALL_CPUS, False, NUMA_OF_CPU)
    assert mismatches == []
    assert [(p.uid, p.containers[0].cpuset.format()) for p in observed] == [(UID, "2-5")]
    # Something else moves the container (a runtime update, an operator): the node now differs.
    (target / "cpuset.cpus").write_text("12-15")
    (target / "cpuset.mems").write_text("1")
    observed, mismatches = agent.observe(usage, ALL_CPUS, False, NUMA_OF_CPU)
    assert {(m.resource, m.predicted, m.observed) for m in mismatches} == {
        ("cpu", "2-5", "12-15"),
        ("memory", "0", "1"),
    }
    assert sample(metrics, "numasched_decision_mismatch_total", resource="memory") == 1
    published = with_observed(usage, observed)
    assert [(p.key, p.containers[0].cpuset.format()) for p in published.pods] == [("default/web-0", "12-15")]


def test_an_unpinned_container_holds_no_cpus() -> None:
    assert pinned_cpus(ALL_CPUS, ALL_CPUS) == IdSet()
    assert pinned_cpus(IdSet.parse("0-20"), ALL_CPUS) == IdSet()
    assert pinned_cpus(IdSet.parse("3"), ALL_CPUS) == IdSet([3])


def test_observed_holdings_join_the_kubelets_by_pod() -> None:
    usage = NodeUsage(
        source="podresources",
        pods=(
            PodUsage(
                namespace="default",
                name="web-0",
                containers=(ContainerAllocation("gpu", devices={"nvidia.com/gpu": ("GPU-a",)}),),
            ),
        ),
    )
    seen = PodUsage("default", "web-0", UID, (ContainerAllocation("app", cpuset=IdSet.parse("2-5")),))
    merged = with_observed(usage, [seen])
    (only,) = merged.pods
    assert only.uid == UID
    assert {c.name: (c.cpuset.format(), dict(c.devices)) for c in only.containers} == {
        "gpu": ("", {"nvidia.com/gpu": ("GPU-a",)}),
        "app": ("2-5", {}),
    }


def test_a_cgroup_without_the_cpuset_controller_is_a_failure_of_its_own(tmp_path: Path) -> None:
    hierarchy = make_root(tmp_path / "cgroup", "v2")
    bare = hierarchy / LAYOUTS[("systemd", "containerd", "Burstable")]
    bare.mkdir(parents=True)  # cgroup.subtree_control of the parent lacks cpuset: no cpuset.* files
    agent, metrics = enforcer(tmp_path / "cgroup")
    agent.replace("Pod", [pod(allocation=decision("2-5"))])
    agent.enforce(False, NUMA_OF_CPU)
    assert sorted(path.name for path in bare.iterdir()) == []  # nothing created
    assert sample(metrics, "numasched_enforce_failures_total", reason="no-cpuset-controller") == 1


def test_the_ack_single_numa_node_gpu_pod_is_pinned_and_checked(tmp_path: Path) -> None:
    """ACK's example: 4 GPUs and 24 CPUs on one NUMA node (a Burstable pod on a node whose kubelet
    runs cpuManagerPolicy none), decided on NUMA node 1 of a 2-socket, 96-thread machine."""
    numa_of_cpu = {cpu: (cpu // 24) % 2 for cpu in range(96)}  # 0-23,48-71 node 0; 24-47,72-95 node 1
    hierarchy = make_root(tmp_path / "cgroup", "v1")
    target = make_cgroup(hierarchy, LAYOUTS[("systemd", "containerd", "Burstable")], cpus="0-95", mems="0-1")
    gpus = ["GPU-4", "GPU-5", "GPU-6", "GPU-7"]
    agent, metrics = enforcer(tmp_path / "cgroup")
    allocation = {"containers": {"app": {"cpuset": "24-35,72-83", "devices": {"nvidia.com/gpu": gpus}}}}
    agent.replace("Pod", [pod(name="train", cpu="24", allocation=allocation)])
    agent.enforce(static_cpu_manager=False, numa_of_cpu=numa_of_cpu)
    assert cpuset(target) == ("24-35,72-83", "1")
    given = NodeUsage(
        source="podresources",
        pods=(
            PodUsage(
                namespace="default",
                name="train",
                containers=(
                    ContainerAllocation("app", devices={"nvidia.com/gpu": ("GPU-0", "GPU-5", "GPU-6", "GPU-7")}),
                ),
            ),
        ),
    )
    observed, mismatches = agent.observe(given, IdSet(range(96)), False, numa_of_cpu)
    assert [(m.resource, m.predicted, m.observed) for m in mismatches] == [
        ("nvidia.com/gpu", "GPU-4,GPU-5,GPU-6,GPU-7", "GPU-0,GPU-5,GPU-6,GPU-7")
    ]
    assert sample(metrics, "numasched_decision_mismatch_total", resource="nvidia.com/gpu") == 1
    published = with_observed(given, observed)
    (entry,) = published.pods
    (container,) = entry.containers
    assert (entry.uid, container.cpuset.format(), container.devices["nvidia.com/gpu"][0]) == (
        UID,
        "24-35,72-83",
        "GPU-0",
    )
