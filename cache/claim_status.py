"""Writing a placed pod's ResourceClaims before its binding, and taking the writes back when the
binding fails: what kube-scheduler's DRA plugin does in PreBind / Unreserve.

For each claim of the pod: a claim the session allocated gets `status.allocation` (the devices'
results and the node selector) and the pod in `status.reservedFor`; a claim already allocated (a
shared claim) only gets the pod added to `status.reservedFor`. Each write reads the claim and
replaces its status with the resourceVersion read as precondition, so a concurrent writer makes it
fail (409) rather than being overwritten; a claim another writer allocated to other devices is
refused. On a failed binding the pod leaves `reservedFor` again, and an allocation we wrote is
cleared when no other consumer has reserved the claim meanwhile.

The Kubernetes binder (cache/kube/binder.py) and the simulated cluster (cache/simcluster.py)
implement ClaimStore; the logic here is shared.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Protocol

import attrs

from numasched.api.dra import ClaimAllocation
from numasched.api.dra_claims import claim_allocations
from numasched.api.task import TaskInfo
from numasched.cache.convert_dra import allocation_status

# ResourceClaimReservedForMaxSize in resource/v1 types.go.
RESERVED_FOR_MAX = 256


@attrs.frozen(slots=True)
class ClaimWrite:
    """One claim's write for a pod: the allocation to set (None: it is allocated already, only
    reserve it for the pod)."""

    namespace: str
    name: str
    allocation: ClaimAllocation | None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class ClaimStore(Protocol):
    """Where claims are read and their status written."""

    async def get_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The claim as stored now; None when it does not exist. Raises ClaimWriteError on a
        failure to read."""
        ...

    async def put_claim_status(self, claim: Mapping[str, Any]) -> None:
        """Replace the claim's status (precondition: its metadata.resourceVersion). Raises
        ClaimWriteError (conflict=True on a 409)."""
        ...


class ClaimWriteError(Exception):
    def __init__(self, message: str, *, conflict: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.conflict = conflict


def claim_writes(task: TaskInfo, node_name: str) -> list[ClaimWrite] | str:
    """The writes the pod's claims need on this node, or why they cannot be made (a claim the
    pod must allocate that its allocation holds no devices for)."""
    claims = task.claims
    if claims is None:
        return []
    devices: dict[str, list[str]] = {}
    for container in task.allocation.containers if task.allocation is not None else ():
        for resource, ids in container.devices.items():
            devices.setdefault(resource, []).extend(ids)
    decided = claim_allocations(devices, node_name)
    writes: list[ClaimWrite] = []
    for claim in claims.claims:
        if claim.allocation is not None:
            writes.append(ClaimWrite(claim.namespace, claim.name, None))
            continue
        allocation = decided.get(claim.key)
        if allocation is None or not allocation.results:
            return f"ResourceClaim {claim.key} has no devices allocated for pod {task.key}"
        writes.append(ClaimWrite(claim.namespace, claim.name, allocation))
    return writes


def _results_key(allocation: Mapping[str, Any]) -> frozenset[tuple[str, str, str, str]]:
    devices = allocation.get("devices")
    results = devices.get("results") if isinstance(devices, Mapping) else None
    return frozenset(
        (str(r.get("request")), str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
        for r in results or ()
        if isinstance(r, Mapping)
    )


def reserved(claim: Mapping[str, Any], write: ClaimWrite, pod_name: str, pod_uid: str) -> dict[str, Any] | str:
    """The claim with the write applied to its status, or why it cannot be."""
    updated = copy.deepcopy(dict(claim))
    status = updated.setdefault("status", {})
    if not isinstance(status, dict):
        status = updated["status"] = {}
    current = status.get("allocation")
    if write.allocation is not None:
        wanted = allocation_status(write.allocation, pod_name, pod_uid)["allocation"]
        if isinstance(current, Mapping) and current:
            if _results_key(current) != _results_key(wanted):
                return f"ResourceClaim {write.key} was allocated by someone else meanwhile"
        else:
            status["allocation"] = wanted
    elif not (isinstance(current, Mapping) and current):
        return f"ResourceClaim {write.key} is no longer allocated"
    consumers = [entry for entry in status.get("reservedFor") or () if isinstance(entry, Mapping)]
    if not any(entry.get("uid") == pod_uid for entry in consumers):
        if len(consumers) >= RESERVED_FOR_MAX:
            return f"ResourceClaim {write.key} is reserved for {RESERVED_FOR_MAX} consumers already"
        consumers.append({"resource": "pods", "name": pod_name, "uid": pod_uid})
    status["reservedFor"] = consumers
    return updated


def released(claim: Mapping[str, Any], write: ClaimWrite, pod_uid: str) -> dict[str, Any] | None:
    """The claim with the pod out of reservedFor and, when this write set the allocation and no
    one else reserved the claim, the allocation cleared; None when there is nothing to undo."""
    status = claim.get("status")
    if not isinstance(status, Mapping):
        return None
    consumers = [entry for entry in status.get("reservedFor") or () if isinstance(entry, Mapping)]
    remaining = [entry for entry in consumers if entry.get("uid") != pod_uid]
    clear = write.allocation is not None and not remaining and bool(status.get("allocation"))
    if len(remaining) == len(consumers) and not clear:
        return None
    updated = copy.deepcopy(dict(claim))
    new_status = dict(updated.get("status") or {})
    if remaining:
        new_status["reservedFor"] = remaining
    else:
        new_status.pop("reservedFor", None)
    if clear:
        new_status.pop("allocation", None)
    updated["status"] = new_status
    return updated


async def reserve_claims(store: ClaimStore, task: TaskInfo, node_name: str) -> tuple[list[ClaimWrite], str]:
    """Write every claim of the pod; the writes made, and "" or why the rest could not be (the
    writes made are then taken back already)."""
    planned = claim_writes(task, node_name)
    if isinstance(planned, str):
        return [], planned
    done: list[ClaimWrite] = []
    for write in planned:
        try:
            claim = await store.get_claim(write.namespace, write.name)
            if claim is None:
                raise ClaimWriteError(f"ResourceClaim {write.key} not found")
            updated = reserved(claim, write, task.name, task.uid)
            if isinstance(updated, str):
                raise ClaimWriteError(updated)
            await store.put_claim_status(updated)
        except ClaimWriteError as error:
            await release_claims(store, done, task)
            return [], error.message
        done.append(write)
    return done, ""


async def release_claims(store: ClaimStore, writes: list[ClaimWrite], task: TaskInfo) -> list[str]:
    """Take back what reserve_claims wrote (best effort: a failure is returned, the resource claim
    controller clears reservations of pods that are gone)."""
    failures: list[str] = []
    for write in reversed(writes):
        try:
            claim = await store.get_claim(write.namespace, write.name)
            undone = None if claim is None else released(claim, write, task.uid)
            if undone is not None:
                await store.put_claim_status(undone)
        except ClaimWriteError as error:
            failures.append(f"ResourceClaim {write.key}: {error.message}")
    return failures
