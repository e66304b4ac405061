"""The console's HTML: server-rendered from a ClusterView, every value escaped, no outside assets.

Each page is a shell (header, filters, script) around a `<main id="content">` fragment; the
script re-fetches the fragment alone (`?fragment=1`) every few seconds, so the page follows the
cache without a full reload and keeps the filters a person typed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from html import escape
from urllib.parse import quote

from numasched.scheduler.console.policy import NumaAwareState
from numasched.scheduler.console.view import (
    ClusterView,
    CpuCell,
    DeviceCell,
    LinkView,
    NodeView,
    NumaNodeView,
    PendingPod,
)

UI_PREFIX = "/ui"
REFRESH_MS = 2000


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def node_href(name: str) -> str:
    return f"{UI_PREFIX}/nodes/{quote(name, safe='')}"


def format_bytes(value: int | None) -> str:
    if value is None:
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def fill_class(fill: float) -> str:
    """Bands of fullness for the colour: 0-24 %, 25-49 %, 50-74 %, 75-99 %, full."""
    if fill >= 1.0:
        return "fill-full"
    return f"fill-{min(3, math.floor(fill * 4))}"


# ---- page shell ----------------------------------------------------------------------------------


def page(title: str, content: str, *, view: ClusterView, live: bool = True) -> str:
    labels = sorted({f"{key}={value}" for node in view.nodes for key, value in node.labels})
    models = sorted({model for node in view.nodes for model in node.device_models})
    policies = sorted({node.topology_policy or "none" for node in view.nodes})
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)} · numasched</title>
<link rel="stylesheet" href="{UI_PREFIX}/static/console.css">
</head>
<body data-refresh-ms="{REFRESH_MS if live else 0}">
<header>
<strong>numasched</strong>
<nav><a href="{UI_PREFIX}/">Nodes</a> <a href="{UI_PREFIX}/pending">Pending pods</a>
<a href="{UI_PREFIX}/problems">Problems</a></nav>
<form id="filters" onsubmit="return false">
<label>label <input id="filter-label" list="known-labels" placeholder="key=value"></label>
<datalist id="known-labels">{"".join(f'<option value="{_e(label)}">' for label in labels)}</datalist>
<label>device model <select id="filter-model"><option value="">any</option>
{"".join(f'<option value="{_e(model)}">{_e(model)}</option>' for model in models)}</select></label>
<label>policy <select id="filter-policy"><option value="">any</option>
{"".join(f'<option value="{_e(policy)}">{_e(policy)}</option>' for policy in policies)}</select></label>
</form>
<span id="live-state" aria-live="polite"></span>
</header>
<main id="content">
{content}
</main>
<script src="{UI_PREFIX}/static/console.js"></script>
</body>
</html>
"""


# ---- overview ------------------------------------------------------------------------------------


def overview(view: ClusterView, policy: NumaAwareState | None) -> str:
    stranded = sum(node.stranded_total for node in view.nodes)
    numa_nodes = sum(len(node.numa) for node in view.nodes)
    parts = [
        '<section id="summary">',
        f'<span>nodes <b id="node-count">{len(view.nodes)}</b></span>',
        f"<span>NUMA nodes <b>{numa_nodes}</b></span>",
        f'<span>pending pods <a href="{UI_PREFIX}/pending"><b id="pending-count">{len(view.pending)}</b></a></span>',
        f'<span title="free devices no pending request could use on one NUMA node">stranded devices '
        f'<b id="stranded-count">{stranded}</b></span>',
        f'<span>problems <a href="{UI_PREFIX}/problems"><b>{len(view.problems)}</b></a></span>',
    ]
    if policy is not None:
        state = "open" if policy.enabled else "close"
        parts.append(f'<span>numa-aware <b id="numa-aware-status" class="policy-{state}">{state}</b></span>')
    parts.append("</section>")
    parts.append('<section id="tiles">')
    parts.extend(_tile(node) for node in view.nodes)
    parts.append("</section>")
    parts.append(_legend())
    return "\n".join(parts)


