"""The exporter DaemonSet mounts only what the exporter reads, read-only, and runs confined.

The paths the exporter reads are taken from its own command line (every option of type Path, as
the DaemonSet sets it or by default), so a new input file makes this test ask for a decision.
"""

from __future__ import annotations

import argparse
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from numasched.exporter.command import add_exporter_arguments

ROOT = Path(__file__).resolve().parent.parent
DAEMONSET = ROOT / "deploy" / "exporter" / "daemonset.yaml"
KUBELET_ROOT = PurePosixPath("/var/lib/kubelet")

# Options deliberately left without a mount, and why (docs/security.md says the same).
NOT_MOUNTED = {
    # The kubelet replaces its checkpoints by rename (a temporary file, then rename(2)), so a
    # single-file mount would keep showing the first version for ever; the only directory that
    # holds them is /var/lib/kubelet. The PodResources API gives the same facts, live.
    "cpu_manager_state": "read only without the PodResources socket; not mountable on its own",
    # Its directory also holds the kubelet's device plugin registration socket.
    "device_manager_checkpoint": "read only without the PodResources socket; turned off in the DaemonSet",
}


def daemonset() -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all(DAEMONSET.read_text(encoding="utf-8")) if d]
    return dict(doc)


def pod_spec() -> dict[str, Any]:
    return dict(daemonset()["spec"]["template"]["spec"])


def container() -> dict[str, Any]:
    (only,) = pod_spec()["containers"]
    return dict(only)


def parsed_arguments() -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser()
    add_exporter_arguments(parser)
    args = container()["args"]
    assert args[0] == "exporter"
    return parser, parser.parse_args(args[1:])


def mounts() -> dict[PurePosixPath, tuple[PurePosixPath, dict[str, Any], dict[str, Any]]]:
    """Container mount path → (host path, volume, mount)."""
    volumes = {volume["name"]: volume for volume in pod_spec()["volumes"]}
    found = {}
    for mount in container()["volumeMounts"]:
        volume = volumes[mount["name"]]
        assert "hostPath" in volume, f"volume {mount['name']} is not a hostPath"
        found[PurePosixPath(mount["mountPath"])] = (PurePosixPath(volume["hostPath"]["path"]), volume, mount)
    return found


def host_path_of(path: PurePosixPath) -> PurePosixPath | None:
    for mounted, (host, _, _) in mounts().items():
        if path == mounted or mounted in path.parents:
            return host / path.relative_to(mounted)
    return None


def test_every_file_the_exporter_reads_is_mounted() -> None:
    parser, args = parsed_arguments()
    path_options = [action.dest for action in parser._actions if isinstance(action.default, Path)]
    assert {"sysfs", "kubelet_config", "pod_resources_socket", "cpu_manager_state"} <= set(path_options)
    for option in path_options:
        if option in NOT_MOUNTED or getattr(args, option) is None:
            continue
        value = PurePosixPath(str(getattr(args, option)))
        assert host_path_of(value) is not None, f"--{option.replace('_', '-')} {value} is on no mount"
    assert host_path_of(PurePosixPath(args.sysfs)) == PurePosixPath("/sys")
    assert host_path_of(PurePosixPath(args.kubelet_config)) == KUBELET_ROOT / "config.yaml"
    assert host_path_of(PurePosixPath(args.pod_resources_socket)) == KUBELET_ROOT / "pod-resources" / "kubelet.sock"


def test_the_device_checkpoint_is_not_read() -> None:
    assert parsed_arguments()[1].device_manager_checkpoint is None


def test_nothing_else_is_mounted_and_never_the_kubelet_directory() -> None:
    _, args = parsed_arguments()
    needed = {PurePosixPath(str(getattr(args, option))) for option in ("sysfs", "kubelet_config")}
    needed.add(PurePosixPath(args.pod_resources_socket).parent)
    for mounted, (host, volume, mount) in mounts().items():
        assert mounted in needed, f"{mounted} is mounted but not read"
        assert mount.get("readOnly") is True, f"{mounted} is writable"
        # /var/lib/kubelet holds every pod's secrets (pods/*/volumes) and the kubelet's client key.
        assert host != KUBELET_ROOT and host not in KUBELET_ROOT.parents and host != PurePosixPath("/")
        if host.is_relative_to(KUBELET_ROOT):
            assert host.relative_to(KUBELET_ROOT).parts[0] in ("config.yaml", "pod-resources"), host
        # Never created on the host if missing (DirectoryOrCreate would put a directory where the
        # kubelet expects its file).
        assert volume["hostPath"].get("type") in ("Directory", "File"), volume


@pytest.mark.parametrize("level", ["pod", "container"])
def test_confinement(level: str) -> None:
    context = pod_spec()["securityContext"] if level == "pod" else container()["securityContext"]
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    if level == "container":
        assert context["readOnlyRootFilesystem"] is True
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert context.get("privileged", False) is False


def test_no_host_namespaces_and_tolerations_are_documented() -> None:
    spec = pod_spec()
    assert not any(spec.get(key) for key in ("hostNetwork", "hostPID", "hostIPC"))
    assert spec["tolerations"] == [{"operator": "Exists"}]
    security = (ROOT / "docs" / "security.md").read_text(encoding="utf-8")
    assert "toleration" in security.lower() and "operator: Exists" in security
