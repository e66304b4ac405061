"""Placements stay where the reference puts them (hack/golden_decisions.py).

tests/fixtures/golden/decisions.json was recorded before the engine's speed work: the bundled
example and generated clusters (every node scanned at 30 nodes, a sampled scan at 150), with and
without numa-aware. Speed work must not move a pod or change a decision; a change that means to
rewrites the reference with `hack/golden_decisions.py --write` and says why.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HACK = Path(__file__).resolve().parent.parent / "hack"


@pytest.fixture(scope="module")
def golden() -> Iterator[Any]:
    sys.path.insert(0, str(HACK))
    try:
        yield importlib.import_module("golden_decisions")
    finally:
        sys.path.remove(str(HACK))
        for name in ("golden_decisions", "bench_run", "bench_workload", "bench_quality"):
            sys.modules.pop(name, None)


def _scenario_names() -> list[str]:
    reference = json.loads((Path(__file__).resolve().parent / "fixtures" / "golden" / "decisions.json").read_text())
    return sorted(reference)


@pytest.mark.parametrize("scenario", _scenario_names())
def test_decisions_match_the_reference(golden: Any, scenario: str) -> None:
    expected = json.loads(golden.REFERENCE.read_text())[scenario]
    actual = golden.record([scenario])[scenario]
    assert sum(1 for pod in expected.values() if pod["node"]) > 0
    assert golden.differences({scenario: expected}, {scenario: actual}) == []


def test_a_moved_pod_is_reported(golden: Any) -> None:
    expected = {"s": {"ns/a": {"node": "n1", "decision": {}}, "ns/b": {"node": "", "decision": {}}}}
    actual = {"s": {"ns/a": {"node": "n2", "decision": {}}, "ns/b": {"node": "", "decision": {}}}}
    assert golden.differences(expected, actual) == [
        "s: ns/a: expected {'node': 'n1', 'decision': {}}, got {'node': 'n2', 'decision': {}}"
    ]
