"""Where a container's cpuset lives in the node's cgroup tree, and reading and writing it.

Paths follow the kubelet and the container runtimes:
- the kubelet puts pods under "kubepods", Burstable and BestEffort pods one level lower in
  "burstable" / "besteffort", Guaranteed pods directly under "kubepods"; a pod's cgroup is "pod"
  followed by its UID (pkg/kubelet/cm/qos_container_manager_linux.go, pod_container_manager_linux.go);
- with the systemd driver each level becomes a slice named after the whole path, "-" inside a name
  escaped to "_" (kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice;
  pkg/kubelet/cm/cgroup_manager_linux.go, ConvertCgroupNameToSystemd);
- the container itself is the runtime's: containerd "cri-containerd-<id>.scope" (systemd) or
  "<id>" (cgroupfs), CRI-O "crio-<id>.scope" or "crio-<id>", Docker "docker-<id>.scope" or "<id>".

cgroup v1 keeps cpuset.cpus / cpuset.mems under the cpuset controller's own mount (<root>/cpuset);
cgroup v2 keeps them in the unified hierarchy (<root>). Only names checked against a strict
pattern are ever joined into a path, so no pod can point the agent outside the tree.
"""

from __future__ import annotations

import enum
import errno
import os
import re
from pathlib import Path, PurePosixPath

import attrs

from numasched.api.idset import IdSet, IdSetError


class CgroupVersion(enum.StrEnum):
    V1 = "v1"
    V2 = "v2"


class QosClass(enum.StrEnum):
    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BEST_EFFORT = "BestEffort"


class FailureReason(enum.StrEnum):
    """Why a cgroup could not be read or written (the failure metric's label)."""

    GONE = "gone"  # the container's cgroup does not exist (any more)
    PERMISSION = "permission"  # EACCES / EPERM / EROFS: the mount is read-only or not ours
    INVALID = "invalid"  # the kernel refused the value (CPUs outside the parent's set, ...)
    # The cgroup exists without cpuset files: v2 with cpuset not in the parent's cgroup.subtree_control.
    NO_CPUSET = "no-cpuset-controller"
    UNREADABLE = "unreadable"  # the file says something that is not a cpu list
    OTHER = "other"


