"""The CPU hint provider: the kubelet CPU manager's static policy, as a scheduler sees it.

- Only Guaranteed pods whose container asks for a whole number of CPUs get exclusive CPUs; every
  other container runs in the shared pool and has no NUMA preference.
- Hints: one per NUMA mask whose free CPUs (plus CPUs the pod may reuse) cover the request;
  preferred when the mask is as narrow as the narrowest mask whose CPUs (all of them, reserved
  included, as the kubelet counts) could hold the request.
- CPU choice: first inside the merged hint's NUMA nodes, then anywhere, each time with the
  kubelet's take-by-topology order (see cpu_assignment).
- Reserved CPUs are never handed out.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any, TypeVar

import attrs
import numpy as np
import structlog
from bitarray import bitarray, frozenbitarray
from bitarray.util import count_and, zeros

from numasched.api.hint import ResourceHints, TopologyHint
from numasched.api.idset import IdSet, IdSetError
from numasched.api.numamask import NumaMask, iterate_masks
from numasched.api.task import ContainerInfo, QosClass, pod_whole_cpus, whole_cpus
from numasched.api.topology import CpuManagerPolicy, NumaTopology, TopologyScope
from numasched.plugins.numaaware.providers.base import (
    NUMA_AWARE_PLUGIN,
    FreeResources,
    HintRequest,
    ProviderAllocation,
    ProviderError,
)
from numasched.plugins.numaaware.providers.cpu_assignment import (
    CpuAssignmentError,
    take_distributed,
    take_packed,
    take_packed_bits,
)
from numasched.plugins.numaaware.providers.cpu_layout import CpuBitIndex, CpuLayout, CpuTopologyError
from numasched.plugins.numaaware.providers.mask_table import MaskTable
from numasched.plugins.numaaware.providers.topology_memo import ContentMemo, TopologyMemo
from numasched.scheduler.framework.arguments import PluginArgumentError, quote_value

__all__ = [
    "CpuAssignmentError",
    "CpuChoices",
    "CpuHintProvider",
    "CpuNodeIndex",
    "CpuTopologyError",
    "SmtAlignmentError",
    "StaticPolicyOptions",
    "cpu_hint_table",
    "cpu_provider_factory",
    "guaranteed_cpus",
    "take_by_topology",
]

log = structlog.get_logger(__name__)

FULL_PCPUS_ONLY = "full-pcpus-only"
DISTRIBUTE_CPUS_ACROSS_NUMA = "distribute-cpus-across-numa"
PREFER_ALIGN_BY_UNCORECACHE = "prefer-align-cpus-by-uncorecache"
# Options the kubelet accepts that do not change which CPUs or hints the scheduler predicts closely
# enough to model yet; they are accepted without complaint.
_UNMODELLED_OPTIONS = frozenset(
    {"align-by-socket", "distribute-cpus-across-cores", "strict-cpu-reservation", "prefer-align-cpus-by-socket"}
)
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


class SmtAlignmentError(CpuAssignmentError):
    """full-pcpus-only refuses a request that would split a physical core (kubelet SMTAlignmentError)."""

    def __init__(self, requested: int, cpus_per_core: int, available_physical: int | None = None) -> None:
        self.requested = requested
        self.cpus_per_core = cpus_per_core
        self.available_physical = available_physical
        if available_physical is None:
            message = f"SMT Alignment Error: requested {requested} cpus not multiple cpus per core = {cpus_per_core}"
        else:
            message = (
                "SMT Alignment Error: not enough free physical CPUs: "
                f"available physical CPUs = {available_physical}, requested CPUs = {requested}, "
                f"CPUs per core = {cpus_per_core}"
            )
        super().__init__(message)


@attrs.frozen(slots=True)
class StaticPolicyOptions:
    full_pcpus_only: bool = False
    distribute_cpus_across_numa: bool = False
    align_by_uncorecache: bool = False

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> tuple[StaticPolicyOptions, list[str]]:
        """Options from the kubelet's cpuManagerPolicyOptions; problems are returned, not raised."""
        values: dict[str, bool] = {}
        problems: list[str] = []
        fields = {
            FULL_PCPUS_ONLY: "full_pcpus_only",
            DISTRIBUTE_CPUS_ACROSS_NUMA: "distribute_cpus_across_numa",
            PREFER_ALIGN_BY_UNCORECACHE: "align_by_uncorecache",
        }
        for name, raw in options.items():
            if name in _UNMODELLED_OPTIONS:
                continue
            field = fields.get(name)
            if field is None:
                problems.append(f"unknown CPU manager option {name!r}")
                continue
            text = str(raw).strip()
            if text in _TRUE:
                values[field] = True
            elif text in _FALSE:
                values[field] = False
            else:
                problems.append(f"CPU manager option {name!r} has a bad value {raw!r} (want true or false)")
        if values.get("align_by_uncorecache") and values.get("distribute_cpus_across_numa"):
            problems.append(
                f"CPU manager options {PREFER_ALIGN_BY_UNCORECACHE} and {DISTRIBUTE_CPUS_ACROSS_NUMA} "
                f"cannot be used together; ignoring {PREFER_ALIGN_BY_UNCORECACHE}"
            )
            values["align_by_uncorecache"] = False
        return cls(**values), problems

    @classmethod
    def of(cls, topology: NumaTopology, defaults: Mapping[str, str] | None = None) -> StaticPolicyOptions:
        """The node's cpuManagerPolicyOptions; `defaults` (plugin arguments) stand in for a node
        whose topology object does not report any (Volcano's exporter does not)."""
        reported = topology.policies.cpu_manager_options
        if not reported and not defaults:
            return _NO_OPTIONS
        options, problems = cls.parse(reported if reported else (defaults or {}))
        for problem in problems:
            log.debug("cpu manager options", node=topology.node_name, problem=problem)
        return options


