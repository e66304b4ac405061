"""Shared test helpers: the machine fixtures and the anyio backend."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
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


def load_hack_module(name: str) -> ModuleType:
    """A script from hack/ (not a package) imported as a module, for tests of its pure parts."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent.parent / "hack" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
