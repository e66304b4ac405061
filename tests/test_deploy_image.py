"""The container image is reproducible: base image by digest, every package from the lock, hashed.

Checked against pyproject.toml (the lock must satisfy every declared requirement, build
requirements included) and against the manifests in deploy/ (the ports the image exposes).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
LOCK = ROOT / "requirements.lock"
KUBE_SCHEDULER_SECURE_PORT = 10259

_PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>\S+)")


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text(encoding="utf-8"))
    found = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            instruction, _, arguments = stripped.partition(" ")
            found.append((instruction.upper(), arguments.strip()))
    return found


def locked() -> dict[str, tuple[Version, list[str]]]:
    """Package → (pinned version, hashes) from requirements.lock."""
    entries: dict[str, tuple[Version, list[str]]] = {}
    text = re.sub(r"\\\n", " ", LOCK.read_text(encoding="utf-8"))
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = _PIN.match(line)
        assert match, f"requirements.lock: not an exact pin: {line!r}"
        hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})\b", line)
        entries[canonicalize_name(match["name"])] = (Version(match["version"]), hashes)
    return entries


def test_every_base_image_is_pinned_by_digest() -> None:
    arguments = {}
    stages = []
    for instruction, rest in dockerfile_instructions():
        if instruction == "ARG" and "=" in rest:
            name, _, value = rest.partition("=")
            arguments[name] = value
        if instruction == "FROM":
            image = re.sub(r"\$\{(\w+)\}", lambda m: arguments[m[1]], rest.split()[0])
            stages.append(image)
    assert len(stages) >= 2
    for image in stages:
        assert re.fullmatch(r"[\w./-]+:[\w.-]+@sha256:[0-9a-f]{64}", image), f"not pinned by digest: {image}"


def test_every_package_is_installed_from_the_lock_with_hashes() -> None:
    installs = [rest for instruction, rest in dockerfile_instructions() if instruction == "RUN" and "pip" in rest]
    commands = [part.strip() for rest in installs for part in rest.split("&&") if " install " in part]
    assert commands, "no pip install in the Dockerfile"
    for command in commands:
        from_lock = "--require-hashes" in command and "-r requirements.lock" in command
        local_only = "--no-index" in command and "--no-deps" in command
        assert from_lock or local_only, f"installs packages without hashes: {command}"
    for name, (version, hashes) in locked().items():
        assert hashes, f"{name}=={version} has no hash"


def test_the_lock_satisfies_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    entries = locked()
    wanted = [*project["project"]["dependencies"], *project["build-system"]["requires"]]
    for text in wanted:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in entries, f"{requirement} is not in requirements.lock (run make lock)"
        version = entries[name][0]
        assert requirement.specifier.contains(version, prereleases=True), f"{name}=={version} violates {requirement}"
    # Nothing of the dev tools leaks into the image.
    for text in project["project"]["optional-dependencies"]["dev"]:
        name = canonicalize_name(Requirement(text).name)
        runtime = {canonicalize_name(Requirement(t).name) for t in wanted}
        assert name in runtime or name not in entries, f"dev tool {name} is in the image's lock"


def test_the_lock_says_how_it_is_made() -> None:
    assert "make lock" in LOCK.read_text(encoding="utf-8").split("\n\n", 1)[0]
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^lock:", makefile, re.MULTILINE)
    assert "--generate-hashes" in makefile and "requirements.lock" in makefile


def test_exposed_ports_are_the_deployed_ones_and_not_kube_scheduler_s() -> None:
    exposed = {
        int(port.split("/")[0])
        for instruction, rest in dockerfile_instructions()
        if instruction == "EXPOSE"
        for port in rest.split()
    }
    deployed = set()
    for path in (ROOT / "deploy").rglob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc and doc.get("kind") in ("Deployment", "DaemonSet"):
                for container in doc["spec"]["template"]["spec"]["containers"]:
                    deployed |= {port["containerPort"] for port in container.get("ports", [])}
    assert deployed and deployed == exposed
    assert KUBE_SCHEDULER_SECURE_PORT not in deployed