# What a node with no options (and no defaults) runs with: parse({}).
_NO_OPTIONS = StaticPolicyOptions()
# No CPUs (to use again: a pod without finished init containers): one empty set, not one per call.
_NO_CPUS = IdSet()


@attrs.frozen(slots=True)
class CpuNodeIndex:
    """What the CPU provider derives from a node's topology alone, built once per topology."""

    layout: CpuLayout
    options: StaticPolicyOptions
    # NUMA nodes that have CPUs, in order, and their CPUs.
    numa_ids: tuple[int, ...]
    cpus_by_numa: dict[int, IdSet]
    # Every NUMA mask over numa_ids (iterate_masks order), its ids, and all CPUs it holds.
    masks: tuple[tuple[NumaMask, tuple[int, ...], int], ...]
    # cpu_hint_table's answers by all they read besides the masks: free CPUs per NUMA node, the
    # request, the reused CPUs and the unknown holdings. Shared by every index of equal masks
    # (CPUs per mask), so nodes of one shape at equal counts (most of a cluster) compute them once
    # whichever CPUs are free.
    hints_by_counts: dict[Hashable, tuple[TopologyHint, ...]] = attrs.field(factory=dict, eq=False, repr=False)
    # The masks as arrays (CPUs per mask as the totals).
    mask_table: MaskTable = attrs.field(kw_only=True, eq=False, repr=False)
    # cpu_hint_table's answers (for no reused CPUs and without full-pcpus-only) by the free CPUs
    # themselves, the reserved ones, the request and the unknown holdings, for this layout alone:
    # nodes of one shape reach the same free sets again and again, and such an answer needs no count.
    hints_by_free: dict[Hashable, tuple[TopologyHint, ...]] = attrs.field(
        factory=dict, kw_only=True, eq=False, repr=False
    )
    # All CPUs of the layout (NumaTopology.all_cpus).
    all_cpus: IdSet = attrs.field(kw_only=True, eq=False, repr=False)
    # allocate_cpus' answers and its packed takes (CpuChoices): nodes of one shape with the same
    # CPUs free get the same CPUs.
    choices: CpuChoices = attrs.field(factory=lambda: CpuChoices(), eq=False, repr=False)
    # numa_masks' answers by the reserved CPUs and a length.
    masks_by_length: dict[tuple[IdSet, int], tuple[frozenbitarray, ...]] = attrs.field(
        factory=dict, eq=False, repr=False
    )
    # allocatable_cpus' answers by the reserved CPUs.
    allocatable_by_reserved: dict[IdSet, IdSet] = attrs.field(factory=dict, eq=False, repr=False)

    def allocatable_cpus(self, reserved: IdSet) -> IdSet:
        """The layout's CPUs but `reserved` (NumaTopology.allocatable_cpus), once per reserved set."""
        found = self.allocatable_by_reserved.get(reserved)
        if found is None:
            found = self.allocatable_by_reserved[reserved] = self.all_cpus - reserved
        return found

    def free_per_numa(self, free_cpus: IdSet, reserved: IdSet) -> tuple[int, ...]:
        """How many of `free_cpus` are allocatable (CPUs of the layout, not `reserved`) on each NUMA
        node of numa_ids: one bit count per NUMA node on the free CPUs' bits, no set built."""
        bits = free_cpus.bits
        masks = self.masks_by_length.get((reserved, len(bits)))
        if masks is None:
            masks = self.numa_masks(reserved, len(bits))
        return tuple([count_and(bits, mask) for mask in masks])

    def numa_masks(self, reserved: IdSet, length: int) -> tuple[frozenbitarray, ...]:
        """Per NUMA node of numa_ids, its allocatable CPUs as `length` bits (the length of a free
        set's bits, which end at its largest id); kept in masks_by_length."""
        masks = []
        for numa in self.numa_ids:
            bits = (self.cpus_by_numa[numa] - reserved).bits
            masks.append(frozenbitarray(bits[:length] if len(bits) >= length else bits + zeros(length - len(bits))))
        if len(self.masks_by_length) >= _MAX_NUMA_MASKS:
            self.masks_by_length.clear()
        found = self.masks_by_length[(reserved, length)] = tuple(masks)
        return found

    @classmethod
    def of(
        cls,
        topology: NumaTopology,
        default_options: Mapping[str, str] | None = None,
        shared_hints: dict[Hashable, dict[Hashable, tuple[TopologyHint, ...]]] | None = None,
        *,
        layout: CpuLayout | None = None,
        options: StaticPolicyOptions | None = None,
    ) -> CpuNodeIndex:
        """The index of a topology; with shared_hints (kept by the caller, by mask shape) indexes of
        equal masks share their hints_by_counts. `layout` and `options`, when the caller already
        has them, are the topology's CpuLayout and StaticPolicyOptions.of(topology, default_options).
        """
        if layout is None:
            layout = CpuLayout.from_topology(topology)
        numa_ids = tuple(sorted(layout.cpus_by_numa))
        masks = []
        for mask in iterate_masks(numa_ids):
            ids = tuple(mask.ids())
            masks.append((mask, ids, sum(len(layout.cpus_by_numa[numa]) for numa in ids)))
        shape = (len(numa_ids), tuple((mask.bits, total) for mask, _, total in masks))
        hints_by_counts = {} if shared_hints is None else shared_hints.setdefault(shape, {})
        return cls(
            layout=layout,
            options=StaticPolicyOptions.of(topology, default_options) if options is None else options,
            numa_ids=numa_ids,
            cpus_by_numa={numa: IdSet(layout.cpus_by_numa[numa]) for numa in numa_ids},
            masks=tuple(masks),
            hints_by_counts=hints_by_counts,
            mask_table=MaskTable(masks, numa_ids),
            all_cpus=IdSet(layout.info),
        )


