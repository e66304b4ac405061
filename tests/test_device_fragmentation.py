"""hack/fragmentation.py on a fixed stream: our device choice leaves at least as much as the baselines."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).parent.parent / "hack" / "fragmentation.py"


@pytest.fixture(scope="module")
def fragmentation() -> ModuleType:
    spec = importlib.util.spec_from_file_location("numasched_hack_fragmentation", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_ours_leaves_at_least_as_much_as_the_baselines(fragmentation: ModuleType) -> None:
    results = fragmentation.run_benchmark(seeds=[1, 2], nodes=8, requests=400)
    ours = results["ours"]
    for name in ("first-fit", "numa-only"):
        baseline = results[name]
        assert ours.eight_gpu_left >= baseline.eight_gpu_left
        assert ours.mean_eight_gpu_left >= baseline.mean_eight_gpu_left
        assert ours.mean_nv2_pairs_left >= baseline.mean_nv2_pairs_left
        assert ours.pair_nvlinks > baseline.pair_nvlinks
        assert ours.quad_nvlinks >= baseline.quad_nvlinks
    assert ours.mean_nv2_pairs_left > results["first-fit"].mean_nv2_pairs_left
    # Every 2-GPU pod of ours that found a free NV2 pair on its NUMA node got one: 2 NVLinks.
    assert ours.pair_nvlinks > 1.6


def test_nv2_pair_placements_count_disjoint_pairs_on_one_numa_node(fragmentation: ModuleType) -> None:
    topology = fragmentation.machine_topology()
    everything = [str(index) for index in range(8)]
    assert fragmentation.nv2_pair_placements(topology, everything) == 4
    # NUMA 0's NV2 edges form the path 0-3-2-1; without 3 only 1-2 remains.
    assert fragmentation.nv2_pair_placements(topology, ["0", "1", "2"]) == 1
    assert fragmentation.nv2_pair_placements(topology, ["0", "1"]) == 0
    assert fragmentation.nv2_pair_placements(topology, ["0", "4"]) == 0


def test_policies_hand_out_the_requested_count(fragmentation: ModuleType) -> None:
    topology = fragmentation.machine_topology()
    free = ("1", "2", "3", "5", "6")
    for policy in fragmentation.POLICIES.values():
        for count in (1, 2, 4):
            chosen = policy(topology, free, count)
            assert len(set(chosen)) == count and set(chosen) <= set(free)


def test_the_table_names_every_policy(fragmentation: ModuleType) -> None:
    results = fragmentation.run_benchmark(seeds=[3], nodes=2, requests=40)
    table = fragmentation.markdown_table(results)
    assert table.count("\n") == 1 + len(fragmentation.POLICIES)
    for name in fragmentation.POLICIES:
        assert f"| {name} |" in table
