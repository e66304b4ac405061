#!/usr/bin/env python3
"""Generate a fake sysfs tree (and a matching fake NVML) from a machine fixture.

    python hack/gen_sysfs.py sysfs tests/fixtures/machines/hgx-h100.yaml OUTDIR
        writes OUTDIR/devices/system/{node,cpu}, OUTDIR/devices/pci..., OUTDIR/bus/pci/devices
        and OUTDIR/class/infiniband as the kernel lays them out for that machine.
    python hack/gen_sysfs.py golden [MACHINE ...]
        regenerates tests/fixtures/exporter/<machine>.yaml: what `numasched exporter --once
        --dry-run` discovers and publishes on the generated tree with the fake NVML.

PCI layout: every distinct `pci_switch` of the fixture becomes its own host bridge with a root
port, one PCIe switch (upstream port) and a downstream port per device, so devices sharing a
switch are PIX apart, devices on different switches of one NUMA node NODE, others SYS. Optional
fixture keys the tests use: numa_nodes[].hugepages {"2048": count, "1048576": count} (by kB size),
devices[].sysfs_numa_node (what numa_node says, e.g. -1).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import types
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
MACHINES = REPO / "tests/fixtures/machines"
GOLDEN = REPO / "tests/fixtures/exporter"
GOLDEN_MACHINES = ("dgx1-v100", "hgx-h100", "dgx-a100", "epyc-1s-nps4")
GPU_RESOURCE = "nvidia.com/gpu"
NVIDIA_VENDOR = "0x10de"
MELLANOX_VENDOR = "0x15b3"
# No GPU generation has more NVLinks than this; more links to peers means a switch fabric.
MAX_NVLINKS_PER_GPU = 18
NVSWITCHES_PER_FABRIC = 4


def load_machine(name_or_path: str | Path) -> dict[str, Any]:
    path = Path(name_or_path)
    if not path.exists():
        path = MACHINES / f"{name_or_path}.yaml"
    document = yaml.safe_load(path.read_text())
    if not isinstance(document, dict):
        raise ValueError(f"{path}: not a machine fixture")
    return document


def parse_list(text: str) -> list[int]:
    ids: list[int] = []
    for part in str(text).split(","):
        low, _, high = part.strip().partition("-")
        ids.extend(range(int(low), int(high or low) + 1))
    return ids


def format_list(ids: Iterable[int]) -> str:
    ordered = sorted(set(ids))
    parts: list[str] = []
    index = 0
    while index < len(ordered):
        end = index
        while end + 1 < len(ordered) and ordered[end + 1] == ordered[end] + 1:
            end += 1
        parts.append(str(ordered[index]) if end == index else f"{ordered[index]}-{ordered[end]}")
        index = end + 1
    return ",".join(parts)


def quantity_bytes(text: str | int) -> int:
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}
    value = str(text)
    for suffix, factor in units.items():
        if value.endswith(suffix):
            return int(value[: -len(suffix)]) * factor
    return int(value)


def devices_of(machine: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (resource, dict(device)) for resource, devices in (machine.get("devices") or {}).items() for device in devices
    ]


def pci_layout(machine: Mapping[str, Any]) -> dict[tuple[str, str], tuple[str, ...]]:
    """(resource, device id) -> sysfs path below devices/: host bridge, bridges, endpoint."""
    switches: list[str | None] = []
    for _, device in devices_of(machine):
        switch = device.get("pci_switch")
        if switch not in switches or switch is None:
            switches.append(switch)
    layout: dict[tuple[str, str], tuple[str, ...]] = {}
    slots: dict[int, int] = {}
    for resource, device in devices_of(machine):
        switch = device.get("pci_switch")
        index = (
            switches.index(switch)
            if switch is not None
            else next(i for i, s in enumerate(switches) if s is None and i not in slots)
        )
        bus = 0x10 + index * 0x10
        slot = slots.get(index, 0)
        slots[index] = slot + 1
        host = f"pci0000:{bus:02x}"
        root_port = f"0000:{bus:02x}:01.0"
        if switch is None:
            layout[(resource, str(device["id"]))] = (host, root_port, f"0000:{bus + 1:02x}:00.0")
            continue
        upstream = f"0000:{bus + 1:02x}:00.0"
        downstream = f"0000:{bus + 2:02x}:{slot:02x}.0"
        endpoint = f"0000:{bus + 3 + slot:02x}:00.0"
        layout[(resource, str(device["id"]))] = (host, root_port, upstream, downstream, endpoint)
    return layout


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def generate_sysfs(machine: Mapping[str, Any], root: Path) -> Path:
    """Write the fake sysfs tree of `machine` under root; returns root."""
    numa_nodes = sorted(machine["numa_nodes"], key=lambda node: int(node["id"]))
    node_ids = [int(node["id"]) for node in numa_nodes]
    distances = machine.get("numa_distances") or []
    node_root = root / "devices/system/node"
    _write(node_root / "online", format_list(node_ids))
    _write(node_root / "possible", format_list(node_ids))
    cpus_of_node: dict[int, list[int]] = {}
    for position, node in enumerate(numa_nodes):
        node_id = int(node["id"])
        node_dir = node_root / f"node{node_id}"
        cpus = parse_list(node["cpus"])
        cpus_of_node[node_id] = cpus
        _write(node_dir / "cpulist", format_list(cpus))
        if position < len(distances):
            _write(node_dir / "distance", " ".join(str(d) for d in distances[position]))
        total_kb = quantity_bytes(node.get("memory", "0")) // 1024
        _write(
            node_dir / "meminfo",
            f"Node {node_id} MemTotal:       {total_kb} kB\n"
            f"Node {node_id} MemFree:        {total_kb * 9 // 10} kB\n"
            f"Node {node_id} HugePages_Total:     0",
        )
        hugepages = {int(k): int(v) for k, v in (node.get("hugepages") or {}).items()}
        for size_kb in sorted({2048, 1048576, *hugepages}):
            _write(
                node_dir / f"hugepages/hugepages-{size_kb}kB/nr_hugepages",
                str(hugepages.get(size_kb, 0)),
            )
    cpu_root = root / "devices/system/cpu"
    all_cpus: list[int] = []
    for core in machine.get("cores") or []:
        siblings = parse_list(core["cpus"])
        l3 = int(core.get("l3", core["socket"]))
        l3_cpus = [
            cpu
            for other in machine["cores"]
            if int(other.get("l3", other["socket"])) == l3
            for cpu in parse_list(other["cpus"])
        ]
        for cpu in siblings:
            all_cpus.append(cpu)
            cpu_dir = cpu_root / f"cpu{cpu}"
            _write(cpu_dir / "topology/core_id", str(core["core"]))
            _write(cpu_dir / "topology/physical_package_id", str(core["socket"]))
            _write(cpu_dir / "topology/thread_siblings_list", format_list(siblings))
            _write(cpu_dir / "cache/index3/level", "3")
            _write(cpu_dir / "cache/index3/id", str(l3))
            _write(cpu_dir / "cache/index3/shared_cpu_list", format_list(l3_cpus))
    _write(cpu_root / "online", format_list(all_cpus))
    _write(cpu_root / "possible", format_list(all_cpus))
    numa_of_device = {(resource, str(device["id"])): device for resource, device in devices_of(machine)}
    for key, path in pci_layout(machine).items():
        resource, device_id = key
        device = numa_of_device[key]
        device_dir = root / "devices" / Path(*path)
        numa = int(device.get("sysfs_numa_node", device.get("numa", -1)))
        local = cpus_of_node.get(int(device.get("numa", -1)), [])
        _write(device_dir / "numa_node", str(numa))
        _write(device_dir / "local_cpulist", format_list(local))
        gpu = resource == GPU_RESOURCE
        _write(device_dir / "vendor", NVIDIA_VENDOR if gpu else MELLANOX_VENDOR)
        _write(device_dir / "class", "0x030200" if gpu else "0x020700")
        bus_link = root / "bus/pci/devices" / path[-1]
        bus_link.parent.mkdir(parents=True, exist_ok=True)
        bus_link.symlink_to(Path("../../..") / "devices" / Path(*path))
        if resource.startswith("rdma/"):
            class_dir = root / "class/infiniband" / device_id
            class_dir.mkdir(parents=True, exist_ok=True)
            (class_dir / "device").symlink_to(Path("../../..") / "devices" / Path(*path))
            _write(class_dir / "hca_type", str(device.get("model", "")))
    return root


# ---------------------------------------------------------------------------------------------
# Fake NVML: the pynvml functions the exporter calls, answering from the same fixture.


def gpu_uuid(machine: Mapping[str, Any], device_id: str) -> str:
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{machine['machine']}.gpu{device_id}"))


def _nvlink_matrix(machine: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """GPU id -> peer GPU id -> NVLink count from the fixture's `nvidia-smi topo -m` table."""
    lines = [line.split() for line in str(machine.get("nvidia_smi_topo_m", "")).splitlines() if line.strip()]
    if not lines:
        return {}
    header = [name for name in lines[0] if re.fullmatch(r"GPU\d+", name)]
    matrix: dict[str, dict[str, int]] = {}
    for row in lines[1:]:
        if not re.fullmatch(r"GPU\d+", row[0]):
            continue
        peers: dict[str, int] = {}
        for column, cell in zip(header, row[1:], strict=False):
            match = re.fullmatch(r"NV(\d+)", cell)
            if match:
                peers[column[3:]] = int(match[1])
        matrix[row[0][3:]] = peers
    return matrix