def _legend() -> str:
    return (
        '<p class="legend">Colour: the fullest of pinned CPUs, memory and devices per NUMA node: '
        '<span class="swatch fill-0">&lt;25%</span><span class="swatch fill-1">&lt;50%</span>'
        '<span class="swatch fill-2">&lt;75%</span><span class="swatch fill-3">&lt;100%</span>'
        '<span class="swatch fill-full">full</span></p>'
    )


def _tile(node: NodeView) -> str:
    labels = " ".join(f"{key}={value}" for key, value in node.labels)
    flags = []
    if not node.ready:
        flags.append('<span class="flag bad">NotReady</span>')
    if node.unschedulable:
        flags.append('<span class="flag">cordoned</span>')
    if node.topology in ("missing", "rejected"):
        flags.append(f'<span class="flag bad" title="{_e(node.topology_problem)}">topology {_e(node.topology)}</span>')
    if node.stranded_total:
        flags.append(f'<span class="flag">{node.stranded_total} stranded</span>')
    numa = "".join(_numa_box(numa) for numa in node.numa)
    return (
        f'<a class="tile" href="{_e(node_href(node.name))}" data-node="{_e(node.name)}" '
        f'data-labels="{_e(labels)}" data-models="{_e("|".join(node.device_models))}" '
        f'data-policy="{_e(node.topology_policy or "none")}">'
        f'<span class="tile-name">{_e(node.name)}</span>'
        f'<span class="tile-policy">{_e(node.topology_policy or "no topology")}</span>'
        f"{''.join(flags)}"
        f'<span class="numa-row">{numa}</span></a>'
    )


def _numa_box(numa: NumaNodeView) -> str:
    pinned = numa.cpu_allocatable - numa.cpu_count("free")
    lines = [f"NUMA {numa.id}", f"CPU {pinned}/{numa.cpu_allocatable}"]
    memory = next((cell for cell in numa.memory if cell.resource == "memory"), None)
    if memory is not None:
        lines.append(f"mem pinned {format_bytes(memory.used)}/{format_bytes(memory.total)}")
    resources = sorted({cell.resource for cell in numa.devices})
    for resource in resources:
        cells = numa.devices_of(resource)
        used = sum(1 for cell in cells if cell.state != "free")
        lines.append(f"{resource.rsplit('/', 1)[-1]} {used}/{len(cells)}")
    title = f"NUMA {numa.id}: {round(numa.fill * 100)}% full"
    return (
        f'<span class="numa {fill_class(numa.fill)}" data-numa="{numa.id}" data-fill="{numa.fill:.2f}" '
        f'title="{_e(title)}">{"<br>".join(_e(line) for line in lines)}</span>'
    )


# ---- node page -----------------------------------------------------------------------------------


def node_page(node: NodeView) -> str:
    parts = [f'<h1 id="node-name">{_e(node.name)}</h1>', '<dl class="facts">']
    facts = [
        (
            "topology",
            {"ids": "CPU and device ids known", "counts": "per-NUMA counts only (ids unknown)"}.get(
                node.topology, node.topology
            ),
        ),
        ("topology source", node.topology_source or "-"),
        ("topology manager", f"{node.topology_policy or '-'} ({node.scope or '-'} scope)"),
        ("CPU manager", node.cpu_manager_policy or "-"),
        ("ready", "yes" if node.ready else "no"),
    ]
    if node.topology_problem:
        facts.append(("topology problem", node.topology_problem))
    parts.extend(f"<dt>{_e(key)}</dt><dd>{_e(value)}</dd>" for key, value in facts)
    parts.append("</dl>")
    if node.problems:
        parts.append('<ul class="problems">' + "".join(f"<li>{_e(p)}</li>" for p in node.problems) + "</ul>")
    if node.stranded:
        parts.append(
            '<p class="stranded">Stranded (free, but below the smallest pending request on any one NUMA node): '
            + ", ".join(f"{_e(resource)} {count}" for resource, count in node.stranded)
            + "</p>"
        )
    parts.append('<section id="numa-nodes">')
    parts.extend(_numa_section(numa) for numa in node.numa)
    parts.append("</section>")
    if node.unplaced_devices:
        parts.append("<h2>Devices without a NUMA node</h2>" + _device_list(node.unplaced_devices))
    if node.distances:
        parts.append(_distances(node))
    if node.links:
        parts.append(_link_section(node))
    switches = _pcie_switches(node)
    if switches:
        parts.append(switches)
    parts.append(_pods_table(node))
    return "\n".join(parts)


