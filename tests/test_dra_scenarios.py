"""DRA scenarios (issue 17): the real scheduler loop on a simulated cluster with ResourceSlices in
the NVIDIA DRA driver's shape, asserting exact devices, CPUs and claim status. Expectations are
hand-computed from the fixture machines (pcie-8gpu-2numa: GPUs 0-3 on NUMA 0, 4-7 on NUMA 1;
CPUs 0-31,64-95 on NUMA 0 and 32-63,96-127 on NUMA 1)."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from conftest import load_machine

from numasched.api.allocation import ALLOCATION_ANNOTATION, allocation_from_json
from numasched.api.idset import IdSet
from numasched.api.topology import TopologyPolicy, TopologyScope
from numasched.cache.cache import Cache
from numasched.cache.machine_shapes import machine_objects
from numasched.cache.simcluster import SimCluster
from numasched.conf.loader import load_config_text
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.simulate import simulate

DRA_FIXTURES = Path(__file__).parent / "fixtures" / "dra"
NUMA1_CPUS = IdSet.parse("32-63,96-127")
NUMA0_CPUS = IdSet.parse("0-31,64-95")

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
    arguments:
      weight: 10
  - name: dra
"""

GPU_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {
        "selectors": [
            {
                "cel": {
                    "expression": "device.driver == 'gpu.nvidia.com' && "
                    "device.attributes['gpu.nvidia.com'].type == 'gpu'"
                }
            }
        ]
    },
}


def fixture_objects(name: str) -> list[dict[str, Any]]:
    return [obj for obj in yaml.safe_load_all((DRA_FIXTURES / f"{name}.yaml").read_text()) if obj]


