"""The skeleton every library adapter is built on: :class:`LibrarySystem` and :class:`LibraryRanker`.

An adapter of a deployed memory library (mem0, graphiti, langmem, cognee)
is a :class:`~pytest_restore.memory.systems.MemorySystem` whose store is
the library's own; what differs between them is how a unit is ingested,
where provenance comes from and how the library deletes. What they share
lives here, once:

- :class:`LibraryTally`: what one store cost and held (the history, the
  budget, the store's :class:`~pytest_restore.memory.systems.SystemFigures`,
  the memories and tokens held at its end); each adapter's ``tallies`` lists
  its stores' in order.
- :class:`LibrarySystem`: the endpoints its calls go to (by default the run's
  gateway), ``budgeted``, a deadline, ``tallies``, ``version`` (the installed
  distribution's), the ``store`` being built, the failure line
  (:meth:`~LibrarySystem.failure`), the held memories read from the store's
  ``(text, sources)`` by key, eviction of the oldest while over the budget
  (:meth:`~LibrarySystem.oldest_over_budget`), and the table of finished
  stores its ranker searches (``live``, one per adapter class).
- :class:`LibraryRanker`: the library's own search as a ranker: the question's
  finished store found in its system's ``live`` table by (history, held
  texts), each result placed at the view's units holding its text, and one
  error for a store that is not the library's.

An adapter imports what it builds on from here alone: these classes, and
:mod:`.guest`'s names an adapter uses (its endpoints and their default, the
deadline, the event loop of the async libraries, the failure line and
:func:`~.guest.importing` around its library's imports).
"""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import numpy as np

from pytest_restore.data.units import History, Unit
from pytest_restore.libraries.guest import (
    DEFAULT_GUEST_DEADLINE,
    EndpointsSource,
    GuestFailure,
    LibraryEndpoints,
    StoreLoop,
    guest_failure,
    importing,
    library_version,
    resolve_endpoints,
    run_endpoints,
)
from pytest_restore.memory.eviction import EvictionContext
from pytest_restore.memory.memories import MEMORY_ROLE, Memory, memory_tokens
from pytest_restore.memory.retrieval import Ranker, Store
from pytest_restore.memory.systems import MemorySystem, SystemFigures

#: How a finished store is found again: its history's key and the texts it held, sorted.
LiveKey = tuple[str, tuple[str, ...]]


def live_key(question: str, texts: Iterable[str]) -> LiveKey:
    """The key of a finished store in its system's ``live`` table."""
    return question, tuple(sorted(texts))


@dataclass
class LibraryTally:
    """One store a library built: the history, the budget, what the library did, the held size."""

    question: str
    budget: int
    #: units fed, model calls by kind, the answers it dropped by kind and cause, its events, the evicted
    figures: SystemFigures = field(default_factory=lambda: SystemFigures(stores=1))
    held: int = 0
    held_tokens: int = 0


class LibraryStore(Protocol):
    """What the skeleton reads of an adapter's store: its tally."""

    tally: LibraryTally


S = TypeVar("S", bound=LibraryStore)
T = TypeVar("T")


class LibraryVersion(str):
    """A library's installed version (``"1.0.11"``, ``"not installed"``): a str, and callable as
    ``System.version()`` (the spelling three adapters had; mem0's was the str)."""

    def __call__(self) -> str:
        return str(self)


class _Version:
    """``version`` on an adapter class or instance: the installed version of its ``distribution``."""

    def __get__(self, instance: object, owner: type[LibrarySystem[Any]]) -> LibraryVersion:
        return LibraryVersion(library_version(owner.distribution))


