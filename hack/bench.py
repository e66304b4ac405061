"""Benchmark the scheduler in-process on a simulated cluster: throughput, scale, placement quality.

    .venv/bin/python hack/bench.py --quick          # small clusters, about two minutes on 2 cores
    .venv/bin/python hack/bench.py --full           # N = 100, 1,000, 5,000 nodes, M = 10 x N pods
    .venv/bin/python hack/bench.py --profile out.pstats [--profile-config numasched --nodes 50]

Every run is one configuration of our engine on one generated cluster (hack/bench_workload.py),
in a fresh worker process so that its peak RSS is its own; the quality of its placements is judged
by replaying each node's pods through a model of the kubelet (hack/bench_quality.py). The report
is Markdown on stdout (--markdown FILE writes it too; --json FILE keeps the raw numbers).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import cProfile
import datetime
import itertools
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_run import CONFIGS, RunSpec, run  # type: ignore[import-not-found]
from bench_workload import MIXES  # type: ignore[import-not-found]

from numasched.logconfig import configure_logging

RESULT_PREFIX = "BENCH-RESULT "
PODS_PER_NODE = 10


@attrs.frozen(slots=True)
class Mode:
    name: str
    scale_nodes: tuple[int, ...]
    quality_nodes: int
    quality_mixes: tuple[str, ...]
    jobs: int
    # Per run: stop submitting batches once its scheduling time passes this.
    budget_s: float
    # For the whole benchmark: runs still going then are stopped and reported as far as they got.
    time_limit_s: float
    # Per run, the same.
    run_limit_s: float


QUICK = Mode("quick", (20, 50), 20, ("cpu-pinned", "gpu-heavy"), 2, 60.0, 110.0, 110.0)
FULL = Mode("full", (100, 1000, 5000), 100, ("cpu-pinned", "gpu-heavy"), 1, 3600.0, 6 * 3600.0, 2 * 3600.0)

TARGETS = {
    "nodes": 1000,
    "pods_per_s": 1000.0,
    "p99_ms": 5.0,
    "rss_mib": 1024.0,
    # numasched's rate against the configuration without numa-aware, in the same round.
    "rate_against_unaware": 0.7,
}
BASELINE = "topology-unaware"


@attrs.frozen(slots=True)
class PlannedRun:
    """One run of the plan: its spec, the round it belongs to (1-based, see --repeat) and whether
    its placements are judged for quality (in the first round only)."""

    spec: RunSpec
    round: int = 1
    quality: bool = True


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="small clusters (default), about two minutes")
    size.add_argument("--full", action="store_true", help="the issue's sizes: 100, 1,000 and 5,000 nodes")
    parser.add_argument("--nodes", type=int, nargs="+", help="cluster sizes for the scale runs (overrides the mode)")
    parser.add_argument("--pods-per-node", type=int, default=PODS_PER_NODE, help="M = this x N (default 10)")
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    parser.add_argument("--quality-mixes", nargs="*", choices=list(MIXES), help="extra mixes judged for quality")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run the balanced scale runs this many times, in rounds (each configuration once per round); "
        "the report gives every round's rates and their median",
    )
    parser.add_argument("--batches", type=int, default=10, help="arrival batches per run")
    parser.add_argument("--jobs", type=int, help="runs in parallel (default: 2 quick, 1 full)")
    parser.add_argument("--budget", type=float, help="per run: stop adding batches after this much scheduling time")
    parser.add_argument("--time-limit", type=float, help="stop starting runs, and stop those running, after this")
    parser.add_argument("--run-limit", type=float, help="stop any one run after this many seconds (wall)")
    parser.add_argument("--json", type=Path, help="write the raw results here")
    parser.add_argument("--markdown", type=Path, help="write the report here as well")
    parser.add_argument("--profile", type=Path, help="profile one run in-process, write pstats here, print the top")
    parser.add_argument("--profile-config", choices=list(CONFIGS), default="numasched")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--no-quality", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--progress", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


# -- worker side ------------------------------------------------------------------------------------


def worker_main(spec_text: str, with_quality: bool, progress: Path | None) -> int:
    configure_logging("warning")
    spec = RunSpec(**json.loads(spec_text))
    result = run(spec, with_quality=with_quality, progress=progress)
    sys.stdout.write(RESULT_PREFIX + json.dumps(result.as_dict()) + "\n")
    return 0


def run_in_worker(spec: RunSpec, timeout_s: float, with_quality: bool = True) -> dict[str, Any]:
    """Run one spec in a fresh interpreter; a failure or timeout comes back as an error entry."""
    with tempfile.TemporaryDirectory(prefix="numasched-bench-") as folder:
        progress = Path(folder) / "progress.json"
        command = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--worker",
            json.dumps(_spec_dict(spec)),
            "--progress",
            str(progress),
        ]
        if not with_quality:
            command.append("--no-quality")
        return _run_command(spec, command, timeout_s, progress)


def _run_command(spec: RunSpec, command: list[str], timeout_s: float, progress: Path) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        completed = subprocess.run(command, capture_output=True, text=True, timeout=max(1.0, timeout_s), check=False)
    except subprocess.TimeoutExpired:
        note = f"stopped after {timeout_s:.0f} s (time limit)"
        if progress.exists():
            # What the run had measured by its last finished cycle.
            partial: dict[str, Any] = json.loads(progress.read_text())
            partial.update(finished=False, stopped=note, quality=None, wall_s=round(time.perf_counter() - started, 2))
            return partial
        return {"spec": _spec_dict(spec), "error": note + ", before its first cycle ended"}
    for line in completed.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            result: dict[str, Any] = json.loads(line[len(RESULT_PREFIX) :])
            result["wall_s"] = round(time.perf_counter() - started, 2)
            return result
    tail = (completed.stderr or completed.stdout).strip().splitlines()[-5:]
    return {"spec": _spec_dict(spec), "error": f"exit {completed.returncode}: " + " | ".join(tail)}


def _spec_dict(spec: RunSpec) -> dict[str, Any]:
    return {
        "nodes": spec.nodes,
        "pods": spec.pods,
        "config": spec.config,
        "mix": spec.mix,
        "seed": spec.seed,
        "batches": spec.batches,
        "budget_s": spec.budget_s,
    }


# -- parent side ------------------------------------------------------------------------------------


def plan(args: argparse.Namespace) -> tuple[list[PlannedRun], Mode]:
    base = FULL if args.full else QUICK
    scale_nodes: tuple[int, ...] = tuple(args.nodes) if args.nodes else base.scale_nodes
    mode = attrs.evolve(
        base,
        scale_nodes=scale_nodes,
        quality_nodes=min(scale_nodes) if args.nodes else base.quality_nodes,
        quality_mixes=tuple(args.quality_mixes) if args.quality_mixes is not None else base.quality_mixes,
        jobs=args.jobs or base.jobs,
        budget_s=args.budget if args.budget is not None else base.budget_s,
        time_limit_s=args.time_limit or base.time_limit_s,
        run_limit_s=args.run_limit or base.run_limit_s,
    )
    planned: list[PlannedRun] = []
    runs = [(nodes, "balanced", 1) for nodes in mode.scale_nodes]
    runs += [(nodes, "balanced", round_) for round_ in range(2, max(1, args.repeat) + 1) for nodes in mode.scale_nodes]
    runs += [(mode.quality_nodes, mix, 1) for mix in mode.quality_mixes]
    for nodes, mix, round_ in runs:
        for config in args.configs:
            spec = RunSpec(nodes, nodes * args.pods_per_node, config, mix, args.seed, args.batches, mode.budget_s)
            planned.append(PlannedRun(spec, round_, quality=round_ == 1))
    return planned, mode


# Relative cost of a configuration per (pod x node), from earlier runs; only orders the runs.
_CONFIG_COST = {"topology-unaware": 1.0, "cpu-numa": 20.0, "numasched": 40.0}


def expected_cost(spec: RunSpec) -> float:
    return float(spec.nodes * spec.pods) * _CONFIG_COST.get(str(spec.config), 1.0)


def execute(runs: list[PlannedRun], jobs: int, time_limit_s: float, run_limit_s: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + time_limit_s
    results: dict[int, dict[str, Any]] = {}

    def one(index: int) -> None:
        left = deadline - time.monotonic()
        planned = runs[index]
        if left <= 1:
            results[index] = {"spec": _spec_dict(planned.spec), "error": "not started: time limit reached"}
        else:
            results[index] = run_in_worker(planned.spec, min(left, run_limit_s), with_quality=planned.quality)
            print(_progress_line(results[index]), file=sys.stderr, flush=True)
        results[index]["round"] = planned.round

    order = run_order(runs)
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(one, order))
    return [results[index] for index in range(len(runs))]


def run_order(runs: Sequence[PlannedRun]) -> list[int]:
    """Round by round, so that a slower or faster stretch of a shared machine falls on every
    configuration of a round alike; within a round the longest runs first, so parallel runs
    finish close together."""
    return sorted(range(len(runs)), key=lambda index: (runs[index].round, -expected_cost(runs[index].spec)))


def _progress_line(result: dict[str, Any]) -> str:
    spec = result["spec"]
    what = f"{spec['config']} N={spec['nodes']} M={spec['pods']} mix={spec['mix']}"
    if "error" in result:
        return f"bench: {what}: {result['error']}"
    stopped = f" ({result['stopped']})" if result.get("stopped") else ""
    return f"bench: {what}: {result['bound']} bound, {result['pods_per_s']} pods/s, {result['wall_s']} s wall{stopped}"


# -- report -----------------------------------------------------------------------------------------


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def scale_table(results: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| config | N nodes | M pods | submitted | bound | pending | pods/s | pods/CPU-s | decision p50 ms "
        "| decision p99 ms | decisions | cycles | cycle mean s | cycle max s | peak RSS MiB | finished |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    rounds = max((result.get("round", 1) for result in results), default=1)
    for result in results:
        spec = result["spec"]
        if spec["mix"] != "balanced":
            continue
        config = spec["config"] + (f" (round {result.get('round', 1)})" if rounds > 1 else "")
        if "error" in result:
            lines.append(f"| {config} | {spec['nodes']:,} | {spec['pods']:,} | {result['error']} |" + " |" * 12)
            continue
        lines.append(
            "| "
            + " | ".join(
                [
                    config,
                    _fmt(spec["nodes"]),
                    _fmt(spec["pods"]),
                    _fmt(result["submitted_pods"]),
                    _fmt(result["bound"]),
                    _fmt(result["pending"]),
                    _fmt(result["pods_per_s"]),
                    _fmt(result.get("pods_per_cpu_s", 0.0)),
                    _fmt(result["decision_p50_ms"], 2),
                    _fmt(result["decision_p99_ms"], 2),
                    _fmt(result["decisions"]),
                    _fmt(result["cycles"]),
                    _fmt(result["cycle_mean_s"], 3),
                    _fmt(result["cycle_max_s"], 3),
                    _fmt(result["peak_rss_mib"]),
                    _finished(result),
                ]
            )
            + " |"
        )
    return lines


def _finished(result: dict[str, Any]) -> str:
    if result["finished"]:
        return "yes"
    if result.get("stopped"):
        return f"partial: {result['stopped']}"
    return "partial: budget reached, later batches not submitted"


def quality_table(results: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| mix | N | config | placed | kubelet rejections | decision conflicts | pinned pods "
        "| span > necessary | multi-GPU pods | NVLink missed | free GPUs | stranded GPUs |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for result in results:
        spec = result["spec"]
        quality = result.get("quality")
        if "error" in result or quality is None:
            continue
        cells = [
            spec["mix"],
            _fmt(spec["nodes"]),
            spec["config"] + ("" if result["finished"] else " (partial)"),
            _fmt(quality["placed"]),
            _fmt(quality["rejected"]),
            _fmt(quality["decision_conflicts"]),
            _fmt(quality["pinned_pods"]),
            _fmt(quality["span_excess"]),
            _fmt(quality["gpu_set_pods"]),
            _fmt(quality["nvlink_missed"]),
            _fmt(quality["free_gpus"]),
            _fmt(quality["stranded_gpus"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def growth_lines(results: list[dict[str, Any]]) -> list[str]:
    """How the cost per decision and per cycle grows with N (and M = 10 x N) per configuration."""
    lines: list[str] = []
    by_config: dict[str, list[dict[str, Any]]] = {}
    for result in results:
        if "error" in result or result["spec"]["mix"] != "balanced" or result.get("round", 1) != 1:
            continue
        by_config.setdefault(result["spec"]["config"], []).append(result)
    for config, runs in by_config.items():
        runs.sort(key=lambda r: r["spec"]["nodes"])
        for small, large in itertools.pairwise(runs):
            factor = large["spec"]["nodes"] / small["spec"]["nodes"]
            per_decision = _ratio(
                large["decision_total_s"] / max(large["decisions"], 1),
                small["decision_total_s"] / max(small["decisions"], 1),
            )
            per_pod = _ratio(large["schedule_s"] / max(large["bound"], 1), small["schedule_s"] / max(small["bound"], 1))
            lines.append(
                f"- {config}: N x{factor:g} (M x{factor:g}) -> mean decision time x{per_decision}, "
                f"scheduling time per bound pod x{per_pod}, total scheduling time "
                f"x{_ratio(large['schedule_s'], small['schedule_s'])}"
            )
    return lines


def _ratio(large: float, small: float) -> str:
    return f"{large / small:.1f}" if small > 0 else "n/a"


def targets_lines(results: list[dict[str, Any]]) -> list[str]:
    lines: list[str] = []
    at_target = [
        r
        for r in results
        if r["spec"]["config"] == "numasched"
        and r["spec"]["mix"] == "balanced"
        and r["spec"]["nodes"] == TARGETS["nodes"]
    ]
    if not at_target:
        lines.append("- 1,000 nodes / 10,000 pods was not run in this mode (see --full).")
    elif "error" in at_target[0]:
        lines.append(
            f"- 1,000 nodes / 10,000 pods, numa-aware on: NOT met, the run did not finish: {at_target[0]['error']}"
        )
    else:
        run = median_run(at_target)
        checks = [
            (f"pods/s >= {TARGETS['pods_per_s']:,.0f}", run["pods_per_s"] >= TARGETS["pods_per_s"], run["pods_per_s"]),
            (
                f"pods per CPU-second (one core, whatever else runs) >= {TARGETS['pods_per_s']:,.0f}",
                run.get("pods_per_cpu_s", 0.0) >= TARGETS["pods_per_s"],
                run.get("pods_per_cpu_s", 0.0),
            ),
            (
                f"p99 decision < {TARGETS['p99_ms']:g} ms",
                run["decision_p99_ms"] < TARGETS["p99_ms"],
                run["decision_p99_ms"],
            ),
            (
                f"peak RSS < {TARGETS['rss_mib']:,.0f} MiB",
                run["peak_rss_mib"] < TARGETS["rss_mib"],
                run["peak_rss_mib"],
            ),
        ]
        partial = "" if run["finished"] else " (run stopped early: partial)"
        which = (
            f", the median of {len(at_target)} rounds by pods/s: round {run.get('round', 1)}"
            if len(at_target) > 1
            else ""
        )
        for name, met, value in checks:
            verdict = "met" if met else "NOT met"
            lines.append(f"- 1,000 nodes, numa-aware on: {name}: {verdict} ({_fmt(value, 2)}{which}){partial}")
        lines += rate_target_lines(results, int(TARGETS["nodes"]))
    rejected = [
        (r["spec"]["mix"], r["spec"]["nodes"], r["quality"]["rejected"])
        for r in results
        if "error" not in r and r["spec"]["config"] == "numasched" and r.get("quality")
    ]
    if rejected:
        total = sum(count for _, _, count in rejected)
        detail = ", ".join(f"{mix} N={nodes}: {count}" for mix, nodes, count in rejected)
        lines.append(f"- zero kubelet rejections for numasched: {'met' if total == 0 else 'NOT met'} ({detail})")
    return lines


def median_run(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median pods/s (the lower middle one of an even count); an unfinished run
    ranks below every finished one."""
    ranked = sorted(
        runs, key=lambda run: (bool(run.get("finished")) and "error" not in run, run.get("pods_per_s", 0.0))
    )
    return ranked[(len(ranked) - 1) // 2]


def rate_ratios(results: Sequence[dict[str, Any]], config: str, nodes: int, field: str) -> list[tuple[int, float]]:
    """Per round, the config's rate (`field`: pods_per_s or pods_per_cpu_s) divided by the
    baseline's in the same round, on the balanced mix at N = nodes; rounds where either run
    failed or stopped early are left out."""
    by_round: dict[int, dict[str, dict[str, Any]]] = {}
    for result in results:
        spec = result["spec"]
        if spec["mix"] != "balanced" or spec["nodes"] != nodes or "error" in result or not result.get("finished"):
            continue
        by_round.setdefault(result.get("round", 1), {})[spec["config"]] = result
    ratios: list[tuple[int, float]] = []
    for round_, runs in sorted(by_round.items()):
        if config in runs and BASELINE in runs and runs[BASELINE].get(field, 0.0) > 0:
            ratios.append((round_, runs[config][field] / runs[BASELINE][field]))
    return ratios


_RATE_FIELDS = (("pods_per_s", "pods/s"), ("pods_per_cpu_s", "pods per CPU-second"))


def rate_lines(results: Sequence[dict[str, Any]]) -> list[str]:
    """Every configuration's rate against the baseline per cluster size: each round's ratio and
    the median."""
    lines: list[str] = []
    sizes = sorted({r["spec"]["nodes"] for r in results if r["spec"]["mix"] == "balanced"})
    configs = sorted({r["spec"]["config"] for r in results} - {BASELINE})
    for nodes in sizes:
        for config in configs:
            for field, what in _RATE_FIELDS:
                ratios = rate_ratios(results, config, nodes, field)
                if ratios:
                    rounds = ", ".join(f"{ratio:.3f}" for _, ratio in ratios)
                    lines.append(
                        f"- {config}, N={nodes:,}, {what}: median {statistics.median([r for _, r in ratios]):.3f} "
                        f"of {BASELINE}'s (rounds: {rounds})"
                    )
    return lines


def rate_target_lines(results: Sequence[dict[str, Any]], nodes: int) -> list[str]:
    """The rate target: the median over rounds of numasched's rate divided by the baseline's."""
    lines: list[str] = []
    floor = TARGETS["rate_against_unaware"]
    for field, what in _RATE_FIELDS:
        ratios = rate_ratios(results, "numasched", nodes, field)
        if not ratios:
            lines.append(
                f"- {nodes:,} nodes, rate against {BASELINE} ({what}): not measured "
                "(both configurations must finish a round)"
            )
            continue
        middle = statistics.median([ratio for _, ratio in ratios])
        verdict = "met" if middle >= floor else "NOT met"
        lines.append(
            f"- {nodes:,} nodes, numa-aware on: {what} at least {floor:g} of {BASELINE}'s in the same round: "
            f"{verdict} (median {middle:.3f} over {len(ratios)} round{'s' if len(ratios) > 1 else ''})"
        )
    return lines


def render(results: list[dict[str, Any]], mode: Mode, started: datetime.datetime, elapsed: float) -> str:
    command = "python hack/bench.py " + " ".join(sys.argv[1:])
    out = [
        f"Benchmark ({mode.name}), {started.strftime('%Y-%m-%d %H:%M UTC')}, nproc={os.cpu_count()}, "
        f"Python {sys.version.split()[0]}, {elapsed:.0f} s wall",
        "",
        f"Command: `{command.strip()}`",
        "",
        "Configurations (all of our own engine; only numa-aware differs):",
        "",
        *[f"- `{name}`: {label}" for name, (label, _) in CONFIGS.items()],
        "",
        "### Throughput and scale (mix: balanced)",
        "",
        *scale_table(results),
        "",
        "Rate against the configuration without numa-aware (same round):",
        "",
        *(rate_lines(results) or [f"- (needs {BASELINE} and another configuration)"]),
        "",
        "Cost growth:",
        "",
        *(growth_lines(results) or ["- (needs two sizes)"]),
        "",
        "### Placement quality (kubelet replay)",
        "",
        *quality_table(results),
        "",
        "### Targets",
        "",
        *targets_lines(results),
        "",
    ]
    errors = [r for r in results if "error" in r]
    if errors:
        out += ["### Runs that did not complete", ""]
        out += [f"- {r['spec']['config']} N={r['spec']['nodes']} mix={r['spec']['mix']}: {r['error']}" for r in errors]
        out.append("")
    return "\n".join(out)


def profile_main(args: argparse.Namespace) -> int:
    configure_logging("warning")
    nodes = args.nodes[0] if args.nodes else QUICK.scale_nodes[0]
    spec = RunSpec(
        nodes,
        nodes * args.pods_per_node,
        args.profile_config,
        "balanced",
        args.seed,
        args.batches,
        args.budget or 600.0,
    )
    profiler = cProfile.Profile()
    result = run(spec, with_quality=False, profiler=profiler)
    profiler.dump_stats(str(args.profile))
    print(
        f"profiled {spec.label()}: {result.bound} bound in {result.schedule_s:.2f} s scheduling time; "
        f"stats in {args.profile} (scheduling sessions only)"
    )
    stats = pstats.Stats(str(args.profile))
    stats.sort_stats("cumulative").print_stats(15)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        return worker_main(args.worker, not args.no_quality, args.progress)
    if args.profile:
        return profile_main(args)
    runs, mode = plan(args)
    started = datetime.datetime.now(datetime.UTC)
    clock = time.perf_counter()
    results = execute(runs, mode.jobs, mode.time_limit_s, mode.run_limit_s)
    report = render(results, mode, started, time.perf_counter() - clock)
    sys.stdout.write(report)
    if args.markdown:
        args.markdown.write_text(report)
    if args.json:
        args.json.write_text(json.dumps({"mode": attrs.asdict(mode), "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
