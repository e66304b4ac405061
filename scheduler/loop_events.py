"""Which watch events could make a pod that did not fit schedulable.

kube-scheduler moves its unschedulable pods back to the active queue on the cluster events their
plugins registered for (EventsToRegister: AssignedPodDelete, NodeAdd, NodeUpdate of a scheduling
property, ...), and ignores the rest: a node's heartbeat, a pod's status. The same here, for what
our plugins read:

- a pod with a node deleted, or finished (Succeeded, Failed): its CPUs, devices and resources are
  free again;
- a Node added, or changed in what scheduling reads (labels, annotations, spec: taints and
  unschedulable; status: capacity, allocatable, the conditions' type and status), not in its
  heartbeats;
- a Numatopology or NodeResourceTopology added, changed (anything but metadata bookkeeping) or
  deleted;
- a PodGroup added, deleted, or changed in spec, labels, annotations or phase (not in the
  conditions we write ourselves);
- a Queue added, deleted, or changed in spec or state;
- a pod of ours still waiting for a node whose spec, labels or annotations changed: that pod alone
  (not its status, which our own reports write);
- a re-list of any of these kinds (a dropped watch may have hidden a deletion).

PriorityClasses order pods but never make one fit: ignored. Fingerprints of the fields that
matter are kept per object, so an update is judged against the previous version.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from numasched.cache.events import EventType, ObjectEvent, object_key, object_name

FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
TOPOLOGY_KINDS = frozenset({"Numatopology", "NodeResourceTopology"})
# Kinds whose changes can make a waiting pod fit (Pod is judged per event).
WATCHED_KINDS = frozenset({"Pod", "Node", "PodGroup", "Queue", *TOPOLOGY_KINDS})
# Metadata that changes with every write and says nothing about scheduling.
_BOOKKEEPING = frozenset({"resourceVersion", "managedFields", "generation", "creationTimestamp", "uid", "selfLink"})


@attrs.frozen(slots=True)
class ClusterChange:
    """Why waiting pods may fit now; `pod_uid` set when only that pod changed."""

    reason: str
    pod_uid: str = ""


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _fingerprint(*parts: Any) -> int:
    # Sorted JSON: two versions that say the same give the same text whatever their key order.
    try:
        return hash(json.dumps(parts, sort_keys=True, default=str))
    except (TypeError, ValueError, RecursionError):
        # Keys that do not sort together (an int beside a str, from YAML), or absurd nesting:
        # the text as it comes. At worst an unchanged object counts as changed (a retry too many).
        return hash(repr(parts))


def node_fingerprint(obj: Mapping[str, Any]) -> int:
    metadata, status = _mapping(obj.get("metadata")), _mapping(obj.get("status"))
    conditions = status.get("conditions")
    listed = conditions if isinstance(conditions, list) else []
    # Type and status only: the heartbeat and transition times change without meaning anything.
    condition_states = sorted((str(c.get("type")), str(c.get("status"))) for c in listed if isinstance(c, Mapping))
    return _fingerprint(
        metadata.get("labels"),
        metadata.get("annotations"),
        obj.get("spec"),
        status.get("capacity"),
        status.get("allocatable"),
        condition_states,
    )


def topology_fingerprint(obj: Mapping[str, Any]) -> int:
    metadata = {k: v for k, v in _mapping(obj.get("metadata")).items() if k not in _BOOKKEEPING}
    return _fingerprint(metadata, {k: v for k, v in obj.items() if k != "metadata"})


def pod_group_fingerprint(obj: Mapping[str, Any]) -> int:
    metadata = _mapping(obj.get("metadata"))
    return _fingerprint(
        metadata.get("labels"), metadata.get("annotations"), obj.get("spec"), _mapping(obj.get("status")).get("phase")
    )


def queue_fingerprint(obj: Mapping[str, Any]) -> int:
    return _fingerprint(obj.get("spec"), _mapping(obj.get("status")).get("state"))


def waiting_pod_view(obj: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    """What scheduling reads of a pod, kept by reference (no copy, no serialisation: every new pod
    passes here) and compared by value when the pod is updated. Sound because each watch event
    is parsed afresh: no delivered object is changed in place afterwards."""
    metadata = _mapping(obj.get("metadata"))
    return metadata.get("labels"), metadata.get("annotations"), obj.get("spec")


_FINGERPRINTS = {
    "Node": node_fingerprint,
    "Numatopology": topology_fingerprint,
    "NodeResourceTopology": topology_fingerprint,
    "PodGroup": pod_group_fingerprint,
    "Queue": queue_fingerprint,
}


def pod_uid(obj: Mapping[str, Any]) -> str:
    """The uid the cache gives the pod's task: metadata.uid, else namespace/name."""
    metadata = _mapping(obj.get("metadata"))
    uid = metadata.get("uid")
    if uid:
        return str(uid)
    return f"{metadata.get('namespace') or 'default'}/{metadata.get('name') or ''}"


