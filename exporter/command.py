"""`numasched exporter`: discover the node's topology every period and publish it.

The lead wires add_exporter_arguments / run_exporter into cli.py. Discovery is read-only and
degrades per part: a reader that fails logs why and the rest is still published.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import attrs
import pynvml
import structlog
import yaml
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from numasched.api.resource import GPU_RESOURCE
from numasched.cli_durations import parse_duration
from numasched.cli_exit_codes import EXIT_CONFIG, EXIT_FAILURE, EXIT_INPUT, EXIT_OK, EXIT_USAGE
from numasched.cli_input_files import InputFileError, read_yaml_file
from numasched.exporter.gpus import GpuInventory, gpu_fingerprint, read_gpus
from numasched.exporter.kubelet_config import read_kubelet_config
from numasched.exporter.metrics import ExporterMetrics
from numasched.exporter.numatopology import (
    NRT_GROUP,
    NRT_PLURAL,
    NRT_VERSION,
    NUMATOPOLOGY_GROUP,
    NUMATOPOLOGY_PLURAL,
    NUMATOPOLOGY_VERSION,
    node_resource_topology_object,
    numatopology_object,
)
from numasched.exporter.podresources.client import PodResourcesUnavailable, read_pod_resources
from numasched.exporter.publisher import ObjectPublisher, PublishError
from numasched.exporter.rdma import read_rdma_devices
from numasched.exporter.report import (
    RDMA_RESOURCE,
    Discovery,
    NodeReport,
    build_report,
    parse_device_id_formats,
)
from numasched.exporter.sysfs import read_host_topology, read_pci_device
from numasched.exporter.usage import NodeUsage, read_checkpoints, with_pod_names
from numasched.scheduler.health import parse_address

log = structlog.get_logger("numasched.exporter")


def optional_path(text: str) -> Path | None:
    """A path option that an empty value turns off."""
    return Path(text) if text.strip() else None


def metrics_address(text: str) -> str:
    """--metrics-addr: HOST:PORT, :PORT or PORT, checked on the command line; "" disables."""
    if text.strip():
        try:
            parse_address(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    return text


def add_exporter_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--node-name", default=os.environ.get("NODE_NAME", ""), help="node name (env NODE_NAME)")
    parser.add_argument("--sysfs", type=Path, default=Path("/sys"), help="sysfs root (default /sys)")
    parser.add_argument(
        "--kubelet-config",
        type=Path,
        default=Path("/var/lib/kubelet/config.yaml"),
        help="the kubelet's KubeletConfiguration file, YAML or JSON",
    )
    parser.add_argument(
        "--pod-resources-socket",
        type=Path,
        default=Path("/var/lib/kubelet/pod-resources/kubelet.sock"),
        help="the kubelet PodResources gRPC socket",
    )
    parser.add_argument(
        "--cpu-manager-state",
        type=Path,
        default=Path("/var/lib/kubelet/cpu_manager_state"),
        help="CPU manager checkpoint, read when the PodResources socket is absent",
    )
    parser.add_argument(
        "--device-manager-checkpoint",
        type=optional_path,
        default=Path("/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"),
        help="device manager checkpoint, read with --cpu-manager-state when the PodResources socket is absent; "
        "empty: not read",
    )
    parser.add_argument("--period", type=parse_duration, default=5.0, help="discovery period (default 5s)")
    parser.add_argument(
        "--heartbeat", type=parse_duration, default=300.0, help="rewrite unchanged objects this often (default 5m)"
    )
    parser.add_argument("--timeout", type=parse_duration, default=10.0, help="timeout of every API and gRPC call")
    parser.add_argument(
        "--device-id-format",
        action="append",
        default=[],
        metavar="RESOURCE=FORMAT",
        help="device ids as the device plugin advertises them: index, uuid, pci or name "
        f"(default {GPU_RESOURCE}=uuid, {RDMA_RESOURCE}=name); repeatable",
    )
    parser.add_argument("--gpu-resource", default=GPU_RESOURCE, help="resource name of NVIDIA GPUs")
    parser.add_argument("--rdma-resource", default=RDMA_RESOURCE, help="resource name of RDMA NICs")
    parser.add_argument(
        "--metrics-addr",
        type=metrics_address,
        default=":9464",
        help="HOST:PORT to serve Prometheus metrics on; empty to disable",
    )
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: in-cluster config)")
    parser.add_argument(
        "--node-resource-topology",
        action="store_true",
        help="also publish a NodeResourceTopology (topology.node.k8s.io/v1alpha2)",
    )
    parser.add_argument("--once", action="store_true", help="discover and publish once, then exit")
    parser.add_argument(
        "--dry-run",
        "--output",
        dest="dry_run",
        action="store_true",
        help="print the objects as YAML instead of publishing them",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="numasched exporter", description=__doc__)
    add_exporter_arguments(parser)
    return parser


@attrs.frozen(slots=True)
class PublishedObjects:
    numatopology: dict[str, Any]
    node_resource_topology: dict[str, Any] | None = None


@attrs.define
class GpuCache:
    """NVML's answers, kept until the NVIDIA PCI functions in sysfs change."""

    fingerprint: tuple[str, ...] | None = None
    inventory: GpuInventory = attrs.field(factory=GpuInventory)

    def current(self, sysfs: Path, nvml: Any) -> GpuInventory:
        fingerprint = gpu_fingerprint(sysfs)
        if fingerprint != self.fingerprint:
            if self.fingerprint is not None:
                log.info("GPU set changed; reading NVML again", before=len(self.fingerprint), after=len(fingerprint))
            self.inventory = read_gpus(nvml)
            self.fingerprint = fingerprint
        return self.inventory


