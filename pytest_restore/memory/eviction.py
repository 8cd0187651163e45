"""Eviction: online policies that keep a question's store under a token budget.

Units arrive in chronological order. After each arrival, while the store
holds more than ``B`` tokens, the policy picks one victim among the stored
units (the arriving one included) and evicts it. What remains is ``S_P``,
returned as a boolean mask over the history's units.

A policy sees units (content, date, role, size) and never the gold set.

Users add policies without editing this package: subclass
:class:`VictimPolicy` (or :class:`Policy`, or :class:`MemoryStore` to wrap a
memory system that keeps what it wants) and register an instance from a
``conftest.py`` through the ``pytest_restore_register_policies`` hook, or
from an installed package through the ``pytest_restore.policies`` entry-point
group.
"""

from __future__ import annotations

import hashlib
import re
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Generic, Protocol, TypeVar, runtime_checkable

import numpy as np
import numpy.typing as npt

from pytest_restore.data.units import Unit
from pytest_restore.data.words import FACT_STRIPPED, FIRST_PERSON
from pytest_restore.memory.lexical import profile_rows
from pytest_restore.memory.memories import Memory
from pytest_restore.registry import Registry

Mask = npt.NDArray[np.bool_]
Sizes = npt.NDArray[np.int64]
_Kept = TypeVar("_Kept")


@dataclass(frozen=True)
class EvictionContext:
    """What a policy may know besides the units: never the question or its gold."""

    question_id: str
    seed: int = 0
    #: importance score (1-10) of each unit content, for policies with ``needs_importance``
    importance: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Eviction:
    """One pass of a policy over a history (:meth:`Policy.evict`): the store, and when each unit left it."""

    #: ``S_P``, as :meth:`Policy.retain` returns it
    mask: Mask
    #: per unit, the position of the arrival that evicted it (-1: kept); ``None``: the pass did not
    #: record it (:meth:`arrivals` asks :meth:`Policy.eviction_arrivals`)
    left: npt.NDArray[np.int64] | None = None

    def arrivals(
        self, policy: Policy, units: Sequence[Unit], sizes: Sizes, budget: int, ctx: EvictionContext, evicted: Sequence[int]
    ) -> dict[int, int]:
        """When each of ``evicted`` left: from this pass's record, else from the policy (another pass)."""
        if self.left is not None:
            return _arrivals(self.left, evicted)
        return policy.eviction_arrivals(units, sizes, budget, ctx, evicted) if evicted else {}


class Policy(ABC):
    """An eviction policy. Subclasses set ``name`` and implement :meth:`retain`."""

    name: ClassVar[str]
    #: run once per seed (``random``); deterministic policies run once, as seed 0
    seeded: ClassVar[bool] = False
    #: ask the importance scorer for every unit before eviction
    needs_importance: ClassVar[bool] = False
    #: whether a budget applies at all (``no-evict`` ignores it)
    budgeted: ClassVar[bool] = True
    #: whether it holds derived memories (``memory.systems.MemorySystem``) rather than a subset of the units
    derived: ClassVar[bool] = False

    @abstractmethod
    def retain(self, units: Sequence[Unit], sizes: Sizes, budget: int, ctx: EvictionContext) -> Mask:
        """``S_P``: which units survive online eviction under ``budget`` tokens."""

    def evict(self, units: Sequence[Unit], sizes: Sizes, budget: int, ctx: EvictionContext) -> Eviction:
        """:meth:`retain` and, where the policy records it in the same pass, when each evicted unit left.

        The audit asks this once per store. The default is :meth:`retain`
        alone (the arrivals are asked of :meth:`eviction_arrivals` when wanted);
        the built-in loops record both in one pass. A subclass that overrides
        ``retain`` or ``eviction_arrivals`` gets the default.
        """
        return Eviction(self.retain(units, sizes, budget, ctx))

    def _own_pass(self, retain: object, eviction_arrivals: object) -> bool:
        """Whether this class's ``retain`` and ``eviction_arrivals`` are the ones given (no subclass changed either)."""
        return type(self).retain is retain and type(self).eviction_arrivals is eviction_arrivals

    def hold(self, units: Sequence[Unit], sizes: Sizes, budget: int, ctx: EvictionContext) -> list[Memory]:
        """The memories held at the history's end: for a store of units, one per kept unit, citing itself."""
        mask = self.retain(units, sizes, budget, ctx)
        return [Memory.of(units[int(p)]) for p in np.flatnonzero(mask)]

    def eviction_arrivals(
        self, units: Sequence[Unit], sizes: Sizes, budget: int, ctx: EvictionContext, evicted: Sequence[int]
    ) -> dict[int, int]:
        """When each of ``evicted`` (units :meth:`retain` does not keep) left the store: the position of
        the unit whose arrival evicted it (its own, for a unit evicted as it arrived).

        The default asks :meth:`retain` about prefixes of the history: an
        online policy's store once the first ``t + 1`` units have arrived is
        what it retains of them, and a unit once evicted never comes back, so
        the arrival is found by bisection. The built-in policies record it as
        they evict instead.
        """
        stores: dict[int, Mask] = {}

        def held(position: int, after: int) -> bool:  # ``position`` is stored once unit ``after`` has arrived
            if after not in stores:
                stores[after] = np.asarray(self.retain(units[: after + 1], sizes[: after + 1], budget, ctx), dtype=bool)
            return bool(stores[after][position])

        out: dict[int, int] = {}
        for position in evicted:
            lo, hi = position, len(units) - 1  # gone once the last unit has arrived
            while lo < hi:
                mid = (lo + hi) // 2
                if held(position, mid):
                    lo = mid + 1
                else:
                    hi = mid
            out[position] = lo
        return out


