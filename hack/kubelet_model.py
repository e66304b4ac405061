"""An independent model of the kubelet's admission of a pod on a node: the oracle for numasched.

Written from the kubelet's sources (kubernetes/kubernetes pkg/kubelet/cm), not from numasched's
numa-aware plugin, whose providers and merge it must be able to contradict:

* topologymanager: policy.go (filterProvidersHints; mergePermutation: a merged hint is preferred
  only when every hint of the permutation is preferred and every affinity set is the same mask;
  the hint merger: the narrowest preferred hint, else the non-preferred one closest to the widest of
  the resources' narrowest hints),
  policy_none/best_effort/restricted/single_numa_node.go (single-numa-node keeps only preferred
  hints of one NUMA node or "don't care"; restricted and single-numa-node admit a preferred merged
  hint only), scope_container.go / scope_pod.go (per container in order, or once for the pod);
  the kubelet refuses to start with more NUMA nodes than max-allowable-numa-nodes (default 8).
* cpumanager/policy_static.go: exclusive CPUs only for a Guaranteed pod's container with an
  integer CPU request; hints for every NUMA mask whose free CPUs suffice, preferred when as narrow
  as the narrowest mask whose CPUs (all of the machine's, reserved ones included) could hold the
  request; Allocate fails when too few CPUs are free, and with full-pcpus-only when the request is
  not a multiple of the threads per core or exceeds the CPUs of wholly free cores.
* devicemanager/topology_hints.go: for resources whose devices report a NUMA node, a hint per mask
  whose free devices suffice, preferred when as narrow as the narrowest mask the node's TOTAL
  devices could satisfy; Allocate fails when too few healthy devices are free.
* qos/policy.go GetPodQOS: zero quantities are ignored, only cpu and memory count; requests default
  to limits as the API server defaults them.

The merge considers every combination of hints (one per resource), as the kubelet's does; the merged
results are folded resource by resource so that 8 NUMA nodes stay cheap.

Not modelled (each only affects which ids an undecided pod takes, never whether a pod is admitted
on the state given): the exact CPU choice of takeByTopology (here: whole cores first, NUMA nodes
with fewer free CPUs first, aligned CPUs before others), device plugins' preferred allocations,
the memory manager (treated as policy None), prefer-closest-numa-nodes among non-preferred hints.

Nothing here imports numasched's numa-aware plugin or policy module; only plain data types (ids,
quantities, and the topology and task records for the benchmark's adapters).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from fractions import Fraction
from itertools import combinations
from typing import Any

import attrs

from numasched.api.idset import IdSet
from numasched.api.quantity import parse_quantity
from numasched.api.resource import Resource
from numasched.api.task import TaskInfo
from numasched.api.topology import NumaTopology

CPU = "cpu"
MEMORY = "memory"
DEFAULT_MAX_ALLOWABLE_NUMA_NODES = 8

# Hugepages and ephemeral storage are not QoS compute resources: only cpu and memory are.
_QOS_RESOURCES = (CPU, MEMORY)
# Resources the kubelet never hands to the device manager.
_NATIVE_RESOURCES = frozenset({CPU, MEMORY, "ephemeral-storage", "pods"})


def parse_bool_true(value: str) -> bool:
    """Go's strconv.ParseBool true spellings, with which the kubelet parses policy options."""
    return value in ("1", "t", "T", "TRUE", "true", "True")


# ---- the node's true state --------------------------------------------------------------------


