"""The kubelet Topology Manager's hint merge, exactly: policies none, best-effort, restricted and
single-numa-node, the prefer-closest-numa-nodes option and the max-allowable-numa-nodes limit.

A pod is only worth placing where the kubelet will admit it, so this module reproduces the
kubelet's decision bit for bit (pkg/kubelet/cm/topologymanager, policy*.go and numa_info.go):

* every provider contributes one hint list per resource; a provider with nothing to say, or a
  resource mapped to None, is "no preference" ([any, preferred]); a resource mapped to [] cannot be
  satisfied anywhere ([any, not preferred]);
* every combination (one hint per resource) is merged by AND-ing its affinities, starting from all
  NUMA nodes (a hint without affinity stands for all of them); the merged hint is preferred only
  when every hint in it is preferred and all hints that name an affinity name the same one;
* combinations whose AND is empty are skipped; the best of the rest is chosen by the kubelet's
  fold (preferred beats non-preferred; among preferred the narrowest, or with
  prefer-closest-numa-nodes the one with the smallest average NUMA distance among equally wide
  masks; among non-preferred the one whose width is closest to, without exceeding, the largest
  of the providers' narrowest widths); with no candidate the result is all NUMA nodes, not
  preferred;
* single-numa-node first keeps, per resource, only preferred hints that are "any" or one NUMA
  node, and reports a result spanning every NUMA node as "any";
* none admits everything with an empty hint; best-effort admits everything; restricted and
  single-numa-node admit only a preferred result.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from itertools import product

import attrs
import numpy as np
import numpy.typing as npt

from numasched.api.hint import ResourceHints, TopologyHint
from numasched.api.numamask import NumaMask
from numasched.api.topology import DEFAULT_MAX_ALLOWABLE_NUMA_NODES, TopologyPolicy

# Distances the kernel reports when the SLIT is missing: local and one hop.
_LOCAL_DISTANCE = 10
_REMOTE_DISTANCE = 20

Distances = Mapping[int, Mapping[int, int]]
Masks = npt.NDArray[np.int64]
Flags = npt.NDArray[np.bool_]

# The widest default mask (its highest NUMA id + 1) whose non-preferred fold runs on a table of
# one flag per mask (HintMerger.reachable_array): 4096 flags. Wider machines fold on sets.
_FLAG_TABLE_WIDTH = 12


class PolicyError(ValueError):
    """A policy name or option the kubelet would reject."""


def parse_policy(value: str) -> TopologyPolicy:
    """A TopologyPolicy from its kubelet spelling; PolicyError names the valid values."""
    try:
        return TopologyPolicy(value.strip())
    except ValueError:
        valid = ", ".join(policy.value for policy in TopologyPolicy)
        raise PolicyError(f"unknown topology policy {value!r}; valid values: {valid}") from None


def check_numa_node_limit(
    policy: TopologyPolicy, numa_count: int, max_allowable: int = DEFAULT_MAX_ALLOWABLE_NUMA_NODES
) -> str | None:
    """The kubelet's refusal to run a topology manager on too many NUMA nodes, as a message.

    The kubelet fails to start (and so admits nothing through its topology manager) when a policy
    other than none is configured on a machine with more NUMA nodes than max-allowable-numa-nodes.
    Returns None when the node is within the limit.
    """
    if policy is TopologyPolicy.NONE or numa_count <= max_allowable:
        return None
    return (
        f"topology manager policy {policy.value} is unsupported on machines with more than "
        f"{max_allowable} NUMA nodes (this node has {numa_count}; raise the kubelet's "
        "max-allowable-numa-nodes topology manager policy option)"
    )


def average_distance(mask: NumaMask, distances: Distances | None) -> float:
    """Mean distance over all ordered pairs of the mask's NUMA nodes, self-pairs included."""
    ids = mask.ids()
    if not ids:
        return 0.0
    total = 0
    for first in ids:
        row = (distances or {}).get(first, {})
        for second in ids:
            default = _LOCAL_DISTANCE if first == second else _REMOTE_DISTANCE
            total += row.get(second, default)
    return total / (len(ids) * len(ids))


def expand_provider_hints(providers_hints: Sequence[ResourceHints | None]) -> list[Sequence[TopologyHint]]:
    """One hint list per resource, with "no preference" and "impossible" made explicit. A tuple
    is taken as it is (it cannot change; a ReadHints keeps its reading)."""
    lists: list[Sequence[TopologyHint]] = []
    for provider_hints in providers_hints:
        if not provider_hints:
            lists.append(_NO_PREFERENCE)
            continue
        for hints in provider_hints.values():
            if hints is None:
                lists.append(_NO_PREFERENCE)
            elif not hints:
                lists.append(_IMPOSSIBLE)
            else:
                lists.append(hints if isinstance(hints, tuple) else list(hints))
    return lists