class CgroupError(Exception):
    def __init__(self, reason: FailureReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


_CONTAINER_ID = re.compile(r"^(?P<runtime>[a-z][a-z0-9.-]{0,31})://(?P<id>[0-9A-Za-z]{1,128})$")
_POD_UID = re.compile(r"^[0-9A-Za-z-]{1,128}$")
# Scope (systemd) and directory (cgroupfs) names of a container by runtime, as the runtime makes them.
_SYSTEMD_SCOPES = {"containerd": "cri-containerd-{id}.scope", "cri-o": "crio-{id}.scope", "docker": "docker-{id}.scope"}
_CGROUPFS_NAMES = {"containerd": "{id}", "cri-o": "crio-{id}", "docker": "{id}"}


@attrs.frozen(slots=True)
class ContainerId:
    runtime: str
    id: str

    def __str__(self) -> str:
        return f"{self.runtime}://{self.id}"


def parse_container_id(text: object) -> ContainerId | None:
    """containerStatuses[].containerID ("containerd://<hex>") or None when absent or malformed."""
    if not isinstance(text, str):
        return None
    match = _CONTAINER_ID.match(text)
    return ContainerId(match["runtime"], match["id"]) if match else None


def valid_pod_uid(uid: str) -> bool:
    return bool(_POD_UID.match(uid))


def _pod_parents(uid: str, qos: QosClass) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(systemd, cgroupfs) path of the pod's own cgroup below the hierarchy root."""
    escaped = uid.replace("-", "_")
    if qos is QosClass.GUARANTEED:
        return ("kubepods.slice", f"kubepods-pod{escaped}.slice"), ("kubepods", f"pod{uid}")
    level = qos.value.lower()
    return (
        ("kubepods.slice", f"kubepods-{level}.slice", f"kubepods-{level}-pod{escaped}.slice"),
        ("kubepods", level, f"pod{uid}"),
    )


def container_cgroup_candidates(uid: str, qos: QosClass, container: ContainerId) -> tuple[PurePosixPath, ...]:
    """Where the container's cgroup may be, relative to the cpuset hierarchy's root, most likely
    first: the systemd driver's scope, then the cgroupfs driver's directory. An unknown runtime
    tries every runtime's names. Raises ValueError for a UID that is not one."""
    if not valid_pod_uid(uid):
        raise ValueError(f"pod UID {uid[:40]!r} is not a UID")
    systemd, cgroupfs = _pod_parents(uid, qos)
    runtimes = [container.runtime] if container.runtime in _SYSTEMD_SCOPES else list(_SYSTEMD_SCOPES)
    candidates: list[PurePosixPath] = []
    for runtime in runtimes:
        candidates.append(PurePosixPath(*systemd, _SYSTEMD_SCOPES[runtime].format(id=container.id)))
    for runtime in runtimes:
        candidates.append(PurePosixPath(*cgroupfs, _CGROUPFS_NAMES[runtime].format(id=container.id)))
    return tuple(dict.fromkeys(candidates))


def cgroup_version(root: Path) -> CgroupVersion | None:
    """v2 when root is the unified hierarchy, v1 when it holds a cpuset controller mount."""
    if (root / "cgroup.controllers").is_file():
        return CgroupVersion.V2
    if (root / "cpuset").is_dir():
        return CgroupVersion.V1
    return None


def cpuset_hierarchy(root: Path, version: CgroupVersion) -> Path:
    return root / "cpuset" if version is CgroupVersion.V1 else root


def find_container_cgroup(root: Path, uid: str, qos: QosClass, container: ContainerId) -> Path:
    """The container's cgroup directory; raises CgroupError(GONE) when it is nowhere."""
    version = cgroup_version(root)
    if version is None:
        raise CgroupError(FailureReason.GONE, f"{root}: neither a cgroup v2 root nor a v1 root with cpuset")
    base = cpuset_hierarchy(root, version)
    try:
        candidates = container_cgroup_candidates(uid, qos, container)
    except ValueError as error:
        raise CgroupError(FailureReason.INVALID, str(error)) from None
    for relative in candidates:
        path = base / relative
        if path.is_dir():
            return path
    raise CgroupError(
        FailureReason.GONE, f"no cgroup for container {container} of pod {uid} under {base} ({version.value})"
    )


@attrs.frozen(slots=True)
class CpusetFiles:
    """cpuset.cpus and cpuset.mems of one cgroup, as written there (raw text kept for restoring)."""

    cpus_text: str
    mems_text: str

    @property
    def cpus(self) -> IdSet:
        return _parse(self.cpus_text, "cpuset.cpus")

    @property
    def mems(self) -> IdSet:
        return _parse(self.mems_text, "cpuset.mems")


def _parse(text: str, name: str) -> IdSet:
    try:
        return IdSet.parse(text)
    except IdSetError as error:
        raise CgroupError(FailureReason.UNREADABLE, f"{name}: {error}") from None


def _reason(error: OSError) -> FailureReason:
    if error.errno in (errno.ENOENT, errno.ENOTDIR, errno.ENODEV):
        return FailureReason.GONE
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return FailureReason.PERMISSION
    if error.errno in (errno.EINVAL, errno.ERANGE, errno.ENOSPC, errno.EBUSY):
        return FailureReason.INVALID
    return FailureReason.OTHER


def read_cpuset(directory: Path) -> CpusetFiles:
    texts: list[str] = []
    for name in ("cpuset.cpus", "cpuset.mems"):
        try:
            texts.append((directory / name).read_text(encoding="ascii").strip())
        except OSError as error:
            if error.errno == errno.ENOENT and directory.is_dir():
                raise CgroupError(
                    FailureReason.NO_CPUSET, f"{directory}: no {name} (the cpuset controller is not enabled here)"
                ) from None
            raise CgroupError(_reason(error), f"{directory / name}: {error.strerror or error}") from None
        except UnicodeDecodeError:
            raise CgroupError(FailureReason.UNREADABLE, f"{directory / name}: not ASCII") from None
    return CpusetFiles(texts[0], texts[1])


def write_cpuset(directory: Path, cpus: str | None, mems: str | None) -> None:
    """Write the files given (None: left alone), one write(2) each as `echo` does. Never creates a
    file: a cgroup that vanished stays vanished (no O_CREAT; a live cgroup always has both)."""
    for name, value in (("cpuset.cpus", cpus), ("cpuset.mems", mems)):
        if value is None:
            continue
        path = directory / name
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_TRUNC)
            try:
                os.write(descriptor, value.encode("ascii"))
            finally:
                os.close(descriptor)
        except OSError as error:
            raise CgroupError(_reason(error), f"{path}: writing {value!r}: {error.strerror or error}") from None