def _arrivals(left: npt.NDArray[np.int64], evicted: Sequence[int]) -> dict[int, int]:
    """``evicted``'s entries of a loop's record of the arrival that evicted each unit."""
    out = {int(p): int(left[p]) for p in evicted}
    kept = [p for p, at in out.items() if at < 0]
    if kept:
        raise ValueError(f"unit {kept[0]} was not evicted")
    return out


@runtime_checkable
class ScoredPolicy(Protocol):
    """A policy that decides by a score of each unit: it evicts the stored unit with the lowest score.

    Implementing :meth:`unit_scores` (no base class needed) lets the report
    check the policy's decisions: when most units share a few scores, most
    evictions are ties, broken by another rule (the built-in ones: the older
    unit first), and the policy's cells measure that rule more than its score
    (``stats.ties``). Built in: ``llm-importance`` (the scorer's 1-10, whose
    distribution the report shows) and ``control`` (minus the fact density).
    """

    def unit_scores(self, units: Sequence[Unit], ctx: EvictionContext) -> Sequence[float]:
        """Each unit's score, as the policy ranks units for eviction (lowest first)."""
        ...


class _OnePass(Policy):
    """A policy whose store and whose record of when each unit left come from one online pass (:meth:`_pass`).

    :meth:`retain`, :meth:`evict` and :meth:`eviction_arrivals` are read off
    that pass; a subclass that overrides ``retain`` or ``eviction_arrivals``
    gets :meth:`Policy.evict`'s default.
    """

    @abstractmethod
    def _pass(
        self, units: Sequence[Unit], sizes: Sizes, budget: int, ctx: EvictionContext
    ) -> tuple[Mask, npt.NDArray[np.int64]]:
        """The store at the history's end, and for each unit the arrival that evicted it (-1: kept)."""

    def retain(self, units: Sequence[Unit], sizes: Sizes, budget: int, ctx: EvictionContext) -> Mask:
        return self._pass(units, sizes, budget, ctx)[0]

    def evict(self, units: Sequence[Unit], sizes: Sizes, budget: int, ctx: EvictionContext) -> Eviction:
        if not self._own_pass(_OnePass.retain, _OnePass.eviction_arrivals):
            return super().evict(units, sizes, budget, ctx)
        return Eviction(*self._pass(units, sizes, budget, ctx))

    def eviction_arrivals(
        self, units: Sequence[Unit], sizes: Sizes, budget: int, ctx: EvictionContext, evicted: Sequence[int]
    ) -> dict[int, int]:
        return _arrivals(self._pass(units, sizes, budget, ctx)[1], evicted)