def _available_bits(layout: CpuLayout, topology: NumaTopology, available: IdSet, count: int) -> frozenbitarray:
    """`available` as a mask of the layout's bits_index.size bits, once it is known to hold only
    CPUs of the layout and at least `count` of them."""
    if count < 0:
        raise ValueError(f"node {topology.node_name}: cannot take a negative number of CPUs ({count})")
    index = layout.bits_index
    bits = available.bits
    padded = bits if len(bits) >= index.size else bits + zeros(index.size - len(bits))
    size = padded.count()
    if len(padded) > index.size or count_and(padded, index.known) != size:
        unknown = [cpu for cpu in available if cpu not in layout.info]
        raise CpuTopologyError(
            f"node {topology.node_name}: CPUs {IdSet(unknown).format()} are not in the node's topology"
        )
    if count > size:
        raise CpuAssignmentError(f"not enough cpus available to satisfy request: requested={count}, available={size}")
    return padded


def _check_smt(layout: CpuLayout, topology: NumaTopology, available: IdSet, count: int) -> None:
    if count % layout.cpus_per_core != 0:
        raise SmtAlignmentError(count, layout.cpus_per_core)
    physical = len(layout.physical_cpus(available, topology.reserved_cpus))
    if count > physical:
        raise SmtAlignmentError(count, layout.cpus_per_core, physical)


