"""`numasched exporter` without the PodResources socket reads both kubelet checkpoints, as its
options say: --cpu-manager-state and --device-manager-checkpoint (empty: not read)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from numasched.exporter.command import build_parser, read_usage
from numasched.exporter.usage import NodeUsage

GPU = "nvidia.com/gpu"
CPU_STATE = {"policyName": "static", "defaultCpuSet": "0-1,4-7", "entries": {"uid-1": {"main": "2-3"}}}
DEVICE_CHECKPOINT = {
    "Data": {
        "PodDeviceEntries": [
            {
                "PodUID": "uid-1",
                "ContainerName": "main",
                "ResourceName": "nvidia.com/gpu",
                "DeviceIDs": {"0": ["GPU-a"]},
            },
            {"PodUID": "uid-2", "ContainerName": "side", "ResourceName": GPU, "DeviceIDs": ["GPU-b"]},
        ],
        "RegisteredDevices": {"nvidia.com/gpu": ["GPU-a", "GPU-b", "GPU-c"]},
    },
    "Checksum": 0,
}


def usage_with(tmp_path: Path, *device_option: str) -> NodeUsage:
    cpu = tmp_path / "cpu_manager_state"
    cpu.write_text(json.dumps(CPU_STATE))
    devices = tmp_path / "kubelet_internal_checkpoint"
    devices.write_text(json.dumps(DEVICE_CHECKPOINT))
    options = ["--device-manager-checkpoint", str(devices)] if not device_option else list(device_option)
    args = build_parser().parse_args(
        [
            "--node-name",
            "n1",
            "--pod-resources-socket",
            str(tmp_path / "absent.sock"),
            "--cpu-manager-state",
            str(cpu),
            *options,
        ]
    )
    return asyncio.run(read_usage(args))


def test_both_checkpoints_are_read_without_the_socket(tmp_path: Path) -> None:
    usage = usage_with(tmp_path)
    pods = {pod.uid: pod for pod in usage.pods}
    assert usage.devices_known is True
    assert {c.name: dict(c.devices) for c in pods["uid-1"].containers} == {"main": {"nvidia.com/gpu": ("GPU-a",)}}
    assert {c.name: dict(c.devices) for c in pods["uid-2"].containers} == {"side": {"nvidia.com/gpu": ("GPU-b",)}}
    assert usage.used_cpus().format() == "2-3"


def test_an_empty_device_option_reads_cpus_only(tmp_path: Path) -> None:
    usage = usage_with(tmp_path, "--device-manager-checkpoint", "")
    assert usage.devices_known is False
    assert all(not container.devices for pod in usage.pods for container in pod.containers)