class VictimPolicy(_OnePass):
    """A policy given by its victim choice; the online loop is provided.

    Implement :meth:`choose_victim`; override :meth:`start` to prepare
    per-history state. ``stored`` lists the stored positions in arrival
    (chronological) order and includes the unit that just arrived.
    """

    def start(self, units: Sequence[Unit], ctx: EvictionContext) -> None:
        """Called once per history before the first arrival."""

    @abstractmethod
    def choose_victim(self, stored: Sequence[int], units: Sequence[Unit]) -> int:
        """The position, among ``stored``, to evict next."""

    def _pass(
        self, units: Sequence[Unit], sizes: Sizes, budget: int, ctx: EvictionContext
    ) -> tuple[Mask, npt.NDArray[np.int64]]:
        """The online loop: the store, and for each unit the arrival that evicted it (-1: kept)."""
        self.start(units, ctx)
        stored: list[int] = []
        left = np.full(len(units), -1, dtype=np.int64)
        total = 0
        for pos in range(len(units)):
            stored.append(pos)
            total += int(sizes[pos])
            while total > budget:
                victim = self.choose_victim(stored, units)
                try:
                    stored.remove(victim)
                except ValueError:
                    raise ValueError(
                        f"policy {self.name!r} chose unit {victim}, which is not in the store"
                    ) from None
                left[victim] = pos
                total -= int(sizes[victim])
        mask = np.zeros(len(units), dtype=bool)
        mask[stored] = True
        return mask, left


class MemoryStore(_OnePass):
    """Adapter for a memory system that decides retention itself, online.

    Where a :class:`VictimPolicy` only names victims, a store receives the
    units one at a time and keeps what it wants: implement

    - :meth:`reset` (a fresh, empty store for one question's history and budget),
    - :meth:`add` (one arriving unit, in chronological order; evict here as needed),
    - :meth:`retained` (the positions, ``Unit.position``, the store holds now).

    :meth:`retain` drives it over the history and checks, after every
    arrival, that the store holds only units it has received, never takes
    back a unit it dropped, and (when ``budgeted``) stays within the budget.
    Each violation is a ``ValueError`` naming the store, the question and
    the arrival. The store keeps units as they are; a system that summarises
    or rewrites them is a :class:`pytest_restore.memory.systems.MemorySystem`.
    """

    @abstractmethod
    def reset(self, budget: int, ctx: EvictionContext) -> None:
        """Start an empty store for one history under ``budget`` tokens."""

    @abstractmethod
    def add(self, unit: Unit) -> None:
        """Receive the next unit (``unit.tokens`` is its size)."""

    @abstractmethod
    def retained(self) -> Iterable[int]:
        """Positions of the units held now."""

    def _pass(
        self, units: Sequence[Unit], sizes: Sizes, budget: int, ctx: EvictionContext
    ) -> tuple[Mask, npt.NDArray[np.int64]]:
        """The store over the history, checked after every arrival, and the arrival that dropped each unit (-1: kept)."""
        n = len(units)
        self.reset(budget, ctx)
        held = np.zeros(n, dtype=bool)
        left = np.full(n, -1, dtype=np.int64)
        for pos, unit in enumerate(units):
            self.add(unit)
            kept = np.fromiter((int(p) for p in self.retained()), dtype=np.int64)
            where = f"memory store {self.name!r} on {ctx.question_id} after unit {pos} arrived"
            if kept.size and (int(kept.min()) < 0 or int(kept.max()) > pos):
                bad = int(kept.max()) if int(kept.max()) > pos else int(kept.min())
                raise ValueError(f"{where}: holds unit {bad}, which it has not received")
            now = np.zeros(n, dtype=bool)
            now[kept] = True
            back = now & ~held
            back[pos] = False
            if back.any():
                raise ValueError(f"{where}: holds unit {int(np.flatnonzero(back)[0])} again after dropping it")
            if self.budgeted and int(sizes[now].sum()) > budget:
                raise ValueError(f"{where}: holds {int(sizes[now].sum())} tokens, over its budget of {budget}")
            left[held & ~now] = pos
            if not now[pos]:
                left[pos] = pos  # dropped as it arrived
            held = now
        return held, left


def _evict_lowest_key(sizes: Sizes, budget: int, key: Sequence[float]) -> Mask:
    """Online eviction of the stored unit with the lowest static key, ties to the older unit."""
    from pytest_restore.memory import kernels  # numba loads on first eviction, not with the plugin

    return np.asarray(
        kernels.lowest_key(np.asarray(sizes, dtype=np.int64), int(budget), np.asarray(key, dtype=np.float64))
    )


def _lowest_key_arrivals(sizes: Sizes, budget: int, key: Sequence[float], evicted: Sequence[int]) -> dict[int, int]:
    """:func:`_evict_lowest_key`'s arrival that evicted each of ``evicted``."""
    left = _lowest_key_eviction(sizes, budget, key).left
    assert left is not None
    return _arrivals(left, evicted)