def _numa_section(numa: NumaNodeView) -> str:
    cores: dict[tuple[int, int], list[CpuCell]] = {}
    for cell in numa.cpus:
        cores.setdefault((cell.socket, cell.core), []).append(cell)
    core_html = "".join(
        f'<span class="core" title="socket {socket} core {core}">' + "".join(_cpu(cell) for cell in cells) + "</span>"
        for (socket, core), cells in cores.items()
    )
    counts = ", ".join(
        f"{state} {numa.cpu_count(state)}" for state in ("free", "pinned", "reserved", "held") if numa.cpu_count(state)
    )
    memory = "".join(
        f"<tr><td>{_e(cell.resource)}</td><td>{_e(format_bytes(cell.total))}</td>"
        f"<td>{_e(format_bytes(cell.used))}</td><td>{_e(format_bytes(cell.free))}</td></tr>"
        for cell in numa.memory
    )
    memory_table = (
        '<table class="memory"><tr><th>memory</th><th>allocatable</th><th>pinned</th><th>free</th></tr>'
        f"{memory}</table>"
        if memory
        else '<p class="note">no per-NUMA memory reported</p>'
    )
    return (
        f'<article class="numa-node {fill_class(numa.fill)}" id="numa-{numa.id}" data-numa="{numa.id}">'
        f"<h2>NUMA node {numa.id}</h2>"
        f'<p class="cpu-counts">CPUs: {_e(counts) or "none"}</p>'
        f'<div class="cpus">{core_html}</div>'
        f"{memory_table}"
        f"{_device_list(numa.devices) if numa.devices else ''}"
        "</article>"
    )


def _cpu(cell: CpuCell) -> str:
    title = f"CPU {cell.cpu} (core {cell.core}): {cell.state}" + (f" by {cell.pod}" if cell.pod else "")
    return (
        f'<span class="cpu {cell.state}" data-cpu="{cell.cpu}" data-state="{cell.state}" '
        f'data-pod="{_e(cell.pod)}" title="{_e(title)}">{cell.cpu}</span>'
    )


def _device_list(cells: Iterable[DeviceCell]) -> str:
    rows = "".join(
        f'<tr class="device {cell.state}" data-device="{_e(cell.resource)}/{_e(cell.id)}" data-state="{cell.state}">'
        f"<td>{_e(cell.resource)}</td><td>{_e(cell.id)}</td><td>{_e(cell.model or '-')}</td>"
        f"<td>{_e(cell.pci_bus_id or '-')}</td><td>{_e(cell.pci_switch or '-')}</td>"
        f"<td>{_e(cell.state)}</td><td>{_e(cell.pod or '-')}</td></tr>"
        for cell in cells
    )
    return (
        '<table class="devices"><tr><th>resource</th><th>id</th><th>model</th><th>PCI</th><th>PCIe switch</th>'
        f"<th>state</th><th>pod</th></tr>{rows}</table>"
    )


def _distances(node: NodeView) -> str:
    head = "".join(f"<th>{numa}</th>" for numa, _ in node.distances)
    rows = "".join(
        f"<tr><th>{numa}</th>{''.join(f'<td>{value}</td>' for value in values)}</tr>" for numa, values in node.distances
    )
    return f'<h2>NUMA distances</h2><table class="distances"><tr><th></th>{head}</tr>{rows}</table>'


