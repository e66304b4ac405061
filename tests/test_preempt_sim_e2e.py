"""Preemption end to end on the simulated cluster through the real cycle: the first cycle evicts
the victims on one NUMA node (the SimCluster evictor terminates them), the next binds the
preemptor there, and the kubelet model admits it on what the node really holds."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import load_hack_module, load_machine

from numasched.api.allocation import (
    ALLOCATION_ANNOTATION,
    ContainerAllocation,
    PodAllocation,
    allocation_from_json,
    allocation_to_json,
)
from numasched.api.numamask import NumaMask
from numasched.api.topology import TopologyPolicy
from numasched.cache.cache import Cache
from numasched.cache.convert_topology import numatopology_to_topology
from numasched.cache.eviction import EvictRequest, eviction_call
from numasched.cache.machine_shapes import machine_objects
from numasched.cache.sim_evictor import SimEvictor
from numasched.cache.simcluster import SimCluster
from numasched.conf.model import PluginOption, SchedulerConfig, Tier
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.loop import schedule_cycle

pytestmark = pytest.mark.anyio
kubelet = load_hack_module("kubelet_model")
GPU = "nvidia.com/gpu"
MACHINE = "pcie-8gpu-2numa"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def gpu_pod(name: str, priority: int, gpus: int, *, on_gpu: str = "") -> dict[str, Any]:
    # Victims share the CPU pool (500m); the preemptor pins 4 whole CPUs beside its GPUs.
    requests = {"cpu": "500m" if on_gpu else "4", "memory": "1Gi", GPU: str(gpus)}
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team", "annotations": {}},
        "spec": {
            "schedulerName": "numasched",
            "priority": priority,
            "containers": [{"name": "main", "resources": {"requests": requests, "limits": requests}}],
        },
        "status": {"phase": "Pending"},
    }
    if on_gpu:
        numa = 0 if int(on_gpu) < 4 else 1
        allocation = PodAllocation((ContainerAllocation("main", numa=NumaMask.of(numa), devices={GPU: (on_gpu,)}),))
        pod["spec"]["nodeName"] = "n1"
        pod["status"]["phase"] = "Running"
        pod["metadata"]["annotations"][ALLOCATION_ANNOTATION] = allocation_to_json(allocation)
    return pod


async def test_evict_then_bind_on_the_freed_numa_node() -> None:
    cluster = SimCluster(Cache())
    node, numatopology = machine_objects(load_machine(MACHINE), "n1", topology_policy=TopologyPolicy.SINGLE_NUMA_NODE)
    cluster.add(node)
    cluster.add(numatopology)
    for name, gpu, priority in (("a", "0", 1), ("b", "4", 2), ("c", "1", 3), ("d", "5", 4)):
        cluster.add(gpu_pod(name, priority, 1, on_gpu=gpu))
    cluster.add(gpu_pod("trainer", 1000, 4))
    gang = PluginOption("gang", flags={"preemptable": False})
    config = SchedulerConfig(
        actions=("enqueue", "allocate", "preempt"),
        tiers=(
            Tier((PluginOption("priority"), gang, PluginOption("conformance"))),
            Tier((PluginOption("predicates"), PluginOption("numa-aware"))),
        ),
    )
    registry = default_registry()
    evictor = SimEvictor(cluster)

    first = await schedule_cycle(cluster.cache, config, registry, cluster, cluster)
    assert first.session.bind_requests == ()
    for eviction in first.session.evictions:
        await eviction_call(evictor, EvictRequest(eviction.task, eviction.node_name, eviction.reason))()
    assert sorted(e.pod for e in evictor.evicted) == ["team/a", "team/c"]
    assert sorted(e.name for e in cluster.events if e.reason == "Preempted") == ["team/a", "team/c"]

    second = await schedule_cycle(cluster.cache, config, registry, cluster, cluster)
    assert [(r.task.name, r.node_name) for r in second.session.bind_requests] == [("trainer", "n1")]
    assert second.session.evictions == ()
    trainer = cluster.objects["Pod"]["team/trainer"]
    given = allocation_from_json(trainer["metadata"]["annotations"][ALLOCATION_ANNOTATION])
    assert given.numa() == NumaMask.of(0)
    # The oracle: the kubelet of this node, holding what b and d hold, admits the trainer.
    topology = numatopology_to_topology(numatopology)
    state = kubelet.NodeState.empty(kubelet.node_from_topology(topology))
    state.take([], {GPU: ["4", "5"]})
    admission = kubelet.admit(state, kubelet.pod_from_task(second.session.bind_requests[0].task))
    assert admission.admitted
    assert kubelet.numa_of_ids(state.node, admission.cpus, admission.devices) == frozenset({0})


async def test_simulate_reports_the_evictions() -> None:
    from numasched.scheduler.simulate import simulate
    from numasched.scheduler.simulate_report import build_report, render, report_document

    cluster = SimCluster(Cache())
    node, numatopology = machine_objects(load_machine(MACHINE), "n1", topology_policy=TopologyPolicy.SINGLE_NUMA_NODE)
    cluster.add(node)
    cluster.add(numatopology)
    for name, gpu, priority in (("a", "0", 1), ("b", "4", 2), ("c", "1", 3), ("d", "5", 4)):
        cluster.add(gpu_pod(name, priority, 1, on_gpu=gpu))
    cluster.add(gpu_pod("trainer", 1000, 4))
    config = SchedulerConfig(
        actions=("enqueue", "allocate", "preempt"),
        tiers=(
            Tier((PluginOption("priority"), PluginOption("gang", flags={"preemptable": False}))),
            Tier((PluginOption("predicates"), PluginOption("numa-aware"))),
        ),
    )
    evictor = SimEvictor(cluster)
    cycles = await simulate(cluster, config, default_registry(), max_cycles=5, progress=False, evictor=evictor)
    report = build_report(cluster, cycles=cycles, seconds=0.0, evictions=evictor.evicted)
    document = report_document(report)
    evicted = document["evictions"]
    assert document["summary"]["evicted"] == len(evicted) > 0
    # The victims all sat on one NUMA node (GPUs 0-3 or 4-7), and the trainer was bound after.
    assert {entry["pod"] for entry in evicted} in ({"team/a", "team/c"}, {"team/b", "team/d"})
    assert all(entry["node"] == "n1" and entry["reason"] for entry in evicted)
    assert next(pod for pod in document["pods"] if pod["name"] == "trainer")["status"] == "Bound"
    table = render(report, "table")
    assert "Evicted" in table and evicted[0]["pod"] in table