@attrs.frozen(slots=True)
class KubeletNode:
    """What the kubelet of a node knows about its machine and configuration."""

    name: str
    numa_ids: tuple[int, ...]
    cpu_numa: Mapping[int, int]  # every CPU of the machine -> its NUMA node
    cpu_core: Mapping[int, tuple[int, int]]  # CPU -> (socket, core): SMT siblings share it
    devices: Mapping[str, Mapping[str, int | None]]  # resource -> device id -> NUMA node (None: no topology)
    unhealthy: Mapping[str, frozenset[str]] = attrs.field(factory=dict)
    reserved_cpus: frozenset[int] = frozenset()
    cpu_manager_policy: str = "static"  # "none" or "static"
    cpu_manager_options: Mapping[str, str] = attrs.field(factory=dict)
    topology_policy: str = "single-numa-node"  # none, best-effort, restricted, single-numa-node
    topology_scope: str = "container"  # container or pod
    topology_options: Mapping[str, str] = attrs.field(factory=dict)

    def cpus_in(self, numa_ids: Iterable[int]) -> frozenset[int]:
        wanted = set(numa_ids)
        return frozenset(cpu for cpu, numa in self.cpu_numa.items() if numa in wanted)

    @property
    def cpus_per_core(self) -> int:
        per_core: dict[tuple[int, int], int] = {}
        for core in self.cpu_core.values():
            per_core[core] = per_core.get(core, 0) + 1
        return max(per_core.values(), default=1)

    def healthy_devices(self, resource: str) -> frozenset[str]:
        return frozenset(self.devices.get(resource, {})) - self.unhealthy.get(resource, frozenset())


@attrs.define(slots=True)
class NodeState:
    """A node and what is really free on it now (the truth, not any report of it)."""

    node: KubeletNode
    free_cpus: set[int]
    free_devices: dict[str, set[str]]

    @classmethod
    def empty(cls, node: KubeletNode) -> NodeState:
        """Nothing held: every CPU but the reserved ones, every healthy device."""
        free_cpus = set(node.cpu_numa) - set(node.reserved_cpus) if node.cpu_manager_policy == "static" else set()
        return cls(node, free_cpus, {resource: set(node.healthy_devices(resource)) for resource in node.devices})

    def copy(self) -> NodeState:
        return NodeState(self.node, set(self.free_cpus), {r: set(ids) for r, ids in self.free_devices.items()})

    def take(self, cpus: Iterable[int], devices: Mapping[str, Iterable[str]]) -> list[str]:
        """Mark ids held; returns the ids that were not free (a double assignment)."""
        clashes: list[str] = []
        for cpu in cpus:
            if cpu in self.free_cpus:
                self.free_cpus.discard(cpu)
            elif self.node.cpu_manager_policy == "static":
                clashes.append(f"cpu {cpu}")
        for resource, ids in devices.items():
            free = self.free_devices.setdefault(resource, set())
            for device in ids:
                if device in free:
                    free.discard(device)
                else:
                    clashes.append(f"{resource} {device}")
        return clashes


def node_from_machine(
    machine: Mapping[str, Any],
    name: str,
    *,
    reserved_cpus: Iterable[int] = (),
    cpu_manager_policy: str = "static",
    cpu_manager_options: Mapping[str, str] | None = None,
    topology_policy: str = "single-numa-node",
    topology_scope: str = "container",
    topology_options: Mapping[str, str] | None = None,
) -> KubeletNode:
    """A node of a machine described in the format of tests/fixtures/machines/*.yaml."""
    cpu_numa: dict[int, int] = {}
    cpu_core: dict[int, tuple[int, int]] = {}
    for core in machine.get("cores", []):
        for cpu in IdSet.parse(str(core["cpus"])):
            cpu_numa[cpu] = int(core["numa"])
            cpu_core[cpu] = (int(core["socket"]), int(core["core"]))
    devices: dict[str, dict[str, int | None]] = {}
    for resource, items in (machine.get("devices") or {}).items():
        devices[resource] = {
            str(item["id"]): (None if item.get("numa") is None else int(item["numa"])) for item in items
        }
    return KubeletNode(
        name=name,
        numa_ids=tuple(sorted(int(n["id"]) for n in machine["numa_nodes"])),
        cpu_numa=cpu_numa,
        cpu_core=cpu_core,
        devices=devices,
        reserved_cpus=frozenset(reserved_cpus),
        cpu_manager_policy=cpu_manager_policy,
        cpu_manager_options=dict(cpu_manager_options or {}),
        topology_policy=topology_policy,
        topology_scope=topology_scope,
        topology_options=dict(topology_options or {}),
    )


