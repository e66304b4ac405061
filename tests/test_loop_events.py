"""Which watch events re-activate pods that did not fit (kube-scheduler's EventsToRegister, for
what our plugins read), and how the informers' side pulls the cycle trigger for them."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest

from numasched.cache.events import EventType, ObjectEvent
from numasched.scheduler.loop import CycleTrigger
from numasched.scheduler.loop_events import ClusterChanges
from numasched.scheduler.loop_unschedulable import UnschedulablePods
from numasched.scheduler.runner import ArrivalWatch

ADDED, MODIFIED, DELETED = EventType.ADDED, EventType.MODIFIED, EventType.DELETED


def pod(name: str, *, node: str = "", phase: str = "Pending", scheduler: str = "numasched") -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": scheduler, "containers": [{"name": "c", "image": "x"}]}
    if node:
        spec["nodeName"] = node
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "1"},
        "spec": spec,
        "status": {"phase": phase},
    }


def node(name: str, *, heartbeat: str = "t0", cpu: str = "64", taints: list[Any] | None = None) -> dict[str, Any]:
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": {"zone": "a"}, "resourceVersion": heartbeat},
        "spec": {"taints": taints or []},
        "status": {
            "allocatable": {"cpu": cpu},
            "capacity": {"cpu": cpu},
            "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": heartbeat}],
        },
    }


def with_changes(obj: Mapping[str, Any], **paths: Any) -> dict[str, Any]:
    """A deep copy with dotted paths set (a__b=value sets obj['a']['b'])."""
    changed = copy.deepcopy(dict(obj))
    for path, value in paths.items():
        *parents, last = path.split("__")
        target = changed
        for part in parents:
            target = target.setdefault(part, {})
        target[last] = value
    return changed


def judged(changes: ClusterChanges, *events: ObjectEvent) -> list[str | None]:
    out: list[str | None] = []
    for event in events:
        change = changes.judge(event)
        out.append(None if change is None else change.reason + (f" [{change.pod_uid}]" if change.pod_uid else ""))
    return out


def test_a_bound_pod_deleted_or_finished_frees_its_node_once() -> None:
    changes = ClusterChanges(["numasched"])
    running = pod("a", node="n1", phase="Running")
    assert judged(
        changes,
        ObjectEvent("Pod", ADDED, running),
        ObjectEvent("Pod", MODIFIED, with_changes(running, status__phase="Succeeded")),
        ObjectEvent("Pod", MODIFIED, with_changes(running, status__phase="Succeeded", metadata__resourceVersion="9")),
        ObjectEvent("Pod", DELETED, with_changes(running, status__phase="Succeeded")),
        ObjectEvent("Pod", DELETED, pod("b", node="n2", phase="Running")),
    ) == [None, "pod ns/a finished on node n1", None, None, "pod ns/b deleted from node n2"]


def test_a_waiting_pod_counts_only_when_what_scheduling_reads_of_it_changes() -> None:
    changes = ClusterChanges(["numasched"])
    waiting = pod("w")
    reported = with_changes(
        waiting,
        status__conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        metadata__resourceVersion="2",
    )
    relabelled = with_changes(reported, metadata__labels={"tier": "gold"})
    assert judged(
        changes,
        ObjectEvent("Pod", ADDED, waiting),
        # Our own PodScheduled report: not a change.
        ObjectEvent("Pod", MODIFIED, reported),
        ObjectEvent("Pod", MODIFIED, relabelled),
        # Bound (by us): not a change; an unbound pod deleted frees nothing.
        ObjectEvent("Pod", MODIFIED, with_changes(relabelled, spec__nodeName="n1")),
        ObjectEvent("Pod", DELETED, pod("gone")),
        # Another scheduler's pending pod: none of ours.
        ObjectEvent("Pod", ADDED, pod("theirs", scheduler="default-scheduler")),
    ) == [None, None, "pod ns/w changed [uid-w]", None, None, None]


def test_a_node_counts_when_added_or_changed_in_what_scheduling_reads_not_in_its_heartbeat() -> None:
    changes = ClusterChanges(["numasched"])
    first = node("n1")
    assert judged(
        changes,
        ObjectEvent("Node", ADDED, first),
        ObjectEvent("Node", MODIFIED, node("n1", heartbeat="t1")),
        ObjectEvent("Node", MODIFIED, node("n1", heartbeat="t2", cpu="96")),
        ObjectEvent(
            "Node", MODIFIED, node("n1", heartbeat="t3", cpu="96", taints=[{"key": "k", "effect": "NoSchedule"}])
        ),
        ObjectEvent("Node", MODIFIED, with_changes(node("n1", cpu="96"), metadata__labels={"zone": "b"})),
        ObjectEvent("Node", DELETED, first),
    ) == ["Node n1 added", None, "Node n1 changed", "Node n1 changed", "Node n1 changed", None]


@pytest.mark.parametrize("kind", ["Numatopology", "NodeResourceTopology"])
def test_a_topology_object_counts_when_its_content_changes_or_it_goes(kind: str) -> None:
    changes = ClusterChanges(["numasched"])
    topology = {"kind": kind, "metadata": {"name": "n1", "resourceVersion": "1"}, "spec": {"numares": {"cpu": 1}}}
    assert judged(
        changes,
        ObjectEvent(kind, ADDED, topology),
        ObjectEvent(kind, MODIFIED, with_changes(topology, metadata__resourceVersion="2")),
        ObjectEvent(kind, MODIFIED, with_changes(topology, spec__numares={"cpu": 2})),
        ObjectEvent(kind, DELETED, topology),
    ) == [f"{kind} n1 added", None, f"{kind} n1 changed", f"{kind} n1 deleted"]


def test_a_pod_group_counts_for_its_spec_and_phase_not_for_the_conditions_we_write() -> None:
    changes = ClusterChanges(["numasched"])
    group = {
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "ns"},
        "spec": {"minMember": 3},
        "status": {"phase": "Pending"},
    }
    assert judged(
        changes,
        ObjectEvent("PodGroup", ADDED, group),
        ObjectEvent("PodGroup", MODIFIED, with_changes(group, status__conditions=[{"type": "Unschedulable"}])),
        ObjectEvent("PodGroup", MODIFIED, with_changes(group, status__phase="Inqueue")),
        ObjectEvent("PodGroup", MODIFIED, with_changes(group, status__phase="Inqueue", spec__minMember=2)),
        ObjectEvent("PodGroup", DELETED, group),
        ObjectEvent("PriorityClass", ADDED, {"kind": "PriorityClass", "metadata": {"name": "high"}, "value": 9}),
    ) == ["PodGroup ns/g added", None, "PodGroup ns/g changed", "PodGroup ns/g changed", "PodGroup ns/g deleted", None]


def test_malformed_objects_are_judged_without_raising() -> None:
    changes = ClusterChanges(["numasched"])
    odd: list[ObjectEvent] = [
        ObjectEvent("Pod", ADDED, {"kind": "Pod", "metadata": "nope", "spec": "nope"}),
        ObjectEvent("Pod", DELETED, {"kind": "Pod"}),
        ObjectEvent("Node", MODIFIED, {"kind": "Node", "status": {"conditions": ["x", 3]}}),
        ObjectEvent("Queue", ADDED, {"kind": "Queue", "metadata": {"name": "q"}, "status": []}),
        # Keys JSON cannot sort together (YAML allows them).
        ObjectEvent("PodGroup", ADDED, {"kind": "PodGroup", "metadata": {"name": "g"}, "spec": {1: "a", "b": 2}}),
    ]
    judged_odd = [change is not None for change in (changes.judge(event) for event in odd)]
    assert judged_odd == [False, False, True, True, True]


class RecordingCache:
    def __init__(self) -> None:
        self.applied = 0

    def apply(self, event: ObjectEvent) -> None:
        self.applied += 1

    def replace(self, kind: str, objects: list[Mapping[str, Any]]) -> None:
        self.applied += 1


def test_the_watch_pulls_the_trigger_when_a_waiting_pod_may_be_tried_at_once() -> None:
    now = [100.0]
    waiting = UnschedulablePods()
    trigger = CycleTrigger()
    watch = ArrivalWatch(
        RecordingCache(), trigger, frozenset({"numasched"}), unschedulable=waiting, clock=lambda: now[0]
    )
    watch.replace("Node", [node("n1")])
    assert not trigger.asked()
    waiting.record(set(), {"uid-w": "no room"}, now=100.0, changes_at_start=waiting.changes)
    # A heartbeat: nothing.
    watch.apply(ObjectEvent("Node", MODIFIED, node("n1", heartbeat="t1")))
    assert not trigger.asked()
    # A bound pod deleted inside the backoff: moved, but no cycle yet (the period will come).
    watch.apply(ObjectEvent("Pod", DELETED, pod("a", node="n1", phase="Running")))
    assert not trigger.asked() and waiting.last_change == "pod ns/a deleted from node n1"
    # After its backoff, a new node: a cycle now.
    waiting.record(set(), {"uid-w": "no room"}, now=100.5, changes_at_start=waiting.changes)
    now[0] = 103.0
    watch.apply(ObjectEvent("Node", ADDED, node("n2")))
    assert trigger.asked()
    assert waiting.held_back({}, now[0]) == {}