def _take(layout: CpuLayout, available: IdSet, count: int, options: StaticPolicyOptions) -> IdSet:
    pool = frozenset(available)
    if options.distribute_cpus_across_numa:
        group = layout.cpus_per_core if options.full_pcpus_only else 1
        return IdSet(take_distributed(layout, pool, count, group))
    return IdSet(take_packed(layout, pool, count, options.align_by_uncorecache))


def take_by_topology(
    topology: NumaTopology,
    available: IdSet,
    count: int,
    *,
    full_pcpus_only: bool = False,
    distribute_cpus_across_numa: bool = False,
    align_by_uncorecache: bool = False,
) -> IdSet:
    """`count` CPUs out of `available`, chosen as the kubelet's static policy would.

    Raises CpuAssignmentError when `available` is too small, SmtAlignmentError (a subclass) when
    full_pcpus_only is set and the request would split a core, CpuTopologyError on CPUs the
    topology does not know, and ValueError for incompatible options.
    """
    if align_by_uncorecache and distribute_cpus_across_numa:
        raise ValueError(
            f"{PREFER_ALIGN_BY_UNCORECACHE} and {DISTRIBUTE_CPUS_ACROSS_NUMA} cannot be used at the same time"
        )
    layout = CpuLayout.from_topology(topology)
    _available_bits(layout, topology, available, count)
    options = StaticPolicyOptions(full_pcpus_only, distribute_cpus_across_numa, align_by_uncorecache)
    if full_pcpus_only and count:
        _check_smt(layout, topology, available, count)
    return _take(layout, available, count, options)


# -- which containers get exclusive CPUs ------------------------------------------------------------


def guaranteed_cpus(request: HintRequest) -> int:
    """Exclusive CPUs the static policy gives this request; 0 means the shared pool."""
    if request.qos != QosClass.GUARANTEED:
        return 0
    if request.scope == TopologyScope.POD and request.containers:
        return pod_whole_cpus(request.containers)
    return whole_cpus(request.requests.milli_cpu)


# -- hints ------------------------------------------------------------------------------------------