class LibrarySystem(MemorySystem, Generic[S]):
    """A deployed memory library as a memory system: the skeleton (module docstring) its adapter fills in.

    A subclass sets ``name`` (the policy's, also the library's in failure
    lines) and ``distribution``, makes its store in :meth:`reset` (calling
    :meth:`begin` first), ingests in ``add`` and gives what the store holds
    by key in :meth:`held_items`.
    """

    #: the distribution whose version the report names (``mem0ai``, ``graphiti-core``)
    distribution: ClassVar[str]
    #: every finished store of the process by :func:`live_key`: what the library's ranker searches (one table
    #: per adapter class)
    live: ClassVar[dict[LiveKey, Any]]
    #: the installed version of :attr:`distribution` (a str, also callable)
    version = _Version()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "live" not in cls.__dict__:
            cls.live = {}

    def __init__(
        self, endpoints: EndpointsSource = run_endpoints, *, budgeted: bool = True, deadline: float = DEFAULT_GUEST_DEADLINE,
    ) -> None:
        """``endpoints``: where the library's model calls go (default: the run's gateway, started on the first
        store); ``budgeted=False``: hold everything, as ``no-evict``; ``deadline``: seconds one of the library's
        calls (an ingestion, a search) may take."""
        self.endpoints = endpoints
        self.budgeted = budgeted  # type: ignore[misc]  # per instance: the library with or without a budget
        self.deadline = deadline
        #: the tallies of the stores this instance built, in order
        self.tallies: list[LibraryTally] = []
        self.question_id = ""
        self._store: S | None = None
        self._units: list[Unit] = []

    @property
    def store(self) -> S:
        """The store being built (or last built)."""
        if self._store is None:
            raise RuntimeError(f"memory system {self.name!r}: no store yet (reset() first)")
        return self._store

    @store.setter
    def store(self, store: S) -> None:
        self._store = store

    def begin(self, budget: int, ctx: EvictionContext) -> LibraryTally:
        """The head of every :meth:`reset`: the question and budget noted, a new tally listed, no unit yet."""
        self.question_id = ctx.question_id
        self.budget = budget
        self._units = []
        tally = LibraryTally(ctx.question_id, budget)
        self.tallies.append(tally)
        return tally

    def imported(self, load: Callable[[], T]) -> T:
        """``load()``, the library's import: a library that cannot be imported is the one line naming it and
        the question (:class:`~.guest.GuestImportFailure`, an ``ImportError`` too) with its install line."""
        try:
            return load()
        except ImportError as err:
            raise self.failure("import", err) from None

    def resolved_endpoints(self) -> LibraryEndpoints:
        """The endpoints :attr:`endpoints` names (the run's gateway started here when it is the default)."""
        return resolve_endpoints(self.endpoints)

    def failure(self, what: str, err: BaseException | str) -> GuestFailure:
        """The library's failure at ``what`` on this store's question, in one redacted line."""
        return guest_failure(self.name, self.question_id, what, err)

    def add(self, unit: Unit) -> None:
        """:meth:`ingest` the unit through the library (timed: the store's ``ingest_seconds``), then, budgeted,
        :meth:`delete_oldest` while over the budget."""
        started = time.monotonic()
        self.ingest(unit)
        self.store.tally.figures.ingest_seconds += time.monotonic() - started
        if self.budgeted:
            self.delete_oldest(unit)

    @abstractmethod
    def ingest(self, unit: Unit) -> None:
        """Feed ``unit`` to the library, note it (:meth:`received`) and read what it holds now."""

    @abstractmethod
    def delete_oldest(self, unit: Unit) -> None:
        """Delete the oldest memories through the library while those held are over the budget
        (:meth:`oldest_over_budget`), after ``unit`` arrived."""

    def received(self, unit: Unit) -> None:
        """Note that ``unit`` was ingested (a held memory's date is its newest source's)."""
        self._units.append(unit)
        self.store.tally.figures.units += 1

    @abstractmethod
    def held_items(self) -> Mapping[str, tuple[str, tuple[int, ...]]]:
        """What the store holds now: each memory's text and the units it cites, by the library's key."""

    def held_memories(self) -> dict[str, Memory]:
        """Each held memory by the library's key: its text, the date of its newest source, its sources."""
        return {
            key: Memory(text, self._units[max(sources)].date, sources) for key, (text, sources) in self.held_items().items()
        }

    def memories(self) -> list[Memory]:
        return sorted(self.held_memories().values(), key=lambda m: (m.sources, m.text))

    def oldest_over_budget(self, order: Mapping[str, int]) -> Iterator[str]:
        """The keys to delete, oldest first, while what is held is over the budget (oldest: whose newest source
        is earliest, then by ``order``, the library's order of first sight). Each key the caller takes is
        counted as evicted; the caller deletes it through the library before asking for the next."""
        held = self.held_memories()
        sizes = dict(zip(held, memory_tokens(list(held.values()))))
        total = sum(sizes.values())
        for key in sorted(held, key=lambda k: (max(held[k].sources), order[k])):
            if total <= self.budget:
                return
            yield key
            total -= sizes[key]
            self.store.tally.figures.evicted += 1

    def finish(self) -> None:
        store = self.store
        held = self.memories()
        store.tally.held, store.tally.held_tokens = len(held), sum(memory_tokens(held))
        store.tally.figures.library = f"{self.distribution} {self.version}"
        self.keep_live(live_key(store.tally.question, (m.text for m in held)), store)

    def keep_live(self, key: LiveKey, store: S) -> None:
        """Keep a finished store for the ranker (default: every one of the process)."""
        type(self).live[key] = store

    def figures(self) -> SystemFigures:
        """What the library did building the store it last built: its calls by kind, the answers it could not
        use, its events."""
        return self.store.tally.figures


