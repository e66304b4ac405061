"""The DRA hint provider: a pod's ResourceClaims take part in the NUMA merge with its CPUs and memory.

Hints: for the pod's claims together (plugins/dra/allocator.claim_hints), one per NUMA mask within
which every claim can be satisfied, preferred when as narrow as the narrowest that works, in the
device manager's shape; a device's NUMA node is its `resource.kubernetes.io/numaNode` attribute, or
its PCIe root mapped through the node's topology (api/dra.device_numa). Allocation: the best-scored
device set (allocate_claims: NUMA span, NVLink partition, PCIe root, fragmentation) inside the
merged hint's affinity, and anywhere when no set fits there (best-effort admits such hints; under
restricted and single-numa-node a hint exists only where the set fits).

The claims ride on the request (HintRequest.claims: the pod's claims in pod scope, and in container
scope on the pod's first app container, which is where kube-scheduler's DRA plugin accounts them
too: per pod), the node's devices on the free resources (FreeResources.dra, with the devices the
session already gave to claims taken out). The chosen devices are returned as ledger entries
(api/dra_claims.ledger_entries), so they are held in the node's ledger like CPUs and device ids.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from numasched.api.dra_claims import ledger_entries
from numasched.api.hint import ResourceHints, TopologyHint
from numasched.api.topology import NumaTopology
from numasched.plugins.dra.allocator import ClaimsDoNotFit, allocate_claims, claim_hints
from numasched.plugins.dra.cel import CelEvaluator
from numasched.plugins.numaaware.providers.base import FreeResources, HintRequest, ProviderAllocation, ProviderError

PROVIDER_NAME = "dra"
# The resource name the provider's hints are stated under (in messages: "ResourceClaims").
CLAIMS_RESOURCE = "ResourceClaims"


def claims_resource(request: HintRequest) -> str:
    return f"{CLAIMS_RESOURCE} {', '.join(claim.key for claim in request.claims)}"


class DraHintProvider:
    def __init__(self, evaluator: CelEvaluator | None = None) -> None:
        self._evaluator = evaluator if evaluator is not None else CelEvaluator()

    @property
    def name(self) -> str:
        return PROVIDER_NAME

    @property
    def resources(self) -> frozenset[str]:
        return frozenset()

    def hints(self, request: HintRequest, topology: NumaTopology, free: FreeResources) -> ResourceHints | None:
        if not request.claims:
            return None
        dra = free.dra
        if dra is None:
            return {claims_resource(request): []}
        hints = claim_hints(request.claims, dra.devices, dra.in_use, dra.classes, self._evaluator, topology=topology)
        return {claims_resource(request): hints}

    def allocate(
        self, request: HintRequest, best_hint: TopologyHint, topology: NumaTopology, free: FreeResources
    ) -> ProviderAllocation:
        dra = free.dra
        if not request.claims or all(claim.allocation is not None for claim in request.claims):
            return {}
        if dra is None:
            raise ProviderError(f"{claims_resource(request)}: the node has no ResourceSlices")
        outcome = allocate_claims(
            request.claims,
            dra.devices,
            dra.in_use,
            dra.classes,
            self._evaluator,
            topology=topology,
            numa_restriction=best_hint.affinity,
        )
        if isinstance(outcome, ClaimsDoNotFit) and best_hint.affinity is not None:
            outcome = allocate_claims(
                request.claims, dra.devices, dra.in_use, dra.classes, self._evaluator, topology=topology
            )
        if isinstance(outcome, ClaimsDoNotFit):
            raise ProviderError(f"{claims_resource(request)}: {outcome.reason}")
        return dict(ledger_entries(outcome.allocations))


def dra_provider_factory(arguments: Mapping[str, Any]) -> DraHintProvider:
    del arguments  # nothing to configure yet
    return DraHintProvider()