def _lowest_key_eviction(sizes: Sizes, budget: int, key: Sequence[float]) -> Eviction:
    """:func:`_evict_lowest_key`'s store and the arrival that evicted each unit, in one pass."""
    from pytest_restore.memory import kernels

    mask, left = kernels.lowest_key_left(np.asarray(sizes, dtype=np.int64), int(budget), np.asarray(key, dtype=np.float64))
    return Eviction(np.asarray(mask), np.asarray(left))


class NoEvict(Policy):
    """The reference: keeps everything, no budget applies."""

    name = "no-evict"
    budgeted = False

    def retain(self, units: Sequence[Unit], sizes: Sizes, budget: int, ctx: EvictionContext) -> Mask:
        return np.ones(len(units), dtype=bool)


class Fifo(Policy):
    """Evicts the oldest unit.

    Online FIFO keeps a contiguous window that slides forward, so ``S_P`` is
    the longest suffix of the history that fits the budget.
    """

    name = "fifo"

    def retain(self, units: Sequence[Unit], sizes: Sizes, budget: int, ctx: EvictionContext) -> Mask:
        suffix = np.cumsum(sizes[::-1])[::-1]  # tokens from each position to the end
        return np.asarray(suffix <= budget, dtype=bool)

    def eviction_arrivals(
        self, units: Sequence[Unit], sizes: Sizes, budget: int, ctx: EvictionContext, evicted: Sequence[int]
    ) -> dict[int, int]:
        # unit p leaves when the window from p to the arriving unit no longer fits the budget
        total = np.cumsum(np.asarray(sizes, dtype=np.int64))
        before = np.concatenate(([0], total[:-1]))
        return {int(p): int(np.searchsorted(total, before[p] + budget, side="right")) for p in evicted}

    def evict(self, units: Sequence[Unit], sizes: Sizes, budget: int, ctx: EvictionContext) -> Eviction:
        if not self._own_pass(Fifo.retain, Fifo.eviction_arrivals):
            return super().evict(units, sizes, budget, ctx)
        mask = self.retain(units, sizes, budget, ctx)
        total = np.cumsum(np.asarray(sizes, dtype=np.int64))
        before = np.concatenate(([0], total[:-1]))
        # every unit's leaving arrival at once, as eviction_arrivals finds it for one
        left = np.searchsorted(total, before + budget, side="right").astype(np.int64)
        left[mask] = -1
        return Eviction(mask, left)


