"""The generated PodResources stubs and pyproject's bounds agree: the stubs refuse to import on a
grpcio older than the one that generated them, or a protobuf runtime of another major version or
older than the generator (ValidateProtobufRuntimeVersion), so those are the lowest versions a user
may have."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
STUBS = ROOT / "exporter" / "podresources" / "v1"


def declared() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = (Requirement(text) for text in project["dependencies"])
    return {requirement.name: requirement for requirement in requirements}


def test_grpcio_lower_bound_is_the_generator_version() -> None:
    generated = re.search(r"GRPC_GENERATED_VERSION = '([0-9.]+)'", (STUBS / "api_pb2_grpc.py").read_text())
    assert generated is not None
    specifier = declared()["grpcio"].specifier
    assert Version(generated.group(1)) in specifier
    older = Version(generated.group(1)).release
    assert not any(Version(f"{older[0]}.{older[1]}.{patch}") in specifier for patch in range(older[2]))


def test_protobuf_bounds_are_the_generator_major_version_from_its_release() -> None:
    text = (STUBS / "api_pb2.py").read_text()
    found = re.search(r"Domain\.PUBLIC,\s*(\d+),\s*(\d+),\s*(\d+),", text)
    assert found is not None
    major, minor, patch = (int(part) for part in found.groups())
    specifier = declared()["protobuf"].specifier
    assert Version(f"{major}.{minor}.{patch}") in specifier
    assert Version(f"{major}.{minor}.{patch - 1}") not in specifier if patch else True
    assert Version(f"{major - 1}.99.0") not in specifier
    assert Version(f"{major + 1}.0.0") not in specifier
