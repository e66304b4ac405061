"""The third-party conformance corpus (tests/fixtures/thirdparty/<scenario>/): objects in the exact shapes
Volcano's resource-exporter, Volcano's docs, NFD's topology-updater, resource-topology-exporter,
koordlet, scheduler-plugins and fake-gpu-operator publish, run through `numasched simulate`.

Each scenario's expect.yaml holds the truth (what each kubelet really has free, which no single object
states) and the expected outcome. The expectation is checked twice, independently:
* against the kubelet model (hack/kubelet_model.py): every expected placement is admitted on its node
  and refused on every other node the pod could go to, and every expected-unschedulable pod is refused
  everywhere, so the expectation is the kubelet's, not ours;
* against numasched: `numasched simulate` on cluster.yaml + workload.yaml gives the same outcome, and
  the CPU and device ids it decides on nodes whose ids are real are really free.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import load_hack_module

from numasched.api.idset import IdSet
from numasched.cli import main

km: Any = load_hack_module("kubelet_model")

CORPUS = Path(__file__).parent / "fixtures" / "thirdparty"
CONFIG = CORPUS / "scheduler.conf"
SCENARIOS = sorted(path.name for path in CORPUS.iterdir() if (path / "expect.yaml").is_file())
SYNTHETIC = "from NRT zones"  # truth machines built from zone counts: their ids are not the node's


def load_scenario(name: str) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    expect: dict[str, Any] = yaml.safe_load((CORPUS / name / "expect.yaml").read_text())
    workload = yaml.safe_load_all((CORPUS / name / "workload.yaml").read_text())
    pods = {doc["metadata"]["name"]: doc for doc in workload if doc and doc.get("kind") == "Pod"}
    return expect, pods


def device_ids(text: str) -> list[str]:
    """Device ids in a comma list; numeric ranges ("3-6") expanded, other ids ("z0d1") kept."""
    found: list[str] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        first, dash, last = part.partition("-")
        if dash and first.isdigit() and last.isdigit():
            found.extend(str(i) for i in range(int(first), int(last) + 1))
        else:
            found.append(part)
    return found


def truth_states(truth: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    states: dict[str, Any] = {}
    for name, node_truth in truth.items():
        node = km.node_from_machine(
            node_truth["machine"],
            name,
            reserved_cpus=IdSet.parse(str(node_truth.get("reserved_cpus", ""))),
            cpu_manager_policy=node_truth.get("cpu_manager", "static"),
            topology_policy=node_truth["policy"],
            topology_scope=node_truth.get("scope", "container"),
        )
        state = km.NodeState.empty(node)
        held = dict(node_truth.get("held") or {})
        cpus = IdSet.parse(str(held.pop("cpu", "")))
        clashes = state.take(cpus, {resource: device_ids(str(ids)) for resource, ids in held.items()})
        assert not clashes, f"{name}: truth holds ids twice or reserved: {clashes}"
        states[name] = state
    return states


def selects(pod: Mapping[str, Any], node_name: str, cluster_nodes: Mapping[str, Mapping[str, Any]]) -> bool:
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    labels = (cluster_nodes[node_name].get("metadata") or {}).get("labels") or {}
    return all(labels.get(key) == value for key, value in selector.items())


def cluster_nodes(name: str) -> dict[str, dict[str, Any]]:
    docs = yaml.safe_load_all((CORPUS / name / "cluster.yaml").read_text())
    return {doc["metadata"]["name"]: doc for doc in docs if doc and doc.get("kind") == "Node"}


def test_corpus_is_complete() -> None:
    """Every upstream source issue 10 names has a scenario, and each cluster file says what it mirrors."""
    assert {
        "volcano-issue-4998",
        "volcano-podallocations",
        "volcano-docs",
        "nfd-topology-updater",
        "nrt-v1alpha1-policies",
        "koordlet",
        "scheduler-plugins-examples",
        "fake-gpu-operator",
    } <= set(SCENARIOS)
    for name in SCENARIOS:
        header = (CORPUS / name / "cluster.yaml").read_text().split("---", 1)[0]
        assert header.startswith("# ") and ("/" in header), (
            f"{name}: cluster.yaml must say which upstream file it mirrors"
        )


@pytest.mark.parametrize("name", SCENARIOS)
def test_expectation_is_what_the_kubelet_model_admits(name: str) -> None:
    expect, pods = load_scenario(name)
    states = truth_states(expect["truth"])
    nodes = cluster_nodes(name)
    unschedulable: list[str] = []
    for group in expect["groups"]:
        remaining = list(group["pods"])
        for node_name, count in group.get("placed", {}).items():
            for _ in range(count):
                pod_name = remaining.pop(0)
                pod = km.pod_from_object(pods[pod_name])
                for other, state in states.items():
                    if other != node_name and selects(pods[pod_name], other, nodes):
                        refused = km.admit(state, pod)
                        assert not refused.admitted, f"{pod_name} would also be admitted on {other}: not unique"
                admission = km.admit(states[node_name], pod)
                assert admission.admitted, f"{pod_name} on {node_name}: {admission.reason}"
                km.apply(states[node_name], admission)
        assert len(remaining) == group.get("unschedulable", 0)
        unschedulable.extend(remaining)
    for pod_name in unschedulable:
        pod = km.pod_from_object(pods[pod_name])
        for node_name, state in states.items():
            assert not km.admit(state, pod).admitted, f"{pod_name} expected unschedulable, admitted on {node_name}"


def simulate(name: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    scenario = CORPUS / name
    argv = ["simulate", "--config", str(CONFIG), "--cluster", str(scenario / "cluster.yaml")]
    argv += ["--workload", str(scenario / "workload.yaml"), "--output", "json", "--no-progress"]
    assert main(argv) == 0
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    return report


@pytest.mark.parametrize("name", SCENARIOS)
def test_numasched_places_as_the_kubelet_would(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    expect, _ = load_scenario(name)
    report = simulate(name, capsys)
    outcome = {pod["name"]: pod for pod in report["pods"]}
    for group in expect["groups"]:
        placed = Counter(outcome[p]["node"] for p in group["pods"] if outcome[p]["status"] == "Bound")
        not_bound = [p for p in group["pods"] if outcome[p]["status"] != "Bound"]
        details = {p: (outcome[p]["status"], outcome[p]["node"], outcome[p]["reason"]) for p in group["pods"]}
        assert dict(placed) == group.get("placed", {}), f"{name}: {details}; problems: {report['problems']}"
        assert len(not_bound) == group.get("unschedulable", 0), f"{name}: {details}"
        for pod_name in not_bound:
            assert outcome[pod_name]["reason"], f"{name}: {pod_name} left pending without a reason"
    for wanted in expect.get("problems", []):
        assert any(wanted in problem["message"] for problem in report["problems"]), (wanted, report["problems"])


@pytest.mark.parametrize("name", SCENARIOS)
def test_decided_ids_are_really_free(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """On nodes whose truth has the node's real ids, every pinned pod numasched binds carries a
    decision naming as many CPUs and devices as the kubelet will pin, all of them really free."""
    expect, pods = load_scenario(name)
    states = truth_states(expect["truth"])
    report = simulate(name, capsys)
    for pod in report["pods"]:
        node_name = pod["node"]
        if pod["status"] != "Bound" or expect["truth"][node_name]["machine"].get("machine") == SYNTHETIC:
            continue
        state = states[node_name]
        model_pod = km.pod_from_object(pods[pod["name"]])
        pinned_cpus = sum(km.exclusive_cpus(model_pod, c) for c in model_pod.containers if not c.init)
        pinned_devices: Counter[str] = Counter()
        for container in model_pod.containers:
            if not container.init:
                pinned_devices.update(km.device_requests(state.node, container))
        cpus = IdSet.parse(pod["cpuset"] or "")
        decided = {resource: len(ids) for resource, ids in pod["devices"].items() if ids}
        assert (len(cpus), decided) == (pinned_cpus, dict(pinned_devices)), f"{pod['name']} on {node_name}: {pod}"
        clashes = state.take(cpus, pod["devices"])
        assert not clashes, f"{pod['name']} on {node_name} was given ids that are taken: {clashes}"
        touched = km.numa_of_ids(state.node, cpus, pod["devices"])
        if state.node.topology_policy == "single-numa-node":
            assert len(touched) <= 1, f"{pod['name']} spans NUMA nodes {sorted(touched)} on {node_name}"
