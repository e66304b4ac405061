"""The console's view and pages of the bundled example, checked against the objects themselves
(the pods' allocation annotations and PodScheduled conditions, the Numatopology link table), and
the policy edits checked by loading the result with the configuration loader."""

from __future__ import annotations

import json
from collections.abc import Mapping
from html.parser import HTMLParser
from typing import Any

import anyio
import pytest
import yaml

from numasched.api.idset import IdSet
from numasched.cache.cache import Cache
from numasched.cache.simcluster import SimCluster
from numasched.conf.defaults import DEFAULT_CONFIG_TEXT
from numasched.conf.loader import load_config_text
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.console import render
from numasched.scheduler.console.gauges import reason_kind
from numasched.scheduler.console.policy import (
    PolicyChange,
    PolicyRequestError,
    apply_change,
    numa_aware_state,
    parse_change,
)
from numasched.scheduler.console.server import CacheViews
from numasched.scheduler.console.view import (
    ClusterView,
    CpuCounts,
    DeviceCell,
    NodeView,
    NumaNodeView,
    stranded_devices,
)
from numasched.scheduler.simulate import load_config, read_inputs, simulate

ALLOCATION = "numasched.io/allocation"
DEVICE_TOPOLOGY = "numasched.io/device-topology"


class Example:
    def __init__(self) -> None:
        registry = default_registry()
        self.cache = Cache(("numasched",))
        self.cluster = SimCluster(self.cache)
        self.texts = [*read_inputs(None, "cluster.yaml"), *read_inputs(None, "workload.yaml")]
        for text, source in self.texts:
            self.cluster.load_text(text, source)
        anyio.run(lambda: simulate(self.cluster, load_config(None, registry), registry, max_cycles=10, progress=False))
        # One snapshot for the whole module (the example does not change once simulated).
        self.views = CacheViews(self.cache, max_age_s=float("inf"))
        self.view: ClusterView = self.views.view()

    def node(self, name: str) -> NodeView:
        node = self.views.node(name)
        assert node is not None, name
        return node

    def objects(self, kind: str) -> list[Mapping[str, Any]]:
        return [doc for text, _ in self.texts for doc in yaml.safe_load_all(text) if doc and doc.get("kind") == kind]


@pytest.fixture(scope="module")
def example() -> Example:
    return Example()


