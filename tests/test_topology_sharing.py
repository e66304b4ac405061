"""Tables that depend on part of a topology are shared by every topology whose part is equal, and
the topology's content key (the admission fingerprint) is equal exactly when everything admission
reads but the node's name is equal.

Nodes of one machine shape build a CPU layout, a CPU index and device indexes once between them,
a node's successive topology objects reuse them, errors still name the node being read, and the
answers read through a shared table are those of a table built for the node alone."""

from __future__ import annotations

import copy
import gc
import pickle
import weakref
from collections.abc import Callable
from typing import Any

import attrs
import pytest
from conftest import load_machine
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from numasched.api.idset import IdSet
from numasched.api.topology import (
    CpuInfo,
    CpuManagerPolicy,
    DeviceGroup,
    DeviceInfo,
    DeviceLink,
    KubeletPolicies,
    NumaTopology,
    PcieDistance,
    TopologyPolicy,
    TopologyScope,
    topology_content_key,
)
from numasched.cache.convert_topology import numatopology_to_topology
from numasched.cache.machine_shapes import machine_objects
from numasched.plugins.numaaware.plugin import (
    AdmissionTables,
    TopologyFingerprint,
    fingerprint_memo,
    topology_fingerprint,
)
from numasched.plugins.numaaware.providers import cpu_layout
from numasched.plugins.numaaware.providers.cpu import CpuHintProvider, CpuNodeIndex, cpu_hint_table
from numasched.plugins.numaaware.providers.cpu_layout import CpuLayout, CpuTopologyError
from numasched.plugins.numaaware.providers.device import DeviceGroupIndex, DeviceProvider, device_hint_table
from numasched.plugins.numaaware.providers.topology_memo import ContentMemo

GPU = "nvidia.com/gpu"
# hypothesis's data.draw, as the mutations below take it.
Draw = Callable[[st.SearchStrategy[Any]], Any]


def topology_of(machine: str, name: str, policy: TopologyPolicy = TopologyPolicy.RESTRICTED) -> NumaTopology:
    """A node's topology as the cache converts it: its own objects, nothing shared with another node."""
    _, numatopology = machine_objects(load_machine(machine), name, topology_policy=policy)
    return numatopology_to_topology(numatopology)


