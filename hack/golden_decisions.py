"""Record, or check, where the scheduler places every pod of a fixed set of scenarios.

The scenarios are the bundled example (`numasched simulate` with no arguments) and generated
clusters from the benchmark (hack/bench_workload.py), small enough that every node is scanned and
large enough that the predicate scan is sampled. For each scenario the result is, per pod, the
node it was bound to and the decision annotations written on it.

tests/fixtures/golden/decisions.json was written by this script before the engine's speed work
(issue 12) and is the reference the test suite compares against: a change to the engine that is
meant to keep placements must reproduce it exactly. Rewrite it only for a change that means to
move pods, and say so in the commit:

    .venv/bin/python hack/golden_decisions.py --write      # rewrite the reference
    .venv/bin/python hack/golden_decisions.py              # compare, print what differs
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio

HACK = Path(__file__).resolve().parent
if str(HACK) not in sys.path:
    sys.path.insert(0, str(HACK))

from bench_run import MAX_CYCLES_PER_BATCH, load_config  # type: ignore[import-not-found]  # noqa: E402
from bench_workload import MIXES, SCHEDULER_NAME, batches, generate_cluster, generate_workload  # type: ignore[import-not-found]  # noqa: E402

from numasched.cache.cache import Cache  # noqa: E402
from numasched.cache.simcluster import SimCluster  # noqa: E402
from numasched.logconfig import configure_logging  # noqa: E402
from numasched.scheduler.builtin import default_registry  # noqa: E402
from numasched.scheduler.loop import schedule_cycle  # noqa: E402
from numasched.scheduler.simulate import load_config as load_simulate_config  # noqa: E402
from numasched.scheduler.simulate import read_inputs, simulate  # noqa: E402

REFERENCE = HACK.parent / "tests" / "fixtures" / "golden" / "decisions.json"
# The annotations a decision writes on the pod (numasched.io/*); everything else is not ours.
DECISION_PREFIX = "numasched.io/"

Decisions = dict[str, dict[str, Any]]


def bound_pods(cluster: SimCluster) -> Decisions:
    """Per pod key (namespace/name), its node and our decision annotations; unbound pods too,
    with node "" so a pod that stops being placed shows as a difference."""
    result: Decisions = {}
    for pod in cluster.pods():
        metadata = pod.get("metadata", {})
        key = f"{metadata.get('namespace', 'default')}/{metadata.get('name', '')}"
        annotations = metadata.get("annotations") or {}
        result[key] = {
            "node": str((pod.get("spec") or {}).get("nodeName") or ""),
            "decision": {
                name: value for name, value in sorted(annotations.items()) if name.startswith(DECISION_PREFIX)
            },
        }
    return dict(sorted(result.items()))


async def _example() -> Decisions:
    registry = default_registry()
    config = load_simulate_config(None, registry)
    cluster = SimCluster(Cache(("numasched",)))
    for text, source in [*read_inputs(None, "cluster.yaml"), *read_inputs(None, "workload.yaml")]:
        cluster.load_text(text, source)
    await simulate(cluster, config, registry, max_cycles=20, progress=False)
    return bound_pods(cluster)


async def _generated(nodes: int, mix: str, config_name: str, seed: int) -> Decisions:
    """The benchmark's run, batch by batch, as hack/bench_run.py runs it."""
    registry = default_registry()
    config = load_config(config_name, registry)
    cluster = SimCluster(Cache((SCHEDULER_NAME,)))
    for generated in generate_cluster(nodes, seed):
        cluster.add(generated.node)
        cluster.add(generated.numatopology)
    for batch in batches(generate_workload(nodes * 10, seed, MIXES[mix]), 10):
        for arrival in batch:
            for obj in arrival.objects:
                cluster.add(obj)
        for _ in range(MAX_CYCLES_PER_BATCH):
            before = len(cluster.bind_count)
            await schedule_cycle(cluster.cache, config, registry, cluster, cluster)
            if len(cluster.bind_count) == before:
                break
    return bound_pods(cluster)


def scenarios() -> dict[str, Callable[[], Any]]:
    """Name -> coroutine function giving that scenario's decisions. At 30 nodes every node is
    scanned; at 150 the predicate scan is sampled (100 feasible nodes are enough)."""
    return {
        "example": _example,
        "generated-30-balanced-numasched": lambda: _generated(30, "balanced", "numasched", 1),
        "generated-30-cpu-pinned-numasched": lambda: _generated(30, "cpu-pinned", "numasched", 2),
        "generated-30-gpu-heavy-numasched": lambda: _generated(30, "gpu-heavy", "numasched", 3),
        "generated-30-balanced-cpu-numa": lambda: _generated(30, "balanced", "cpu-numa", 4),
        "generated-150-balanced-numasched": lambda: _generated(150, "balanced", "numasched", 5),
        "generated-150-balanced-topology-unaware": lambda: _generated(150, "balanced", "topology-unaware", 6),
    }


def record(names: Sequence[str] | None = None) -> dict[str, Decisions]:
    chosen = scenarios()
    return {name: anyio.run(chosen[name]) for name in (names or list(chosen))}


def differences(expected: Mapping[str, Decisions], actual: Mapping[str, Decisions], limit: int = 20) -> list[str]:
    """Human-readable differences, at most `limit` lines."""
    lines: list[str] = []
    for scenario in sorted(set(expected) | set(actual)):
        before, after = expected.get(scenario, {}), actual.get(scenario, {})
        for pod in sorted(set(before) | set(after)):
            if before.get(pod) != after.get(pod):
                lines.append(f"{scenario}: {pod}: expected {before.get(pod)}, got {after.get(pod)}")
    if len(lines) > limit:
        lines = [*lines[:limit], f"... and {len(lines) - limit} more"]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="rewrite the reference instead of comparing")
    parser.add_argument("--scenario", nargs="+", choices=list(scenarios()), help="only these scenarios")
    args = parser.parse_args(argv)
    configure_logging("warning")
    actual = record(args.scenario)
    if args.write:
        REFERENCE.parent.mkdir(parents=True, exist_ok=True)
        REFERENCE.write_text(json.dumps(actual, indent=1, sort_keys=True) + "\n")
        placed = {name: sum(1 for pod in pods.values() if pod["node"]) for name, pods in actual.items()}
        print(f"wrote {REFERENCE}: placed per scenario {placed}")
        return 0
    expected = json.loads(REFERENCE.read_text())
    if args.scenario:
        expected = {name: expected[name] for name in args.scenario}
    found = differences(expected, actual)
    print("\n".join(found) if found else "decisions identical to the reference")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
