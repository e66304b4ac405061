"""Volcano's shipped configurations load, and every plugin and action they name either works or
is a documented no-op (docs/configuration.md says why it has no meaning here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from numasched.cli import main
from numasched.conf.loader import load_config_text
from numasched.plugins.accepted_noops import ACCEPTED_NOOP_ACTIONS, ACCEPTED_NOOP_PLUGINS, AcceptedNoopAction
from numasched.scheduler.builtin import default_registry

FIXTURES = Path(__file__).parent / "fixtures" / "volcano"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"
# volcano-scheduler.conf and -ci.conf from the Helm chart; -gangevict.conf is the configuration of
# Volcano's gang eviction e2e suite (actions "allocate, backfill, gangreclaim, gangpreempt").
SHIPPED = sorted(path.name for path in FIXTURES.glob("*.conf"))

CLUSTER = """\
apiVersion: v1
kind: Node
metadata: {name: n1}
status:
  allocatable: {cpu: "8", memory: 16Gi, pods: "10", nvidia.com/gpu: "4"}
"""
WORKLOAD = """\
apiVersion: v1
kind: Pod
metadata: {name: p1, namespace: team}
spec:
  schedulerName: numasched
  containers:
  - name: main
    resources: {requests: {cpu: "1", memory: 1Gi, nvidia.com/gpu: "1"}, limits: {nvidia.com/gpu: "1"}}
"""


def test_the_gang_eviction_configuration_is_among_them() -> None:
    assert "volcano-scheduler-gangevict.conf" in SHIPPED


@pytest.mark.parametrize("name", SHIPPED)
def test_every_name_loads_and_works_or_is_a_documented_noop(name: str) -> None:
    registry = default_registry()
    text = (FIXTURES / name).read_text()
    config = load_config_text(text, name, registry.known_plugin_names(), registry.known_action_names())
    docs = DOCS.read_text()
    for plugin in config.plugin_names():
        if plugin in ACCEPTED_NOOP_PLUGINS:
            assert f"`{plugin}`" in docs, f"no-op plugin {plugin} is not explained in docs/configuration.md"
    for action in config.actions:
        if action in ACCEPTED_NOOP_ACTIONS:
            assert f"`{action}`" in docs
        else:
            assert not isinstance(registry.action(action), AcceptedNoopAction), action


@pytest.mark.parametrize("name", SHIPPED)
def test_simulate_runs_on_each_shipped_configuration(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster, workload = tmp_path / "cluster.yaml", tmp_path / "workload.yaml"
    cluster.write_text(CLUSTER)
    workload.write_text(WORKLOAD)
    code = main(
        [
            "simulate",
            "--config",
            str(FIXTURES / name),
            "--cluster",
            str(cluster),
            "--workload",
            str(workload),
            "--output",
            "json",
            "--no-progress",
        ]
    )
    assert code == 0, capsys.readouterr().err
    report = json.loads(capsys.readouterr().out)
    assert [(pod["name"], pod["status"]) for pod in report["pods"]] == [("p1", "Bound")]
