"""deploy/agent: the exporter DaemonSet run as `numasched agent`, with the cgroup mount as its only
read-write host path, and its arguments those of the exporter plus --cgroup-root (no drift)."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from numasched.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
AGENT = ROOT / "deploy" / "agent"
EXPORTER = ROOT / "deploy" / "exporter" / "daemonset.yaml"


def only(path: Path) -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    return dict(doc)


def container(daemonset: dict[str, Any]) -> dict[str, Any]:
    (found,) = daemonset["spec"]["template"]["spec"]["containers"]
    return dict(found)


def test_the_overlay_names_existing_files_and_patches_the_exporter() -> None:
    kustomization = only(AGENT / "kustomization.yaml")
    for resource in kustomization["resources"]:
        assert (AGENT / resource).exists(), resource
    (patch,) = kustomization["patches"]
    patched = only(AGENT / patch["path"])
    exporter = only(EXPORTER)
    assert patched["kind"] == exporter["kind"]
    assert patched["metadata"]["name"] == exporter["metadata"]["name"]
    assert patched["metadata"]["namespace"] == exporter["metadata"]["namespace"]
    assert container(patched)["name"] == container(exporter)["name"]
    assert (
        patched["spec"]["template"]["spec"]["serviceAccountName"]
        == exporter["spec"]["template"]["spec"]["serviceAccountName"]
    )


def test_arguments_are_the_exporters_plus_the_cgroup_root_and_parse() -> None:
    agent_args = container(only(AGENT / "daemonset-patch.yaml"))["args"]
    exporter_args = container(only(EXPORTER))["args"]
    assert agent_args[0] == "agent" and exporter_args[0] == "exporter"
    extra = [argument for argument in agent_args[1:] if argument not in exporter_args[1:]]
    assert extra == ["--cgroup-root=/host/cgroup"]
    assert [a for a in agent_args[1:] if a in exporter_args] == exporter_args[1:]
    parsed = build_parser(agent_args).parse_args(agent_args)
    assert parsed.cgroup_root == Path("/host/cgroup")


def test_the_cgroup_mount_is_the_only_writable_host_path() -> None:
    patch = only(AGENT / "daemonset-patch.yaml")
    exporter = only(EXPORTER)
    mounts = container(exporter)["volumeMounts"] + container(patch)["volumeMounts"]
    volumes = {
        v["name"]: v
        for v in exporter["spec"]["template"]["spec"]["volumes"] + patch["spec"]["template"]["spec"]["volumes"]
    }
    writable = [m for m in mounts if not m.get("readOnly", False)]
    assert [(PurePosixPath(m["mountPath"]), volumes[m["name"]]["hostPath"]["path"]) for m in writable] == [
        (PurePosixPath("/host/cgroup"), "/sys/fs/cgroup")
    ]
    assert volumes["cgroup"]["hostPath"]["type"] == "Directory"


def test_the_agent_role_grants_only_the_pod_watch_and_events() -> None:
    documents = [d for d in yaml.safe_load_all((AGENT / "rbac.yaml").read_text(encoding="utf-8")) if d]
    (role,) = [d for d in documents if d["kind"] == "ClusterRole"]
    (binding,) = [d for d in documents if d["kind"] == "ClusterRoleBinding"]
    triples = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert triples == {("", "pods", "list"), ("", "pods", "watch"), ("", "events", "create")}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "numasched-exporter", "namespace": "kube-system"}]
