"""The cache's DRA objects: pods' claims resolved (or the message naming what is missing), slices
matched to nodes, devices in use from claims (shared claims once, in-flight claims of pods being
bound until their claim event arrives), bad objects reported by name."""

from __future__ import annotations

from typing import Any

from numasched.api.allocation import ContainerAllocation, PodAllocation
from numasched.api.dra import ClaimAllocation, DeviceResult
from numasched.api.dra_claims import ledger_entries, parse_result_id, result_id
from numasched.cache.cache import Cache
from numasched.cache.dra_store import generated_claim_name
from numasched.cache.events import EventType, ObjectEvent


def node(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}},
        "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}},
    }


def gpu_slice(name: str, *, node_name: str | None = None, selector: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "driver": "gpu.nvidia.com",
        "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
        "devices": [{"name": f"gpu-{index}", "attributes": {"type": {"string": "gpu"}}} for index in range(2)],
    }
    if node_name is not None:
        spec["nodeName"] = node_name
    elif selector is not None:
        spec["nodeSelector"] = selector
    else:
        spec["allNodes"] = True
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}, "spec": spec}


def claim(name: str, *, allocated: tuple[str, ...] = (), pool: str = "n1", owner: str = "") -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
    }
    if owner:
        obj["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": owner}]
    if allocated:
        obj["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpus", "driver": "gpu.nvidia.com", "pool": pool, "device": device}
                        for device in allocated
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
                    ]
                },
            }
        }
    return obj


def pod(name: str, refs: list[dict[str, str]], statuses: list[dict[str, str]] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"schedulerName": "numasched", "containers": [{"name": "c"}], "resourceClaims": refs},
    }
    if statuses is not None:
        obj["status"] = {"resourceClaimStatuses": statuses}
    return obj


def add(cache: Cache, *objects: dict[str, Any]) -> None:
    for obj in objects:
        cache.apply(ObjectEvent(obj["kind"], EventType.ADDED, obj))


def pod_claims_problem(cache: Cache, name: str) -> str:
    snapshot = cache.snapshot()
    task = next(t for job in snapshot.jobs.values() for t in job.tasks.values() if t.name == name)
    assert task.claims is not None
    return task.claims.problem


def in_use(cache: Cache, node_name: str) -> set[str]:
    view = cache.snapshot().nodes[node_name].dra
    assert view is not None
    return {device for _, _, device in view.in_use.devices}


def test_result_ids_round_trip_with_slashes_in_pool_names() -> None:
    result = DeviceResult("gpus/large", "gpu.nvidia.com", "region/a/n1", "gpu-3", admin_access=True)
    assert parse_result_id(result_id(result)) == result
    assert parse_result_id("no-equals-sign") is None


def test_claim_resolution_says_which_claim_a_pod_waits_for() -> None:
    cache = Cache()
    add(cache, node("n1"), gpu_slice("n1", node_name="n1"))
    add(cache, pod("by-name", [{"name": "gpus", "resourceClaimName": "missing"}]))
    assert pod_claims_problem(cache, "by-name") == (
        "waiting for ResourceClaim default/missing (pod claim 'gpus'): not found"
    )
    add(cache, pod("by-template", [{"name": "gpus", "resourceClaimTemplateName": "two"}]))
    assert "to be created from ResourceClaimTemplate default/two" in pod_claims_problem(cache, "by-template")
    stranger = claim("made", owner="someone-else")
    add(cache, stranger, pod("not-mine", [{"name": "gpus", "resourceClaimTemplateName": "two"}], [
        {"name": "gpus", "resourceClaimName": "made"}
    ]))  # fmt: skip
    assert "was not created for this pod" in pod_claims_problem(cache, "not-mine")
    add(cache, pod("bad", [{"name": "gpus"}]))
    assert "exactly one of resourceClaimName and resourceClaimTemplateName" in pod_claims_problem(cache, "bad")
    add(cache, claim("missing"))
    assert pod_claims_problem(cache, "by-name") == ""


def test_slices_apply_by_node_name_selector_and_all_nodes() -> None:
    cache = Cache()
    selector = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}]}
    add(cache, node("n1", {"rack": "r1"}), node("n2", {"rack": "r2"}), node("n3"))
    add(cache, gpu_slice("local", node_name="n3"), gpu_slice("racked", selector=selector), gpu_slice("everywhere"))
    snapshot = cache.snapshot()

    def pools(name: str) -> set[str]:
        view = snapshot.nodes[name].dra
        return set() if view is None else {device.pool for device in view.devices.devices}

    assert pools("n1") == {"racked", "everywhere"}
    assert pools("n2") == {"everywhere"}
    assert pools("n3") == {"local", "everywhere"}
    cache.apply(ObjectEvent("ResourceSlice", EventType.DELETED, gpu_slice("everywhere")))
    snapshot = cache.snapshot()
    assert pools("n2") == set() and snapshot.nodes["n2"].dra is None


