"""numasched simulate end to end: YAML in, the real scheduler loop, the report out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from numasched.cli import main
from numasched.cli_exit_codes import EXIT_CONFIG

MINI_CONFIG = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
- plugins:
  - name: predicates
"""

CLUSTER = """\
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: small}
  status:
    allocatable: {cpu: "4", memory: 8Gi, pods: "10"}
- apiVersion: v1
  kind: Node
  metadata: {name: broken}
  status:
    allocatable: {cpu: "four", memory: 8Gi}
---
apiVersion: v1
kind: Node
metadata: {name: big}
status:
  allocatable: {cpu: "16", memory: 64Gi, pods: "10"}
---
apiVersion: example.com/v1
kind: Widget
metadata: {name: stray}
"""

WORKLOAD = """\
apiVersion: v1
kind: Pod
metadata: {name: needs-eight, namespace: team}
spec:
  schedulerName: numasched
  containers:
  - name: main
    resources: {requests: {cpu: "8", memory: 1Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: too-large, namespace: team}
spec:
  schedulerName: numasched
  containers:
  - name: main
    resources: {requests: {cpu: "64"}}
---
apiVersion: v1
kind: Pod
metadata: {namespace: team}
spec:
  schedulerName: numasched
  containers: [{name: main}]
---
apiVersion: v1
kind: Pod
metadata: {name: other-scheduler, namespace: team}
spec:
  containers: [{name: main}]
"""


def run_json(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, object]:
    config = tmp_path / "scheduler.conf"
    config.write_text(MINI_CONFIG)
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER)
    workload = tmp_path / "workload.yaml"
    workload.write_text(WORKLOAD)
    code = main(
        [
            "simulate",
            "--config",
            str(config),
            "--cluster",
            str(cluster),
            "--workload",
            str(workload),
            "--output",
            "json",
            *list(extra),
        ]
    )
    assert code == 0
    document: dict[str, object] = json.loads(capsys.readouterr().out)
    return document


def test_simulate_places_reports_and_skips_bad_objects(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = run_json(tmp_path, capsys)
    pods = {pod["name"]: pod for pod in report["pods"]}  # type: ignore[attr-defined]
    assert set(pods) == {"needs-eight", "too-large"}
    assert pods["needs-eight"]["status"] == "Bound" and pods["needs-eight"]["node"] == "big"
    assert pods["too-large"]["status"] == "Unschedulable"
    assert pods["too-large"]["reason"] == "0/2 nodes are available: 2 Insufficient cpu."
    problems = [f"{p['source']}: {p['message']}" for p in report["problems"]]  # type: ignore[attr-defined]
    assert any("Node broken" in p and "invalid quantity" in p for p in problems), problems
    assert any("Widget stray: unknown kind" in p for p in problems), problems
    assert any("Pod" in p and "metadata.name is missing" in p for p in problems), problems
    assert report["summary"] == {
        "pods": 2,
        "bound": 1,
        "unschedulable": 1,
        "pending": 0,
        "nodes": 3,
        "cycles": report["summary"]["cycles"],  # type: ignore[index]
        "seconds": report["summary"]["seconds"],  # type: ignore[index]
        "evicted": 0,
    }


def test_simulate_reports_a_bad_config_with_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "bad.conf"
    config.write_text('actions: "allocate"\ntiers:\n- plugins:\n  - name: no-such-plugin\n')
    assert main(["simulate", "--config", str(config)]) == EXIT_CONFIG
    error = capsys.readouterr().err
    assert "bad.conf line 4" in error and "no-such-plugin" in error


def test_simulate_yaml_and_table_outputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_json(tmp_path, capsys)
    code = main(
        [
            "simulate",
            "--config",
            str(tmp_path / "scheduler.conf"),
            "--cluster",
            str(tmp_path / "cluster.yaml"),
            "--workload",
            str(tmp_path / "workload.yaml"),
        ]
    )
    assert code == 0
    table = capsys.readouterr().out
    assert "team/needs-eight" in table and "1/2 pods bound, 1 unschedulable" in table


MALFORMED = """\
apiVersion: v1
kind: Pod
metadata: {name: spec-not-an-object, namespace: team}
spec: 5
---
apiVersion: v1
kind: Pod
metadata: {name: annotations-not-an-object, namespace: team, annotations: 5}
spec:
  schedulerName: numasched
  containers: [{name: main}]
"""


def test_simulate_reports_pods_whose_fields_are_not_objects(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "scheduler.conf").write_text(MINI_CONFIG)
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "workload.yaml").write_text(WORKLOAD + "---\n" + MALFORMED)
    code = main(
        [
            "simulate",
            *("--config", str(tmp_path / "scheduler.conf")),
            *("--cluster", str(tmp_path / "cluster.yaml")),
            *("--workload", str(tmp_path / "workload.yaml")),
            *("--output", "json"),
        ]
    )
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    pods = {pod["name"]: pod for pod in report["pods"]}
    assert pods["needs-eight"]["status"] == "Bound"
    problems = " | ".join(f"{p['source']}: {p['message']}" for p in report["problems"])
    assert "spec-not-an-object" in problems and "annotations-not-an-object" in problems, problems