def cpu_hint_table(
    topology: NumaTopology,
    free_cpus: IdSet,
    request_cpus: int,
    reusable: IdSet | None = None,
    *,
    index: CpuNodeIndex | None = None,
    unknown: int = 0,
) -> tuple[TopologyHint, ...]:
    """The kubelet's CPU topology hints for `request_cpus` exclusive CPUs.

    `free_cpus` are the CPUs not assigned to anyone; reserved CPUs are removed here. `reusable`
    are CPUs this pod already holds and may use again (its finished init containers'); a mask must
    contain all of them. With full-pcpus-only only whole free cores count, and a request that is not
    a multiple of the threads per core gets no hint at all (the kubelet rejects it).
    `index`: the topology's CpuNodeIndex when the caller keeps one (else it is built here).
    `unknown`: exclusive CPUs held by pods whose CPU ids nobody reports; they may be any of the
    free CPUs, so a mask yields a hint only when its free CPUs minus `unknown` still cover the
    request. Whether a hint is preferred is the kubelet's rule on the node's CPUs alone (every CPU
    of the mask, as CPUDetails counts them), never on what is free.
    """
    if index is None:
        index = CpuNodeIndex.of(topology)
    layout = index.layout
    reusable = reusable or _NO_CPUS
    free_per_numa: tuple[int, ...]
    # The answer by the free set itself, where nothing else is read of it (no reuse, no whole cores).
    by_free: tuple[IdSet, IdSet, int, int] | None = None
    if reusable or index.options.full_pcpus_only:
        available = free_cpus & topology.allocatable_cpus
        if reusable:
            available = available - reusable
        if index.options.full_pcpus_only:
            if request_cpus % layout.cpus_per_core != 0:
                return ()
            available = IdSet(layout.physical_cpus(available, topology.reserved_cpus))
        free_per_numa = tuple(cpus.count_common(available) for cpus in index.cpus_by_numa.values())
    else:
        by_free = (free_cpus, topology.reserved_cpus, request_cpus, unknown)
        known = index.hints_by_free.get(by_free)
        if known is not None:
            return known
        free_per_numa = index.free_per_numa(free_cpus, topology.reserved_cpus)
    if reusable:
        reusable_bits = NumaMask.from_ids({layout.info[cpu].numa for cpu in reusable if cpu in layout.info}).bits
        reused = len(reusable)
    else:
        reusable_bits = reused = 0
    # A mask fits when its free CPUs reach request + unknown - reused: a NUMA node's count above that
    # tells nothing more, so counts are capped there and states that differ only above it share
    # one answer.
    cap = max(0, request_cpus + unknown - reused)
    if free_per_numa and max(free_per_numa) > cap:
        free_per_numa = tuple([free if free < cap else cap for free in free_per_numa])
    counts = (free_per_numa, request_cpus, reusable_bits, reused, unknown)
    known = index.hints_by_counts.get(counts)
    if known is None:
        if len(index.hints_by_counts) >= _MAX_HINTS_BY_COUNTS:
            index.hints_by_counts.clear()
        known = index.hints_by_counts[counts] = _hints_for_counts(
            index, free_per_numa, request_cpus, reusable_bits, reused, unknown
        )
    if by_free is not None:
        if len(index.hints_by_free) >= _MAX_HINTS_BY_COUNTS:
            index.hints_by_free.clear()
        index.hints_by_free[by_free] = known
    return known


# Distinct (counts, request) answers kept per topology before they are dropped and computed anew.
_MAX_HINTS_BY_COUNTS = 4096

# NUMA masks (per reserved set and length) a CpuNodeIndex keeps before it drops them and builds
# them anew: a few reserved sets per machine shape, and a free set's bits end at its largest id.
_MAX_NUMA_MASKS = 1024


def _hints_for_counts(
    index: CpuNodeIndex,
    free_per_numa: tuple[int, ...],
    request_cpus: int,
    reusable_bits: int,
    reused: int,
    unknown: int,
) -> tuple[TopologyHint, ...]:
    """cpu_hint_table from the free CPUs per NUMA node (in the order of index.numa_ids, the mask
    table's columns): every mask that holds the reused CPUs and enough free ones, preferred when no
    narrower mask holds the request (MaskTable)."""
    table = index.mask_table
    free = np.array(free_per_numa, dtype=np.int64)
    fits = reused + np.maximum(0, table.members @ free - unknown) >= request_cpus
    if reusable_bits:
        fits &= table.holding(reusable_bits)
    return table.hints(fits, table.narrowest(request_cpus, len(index.numa_ids)), index.hints_by_counts)


# -- allocation -------------------------------------------------------------------------------------