def node_from_topology(topology: NumaTopology) -> KubeletNode:
    """A node from numasched's plain topology record (the benchmark's nodes): machine facts only."""
    return KubeletNode(
        name=topology.node_name,
        numa_ids=tuple(sorted(topology.numa_ids)),
        cpu_numa={info.cpu: info.numa for info in topology.cpus},
        cpu_core={info.cpu: (info.socket, info.core) for info in topology.cpus},
        devices={resource: {d.id: d.numa for d in group.devices} for resource, group in topology.devices.items()},
        unhealthy={
            resource: frozenset(d.id for d in group.devices if not d.healthy)
            for resource, group in topology.devices.items()
        },
        reserved_cpus=frozenset(topology.reserved_cpus),
        cpu_manager_policy=str(topology.policies.cpu_manager_policy.value),
        cpu_manager_options=dict(topology.policies.cpu_manager_options),
        topology_policy=str(topology.policies.topology_manager_policy.value),
        topology_scope=str(topology.policies.topology_manager_scope.value),
        topology_options=dict(topology.policies.topology_manager_options),
    )


# ---- the pod as the kubelet sees it -----------------------------------------------------------


@attrs.frozen(slots=True)
class ModelContainer:
    name: str
    requests: Mapping[str, Fraction]
    limits: Mapping[str, Fraction]
    init: bool = False


@attrs.frozen(slots=True)
class ModelPod:
    key: str
    containers: tuple[ModelContainer, ...]  # init containers first, in order, then app containers

    @property
    def qos(self) -> str:
        return pod_qos(self.containers)


def _quantities(values: Mapping[str, Any] | None) -> dict[str, Fraction]:
    return {str(name): parse_quantity(value) for name, value in (values or {}).items()}


def model_container(
    name: str, requests: Mapping[str, Any] | None, limits: Mapping[str, Any] | None, *, init: bool = False
) -> ModelContainer:
    """A container with the API server's defaulting: a limit without a request is also the request."""
    parsed_limits = _quantities(limits)
    parsed_requests = {**parsed_limits, **_quantities(requests)}
    return ModelContainer(name, parsed_requests, parsed_limits, init)


