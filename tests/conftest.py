"""Shared test helpers: the machine fixtures and the anyio backend."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

FIXTURES = Path(__file__).parent / "fixtures"
MACHINES = FIXTURES / "machines"


def load_machine(name: str) -> Mapping[str, Any]:
    loaded: Mapping[str, Any] = yaml.safe_load((MACHINES / f"{name}.yaml").read_text())
    return loaded


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