def filter_single_numa_hints(hint_lists: Sequence[Sequence[TopologyHint]]) -> list[Sequence[TopologyHint]]:
    """Keep, per resource, the preferred hints that are "any" or exactly one NUMA node."""
    return [hints.single_numa() if isinstance(hints, ReadHints) else _single_numa(hints) for hints in hint_lists]


def _single_numa(hints: Sequence[TopologyHint]) -> list[TopologyHint]:
    return [hint for hint in hints if hint.preferred and (hint.affinity is None or hint.affinity.count() == 1)]


def merge_combination(default: NumaMask, combination: Iterable[TopologyHint]) -> TopologyHint:
    """AND of the affinities (None = all NUMA nodes); preferred only if all are preferred and all
    stated affinities are equal."""
    merged = default
    preferred = True
    first_affinity: NumaMask | None = None
    for hint in combination:
        if hint.affinity is not None:
            merged = merged & hint.affinity
            if first_affinity is None:
                first_affinity = hint.affinity
            elif hint.affinity != first_affinity:
                preferred = False
        if not hint.preferred:
            preferred = False
    return TopologyHint(merged, preferred)


def max_of_min_affinity_counts(hint_lists: Sequence[Sequence[TopologyHint]]) -> int:
    """The widest of the providers' narrowest stated affinities (kubelet maxOfMinAffinityCounts)."""
    best = 0
    for hints in hint_lists:
        # The narrowest mask is one with the fewest NUMA nodes (ties are broken on the value, which
        # does not change the count), so only the counts are compared.
        fewest = min((hint.affinity.bits.bit_count() for hint in hints if hint.affinity is not None), default=0)
        best = max(best, fewest)
    return best


# The bits of a stated mask a flag table reads.
_LOW_BITS = (1 << _FLAG_TABLE_WIDTH) - 1
# The NUMA nodes in each mask of the flag table (read-only).
_BIT_COUNTS: Masks = np.array([bits.bit_count() for bits in range(1 << _FLAG_TABLE_WIDTH)], dtype=np.int64)
_BIT_COUNTS.flags.writeable = False


@attrs.frozen(slots=True, eq=False)
class HintReading:
    """What the fold reads of one resource's hint list besides its combinations: the masks it
    states, the masks of its preferred hints, whether a preferred hint and whether any hint has no
    affinity, and the fewest NUMA nodes of a stated mask (0: none stated). The non-preferred fold
    also reads tables derived from the stated masks; a reading of a list kept by its provider
    (ReadHints, `kept`) keeps them once derived."""

    stated: frozenset[int]
    preferred: frozenset[int]
    preferred_any: bool
    keeps: bool
    fewest: int
    kept: bool = False
    # The derived tables, by what they are (kept readings only).
    _tables: dict[Hashable, Masks] = attrs.field(factory=dict, init=False, repr=False)

    @classmethod
    def of(cls, hints: Sequence[TopologyHint], *, kept: bool = False) -> HintReading:
        stated: set[int] = set()
        preferred: set[int] = set()
        preferred_any = keeps = False
        for hint in hints:
            if hint.affinity is None:
                keeps = True
                preferred_any = preferred_any or hint.preferred
            else:
                stated.add(hint.affinity.bits)
                if hint.preferred:
                    preferred.add(hint.affinity.bits)
        fewest = min((bits.bit_count() for bits in stated), default=0)
        return cls(frozenset(stated), frozenset(preferred), preferred_any, keeps, fewest, kept)

    def _table(self, key: Hashable, derive: Callable[[], Masks]) -> Masks:
        found = self._tables.get(key)
        if found is None:
            found = derive()
            if self.kept:
                found.flags.writeable = False
                self._tables[key] = found
        return found

    def stated_low(self) -> Masks:
        """The stated masks' bits below _FLAG_TABLE_WIDTH, as an array (all a flag table of a
        default below that width reads of them)."""
        stated = self.stated
        return self._table("low", lambda: np.fromiter((bits & _LOW_BITS for bits in stated), np.int64, len(stated)))

    def first_step(self, default: int) -> Flags:
        """Flags of the masks the first list's step reaches from the default alone: every stated
        mask within the default (the default too where the list keeps it), 0 excluded."""
        flags = np.zeros(1 << default.bit_length(), dtype=np.bool_)
        flags[self.stated_low() & default] = True
        if self.keeps:
            flags[default] = True
        flags[0] = False
        return flags

    def supersets_within(self, width: int) -> Masks:
        """Per mask below 2**width, how many stated masks hold it (their bits from width up do
        not matter: a mask below 2**width is held or not by the bits below)."""

        def derive() -> Masks:
            low = self.stated_low() & ((1 << width) - 1)
            return _superset_sums(np.bincount(low, minlength=1 << width).astype(np.int64), width)

        return self._table(width, derive)


