"""Watch events as the cache consumes them, from the Kubernetes API or the simulator alike."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import attrs


class EventType(enum.StrEnum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


@attrs.frozen(slots=True)
class ObjectEvent:
    kind: str
    type: EventType
    obj: Mapping[str, Any]


# Kinds whose objects have no namespace: one named like its node, whatever metadata.namespace says.
CLUSTER_SCOPED_KINDS = frozenset(
    {"Node", "Numatopology", "NodeResourceTopology", "Queue", "PriorityClass", "ResourceSlice", "DeviceClass"}
)


def object_key(kind: str, obj: Mapping[str, Any]) -> str:
    """The name the cache knows an object by: namespace/name for namespaced kinds, the name alone
    for cluster-scoped ones (a stray metadata.namespace there must not hide a topology from its
    node); never raises on a malformed object."""
    if kind not in CLUSTER_SCOPED_KINDS:
        return object_name(obj)
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(metadata, Mapping):
        return "<no metadata>"
    return str(metadata.get("name") or "<no name>")


def object_name(obj: Mapping[str, Any]) -> str:
    """namespace/name or name, for messages; never raises on a malformed object."""
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(metadata, Mapping):
        return "<no metadata>"
    name = str(metadata.get("name") or "<no name>")
    namespace = metadata.get("namespace")
    return f"{namespace}/{name}" if namespace else name