def pod_from_object(pod: Mapping[str, Any]) -> ModelPod:
    """A Kubernetes Pod object (as `kubectl get -o yaml` prints it)."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    containers: list[ModelContainer] = []
    for field, init in (("initContainers", True), ("containers", False)):
        for container in spec.get(field) or []:
            resources = container.get("resources") or {}
            containers.append(
                model_container(
                    str(container.get("name", "")), resources.get("requests"), resources.get("limits"), init=init
                )
            )
    key = f"{metadata.get('namespace') or 'default'}/{metadata.get('name', '')}"
    return ModelPod(key, tuple(containers))


def _resource_quantities(resource: Resource) -> dict[str, Fraction]:
    """A parsed Resource back to quantities; zero entries left out (the kubelet ignores them)."""
    found: dict[str, Fraction] = {}
    if resource.milli_cpu:
        found[CPU] = Fraction(round(resource.milli_cpu), 1000)
    if resource.memory:
        found[MEMORY] = Fraction(round(resource.memory))
    for name, milli in resource.scalars.items():
        if milli:  # scalar resources are kept in milli-units, as Volcano keeps them
            found[name] = Fraction(round(milli), 1000)
    return found


def pod_from_task(task: TaskInfo) -> ModelPod:
    """A pod from numasched's plain task record: its containers' own requests and limits only
    (numasched's QoS and allocation are not used)."""
    containers = []
    ordered = [c for c in task.containers if c.init] + [c for c in task.containers if not c.init]
    for container in ordered:
        limits = _resource_quantities(container.limits)
        requests = {**limits, **_resource_quantities(container.requests)}
        containers.append(ModelContainer(container.name, requests, limits, container.init))
    return ModelPod(task.key, tuple(containers))


def pod_qos(containers: Sequence[ModelContainer]) -> str:
    """GetPodQOS: Guaranteed when every container limits cpu and memory and requests equal limits."""
    requests: dict[str, Fraction] = {}
    limits: dict[str, Fraction] = {}
    guaranteed = True
    for container in containers:
        for name, quantity in container.requests.items():
            if name in _QOS_RESOURCES and quantity > 0:
                requests[name] = requests.get(name, Fraction(0)) + quantity
        found: set[str] = set()
        for name, quantity in container.limits.items():
            if name in _QOS_RESOURCES and quantity > 0:
                found.add(name)
                limits[name] = limits.get(name, Fraction(0)) + quantity
        if not {CPU, MEMORY} <= found:
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if (
        guaranteed
        and all(limits.get(name) == value for name, value in requests.items())
        and len(requests) == len(limits)
    ):
        return "Guaranteed"
    return "Burstable"


def exclusive_cpus(pod: ModelPod, container: ModelContainer) -> int:
    """guaranteedCPUs: the integer CPU request of a Guaranteed pod's container, else 0."""
    if pod.qos != "Guaranteed":
        return 0
    request = container.requests.get(CPU, Fraction(0))
    if request.denominator != 1:
        return 0
    return int(request)


def device_requests(node: KubeletNode, container: ModelContainer) -> dict[str, int]:
    """Device-plugin resources the container asks for (limits, which extended resources must set)."""
    wanted: dict[str, int] = {}
    for name, quantity in {**container.requests, **container.limits}.items():
        if name in _NATIVE_RESOURCES or name.startswith("hugepages-") or name not in node.devices:
            continue
        if quantity > 0:
            wanted[name] = int(quantity)
    return wanted


# ---- hints and merge --------------------------------------------------------------------------

Mask = frozenset[int]


@attrs.frozen(slots=True)
class Hint:
    affinity: Mask | None  # None: no preference ("don't care")
    preferred: bool


def all_masks(numa_ids: Sequence[int]) -> Iterator[Mask]:
    """Every non-empty set of NUMA nodes, narrowest first."""
    for size in range(1, len(numa_ids) + 1):
        for chosen in combinations(sorted(numa_ids), size):
            yield frozenset(chosen)


def _mask_value(mask: Mask) -> int:
    return sum(1 << numa for numa in mask)


def cpu_hints(state: NodeState, request: int, reusable: frozenset[int] = frozenset()) -> list[Hint] | None:
    """The static CPU manager's hints (None: no exclusive CPUs, so no preference)."""
    node = state.node
    if node.cpu_manager_policy != "static" or request == 0:
        return None
    available = state.free_cpus | reusable
    min_width = len(node.numa_ids)
    hints: list[Hint] = []
    for mask in all_masks(node.numa_ids):
        if len(node.cpus_in(mask)) >= request and len(mask) < min_width:
            min_width = len(mask)
        if any(node.cpu_numa[cpu] not in mask for cpu in reusable):
            continue
        if sum(1 for cpu in available if node.cpu_numa[cpu] in mask) >= request:
            hints.append(Hint(mask, False))
    return [Hint(h.affinity, h.affinity is not None and len(h.affinity) == min_width) for h in hints]


def device_hints(
    state: NodeState, resource: str, request: int, reusable: frozenset[str] = frozenset()
) -> list[Hint] | None:
    """The device manager's hints for one resource (None: its devices report no NUMA node)."""
    node = state.node
    numa_of = node.devices[resource]
    if all(numa is None for numa in numa_of.values()):
        return None
    available = state.free_devices.get(resource, set()) | reusable
    if len(available) < request:
        return []
    min_width = len(node.numa_ids)
    hints: list[Hint] = []
    for mask in all_masks(node.numa_ids):
        in_mask = sum(1 for numa in numa_of.values() if numa is not None and numa in mask)
        if in_mask >= request and len(mask) < min_width:
            min_width = len(mask)
        if any(numa_of[d] is not None and numa_of[d] not in mask for d in reusable):
            continue
        if sum(1 for d in available if numa_of[d] is not None and numa_of[d] in mask) >= request:
            hints.append(Hint(mask, False))
    return [Hint(h.affinity, h.affinity is not None and len(h.affinity) == min_width) for h in hints]


def _narrowness(mask: Mask) -> tuple[int, int]:
    return (len(mask), _mask_value(mask))


def _best_non_preferred_count(lists: Sequence[Sequence[Hint]]) -> int:
    """maxOfMinAffinityCounts: the widest of the resources' narrowest hints."""
    widest = 0
    for hints in lists:
        set_masks = [h.affinity for h in hints if h.affinity is not None]
        if set_masks:
            widest = max(widest, len(min(set_masks, key=_narrowness)))
    return widest


def _best_non_preferred(masks: Sequence[Mask], target: int) -> Mask:
    """The hint merger's choice among non-preferred merged hints: as close to the best non-preferred
    affinity count as possible from below (exactly it first), else the narrowest wider one."""
    exact = [m for m in masks if len(m) == target]
    if exact:
        return min(exact, key=_narrowness)
    below = [m for m in masks if len(m) < target]
    if below:
        widest = max(len(m) for m in below)
        return min((m for m in below if len(m) == widest), key=_narrowness)
    return min(masks, key=_narrowness)


def merge(policy: str, numa_ids: Sequence[int], per_resource: Sequence[list[Hint] | None]) -> tuple[Hint, bool]:
    """The Topology Manager's merge of every resource's hints under a policy: (best hint, admit)."""
    if policy == "none":
        return Hint(None, True), True
    everything = frozenset(numa_ids)
    lists: list[list[Hint]] = []
    for hints in per_resource:
        if hints is None:
            lists.append([Hint(None, True)])
        elif not hints:
            lists.append([Hint(None, False)])
        else:
            lists.append(hints)
    if policy == "single-numa-node":
        lists = [[h for h in hints if h.preferred and (h.affinity is None or len(h.affinity) == 1)] for hints in lists]
    # Every permutation of one hint per resource (mergePermutation): the affinities that are set are
    # ANDed, and the result is preferred only when every hint is preferred AND every set affinity is
    # the same mask (so {0} from the CPUs and {0,1} from the GPUs merge to a non-preferred {0}).
    # The merged results are folded resource by resource, keeping (AND so far, preferred so far,
    # the first set affinity), which gives the same set of merged hints as the full product.
    merged: set[tuple[Mask, bool, Mask | None]] = {(everything, True, None)}
    for hints in lists:
        folded: set[tuple[Mask, bool, Mask | None]] = set()
        for affinity, preferred, first in merged:
            for hint in hints:
                if hint.affinity is None:
                    folded.add((affinity, preferred and hint.preferred, first))
                    continue
                same = first is None or hint.affinity == first
                folded.add((affinity & hint.affinity, preferred and hint.preferred and same, first or hint.affinity))
        merged = folded
    candidates = {(affinity, preferred) for affinity, preferred, _ in merged if affinity}
    preferred_masks = [affinity for affinity, preferred in candidates if preferred]
    if preferred_masks:
        best_affinity, best_preferred = min(preferred_masks, key=_narrowness), True
    else:
        others = [affinity for affinity, _ in candidates]
        best_affinity = _best_non_preferred(others, _best_non_preferred_count(lists)) if others else everything
        best_preferred = False
    best = Hint(best_affinity, best_preferred)
    if policy == "single-numa-node" and best_affinity == everything:
        best = Hint(None, best_preferred)
    admit = policy == "best-effort" or best_preferred
    return best, admit


# ---- allocation (which ids an admitted container takes) ----------------------------------------


def _whole_core_cpus(node: KubeletNode, candidates: set[int]) -> set[int]:
    by_core: dict[tuple[int, int], set[int]] = {}
    for cpu, core in node.cpu_core.items():
        by_core.setdefault(core, set()).add(cpu)
    return {cpu for siblings in by_core.values() if siblings <= candidates for cpu in siblings}


def _pick_cpus(node: KubeletNode, candidates: set[int], count: int) -> list[int]:
    """Up to count CPUs: whole free cores first, NUMA nodes with fewer free CPUs first (packing)."""
    free_per_numa: dict[int, int] = {}
    for cpu in candidates:
        free_per_numa[node.cpu_numa[cpu]] = free_per_numa.get(node.cpu_numa[cpu], 0) + 1
    whole = _whole_core_cpus(node, candidates)

    def order(cpu: int) -> tuple[int, int, tuple[int, int], int]:
        numa = node.cpu_numa[cpu]
        return (0 if cpu in whole else 1, free_per_numa[numa], node.cpu_core.get(cpu, (0, cpu)), cpu)

    return sorted(candidates, key=order)[:count]


def allocate_cpus(state: NodeState, count: int, affinity: Mask | None, reusable: set[int]) -> list[int] | str:
    """The CPUs a container takes (aligned ones first), or why Allocate fails."""
    node = state.node
    available = state.free_cpus | reusable
    if count > len(available):
        return f"not enough cpus available to satisfy request: requested={count}, available={len(available)}"
    if parse_bool_true(node.cpu_manager_options.get("full-pcpus-only", "")):
        per_core = node.cpus_per_core
        if count % per_core:
            return f"SMTAlignmentError: requested {count} cpus, not a multiple of {per_core} cpus per core"
        physical = len(_whole_core_cpus(node, available))
        if count > physical:
            return f"SMTAlignmentError: requested {count} cpus, only {physical} on wholly free cores"
    aligned = available if affinity is None else {cpu for cpu in available if node.cpu_numa[cpu] in affinity}
    chosen = _pick_cpus(node, aligned, count)
    if len(chosen) < count:
        chosen += _pick_cpus(node, available - set(chosen), count - len(chosen))
    return chosen


def allocate_devices(
    state: NodeState, resource: str, count: int, affinity: Mask | None, reusable: set[str]
) -> list[str] | str:
    """The devices a container takes (reusable, then aligned, then the rest), or why Allocate fails."""
    numa_of = state.node.devices[resource]
    available = state.free_devices.get(resource, set()) | reusable
    if count > len(available):
        return (
            f"requested number of devices unavailable for {resource}. Requested: {count}, Available: {len(available)}"
        )

    def order(device: str) -> tuple[int, int, str]:
        numa = numa_of.get(device)
        in_affinity = affinity is None or (numa is not None and numa in affinity)
        rank = 0 if device in reusable else 1 if in_affinity else 2 if numa is None else 3
        return (rank, -1 if numa is None else numa, device)

    return sorted(available, key=order)[:count]


_NO_LOCALITY = "Resources cannot be allocated with Topology Locality"

# ---- admission --------------------------------------------------------------------------------


@attrs.frozen(slots=True)
class Admission:
    admitted: bool
    reason: str = ""
    cpus: frozenset[int] = frozenset()
    devices: Mapping[str, frozenset[str]] = attrs.field(factory=dict)
    # Per container name: (exclusive CPUs, devices per resource) it was given.
    containers: Mapping[str, tuple[frozenset[int], Mapping[str, frozenset[str]]]] = attrs.field(factory=dict)


def max_allowable_numa_nodes(node: KubeletNode) -> int:
    raw = node.topology_options.get("max-allowable-numa-nodes")
    return int(raw) if raw is not None and raw.strip().isdigit() else DEFAULT_MAX_ALLOWABLE_NUMA_NODES


def _pod_level(pod: ModelPod, counts: Sequence[tuple[ModelContainer, int]]) -> int:
    """What the pod needs at once: the larger of its biggest init container and its app containers."""
    init = max((count for container, count in counts if container.init), default=0)
    app = sum(count for container, count in counts if not container.init)
    return max(init, app)


def admit(state: NodeState, pod: ModelPod) -> Admission:
    """Whether the node's kubelet admits the pod on this state; state is not changed.

    When admitted, the ids the pod ends up holding (what an admitted pod takes from `state`).
    """
    node = state.node
    if node.topology_policy != "none" and len(node.numa_ids) > max_allowable_numa_nodes(node):
        return Admission(
            False, f"kubelet does not start: {len(node.numa_ids)} NUMA nodes exceed max-allowable-numa-nodes"
        )
    work = state.copy()
    taken_cpus: set[int] = set()
    taken_devices: dict[str, set[str]] = {}
    reusable_cpus: set[int] = set()
    reusable_devices: dict[str, set[str]] = {}
    pod_hint: Hint | None = None
    if node.topology_scope == "pod":
        pod_cpus = _pod_level(pod, [(c, exclusive_cpus(pod, c)) for c in pod.containers])
        resources = sorted({r for c in pod.containers for r in device_requests(node, c)})
        per_resource: list[list[Hint] | None] = [cpu_hints(work, pod_cpus)]
        for resource in resources:
            count = _pod_level(pod, [(c, device_requests(node, c).get(resource, 0)) for c in pod.containers])
            per_resource.append(device_hints(work, resource, count))
        pod_hint, admitted = merge(node.topology_policy, node.numa_ids, per_resource)
        if not admitted:
            return Admission(False, f"TopologyAffinityError: {_NO_LOCALITY}")
    per_container: dict[str, tuple[frozenset[int], Mapping[str, frozenset[str]]]] = {}
    for container in pod.containers:
        given_cpus: frozenset[int] = frozenset()
        given_devices: dict[str, frozenset[str]] = {}
        cpus = exclusive_cpus(pod, container)
        devices = device_requests(node, container)
        if pod_hint is None:
            container_hints: list[list[Hint] | None] = [cpu_hints(work, cpus, frozenset(reusable_cpus))]
            for resource, count in sorted(devices.items()):
                reusable = frozenset(reusable_devices.get(resource, set()))
                container_hints.append(device_hints(work, resource, count, reusable))
            hint, admitted = merge(node.topology_policy, node.numa_ids, container_hints)
            if not admitted:
                return Admission(
                    False,
                    f"TopologyAffinityError: container {container.name}: {_NO_LOCALITY}",
                )
        else:
            hint = pod_hint
        if cpus and node.cpu_manager_policy == "static":
            chosen_cpus = allocate_cpus(work, cpus, hint.affinity, reusable_cpus)
            if isinstance(chosen_cpus, str):
                return Admission(False, f"container {container.name}: {chosen_cpus}")
            given_cpus = frozenset(chosen_cpus)
            work.free_cpus -= set(chosen_cpus)
            reusable_cpus -= set(chosen_cpus)
            taken_cpus.update(chosen_cpus)
            if container.init:
                reusable_cpus.update(chosen_cpus)
        for resource, count in sorted(devices.items()):
            reuse = reusable_devices.setdefault(resource, set())
            chosen_devices = allocate_devices(work, resource, count, hint.affinity, reuse)
            if isinstance(chosen_devices, str):
                return Admission(False, f"container {container.name}: {chosen_devices}")
            given_devices[resource] = frozenset(chosen_devices)
            work.free_devices.setdefault(resource, set()).difference_update(chosen_devices)
            reuse.difference_update(chosen_devices)
            taken_devices.setdefault(resource, set()).update(chosen_devices)
            if container.init:
                reuse.update(chosen_devices)
        per_container[container.name] = (given_cpus, given_devices)
    devices_taken = {r: frozenset(ids) for r, ids in taken_devices.items()}
    return Admission(True, "", frozenset(taken_cpus), devices_taken, per_container)


def apply(state: NodeState, admission: Admission) -> None:
    """Hold what an admitted pod took."""
    state.take(admission.cpus, admission.devices)


def numa_of_ids(node: KubeletNode, cpus: Iterable[int], devices: Mapping[str, Iterable[str]]) -> Mask:
    """The NUMA nodes a set of ids touches."""
    touched = {node.cpu_numa[cpu] for cpu in cpus if cpu in node.cpu_numa}
    for resource, ids in devices.items():
        numa_of = node.devices.get(resource, {})
        touched.update(numa for d in ids if (numa := numa_of.get(d)) is not None)
    return frozenset(touched)