class ClusterChanges:
    """Judges each watch event against the previous version of its object. Called on the event
    loop as the informers deliver; never raises on a malformed object (the cache reports those)."""

    def __init__(self, scheduler_names: Iterable[str]) -> None:
        self._scheduler_names = frozenset(scheduler_names)
        self._fingerprints: dict[str, dict[str, int]] = {kind: {} for kind in _FINGERPRINTS}
        # Unbound pods of ours, by uid: what scheduling reads of them.
        self._waiting_pods: dict[str, tuple[Any, Any, Any]] = {}
        # Bound pods already seen finished, so each frees its node once.
        self._finished: set[str] = set()

    def _ours_and_waiting(self, obj: Mapping[str, Any]) -> bool:
        spec = _mapping(obj.get("spec"))
        return not spec.get("nodeName") and spec.get("schedulerName") in self._scheduler_names

    def judge(self, event: ObjectEvent) -> ClusterChange | None:
        """The change `event` makes for waiting pods, or None when it cannot make one fit."""
        if event.kind == "Pod":
            return self._judge_pod(event)
        fingerprints = self._fingerprints.get(event.kind)
        if fingerprints is None:
            return None
        key = object_key(event.kind, event.obj)
        if event.type is EventType.DELETED:
            fingerprints.pop(key, None)
            # A Node leaving frees nothing; a topology, PodGroup or Queue leaving changes the rules.
            return None if event.kind == "Node" else ClusterChange(f"{event.kind} {key} deleted")
        fingerprint = _FINGERPRINTS[event.kind](event.obj)
        previous = fingerprints.get(key)
        fingerprints[key] = fingerprint
        if previous == fingerprint:
            return None
        verb = "added" if previous is None else "changed"
        return ClusterChange(f"{event.kind} {key} {verb}")

    def _judge_pod(self, event: ObjectEvent) -> ClusterChange | None:
        obj = event.obj
        uid = pod_uid(obj)
        spec, status = _mapping(obj.get("spec")), _mapping(obj.get("status"))
        node = spec.get("nodeName")
        if event.type is EventType.DELETED:
            self._waiting_pods.pop(uid, None)
            if not node or uid in self._finished:
                self._finished.discard(uid)
                return None
            return ClusterChange(f"pod {object_name(obj)} deleted from node {node}")
        if node:
            self._waiting_pods.pop(uid, None)
            if status.get("phase") in FINISHED_PHASES and uid not in self._finished:
                self._finished.add(uid)
                return ClusterChange(f"pod {object_name(obj)} finished on node {node}")
            return None
        if not self._ours_and_waiting(obj):
            return None
        view = waiting_pod_view(obj)
        previous = self._waiting_pods.get(uid)
        self._waiting_pods[uid] = view
        if previous is None or previous == view:
            return None
        return ClusterChange(f"pod {object_name(obj)} changed", pod_uid=uid)

    def relisted(self, kind: str, objects: Iterable[Mapping[str, Any]]) -> ClusterChange | None:
        """A full list replaced what was known of `kind`: fingerprints start over from it, and
        since the watch that was lost may have hidden a deletion, it counts as a change."""
        if kind not in WATCHED_KINDS:
            return None
        if kind == "Pod":
            self._waiting_pods.clear()
            self._finished.clear()
            for obj in objects:
                if self._ours_and_waiting(obj):
                    self._waiting_pods[pod_uid(obj)] = waiting_pod_view(obj)
                elif _mapping(obj.get("status")).get("phase") in FINISHED_PHASES:
                    self._finished.add(pod_uid(obj))
        else:
            fingerprint = _FINGERPRINTS[kind]
            self._fingerprints[kind] = {object_key(kind, obj): fingerprint(obj) for obj in objects}
        return ClusterChange(f"{kind} list re-read")
