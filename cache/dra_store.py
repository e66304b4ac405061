"""The cache's DRA objects (resource.k8s.io/v1): ResourceSlices, DeviceClasses, ResourceClaims and
ResourceClaimTemplates, the claims each pod references, and per node what its slices offer.

The cache hands every watch event of these kinds here (apply) and learns which nodes to rebuild;
at a snapshot it asks for a node's DRA view (node_view) and a pod's resolved claims (pod_claims).
Conversion is h4's (cache/convert_dra.py); a problem in an object is reported by kind, name and
field through the cache's problem handler, and the rest of the object keeps working.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from numasched.api.dra import ClaimAllocation, ClaimInfo, ClaimSpec, DeviceClassInfo, DraProblem, ResourceSliceInfo
from numasched.api.dra_claims import NodeDra, PodClaimRef, PodClaims
from numasched.cache.convert_dra import (
    claim_is_usable,
    convert_claim_template,
    convert_device_class,
    convert_resource_claim,
    convert_resource_slice,
)
from numasched.plugins.dra.allocator import DevicesInUse, NodeDevices, slice_applies_to

DRA_KINDS = ("ResourceSlice", "DeviceClass", "ResourceClaim", "ResourceClaimTemplate")
DRA_CLUSTER_SCOPED_KINDS = frozenset({"ResourceSlice", "DeviceClass"})

ProblemHandler = Callable[[str, str, str], None]
# Nodes to rebuild after an event: these names, or every node (None).
Affected = set[str] | None


def generated_claim_name(pod_name: str, pod_claim_name: str, pod_uid: str) -> str:
    """The name the resource claim controller gives a claim made from a template: generateName
    `<pod>-<pod claim>-` (each part cut to 16 characters when together they pass 47, as upstream
    does) plus five characters; ours are derived from the pod's uid, so a simulation is repeatable."""
    prefix = f"{pod_name}-{pod_claim_name}"
    if len(prefix) > 47:
        prefix = f"{pod_name[:16]}-{pod_claim_name[:16]}"
    suffix = hashlib.sha256(f"{pod_uid}/{pod_claim_name}".encode()).hexdigest()[:5]
    return f"{prefix}-{suffix}"


def pod_claim_refs(pod: Mapping[str, Any]) -> tuple[tuple[PodClaimRef, ...], dict[str, str | None], str]:
    """spec.resourceClaims, status.resourceClaimStatuses (pod claim name -> claim name; None: the
    controller decided no claim is needed), and a problem ("" when none) naming the field."""
    spec = pod.get("spec")
    status = pod.get("status")
    raw_refs = spec.get("resourceClaims") if isinstance(spec, Mapping) else None
    if not raw_refs:
        return (), {}, ""
    if not isinstance(raw_refs, list):
        return (), {}, "spec.resourceClaims: expected a list"
    refs: list[PodClaimRef] = []
    for index, raw in enumerate(raw_refs):
        field = f"spec.resourceClaims[{index}]"
        if not isinstance(raw, Mapping) or not isinstance(raw.get("name"), str) or not raw["name"]:
            return (), {}, f"{field}: expected an object with a name"
        claim_name, template_name = raw.get("resourceClaimName"), raw.get("resourceClaimTemplateName")
        if (claim_name is None) == (template_name is None):
            return (), {}, f"{field}: exactly one of resourceClaimName and resourceClaimTemplateName is required"
        if not isinstance(claim_name or template_name, str):
            return (), {}, f"{field}: the claim or template name must be a string"
        refs.append(PodClaimRef(raw["name"], claim_name, template_name))
    statuses: dict[str, str | None] = {}
    raw_statuses = status.get("resourceClaimStatuses") if isinstance(status, Mapping) else None
    for entry in raw_statuses if isinstance(raw_statuses, list) else ():
        if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
            claim = entry.get("resourceClaimName")
            statuses[entry["name"]] = claim if isinstance(claim, str) and claim else None
    return tuple(refs), statuses, ""


def _key_of(obj: Mapping[str, Any], namespaced: bool) -> str:
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        return "<no metadata>"
    name = str(metadata.get("name") or "<no name>")
    return f"{metadata.get('namespace') or 'default'}/{name}" if namespaced else name