def test_shared_claims_count_once_and_deleted_claims_free_their_devices() -> None:
    cache = Cache()
    add(cache, node("n1"), gpu_slice("n1", node_name="n1"), claim("shared", allocated=("gpu-0",)))
    add(cache, pod("a", [{"name": "g", "resourceClaimName": "shared"}]))
    add(cache, pod("b", [{"name": "g", "resourceClaimName": "shared"}]))
    assert in_use(cache, "n1") == {"gpu-0"}
    cache.apply(ObjectEvent("ResourceClaim", EventType.DELETED, claim("shared", allocated=("gpu-0",))))
    assert in_use(cache, "n1") == set()


def test_a_pod_being_bound_holds_its_claims_devices_until_the_claim_event_arrives() -> None:
    cache = Cache()
    add(cache, node("n1"), gpu_slice("n1", node_name="n1"), claim("mine"))
    add(cache, pod("p", [{"name": "g", "resourceClaimName": "mine"}]))
    results = (DeviceResult("gpus", "gpu.nvidia.com", "n1", "gpu-1"),)
    entries = ledger_entries([("default/mine", ClaimAllocation(results, "n1"))])
    cache.assume("uid-p", "n1", PodAllocation((ContainerAllocation("", devices=entries),)))
    assert in_use(cache, "n1") == {"gpu-1"}
    # The pod's own event (bound) comes first: its annotation names no claim devices.
    bound = pod("p", [{"name": "g", "resourceClaimName": "mine"}])
    bound["spec"]["nodeName"] = "n1"
    cache.apply(ObjectEvent("Pod", EventType.MODIFIED, bound))
    assert in_use(cache, "n1") == {"gpu-1"}
    cache.apply(ObjectEvent("ResourceClaim", EventType.MODIFIED, claim("mine", allocated=("gpu-1",))))
    assert in_use(cache, "n1") == {"gpu-1"}
    cache.apply(ObjectEvent("ResourceClaim", EventType.DELETED, claim("mine", allocated=("gpu-1",))))
    assert in_use(cache, "n1") == set()


def test_a_failed_bind_forgets_the_in_flight_claims() -> None:
    cache = Cache()
    add(cache, node("n1"), gpu_slice("n1", node_name="n1"), claim("mine"))
    add(cache, pod("p", [{"name": "g", "resourceClaimName": "mine"}]))
    results = (DeviceResult("gpus", "gpu.nvidia.com", "n1", "gpu-0"),)
    entries = ledger_entries([("default/mine", ClaimAllocation(results, "n1"))])
    cache.assume("uid-p", "n1", PodAllocation((ContainerAllocation("", devices=entries),)))
    cache.forget("uid-p")
    assert in_use(cache, "n1") == set()


def test_bad_dra_objects_are_reported_by_name_and_never_stop_the_cache() -> None:
    problems: list[tuple[str, str, str]] = []
    cache = Cache(on_problem=lambda kind, name, message: problems.append((kind, name, message)))
    broken = gpu_slice("broken", node_name="n1")
    broken["spec"]["devices"] = "not a list"
    add(cache, node("n1"), broken, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {}})
    assert any(kind == "ResourceSlice" and "broken" in name for kind, name, _ in problems), problems
    assert "n1" in cache.snapshot().nodes


def test_generated_claim_names_follow_the_controller() -> None:
    assert generated_claim_name("worker", "gpus", "u1").startswith("worker-gpus-")
    long_name = generated_claim_name("a" * 40, "b" * 20, "u1")
    assert long_name.startswith("a" * 16 + "-" + "b" * 16 + "-") and len(long_name) == 16 + 1 + 16 + 1 + 5


def test_a_claim_with_an_unsupported_field_keeps_its_pods_waiting_and_says_why() -> None:
    cache = Cache()
    unsupported = claim("odd")
    unsupported["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": {"memory": "10Gi"}}
    add(cache, node("n1"), gpu_slice("n1", node_name="n1"), unsupported)
    add(cache, pod("p", [{"name": "g", "resourceClaimName": "odd"}]))
    problem = pod_claims_problem(cache, "p")
    assert problem.startswith("ResourceClaim default/odd (pod claim 'g') cannot be used: spec.devices.requests[0]")
    assert "not supported" in problem
    add(cache, claim("odd"))  # fixed: usable again
    assert pod_claims_problem(cache, "p") == ""