def allocate_cpus(
    topology: NumaTopology,
    available: IdSet,
    count: int,
    affinity: NumaMask | None,
    options: StaticPolicyOptions,
    *,
    layout: CpuLayout | None = None,
    memo: CpuChoices | None = None,
) -> IdSet:
    """CPUs for one container: first inside `affinity`, then the rest anywhere (kubelet allocateCPUs).

    `memo`: answers kept by the caller for this layout (CpuNodeIndex.choices). The choice reads
    the layout, the CPUs, the count, the affinity and the options; the checks before it also read
    the topology's reserved CPUs, so they run first and a refusal is never remembered."""
    if layout is None:
        layout = CpuLayout.from_topology(topology)
    key = (available, count, None if affinity is None else affinity.bits, options)
    remembered = None if memo is None else memo.containers.get(key)
    if remembered is not None:
        # The availability checks passed when it was remembered and read nothing but the key and
        # the layout; the SMT check reads the topology's reserved CPUs too, so it runs again.
        if options.full_pcpus_only:
            _check_smt(layout, topology, available, count)
        return remembered
    pool = _available_bits(layout, topology, available, count)
    if options.full_pcpus_only:
        _check_smt(layout, topology, available, count)
    chosen = _choose_cpus(layout, topology, available, pool, count, affinity, options, memo)
    if memo is not None:
        _remember(memo.containers, key, chosen)
    return chosen


# Distinct CPU choices kept per table of a CpuChoices before it is emptied and filled anew.
_MAX_CHOICES = 4096

Remembered = TypeVar("Remembered")


def _remember(table: dict[Hashable, Remembered], key: Hashable, value: Remembered) -> None:
    if len(table) >= _MAX_CHOICES:
        table.clear()
    table[key] = value


@attrs.define(slots=True)
class CpuChoices:
    """What the CPU choice read and chose, for one layout (CpuNodeIndex.choices): allocate_cpus'
    answers by (free CPUs, count, affinity bits, options), and its packed takes by (pool, count,
    align by uncore cache). Each table holds at most _MAX_CHOICES answers, then starts over."""

    containers: dict[Hashable, IdSet] = attrs.field(factory=dict)
    packed: dict[Hashable, frozenbitarray] = attrs.field(factory=dict)


def _choose_cpus(
    layout: CpuLayout,
    topology: NumaTopology,
    available: IdSet,
    pool: frozenbitarray,
    count: int,
    affinity: NumaMask | None,
    options: StaticPolicyOptions,
    memo: CpuChoices | None = None,
) -> IdSet:
    """allocate_cpus once its checks passed (`pool`: `available` as the layout's bit mask).
    `memo`: the layout's packed takes by their pool, count and option (a NUMA node's free CPUs
    recur across nodes more often than the whole node's)."""
    if options.distribute_cpus_across_numa:
        result = IdSet()
        if affinity is not None:
            aligned = available & topology.cpus_in(affinity)
            result = _take(layout, aligned, min(count, len(aligned)), options)
        rest = _take(layout, available - result, count - len(result), options)
        return result | rest
    # Packed: the same two takes on bit masks (a take of nothing is skipped: it chooses nothing).
    index = layout.bits_index
    align = options.align_by_uncorecache
    chosen: bitarray = zeros(index.size)
    if affinity is not None:
        aligned_bits = pool & _numa_bits(index, affinity)
        wanted = min(count, aligned_bits.count())
        if wanted:
            chosen = _take_packed(layout, aligned_bits, wanted, align, memo)
    rest_count = count - chosen.count()
    if rest_count:
        chosen = chosen | _take_packed(layout, pool & ~chosen, rest_count, align, memo)
    return IdSet.from_bits(chosen)


def _take_packed(
    layout: CpuLayout, pool: frozenbitarray, count: int, align: bool, memo: CpuChoices | None
) -> frozenbitarray:
    if memo is None:
        return frozenbitarray(take_packed_bits(layout, pool, count, align))
    key = (pool, count, align)
    chosen = memo.packed.get(key)
    if chosen is None:
        chosen = frozenbitarray(take_packed_bits(layout, pool, count, align))
        _remember(memo.packed, key, chosen)
    return chosen


def _numa_bits(index: CpuBitIndex, affinity: NumaMask) -> bitarray:
    """The CPUs of the mask's NUMA nodes (topology.cpus_in) as a mask of index.size bits."""
    bits = zeros(index.size)
    for numa in affinity.ids():
        cpus = index.numa_masks.get(numa)
        if cpus is not None:
            bits |= cpus
    return bits


