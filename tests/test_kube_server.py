"""The fake API server against the real kubernetes_asyncio client."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import kubeapi_server
import pytest
from kubeapi_server import KubeApiServer
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def server() -> AsyncIterator[KubeApiServer]:
    async with KubeApiServer(bookmark_interval=0.2) as running:
        yield running


@pytest.fixture
async def api(server: KubeApiServer) -> AsyncIterator[client.ApiClient]:
    configuration = client.Configuration(host=server.url)
    async with client.ApiClient(configuration) as api_client:
        yield api_client


def pod(
    name: str, *, node: str = "", scheduler: str = "numasched", labels: dict[str, str] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": scheduler, "containers": [{"name": "c", "image": "x"}]}
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
        "spec": spec,
        "status": {"phase": "Pending"},
    }


async def read_events(response: Any, count: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    while len(events) < count:
        line = await response.content.readline()
        if not line:
            break
        events.append(json.loads(line))
    return events


pytestmark = pytest.mark.anyio


async def test_create_get_list_with_selectors(server: KubeApiServer, api: client.ApiClient) -> None:
    core: Any = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod("a", labels={"app": "web"}))
    server.add(pod("b", node="n1", labels={"app": "db"}))
    server.add(pod("c", scheduler="default-scheduler"))
    got = await core.read_namespaced_pod("a", "default")
    assert got.metadata.uid and got.metadata.resource_version
    pending = await core.list_pod_for_all_namespaces(field_selector="spec.schedulerName=numasched,spec.nodeName=")
    assert [p.metadata.name for p in pending.items] == ["a"]
    bound = await core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=")
    assert [p.metadata.name for p in bound.items] == ["b"]
    web = await core.list_namespaced_pod("default", label_selector="app in (web,cache)")
    assert [p.metadata.name for p in web.items] == ["a"]
    not_db = await core.list_namespaced_pod("default", label_selector="app,app!=db")
    assert [p.metadata.name for p in not_db.items] == ["a"]
    with pytest.raises(ApiException) as missing:
        await core.read_namespaced_pod("zzz", "default")
    assert missing.value.status == 404


async def test_update_conflict_and_patches(server: KubeApiServer, api: client.ApiClient) -> None:
    core: Any = client.CoreV1Api(api)
    created = server.add(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns"}, "data": {"a": "1"}}
    )
    stale = dict(created, data={"a": "2"})
    await core.replace_namespaced_config_map("cm", "ns", stale)
    with pytest.raises(ApiException) as conflict:
        await core.replace_namespaced_config_map("cm", "ns", stale)
    assert conflict.value.status == 409
    await core.patch_namespaced_config_map("cm", "ns", {"data": {"b": "3"}})
    assert (await core.read_namespaced_config_map("cm", "ns")).data == {"a": "2", "b": "3"}

    server.add(pod("p"))
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "no"}
    await core.patch_namespaced_pod_status("p", "default", {"status": {"conditions": [condition]}})
    ready = {"type": "Ready", "status": "False"}
    await core.patch_namespaced_pod_status("p", "default", {"status": {"conditions": [ready]}})
    stored = server.get("v1", "Pod", "p", "default")
    assert stored is not None
    assert {c["type"] for c in stored["status"]["conditions"]} == {"PodScheduled", "Ready"}


async def test_binding_sets_node_and_annotations_and_409_when_bound(
    server: KubeApiServer, api: client.ApiClient
) -> None:
    server.add(pod("p"))
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "p", "annotations": {"numasched.io/allocation": "{}"}},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"},
    }
    core: Any = client.CoreV1Api(api)
    response = await core.create_namespaced_pod_binding("p", "default", body, _preload_content=False)
    assert response.status == 201
    stored = server.get("v1", "Pod", "p", "default")
    assert stored is not None
    assert stored["spec"]["nodeName"] == "n1"
    assert stored["metadata"]["annotations"]["numasched.io/allocation"] == "{}"
    assert server.bind_counts[("default", "p")] == 1
    again = await core.create_namespaced_pod_binding("p", "default", body, _preload_content=False)
    assert again.status == 409
    gone = await core.create_namespaced_pod_binding(
        "q", "default", dict(body, metadata={"name": "q"}), _preload_content=False
    )
    assert gone.status == 404


async def test_injected_bind_failures(server: KubeApiServer, api: client.ApiClient) -> None:
    core: Any = client.CoreV1Api(api)
    for name in ("a", "b", "c"):
        server.add(pod(name))
    server.fail_binds(1, code=503)
    server.conflict_binds(0)

    def binding(name: str) -> dict[str, Any]:
        return {"metadata": {"name": name}, "target": {"kind": "Node", "name": "n"}}

    first = await core.create_namespaced_pod_binding("a", "default", binding("a"), _preload_content=False)
    assert first.status == 503
    assert server.bind_counts[("default", "a")] == 0
    second = await core.create_namespaced_pod_binding("a", "default", binding("a"), _preload_content=False)
    assert second.status == 201
    server.conflict_binds(1)
    third = await core.create_namespaced_pod_binding("b", "default", binding("b"), _preload_content=False)
    assert third.status == 409
    server.fail_binds(1, after_commit=True)
    lost = await core.create_namespaced_pod_binding("c", "default", binding("c"), _preload_content=False)
    assert lost.status == 500
    assert server.bind_counts[("default", "c")] == 1


async def test_watch_stream_bookmarks_and_selector_transitions(server: KubeApiServer, api: client.ApiClient) -> None:
    core: Any = client.CoreV1Api(api)
    server.add(pod("early"))
    listed = await core.list_pod_for_all_namespaces(field_selector="spec.nodeName=")
    version = listed.metadata.resource_version
    response = await core.list_pod_for_all_namespaces(
        watch=True,
        resource_version=version,
        allow_watch_bookmarks=True,
        field_selector="spec.nodeName=",
        _preload_content=False,
    )
    server.add(pod("late"))
    await core.create_namespaced_pod_binding(
        "late", "default", {"metadata": {"name": "late"}, "target": {"name": "n1"}}, _preload_content=False
    )
    events = await read_events(response, 3)
    assert [(e["type"], e["object"]["metadata"].get("name")) for e in events] == [
        ("ADDED", "late"),
        ("DELETED", "late"),  # bound: it left the selector
        ("BOOKMARK", None),
    ]
    assert int(events[2]["object"]["metadata"]["resourceVersion"]) >= int(
        events[1]["object"]["metadata"]["resourceVersion"]
    )
    response.close()


async def test_watch_gone_after_compaction_and_dropped_watches(server: KubeApiServer, api: client.ApiClient) -> None:
    core: Any = client.CoreV1Api(api)
    server.add(pod("a"))
    old_version = str(server.resource_version)
    server.add(pod("b"))
    server.compact()
    response = await core.list_pod_for_all_namespaces(watch=True, resource_version=old_version, _preload_content=False)
    events = await read_events(response, 2)
    assert len(events) == 1 and events[0]["type"] == "ERROR" and events[0]["object"]["code"] == 410

    fresh = await core.list_pod_for_all_namespaces(watch=True, _preload_content=False)
    assert {e["object"]["metadata"]["name"] for e in await read_events(fresh, 2)} == {"a", "b"}
    assert server.drop_watches() == 1
    assert await fresh.content.readline() == b""


async def test_custom_resources_cluster_and_namespaced_and_missing_group(
    server: KubeApiServer, api: client.ApiClient
) -> None:
    custom: Any = client.CustomObjectsApi(api)
    topology = {
        "apiVersion": "nodeinfo.volcano.sh/v1alpha1",
        "kind": "Numatopology",
        "metadata": {"name": "n1"},
        "spec": {},
    }
    await custom.create_cluster_custom_object("nodeinfo.volcano.sh", "v1alpha1", "numatopologies", topology)
    listed = await custom.list_cluster_custom_object("nodeinfo.volcano.sh", "v1alpha1", "numatopologies")
    assert [i["metadata"]["name"] for i in listed["items"]] == ["n1"]
    group = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "g"},
        "spec": {"minMember": 2},
    }
    created = await custom.create_namespaced_custom_object("scheduling.volcano.sh", "v1beta1", "ns", "podgroups", group)
    # As Volcano's CRD: no status subresource, so status is written with the whole object.
    with pytest.raises(ApiException) as no_subresource:
        await custom.patch_namespaced_custom_object_status(
            "scheduling.volcano.sh",
            "v1beta1",
            "ns",
            "podgroups",
            "g",
            {"status": {"phase": "Running"}},
            _content_type="application/merge-patch+json",
        )
    assert no_subresource.value.status == 404
    await custom.replace_namespaced_custom_object(
        "scheduling.volcano.sh", "v1beta1", "ns", "podgroups", "g", {**created, "status": {"phase": "Running"}}
    )
    stored = server.get("scheduling.volcano.sh/v1beta1", "PodGroup", "g", "ns")
    assert stored is not None and stored["status"] == {"phase": "Running"}
    with pytest.raises(ApiException) as stale:
        await custom.replace_namespaced_custom_object(
            "scheduling.volcano.sh", "v1beta1", "ns", "podgroups", "g", {**created, "status": {"phase": "Pending"}}
        )
    assert stale.value.status == 409
    server.uninstall_group("nodeinfo.volcano.sh")
    with pytest.raises(ApiException) as missing:
        await custom.list_cluster_custom_object("nodeinfo.volcano.sh", "v1alpha1", "numatopologies")
    assert missing.value.status == 404


async def test_leases_events_and_slow_responses(server: KubeApiServer, api: client.ApiClient) -> None:
    coordination: Any = client.CoordinationV1Api(api)
    lease = {"metadata": {"name": "numasched", "namespace": "kube-system"}, "spec": {"holderIdentity": "a"}}
    created = await coordination.create_namespaced_lease("kube-system", lease)
    assert created.spec.holder_identity == "a"
    core: Any = client.CoreV1Api(api)
    event = {
        "metadata": {"generateName": "p.", "namespace": "default"},
        "reason": "Scheduled",
        "involvedObject": {"kind": "Pod", "name": "p"},
    }
    made = await core.create_namespaced_event("default", event)
    assert made.metadata.name.startswith("p.")
    server.slow_down(0.5, methods=["GET"])
    with pytest.raises(TimeoutError):
        await coordination.read_namespaced_lease("numasched", "kube-system", _request_timeout=0.1)
    server.slow_down(0)


def test_selector_parsing_rejects_garbage() -> None:
    with pytest.raises(kubeapi_server.ApiError):
        kubeapi_server.parse_field_selector("spec.unknown=1")
    with pytest.raises(kubeapi_server.ApiError):
        kubeapi_server.parse_label_selector("a b c")
    assert kubeapi_server.strategic_merge_patch({"a": [1]}, {"a": [2]}) == {"a": [2]}
    assert kubeapi_server.json_patch({"a": {"b": 1}}, [{"op": "replace", "path": "/a/b", "value": 2}]) == {
        "a": {"b": 2}
    }