def _link_section(node: NodeView) -> str:
    devices = sorted({link.first for link in node.links} | {link.second for link in node.links})
    by_pair = {(link.first, link.second): link for link in node.links}
    by_pair.update({(link.second, link.first): link for link in node.links})
    head = "".join(f"<th>{_e(_short(device))}</th>" for device in devices)
    rows = []
    for first in devices:
        cells = []
        for second in devices:
            if first == second:
                cells.append('<td class="self">X</td>')
                continue
            link = by_pair.get((first, second))
            label = link.label if link is not None else "-"
            kind = "nvlink" if link is not None and (link.nvlinks or link.nvswitch) else "pcie"
            cells.append(f'<td class="{kind}" data-link="{_e(first)} {_e(second)}">{_e(label)}</td>')
        rows.append(f"<tr><th>{_e(_short(first))}</th>{''.join(cells)}</tr>")
    return (
        "<h2>Device links (NVLink / NVSwitch / PCIe)</h2>"
        + _link_graph(devices, node.links)
        + f'<table id="link-matrix" class="links"><tr><th></th>{head}</tr>{"".join(rows)}</table>'
    )


def _short(device: str) -> str:
    """ "nvidia.com/gpu/3" -> "gpu:3"."""
    resource, _, device_id = device.rpartition("/")
    return f"{resource.rsplit('/', 1)[-1]}:{device_id}"


def _link_graph(devices: list[str], links: Iterable[LinkView]) -> str:
    """An SVG of the device graph: devices on a circle, NVLink edges thick (by link count),
    NVSwitch edges dashed; PCIe-only pairs are left to the matrix."""
    size, radius = 360, 140
    centre = size / 2
    positions = {}
    for index, device in enumerate(devices):
        angle = 2 * math.pi * index / max(1, len(devices)) - math.pi / 2
        positions[device] = (centre + radius * math.cos(angle), centre + radius * math.sin(angle))
    edges = []
    for link in links:
        if not (link.nvlinks or link.nvswitch):
            continue
        (x1, y1), (x2, y2) = positions[link.first], positions[link.second]
        width = 1 + min(6, link.nvlinks)
        dash = ' stroke-dasharray="4 3"' if link.nvswitch and not link.nvlinks else ""
        edges.append(
            f'<line class="edge" x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
            f'stroke-width="{width}"{dash}><title>{_e(link.first)} - {_e(link.second)}: {_e(link.label)}</title></line>'
        )
    nodes = "".join(
        f'<g class="vertex"><circle cx="{x:.1f}" cy="{y:.1f}" r="16"></circle>'
        f'<text x="{x:.1f}" y="{y + 4:.1f}" text-anchor="middle">{_e(device.split("/")[-1])}</text>'
        f"<title>{_e(device)}</title></g>"
        for device, (x, y) in positions.items()
    )
    return (
        f'<svg id="link-graph" viewBox="0 0 {size} {size}" width="{size}" height="{size}" role="img" '
        f'aria-label="device link graph">{"".join(edges)}{nodes}</svg>'
    )


def _pcie_switches(node: NodeView) -> str:
    switches: dict[str, list[DeviceCell]] = {}
    for numa in node.numa:
        for cell in numa.devices:
            if cell.pci_switch:
                switches.setdefault(cell.pci_switch, []).append(cell)
    if not switches:
        return ""
    items = "".join(
        f'<li data-switch="{_e(switch)}"><b>{_e(switch)}</b>: '
        + ", ".join(f"{_e(cell.resource)} {_e(cell.id)}" for cell in cells)
        + "</li>"
        for switch, cells in sorted(switches.items())
    )
    return f'<h2>PCIe switches</h2><ul class="switches">{items}</ul>'


def _pods_table(node: NodeView) -> str:
    if not node.pods:
        return "<h2>Pods</h2><p>none</p>"
    rows = "".join(
        f'<tr data-pod="{_e(pod.key)}"><td>{_e(pod.key)}</td><td>{_e(pod.status)}</td>'
        f"<td>{_e(','.join(map(str, pod.numa)) or '-')}</td><td>{_e(pod.cpuset or 'shared')}</td>"
        f"<td>{_e(_devices_text(pod.devices))}</td>"
        f"<td>{_decision(pod.decision)}</td></tr>"
        for pod in node.pods
    )
    return (
        '<h2>Pods</h2><table id="pods" class="pods"><tr><th>pod</th><th>status</th><th>NUMA</th><th>CPUs</th>'
        f"<th>devices</th><th>decision</th></tr>{rows}</table>"
    )


def _devices_text(devices: tuple[tuple[str, tuple[str, ...]], ...]) -> str:
    return " ".join(f"{resource}={','.join(ids)}" for resource, ids in devices) or "-"


