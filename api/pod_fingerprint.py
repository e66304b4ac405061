"""The pods fingerprint of k8stopologyawareschedwg/podfingerprint (version v001), as the
NodeResourceTopology producers (resource-topology-exporter, NFD topology-updater) publish it in the
nodeTopologyPodsFingerprint attribute: which set of pods the published availability reflects.

The fingerprint of a set of pods (namespace, name) is "pfp0" + "v001" + hex(XXH64 over the sorted
per-pod hashes, each 8 bytes little-endian, seed 0), where a pod's hash is XXH64(name, seed =
XXH64(namespace, seed 0)), and the final digest is written big-endian (Go's hash.Hash64.Sum).

When the fingerprint of the pods we see bound to a node equals the published one, every pod on the
node was accounted for in the published `available` amounts; otherwise (pods started or ended
since) the holdings of pods whose ids we do not know cannot be ruled out.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

PREFIX = "pfp0"
VERSION = "v001"
# Attributes of a NodeResourceTopology that carry the fingerprint and how it was computed.
ATTRIBUTE = "nodeTopologyPodsFingerprint"
ATTRIBUTE_METHOD = "nodeTopologyPodsFingerprintMethod"
METHOD_WITH_EXCLUSIVE_RESOURCES = "with-exclusive-resources"

_MASK = (1 << 64) - 1
_P1 = 11400714785074694791
_P2 = 14029467366897019727
_P3 = 1609587929392839161
_P4 = 9650029242287828579
_P5 = 2870177450012600261


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (64 - bits))) & _MASK


def _round(accumulator: int, lane: int) -> int:
    accumulator = (accumulator + lane * _P2) & _MASK
    return (_rotl(accumulator, 31) * _P1) & _MASK


def _merge_round(accumulator: int, value: int) -> int:
    accumulator ^= _round(0, value)
    return (accumulator * _P1 + _P4) & _MASK


def xxh64(data: bytes, seed: int = 0) -> int:
    """XXH64 of `data` (the reference algorithm; the inputs here are a few hundred bytes)."""
    length = len(data)
    offset = 0
    if length >= 32:
        v1 = (seed + _P1 + _P2) & _MASK
        v2 = (seed + _P2) & _MASK
        v3 = seed & _MASK
        v4 = (seed - _P1) & _MASK
        while offset + 32 <= length:
            a, b, c, d = struct.unpack_from("<4Q", data, offset)
            v1, v2, v3, v4 = _round(v1, a), _round(v2, b), _round(v3, c), _round(v4, d)
            offset += 32
        digest = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _MASK
        for value in (v1, v2, v3, v4):
            digest = _merge_round(digest, value)
    else:
        digest = (seed + _P5) & _MASK
    digest = (digest + length) & _MASK
    while offset + 8 <= length:
        (lane,) = struct.unpack_from("<Q", data, offset)
        digest ^= _round(0, lane)
        digest = (_rotl(digest, 27) * _P1 + _P4) & _MASK
        offset += 8
    if offset + 4 <= length:
        (word,) = struct.unpack_from("<I", data, offset)
        digest ^= (word * _P1) & _MASK
        digest = (_rotl(digest, 23) * _P2 + _P3) & _MASK
        offset += 4
    while offset < length:
        digest ^= (data[offset] * _P5) & _MASK
        digest = (_rotl(digest, 11) * _P1) & _MASK
        offset += 1
    digest ^= digest >> 33
    digest = (digest * _P2) & _MASK
    digest ^= digest >> 29
    digest = (digest * _P3) & _MASK
    digest ^= digest >> 32
    return digest


def pod_hash(namespace: str, name: str) -> int:
    return xxh64(name.encode(), xxh64(namespace.encode()))


def pods_fingerprint(pods: Iterable[tuple[str, str]]) -> str:
    """The fingerprint of a set of (namespace, name) pairs, in any order."""
    hashes = sorted(pod_hash(namespace, name) for namespace, name in pods)
    digest = xxh64(b"".join(struct.pack("<Q", value) for value in hashes))
    return PREFIX + VERSION + digest.to_bytes(8, "big").hex()
