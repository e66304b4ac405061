"""RDMA NICs from /sys/class/infiniband/<dev>/device: PCI location and NUMA node."""

from __future__ import annotations

import os
from pathlib import Path

import attrs
import structlog

from numasched.exporter.sysfs import NumaNode, PciDevice, pci_device_at

log = structlog.get_logger("numasched.exporter.rdma")


@attrs.frozen(slots=True)
class RdmaDevice:
    name: str  # mlx5_0
    pci: PciDevice
    model: str | None = None


def read_rdma_devices(sysfs: Path, numa_nodes: tuple[NumaNode, ...]) -> tuple[RdmaDevice, ...]:
    class_dir = sysfs / "class/infiniband"
    try:
        entries = sorted(class_dir.iterdir())
    except OSError:
        return ()
    devices: list[RdmaDevice] = []
    for entry in entries:
        link = entry / "device"
        real = Path(os.path.realpath(link))
        if not real.is_dir():
            log.warning("RDMA device has no PCI device; skipped", device=entry.name, path=str(link))
            continue
        try:
            model = (entry / "hca_type").read_text().strip() or None
        except OSError:
            model = None
        devices.append(RdmaDevice(name=entry.name, pci=pci_device_at(sysfs, real, numa_nodes), model=model))
    return tuple(devices)