def stable_seed(*parts: object) -> int:
    """A 64-bit seed from values, stable across processes (unlike ``hash``)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big")


class RandomPolicy(VictimPolicy):
    """Evicts a uniformly random stored unit, from a generator seeded by (seed, question)."""

    name = "random"
    seeded = True

    def start(self, units: Sequence[Unit], ctx: EvictionContext) -> None:
        self._rng = np.random.default_rng(stable_seed(ctx.seed, ctx.question_id))

    def choose_victim(self, stored: Sequence[int], units: Sequence[Unit]) -> int:
        return stored[int(self._rng.integers(len(stored)))]

    def _pass(
        self, units: Sequence[Unit], sizes: Sizes, budget: int, ctx: EvictionContext
    ) -> tuple[Mask, npt.NDArray[np.int64]]:
        cls = type(self)
        if cls.choose_victim is not RandomPolicy.choose_victim or cls.start is not RandomPolicy.start:
            return super()._pass(units, sizes, budget, ctx)  # a subclass changed the choice: the generic loop
        # The same victims as ``choose_victim``, compiled: ``Generator.integers(h)``
        # consumes 32-bit draws (Lemire's method, see ``kernels.below``), so the
        # kernel gets the generator's 32-bit stream, drawn up front; it rarely
        # needs more than one draw per unit, and asks again with more if so.
        return self._victims(units, sizes, budget, ctx)

    def _victims(
        self, units: Sequence[Unit], sizes: Sizes, budget: int, ctx: EvictionContext
    ) -> tuple[Mask, npt.NDArray[np.int64]]:
        from pytest_restore.memory import kernels

        extra = 64
        while True:
            rng = np.random.default_rng(stable_seed(ctx.seed, ctx.question_id))
            draws = rng.integers(0, 1 << 32, size=len(units) + extra, dtype=np.uint32)
            mask, left, enough = kernels.random_victims_left(np.asarray(sizes, dtype=np.int64), int(budget), draws)
            if enough:
                return np.asarray(mask), np.asarray(left)
            extra *= 4


def _overlaps(units: Sequence[Unit]) -> tuple[npt.NDArray[np.uint16], npt.NDArray[np.float64]]:
    """Shared content words of every pair of units, ``[u, v]`` for ``v < u`` (exact counts;
    a unit's own count on the diagonal, zeros above it), and each unit's word count."""
    from pytest_restore.memory import kernels

    rows = profile_rows([unit.content for unit in units])
    lengths, words = rows.sizes, rows.ids
    overlap = kernels.pair_overlaps(words, lengths, int(words.max()) + 1 if words.size else 0)
    dtype = np.uint16 if overlap.size == 0 or overlap.max() < 1 << 16 else np.uint32
    return overlap.astype(dtype), lengths.astype(np.float64)


class _PerHistory(Generic[_Kept]):
    """What a policy makes of a history's units alone, kept across budgets and cells within a byte budget.

    A policy runs on the same history for every budget (and the audit reads a scored policy's scores for
    its ties): what depends on the units alone is made once. Keyed by the identity of the units tuple,
    which the entry keeps alive.
    """

    def __init__(self, make: Callable[[Sequence[Unit]], _Kept], size: Callable[[_Kept], int], max_bytes: int) -> None:
        self.make, self.size, self.max_bytes = make, size, max_bytes
        self._entries: OrderedDict[int, tuple[Sequence[Unit], _Kept]] = OrderedDict()
        self._bytes = 0

    def get(self, units: Sequence[Unit]) -> _Kept:
        key = id(units)
        entry = self._entries.get(key)
        if entry is not None and entry[0] is units:
            self._entries.move_to_end(key)
            return entry[1]
        made = self.make(units)
        self._entries[key] = (units, made)
        self._bytes += self.size(made)
        while self._bytes > self.max_bytes and len(self._entries) > 1:
            _, (_, old) = self._entries.popitem(last=False)
            self._bytes -= self.size(old)
        return made


#: The redundancy policy's overlap counts (the expensive part: integers, so the cosines rebuilt from them are exact).
_OVERLAPS = _PerHistory(_overlaps, lambda made: made[0].nbytes, 512 << 20)


def similarity_matrix(units: Sequence[Unit]) -> npt.NDArray[np.float64]:
    """Cosine similarity of the units' content-word sets (binary bags), diagonal zeroed."""
    lower, lengths = _OVERLAPS.get(units)
    overlap = lower + lower.T  # the diagonal is zeroed below
    outer = np.outer(np.sqrt(lengths), np.sqrt(lengths))
    with np.errstate(divide="ignore", invalid="ignore"):
        sim = np.where(outer > 0, overlap / outer, 0.0)
    np.fill_diagonal(sim, 0.0)
    return np.asarray(sim, dtype=np.float64)


class Redundancy(Policy):
    """Evicts the stored unit most similar to another stored unit; ties to the older unit.

    Each stored unit's best similarity is the highest similarity of a pair it
    is in, so the victim is the older unit of the most similar stored pair
    (among equally similar pairs, the one whose older unit is oldest, then the
    one whose younger unit is oldest). The loop (compiled:
    :func:`pytest_restore.memory.kernels.redundancy_victims`) keeps, for every stored
    unit, its best pair with an older stored unit; an arrival adds one pair
    (older units' pairs cannot change, since the newcomer is younger) and an
    eviction recounts only the units whose partner it was. Same victims as
    recomputing every unit's best after every change.
    """

    name = "redundancy"

    def retain(self, units: Sequence[Unit], sizes: Sizes, budget: int, ctx: EvictionContext) -> Mask:
        if int(sizes.sum()) <= budget:
            return np.ones(len(units), dtype=bool)
        from pytest_restore.memory import kernels

        overlap, lengths = _OVERLAPS.get(units)
        # a unit without content words shares none: 0 / 1 is the 0.0 similarity_matrix gives it
        root = np.sqrt(np.maximum(lengths, 1.0))
        return np.asarray(kernels.redundancy_victims(overlap, root, np.asarray(sizes, dtype=np.int64), int(budget)))

    def eviction_arrivals(
        self, units: Sequence[Unit], sizes: Sizes, budget: int, ctx: EvictionContext, evicted: Sequence[int]
    ) -> dict[int, int]:
        if type(self).retain is not Redundancy.retain:
            return super().eviction_arrivals(units, sizes, budget, ctx, evicted)
        from pytest_restore.memory import kernels

        overlap, lengths = _OVERLAPS.get(units)
        root = np.sqrt(np.maximum(lengths, 1.0))
        _, left = kernels.redundancy_victims_left(overlap, root, np.asarray(sizes, dtype=np.int64), int(budget))
        return _arrivals(left, evicted)

    def evict(self, units: Sequence[Unit], sizes: Sizes, budget: int, ctx: EvictionContext) -> Eviction:
        if not self._own_pass(Redundancy.retain, Redundancy.eviction_arrivals):
            return super().evict(units, sizes, budget, ctx)
        if int(sizes.sum()) <= budget:
            return Eviction(np.ones(len(units), dtype=bool), np.full(len(units), -1, dtype=np.int64))
        from pytest_restore.memory import kernels

        overlap, lengths = _OVERLAPS.get(units)
        root = np.sqrt(np.maximum(lengths, 1.0))
        mask, left = kernels.redundancy_victims_left(overlap, root, np.asarray(sizes, dtype=np.int64), int(budget))
        return Eviction(np.asarray(mask), np.asarray(left))


class LlmImportance(Policy):
    """Evicts the unit with the lowest importance score (1-10), ties to the older unit.

    Scores come from a frozen scorer model that sees the unit's content alone;
    the audit asks for them before eviction and caches them by content.
    """

    name = "llm-importance"
    needs_importance = True

    def retain(self, units: Sequence[Unit], sizes: Sizes, budget: int, ctx: EvictionContext) -> Mask:
        return _evict_lowest_key(sizes, budget, self._key(units, ctx))

    def eviction_arrivals(
        self, units: Sequence[Unit], sizes: Sizes, budget: int, ctx: EvictionContext, evicted: Sequence[int]
    ) -> dict[int, int]:
        if type(self).retain is not LlmImportance.retain:
            return super().eviction_arrivals(units, sizes, budget, ctx, evicted)
        return _lowest_key_arrivals(sizes, budget, self._key(units, ctx), evicted)

    def evict(self, units: Sequence[Unit], sizes: Sizes, budget: int, ctx: EvictionContext) -> Eviction:
        if not self._own_pass(LlmImportance.retain, LlmImportance.eviction_arrivals):
            return super().evict(units, sizes, budget, ctx)
        return _lowest_key_eviction(sizes, budget, self._key(units, ctx))

    def unit_scores(self, units: Sequence[Unit], ctx: EvictionContext) -> Sequence[float]:
        """The scorer's score of each unit (:class:`ScoredPolicy`)."""
        return self._key(units, ctx)

    @staticmethod
    def _key(units: Sequence[Unit], ctx: EvictionContext) -> list[float]:
        try:
            return [float(ctx.importance[u.content]) for u in units]
        except KeyError as exc:
            raise ValueError(f"no importance score for a unit of {ctx.question_id}") from exc


_NUMBER = re.compile(r"\d")


#: Fact densities known, by text: made here one at a time, or by another process (:func:`remember_densities`).
_DENSITIES: dict[str, float] = {}
#: Texts whose densities made here are kept (the oldest go first past it).
_DENSITY_MEMO = 1 << 18
_DENSITIES_LOCK = threading.Lock()


def fact_density(content: str) -> float:
    """Fact-bearing tokens per token: numbers, mid-sentence capitals and first-person words.

    Smoothed by five tokens so that a one-word turn is not the densest.
    """
    density = _DENSITIES.get(content)
    if density is None:
        # the compiled scan, same rule (non-ASCII characters through ASCII stand-ins)
        from pytest_restore.memory import kernels

        facts, count = kernels.fact_counts(content)
        density = facts / (count + 5)
        with _DENSITIES_LOCK:  # a memory library's histories may be fed on threads
            _DENSITIES[content] = density
            if len(_DENSITIES) > _DENSITY_MEMO:
                del _DENSITIES[next(iter(_DENSITIES))]
    return density


def fact_densities(texts: Sequence[str]) -> npt.NDArray[np.float64]:
    """:func:`fact_density` of each of ``texts``, made in one compiled pass (the same numbers: ``facts / (count + 5)``
    of two integers, divided once as floats)."""
    from pytest_restore.memory import kernels

    facts, counts = kernels.fact_counts_many(texts)
    return facts / (counts + 5)


def remember_densities(texts: Sequence[str], densities: Sequence[float]) -> None:
    """Take the densities of ``texts`` made by another process (the shared texts file) as known."""
    with _DENSITIES_LOCK:
        _DENSITIES.update(zip(texts, densities))


def _fact_density_python(content: str) -> float:
    """``fact_density`` by the rule as written, for any text: the reference the compiled scan is tested against."""
    tokens = content.split()
    digits = _NUMBER.search(content) is not None  # most turns have none: skip the per-token search
    facts = 0
    sentence_start = True
    for tok in tokens:
        if (
            (digits and _NUMBER.search(tok))
            or (not sentence_start and tok[:1].isupper())
            or tok.strip(FACT_STRIPPED).lower() in FIRST_PERSON
        ):
            facts += 1
        sentence_start = tok.endswith((".", "!", "?"))
    return facts / (len(tokens) + 5)


class Control(Policy):
    """The positive control (info-density): evicts the densest, fact-bearing unit first.

    Deliberately destructive: evidence is where the facts are, so this policy
    must evict gold far more often than the baselines. Ties go to the older unit.
    """

    name = "control"

    def retain(self, units: Sequence[Unit], sizes: Sizes, budget: int, ctx: EvictionContext) -> Mask:
        return _evict_lowest_key(sizes, budget, self.unit_scores(units, ctx))

    def eviction_arrivals(
        self, units: Sequence[Unit], sizes: Sizes, budget: int, ctx: EvictionContext, evicted: Sequence[int]
    ) -> dict[int, int]:
        if type(self).retain is not Control.retain:
            return super().eviction_arrivals(units, sizes, budget, ctx, evicted)
        return _lowest_key_arrivals(sizes, budget, self.unit_scores(units, ctx), evicted)

    def evict(self, units: Sequence[Unit], sizes: Sizes, budget: int, ctx: EvictionContext) -> Eviction:
        if not self._own_pass(Control.retain, Control.eviction_arrivals):
            return super().evict(units, sizes, budget, ctx)
        return _lowest_key_eviction(sizes, budget, self.unit_scores(units, ctx))

    def unit_scores(self, units: Sequence[Unit], ctx: EvictionContext) -> Sequence[float]:
        """Minus each unit's fact density: the densest is evicted first (:class:`ScoredPolicy`). Made once per
        history: every budget's pass and the audit's count of ties read the same."""
        keys: list[float] = _DENSITY_KEYS.get(units).tolist()
        return keys


def _density_keys(units: Sequence[Unit]) -> npt.NDArray[np.float64]:
    """:class:`Control`'s eviction key of each unit: minus its fact density."""
    return np.array([-fact_density(u.content) for u in units], dtype=np.float64)


#: :class:`Control`'s keys of each history: the same for every budget's pass and for its ties.
_DENSITY_KEYS = _PerHistory(_density_keys, lambda made: made.nbytes, 64 << 20)


class PolicyRegistry(Registry[Policy]):
    """Policies by name, in the order they were registered."""

    kind = "policy"
    item_type = Policy
    entry_point_group = "pytest_restore.policies"


BUILTIN_POLICIES: tuple[type[Policy], ...] = (NoEvict, Fifo, RandomPolicy, Redundancy, LlmImportance, Control)

#: Policies every built-in hypothesis family names.
BASELINES = ("fifo", "random", "redundancy")
CONTROL = "control"
REFERENCE = "no-evict"

ENTRY_POINT_GROUP = PolicyRegistry.entry_point_group


def runs_by_default(policy: Policy) -> bool:
    """The one rule for the policies a grid runs when ``--restore-policies`` names none, the same for
    built-in and registered ones: every eviction policy (a store that keeps some of the history's units)
    runs; a memory system of derived memories (:attr:`Policy.derived`: the built-in ``session-summary`` and
    ``fact-extract``, mem0, one of yours) runs only when named. Its errors add a fourth bin and it often
    writes with a model of its own, so joining it is the user's choice."""
    return not policy.derived


def default_registry() -> PolicyRegistry:
    """The built-in policies plus those installed packages declare as entry points."""
    return PolicyRegistry.default(BUILTIN_POLICIES)


def budget_fits(mask: Mask, sizes: Sizes, budget: int) -> bool:
    """Whether a store respects its budget (a check every policy's output must pass)."""
    return int(sizes[mask].sum()) <= budget