def claim(name: str, requests: list[dict[str, Any]], match: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"devices": {"requests": requests}}
    if match is not None:
        spec["devices"]["constraints"] = [{"matchAttribute": match}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


def request(name: str, device_class: str, count: int) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": count}}


def pod(name: str, cpus: int, claims: Mapping[str, str] = {}, *, node: str = "", cpuset: str = "") -> dict[str, Any]:
    requests = {"cpu": str(cpus), "memory": "8Gi"}
    container: dict[str, Any] = {"name": "main", "resources": {"requests": requests, "limits": dict(requests)}}
    spec: dict[str, Any] = {"schedulerName": "numasched", "containers": [container]}
    metadata: dict[str, Any] = {"name": name, "namespace": "default", "annotations": {}}
    if claims:
        container["resources"]["claims"] = [{"name": pod_claim} for pod_claim in claims]
        spec["resourceClaims"] = [
            {"name": pod_claim, "resourceClaimName": claim_name} for pod_claim, claim_name in claims.items()
        ]
    if node:
        spec["nodeName"] = node
        metadata["annotations"][ALLOCATION_ANNOTATION] = (
            '{"containers":{"main":{"cpuset":"%s"}}}' % cpuset  # noqa: UP031 - JSON braces
        )
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def cluster(
    machine: str, node_name: str, objects: list[dict[str, Any]], scope: TopologyScope = TopologyScope.CONTAINER
) -> SimCluster:
    sim = SimCluster(Cache())
    node, topology = machine_objects(
        load_machine(machine), node_name, topology_policy=TopologyPolicy.SINGLE_NUMA_NODE, topology_scope=scope
    )
    sim.add(node)
    sim.add(topology)
    for obj in objects:
        sim.add(copy.deepcopy(obj))
    return sim


def run(sim: SimCluster) -> None:
    registry = default_registry()
    config = load_config_text(CONFIG, "test", registry.known_plugin_names(), registry.known_action_names())
    anyio.run(lambda: simulate(sim, config, registry, max_cycles=10, progress=False))


def allocated_devices(sim: SimCluster, claim_key: str) -> list[str]:
    status = sim.objects["ResourceClaim"][claim_key].get("status") or {}
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    return sorted(result["device"] for result in results)


def pod_cpus(sim: SimCluster, name: str) -> IdSet:
    obj = sim.objects["Pod"][f"default/{name}"]
    allocation = allocation_from_json(obj["metadata"]["annotations"][ALLOCATION_ANNOTATION])
    return allocation.cpus()


def failed(sim: SimCluster, name: str) -> str:
    messages = [e.message for e in sim.events if e.name == f"default/{name}" and e.reason == "FailedScheduling"]
    return messages[-1] if messages else ""


def four_gpu_objects() -> list[dict[str, Any]]:
    return [
        *fixture_objects("pcie-8gpu-2numa-numa"),
        GPU_CLASS,
        claim("four-gpus", [request("gpus", "gpu.nvidia.com", 4)], match="resource.kubernetes.io/numaNode"),
        pod("trainer", 16, {"gpus": "four-gpus"}),
    ]


def test_four_gpus_and_sixteen_cpus_on_one_numa_node() -> None:
    sim = cluster("pcie-8gpu-2numa", "pcie-0", four_gpu_objects())
    run(sim)
    assert sim.objects["Pod"]["default/trainer"]["spec"].get("nodeName") == "pcie-0", failed(sim, "trainer")
    devices = allocated_devices(sim, "default/four-gpus")
    cpus = pod_cpus(sim, "trainer")
    assert len(cpus) == 16
    # Both on NUMA 0 or both on NUMA 1 (GPUs 0-3 are NUMA 0's).
    if devices == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]:
        assert not cpus - NUMA0_CPUS
    else:
        assert devices == ["gpu-4", "gpu-5", "gpu-6", "gpu-7"]
        assert not cpus - NUMA1_CPUS
    status = sim.objects["ResourceClaim"]["default/four-gpus"]["status"]
    assert status["reservedFor"] == [{"resource": "pods", "name": "trainer", "uid": "sim-default-trainer"}]
    selector = status["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]
    assert selector == {"key": "metadata.name", "operator": "In", "values": ["pcie-0"]}


@pytest.mark.parametrize("scope", [TopologyScope.CONTAINER, TopologyScope.POD])
def test_the_cpus_decide_the_numa_node_and_the_gpus_follow(scope: TopologyScope) -> None:
    # 60 of NUMA 0's 64 CPUs are held (2 more are reserved): 16 exclusive CPUs fit on NUMA 1 only.
    holder = pod("holder", 60, node="pcie-0", cpuset="2-31,66-95")
    sim = cluster("pcie-8gpu-2numa", "pcie-0", [holder, *four_gpu_objects()], scope)
    run(sim)
    assert sim.objects["Pod"]["default/trainer"]["spec"].get("nodeName") == "pcie-0", failed(sim, "trainer")
    assert allocated_devices(sim, "default/four-gpus") == ["gpu-4", "gpu-5", "gpu-6", "gpu-7"]
    assert not pod_cpus(sim, "trainer") - NUMA1_CPUS


def test_first_fit_would_split_the_pod_across_numa_nodes() -> None:
    """Upstream's allocator takes the first set in slice order: GPUs 0-3 (NUMA 0), while the
    pod's 16 CPUs fit on NUMA 1 only; the kubelet's single-numa-node policy would refuse it."""
    from numasched.plugins.dra.allocator import AllocatorOptions, PodClaimsAllocation, Strategy, allocate_claims
    from numasched.plugins.dra.cel import CelEvaluator

    holder = pod("holder", 60, node="pcie-0", cpuset="2-31,66-95")
    sim = cluster("pcie-8gpu-2numa", "pcie-0", [holder, *four_gpu_objects()])
    snapshot = sim.cache.snapshot()
    node = snapshot.nodes["pcie-0"]
    trainer = next(task for job in snapshot.jobs.values() for task in job.tasks.values() if task.name == "trainer")
    assert node.dra is not None and trainer.claims is not None
    first_fit = allocate_claims(
        trainer.claims.claims,
        node.dra.devices,
        node.dra.in_use,
        node.dra.classes,
        CelEvaluator(),
        topology=node.topology,
        options=AllocatorOptions(strategy=Strategy.FIRST_FIT),
    )
    assert isinstance(first_fit, PodClaimsAllocation)
    devices = sorted(result.device for _, allocation in first_fit.allocations for result in allocation.results)
    assert devices == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert first_fit.numa.ids() == [0]
    free_numa0 = node.free_cpus() & NUMA0_CPUS
    assert len(free_numa0) < 16  # the CPUs cannot join those GPUs on NUMA 0


def test_gpu_and_nic_share_a_pcie_root() -> None:
    objects = [
        *fixture_objects("hgx-h100-numa"),
        claim(
            "gpu-nic",
            [request("gpu", "gpu.nvidia.com", 1), request("nic", "rdma-nic", 1)],
            match="resource.kubernetes.io/pcieRoot",
        ),
        pod("worker", 4, {"pair": "gpu-nic"}),
    ]
    sim = cluster("hgx-h100", "hgx-0", objects)
    run(sim)
    assert sim.objects["Pod"]["default/worker"]["spec"].get("nodeName") == "hgx-0", failed(sim, "worker")
    devices = allocated_devices(sim, "default/gpu-nic")
    assert len(devices) == 2
    gpu, nic = sorted(devices)
    # gpu-k and nic-k sit behind the same root in the fixture (hack/dra_slices.py).
    assert gpu.startswith("gpu-") and nic.startswith("nic-") and gpu[4:] == nic[4:]


def test_a_missing_claim_keeps_the_pod_waiting_and_says_which() -> None:
    objects = [*fixture_objects("pcie-8gpu-2numa-numa"), GPU_CLASS, pod("trainer", 4, {"gpus": "nowhere"})]
    sim = cluster("pcie-8gpu-2numa", "pcie-0", objects)
    run(sim)
    assert not sim.objects["Pod"]["default/trainer"]["spec"].get("nodeName")
    assert "ResourceClaim default/nowhere" in failed(sim, "trainer")


def test_a_template_claim_is_created_and_allocated() -> None:
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "two-gpus", "namespace": "default"},
        "spec": {"spec": {"devices": {"requests": [request("gpus", "gpu.nvidia.com", 2)]}}},
    }
    worker = pod("worker", 4)
    worker["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}]
    sim = cluster("pcie-8gpu-2numa", "pcie-0", [*fixture_objects("pcie-8gpu-2numa-numa"), GPU_CLASS, worker, template])
    run(sim)
    statuses = sim.objects["Pod"]["default/worker"]["status"]["resourceClaimStatuses"]
    assert [entry["name"] for entry in statuses] == ["gpus"]
    generated = statuses[0]["resourceClaimName"]
    assert generated.startswith("worker-gpus-")
    assert sim.objects["Pod"]["default/worker"]["spec"].get("nodeName") == "pcie-0", failed(sim, "worker")
    devices = allocated_devices(sim, f"default/{generated}")
    assert devices in (["gpu-0", "gpu-1"], ["gpu-2", "gpu-3"], ["gpu-4", "gpu-5"], ["gpu-6", "gpu-7"])


def test_allocated_devices_are_never_handed_out_twice() -> None:
    claims = [claim(f"c{index}", [request("gpus", "gpu.nvidia.com", 3)]) for index in range(3)]
    pods = [pod(f"p{index}", 2, {"gpus": f"c{index}"}) for index in range(3)]
    sim = cluster("pcie-8gpu-2numa", "pcie-0", [*fixture_objects("pcie-8gpu-2numa-numa"), GPU_CLASS, *claims, *pods])
    run(sim)
    bound = [name for name in ("p0", "p1", "p2") if sim.objects["Pod"][f"default/{name}"]["spec"].get("nodeName")]
    # 8 GPUs hold two claims of 3, not three.
    assert len(bound) == 2
    taken = [device for name in ("c0", "c1", "c2") for device in allocated_devices(sim, f"default/{name}")]
    assert len(taken) == 6 and len(set(taken)) == 6
    unbound = ({"p0", "p1", "p2"} - set(bound)).pop()
    assert f"ResourceClaims default/c{unbound[1]} cannot be aligned" in failed(sim, unbound)


def test_a_shared_claim_is_counted_once_and_reserved_for_both_pods() -> None:
    shared = claim("shared", [request("gpus", "gpu.nvidia.com", 4)])
    first = pod("first", 2, {"gpus": "shared"})
    sim = cluster("pcie-8gpu-2numa", "pcie-0", [*fixture_objects("pcie-8gpu-2numa-numa"), GPU_CLASS, shared, first])
    run(sim)
    assert sim.objects["Pod"]["default/first"]["spec"].get("nodeName") == "pcie-0"
    sim.add(pod("second", 2, {"gpus": "shared"}))
    sim.add(claim("other", [request("gpus", "gpu.nvidia.com", 4)]))
    sim.add(pod("third", 2, {"gpus": "other"}))
    run(sim)
    status = sim.objects["ResourceClaim"]["default/shared"]["status"]
    assert sorted(entry["name"] for entry in status["reservedFor"]) == ["first", "second"]
    # The shared claim holds 4 GPUs once: the other 4 went to the third pod's claim.
    assert sorted(allocated_devices(sim, "default/shared") + allocated_devices(sim, "default/other")) == [
        f"gpu-{index}" for index in range(8)
    ]


def test_a_failed_binding_takes_the_claim_status_back() -> None:
    sim = cluster("pcie-8gpu-2numa", "pcie-0", four_gpu_objects())
    sim.fail_binds_after_claims = 1
    registry = default_registry()
    config = load_config_text(CONFIG, "test", registry.known_plugin_names(), registry.known_action_names())
    from numasched.scheduler.loop import schedule_cycle

    anyio.run(lambda: schedule_cycle(sim.cache, config, registry, sim, sim))
    assert sim.fail_binds_after_claims == 0  # the claim was written, then the binding refused
    assert not sim.objects["Pod"]["default/trainer"]["spec"].get("nodeName")
    assert sim.objects["ResourceClaim"]["default/four-gpus"]["status"] == {}
    assert sim.objects["ResourceClaim"]["default/four-gpus"]["metadata"]["resourceVersion"] == "2"
    # The next cycle allocates afresh and binds.
    run(sim)
    assert sim.objects["Pod"]["default/trainer"]["spec"].get("nodeName") == "pcie-0"
    assert len(allocated_devices(sim, "default/four-gpus")) == 4


def test_the_worked_example_of_the_docs(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/dra.md shows this run's output; the placements it explains must hold."""
    from numasched.cli import main

    docs = Path(__file__).parent.parent / "docs"
    code = main(
        [
            "simulate",
            "--cluster",
            str(docs / "examples" / "dra-cluster.yaml"),
            "--workload",
            str(docs / "examples" / "dra-workload.yaml"),
            "--output",
            "json",
            "--no-progress",
        ]
    )
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    pods = {entry["name"]: entry for entry in report["pods"]}
    assert {name: entry["status"] for name, entry in pods.items()} == {
        "busy": "Bound",
        "trainer": "Bound",
        "worker": "Bound",
    }
    assert pods["trainer"]["numa"] == [1] and not IdSet.parse(pods["trainer"]["cpuset"]) - NUMA1_CPUS
    assert [d["device"] for d in pods["trainer"]["claims"][0]["devices"]] == ["gpu-4", "gpu-5", "gpu-6", "gpu-7"]
    assert pods["worker"]["numa"] == [0] and not IdSet.parse(pods["worker"]["cpuset"]) - NUMA0_CPUS
    worker_claim = pods["worker"]["claims"][0]
    assert worker_claim["claim"].startswith("default/worker-gpus-")
    # Two GPUs of NUMA 0 behind one PCIe root (gpu-0/1 on pci0000:10, gpu-2/3 on pci0000:30).
    assert [d["device"] for d in worker_claim["devices"]] in (["gpu-0", "gpu-1"], ["gpu-2", "gpu-3"])
    docs_text = (docs / "dra.md").read_text()
    assert "default/trainer │ -   │ pcie-0 │ 1    │ 32-39,96-103" in docs_text


def test_pods_with_claims_go_only_where_slices_offer_the_devices() -> None:
    sim = SimCluster(Cache())
    for node_name in ("plain", "pcie-0"):
        node_obj, topology = machine_objects(
            load_machine("pcie-8gpu-2numa"), node_name, topology_policy=TopologyPolicy.SINGLE_NUMA_NODE
        )
        sim.add(node_obj)
        sim.add(topology)
    for obj in (*fixture_objects("pcie-8gpu-2numa-numa"), GPU_CLASS):
        sim.add(copy.deepcopy(obj))
    for index in range(3):
        sim.add(claim(f"one-{index}", [request("gpu", "gpu.nvidia.com", 1)]))
        sim.add(pod(f"w{index}", 2, {"gpu": f"one-{index}"}))
    run(sim)
    for index in range(3):
        assert sim.objects["Pod"][f"default/w{index}"]["spec"].get("nodeName") == "pcie-0", failed(sim, f"w{index}")


def test_on_a_node_without_numa_topology_the_dra_plugin_allocates_the_claims() -> None:
    sim = SimCluster(Cache())
    node_obj, _ = machine_objects(load_machine("pcie-8gpu-2numa"), "pcie-0")
    sim.add(node_obj)  # no Numatopology: numa-aware cannot align here
    for obj in (*fixture_objects("pcie-8gpu-2numa-numa"), GPU_CLASS):
        sim.add(copy.deepcopy(obj))
    sim.add(claim("pair", [request("gpus", "gpu.nvidia.com", 2)], match="resource.kubernetes.io/pcieRoot"))
    shared_pool = pod("shared-pool", 2, {"gpus": "pair"})
    del shared_pool["spec"]["containers"][0]["resources"]["limits"]  # Burstable: nothing pinned
    sim.add(shared_pool)
    run(sim)
    assert sim.objects["Pod"]["default/shared-pool"]["spec"].get("nodeName") == "pcie-0", failed(sim, "shared-pool")
    # Two GPUs behind one PCIe root: gpu-0/1, 2/3, 4/5 or 6/7 in the fixture.
    devices = allocated_devices(sim, "default/pair")
    assert devices in (["gpu-0", "gpu-1"], ["gpu-2", "gpu-3"], ["gpu-4", "gpu-5"], ["gpu-6", "gpu-7"])
