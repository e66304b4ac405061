#!/usr/bin/env python3
"""ResourceSlices and DeviceClasses for a fixture machine, as DRA drivers would publish them.

GPUs in the shape NVIDIA's GPU DRA driver (gpu.nvidia.com) publishes a full GPU: device name
`gpu-<minor>`, attributes type, uuid, productName, brand, architecture, cudaComputeCapability,
driverVersion, cudaDriverVersion (the last three as versions) plus the standard
`resource.kubernetes.io/pciBusID` and `resource.kubernetes.io/pcieRoot`, capacity `memory`.
With --numa-attribute, also the standard `resource.kubernetes.io/numaNode` (KEP-6072); without
it the scheduler finds the NUMA node through the PCIe root and the node's topology.

NICs (the machine's rdma/hca devices) in the shape of a network DRA driver (driver `dra.net`):
`nic-<n>` with attributes ifName, rdma and the same standard PCI attributes.

The PCI layout is synthetic but consistent: each PCIe switch of the machine hangs off its own
root complex `pci0000:<bb>` (bb = 0x10*(k+1) for the k-th switch), and a GPU or NIC behind it
gets bus bb+1+j (GPUs) or bb+8+j (NICs). pci_layout() gives the same ids to tests, which put
them on the node topology to check the PCIe-root-to-NUMA mapping.

Usage: hack/dra_slices.py MACHINE.yaml NODE_NAME [--numa-attribute] > slices.yaml
"""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

GPU_RESOURCE = "nvidia.com/gpu"
NIC_RESOURCE = "rdma/hca"
GPU_DRIVER = "gpu.nvidia.com"
NIC_DRIVER = "dra.net"
STANDARD = "resource.kubernetes.io/"

_ARCHITECTURES = (("H100", "Hopper", "9.0.0"), ("A100", "Ampere", "8.0.0"), ("L40S", "Ada Lovelace", "8.9.0"))
_MEMORY = (("80GB", "80Gi"), ("L40S", "48Gi"), ("V100", "32Gi"))


def _gpu_facts(model: str) -> tuple[str, str, str]:
    """(architecture, cudaComputeCapability, memory) for a product name."""
    architecture, capability = "Volta", "7.0.0"
    for needle, arch, cap in _ARCHITECTURES:
        if needle in model:
            architecture, capability = arch, cap
    memory = "16Gi"
    for needle, size in _MEMORY:
        if needle in model:
            memory = size
            break
    return architecture, capability, memory


def pci_layout(machine: Mapping[str, Any]) -> dict[tuple[str, str], tuple[str, str]]:
    """(resource, device id) -> (pciBusID, pcieRoot) for the machine's GPUs and NICs."""
    devices = machine.get("devices", {})
    switches: list[str] = []
    for resource in (GPU_RESOURCE, NIC_RESOURCE):
        for entry in devices.get(resource, []):
            switch = str(entry.get("pci_switch") or f"solo-{resource}-{entry['id']}")
            if switch not in switches:
                switches.append(switch)
    layout: dict[tuple[str, str], tuple[str, str]] = {}
    for resource, offset in ((GPU_RESOURCE, 0x01), (NIC_RESOURCE, 0x08)):
        taken: dict[str, int] = {}
        for entry in devices.get(resource, []):
            switch = str(entry.get("pci_switch") or f"solo-{resource}-{entry['id']}")
            root_bus = 0x10 * (switches.index(switch) + 1)
            position = taken.get(switch, 0)
            taken[switch] = position + 1
            layout[(resource, str(entry["id"]))] = (
                f"0000:{root_bus + offset + position:02x}:00.0",
                f"pci0000:{root_bus:02x}",
            )
    return layout


def resource_slices(
    machine: Mapping[str, Any], node_name: str, *, numa_attribute: bool = False
) -> list[dict[str, Any]]:
    layout = pci_layout(machine)
    devices = machine.get("devices", {})
    gpus: list[dict[str, Any]] = []
    for entry in devices.get(GPU_RESOURCE, []):
        model = str(entry.get("model") or "NVIDIA GPU")
        architecture, capability, memory = _gpu_facts(model)
        bus_id, root = layout[(GPU_RESOURCE, str(entry["id"]))]
        attributes: dict[str, Any] = {
            "type": {"string": "gpu"},
            "uuid": {"string": "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"{node_name}/gpu/{entry['id']}"))},
            "productName": {"string": model},
            "brand": {"string": "Nvidia"},
            "architecture": {"string": architecture},
            "cudaComputeCapability": {"version": capability},
            "driverVersion": {"version": "560.35.3"},
            "cudaDriverVersion": {"version": "12.6.0"},
            STANDARD + "pciBusID": {"string": bus_id},
            STANDARD + "pcieRoot": {"string": root},
        }
        if numa_attribute and entry.get("numa") is not None:
            attributes[STANDARD + "numaNode"] = {"int": int(entry["numa"])}
        gpus.append({"name": f"gpu-{entry['id']}", "attributes": attributes, "capacity": {"memory": {"value": memory}}})
    nics: list[dict[str, Any]] = []
    for index, entry in enumerate(devices.get(NIC_RESOURCE, [])):
        bus_id, root = layout[(NIC_RESOURCE, str(entry["id"]))]
        attributes = {
            "ifName": {"string": f"ib{index}"},
            "rdma": {"bool": True},
            "rdmaDevice": {"string": str(entry["id"])},
            STANDARD + "pciBusID": {"string": bus_id},
            STANDARD + "pcieRoot": {"string": root},
        }
        if numa_attribute and entry.get("numa") is not None:
            attributes[STANDARD + "numaNode"] = {"int": int(entry["numa"])}
        nics.append({"name": f"nic-{index}", "attributes": attributes})
    slices = []
    for driver, published in ((GPU_DRIVER, gpus), (NIC_DRIVER, nics)):
        if not published:
            continue
        slices.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{node_name}-{driver.replace('.', '-')}"},
                "spec": {
                    "driver": driver,
                    "nodeName": node_name,
                    "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
                    "devices": published,
                },
            }
        )
    return slices


def device_classes() -> list[dict[str, Any]]:
    """NVIDIA's gpu.nvidia.com and mig.nvidia.com classes (their helm chart's selectors) and a NIC
    class for the dra.net devices."""
    selectors = {
        "gpu.nvidia.com": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
        "mig.nvidia.com": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'",
        "rdma-nic": "device.driver == 'dra.net' && device.attributes['dra.net'].rdma == true",
    }
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expression}}]},
        }
        for name, expression in selectors.items()
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("machine", type=Path)
    parser.add_argument("node_name")
    parser.add_argument("--numa-attribute", action="store_true", help="publish resource.kubernetes.io/numaNode")
    parser.add_argument("--classes", action="store_true", help="also print the DeviceClasses")
    args = parser.parse_args(argv)
    machine = yaml.safe_load(args.machine.read_text())
    documents = resource_slices(machine, args.node_name, numa_attribute=args.numa_attribute)
    if args.classes:
        documents += device_classes()
    yaml.safe_dump_all(documents, sys.stdout, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
