"""resource.k8s.io/v1 objects (dicts as the API server returns them) -> api/dra.py types.

Every problem names the object (kind, namespace/name) and the field path, e.g.
`ResourceSlice node1-gpu: spec.devices[3].attributes["index"]: expected exactly one of int, bool,
string, version, ...`. A bad device, request or constraint is left out (and reported) while the
rest of the object keeps working; a field the scheduler does not implement is reported, never
silently ignored. Nothing here raises on any JSON input.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from numasched.api.dra import ClaimAllocation, ClaimInfo, ClaimSpec, DeviceClassInfo, DraProblem, ResourceSliceInfo


def convert_resource_slice(obj: Any) -> tuple[ResourceSliceInfo | None, list[DraProblem]]:
    """A ResourceSlice; None when it is unusable as a whole (no name, driver or pool)."""
    raise NotImplementedError


def convert_device_class(obj: Any) -> tuple[DeviceClassInfo | None, list[DraProblem]]:
    """A DeviceClass; None when it has no name. A selector that is not CEL is reported."""
    raise NotImplementedError


def convert_resource_claim(obj: Any) -> tuple[ClaimInfo | None, list[DraProblem]]:
    """A ResourceClaim with its status.allocation and status.reservedFor."""
    raise NotImplementedError


def convert_claim_template(obj: Any) -> tuple[tuple[str, str, ClaimSpec] | None, list[DraProblem]]:
    """A ResourceClaimTemplate: (namespace, name, spec.spec)."""
    raise NotImplementedError


def allocation_status(allocation: ClaimAllocation, pod_name: str, pod_uid: str) -> dict[str, Any]:
    """The claim `status` the API server expects for an allocation reserved for one pod:
    {"allocation": {"devices": {"results": [...]}, "nodeSelector": ...}, "reservedFor": [...]}."""
    raise NotImplementedError


def claim_spec_of(
    raw: Mapping[str, Any], kind: str, namespace: str, name: str, field: str
) -> tuple[ClaimSpec, list[DraProblem]]:
    """A ResourceClaimSpec (`spec` of a claim, `spec.spec` of a template)."""
    raise NotImplementedError