class DraStore:
    def __init__(self, on_problem: ProblemHandler) -> None:
        self._on_problem = on_problem
        self.slices: dict[str, ResourceSliceInfo] = {}
        self.classes: dict[str, DeviceClassInfo] = {}
        # A copy made on every class change: node views share it, and it never changes under them.
        self._classes_view: Mapping[str, DeviceClassInfo] = {}
        self.claims: dict[str, ClaimInfo] = {}
        # Indexes for node views: slice keys per nodeName ("" for allNodes and node selectors),
        # allocated claim keys per node (None: devices reachable from all nodes).
        self._slices_by_node: dict[str, set[str]] = {}
        self._allocated_by_node: dict[str | None, set[str]] = {}
        # Claims the scheduler must not allocate (a problem in their spec or allocation): why.
        self._unusable: dict[str, str] = {}
        self.templates: dict[str, ClaimSpec] = {}
        # Claim owners' uids, by claim key (a claim made from a template belongs to its pod).
        self._owners: dict[str, frozenset[str]] = {}
        # Slice and class content version: part of every node view's key.
        self._version = 0
        # Per pod uid: its claim references, its claim statuses, and a problem in them.
        self._pods: dict[str, tuple[tuple[PodClaimRef, ...], dict[str, str | None], str]] = {}
        # The store's key of each object, by (kind, the cache's key), for deletions.
        self._store_keys: dict[tuple[str, str], str] = {}
        # Claim allocations of pods being bound (kube-scheduler's in-flight claims): written or
        # about to be written to the claims, and not yet seen in a claim event. Per pod uid.
        self._assumed: dict[str, dict[str, ClaimAllocation]] = {}

    @property
    def in_use_anywhere(self) -> bool:
        return bool(self.slices)

    def _report(self, problems: Iterable[DraProblem]) -> None:
        for problem in problems:
            name = f"{problem.namespace}/{problem.name}" if problem.namespace else problem.name
            self._on_problem(problem.kind, name, f"{problem.field}: {problem.message}")

    # ---- events -------------------------------------------------------------------------------

    def apply(self, kind: str, cache_key: str, obj: Mapping[str, Any] | None) -> Affected:
        """One watch event (obj None: deleted; the cache's key names what it deletes); the nodes
        whose DRA view it changes."""
        if obj is None:
            key = self._store_keys.pop((kind, cache_key), None)
            if key is None:
                return set()
        else:
            key = _key_of(obj, namespaced=kind in ("ResourceClaim", "ResourceClaimTemplate"))
            self._store_keys[(kind, cache_key)] = key
        if kind == "ResourceSlice":
            return self._on_slice(key, obj)
        if kind == "ResourceClaim":
            return self._on_claim(key, obj)
        if kind == "DeviceClass":
            self._version += 1
            self.classes.pop(key, None)
            if obj is not None:
                device_class, problems = convert_device_class(obj)
                self._report(problems)
                if device_class is not None:
                    self.classes[key] = device_class
            self._classes_view = dict(self.classes)
            return None
        if kind == "ResourceClaimTemplate":
            self.templates.pop(key, None)
            if obj is not None:
                converted, problems = convert_claim_template(obj)
                self._report(problems)
                if converted is not None:
                    self.templates[key] = converted[2]
            return set()
        return set()

    @staticmethod
    def _unindex(index: dict[Any, set[str]], where: str | None, key: str) -> None:
        keys = index.get(where)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del index[where]

    @staticmethod
    def _slice_nodes(found: ResourceSliceInfo | None) -> Affected:
        if found is None:
            return set()
        return {found.node_name} if found.node_name else None

    def _on_slice(self, key: str, obj: Mapping[str, Any] | None) -> Affected:
        old = self.slices.pop(key, None)
        if old is not None:
            self._unindex(self._slices_by_node, old.node_name or "", key)
        self._version += 1
        new = None
        if obj is not None:
            new, problems = convert_resource_slice(obj)
            self._report(problems)
            if new is not None:
                self.slices[key] = new
                self._slices_by_node.setdefault(new.node_name or "", set()).add(key)
        before, after = self._slice_nodes(old), self._slice_nodes(new)
        return None if before is None or after is None else before | after

    def _on_claim(self, key: str, obj: Mapping[str, Any] | None) -> Affected:
        old = self.claims.pop(key, None)
        self._unusable.pop(key, None)
        if old is not None and old.allocation is not None:
            self._unindex(self._allocated_by_node, old.allocation.node_name, key)
        self._owners.pop(key, None)
        new = None
        if obj is not None:
            new, problems = convert_resource_claim(obj)
            self._report(problems)
            if new is not None and not claim_is_usable(problems):
                # Parts of its spec were left out: allocating the rest would ignore what was asked.
                self._unusable[key] = "; ".join(
                    f"{problem.field}: {problem.message}"
                    for problem in problems
                    if problem.field.startswith(("spec", "status.allocation"))
                )
            if new is not None:
                self.claims[key] = new
                if new.allocation is not None:
                    self._allocated_by_node.setdefault(new.allocation.node_name, set()).add(key)
                metadata = obj.get("metadata")
                owners = metadata.get("ownerReferences") if isinstance(metadata, Mapping) else None
                self._owners[key] = frozenset(
                    str(owner["uid"])
                    for owner in owners or ()
                    if isinstance(owner, Mapping) and owner.get("kind") == "Pod" and owner.get("uid")
                )
        if new is None or new.allocation is not None:
            # The claim event now tells what it holds (or it is gone): no longer in flight.
            for held in self._assumed.values():
                held.pop(key, None)
        affected: set[str] = set()
        for claim in (old, new):
            if claim is None or claim.allocation is None:
                continue
            if claim.allocation.node_name is None:
                return None
            affected.add(claim.allocation.node_name)
        return affected

    def assume(self, uid: str, allocations: Mapping[str, ClaimAllocation]) -> Affected:
        """Claims a pod being bound was given: held on their node until a claim event shows them
        allocated (the pod's own event may come first), or the bind fails (forget)."""
        pending = {key: allocation for key, allocation in allocations.items() if allocation.results}
        if not pending:
            return set()
        self._assumed[uid] = pending
        return self._nodes_of(pending.values())

    def forget(self, uid: str) -> Affected:
        dropped = self._assumed.pop(uid, None)
        return self._nodes_of(dropped.values()) if dropped else set()

    @staticmethod
    def _nodes_of(allocations: Iterable[ClaimAllocation]) -> Affected:
        nodes: set[str] = set()
        for allocation in allocations:
            if allocation.node_name is None:
                return None
            nodes.add(allocation.node_name)
        return nodes

    def set_pod(self, uid: str, pod: Mapping[str, Any] | None) -> None:
        if pod is None:
            self._pods.pop(uid, None)
            self._assumed.pop(uid, None)
            return
        refs, statuses, problem = pod_claim_refs(pod)
        if refs or problem:
            self._pods[uid] = (refs, statuses, problem)
        else:
            self._pods.pop(uid, None)

    # ---- reading ------------------------------------------------------------------------------

    def pod_claims(self, uid: str, namespace: str, pod_name: str) -> PodClaims | None:
        """The pod's claims as they are now; None when it references none."""
        entry = self._pods.get(uid)
        if entry is None:
            return None
        refs, statuses, problem = entry
        if problem:
            return PodClaims(problem=f"pod {namespace}/{pod_name}: {problem}")
        resolved: list[ClaimInfo] = []
        for ref in refs:
            if ref.claim_name is not None:
                claim_name = ref.claim_name
            else:
                if ref.name not in statuses:
                    return PodClaims(
                        problem=f"waiting for the ResourceClaim of pod claim {ref.name!r} to be created from "
                        f"ResourceClaimTemplate {namespace}/{ref.template_name}"
                    )
                generated = statuses[ref.name]
                if generated is None:
                    continue  # the controller decided this pod claim needs no claim
                claim_name = generated
            claim = self.claims.get(f"{namespace}/{claim_name}")
            if claim is None:
                return PodClaims(
                    problem=f"waiting for ResourceClaim {namespace}/{claim_name} (pod claim {ref.name!r}): not found"
                )
            unusable = self._unusable.get(f"{namespace}/{claim_name}")
            if unusable:
                where = f"ResourceClaim {namespace}/{claim_name} (pod claim {ref.name!r})"
                return PodClaims(problem=f"{where} cannot be used: {unusable}")
            if ref.template_name is not None and uid not in self._owners.get(claim.key, frozenset()):
                return PodClaims(
                    problem=f"ResourceClaim {claim.key} (pod claim {ref.name!r}) was not created for this pod "
                    "(no ownerReference to it)"
                )
            resolved.append(claim)
        return PodClaims(tuple(resolved))

    def node_view(self, node_name: str, labels: Mapping[str, str]) -> NodeDra | None:
        """What the node's slices offer and what allocated claims hold of it; None when no slice
        applies to the node."""
        candidates = sorted(self._slices_by_node.get(node_name, set()) | self._slices_by_node.get("", set()))
        applying = [found for key in candidates if slice_applies_to(found := self.slices[key], node_name, labels)]
        if not applying:
            return None
        devices = NodeDevices.from_slices(node_name, applying)
        allocated = sorted(self._allocated_by_node.get(node_name, set()) | self._allocated_by_node.get(None, set()))
        allocations = [allocation for key in allocated if (allocation := self.claims[key].allocation) is not None]
        allocations.extend(
            allocation
            for held in self._assumed.values()
            for allocation in held.values()
            if allocation.node_name in (None, node_name)
        )
        in_use = DevicesInUse.from_allocations(allocations, devices)
        counters = tuple(sorted((key, tuple(sorted(values.items()))) for key, values in in_use.counters.items()))
        key = (self._version, tuple(device.id for device in devices.devices), in_use.devices, counters)
        return NodeDra(devices, in_use, self._classes_view, key)