def _decision(text: str) -> str:
    if not text:
        return "-"
    return f"<details><summary>annotation</summary><pre>{_e(text)}</pre></details>"


# ---- pending and problems ------------------------------------------------------------------------


def pending_page(view: ClusterView) -> str:
    if not view.pending:
        return '<h1>Pending pods</h1><p id="no-pending">No pod of ours is waiting.</p>'
    return "<h1>Pending pods</h1>" + "".join(_pending(pod) for pod in view.pending)


def _pending(pod: PendingPod) -> str:
    asked = [f"{pod.asked_cpus} exclusive CPUs"] if pod.asked_cpus else []
    asked.extend(f"{count} {resource}" for resource, count in pod.asked_devices)
    if pod.asked_memory:
        asked.append(f"{format_bytes(pod.asked_memory)} memory")
    resources = [resource for resource, _ in pod.asked_devices]
    head = "<th>node</th><th>NUMA</th><th>free CPUs</th>" + "".join(
        f"<th>free {_e(resource)}</th>" for resource in resources
    )
    head += "<th>free memory</th><th>fits on this NUMA node</th>"
    rows = []
    for fit in pod.fits:
        for index, numa in enumerate(fit.numa):
            node_cell = (
                f'<td rowspan="{len(fit.numa)}"><a href="{_e(node_href(fit.node))}">{_e(fit.node)}</a></td>'
                if index == 0
                else ""
            )
            devices = "".join(f"<td>{count}</td>" for _, count in numa.free_devices)
            rows.append(
                f'<tr data-node="{_e(fit.node)}" data-numa="{numa.numa}" class="{"fits" if numa.fits else "short"}">'
                f"{node_cell}<td>{numa.numa}</td><td>{numa.free_cpus}</td>{devices}"
                f"<td>{_e(format_bytes(numa.free_memory))}</td><td>{'yes' if numa.fits else 'no'}</td></tr>"
            )
    more = (
        f'<p class="note">{pod.nodes_compared - len(pod.fits)} more nodes not shown.</p>'
        if pod.nodes_compared > len(pod.fits)
        else ""
    )
    return (
        f'<article class="pending" data-pod="{_e(pod.key)}"><h2>{_e(pod.key)}</h2>'
        f'<p class="reason">{_e(pod.reason)}</p>'
        f'<p class="explain"><a href="{_e(explain_href(pod.key))}">explain, node by node</a></p>'
        f'<p class="asked">asks: {_e(", ".join(asked) or "no pinned resources")}</p>'
        f'<table class="fits"><tr>{head}</tr>{"".join(rows)}</table>{more}</article>'
    )


def explain_href(key: str) -> str:
    namespace, _, name = key.partition("/")
    return f"{UI_PREFIX}/explain/{quote(namespace, safe='')}/{quote(name, safe='')}"


def explain_page(key: str, text: str | None, problem: str, what_if: bool) -> str:
    """`numasched explain`'s table for one pod, as it prints it."""
    toggle = (
        f'<a href="{_e(explain_href(key))}">without the what-if</a>'
        if what_if
        else f'<a href="{_e(explain_href(key))}?what_if=1">with the what-if (which departures would make room)</a>'
    )
    if text is None:
        return f'<h1>Explain {_e(key)}</h1><p class="reason">{_e(problem)}</p>'
    return f'<h1>Explain {_e(key)}</h1><p>{toggle}</p><pre id="explain">{_e(text)}</pre>'


def problems_page(view: ClusterView) -> str:
    if not view.problems:
        return "<h1>Problems</h1><p>None: every object was read.</p>"
    rows = "".join(f"<tr><td>{_e(obj)}</td><td>{_e(message)}</td></tr>" for obj, message in view.problems)
    return f'<h1>Problems</h1><table id="problems"><tr><th>object</th><th>problem</th></tr>{rows}</table>'


def not_found(name: str) -> str:
    link = f'<a href="{UI_PREFIX}/">All nodes</a>'
    return f"<h1>No node {_e(name)}</h1><p>The scheduler's cache has no such node. {link}</p>"