def _superset_sums(values: Masks, width: int) -> Masks:
    """Per mask x below 2**width, the sum of values[y] over every y that holds x (in place)."""
    for bit in range(width):
        pairs = values.reshape(-1, 2, 1 << bit)
        pairs[:, 0, :] += pairs[:, 1, :]
    return values


def _exact_from_superset_sums(sums: Masks, width: int) -> Masks:
    """_superset_sums undone (in place): from per mask the sum over its supersets, per mask its own
    value (Moebius inversion on the subset lattice)."""
    for bit in range(width):
        pairs = sums.reshape(-1, 2, 1 << bit)
        pairs[:, 0, :] -= pairs[:, 1, :]
    return sums


class ReadHints(tuple[TopologyHint, ...]):
    """A hint tuple handed out again and again (a provider's answers kept by content), read for
    the fold once, when it is made (HintReading)."""

    reading: HintReading
    # Its hints single-numa-node keeps (single_numa), once asked for.
    _single: ReadHints | None

    def __new__(cls, hints: Iterable[TopologyHint]) -> ReadHints:
        made = super().__new__(cls, hints)
        made.reading = HintReading.of(made, kept=True)
        made._single = None
        return made

    def single_numa(self) -> ReadHints:
        """filter_single_numa_hints of these hints, kept (it is asked again for every merge)."""
        if self._single is None:
            self._single = ReadHints(_single_numa(self))
        return self._single


# The hint lists of "no preference" and "cannot be satisfied" (expand_provider_hints).
_NO_PREFERENCE = ReadHints((TopologyHint(None, True),))
_IMPOSSIBLE = ReadHints((TopologyHint(None, False),))