def decisions(example: Example) -> dict[str, tuple[str, dict[str, str]]]:
    """Per bound pod (namespace/name): its node and, per CPU and device id it holds, read straight
    from its allocation annotation."""
    found: dict[str, tuple[str, dict[str, str]]] = {}
    for pod in example.cluster.pods():
        annotations = pod["metadata"].get("annotations") or {}
        node = pod["spec"].get("nodeName")
        if not node or ALLOCATION not in annotations:
            continue
        held: dict[str, str] = {}
        for container in json.loads(annotations[ALLOCATION])["containers"].values():
            for cpu in IdSet.parse(container.get("cpuset", "")):
                held[f"cpu/{cpu}"] = "cpu"
            for resource, ids in (container.get("devices") or {}).items():
                for device in ids:
                    held[f"{resource}/{device}"] = resource
        found[f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"] = (node, held)
    return found


def test_every_pinned_cpu_and_allocated_device_names_the_pod_whose_annotation_holds_it(example: Example) -> None:
    expected: dict[tuple[str, str], str] = {}
    for pod, (node_name, held) in decisions(example).items():
        for item in held:
            expected[(node_name, item)] = pod
    assert expected, "the example binds pods with allocations"
    shown: dict[tuple[str, str], str] = {}
    for summary in example.view.nodes:
        node = example.node(summary.name)
        for numa in node.numa:
            for cell in numa.cpus:
                if cell.state == "pinned":
                    shown[(node.name, f"cpu/{cell.cpu}")] = cell.pod
            for device in numa.devices:
                if device.state == "allocated":
                    shown[(node.name, f"{device.resource}/{device.id}")] = device.pod
    assert shown == expected


def test_cpu_states_partition_each_numa_node_and_the_counts_match_the_cells(example: Example) -> None:
    for summary in example.view.nodes:
        node = example.node(summary.name)
        assert [numa.counts for numa in node.numa] == [numa.counts for numa in summary.numa], node.name
        for numa in node.numa:
            states = [cell.state for cell in numa.cpus]
            assert set(states) <= {"free", "pinned", "reserved", "held"}
            assert len({cell.cpu for cell in numa.cpus}) == len(numa.cpus), f"{node.name} NUMA {numa.id}"
            # The counts (set operations) and the cells (one CPU at a time) agree.
            for state in ("free", "pinned", "reserved", "held"):
                assert numa.cpu_count(state) == states.count(state), f"{node.name} NUMA {numa.id} {state}"
    dgx = example.node("dgx1-0")
    # dgx1-0's Numatopology reserves CPUs 0 and 40 (ReservedSystemCPUs: 0,40), one per NUMA node.
    reserved = sorted(cell.cpu for numa in dgx.numa for cell in numa.cpus if cell.state == "reserved")
    assert reserved == [0, 40]


def test_pending_pods_show_the_reason_the_scheduler_wrote_on_them(example: Example) -> None:
    written = {}
    for pod in example.cluster.pods():
        if pod["spec"].get("nodeName"):
            continue
        for condition in (pod.get("status") or {}).get("conditions") or []:
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                written[f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"] = condition["message"]
    assert written, "the example leaves pods unschedulable"
    assert {pod.key: pod.reason for pod in example.view.pending} == written
    too_big = next(pod for pod in example.view.pending if pod.key == "default/too-big-0")
    assert dict(too_big.asked_devices) == {"nvidia.com/gpu": 8}
    # No NUMA node of the example has eight GPUs: nothing fits, and every comparison says so.
    assert too_big.fits and all(not numa.fits for fit in too_big.fits for numa in fit.numa)


def test_the_comparison_counts_free_cpus_and_gpus_of_each_numa_node(example: Example) -> None:
    too_big = next(pod for pod in example.view.pending if pod.key == "default/too-big-0")
    for fit in too_big.fits:
        node = example.node(fit.node)
        for numa, compared in zip(node.numa, fit.numa, strict=True):
            free = [cell for cell in numa.cpus if cell.state == "free"]
            assert compared.free_cpus == len(free), f"{fit.node} NUMA {numa.id}"
            gpus = sum(1 for cell in numa.devices if cell.resource == "nvidia.com/gpu" and cell.state == "free")
            assert compared.free_devices == (("nvidia.com/gpu", gpus),)


def numa_with(devices: list[str], numa_id: int) -> NumaNodeView:
    cells = tuple(DeviceCell("nvidia.com/gpu", str(index), numa_id, state=state) for index, state in enumerate(devices))
    return NumaNodeView(numa_id, CpuCounts(), (), cells)


def test_stranded_devices_are_free_ones_below_the_smallest_pending_request() -> None:
    numa = [numa_with(["free", "allocated", "allocated"], 0), numa_with(["free", "free", "free"], 1)]
    assert stranded_devices(numa, {"nvidia.com/gpu": frozenset({2, 4})}) == (("nvidia.com/gpu", 1),)
    assert stranded_devices(numa, {"nvidia.com/gpu": frozenset({4})}) == (("nvidia.com/gpu", 4),)
    assert stranded_devices(numa, {"nvidia.com/gpu": frozenset({1})}) == ()
    assert stranded_devices(numa, {}) == ()  # nothing pending: free is just free


class Elements(HTMLParser):
    """Every element's attributes, to look things up by data-* attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {key: value or "" for key, value in attrs}))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(html: str) -> Elements:
    parser = Elements()
    parser.feed(html)
    return parser


def test_the_dgx_page_draws_the_nvlink_matrix_of_its_numatopology(example: Example) -> None:
    topology = next(obj for obj in example.objects("Numatopology") if obj["metadata"]["name"] == "dgx1-0")
    links = json.loads(topology["metadata"]["annotations"][DEVICE_TOPOLOGY])["links"]
    page = render.node_page(example.node("dgx1-0"))
    html = parse(page)
    cells = {attrs["data-link"] for tag, attrs in html.elements if tag == "td" and "data-link" in attrs}
    assert len(cells) == 8 * 7
    for link in links:
        first, second = "/".join(link["a"]), "/".join(link["b"])
        label = f"NV{link['nvlinks']}" if link["nvlinks"] else link["pcie"]
        assert f'data-link="{first} {second}">{label}</td>' in page, (first, second, label)
    assert page.count('<line class="edge"') == sum(1 for link in links if link["nvlinks"])


def test_pages_escape_what_they_show(example: Example) -> None:
    pending = example.view.pending[0]
    hostile = ClusterView(nodes=(), pending=(type(pending)(**{**_fields(pending), "reason": "<b>x</b>"}),), problems=())
    page = render.pending_page(hostile)
    assert "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page


def _fields(record: Any) -> dict[str, Any]:
    return {name: getattr(record, name) for name in record.__slots__ if not name.startswith("__")}


def test_the_overview_has_a_tile_per_node_with_its_numa_nodes(example: Example) -> None:
    html = parse(render.overview(example.view, None))
    tiles = {
        attrs["data-node"]: attrs for tag, attrs in html.elements if tag == "a" and "tile" in attrs.get("class", "")
    }
    assert sorted(tiles) == sorted(obj["metadata"]["name"] for obj in example.objects("Node"))
    boxes = [attrs for tag, attrs in html.elements if tag == "span" and "data-fill" in attrs]
    assert len(boxes) == sum(len(node.numa) for node in example.view.nodes)


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        ("0/7 nodes are available: 7 Insufficient nvidia.com/gpu.", "insufficient"),
        ("0/3 nodes are available: 3 cannot align the request on NUMA nodes (single-numa-node).", "topology"),
        ("waiting for PodGroup default/x", "gang"),
        ("not tried yet", "new"),
        ("something else", "other"),
    ],
)
def test_reason_kinds(reason: str, kind: str) -> None:
    assert reason_kind(reason) == kind


# ---- policy --------------------------------------------------------------------------------------


def load(text: str) -> Any:
    registry = default_registry()
    return load_config_text(text, "test", registry.known_plugin_names(), registry.known_action_names())


def test_close_then_open_round_trips_through_the_loader() -> None:
    closed = apply_change(DEFAULT_CONFIG_TEXT, PolicyChange(False))
    assert "numa-aware" not in load(closed).plugin_names()
    assert load(closed).plugin_names() == [
        name for name in load(DEFAULT_CONFIG_TEXT).plugin_names() if name != "numa-aware"
    ]
    assert apply_change(closed, PolicyChange(False)) == closed  # closing twice changes nothing
    opened = load(apply_change(closed, PolicyChange(True)))
    state = numa_aware_state(opened)
    assert state.enabled and state.weight == 10 and state.tier == 1
    assert opened.plugin_names() == load(DEFAULT_CONFIG_TEXT).plugin_names()


def test_open_merges_arguments_and_null_removes_one() -> None:
    text = apply_change(DEFAULT_CONFIG_TEXT, PolicyChange(True, {"weight": 3, "cpu-full-pcpus-only": True}))
    assert numa_aware_state(load(text)).arguments == {"weight": 3, "cpu-full-pcpus-only": True}
    text = apply_change(text, PolicyChange(True, {"cpu-full-pcpus-only": None}))
    assert numa_aware_state(load(text)).arguments == {"weight": 3}


def test_a_tier_that_held_numa_aware_alone_goes_with_it() -> None:
    text = 'actions: "enqueue, allocate"\ntiers:\n- plugins:\n  - name: gang\n- plugins:\n  - name: numa-aware\n'
    closed = yaml.safe_load(apply_change(text, PolicyChange(False)))
    assert closed["tiers"] == [{"plugins": [{"name": "gang"}]}]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (None, "body"),
        ([], "body"),
        ({}, "status"),
        ({"status": "OPEN"}, "status"),
        ({"status": "open", "arguments": [1]}, "arguments"),
        ({"status": "open", "weight": True}, "weight"),
        ({"status": "close", "arguments": {}}, "arguments"),
        ({"status": "open", "extra": 1}, "extra"),
    ],
)
def test_parse_change_names_the_wrong_field(body: Any, field: str) -> None:
    with pytest.raises(PolicyRequestError) as raised:
        parse_change(body)
    assert raised.value.field == field


def test_parse_change_accepts_weight_and_arguments() -> None:
    assert parse_change({"status": "close"}) == PolicyChange(False)
    assert parse_change({"status": "open"}) == PolicyChange(True, None)
    assert parse_change({"status": "open", "weight": 2, "arguments": {"a": 1}}) == PolicyChange(
        True, {"a": 1, "weight": 2}
    )


def test_a_node_page_names_the_object_its_topology_is_read_from(example: Example) -> None:
    kinds = {obj["metadata"]["name"]: "Numatopology" for obj in example.objects("Numatopology")}
    kinds.update({obj["metadata"]["name"]: "NodeResourceTopology" for obj in example.objects("NodeResourceTopology")})
    for node in example.view.nodes:
        shown = example.node(node.name)
        assert shown.topology_source == kinds.get(node.name, ""), node.name
        if shown.topology_source:
            assert f"<dd>{shown.topology_source}</dd>" in render.node_page(shown)
