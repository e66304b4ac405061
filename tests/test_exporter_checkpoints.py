"""The kubelet's device manager checkpoint as a source of device use when PodResources is unavailable."""

from __future__ import annotations

import json
from pathlib import Path

from numasched.api.idset import IdSet
from numasched.exporter.usage import (
    parse_device_checkpoint,
    read_checkpoints,
    read_device_checkpoint,
    with_device_holdings,
)

# As the kubelet writes it since 1.20 (DeviceIDs keyed by NUMA node; AllocResp is base64).
CHECKPOINT = {
    "Data": {
        "PodDeviceEntries": [
            {
                "PodUID": "uid-a",
                "ContainerName": "main",
                "ResourceName": "nvidia.com/gpu",
                "DeviceIDs": {"0": ["GPU-aaa", "GPU-bbb"], "1": ["GPU-ccc"]},
                "AllocResp": "CgQKAggB",
            },
            {
                "PodUID": "uid-b",
                "ContainerName": "worker",
                "ResourceName": "rdma/hca",
                "DeviceIDs": {"-1": ["mlx5_0"]},
                "AllocResp": "",
            },
        ],
        "RegisteredDevices": {"nvidia.com/gpu": ["GPU-aaa", "GPU-bbb", "GPU-ccc", "GPU-ddd"]},
    },
    "Checksum": 1234,
}


def test_numa_keyed_and_old_list_forms() -> None:
    assert parse_device_checkpoint(CHECKPOINT) == {
        "uid-a": {"main": {"nvidia.com/gpu": ("GPU-aaa", "GPU-bbb", "GPU-ccc")}},
        "uid-b": {"worker": {"rdma/hca": ("mlx5_0",)}},
    }
    old = {
        "Data": {
            "PodDeviceEntries": [
                {"PodUID": "p", "ContainerName": "c", "ResourceName": "r", "DeviceIDs": ["3", "4"]},
                {"PodUID": "p", "ContainerName": "c", "ResourceName": "r", "DeviceIDs": ["4", "5"]},
            ]
        }
    }
    assert parse_device_checkpoint(old) == {"p": {"c": {"r": ("3", "4", "5")}}}
    # No entry list at all: nobody holds a device.
    assert parse_device_checkpoint({"Data": {"RegisteredDevices": {}}}) == {}


def test_unreadable_checkpoints_mean_unknown_use(tmp_path: Path) -> None:
    assert parse_device_checkpoint([]) is None
    assert parse_device_checkpoint({"Data": {"PodDeviceEntries": {"x": 1}}}) is None
    bad_entry = {"Data": {"PodDeviceEntries": [{"PodUID": "p", "ContainerName": "c", "ResourceName": "r"}]}}
    assert parse_device_checkpoint(bad_entry) is None  # its DeviceIDs are unknown: so is the whole file
    assert read_device_checkpoint(tmp_path / "absent") is None
    (tmp_path / "garbage").write_bytes(b"\xff{")
    assert read_device_checkpoint(tmp_path / "garbage") is None
    (tmp_path / "deep").write_text("[" * 100_000)
    assert read_device_checkpoint(tmp_path / "deep") is None


def test_devices_merge_into_the_cpu_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "cpu_manager_state").write_text(
        json.dumps({"policyName": "static", "defaultCpuSet": "0-1,4-7", "entries": {"uid-a": {"main": "2-3"}}})
    )
    (tmp_path / "kubelet_internal_checkpoint").write_text(json.dumps(CHECKPOINT))
    usage = read_checkpoints(tmp_path / "cpu_manager_state", tmp_path / "kubelet_internal_checkpoint")
    assert (usage.source, usage.devices_known) == ("checkpoint", True)
    by_uid = {pod.uid: pod for pod in usage.pods}
    assert set(by_uid) == {"uid-a", "uid-b"}
    (main,) = by_uid["uid-a"].containers
    assert (main.name, main.cpuset, main.devices) == (
        "main",
        IdSet([2, 3]),
        {"nvidia.com/gpu": ("GPU-aaa", "GPU-bbb", "GPU-ccc")},
    )
    assert usage.used_devices("rdma/hca") == {"mlx5_0"}
    # The device file unreadable: CPU use still known, device use not.
    usage = read_checkpoints(tmp_path / "cpu_manager_state", tmp_path / "absent")
    assert (usage.source, usage.devices_known, len(usage.pods)) == ("checkpoint", False, 1)
    # The CPU file unreadable: device use known, CPU use not (source stays "none").
    usage = read_checkpoints(tmp_path / "absent", tmp_path / "kubelet_internal_checkpoint")
    assert (usage.source, usage.devices_known) == ("none", True)
    assert usage.used_cpus() == IdSet()
    # Without the flag's path, only the CPU manager's file is read.
    usage = read_checkpoints(tmp_path / "cpu_manager_state", None)
    assert not usage.devices_known
    assert with_device_holdings(usage, None) is usage