def _containers_in_order(request: HintRequest) -> list[ContainerInfo]:
    init = [container for container in request.containers if container.init]
    apps = [container for container in request.containers if not container.init]
    return init + apps


@attrs.frozen(slots=True)
class CpuHintProvider:
    """The CPU manager static policy as a HintProvider (see base.HintProvider)."""

    # cpuManagerPolicyOptions for nodes whose topology object reports none (plugin arguments).
    default_options: dict[str, str] = attrs.field(factory=dict)
    # One CpuNodeIndex per node topology, for as long as this provider lives.
    indexes: TopologyMemo[CpuNodeIndex] = attrs.field(init=False, eq=False, repr=False)

    @indexes.default
    def _index_memo(self) -> TopologyMemo[CpuNodeIndex]:
        # Hints by mask shape, shared by the indexes of all topologies of that shape.
        shared_hints: dict[Hashable, dict[Hashable, tuple[TopologyHint, ...]]] = {}
        # A layout depends on the CPU rows alone, an index on the rows and the options: topologies
        # of one machine shape (and a node's successive topology objects) share them.
        layouts: ContentMemo[CpuLayout] = ContentMemo()
        shared_indexes: ContentMemo[CpuNodeIndex] = ContentMemo()

        def index_of(topology: NumaTopology) -> CpuNodeIndex:
            options = StaticPolicyOptions.of(topology, self.default_options)
            rows = topology.cpu_rows

            def build() -> CpuNodeIndex:
                # Built from this topology, so a topology that cannot be read names its own node.
                layout = layouts.get(rows, lambda: CpuLayout.from_topology(topology))
                return CpuNodeIndex.of(topology, self.default_options, shared_hints, layout=layout, options=options)

            return shared_indexes.get((rows, options), build)

        return TopologyMemo(index_of)

    @property
    def name(self) -> str:
        return "cpu"

    @property
    def resources(self) -> frozenset[str]:
        return frozenset({"cpu"})

    def hints(self, request: HintRequest, topology: NumaTopology, free: FreeResources) -> ResourceHints | None:
        if topology.policies.cpu_manager_policy != CpuManagerPolicy.STATIC:
            return None
        count = guaranteed_cpus(request)
        if count == 0:
            return None
        try:
            index = self.indexes.get(topology)
            return {"cpu": cpu_hint_table(topology, free.cpus, count, index=index, unknown=free.unknown_count("cpu"))}
        except CpuTopologyError as error:
            log.warning("cpu hints unavailable", pod=request.pod, node=topology.node_name, error=str(error))
            return {"cpu": []}

    def allocate(
        self, request: HintRequest, best_hint: TopologyHint, topology: NumaTopology, free: FreeResources
    ) -> ProviderAllocation:
        per_container = self.allocate_containers(request, best_hint, topology, free)
        if not per_container:
            return {}
        if len(per_container) == 1:
            return {"cpu": next(iter(per_container.values()))}
        chosen = IdSet()
        for cpus in per_container.values():
            chosen = chosen | cpus
        return {"cpu": chosen}

    def _allocatable_cpus(self, topology: NumaTopology) -> IdSet:
        """topology.allocatable_cpus, without reading every CPU row of a topology object seen for
        the first time where its shape's index has them."""
        try:
            index = self.indexes.get(topology)
        except (CpuTopologyError, IdSetError):
            # The topology's own answer, or its own error.
            return topology.allocatable_cpus
        return index.allocatable_cpus(topology.reserved_cpus)

    def numa_nodes_of(self, topology: NumaTopology, cpus: IdSet) -> set[int] | None:
        """The NUMA nodes of these CPUs (those the topology lists), by the shape's index; None
        where the topology has no index (its CPU rows cannot be read)."""
        try:
            index = self.indexes.get(topology).layout.bits_index
        except (CpuTopologyError, IdSetError):
            return None
        bits = cpus.bits
        if len(bits) > index.size:
            bits = bits[: index.size]
        elif len(bits) < index.size:
            bits = bits + zeros(index.size - len(bits))
        return {numa for numa, mask in index.numa_masks.items() if count_and(bits, mask)}

    def allocate_containers(
        self, request: HintRequest, best_hint: TopologyHint, topology: NumaTopology, free: FreeResources
    ) -> dict[str, IdSet]:
        """Exclusive CPUs per container name, in the order the kubelet admits the containers.

        In pod scope a finished init container's CPUs go back to the pod for its later containers,
        as the kubelet's CPU reuse does; a sidecar keeps its CPUs.
        """
        if topology.policies.cpu_manager_policy != CpuManagerPolicy.STATIC:
            return {}
        options = StaticPolicyOptions.of(topology, self.default_options)
        available = free.cpus & self._allocatable_cpus(topology)
        if request.scope == TopologyScope.POD and request.containers:
            units = [
                (container.name, container.init and not container.sidecar, whole_cpus(container.requests.milli_cpu))
                for container in _containers_in_order(request)
            ]
            if request.qos != QosClass.GUARANTEED:
                return {}
        else:
            units = [(request.container, False, guaranteed_cpus(request))]
        reusable = _NO_CPUS
        result: dict[str, IdSet] = {}
        last = len(units) - 1
        for position, (name, reusable_after, count) in enumerate(units):
            if count == 0:
                continue
            pool = available | reusable
            unknown = free.unknown_count("cpu")
            if unknown > 0 and len(reusable) + max(0, len(available - reusable) - unknown) < count:
                # Whatever the hint (none under the none policy): the kubelet may find too few.
                raise ProviderError(
                    f"cpu: {count} exclusive CPUs requested for {request.describe()} of pod {request.pod}, "
                    f"{len(pool)} look free on node {topology.node_name} but {unknown} are held by pods whose "
                    f"ids are unknown ({', '.join(free.unknown_pods.get('cpu', ()))})"
                )
            try:
                index = self.indexes.get(topology)
                cpus = allocate_cpus(
                    topology, pool, count, best_hint.affinity, options, layout=index.layout, memo=index.choices
                )
            except (CpuAssignmentError, CpuTopologyError) as error:
                raise ProviderError(
                    f"cpu: cannot pick {count} exclusive CPUs for {request.describe()} of pod {request.pod} "
                    f"on node {topology.node_name}: {error}"
                ) from error
            result[name] = cpus
            if position < last:
                available = available - cpus
                reusable = (reusable | cpus) if reusable_after else (reusable - cpus)
        # No log line here: even a filtered one costs more than the rest of this method (the
        # logger is built per call), and the chosen CPUs are in the pod's allocation.
        return result


