"""Every converter is total: arbitrary JSON in any field it reads gives a value or a ConversionError
naming the object, never another exception; and one poison object never keeps the good pods from
being scheduled.

The oracle is the converters' contract (the exception type), independent of what they compute; the
scheduling half checks placements by the simulated API server's bindings, not by any plugin.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from numasched.api.allocation import ALLOCATION_ANNOTATION
from numasched.api.quantity import shown
from numasched.cache import convert_topology
from numasched.cache.cache import Cache
from numasched.cache.convert_pod import (
    ConversionError,
    bound_pod_allocation,
    node_to_node_info,
    pod_to_task,
    podgroup_to_job,
    priority_class_value,
)
from numasched.cache.convert_queue import queue_from_object
from numasched.cache.events import EventType, ObjectEvent
from numasched.cache.kube.resources import ConfigMapFeed, ConfigMapRef
from numasched.cache.simcluster import SimCluster
from numasched.conf.defaults import DEFAULT_CONFIG_TEXT, DEFAULT_SOURCE_NAME
from numasched.conf.loader import load_config_text
from numasched.conf.watch import ConfigSource
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.loop import schedule_cycle

# Values a careless or hostile writer puts where a quantity, id or count belongs.
POISON_TEXT = [
    "1e400",
    "9" * 5000,
    "abc",
    "-2",
    "²",
    "1e-400",
    "0x10",
    "1Ki5",
    "1e2147483648",
    "9223372036854775808",
    "",
    " ",
    "NaN",
    "Infinity",
    "0-3,1e9",
    "0-1099511627776",
    "4294967296",
    "\x00",
    "1.2.3",
]
POISON_NUMBERS = [2**40, -1, 2**63, -(2**63) - 1, 10**100, float("inf"), float("nan"), 1e308, 0.5, True]

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from(POISON_NUMBERS),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(POISON_TEXT),
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.text(max_size=8) | st.sampled_from(POISON_TEXT), children, max_size=4),
    ),
    max_leaves=12,
)


def good_pod() -> dict[str, Any]:
    resources = {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "default",
            "uid": "uid-p",
            "resourceVersion": "7",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "deletionTimestamp": None,
            "labels": {"app": "x"},
            "annotations": {
                "scheduling.k8s.io/group-name": "g",
                ALLOCATION_ANNOTATION: '{"containers": {"main": {"cpuset": "0-1"}}}',
            },
        },
        "spec": {
            "schedulerName": "numasched",
            "nodeName": "n1",
            "priority": 10,
            "priorityClassName": "high",
            "nodeSelector": {"zone": "a"},
            "overhead": {"cpu": "100m"},
            "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "2", "memory": "2Gi"}},
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [{"key": "k", "operator": "In", "values": ["v"]}],
                                "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}],
                            }
                        ]
                    }
                }
            },
            "tolerations": [{"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}],
            "initContainers": [
                {"name": "init", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}, "limits": {}}}
            ],
            "containers": [{"name": "main", "resources": {"requests": dict(resources), "limits": dict(resources)}}],
        },
        "status": {"phase": "Running", "qosClass": "Guaranteed", "conditions": []},
    }


def good_node() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1", "labels": {"zone": "a"}},
        "spec": {"unschedulable": False, "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
        "status": {
            "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110", "nvidia.com/gpu": "2"},
            "capacity": {"cpu": "8", "memory": "16Gi", "pods": "110", "nvidia.com/gpu": "2"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def good_pod_group() -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "default", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"minMember": 2, "queue": "q", "priorityClassName": "high", "minResources": {"cpu": "4"}},
        "status": {"phase": "Pending"},
    }


def good_queue() -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": "q"},
        "spec": {"weight": 2},
        "status": {"state": "Open"},
    }


def good_priority_class() -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000}


def good_numatopology() -> dict[str, Any]:
    return {
        "apiVersion": "nodeinfo.volcano.sh/v1alpha1",
        "kind": "Numatopology",
        "metadata": {"name": "n1"},
        "spec": {
            "policies": {"CPUManagerPolicy": "static", "TopologyManagerPolicy": "single-numa-node"},
            "cpuDetail": {
                "0": {"numa": 0, "socket": 0, "core": 0},
                "1": {"numa": 0, "socket": 0, "core": 1},
                "2": {"numa": 1, "socket": 0, "core": 2},
                "3": {"numa": 1, "socket": 0, "core": 3},
            },
            "numares": {
                "cpu": {"allocatable": "0-3", "capacity": 4},
                "nvidia.com/gpu": {"allocatable": "0-1", "capacity": 2},
            },
            "resReserved": {"cpu": "0", "memory": "0"},
            "podAllocations": [
                {
                    "uid": "uid-x",
                    "name": "x",
                    "namespace": "default",
                    "containerAllocations": [{"name": "main", "allocations": {"cpu": "0", "nvidia.com/gpu": "1"}}],
                }
            ],
        },
    }


def good_nrt() -> dict[str, Any]:
    return {
        "apiVersion": "topology.node.k8s.io/v1alpha2",
        "kind": "NodeResourceTopology",
        "metadata": {"name": "n1"},
        "topologyPolicies": ["SingleNUMANodeContainerLevel"],
        "attributes": [{"name": "topologyManagerPolicy", "value": "single-numa-node"}],
        "zones": [
            {
                "name": "node-0",
                "type": "Node",
                "costs": [{"name": "node-0", "value": 10}, {"name": "node-1", "value": 20}],
                "resources": [
                    {"name": "cpu", "capacity": "4", "allocatable": "4", "available": "2"},
                    {"name": "nvidia.com/gpu", "capacity": "1", "allocatable": "1", "available": "1"},
                ],
            },
            {
                "name": "node-1",
                "type": "Node",
                "resources": [{"name": "cpu", "capacity": "4", "allocatable": "4", "available": "4"}],
            },
        ],
    }


def _pod_both(obj: Mapping[str, Any]) -> object:
    task = pod_to_task(obj)
    return bound_pod_allocation(task)


def _numatopology(obj: Mapping[str, Any]) -> object:
    warnings: list[str] = []
    topology = convert_topology.numatopology_to_topology(obj, warnings.append)
    return topology, convert_topology.pod_allocation_report(obj)


def queue_reporting(obj: Any) -> Any:
    """A Queue is kept with defaults for the fields it cannot use, each reported by name; here the
    first report is raised, as the other kinds refuse the object."""
    queue, problems = queue_from_object(obj)
    if problems:
        raise ConversionError("Queue", queue.name, problems[0])
    return queue


CONVERTERS: dict[str, tuple[Callable[[], dict[str, Any]], Callable[[Mapping[str, Any]], object]]] = {
    "Pod": (good_pod, _pod_both),
    "Node": (good_node, node_to_node_info),
    "PodGroup": (good_pod_group, podgroup_to_job),
    "Queue": (good_queue, queue_reporting),
    "PriorityClass": (good_priority_class, priority_class_value),
    "Numatopology": (good_numatopology, _numatopology),
    "NodeResourceTopology": (good_nrt, convert_topology.nrt_to_topology),
}
POD_LIKE = ("Pod", "Node", "PodGroup", "Queue", "PriorityClass")
TOPOLOGY = ("Numatopology", "NodeResourceTopology")


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place in a JSON value: keys of objects, items of lists."""
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from paths(item, (*prefix, index))


