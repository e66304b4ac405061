"""deploy/monitoring: the Grafana dashboard names only metrics and labels the scheduler or exporter
really serves, and the ServiceMonitors / PodMonitors / Services select the pods and ports that
serve them."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from prometheus_client import CollectorRegistry

from numasched.cache.cache import Cache
from numasched.cache.simcluster import SimCluster
from numasched.exporter.metrics import ExporterMetrics
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.console.gauges import NUMA_METRIC_NAMES, NumaGauges
from numasched.scheduler.console.server import CacheViews
from numasched.scheduler.metrics import SchedulerMetrics
from numasched.scheduler.simulate import load_config, read_inputs, simulate

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
MONITORING = DEPLOY / "monitoring"

# PromQL words that are not metric names.
PROMQL_WORDS = frozenset(
    {
        "sum", "max", "min", "avg", "count", "by", "without", "rate", "irate", "increase", "histogram_quantile",
        "label_values", "vector", "or", "and", "unless", "on", "ignoring", "group_left", "group_right", "bool",
        "topk", "bottomk", "abs", "clamp_min", "clamp_max", "le", "offset",
    }
)  # fmt: skip
_LABEL_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGES = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)")
_STRINGS = re.compile(r'"[^"]*"')
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_MATCHER_LABEL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")


def served_families(registry: CollectorRegistry) -> dict[str, set[str]]:
    """Every sample name a registry serves, with the label names of its samples."""
    served: dict[str, set[str]] = {}
    for family in registry.collect():
        names = {family.name}
        if family.type == "counter":
            names.add(f"{family.name}_total")
        if family.type == "histogram":
            names.update(f"{family.name}{suffix}" for suffix in ("_bucket", "_sum", "_count"))
        for name in names:
            served.setdefault(name, set())
        for sample in family.samples:
            served.setdefault(sample.name, set()).update(sample.labels)
    return served


def simulated_cache() -> Cache:
    registry = default_registry()
    cache = Cache(("numasched",))
    cluster = SimCluster(cache)
    for text, source in [*read_inputs(None, "cluster.yaml"), *read_inputs(None, "workload.yaml")]:
        cluster.load_text(text, source)
    anyio.run(lambda: simulate(cluster, load_config(None, registry), registry, max_cycles=10, progress=False))
    return cache


@pytest.fixture(scope="module")
def served() -> dict[str, set[str]]:
    """What the scheduler (with its per-NUMA gauges, over the example cluster) and an exporter
    that published a node serve."""
    metrics = SchedulerMetrics()
    views = CacheViews(simulated_cache())
    views.view()
    metrics.watch_numa(NumaGauges(views.latest))
    # Labelled counters and histograms show their labels once they have a child.
    metrics.schedule_attempts.labels(result="scheduled").inc()
    metrics.numa_aligned.labels(numa_nodes="1").inc()
    families = served_families(metrics.registry)
    exporter = ExporterMetrics()
    exporter.cpus_count.labels("n", "0").set(1)
    exporter.cpus_allocated.labels("n", "0").set(1)
    exporter.device_healthy.labels("nvidia.com/gpu", "0").set(1)
    for name, labels in served_families(exporter.registry).items():
        families.setdefault(name, set()).update(labels)
    return families


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((MONITORING / "grafana-dashboard.json").read_text(encoding="utf-8"))
    return loaded


def expressions() -> Iterator[tuple[str, str]]:
    board = dashboard()
    for panel in board["panels"]:
        for target in panel["targets"]:
            yield panel["title"], target["expr"]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            yield f"variable {variable['name']}", variable["definition"]


def metric_names(expr: str) -> set[str]:
    text = _STRINGS.sub("", expr)
    text = _LABEL_MATCHERS.sub("", text)
    text = _RANGES.sub("", text)
    text = _GROUPING.sub("", text)
    # label_values(metric, label): the label is not a metric
    text = re.sub(r"label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*,\s*[A-Za-z_]+\s*\)", r"\1", text)
    return {word for word in _IDENTIFIER.findall(text) if word not in PROMQL_WORDS}


def label_names(expr: str) -> set[str]:
    labels: set[str] = set()
    for group in _GROUPING.findall(expr):
        labels.update(part.strip() for part in group.split(",") if part.strip())
    for block in _LABEL_MATCHERS.findall(_STRINGS.sub('""', expr)):
        labels.update(_MATCHER_LABEL.findall(block))
    found = re.search(r"label_values\(\s*[A-Za-z_:][A-Za-z0-9_:]*\s*,\s*([A-Za-z_]+)\s*\)", expr)
    if found:
        labels.add(found.group(1))
    return labels


def test_the_metric_name_reader_on_known_expressions() -> None:
    expr = 'max by (node, numa) (a_total{node=~"$node"}) / sum(rate(b_bucket[5m])) or vector(0)'
    assert metric_names(expr) == {"a_total", "b_bucket"}
    assert label_names(expr) == {"node", "numa"}
    assert metric_names("label_values(numasched_numa_cpus, node)") == {"numasched_numa_cpus"}
    assert label_names("label_values(numasched_numa_cpus, node)") == {"node"}


def test_every_dashboard_query_names_served_metrics_and_labels(served: dict[str, set[str]]) -> None:
    checked = 0
    for title, expr in expressions():
        names = metric_names(expr)
        assert names, f"{title}: no metric found in {expr!r}"
        for name in names:
            assert name in served, f"{title}: {name} is served by neither the scheduler nor the exporter"
        known_labels = set().union(*(served[name] for name in names)) | {"le"}
        unknown = label_names(expr) - known_labels
        assert not unknown, f"{title}: labels {sorted(unknown)} are on none of {sorted(names)}"
        checked += 1
    assert checked >= 10


def test_the_scheduler_serves_every_numa_gauge_it_lists(served: dict[str, set[str]]) -> None:
    for name in NUMA_METRIC_NAMES:
        assert name in served, name


def test_the_dashboard_is_well_formed() -> None:
    board = dashboard()
    assert board["title"] and board["uid"] and isinstance(board["schemaVersion"], int)
    variables = {variable["name"]: variable for variable in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    occupied: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        assert panel["type"] in {"timeseries", "stat", "bargauge", "table", "gauge", "heatmap"}, panel["type"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        grid = panel["gridPos"]
        assert all(isinstance(grid[key], int) and grid[key] >= 0 for key in ("x", "y", "w", "h")), panel["title"]
        assert grid["w"] > 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {
            (x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & occupied, f"{panel['title']} overlaps another panel"
        occupied |= cells
        references = [target["refId"] for target in panel["targets"]]
        assert references and len(references) == len(set(references)), panel["title"]


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def workload(path: Path, kind: str, name: str) -> dict[str, Any]:
    for doc in documents(path):
        if doc.get("kind") == kind and doc["metadata"]["name"] == name:
            return doc
    raise AssertionError(f"no {kind} {name} in {path}")


def port_names(pod_template: dict[str, Any]) -> set[str]:
    return {port["name"] for container in pod_template["spec"]["containers"] for port in container.get("ports", [])}


TARGETS = {
    "numasched": workload(DEPLOY / "scheduler" / "deployment.yaml", "Deployment", "numasched"),
    "numasched-exporter": workload(DEPLOY / "exporter" / "daemonset.yaml", "DaemonSet", "numasched-exporter"),
}


def selected(selector: dict[str, str], namespace: str) -> dict[str, Any]:
    matches = [
        target
        for target in TARGETS.values()
        if target["metadata"]["namespace"] == namespace
        and selector.items() <= target["spec"]["template"]["metadata"]["labels"].items()
    ]
    assert len(matches) == 1, f"selector {selector} in {namespace} matches {len(matches)} workloads"
    return matches[0]


def test_monitors_and_services_select_the_pods_and_ports_that_serve_metrics() -> None:
    services = {doc["metadata"]["name"]: doc for doc in documents(MONITORING / "services.yaml")}
    for service in services.values():
        target = selected(service["spec"]["selector"], service["metadata"]["namespace"])
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in port_names(target["spec"]["template"]), service["metadata"]["name"]
    monitors = documents(MONITORING / "servicemonitors.yaml")
    assert {monitor["kind"] for monitor in monitors} == {"ServiceMonitor"}
    for monitor in monitors:
        namespace = monitor["spec"]["namespaceSelector"]["matchNames"][0]
        chosen = [
            service
            for service in services.values()
            if service["metadata"]["namespace"] == namespace
            and monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
        ]
        assert len(chosen) == 1, monitor["metadata"]["name"]
        assert {endpoint["port"] for endpoint in monitor["spec"]["endpoints"]} <= {
            port["name"] for port in chosen[0]["spec"]["ports"]
        }
    pod_monitors = documents(MONITORING / "podmonitor.yaml")
    assert {monitor["kind"] for monitor in pod_monitors} == {"PodMonitor"}
    assert len(pod_monitors) == len(TARGETS)
    for monitor in pod_monitors:
        namespace = monitor["spec"]["namespaceSelector"]["matchNames"][0]
        target = selected(monitor["spec"]["selector"]["matchLabels"], namespace)
        for endpoint in monitor["spec"]["podMetricsEndpoints"]:
            assert endpoint["port"] in port_names(target["spec"]["template"]), monitor["metadata"]["name"]
    kustomization = documents(MONITORING / "kustomization.yaml")[0]
    for resource in kustomization["resources"]:
        assert (MONITORING / resource).is_file(), resource