# Plugin arguments that set the CPU manager options of nodes that do not report theirs.
OPTION_ARGUMENTS = {
    FULL_PCPUS_ONLY: FULL_PCPUS_ONLY,
    DISTRIBUTE_CPUS_ACROSS_NUMA: DISTRIBUTE_CPUS_ACROSS_NUMA,
    "align-by-uncorecache": PREFER_ALIGN_BY_UNCORECACHE,
}


def cpu_provider_factory(arguments: Mapping[str, Any]) -> CpuHintProvider:
    """Entry-point factory (group numasched.hint_providers).

    Arguments full-pcpus-only, distribute-cpus-across-numa and align-by-uncorecache (booleans) are
    the CPU manager options assumed for nodes whose topology object does not report them.
    """
    defaults: dict[str, str] = {}
    for argument, option in OPTION_ARGUMENTS.items():
        if argument not in arguments:
            continue
        raw = arguments[argument]
        if isinstance(raw, bool):
            defaults[option] = "true" if raw else "false"
        elif isinstance(raw, str) and raw.strip() in _TRUE | _FALSE:
            defaults[option] = "true" if raw.strip() in _TRUE else "false"
        else:
            raise PluginArgumentError(NUMA_AWARE_PLUGIN, argument, f"expected true or false, got {quote_value(raw)}")
    return CpuHintProvider(defaults)