def replaced(obj: dict[str, Any], path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    result = copy.deepcopy(obj)
    parent: Any = result
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = value
    return result


def removed(obj: dict[str, Any], path: tuple[Any, ...]) -> Any:
    result = copy.deepcopy(obj)
    parent: Any = result
    for step in path[:-1]:
        parent = parent[step]
    del parent[path[-1]]
    return result


def fuzzed(kind: str) -> st.SearchStrategy[Any]:
    """The good object of `kind` with one field (anywhere in it) replaced by any JSON value, or
    removed, or a quantity-like value swapped for a poison string."""
    make, _ = CONVERTERS[kind]
    return fuzzed_of(make())


def fuzzed_of(base: dict[str, Any]) -> st.SearchStrategy[Any]:
    every = list(paths(base))
    inner = [path for path in every if path]
    return st.one_of(
        st.builds(lambda path, value: replaced(base, path, value), st.sampled_from(every), json_values),
        st.builds(lambda path: removed(base, path), st.sampled_from(inner)),
        st.builds(
            lambda path, value: replaced(base, path, value),
            st.sampled_from(inner),
            st.sampled_from(POISON_TEXT + POISON_NUMBERS),
        ),
    )


def assert_total(kind: str, obj: Any) -> None:
    _, convert = CONVERTERS[kind]
    try:
        convert(obj)
    except ConversionError as error:
        # Named: the error says which kind of object; the cache adds the name it keyed it by.
        assert error.kind == kind, error


def test_the_good_objects_convert() -> None:
    """The fuzz starts from valid objects, so a failure below is the fuzzed field's doing."""
    for make, convert in CONVERTERS.values():
        convert(make())


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("kind", POD_LIKE)
@FUZZ
@given(data=st.data())
def test_pod_node_group_queue_and_priority_converters_are_total(kind: str, data: st.DataObject) -> None:
    assert_total(kind, data.draw(fuzzed(kind)))


@pytest.mark.parametrize("kind", TOPOLOGY)
@FUZZ
@given(data=st.data())
def test_topology_converters_are_total(kind: str, data: st.DataObject) -> None:
    assert_total(kind, data.draw(fuzzed(kind)))


@pytest.mark.parametrize(
    ("kind", "path", "value", "field"),
    [
        (
            "Pod",
            ("spec", "containers", 0, "resources", "requests", "cpu"),
            "1e400",
            "spec.containers[0].resources.requests",
        ),
        (
            "Pod",
            ("spec", "containers", 0, "resources", "requests", "cpu"),
            "9" * 5000,
            "spec.containers[0].resources.requests",
        ),
        (
            "Pod",
            ("spec", "containers", 0, "resources", "requests", "cpu"),
            "abc",
            "spec.containers[0].resources.requests",
        ),
        ("Pod", ("spec", "containers", 0, "resources", "limits", "cpu"), "-2", "spec.containers[0].resources.limits"),
        (
            "Pod",
            ("spec", "containers", 0, "resources", "requests", "memory"),
            10**100,
            "spec.containers[0].resources.requests",
        ),
        ("Pod", ("spec", "priority"), 2**40, "spec.priority"),
        ("Pod", ("spec", "overhead", "cpu"), float("inf"), "spec.overhead"),
        ("PodGroup", ("spec", "minMember"), -1, "spec.minMember"),
        ("PodGroup", ("spec", "minMember"), True, "spec.minMember"),
        ("Queue", ("spec", "weight"), 2**31, "spec.weight"),
        ("PriorityClass", ("value",), "1000", "value"),
        ("Node", ("status", "allocatable", "cpu"), "1e400", "status.allocatable"),
        ("Node", ("spec", "unschedulable"), "false", "spec.unschedulable"),
    ],
    ids=lambda value: shown(value, 24),
)
def test_known_poison_is_refused_naming_the_field(kind: str, path: tuple[Any, ...], value: Any, field: str) -> None:
    make, convert = CONVERTERS[kind]
    with pytest.raises(ConversionError) as raised:
        convert(replaced(make(), path, value))
    assert raised.value.message.startswith(field), raised.value.message
    assert len(str(raised.value)) < 400


def good_config_map() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "numasched", "namespace": "numasched-system"},
        "data": {"volcano-scheduler.conf": DEFAULT_CONFIG_TEXT},
    }


