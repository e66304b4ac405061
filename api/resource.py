"""Resource vectors: milli-CPU, memory bytes and named scalar resources (GPUs, NICs, hugepages).

Scalars are kept in thousandths of their unit as Volcano does ("nvidia.com/gpu: 2" is 2000), so one
tolerance serves every resource.

Mutable on purpose: node accounting adds and subtracts on every allocation in the hot path.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from numasched.api.quantity import QuantityError, parse_integer, parse_milli

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
# The resource name NVIDIA's device plugin advertises GPUs under (Volcano's gpuDetail means it).
GPU_RESOURCE = "nvidia.com/gpu"
# Resources the scheduler accounts but never treats as scalar extended resources.
_IGNORED_SCALARS = frozenset({"ephemeral-storage", PODS})
# Comparisons tolerate rounding left by float arithmetic on big memory sizes.
_MILLI_TOLERANCE = 0.01
_MEMORY_TOLERANCE = 1.0


def is_memory_resource(name: str) -> bool:
    """memory and huge pages: bytes per NUMA node, what the memory manager pins (not devices)."""
    return name == MEMORY or name.startswith("hugepages-")


def _non_negative(value: int, raw: object) -> int:
    if value < 0:
        raise QuantityError(f"invalid quantity {raw!r}: must not be negative")
    return value


@attrs.define(slots=True)
class Resource:
    milli_cpu: float = 0.0
    memory: float = 0.0
    scalars: dict[str, float] = attrs.field(factory=dict)

    @classmethod
    def from_list(cls, resource_list: Mapping[str, str | int | float | None] | None) -> Resource:
        """Build from a Kubernetes ResourceList ({"cpu": "500m", "nvidia.com/gpu": 2}).

        Raises QuantityError naming the resource when a value does not parse or is negative (the
        API server refuses negative requests and capacities; read as zero, "-2" would bind a pod
        that asked for nonsense). A JSON null is a zero quantity, as Go's Quantity reads it.
        """
        result = cls()
        for name, raw in (resource_list or {}).items():
            if raw is None:
                continue
            try:
                if name == CPU:
                    result.milli_cpu = float(_non_negative(parse_milli(raw), raw))
                elif name == MEMORY:
                    result.memory = float(_non_negative(parse_integer(raw), raw))
                elif name in _IGNORED_SCALARS:
                    # Not accounted, but still a quantity: a garbled one means a garbled object.
                    _non_negative(parse_integer(raw), raw)
                else:
                    result.scalars[name] = float(_non_negative(parse_milli(raw), raw))
            except QuantityError as error:
                raise QuantityError(f"resource {name}: {error}") from None
        return result

    def clone(self) -> Resource:
        return Resource(self.milli_cpu, self.memory, dict(self.scalars))

    def add(self, other: Resource) -> Resource:
        self.milli_cpu += other.milli_cpu
        self.memory += other.memory
        for name, value in other.scalars.items():
            self.scalars[name] = self.scalars.get(name, 0.0) + value
        return self

    def sub(self, other: Resource) -> Resource:
        self.milli_cpu -= other.milli_cpu
        self.memory -= other.memory
        for name, value in other.scalars.items():
            self.scalars[name] = self.scalars.get(name, 0.0) - value
        return self

    def set_max(self, other: Resource) -> Resource:
        """Element-wise maximum, as used for init containers."""
        self.milli_cpu = max(self.milli_cpu, other.milli_cpu)
        self.memory = max(self.memory, other.memory)
        for name, value in other.scalars.items():
            self.scalars[name] = max(self.scalars.get(name, 0.0), value)
        return self

    def get(self, name: str) -> float:
        if name == CPU:
            return self.milli_cpu
        if name == MEMORY:
            return self.memory
        return self.scalars.get(name, 0.0)

    def is_empty(self) -> bool:
        return (
            self.milli_cpu < _MILLI_TOLERANCE
            and self.memory < _MEMORY_TOLERANCE
            and all(value < _MILLI_TOLERANCE for value in self.scalars.values())
        )

    def fits_in(self, available: Resource) -> bool:
        """True when every dimension of self is within available (with tolerance)."""
        return not self.insufficient(available)

    def insufficient(self, available: Resource) -> list[str]:
        """Names of resources self asks for beyond available: ["cpu", "nvidia.com/gpu"]."""
        missing: list[str] = []
        if self.milli_cpu > available.milli_cpu + _MILLI_TOLERANCE:
            missing.append(CPU)
        if self.memory > available.memory + _MEMORY_TOLERANCE:
            missing.append(MEMORY)
        for name, value in self.scalars.items():
            if value > _MILLI_TOLERANCE and value > available.scalars.get(name, 0.0) + _MILLI_TOLERANCE:
                missing.append(name)
        return missing

    def insufficient_after(self, available: Resource, plus: Resource, minus: Resource) -> list[str]:
        """insufficient(available + plus - minus), without building the sum: the scheduler asks
        this of every node for every task (a node's future idle is idle + releasing - pipelined)."""
        missing: list[str] = []
        if self.milli_cpu > available.milli_cpu + plus.milli_cpu - minus.milli_cpu + _MILLI_TOLERANCE:
            missing.append(CPU)
        if self.memory > available.memory + plus.memory - minus.memory + _MEMORY_TOLERANCE:
            missing.append(MEMORY)
        if self.scalars:
            for name, value in self.scalars.items():
                if value <= _MILLI_TOLERANCE:
                    continue
                free = available.scalars.get(name, 0.0) + plus.scalars.get(name, 0.0) - minus.scalars.get(name, 0.0)
                if value > free + _MILLI_TOLERANCE:
                    missing.append(name)
        return missing

    def describe(self) -> str:
        parts = [f"cpu={self.milli_cpu:g}m", f"memory={self.memory:g}"]
        parts.extend(f"{name}={value:g}" for name, value in sorted(self.scalars.items()))
        return ", ".join(parts)
