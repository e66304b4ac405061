"""NVIDIA GPUs through NVML: identity, PCI location, NVLink peers and PCIe paths.

NVML is slow to initialise and its answers do not change while the devices stay, so the exporter
reads it once at start and again only when the set of NVIDIA PCI functions in sysfs changes
(gpu_fingerprint). A GPU whose queries fail is kept and reported unhealthy; the others are
still published.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import structlog

from numasched.api.topology import DeviceLink, PcieDistance
from numasched.exporter.sysfs import normalize_pci_address

log = structlog.get_logger("numasched.exporter.gpus")

NVIDIA_VENDOR = "0x10de"
# NVML topology levels (nvmlGpuTopologyLevel_t) to `nvidia-smi topo -m` names.
_NVML_LEVELS = {
    0: PcieDistance.PIX,  # NVML_TOPOLOGY_INTERNAL: two GPUs on one board
    10: PcieDistance.PIX,  # NVML_TOPOLOGY_SINGLE
    20: PcieDistance.PXB,  # NVML_TOPOLOGY_MULTIPLE
    30: PcieDistance.PHB,  # NVML_TOPOLOGY_HOSTBRIDGE
    40: PcieDistance.NODE,  # NVML_TOPOLOGY_NODE
    50: PcieDistance.SYS,  # NVML_TOPOLOGY_SYSTEM
}
_DEFAULT_MAX_LINKS = 18


@attrs.frozen(slots=True)
class GpuRecord:
    index: int
    uuid: str | None = None
    pci_bus_id: str | None = None  # sysfs form: 0000:18:00.0
    model: str | None = None
    healthy: bool = True
    problem: str = ""
    # Remote PCI bus id (sysfs form) of each active NVLink, in link order.
    nvlink_remotes: tuple[str, ...] = ()


@attrs.frozen(slots=True)
class GpuInventory:
    gpus: tuple[GpuRecord, ...] = ()
    # PCIe path between two GPU indices (lower index first).
    pcie: dict[tuple[int, int], PcieDistance] = attrs.field(factory=dict)
    error: str = ""

    def links(self) -> dict[tuple[int, int], DeviceLink]:
        """NVLink and PCIe relation of every GPU pair (lower index first)."""
        bus_ids = {gpu.pci_bus_id for gpu in self.gpus if gpu.pci_bus_id}
        switch_links = {
            gpu.index: sum(1 for remote in gpu.nvlink_remotes if remote not in bus_ids) for gpu in self.gpus
        }
        result: dict[tuple[int, int], DeviceLink] = {}
        for first in self.gpus:
            for second in self.gpus:
                if second.index <= first.index:
                    continue
                direct = sum(1 for remote in first.nvlink_remotes if remote == second.pci_bus_id)
                fabric = switch_links[first.index] > 0 and switch_links[second.index] > 0
                nvlinks = direct or (min(switch_links[first.index], switch_links[second.index]) if fabric else 0)
                pcie = self.pcie.get((first.index, second.index))
                if nvlinks or pcie is not None:
                    result[(first.index, second.index)] = DeviceLink(
                        nvlinks=nvlinks, nvswitch=fabric and not direct, pcie=pcie
                    )
        return result


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _bus_id(info: Any) -> str:
    return normalize_pci_address(_text(info.busId))


def _read_nvlinks(nvml: Any, handle: Any) -> tuple[str, ...]:
    remotes: list[str] = []
    for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", _DEFAULT_MAX_LINKS))):
        try:
            state = nvml.nvmlDeviceGetNvLinkState(handle, link)
        except nvml.NVMLError:
            # Links past the GPU's count, or GPUs without NVLink, answer NOT_SUPPORTED.
            continue
        if state != nvml.NVML_FEATURE_ENABLED:
            continue
        remotes.append(_bus_id(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link)))
    return tuple(remotes)


def _read_gpu(nvml: Any, index: int) -> tuple[GpuRecord, Any | None]:
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
    except nvml.NVMLError as error:
        log.warning("GPU unreachable through NVML; reported unhealthy", gpu_index=index, error=str(error))
        return GpuRecord(index=index, healthy=False, problem=str(error)), None
    record = GpuRecord(index=index)
    try:
        record = attrs.evolve(record, uuid=_text(nvml.nvmlDeviceGetUUID(handle)))
        record = attrs.evolve(record, pci_bus_id=_bus_id(nvml.nvmlDeviceGetPciInfo(handle)))
        record = attrs.evolve(record, model=_text(nvml.nvmlDeviceGetName(handle)))
        record = attrs.evolve(record, nvlink_remotes=_read_nvlinks(nvml, handle))
    except nvml.NVMLError as error:
        log.warning(
            "NVML query failed; GPU reported unhealthy",
            gpu_index=index,
            gpu_uuid=record.uuid,
            error=str(error),
        )
        return attrs.evolve(record, healthy=False, problem=str(error)), None
    return record, handle


def read_gpus(nvml: Any) -> GpuInventory:
    """Everything the exporter needs from NVML, in one pass; an empty inventory without NVML."""
    try:
        nvml.nvmlInit()
    except Exception as error:  # the NVML library missing raises NVMLError_LibraryNotFound or OSError
        log.info("NVML unavailable; no NVIDIA GPUs reported", error=str(error))
        return GpuInventory(error=str(error))
    try:
        count = int(nvml.nvmlDeviceGetCount())
        records: list[GpuRecord] = []
        handles: dict[int, Any] = {}
        for index in range(count):
            record, handle = _read_gpu(nvml, index)
            records.append(record)
            if handle is not None:
                handles[index] = handle
        pcie: dict[tuple[int, int], PcieDistance] = {}
        for first in sorted(handles):
            for second in sorted(handles):
                if second <= first:
                    continue
                try:
                    level = int(nvml.nvmlDeviceGetTopologyCommonAncestor(handles[first], handles[second]))
                except nvml.NVMLError as error:
                    log.warning(
                        "NVML common ancestor failed; PCIe path left unknown",
                        gpu_pair=(first, second),
                        error=str(error),
                    )
                    continue
                if level in _NVML_LEVELS:
                    pcie[(first, second)] = _NVML_LEVELS[level]
        return GpuInventory(gpus=tuple(records), pcie=pcie)
    except nvml.NVMLError as error:
        log.warning("NVML device count failed; no NVIDIA GPUs reported", error=str(error))
        return GpuInventory(error=str(error))
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError as error:
            log.debug("NVML shutdown failed", error=str(error))


def gpu_fingerprint(sysfs: Path) -> tuple[str, ...]:
    """The NVIDIA display/3D PCI functions present: when this changes, NVML is read again."""
    found: list[str] = []
    try:
        entries = sorted((sysfs / "bus/pci/devices").iterdir())
    except OSError:
        return ()
    for entry in entries:
        try:
            vendor = (entry / "vendor").read_text().strip()
            device_class = (entry / "class").read_text().strip()
        except OSError:
            continue
        if vendor == NVIDIA_VENDOR and device_class.startswith("0x03"):
            found.append(entry.name)
    return tuple(found)
