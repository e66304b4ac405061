"""CEL device selectors: NVIDIA's DeviceClasses and demo selectors, Kubernetes' DRA semantics.

Selectors are copied from NVIDIA's k8s-dra-driver-gpu (deployments/helm/.../deviceclass-*.yaml
and demo/specs); devices are in the shape its kubelet plugins publish (cmd/gpu-kubelet-plugin
deviceinfo.go, mig.go; cmd/compute-domain-kubelet-plugin deviceinfo.go). Expected results are
read off by hand from the expression and the device.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from numasched.api.dra import AttributeValue, DraDevice, SemVer
from numasched.plugins.dra.cel import CelEvaluator, parse_semver

GPU_CLASS = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
MIG_CLASS = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"
VFIO_CLASS = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'vfio'"
CD_DAEMON_CLASS = (
    "device.driver == 'compute-domain.nvidia.com' && device.attributes['compute-domain.nvidia.com'].type == 'daemon'"
)
CD_CHANNEL_CLASS = (
    "device.driver == 'compute-domain.nvidia.com' && "
    "device.attributes['compute-domain.nvidia.com'].type == 'channel' && "
    "device.attributes['compute-domain.nvidia.com'].id == 0"
)
MIG_1G12 = (
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig' && "
    "device.attributes['gpu.nvidia.com'].profile == '1g.12gb'"
)
# demo/specs/quickstart/v1/gpu-test6.yaml: written for drivers that published `index`.
A100_EVEN = (
    "device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('^.*a100.*$') && "
    "(device.attributes['gpu.nvidia.com'].index == 0 || device.attributes['gpu.nvidia.com'].index == 2 || "
    "device.attributes['gpu.nvidia.com'].index == 4 || device.attributes['gpu.nvidia.com'].index == 6)"
)


def version(text: str) -> SemVer:
    parsed = parse_semver(text)
    assert parsed is not None
    return parsed


def gpu(name: str, product: str, **extra: AttributeValue) -> DraDevice:
    attributes: dict[str, AttributeValue] = {
        "gpu.nvidia.com/type": "gpu",
        "gpu.nvidia.com/uuid": f"GPU-{name}",
        "gpu.nvidia.com/productName": product,
        "gpu.nvidia.com/brand": "Nvidia",
        "gpu.nvidia.com/architecture": "Hopper" if "H100" in product else "Ampere",
        "gpu.nvidia.com/cudaComputeCapability": version("9.0.0" if "H100" in product else "8.0.0"),
        "gpu.nvidia.com/driverVersion": version("560.35.3"),
        "gpu.nvidia.com/cudaDriverVersion": version("12.6.0"),
        "resource.kubernetes.io/pcieRoot": "pci0000:10",
    }
    attributes.update({f"gpu.nvidia.com/{key}": value for key, value in extra.items()})
    return DraDevice("gpu.nvidia.com", "node-a", name, attributes, {"gpu.nvidia.com/memory": Fraction(80 * 2**30)})


H100 = gpu("gpu-0", "NVIDIA H100 80GB HBM3")
A100_INDEXED = gpu("gpu-2", "NVIDIA A100-SXM4-80GB", index=2)
A100_ODD = gpu("gpu-3", "NVIDIA A100-SXM4-80GB", index=3)
A100_NO_INDEX = gpu("gpu-4", "NVIDIA A100-SXM4-80GB")
MIG = DraDevice(
    "gpu.nvidia.com",
    "node-a",
    "gpu-0-mig-1g12gb-0",
    {
        "gpu.nvidia.com/type": "mig",
        "gpu.nvidia.com/parentUUID": "GPU-gpu-0",
        "gpu.nvidia.com/profile": "1g.12gb",
        "gpu.nvidia.com/productName": "NVIDIA H100 80GB HBM3",
    },
    {"gpu.nvidia.com/memory": Fraction(12 * 2**30)},
)
VFIO = DraDevice("gpu.nvidia.com", "node-a", "gpu-vfio-1", {"gpu.nvidia.com/type": "vfio", "gpu.nvidia.com/numa": 1})
DAEMON = DraDevice("compute-domain.nvidia.com", "node-a", "daemon-0", {"compute-domain.nvidia.com/type": "daemon"})
CHANNEL_0 = DraDevice(
    "compute-domain.nvidia.com",
    "node-a",
    "channel-0",
    {"compute-domain.nvidia.com/type": "channel", "compute-domain.nvidia.com/id": 0},
)
CHANNEL_1 = DraDevice(
    "compute-domain.nvidia.com",
    "node-a",
    "channel-1",
    {"compute-domain.nvidia.com/type": "channel", "compute-domain.nvidia.com/id": 1},
)
NIC = DraDevice("dra.net", "node-a", "nic-0", {"dra.net/rdma": True, "dra.net/ifName": "ib0"})

CLASS_TABLE = [
    # (expression, device, matches, errors)
    (GPU_CLASS, H100, True, False),
    (GPU_CLASS, MIG, False, False),
    (GPU_CLASS, VFIO, False, False),
    (GPU_CLASS, DAEMON, False, False),  # `&&` short-circuits on the driver: no lookup error
    (GPU_CLASS, NIC, False, False),
    (MIG_CLASS, MIG, True, False),
    (MIG_CLASS, H100, False, False),
    (VFIO_CLASS, VFIO, True, False),
    (VFIO_CLASS, H100, False, False),
    (CD_DAEMON_CLASS, DAEMON, True, False),
    (CD_DAEMON_CLASS, CHANNEL_0, False, False),
    (CD_DAEMON_CLASS, H100, False, False),
    (CD_CHANNEL_CLASS, CHANNEL_0, True, False),
    (CD_CHANNEL_CLASS, CHANNEL_1, False, False),
    (CD_CHANNEL_CLASS, DAEMON, False, False),  # false && <no `id`>: false, CEL's && absorbs the error
    (MIG_1G12, MIG, True, False),
    (MIG_1G12, H100, False, False),
    (A100_EVEN, A100_INDEXED, True, False),
    (A100_EVEN, A100_ODD, False, False),
    (A100_EVEN, H100, False, False),  # product does not match: `&&` stops before `index`
    (A100_EVEN, A100_NO_INDEX, False, True),  # today's driver has no `index`: an error, no match
]


@pytest.mark.parametrize(("expression", "device", "matches", "errors"), CLASS_TABLE)
def test_nvidia_selectors(expression: str, device: DraDevice, matches: bool, errors: bool) -> None:
    result = CelEvaluator().matches(expression, device)
    assert result.matched is matches
    assert (result.error is not None) is errors, result.error
    if errors:
        assert device.describe() in (result.error or "")


def test_and_or_absorb_errors_in_either_order() -> None:
    """CEL's && and || are commutative: `<error> && false` is false, `<error> || true` is true."""
    evaluator = CelEvaluator()
    missing = "device.attributes['compute-domain.nvidia.com'].id == 0"
    assert evaluator.matches(
        f"{missing} && device.attributes['compute-domain.nvidia.com'].type == 'channel'", DAEMON
    ) == (evaluator.matches("false", DAEMON))
    assert evaluator.matches(f"{missing} || true", DAEMON).matched is True
    errored = evaluator.matches(f"{missing} || false", DAEMON)
    assert errored.matched is False and errored.error is not None