@attrs.frozen(slots=True)
class HintMerger:
    """The kubelet's fold over all combinations of hints, keeping the best merged hint."""

    numa_nodes: NumaMask
    hint_lists: tuple[tuple[TopologyHint, ...], ...]
    # The kubelet's bestNonPreferredAffinityCount (max_of_min_affinity_counts of the lists); None:
    # computed from the lists when first needed (target), as only a non-preferred fold reads it.
    best_non_preferred_count: int | None = None
    prefer_closest: bool = False
    distances: Distances | None = None

    @classmethod
    def create(
        cls,
        numa_nodes: NumaMask,
        hint_lists: Sequence[Sequence[TopologyHint]],
        *,
        prefer_closest: bool = False,
        distances: Distances | None = None,
    ) -> HintMerger:
        return cls(
            numa_nodes,
            tuple(hints if isinstance(hints, tuple) else tuple(hints) for hints in hint_lists),
            None,
            prefer_closest,
            distances,
        )

    @functools.cached_property
    def target(self) -> int:
        """The width a non-preferred merged hint aims for (best_non_preferred_count)."""
        if self.best_non_preferred_count is not None:
            return self.best_non_preferred_count
        return max((reading.fewest for reading in self.readings), default=0)

    @functools.cached_property
    def readings(self) -> tuple[HintReading, ...]:
        """What the fold reads of each list (HintReading), kept by the lists that carry theirs."""
        return tuple(
            hints.reading if isinstance(hints, ReadHints) else HintReading.of(hints) for hints in self.hint_lists
        )

    def fitter_mask(self, current: NumaMask, candidate: NumaMask) -> NumaMask:
        """Narrowest, or with prefer-closest the closest of two equally wide masks."""
        if self.prefer_closest and current.count() == candidate.count():
            current_distance = average_distance(current, self.distances)
            candidate_distance = average_distance(candidate, self.distances)
            if current_distance != candidate_distance:
                return current if current_distance < candidate_distance else candidate
            return current if current.bits < candidate.bits else candidate
        return current if current.is_narrower_than(candidate) else candidate

    def compare_masks(self, current: TopologyHint, candidate: TopologyHint) -> TopologyHint:
        assert current.affinity is not None and candidate.affinity is not None
        if candidate.affinity == current.affinity:
            return current
        best = self.fitter_mask(current.affinity, candidate.affinity)
        return current if best == current.affinity else candidate

    def compare(self, current: TopologyHint | None, candidate: TopologyHint) -> TopologyHint | None:
        """The better of the best hint so far and a new merged hint (kubelet HintMerger.compare)."""
        if candidate.affinity is None or candidate.affinity.count() == 0:
            return current
        if current is None:
            return candidate
        if current.preferred != candidate.preferred:
            return current if current.preferred else candidate
        if current.preferred:
            return self.compare_masks(current, candidate)
        assert current.affinity is not None
        # Both non-preferred: aim for the width of the provider that needs the most NUMA nodes,
        # never wider; from below, the wider the better.
        target = self.target
        current_count = current.affinity.count()
        candidate_count = candidate.affinity.count()
        if current_count > target:
            return self.compare_masks(current, candidate)
        if current_count == target:
            return self.compare_masks(current, candidate) if candidate_count == target else current
        if candidate_count > target:
            return current
        if candidate_count == target:
            return candidate
        if candidate_count != current_count:
            return candidate if candidate_count > current_count else current
        return self.compare_masks(current, candidate)

    def combinations(self) -> Iterator[tuple[TopologyHint, ...]]:
        return product(*self.hint_lists)

    def merge_exhaustive(self) -> TopologyHint:
        """The kubelet's fold itself, over every combination: the reference for merge."""
        best: TopologyHint | None = None
        for combination in self.combinations():
            best = self.compare(best, merge_combination(self.numa_nodes, combination))
        return best if best is not None else TopologyHint(self.numa_nodes, False)

    def merge(self) -> TopologyHint:
        """The fold's result without walking every combination.

        compare is a total order on merged hints (preferred first, then the mask orders below),
        so the fold returns the minimum over the set of distinct merged hints whatever the order
        of the walk; that set is computed directly: the preferred masks by set intersection, the
        others by folding the lists into the set of reachable ANDs (at most 2^NUMA nodes).
        """
        if any(not hints for hints in self.hint_lists):
            return TopologyHint(self.numa_nodes, False)
        preferred = self.best_preferred_bits()
        if preferred is not None:
            return TopologyHint(NumaMask(preferred), True)
        if self.numa_nodes.bits.bit_length() <= _FLAG_TABLE_WIDTH:
            best = self.best_non_preferred_bits()
        else:
            best = None
            best_key: tuple[int, int, float, int] | None = None
            for bits in self.reachable_bits():
                key = self.non_preferred_key(bits)
                if best_key is None or key < best_key:
                    best, best_key = bits, key
        return TopologyHint(self.numa_nodes if best is None else NumaMask(best), False)

    def preferred_candidate_bits(self) -> set[int]:
        """Non-empty masks of the preferred merged hints.

        A combination is preferred when all its hints are preferred and all stated affinities
        equal one mask A (or none is stated): it merges to default & A, or to the default.
        """
        default = self.numa_nodes.bits
        required: set[int] | None = None
        offered: set[int] = set()
        every_list_has_any = True
        for reading in self.readings:
            stated = reading.preferred
            if reading.preferred_any:
                offered |= stated
                continue
            every_list_has_any = False
            required = set(stated) if required is None else required & stated
            if not required:
                return set()
        # Lists with a preferred "any" take any A; the others must each state A themselves.
        masks = offered if required is None else required
        candidates = {default & bits for bits in masks}
        if every_list_has_any:
            candidates.add(default)
        candidates.discard(0)
        return candidates

    def best_preferred_bits(self) -> int | None:
        """The preferred merged mask the fold would pick, None when no preferred hint exists."""
        best: int | None = None
        best_key: tuple[int, float, int] | None = None
        for bits in self.preferred_candidate_bits():
            key = (bits.bit_count(), self.closeness(bits), bits)
            if best_key is None or key < best_key:
                best, best_key = bits, key
        return best

    def reachable_bits(self) -> set[int]:
        """Every non-empty mask some combination merges to."""
        reachable = {self.numa_nodes.bits}
        for hints in self.hint_lists:
            stated = {hint.affinity.bits for hint in hints if hint.affinity is not None}
            keeps = any(hint.affinity is None for hint in hints)
            step = {bits & mask for bits in reachable for mask in stated}
            if keeps:
                step |= reachable
            step.discard(0)
            if not step:
                return step
            reachable = step
        reachable.discard(0)
        return reachable

    def reachable_array(self) -> Masks:
        """reachable_bits as a sorted array, computed on tables of one entry per mask below the
        default's highest bit (2**width; for machines of at most _FLAG_TABLE_WIDTH bits). Each
        list's step counts, per mask x, the pairs (reachable r, stated s) whose AND is exactly x:
        the pairs whose AND holds x are (reachable masks holding x) x (stated masks holding x), and
        exactly x is that count undone over the supersets of x. A step costs a few vector
        operations on the table, whatever the number of masks."""
        default = self.numa_nodes.bits
        if not default:
            return np.zeros(0, dtype=np.int64)
        width = default.bit_length()
        reachable: Masks | None = None  # the default alone, until a list states a mask
        for reading in self.readings:
            if not reading.stated:
                continue  # only "any": every reachable mask stays as it is
            step: Flags
            if reachable is None:
                step = reading.first_step(default)
            else:
                pairs = _superset_sums(reachable.copy(), width) * reading.supersets_within(width)
                step = _exact_from_superset_sums(pairs, width) > 0
                if reading.keeps:
                    step |= reachable > 0
                step[0] = False
            reachable = step.astype(np.int64)
            if not step.any():
                break
        return np.array([default], dtype=np.int64) if reachable is None else np.flatnonzero(reachable)

    def best_non_preferred_bits(self) -> int | None:
        """The non-preferred mask the fold would pick (the least non_preferred_key among the
        reachable masks), None when no combination merges to a non-empty mask; vectorised over
        reachable_array."""
        reachable = self.reachable_array()
        if not len(reachable):
            return None
        if self.prefer_closest:
            masks: list[int] = reachable.tolist()
            return min(masks, key=self.non_preferred_key)
        # non_preferred_key without closeness: the masks of the target width, else the widest
        # narrower ones, else the narrowest wider ones; among them the lowest value (the array is
        # sorted, so the first).
        counts = _BIT_COUNTS[reachable]
        target = self.target
        chosen = counts == target
        if not chosen.any():
            below = counts < target
            chosen = below & (counts == counts[below].max()) if below.any() else counts == counts.min()
        return int(reachable[chosen][0])

    def closeness(self, bits: int) -> float:
        if not self.prefer_closest:
            return 0.0
        return average_distance(NumaMask(bits), self.distances)

    def non_preferred_key(self, bits: int) -> tuple[int, int, float, int]:
        """compare's order on non-preferred masks as a sort key: the target width first, then
        narrower ones (wider first), then wider ones (narrower first); ties as fitter_mask."""
        count = bits.bit_count()
        target = self.target
        if count == target:
            band, width = 0, 0
        elif count < target:
            band, width = 1, -count
        else:
            band, width = 2, count
        return (band, width, self.closeness(bits), bits)