async def read_usage(args: argparse.Namespace) -> NodeUsage:
    try:
        return await read_pod_resources(args.pod_resources_socket, args.timeout)
    except PodResourcesUnavailable as error:
        device_checkpoint = args.device_manager_checkpoint
        log.warning(
            "PodResources API unavailable; falling back to the kubelet's checkpoints",
            node=args.node_name,
            reason=str(error),
            cpu_checkpoint=str(args.cpu_manager_state),
            device_checkpoint=str(device_checkpoint) if device_checkpoint is not None else "(not read)",
        )
    return read_checkpoints(args.cpu_manager_state, args.device_manager_checkpoint)


async def discover(args: argparse.Namespace, nvml: Any, gpu_cache: GpuCache) -> Discovery:
    host = read_host_topology(args.sysfs)
    gpus = gpu_cache.current(args.sysfs, nvml)
    gpu_pci = {
        gpu.index: read_pci_device(args.sysfs, gpu.pci_bus_id, host.numa_nodes) if gpu.pci_bus_id else None
        for gpu in gpus.gpus
    }
    return Discovery(
        host=host,
        kubelet=read_kubelet_config(args.kubelet_config),
        gpus=gpus,
        gpu_pci=gpu_pci,
        rdma=read_rdma_devices(args.sysfs, host.numa_nodes),
        usage=await read_usage(args),
    )


def objects_of(report: NodeReport, args: argparse.Namespace) -> PublishedObjects:
    return PublishedObjects(
        numatopology=numatopology_object(report),
        node_resource_topology=node_resource_topology_object(report) if args.node_resource_topology else None,
    )


async def discover_once(
    args: argparse.Namespace, nvml: Any = pynvml, gpu_cache: GpuCache | None = None
) -> tuple[NodeReport, PublishedObjects]:
    discovery = await discover(args, nvml, gpu_cache or GpuCache())
    report = build_report(
        args.node_name,
        discovery,
        parse_device_id_formats(args.device_id_format),
        gpu_resource=args.gpu_resource,
        rdma_resource=args.rdma_resource,
    )
    return report, objects_of(report, args)


def dump_objects(objects: PublishedObjects) -> str:
    documents = [objects.numatopology]
    if objects.node_resource_topology is not None:
        documents.append(objects.node_resource_topology)
    return yaml.safe_dump_all(documents, sort_keys=True, width=110)


async def serve_metrics(metrics: ExporterMetrics, address: str) -> web.AppRunner:
    host, port = parse_address(address)

    async def handle(_: web.Request) -> web.Response:
        response = web.Response(body=generate_latest(metrics.registry))
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response

    app = web.Application()
    app.router.add_get("/metrics", handle)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    log.info("serving metrics", address=address)
    return runner


async def _pods_on_node(api_client: Any, node_name: str, timeout: float) -> dict[str, tuple[str, str]]:
    from kubernetes_asyncio import client

    try:
        pods = await client.CoreV1Api(api_client).list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={node_name}", _request_timeout=timeout
        )
    except Exception as error:  # any API failure only costs the pod names
        log.warning("listing the node's pods failed; pod names unknown", node=node_name, error=str(error))
        return {}
    return {str(pod.metadata.uid): (str(pod.metadata.namespace), str(pod.metadata.name)) for pod in pods.items}


class ClientConfigError(Exception):
    """No usable Kubernetes client configuration (kubeconfig or in-cluster credentials)."""