@FUZZ
@given(obj=st.deferred(lambda: fuzzed_of(good_config_map())))
def test_the_scheduler_config_map_feed_takes_anything(obj: Any) -> None:
    """A ConfigMap of any shape is either the new configuration or a rejection with the last good
    one kept; nothing raises out of the feed the ConfigMap informer delivers to."""
    registry = default_registry()
    source = ConfigSource.from_text(
        DEFAULT_CONFIG_TEXT, DEFAULT_SOURCE_NAME, registry.known_plugin_names(), registry.known_action_names()
    )
    feed = ConfigMapFeed(source, ConfigMapRef("numasched-system", "numasched"))
    before = source.current()
    feed.apply(ObjectEvent("ConfigMap", EventType.MODIFIED, obj if isinstance(obj, Mapping) else {"data": obj}))
    if feed.rejected:
        assert source.current() is before


# -- one poison object among good ones -------------------------------------------------------------

CONFIG = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
- plugins:
  - name: predicates
  - name: nodeorder
  - name: numa-aware
"""


def plain_pod(name: str) -> dict[str, Any]:
    """A Burstable pod (requests, no limits): placeable on a node with or without topology."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": "numasched",
            "containers": [{"name": "main", "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}}],
        },
    }


def big_node(name: str) -> dict[str, Any]:
    node = good_node()
    node["metadata"] = {"name": name}
    node["spec"] = {}
    node["status"]["allocatable"] = node["status"]["capacity"] = {"cpu": "64", "memory": "256Gi", "pods": "110"}
    return node


def poison_of(kind: str) -> st.SearchStrategy[Any]:
    """A fuzzed object of `kind` that the good pods do not depend on by name: a pod in its own
    namespace, a node, group, queue and class of other names, a topology for the good node."""
    renamed = {
        "Pod": ("metadata", "namespace", "poison"),
        "Node": ("metadata", "name", "poison-node"),
        "PodGroup": ("metadata", "name", "poison-group"),
        "Queue": ("metadata", "name", "poison-queue"),
        "PriorityClass": ("metadata", "name", "poison-class"),
        "Numatopology": ("metadata", "name", "good"),
        "NodeResourceTopology": ("metadata", "name", "good"),
    }[kind]

    def rename(obj: Any) -> Any:
        if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict):
            obj["metadata"][renamed[1]] = renamed[2]
        if kind == "Pod" and isinstance(obj, dict) and isinstance(obj.get("spec"), dict):
            obj["spec"].pop("nodeName", None)
        return obj

    return fuzzed(kind).map(rename)


def schedule(objects: list[Any]) -> SimCluster:
    cluster = SimCluster(Cache())
    for obj in objects:
        if isinstance(obj, Mapping):
            cluster.add(obj, "fuzz")
    registry = default_registry()
    config = load_config_text(CONFIG, "test", registry.known_plugin_names(), registry.known_action_names())

    async def cycles() -> None:
        # The loop's own cycle on the cache (simulate's pod counting is not what is under test).
        for _ in range(3):
            await schedule_cycle(cluster.cache, config, registry, cluster, cluster)

    anyio.run(cycles)
    return cluster


@pytest.mark.parametrize("kind", list(CONVERTERS))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_one_poison_object_never_keeps_good_pods_from_their_node(kind: str, data: st.DataObject) -> None:
    poison = data.draw(poison_of(kind))
    good = [big_node("good"), plain_pod("a"), plain_pod("b"), plain_pod("c")]
    cluster = schedule([good[0], poison, *good[1:]])
    for name in ("a", "b", "c"):
        assert cluster.objects["Pod"]["default/" + name]["spec"].get("nodeName") == "good", name
