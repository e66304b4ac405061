"""The FPGA provider of docs/plugins.md, installed as an entry point and run by the plugin."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from numasched.api.node import NodeInfo
from numasched.api.resource import Resource
from numasched.api.snapshot import ClusterSnapshot
from numasched.api.task import ContainerInfo, QosClass, TaskInfo
from numasched.api.topology import (
    CpuInfo,
    CpuManagerPolicy,
    DeviceGroup,
    DeviceInfo,
    KubeletPolicies,
    NumaTopology,
    TopologyPolicy,
)
from numasched.conf.model import SchedulerConfig
from numasched.plugins.numaaware.plugin import NumaAwarePlugin
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.framework.arguments import Arguments
from numasched.scheduler.framework.session import Session

DOC = Path(__file__).resolve().parent.parent / "docs" / "plugins.md"
FPGA = "example.com/fpga"


def example_source() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    sources: list[str] = [str(block) for block in blocks if "class FpgaProvider" in block]
    assert len(sources) == 1
    return sources[0]


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "example_fpga.py").write_text(example_source())
    dist = tmp_path / "example_fpga-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: example-fpga\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[numasched.hint_providers]\nfpga = example_fpga:build\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "example_fpga", raising=False)


def fpga_node() -> NodeInfo:
    topology = NumaTopology(
        node_name="fpga-1",
        numa_ids=(0, 1),
        cpus=tuple(CpuInfo(cpu=c, core=c, socket=c // 4, numa=c // 4, l3=c // 4) for c in range(8)),
        devices={FPGA: DeviceGroup(FPGA, (DeviceInfo("fpga0", 0), DeviceInfo("fpga1", 1)))},
        policies=KubeletPolicies(
            cpu_manager_policy=CpuManagerPolicy.STATIC, topology_manager_policy=TopologyPolicy.SINGLE_NUMA_NODE
        ),
    )
    node = NodeInfo.create("fpga-1", Resource(8000, 32 << 30, {FPGA: 2000}))
    node.topology = topology
    node.numa_usage.cpus = node.numa_usage.cpus | topology.cpus_in(topology.all_numa).difference(
        topology.cpus_by_numa[0]
    )
    return node


def fpga_task() -> TaskInfo:
    request = Resource(2000, 1 << 30, {FPGA: 1000})
    container = ContainerInfo("accel", request, request.clone())
    return TaskInfo(
        "u", "default", "accel", "j", request.clone(), request.clone(), (container,), qos=QosClass.GUARANTEED
    )


@pytest.mark.usefixtures("installed")
def test_example_provider_from_the_docs_aligns_the_fpga_with_the_cpus() -> None:
    registry = default_registry()
    assert registry.load_entry_points() == []
    assert "fpga" in registry.known_hint_provider_names()
    session = Session(ClusterSnapshot(), SchedulerConfig(), registry)
    plugin = NumaAwarePlugin(Arguments({"hint-providers": ["fpga"]}, plugin="numa-aware"))
    plugin.on_session_open(session)
    assert [provider.name for provider in plugin.providers][-1] == "fpga"

    node = fpga_node()  # only NUMA 0 has free CPUs
    outcome = plugin.place(fpga_task(), node)
    allocation = getattr(outcome, "allocation", None)
    assert allocation is not None, outcome
    (container,) = allocation.containers
    assert container.devices == {FPGA: ("fpga0",)}
    assert container.cpuset.is_subset(node.topology.cpus_by_numa[0])  # type: ignore[union-attr]

    node.numa_usage.devices[FPGA] = frozenset({"fpga0"})
    status = plugin.predicate(fpga_task(), node)
    assert not status.passed
    assert "example.com/fpga" in status.reason or "cpu" in status.reason
