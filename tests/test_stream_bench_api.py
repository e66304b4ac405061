"""hack/bench_api.py runs end to end on a tiny cluster and reports what it measured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "hack" / "bench_api.py"


def bench(*arguments: str) -> dict[str, Any]:
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), *arguments, "--nodes", "4", "--settle", "0.2", "--timeout", "60"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-4000:]
    summary: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    return summary


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