@dataclass
class LibrarySearch:
    """A question's finished store and the view's positions of each held text (the ranker's state)."""

    store: Any
    positions: dict[str, list[int]]
    #: the ranking by ``k`` asked
    results: dict[int, list[int]] = field(default_factory=dict)


class LibraryRanker(Ranker):
    """A library's own search over its finished stores, best first: a subclass sets ``name`` and ``system``
    and implements :meth:`search`.

    A result is placed at the view's unit that holds its text (two memories
    of one text: both, in view order). Units the library does not hold (the
    raw gold turns the restore adds) are not ranked: the restore forces them
    anyway.
    """

    #: the adapter whose ``live`` stores this ranker searches
    system: ClassVar[type[LibrarySystem[Any]]]

    @staticmethod
    def view(history: History) -> tuple[LiveKey, dict[str, list[int]]]:
        """The question's store key and the view's positions of each held text."""
        derived = [u for u in history.units if u.role == MEMORY_ROLE]
        positions: dict[str, list[int]] = {}
        for unit in derived:
            positions.setdefault(unit.content, []).append(unit.position)
        return live_key(history.question.history_key, (u.content for u in derived)), positions

    def prepare(self, history: History) -> LibrarySearch | None:
        key, positions = self.view(history)
        store = self.system.live.get(key)
        if store is None:
            return None  # a raw history, or another system's memories: ranking it is the error
        return LibrarySearch(store, positions)

    def not_its_store(self, history: History) -> ValueError:
        """The error for a question whose store is not one of the library's."""
        return ValueError(
            f"ranker {self.name!r} reads only the stores of the memory system {self.system.name!r}; "
            f"{history.question.question_id} was given another's"
        )

    def rank(self, history: History, store: Store, k: int, state: Any) -> list[int]:
        if state is None:
            raise self.not_its_store(history)
        if k not in state.results:
            try:
                found = self.search(history, state, max(k, 1))
            except GuestFailure:
                raise
            except Exception as err:
                raise guest_failure(self.system.name, history.question.question_id, "search", err) from err
            state.results[k] = list(dict.fromkeys(found))
        members = np.asarray(store, dtype=bool)
        return [p for p in state.results[k] if members[p]][:k]

    @abstractmethod
    def search(self, history: History, state: LibrarySearch, k: int) -> list[int]:
        """The view's positions of the library's top ``k`` results for the question, best first."""

    @staticmethod
    def placed(state: LibrarySearch, texts: Iterable[str]) -> list[int]:
        """The view's positions of ``texts`` (the library's results, best first)."""
        return [p for text in texts for p in state.positions.get(text, [])]


__all__ = [
    "DEFAULT_GUEST_DEADLINE",
    "EndpointsSource",
    "LibraryEndpoints",
    "LibraryRanker",
    "LibrarySearch",
    "LibraryStore",
    "LibrarySystem",
    "LibraryTally",
    "LibraryVersion",
    "LiveKey",
    "StoreLoop",
    "guest_failure",
    "importing",
    "live_key",
    "run_endpoints",
]