class FakeNvml:
    """Stands in for the pynvml module: the same function names, answers from the fixture.

    `failing` names GPU indices whose every query after the handle raises GPU_IS_LOST.
    """

    def __init__(self, machine: Mapping[str, Any], failing: Iterable[int] = ()) -> None:
        import pynvml

        self.pynvml = pynvml
        self.NVMLError = pynvml.NVMLError
        self.NVML_NVLINK_MAX_LINKS = MAX_NVLINKS_PER_GPU
        self.NVML_FEATURE_ENABLED = pynvml.NVML_FEATURE_ENABLED
        self.NVML_FEATURE_DISABLED = pynvml.NVML_FEATURE_DISABLED
        self.failing = set(failing)
        self.init_calls = 0
        self.gpus = [dict(device) for device in (machine.get("devices") or {}).get(GPU_RESOURCE, [])]
        layout = pci_layout(machine)
        self.bus_ids = ["0000" + layout[(GPU_RESOURCE, str(gpu["id"]))][-1].upper() for gpu in self.gpus]
        self.uuids = [gpu_uuid(machine, str(gpu["id"])) for gpu in self.gpus]
        matrix = _nvlink_matrix(machine)
        ids = [str(gpu["id"]) for gpu in self.gpus]
        counts = [count for peers in matrix.values() for count in peers.values()]
        fabric = (
            bool(counts)
            and len(set(counts)) == 1
            and all(len(matrix.get(i, {})) == len(ids) - 1 for i in ids)
            and counts[0] * (len(ids) - 1) > MAX_NVLINKS_PER_GPU
        )
        # Per GPU index: the remote PCI bus id of each of its links, in link order.
        self.links: list[list[str]] = []
        for index, gpu_id in enumerate(ids):
            remotes: list[str] = []
            if fabric:
                for link in range(counts[0]):
                    remotes.append(f"00000000:{0xC0 + link % NVSWITCHES_PER_FABRIC:02X}:00.0")
            else:
                for peer, count in sorted(matrix.get(gpu_id, {}).items(), key=lambda item: int(item[0])):
                    remotes.extend([self.bus_ids[ids.index(peer)]] * count)
            del index
            self.links.append(remotes)

    def _index(self, handle: Any) -> int:
        index = int(handle)
        if index in self.failing:
            raise self.NVMLError(self.pynvml.NVML_ERROR_GPU_IS_LOST)
        return index

    def nvmlInit(self) -> None:
        self.init_calls += 1

    def nvmlShutdown(self) -> None:
        return None

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if not 0 <= index < len(self.gpus):
            raise self.NVMLError(self.pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return index

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        return self.uuids[self._index(handle)]

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return str(self.gpus[self._index(handle)].get("model", "NVIDIA GPU"))

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        return types.SimpleNamespace(busId=self.bus_ids[self._index(handle)].encode())

    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int:
        links = self.links[self._index(handle)]
        if not 0 <= link < MAX_NVLINKS_PER_GPU:
            raise self.NVMLError(self.pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if link >= len(links):
            raise self.NVMLError(self.pynvml.NVML_ERROR_NOT_SUPPORTED)
        return int(self.NVML_FEATURE_ENABLED)

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: Any, link: int) -> Any:
        links = self.links[self._index(handle)]
        if not 0 <= link < len(links):
            raise self.NVMLError(self.pynvml.NVML_ERROR_NOT_SUPPORTED)
        return types.SimpleNamespace(busId=links[link].encode())

    def nvmlDeviceGetTopologyCommonAncestor(self, first: Any, second: Any) -> int:
        a, b = self.gpus[self._index(first)], self.gpus[self._index(second)]
        if a.get("pci_switch") is not None and a.get("pci_switch") == b.get("pci_switch"):
            return int(self.pynvml.NVML_TOPOLOGY_SINGLE)
        if a.get("numa") == b.get("numa"):
            return int(self.pynvml.NVML_TOPOLOGY_NODE)
        return int(self.pynvml.NVML_TOPOLOGY_SYSTEM)

    def install(self, monkeypatch: Any) -> None:
        """Replace the pynvml functions the exporter calls with this fake's (pytest monkeypatch)."""
        for name in dir(self):
            if name.startswith("nvml"):
                monkeypatch.setattr(self.pynvml, name, getattr(self, name))


# ---------------------------------------------------------------------------------------------
# Golden files.

GOLDEN_KUBELET_CONFIG = """\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cpuManagerPolicy: static
cpuManagerPolicyOptions:
  full-pcpus-only: "true"
topologyManagerPolicy: single-numa-node
topologyManagerScope: pod
topologyManagerPolicyOptions:
  prefer-closest-numa-nodes: "true"
memoryManagerPolicy: Static
kubeReserved:
  cpu: "1"
  memory: 1Gi
systemReserved:
  cpu: "1"
  memory: 1Gi
reservedMemory:
- numaNode: 0
  limits:
    memory: 2Gi
"""


def golden_document(machine_name: str, workdir: Path) -> dict[str, Any]:
    """What the exporter discovers and publishes for a machine (the golden file's content)."""
    from numasched.exporter.command import build_parser, discover_once
    from numasched.exporter.report import report_summary

    machine = load_machine(machine_name)
    sysfs = generate_sysfs(machine, workdir / "sys")
    kubelet_config = workdir / "kubelet-config.yaml"
    kubelet_config.write_text(GOLDEN_KUBELET_CONFIG)
    args = build_parser().parse_args(
        [
            "--node-name",
            machine_name,
            "--sysfs",
            str(sysfs),
            "--kubelet-config",
            str(kubelet_config),
            "--pod-resources-socket",
            str(workdir / "absent.sock"),
            "--cpu-manager-state",
            str(workdir / "absent-state"),
            "--device-id-format",
            f"{GPU_RESOURCE}=index",
        ]
    )
    report, objects = asyncio.run(discover_once(args, nvml=FakeNvml(machine)))
    return {"topology": report_summary(report), "numatopology": objects.numatopology}


def write_golden(machines: Iterable[str]) -> None:
    import tempfile

    GOLDEN.mkdir(parents=True, exist_ok=True)
    for name in machines:
        with tempfile.TemporaryDirectory() as scratch:
            document = golden_document(name, Path(scratch))
        target = GOLDEN / f"{name}.yaml"
        target.write_text(
            f"# Generated by `python hack/gen_sysfs.py golden {name}`; do not edit by hand.\n"
            + yaml.safe_dump(document, sort_keys=True, width=110)
        )
        print(f"wrote {target.relative_to(REPO)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    sysfs = commands.add_parser("sysfs", help="write a fake sysfs tree for a machine fixture")
    sysfs.add_argument("machine", help="fixture name (hgx-h100) or path to a machine YAML")
    sysfs.add_argument("output", type=Path, help="empty directory to write the tree into")
    golden = commands.add_parser("golden", help="regenerate tests/fixtures/exporter/<machine>.yaml")
    golden.add_argument("machines", nargs="*", default=list(GOLDEN_MACHINES))
    args = parser.parse_args(argv)
    if args.command == "sysfs":
        generate_sysfs(load_machine(args.machine), args.output)
        return 0
    write_golden(args.machines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