def count_layout_builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the nodes whose CPU layout is built from now on."""
    built: list[str] = []
    original = CpuLayout.from_topology.__func__  # type: ignore[attr-defined]

    def counted(cls: type[CpuLayout], topology: NumaTopology) -> CpuLayout:
        built.append(topology.node_name)
        layout: CpuLayout = original(cls, topology)
        return layout

    monkeypatch.setattr(cpu_layout.CpuLayout, "from_topology", classmethod(counted))
    return built


# -- CPU tables -------------------------------------------------------------------------------------


def test_nodes_of_one_shape_share_the_cpu_layout_and_index(monkeypatch: pytest.MonkeyPatch) -> None:
    built = count_layout_builds(monkeypatch)
    provider = CpuHintProvider()
    alpha = topology_of("dgx1-v100", "alpha")
    beta = attrs.evolve(topology_of("dgx1-v100", "beta"), available_cpus=IdSet(range(8)), reserved_cpus=IdSet([0]))
    assert alpha.cpus is not beta.cpus and alpha.cpus == beta.cpus
    assert provider.indexes.get(alpha) is provider.indexes.get(beta)
    assert built == ["alpha"]
    # Other CPU manager options: an index of its own, on the same layout.
    pinned = attrs.evolve(
        topology_of("dgx1-v100", "gamma"),
        policies=attrs.evolve(alpha.policies, cpu_manager_options={"full-pcpus-only": "true"}),
    )
    pinned_index = provider.indexes.get(pinned)
    assert pinned_index is not provider.indexes.get(alpha)
    assert pinned_index.options.full_pcpus_only and not provider.indexes.get(alpha).options.full_pcpus_only
    assert pinned_index.layout is provider.indexes.get(alpha).layout
    # Another machine: its own layout.
    other = topology_of("epyc-1s-nps4", "delta")
    assert provider.indexes.get(other).layout is not provider.indexes.get(alpha).layout
    assert built == ["alpha", "delta"]


def test_a_nodes_next_topology_object_reuses_the_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    built = count_layout_builds(monkeypatch)
    provider = CpuHintProvider()
    first_index_id = id(provider.indexes.get(topology_of("hgx-h100", "alpha")))
    gc.collect()
    # The first object is gone (its per-object entry with it); an update brings an equal one.
    assert len(provider.indexes) == 0
    assert id(provider.indexes.get(topology_of("hgx-h100", "alpha"))) == first_index_id
    assert built == ["alpha"]


def test_an_error_names_the_node_being_read_each_time() -> None:
    provider = CpuHintProvider()
    rows = (CpuInfo(0, 0, 0, 0, 0), CpuInfo(0, 1, 0, 0, 0))
    for name in ("alpha", "beta", "alpha"):
        topology = NumaTopology(node_name=name, numa_ids=(0,), cpus=rows)
        with pytest.raises(CpuTopologyError, match=f"node {name}: CPU 0 is listed twice"):
            provider.indexes.get(topology)
    assert len(provider.indexes) == 0
    empty = NumaTopology(node_name="gamma", numa_ids=(0,))
    with pytest.raises(CpuTopologyError, match="node gamma: the topology lists no CPUs"):
        provider.indexes.get(empty)
    # A good topology of the same NUMA ids is not held back by the failures before it.
    good = NumaTopology(node_name="delta", numa_ids=(0,), cpus=rows[:1])
    assert provider.indexes.get(good).layout.all_cpus == frozenset({0})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    calls=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 30)), min_size=1, max_size=12),
)
def test_cpu_hints_read_through_a_shared_index_equal_a_fresh_build(
    data: st.DataObject, calls: list[tuple[int, int]]
) -> None:
    """Three nodes of one shape, each with its own reserved and free CPUs: what each node's hints
    are must not depend on which node built the shared index or filled its hint cache."""
    base = topology_of("dgx1-v100", "base")
    every_cpu = sorted(base.all_cpus)
    nodes: list[tuple[NumaTopology, IdSet]] = []
    for number in range(3):
        reserved = data.draw(st.sets(st.sampled_from(every_cpu), max_size=4), label=f"reserved {number}")
        free_ids = data.draw(st.sets(st.sampled_from(every_cpu)), label=f"free {number}")
        topology = attrs.evolve(topology_of("dgx1-v100", f"node-{number}"), reserved_cpus=IdSet(reserved))
        nodes.append((topology, IdSet(free_ids)))
    provider = CpuHintProvider()
    assert len({id(provider.indexes.get(topology)) for topology, _ in nodes}) == 1
    for node_number, request in calls:
        topology, free = nodes[node_number]
        shared = cpu_hint_table(topology, free, request, index=provider.indexes.get(topology))
        fresh = cpu_hint_table(topology, free, request, index=CpuNodeIndex.of(topology))
        assert shared == fresh, (topology.node_name, request)


# -- device tables ----------------------------------------------------------------------------------


def test_device_indexes_are_shared_by_group_and_numa_ids() -> None:
    provider = DeviceProvider()
    alpha = topology_of("dgx-a100", "alpha")
    beta = attrs.evolve(topology_of("dgx-a100", "beta"), available_devices={GPU: frozenset({"0", "1"})})
    alpha_indexes, beta_indexes = provider.indexes.get(alpha), provider.indexes.get(beta)
    assert alpha_indexes is not beta_indexes  # each topology its own dict
    assert alpha_indexes.keys() == beta_indexes.keys() and GPU in alpha_indexes
    assert all(alpha_indexes[resource] is beta_indexes[resource] for resource in alpha_indexes)
    # The same devices on other NUMA ids: other masks, another index.
    group = alpha.devices[GPU]
    renumbered = attrs.evolve(topology_of("dgx-a100", "gamma"), numa_ids=(*alpha.numa_ids, 9))
    assert provider.indexes.get(renumbered)[GPU] is not alpha_indexes[GPU]
    # A device that moved NUMA node: another group, another index.
    moved = attrs.evolve(group.devices[0], numa=1 - (group.devices[0].numa or 0))
    changed = attrs.evolve(
        topology_of("dgx-a100", "delta"), devices={GPU: attrs.evolve(group, devices=(moved, *group.devices[1:]))}
    )
    assert provider.indexes.get(changed)[GPU] is not alpha_indexes[GPU]


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_device_hints_read_through_a_shared_index_equal_a_fresh_build(data: st.DataObject) -> None:
    provider = DeviceProvider()
    nodes = [topology_of("pcie-8gpu-2numa", f"node-{number}") for number in range(2)]
    ids = [device.id for device in nodes[0].devices[GPU].devices]
    for _ in range(4):
        topology = nodes[data.draw(st.integers(0, 1), label="node")]
        free = data.draw(st.lists(st.sampled_from(ids), unique=True), label="free")
        request = data.draw(st.integers(1, 8), label="request")
        group = topology.devices[GPU]
        shared = device_hint_table(group, topology.numa_ids, free, request, index=provider.indexes.get(topology)[GPU])
        fresh = device_hint_table(
            group, topology.numa_ids, free, request, index=DeviceGroupIndex.of(group, topology.numa_ids)
        )
        assert shared == fresh


# -- the content memo -------------------------------------------------------------------------------


class Table:
    """A weakly referenceable value."""

    def __init__(self, key: int) -> None:
        self.key = key


def table(key: int) -> Callable[[], Table]:
    return lambda: Table(key)


def test_the_content_memo_keeps_values_in_use_and_only_the_last_few_others() -> None:
    memo: ContentMemo[Table] = ContentMemo(recent=4)
    held = [memo.get(key, table(key)) for key in range(3)]
    for key in range(3, 1000):
        memo.get(key, table(key))
    gc.collect()
    # The three held values and the last four built.
    assert len(memo) == 7
    assert [memo.get(key, lambda: Table(-1)) for key in range(3)] == held
    assert memo.get(999, lambda: Table(-1)).key == 999
    assert memo.get(5, lambda: Table(-1)).key == -1


def test_the_content_memo_does_not_remember_a_failed_build() -> None:
    memo: ContentMemo[Table] = ContentMemo()

    def failing() -> Table:
        raise ValueError("node alpha: bad")

    with pytest.raises(ValueError, match="alpha"):
        memo.get("key", failing)
    assert len(memo) == 0
    assert memo.get("key", lambda: Table(1)).key == 1


# -- the content key --------------------------------------------------------------------------------


def test_the_key_ignores_the_node_name_and_object_identity() -> None:
    alpha = topology_of("dgx1-v100", "alpha")
    beta = copy.deepcopy(attrs.evolve(alpha, node_name="beta"))
    assert beta.cpus is not alpha.cpus
    assert topology_content_key(alpha) == topology_content_key(beta)
    assert hash(topology_content_key(alpha)) == hash(topology_content_key(beta))
    assert TopologyFingerprint.of(alpha) == TopologyFingerprint.of(beta)
    tables = AdmissionTables()
    free = ("free",)
    assert tables.class_id(TopologyFingerprint.of(alpha), free) == tables.class_id(TopologyFingerprint.of(beta), free)
    other = topology_of("dgx1-v100", "gamma", TopologyPolicy.SINGLE_NUMA_NODE)
    assert tables.class_id(TopologyFingerprint.of(other), free) != tables.class_id(TopologyFingerprint.of(alpha), free)


def test_nodes_alike_hold_one_fingerprint_object_and_it_goes_with_them() -> None:
    memo = fingerprint_memo()
    alpha, beta = topology_of("hgx-h100", "alpha"), topology_of("hgx-h100", "beta")
    other = topology_of("hgx-h100", "gamma", TopologyPolicy.SINGLE_NUMA_NODE)
    assert memo.get(alpha) is memo.get(beta)
    assert memo.get(alpha) == TopologyFingerprint.of(beta)
    assert memo.get(other) is not memo.get(alpha) and memo.get(other) != memo.get(alpha)
    # Another availability: another fingerprint, on the same machine part.
    busy = attrs.evolve(beta, available_cpus=IdSet([5]))
    assert memo.get(busy) != memo.get(alpha) and memo.get(busy) == TopologyFingerprint.of(busy)
    machine_part = memo.get(alpha).content[0]  # type: ignore[index]
    assert memo.get(busy).content[0] is machine_part  # type: ignore[index]
    collected = weakref.ref(memo.get(other))
    del other
    # Past the memo's recent builds, a fingerprint no topology uses is gone.
    for number in range(100):
        memo.get(attrs.evolve(alpha, pods_fingerprint=f"pfp-{number}"))
    gc.collect()
    assert collected() is None


def _other_int(draw: Draw, old: int, low: int = 0, high: int = 300) -> int:
    value: int = draw(st.integers(low, high).filter(lambda value: value != old))
    return value


def _replace_at(items: tuple[Any, ...], index: int, value: Any) -> tuple[Any, ...]:
    return (*items[:index], value, *items[index + 1 :])


def _mutate_cpus(draw: Draw, topology: NumaTopology) -> tuple[CpuInfo, ...]:
    rows = topology.cpus
    index = draw(st.integers(0, len(rows) - 1))
    how = draw(st.sampled_from(["field", "drop", "swap"]))
    if how == "drop":
        return rows[:index] + rows[index + 1 :]
    if how == "swap":
        other = draw(st.integers(0, len(rows) - 1).filter(lambda value: rows[value] != rows[index]))
        swapped = list(rows)
        swapped[index], swapped[other] = rows[other], rows[index]
        return tuple(swapped)
    name = draw(st.sampled_from(["cpu", "core", "socket", "numa", "l3"]))
    row = rows[index]
    return _replace_at(rows, index, attrs.evolve(row, **{name: _other_int(draw, getattr(row, name))}))


def _mutate_nested(draw: Draw, table: dict[Any, dict[int, int]]) -> dict[Any, dict[int, int]]:
    outer = draw(st.sampled_from(sorted(table)))
    inner = draw(st.sampled_from(sorted(table[outer])))
    how = draw(st.sampled_from(["value", "drop", "reorder"]))
    row = dict(table[outer])
    if how == "value":
        row[inner] = _other_int(draw, row[inner], 0, 1 << 40)
    elif how == "drop":
        del row[inner]
    elif len(row) > 1:
        row = dict(reversed(row.items()))
    else:
        row[inner + 100] = 1
    return {**table, outer: row}


def _mutate_devices(draw: Draw, topology: NumaTopology) -> dict[str, DeviceGroup]:
    group = topology.devices[GPU]
    index = draw(st.integers(0, len(group.devices) - 1))
    device = group.devices[index]
    how = draw(st.sampled_from(["id", "numa", "pci_bus_id", "pci_switch", "model", "healthy", "order", "partitions"]))
    if how == "order":
        devices = tuple(reversed(group.devices))
    elif how == "partitions":
        ids = [each.id for each in group.devices]
        return {GPU: attrs.evolve(group, partitions=(frozenset(ids[:2]), frozenset(ids[2:])))}
    else:
        values: dict[str, Any] = {
            "id": device.id + "x",
            "numa": None if device.numa is not None else 0,
            "pci_bus_id": (device.pci_bus_id or "") + "0",
            "pci_switch": (device.pci_switch or "") + "s",
            "model": (device.model or "") + "m",
            "healthy": not device.healthy,
        }
        devices = _replace_at(group.devices, index, attrs.evolve(device, **{how: values[how]}))
    return {GPU: attrs.evolve(group, devices=devices)}


def _mutate_links(draw: Draw, topology: NumaTopology) -> dict[Any, DeviceLink]:
    pairs = list(topology.links)
    pair = draw(st.sampled_from(pairs))
    link = topology.links[pair]
    how = draw(st.sampled_from(["nvlinks", "nvswitch", "pcie", "drop", "reorder"]))
    if how == "drop":
        return {key: value for key, value in topology.links.items() if key != pair}
    if how == "reorder":
        return dict(reversed(topology.links.items()))
    changed = {
        "nvlinks": attrs.evolve(link, nvlinks=link.nvlinks + 1),
        "nvswitch": attrs.evolve(link, nvswitch=not link.nvswitch),
        "pcie": attrs.evolve(link, pcie=PcieDistance.SYS if link.pcie != PcieDistance.SYS else PcieDistance.PIX),
    }[how]
    return {**topology.links, pair: changed}


def _mutate_policies(draw: Draw, policies: KubeletPolicies) -> KubeletPolicies:
    name = draw(st.sampled_from([field.name for field in attrs.fields(KubeletPolicies)]))
    values: dict[str, Any] = {
        "cpu_manager_policy": CpuManagerPolicy.NONE
        if policies.cpu_manager_policy == CpuManagerPolicy.STATIC
        else CpuManagerPolicy.STATIC,
        "cpu_manager_options": {**policies.cpu_manager_options, "full-pcpus-only": "true"},
        "topology_manager_policy": draw(
            st.sampled_from([policy for policy in TopologyPolicy if policy != policies.topology_manager_policy])
        ),
        "topology_manager_scope": TopologyScope.POD
        if policies.topology_manager_scope == TopologyScope.CONTAINER
        else TopologyScope.CONTAINER,
        "topology_manager_options": {**policies.topology_manager_options, "prefer-closest-numa-nodes": "true"},
        "memory_manager_policy": policies.memory_manager_policy + "x",
    }
    return attrs.evolve(policies, **{name: values[name]})


def _other_id_set(draw: Draw, old: IdSet | None, every: list[int]) -> IdSet:
    return IdSet(draw(st.sets(st.sampled_from(every)).filter(lambda ids: old is None or IdSet(ids) != old)))


# One strategy per NumaTopology field but node_name: a value that differs from the topology's.
MUTATIONS: dict[str, Callable[[Draw, NumaTopology], Any]] = {
    "numa_ids": lambda draw, t: draw(
        st.lists(st.integers(0, 7), unique=True, max_size=4).map(tuple).filter(lambda ids: ids != t.numa_ids)
    ),
    "cpus": _mutate_cpus,
    "distances": lambda draw, t: _mutate_nested(draw, t.distances),
    "memory": lambda draw, t: _mutate_nested(draw, t.memory),
    "devices": _mutate_devices,
    "links": _mutate_links,
    "reserved_cpus": lambda draw, t: _other_id_set(draw, t.reserved_cpus, sorted(t.all_cpus)),
    "policies": lambda draw, t: _mutate_policies(draw, t.policies),
    "cpu_ids_known": lambda draw, t: not t.cpu_ids_known,
    "available_cpus": lambda draw, t: (
        None
        if t.available_cpus is not None and draw(st.booleans())
        else _other_id_set(draw, t.available_cpus, sorted(t.all_cpus))
    ),
    "available_devices": lambda draw, t: draw(
        st.sampled_from([{}, {GPU: frozenset()}, {GPU: frozenset({"0"})}, {"rdma/hca": frozenset({"0"})}]).filter(
            lambda value: value != t.available_devices
        )
    ),
    "pods_fingerprint": lambda draw, t: draw(
        st.one_of(st.none(), st.text(max_size=8)).filter(lambda value: value != t.pods_fingerprint)
    ),
}


def test_every_field_but_the_name_has_a_mutation() -> None:
    """A field added to NumaTopology must be added to topology_content_key and to MUTATIONS."""
    assert set(MUTATIONS) == {field.name for field in attrs.fields(NumaTopology)} - {"node_name"}


BASES = {machine: topology_of(machine, "base") for machine in ("dgx1-v100", "hgx-h100")}


@settings(max_examples=300, deadline=None)
@given(machine=st.sampled_from(sorted(BASES)), field=st.sampled_from(sorted(MUTATIONS)), data=st.data())
def test_any_change_of_a_field_changes_the_key(machine: str, field: str, data: st.DataObject) -> None:
    base = BASES[machine]
    value = MUTATIONS[field](data.draw, base)
    changed = attrs.evolve(base, node_name="renamed", **{field: value})
    assert topology_content_key(changed) != topology_content_key(base)
    assert TopologyFingerprint.of(changed) != TopologyFingerprint.of(base)
    # Back to the base value (a copy, not the same objects): equal again.
    restored = attrs.evolve(changed, **{field: copy.deepcopy(getattr(base, field))})
    assert topology_content_key(restored) == topology_content_key(base)


# Each field of a small topology from a few values, so that draws are often equal.
_LINK = ((GPU, "0"), (GPU, "1"))
_TWO_GPUS = (DeviceInfo("0", 0), DeviceInfo("1", 1))
SMALL_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "node_name": st.sampled_from(["a", "b"]),
    "numa_ids": st.sampled_from([(0,), (0, 1)]),
    "cpus": st.sampled_from(
        [
            (CpuInfo(0, 0, 0, 0, 0), CpuInfo(1, 0, 0, 0, 0)),
            (CpuInfo(0, 0, 0, 0, 0), CpuInfo(1, 1, 0, 1, 0)),
            (CpuInfo(1, 0, 0, 0, 0), CpuInfo(0, 0, 0, 0, 0)),
        ]
    ),
    "distances": st.sampled_from([{}, {0: {0: 10, 1: 20}}, {0: {1: 20, 0: 10}}]),
    "memory": st.sampled_from([{}, {"memory": {0: 1 << 30}}, {"memory": {0: 2 << 30}}]),
    "devices": st.sampled_from(
        [
            {},
            {GPU: DeviceGroup(GPU, _TWO_GPUS)},
            {GPU: DeviceGroup(GPU, (DeviceInfo("0", 0), DeviceInfo("1", 0)))},
            {GPU: DeviceGroup(GPU, (DeviceInfo("0", 0), DeviceInfo("1", 1, healthy=False)))},
            {GPU: DeviceGroup(GPU, _TWO_GPUS, (frozenset({"0"}), frozenset({"1"})))},
        ]
    ),
    "links": st.sampled_from([{}, {_LINK: DeviceLink(nvlinks=2)}, {_LINK: DeviceLink(pcie=PcieDistance.PIX)}]),
    "reserved_cpus": st.sampled_from([IdSet(), IdSet([0])]),
    "policies": st.sampled_from(
        [
            KubeletPolicies(),
            KubeletPolicies(cpu_manager_policy=CpuManagerPolicy.STATIC),
            KubeletPolicies(cpu_manager_options={"full-pcpus-only": "true"}),
            KubeletPolicies(topology_manager_policy=TopologyPolicy.RESTRICTED),
            KubeletPolicies(topology_manager_scope=TopologyScope.POD),
            KubeletPolicies(topology_manager_options={"prefer-closest-numa-nodes": "true"}),
            KubeletPolicies(memory_manager_policy="Static"),
        ]
    ),
    "cpu_ids_known": st.booleans(),
    "available_cpus": st.sampled_from([None, IdSet(), IdSet([1])]),
    "available_devices": st.sampled_from([{}, {GPU: frozenset({"0"})}, {GPU: frozenset({"1", "0"})}]),
    "pods_fingerprint": st.sampled_from([None, "pfp0v001aa"]),
}


def test_every_field_has_small_values() -> None:
    assert set(SMALL_FIELDS) == {field.name for field in attrs.fields(NumaTopology)}


def _in_order(topology: NumaTopology) -> Any:
    """The topology as nested values whose equality also sees the order of every mapping."""
    return (
        attrs.evolve(topology, node_name=""),
        [(key, list(row.items())) for key, row in topology.distances.items()],
        [(key, list(row.items())) for key, row in topology.memory.items()],
        list(topology.devices),
        list(topology.links),
        list(topology.policies.cpu_manager_options.items()),
        list(topology.policies.topology_manager_options.items()),
        list(topology.available_devices),
    )


@settings(max_examples=500, deadline=None)
@given(data=st.data(), redrawn=st.sets(st.sampled_from(sorted(SMALL_FIELDS))))
def test_equal_keys_exactly_when_equal_content_in_equal_order(data: st.DataObject, redrawn: set[str]) -> None:
    """Two small topologies, the second the first with some fields drawn again. Oracle: attrs
    equality of the topologies without their names, plus the order of every mapping; and the
    pickled form that the key replaces (equal pickles, equal keys)."""
    first = data.draw(st.builds(NumaTopology, **SMALL_FIELDS), label="first")
    second = attrs.evolve(first, **{name: data.draw(SMALL_FIELDS[name], label=name) for name in sorted(redrawn)})
    assert (topology_content_key(first) == topology_content_key(second)) == (_in_order(first) == _in_order(second))
    pickled_first = pickle.dumps(attrs.evolve(first, node_name=""))
    pickled_second = pickle.dumps(attrs.evolve(second, node_name=""))
    if pickled_first == pickled_second:
        assert topology_fingerprint(first) == topology_fingerprint(second)
