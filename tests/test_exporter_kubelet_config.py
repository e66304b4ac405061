"""KubeletConfiguration parsing: policies, options, reservations, and bad values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import structlog
import yaml

from numasched.api.idset import IdSet
from numasched.api.topology import RESERVED_CPUS_POLICY, CpuInfo, CpuManagerPolicy, TopologyPolicy, TopologyScope
from numasched.cache.convert_topology import numatopology_to_topology
from numasched.cache.machine_shapes import machine_objects
from numasched.exporter.kubelet_config import (
    format_options,
    parse_kubelet_config,
    read_kubelet_config,
    take_whole_cores,
)

# Two sockets, two cores each, two threads per core: cpu n and n+4 are siblings.
CPUS = tuple(CpuInfo(cpu=c, core=c % 4 % 2, socket=c % 4 // 2, numa=c % 4 // 2, l3=c % 4 // 2) for c in range(8))


def test_yaml_config_with_every_field(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "cpuManagerPolicy: static\n"
        "cpuManagerPolicyOptions: {full-pcpus-only: 'true', distribute-cpus-across-numa: true}\n"
        "topologyManagerPolicy: single-numa-node\n"
        "topologyManagerScope: pod\n"
        "topologyManagerPolicyOptions: {prefer-closest-numa-nodes: 'true'}\n"
        "memoryManagerPolicy: Static\n"
        "reservedSystemCPUs: 0,4\n"
        "kubeReserved: {cpu: 500m, memory: 1Gi}\n"
        "systemReserved: {cpu: '1', memory: 512Mi}\n"
        "reservedMemory: [{numaNode: 1, limits: {memory: 1Gi, hugepages-1Gi: 2Gi}}]\n"
    )
    config = read_kubelet_config(path)
    policies = config.policies
    assert policies.cpu_manager_policy == CpuManagerPolicy.STATIC
    assert policies.topology_manager_policy == TopologyPolicy.SINGLE_NUMA_NODE
    assert policies.topology_manager_scope == TopologyScope.POD
    assert policies.memory_manager_policy == "Static"
    assert format_options(policies.cpu_manager_options) == "distribute-cpus-across-numa=true,full-pcpus-only=true"
    assert policies.prefer_closest_numa_nodes
    assert config.reserved_cpus(CPUS) == IdSet([0, 4])
    assert config.reserved_resources(CPUS) == {"cpu": "2", "memory": "1536Mi"}
    assert config.reserved_memory_per_numa == {"memory": {1: 1 << 30}, "hugepages-1Gi": {1: 2 << 30}}


def test_json_config_and_reserved_cpus_from_kube_and_system_reserved(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"cpuManagerPolicy": "static", "kubeReserved": {"cpu": "1500m"}}))
    config = read_kubelet_config(path)
    assert config.reserved_resources(CPUS) == {"cpu": "1500m"}
    # ceil(1.5) = 2 CPUs: one whole core on socket 0.
    assert config.reserved_cpus(CPUS) == IdSet([0, 4])
    assert take_whole_cores(CPUS, 3) == IdSet([0, 1, 4])
    assert parse_kubelet_config({"kubeReserved": {"cpu": "1"}}).reserved_cpus(CPUS) == IdSet()


def test_bad_values_fall_back_with_a_log_line(tmp_path: Path) -> None:
    with structlog.testing.capture_logs() as logs:
        config = parse_kubelet_config(
            {
                "topologyManagerPolicy": "strictest",
                "cpuManagerPolicy": "static",
                "reservedSystemCPUs": "0-x",
                "kubeReserved": {"cpu": "lots"},
                "cpuManagerPolicyOptions": ["not", "a", "map"],
            },
            "node-a",
        )
    assert config.policies.topology_manager_policy == TopologyPolicy.NONE
    assert config.policies.cpu_manager_policy == CpuManagerPolicy.STATIC
    assert config.reserved_system_cpus is None and config.reserved_cpu_milli == 0
    assert config.policies.cpu_manager_options == {}
    assert len(logs) == 4 and all(entry["source"] == "node-a" for entry in logs)
    missing = read_kubelet_config(tmp_path / "absent.yaml")
    assert missing.policies.cpu_manager_policy == CpuManagerPolicy.NONE
    (tmp_path / "bad.yaml").write_text("cpuManagerPolicy: [unclosed\n")
    assert read_kubelet_config(tmp_path / "bad.yaml").source == ""


def _machines() -> list[Path]:
    return sorted((Path(__file__).parent / "fixtures" / "machines").glob("*.yaml"))


@pytest.mark.parametrize("path", _machines(), ids=lambda path: path.stem)
def test_reserved_cpus_agree_with_what_the_scheduler_reads_from_the_count(path: Path) -> None:
    # The exporter publishes the CPUs it derives from kube/system-reserved as ReservedSystemCPUs;
    # a reader given only resReserved.cpu derives them itself, as the kubelet's takeByTopology
    # does (tests/test_cpu_assignment_reference.py). Both must name the same CPUs for every count.
    _, numatopology = machine_objects(yaml.safe_load(path.read_text()), "n")
    del numatopology["spec"]["policies"][RESERVED_CPUS_POLICY]
    cpus = numatopology_to_topology(numatopology).cpus
    for count in sorted({1, 2, 3, 4, 5, 7, 8, 9, len(cpus) // 2, len(cpus) - 1, len(cpus)}):
        numatopology["spec"]["resReserved"] = {"cpu": str(count)}
        assert take_whole_cores(cpus, count) == numatopology_to_topology(numatopology).reserved_cpus, count