def merge(
    policy: TopologyPolicy | str,
    providers_hints: Sequence[ResourceHints | None],
    numa_nodes: Iterable[int],
    *,
    prefer_closest: bool = False,
    distances: Distances | None = None,
) -> tuple[TopologyHint, bool]:
    """The merged best hint and whether the kubelet admits it, for one container or pod.

    providers_hints: one entry per provider (None or {} = no preference at all).
    prefer_closest: the kubelet's prefer-closest-numa-nodes option (ignored, as by the kubelet,
    under single-numa-node); distances: NUMA distances as the kernel reports them.
    """
    return _merge_with(HintMerger.merge, policy, providers_hints, numa_nodes, prefer_closest, distances)


def _merge_exhaustive(
    policy: TopologyPolicy | str,
    providers_hints: Sequence[ResourceHints | None],
    numa_nodes: Iterable[int],
    *,
    prefer_closest: bool = False,
    distances: Distances | None = None,
) -> tuple[TopologyHint, bool]:
    """merge by walking every combination, as the kubelet does: the reference merge is tested against."""
    return _merge_with(HintMerger.merge_exhaustive, policy, providers_hints, numa_nodes, prefer_closest, distances)


def _merge_with(
    fold: Callable[[HintMerger], TopologyHint],
    policy: TopologyPolicy | str,
    providers_hints: Sequence[ResourceHints | None],
    numa_nodes: Iterable[int],
    prefer_closest: bool,
    distances: Distances | None,
) -> tuple[TopologyHint, bool]:
    chosen = policy if isinstance(policy, TopologyPolicy) else parse_policy(policy)
    if chosen is TopologyPolicy.NONE:
        return TopologyHint(None, False), True
    default = NumaMask.from_ids(numa_nodes)
    hint_lists = expand_provider_hints(providers_hints)
    if chosen is TopologyPolicy.SINGLE_NUMA_NODE:
        best = fold(HintMerger.create(default, filter_single_numa_hints(hint_lists)))
        if best.affinity == default:
            best = TopologyHint(None, best.preferred)
        return best, best.preferred
    best = fold(HintMerger.create(default, hint_lists, prefer_closest=prefer_closest, distances=distances))
    if chosen is TopologyPolicy.BEST_EFFORT:
        return best, True
    return best, best.preferred
