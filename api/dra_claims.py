"""A pod's ResourceClaims and a node's DRA devices as a session sees them, and how the devices a
session allocates to claims are kept in the node's NUMA ledger.

The ledger (NodeInfo.numa_usage) counts device ids per resource name. A claim's devices chosen in
a session are recorded there under one resource per claim, `dra.numasched.io/<namespace>/<claim>`,
each id naming the result (`<request>=<driver>/<pool>/<device>`): the statement's roll back then
releases them with the pod's CPUs, and every later pod of the session sees them taken. Devices of
claims the API server already shows allocated are counted from the claims themselves (NodeDra.in_use),
once per claim however many pods share it.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import TYPE_CHECKING

import attrs

from numasched.api.allocation import PodAllocation
from numasched.api.dra import ClaimAllocation, ClaimInfo, DeviceClassInfo, DeviceResult

if TYPE_CHECKING:
    # Types only: the allocator's node view and in-use set are plain data (api/ imports no plugin).
    from numasched.plugins.dra.allocator import DevicesInUse, NodeDevices

DRA_RESOURCE_PREFIX = "dra.numasched.io/"
_ADMIN_SUFFIX = "#admin"


@attrs.frozen(slots=True)
class PodClaimRef:
    """One entry of pod.spec.resourceClaims: the claim by name, or the template to create it from."""

    name: str
    claim_name: str | None = None
    template_name: str | None = None


@attrs.frozen(slots=True)
class PodClaims:
    """The pod's claims, resolved in the order of spec.resourceClaims; `problem` says why they
    cannot be (a claim missing, a template's claim not created yet): the pod then waits."""

    claims: tuple[ClaimInfo, ...] = ()
    problem: str = ""

    def pending(self) -> tuple[ClaimInfo, ...]:
        """Claims without an allocation: the scheduler must allocate them."""
        return tuple(claim for claim in self.claims if claim.allocation is None)


@attrs.frozen(slots=True, eq=False)
class NodeDra:
    """What a node offers to claims: the devices of the slices that apply to it, the devices the
    API server shows allocated to claims, the DeviceClasses. `key` is equal for two views exactly
    when they are equal (device content version, device ids, in use), for admission caches."""

    devices: NodeDevices
    in_use: DevicesInUse
    classes: Mapping[str, DeviceClassInfo]
    key: Hashable


def claim_resource(claim_key: str) -> str:
    """The ledger resource name of a claim ("namespace/name")."""
    return DRA_RESOURCE_PREFIX + claim_key


def is_claim_resource(resource: str) -> bool:
    return resource.startswith(DRA_RESOURCE_PREFIX)


def result_id(result: DeviceResult) -> str:
    suffix = _ADMIN_SUFFIX if result.admin_access else ""
    return f"{result.request}={result.driver}/{result.pool}/{result.device}{suffix}"


def parse_result_id(value: str) -> DeviceResult | None:
    """The result an id names; None when it is not one (driver names have no '/', device names
    neither, pool names may)."""
    request, sep, rest = value.partition("=")
    admin = rest.endswith(_ADMIN_SUFFIX)
    if admin:
        rest = rest[: -len(_ADMIN_SUFFIX)]
    driver, _, tail = rest.partition("/")
    pool, _, device = tail.rpartition("/")
    if not sep or not request or not driver or not pool or not device:
        return None
    return DeviceResult(request=request, driver=driver, pool=pool, device=device, admin_access=admin)


def ledger_entries(allocations: Iterable[tuple[str, ClaimAllocation]]) -> dict[str, tuple[str, ...]]:
    """Ledger entries (resource -> ids) for claims allocated in a session."""
    return {
        claim_resource(claim_key): tuple(result_id(result) for result in allocation.results)
        for claim_key, allocation in allocations
    }


def claim_allocations(devices: Mapping[str, Iterable[str]], node_name: str | None) -> dict[str, ClaimAllocation]:
    """The claim allocations recorded in a pod's ledger entries (PodAllocation.devices merged over
    its containers), by claim key."""
    found: dict[str, ClaimAllocation] = {}
    for resource, ids in devices.items():
        if not is_claim_resource(resource):
            continue
        results = tuple(result for result in map(parse_result_id, ids) if result is not None)
        found[resource[len(DRA_RESOURCE_PREFIX) :]] = ClaimAllocation(results=results, node_name=node_name)
    return found


def in_use_with_ledger(dra: NodeDra, used: Mapping[str, frozenset[str]]) -> NodeDra:
    """The node's DRA view with the devices the session's ledger holds for claims it allocated
    taken out too (the same view when it holds none)."""
    held = {resource: ids for resource, ids in used.items() if ids and is_claim_resource(resource)}
    if not held:
        return dra
    in_use = dra.in_use
    for _, allocation in sorted(claim_allocations(held, dra.devices.node_name).items(), key=lambda item: item[0]):
        # A pod being bound is in the ledger and among the node's in-flight claims: once only.
        fresh = tuple(result for result in allocation.results if result.device_id not in in_use.devices)
        if fresh:
            in_use = in_use.plus(attrs.evolve(allocation, results=fresh), dra.devices)
    key = (dra.key, tuple(sorted((resource, tuple(sorted(ids))) for resource, ids in held.items())))
    return NodeDra(dra.devices, in_use, dra.classes, key)


def without_claims(allocation: PodAllocation) -> PodAllocation:
    """The allocation without its ResourceClaim ledger entries: the annotation a binding carries
    names CPUs and device-plugin ids; the claims' devices are written to the claims."""
    if not any(is_claim_resource(resource) for container in allocation.containers for resource in container.devices):
        return allocation
    containers = []
    for container in allocation.containers:
        devices = {resource: ids for resource, ids in container.devices.items() if not is_claim_resource(resource)}
        if devices or container.cpuset or container.memory or (container.name and container.numa is not None):
            containers.append(attrs.evolve(container, devices=devices))
    return PodAllocation(tuple(containers))