SEMANTICS_TABLE = [
    # Short names belong to the driver's domain; other domains are empty maps.
    ("device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'", True, False),
    ("'productName' in device.attributes['gpu.nvidia.com']", True, False),
    ("'productName' in device.attributes['other.example.com']", False, False),
    ("size(device.attributes['other.example.com']) == 0", True, False),
    ("device.attributes['other.example.com'].productName == 'x'", False, True),
    ("device.attributes['resource.kubernetes.io'].pcieRoot == 'pci0000:10'", True, False),
    # Versions and quantities.
    ("device.attributes['gpu.nvidia.com'].cudaComputeCapability.isGreaterThan(semver('8.0.0'))", True, False),
    ("device.attributes['gpu.nvidia.com'].driverVersion.compareTo(semver('560.35.3')) == 0", True, False),
    ("device.attributes['gpu.nvidia.com'].driverVersion.isLessThan(semver('560.35.3-rc.1'))", False, False),
    ("semver('1.0.0-rc.1').isLessThan(semver('1.0.0'))", True, False),
    ("semver('1.0.0-alpha.10').isGreaterThan(semver('1.0.0-alpha.9'))", True, False),
    ("device.attributes['gpu.nvidia.com'].driverVersion.major() == 560", True, False),
    ("isSemver('1.2') || isSemver('v1.2.3')", False, False),
    ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('80Gi')) == 0", True, False),
    ("device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('40Gi'))", True, False),
    ("device.capacity['gpu.nvidia.com'].memory == quantity('85899345920')", True, False),
    ("device.capacity['gpu.nvidia.com'].memory.asInteger() == 85899345920", True, False),
    ("quantity('1500m').isInteger()", False, False),
    ("device.capacity['gpu.nvidia.com'].memory.compareTo(semver('1.0.0')) == 0", False, True),
    # Type errors and non-boolean results do not match and are reported.
    ("device.attributes['gpu.nvidia.com'].productName", False, True),
    ("device.attributes['gpu.nvidia.com'].productName > 3", False, True),
    ("device.driver.startsWith('gpu.') && device.allowMultipleAllocations == false", True, False),
    ("device.attributes['gpu.nvidia.com'].brand.lowerAscii().contains('nvid')", True, False),
    ("device.attributes['gpu.nvidia.com'].brand.lowerAscii() == 'nvidia'", True, False),
    ("device.attributes['gpu.nvidia.com'].productName.split(' ')[1] == 'H100'", True, False),
    ("cel.bind(d, device.attributes['gpu.nvidia.com'], d.type == 'gpu')", False, True),
    ("device.attributes['gpu.nvidia.com'].type ==", False, True),
]


@pytest.mark.parametrize(("expression", "matches", "errors"), SEMANTICS_TABLE)
def test_kubernetes_semantics(expression: str, matches: bool, errors: bool) -> None:
    result = CelEvaluator().matches(expression, H100)
    assert result.matched is matches, result.error
    assert (result.error is not None) is errors, result.error


def test_list_attributes_include() -> None:
    device = DraDevice("d.example.com", "p", "x", {"d.example.com/links": (1, 3, 5)})
    evaluator = CelEvaluator()
    assert evaluator.matches("device.attributes['d.example.com'].links.includes(3)", device).matched
    assert not evaluator.matches("device.attributes['d.example.com'].links.includes(2)", device).matched


def test_compile_once_and_cached_verdicts() -> None:
    evaluator = CelEvaluator(max_programs=4)
    for number in range(10):
        assert evaluator.compile(f"device.driver == 'd{number}'") is None
    assert evaluator.compile("device.driver ==") is not None
    first = evaluator.selects(GPU_CLASS, H100)
    assert evaluator.selects(GPU_CLASS, H100) is first
    changed = gpu("gpu-0", "NVIDIA H100 80GB HBM3", type="mig")
    assert evaluator.selects(GPU_CLASS, changed).matched is False  # a new object is judged anew
