"""hack/bench.py's rounds (--repeat): the plan, the order runs go in, and the rate against the
configuration without numa-aware, judged on the median of the rounds."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HACK = Path(__file__).resolve().parent.parent / "hack"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.syspath_prepend(str(HACK))
    yield importlib.import_module("bench")
    for name in ("bench", "bench_workload", "bench_quality", "bench_run"):
        sys.modules.pop(name, None)


def result(config: str, round_: int, pods_per_s: float, *, nodes: int = 1000, finished: bool = True) -> dict[str, Any]:
    return {
        "spec": {"nodes": nodes, "pods": nodes * 10, "config": config, "mix": "balanced"},
        "round": round_,
        "finished": finished,
        "pods_per_s": pods_per_s,
        "pods_per_cpu_s": pods_per_s / 2,
    }


def test_repeat_plans_rounds_of_the_scale_runs_and_judges_quality_once(bench: Any) -> None:
    args = bench.parse_args(
        [
            "--nodes",
            "20",
            "50",
            "--repeat",
            "3",
            "--configs",
            "topology-unaware",
            "numasched",
            "--quality-mixes",
            "gpu-heavy",
        ]
    )
    runs, _ = bench.plan(args)
    labels = sorted((run.round, run.spec.nodes, run.spec.mix, run.spec.config, run.quality) for run in runs)
    expected = sorted(
        [
            (round_, nodes, "balanced", config, round_ == 1)
            for round_ in (1, 2, 3)
            for nodes in (20, 50)
            for config in ("topology-unaware", "numasched")
        ]
        + [(1, 20, "gpu-heavy", config, True) for config in ("topology-unaware", "numasched")]
    )
    assert labels == expected


def test_runs_go_round_by_round_and_longest_first_within_a_round(bench: Any) -> None:
    args = bench.parse_args(
        ["--nodes", "20", "50", "--repeat", "2", "--configs", "topology-unaware", "numasched", "--quality-mixes"]
    )
    runs, _ = bench.plan(args)
    order = [(runs[index].round, runs[index].spec.nodes, runs[index].spec.config) for index in bench.run_order(runs)]
    assert order == [
        (1, 50, "numasched"),
        (1, 20, "numasched"),
        (1, 50, "topology-unaware"),
        (1, 20, "topology-unaware"),
        (2, 50, "numasched"),
        (2, 20, "numasched"),
        (2, 50, "topology-unaware"),
        (2, 20, "topology-unaware"),
    ]


def test_rate_is_taken_within_each_round_and_judged_on_the_median(bench: Any) -> None:
    results = [
        result("topology-unaware", 1, 2000.0),
        result("numasched", 1, 1300.0),  # 0.65
        result("topology-unaware", 2, 1800.0),
        result("numasched", 2, 1350.0),  # 0.75
        result("topology-unaware", 3, 2000.0),
        result("numasched", 3, 1440.0),  # 0.72
    ]
    ratios = bench.rate_ratios(results, "numasched", 1000, "pods_per_s")
    assert ratios == [(1, pytest.approx(0.65)), (2, pytest.approx(0.75)), (3, pytest.approx(0.72))]
    lines = bench.rate_target_lines(results, 1000)
    assert "met (median 0.720 over 3 rounds)" in lines[0]
    # One slow round of the baseline does not carry the verdict, nor does one fast one.
    results[4] = result("topology-unaware", 3, 2300.0)  # round 3: 0.626
    assert "NOT met (median 0.650 over 3 rounds)" in bench.rate_target_lines(results, 1000)[0]


def test_rounds_where_a_run_did_not_finish_are_left_out(bench: Any) -> None:
    results = [
        result("topology-unaware", 1, 2000.0),
        result("numasched", 1, 1500.0, finished=False),
        result("topology-unaware", 2, 2000.0),
        result("numasched", 2, 1500.0),
        result("numasched", 3, 1500.0),  # no baseline in round 3
        result("topology-unaware", 2, 100.0, nodes=50),  # another size
    ]
    assert bench.rate_ratios(results, "numasched", 1000, "pods_per_s") == [(2, pytest.approx(0.75))]
    assert bench.rate_target_lines([], 1000)[0].endswith("not measured (both configurations must finish a round)")


def test_median_run(bench: Any) -> None:
    runs = [
        result("numasched", 1, 1500.0),
        result("numasched", 2, 1400.0),
        result("numasched", 3, 1600.0, finished=False),
    ]
    # The unfinished run ranks lowest, so the median of the three is the 1,400 pods/s one.
    assert bench.median_run(runs)["round"] == 2