async def _api_client(args: argparse.Namespace) -> Any:
    from kubernetes_asyncio import client
    from kubernetes_asyncio import config as kube_config

    config: Any = kube_config
    try:
        if args.kubeconfig:
            await config.load_kube_config(config_file=args.kubeconfig)
        else:
            config.load_incluster_config()
    # The client reports a bad kubeconfig as ConfigException, or lets a YAML, key or type error
    # out of its parser; all of them mean the same thing here.
    except (kube_config.ConfigException, OSError, ValueError, KeyError, TypeError, yaml.YAMLError) as error:
        where = f"kubeconfig {args.kubeconfig}" if args.kubeconfig else "in-cluster configuration"
        raise ClientConfigError(f"{where}: {error}") from None
    return client.ApiClient()


def startup_input_problem(args: argparse.Namespace) -> str:
    """Why the node's input files cannot be read at all ("" when they can).

    Checked once at startup so that a wrong path or a corrupt file fails the pod visibly instead
    of publishing a topology built on kubelet defaults. A kubelet config file that does not exist
    is allowed: a kubelet started without --config runs on its defaults, and so do we. Later
    periods keep degrading part by part (a reader that fails logs why).
    """
    if not args.sysfs.is_dir():
        return f"--sysfs {args.sysfs}: not a directory"
    if args.kubelet_config.exists():
        try:
            read_yaml_file(args.kubelet_config)
        except InputFileError as error:
            return f"--kubelet-config {error}"
    return ""


def startup_refusal(args: argparse.Namespace, command: str) -> int | None:
    """The exit status when the exporter's arguments cannot start `command` (exporter, agent),
    after saying why on stderr; None when they can."""
    if not args.node_name:
        print(f"numasched {command}: --node-name (or env NODE_NAME) is required", file=sys.stderr)
        return EXIT_USAGE
    try:
        parse_device_id_formats(args.device_id_format)
    except ValueError as error:
        print(f"numasched {command}: {error}", file=sys.stderr)
        return EXIT_USAGE
    problem = startup_input_problem(args)
    if problem:
        print(f"numasched {command}: {problem}", file=sys.stderr)
        return EXIT_INPUT
    return None


async def run_exporter(args: argparse.Namespace, nvml: Any = pynvml) -> int:
    """Run the exporter until cancelled (or once); the exit status, one of numasched.cli_exit_codes."""
    refused = startup_refusal(args, "exporter")
    if refused is not None:
        return refused
    try:
        return await _run_exporter(args, nvml)
    except ClientConfigError as error:
        print(f"numasched exporter: {error}", file=sys.stderr)
        return EXIT_CONFIG


async def _run_exporter(args: argparse.Namespace, nvml: Any) -> int:
    metrics = ExporterMetrics()
    try:
        runner = await serve_metrics(metrics, args.metrics_addr) if args.metrics_addr and not args.once else None
    except OSError as error:  # the port is taken, or the host is no address of this machine
        problem = error.strerror or str(error)
        print(f"numasched exporter: cannot serve metrics on {args.metrics_addr}: {problem}", file=sys.stderr)
        return EXIT_FAILURE
    api_client: Any = None
    status = EXIT_OK
    try:
        if not args.dry_run:
            from kubernetes_asyncio import client

            api_client = await _api_client(args)
            custom = client.CustomObjectsApi(api_client)
            numatopologies = ObjectPublisher(
                custom,
                NUMATOPOLOGY_GROUP,
                NUMATOPOLOGY_VERSION,
                NUMATOPOLOGY_PLURAL,
                timeout=args.timeout,
                heartbeat=args.heartbeat,
            )
            nrts = ObjectPublisher(
                custom, NRT_GROUP, NRT_VERSION, NRT_PLURAL, timeout=args.timeout, heartbeat=args.heartbeat
            )
        gpu_cache = GpuCache()
        while True:
            discovery = await discover(args, nvml, gpu_cache)
            if api_client is not None and any(not pod.name or not pod.uid for pod in discovery.usage.pods):
                names = await _pods_on_node(api_client, args.node_name, args.timeout)
                discovery = attrs.evolve(discovery, usage=with_pod_names(discovery.usage, names))
            report = build_report(
                args.node_name,
                discovery,
                parse_device_id_formats(args.device_id_format),
                gpu_resource=args.gpu_resource,
                rdma_resource=args.rdma_resource,
            )
            metrics.update(report)
            objects = objects_of(report, args)
            if args.dry_run:
                sys.stdout.write(dump_objects(objects))
                sys.stdout.flush()
            else:
                try:
                    await numatopologies.publish(objects.numatopology)
                    if objects.node_resource_topology is not None:
                        await nrts.publish(objects.node_resource_topology)
                    status = EXIT_OK
                except PublishError as error:
                    log.error("publishing failed; retrying next period", node=args.node_name, error=str(error))
                    status = EXIT_FAILURE
            if args.once:
                return status
            await asyncio.sleep(args.period)
    finally:
        if api_client is not None:
            await api_client.close()
        if runner is not None:
            await runner.cleanup()
