"""hack/bench_api.py runs end to end on a tiny cluster and reports what it measured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "hack" / "bench_api.py"


def bench_lines(*arguments: str) -> list[dict[str, Any]]:
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), *arguments, "--nodes", "4", "--settle", "0.2", "--timeout", "60"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-4000:]
    return [json.loads(line) for line in completed.stdout.strip().splitlines() if line.startswith("{")]


def bench(*arguments: str) -> dict[str, Any]:
    return bench_lines(*arguments)[-1]


@pytest.mark.parametrize(
    ("arguments", "pods"),
    [(("--scenario", "burst", "--pods", "12"), 12), (("--scenario", "stream", "--rate", "20", "--seconds", "1"), 20)],
)
def test_the_api_benchmark_binds_every_pod_and_reports_its_times(arguments: tuple[str, ...], pods: int) -> None:
    summary = bench(*arguments)
    assert summary["pods"] == summary["bound"] == summary["binds_received"] == pods
    assert summary["cycles"] >= 1 and summary["scheduler_peak_rss_mib"] > 0
    if summary["scenario"] == "burst":
        assert 0 < summary["first_bind_s"] <= summary["all_bound_s"] < 60
    else:
        assert 0 < summary["p50_ms"] <= summary["p99_ms"] <= summary["max_ms"] < 60_000


def test_both_scenarios_with_unfit_pods_bind_every_other_pod_and_print_their_commands() -> None:
    burst, stream = bench_lines("--scenario", "both", "--pods", "6", "--rate", "10", "--seconds", "1", "--unfit", "2")
    assert (burst["scenario"], stream["scenario"]) == ("burst", "stream")
    # The unfit pods are never bound and not counted among the pods timed.
    assert burst["pods"] == burst["bound"] == burst["binds_received"] == 6
    assert stream["pods"] == stream["bound"] == stream["binds_received"] == 10
    assert burst["unfit"] == stream["unfit"] == 2
    assert burst["command"].startswith(".venv/bin/python hack/bench_api.py --scenario burst --nodes 4 --pods 6 ")
    assert " --unfit 2 " in burst["command"] and " --pods " not in stream["command"]
    assert stream["command"].startswith(".venv/bin/python hack/bench_api.py --scenario stream --nodes 4 --rate 10 ")
