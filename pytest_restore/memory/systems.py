"""Memory systems that hold derived memories: the two adapters, provenance declared or captured.

A :class:`MemorySystem` is a :class:`~pytest_restore.memory.eviction.Policy`
whose store is a set of :class:`~pytest_restore.memory.memories.Memory`
objects rather than a subset of the history's units. It is registered and
named like any policy (``--restore-policies``); the audit drives it through
:meth:`MemorySystem.hold`, which feeds it the history in order and checks,
after every arrival, that each held memory cites only units already
received and that the memories held fit the budget (o200k_base tokens of
their snippets). Each violation is a :class:`MemorySystemError` (a
``ValueError``) in one line naming the system, the question and the arrival:
the grid item of its cell fails with that line, not a traceback.

- :class:`MemorySystem`: the system declares provenance. Implement
  :meth:`~MemorySystem.reset`, :meth:`~MemorySystem.add` and
  :meth:`~MemorySystem.memories` (each memory with its sources).
- :class:`CapturedMemorySystem`: the system cannot say where its memories
  came from. Implement :meth:`~CapturedMemorySystem.start`,
  :meth:`~CapturedMemorySystem.ingest` and :meth:`~CapturedMemorySystem.held`
  (the system's own id of each memory -> its text and date); the adapter
  compares what is held before and after each arrival: a memory that is new,
  or whose text or date changed, cites the arriving unit, added to what it
  cited before.

A system sees units (content, date, role, size) and never the question or its gold.

A system that calls a model of its own (mem0) accounts for it after each
store in :meth:`MemorySystem.figures`: its calls by kind, the calls that got
no answer, and the answers it could not use (:class:`SystemFigures`); the
audit adds what every system's stores held, and the report shows them per
cell (nothing a system drops goes uncounted).
"""

from __future__ import annotations

from abc import abstractmethod
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypedDict

from pytest_restore.data.tokens import count_tokens
from pytest_restore.data.units import Unit
from pytest_restore.memory.eviction import EvictionContext, Mask, Policy, Sizes
from pytest_restore.memory.memories import MEMORY_ROLE, Memory, memory_tokens


class MemorySystemError(ValueError):
    """A memory system broke the adapter's rules: one line naming the system, the question and the unit."""


@dataclass(frozen=True)
class Held:
    """What a memory system holds at a history's end, and when each unit it lost left it (:meth:`MemorySystem.trace`)."""

    memories: list[Memory]
    #: each unit no held memory cites: the position of the unit whose arrival left it cited by no memory
    #: for good (its own when no memory ever cited it); ``None``: lost when the history ended (``finish``)
    lost: Mapping[int, int | None]


class _LibraryFiguresJSON(TypedDict, total=False):
    """What a memory library's figures add (absent for every other system: their JSON as before)."""

    library: str
    ingest_seconds: float
    embedder: str
    embedding_tokens: int


class SystemFiguresJSON(_LibraryFiguresJSON):
    """:class:`SystemFigures` as ``summary.json`` keeps it (``run.checks.memory_systems``)."""

    stores: int
    units: int
    held: int
    calls: dict[str, int]
    failed: dict[str, int]
    rejected: dict[str, dict[str, int]]
    events: dict[str, int]
    evicted: int
    held_tokens: int


@dataclass
class SystemFigures:
    """What a memory system did building some stores: fed, held, its own model calls and what it dropped.

    ``calls``, ``failed`` and ``rejected`` are by the kind of call (mem0's
    ``fact extraction`` and ``memory update``; a model-written system's
    ``writer``): ``failed`` counts calls that got no answer, ``rejected`` the
    answers that came back and that the system could not use, by cause.
    """

    #: stores built (one per history and seed)
    stores: int = 0
    #: units fed to them
    units: int = 0
    #: memories held at the histories' ends
    held: int = 0
    calls: Counter[str] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)
    rejected: dict[str, Counter[str]] = field(default_factory=dict)
    #: what the system reported doing, by kind (mem0's ``ADD``, ``UPDATE``, ``DELETE``)
    events: Counter[str] = field(default_factory=Counter)
    #: memories let go to keep within the budget, where the system says so
    evicted: int = 0
    #: the tokens of the memories held at the histories' ends, as the budget counts them
    held_tokens: int = 0
    #: a memory library's distribution and version (``mem0ai 2.2.1``; several joined by ``, ``), else empty
    library: str = ""
    #: seconds a memory library's stores took to make and feed (the audit times every library alike, around
    #: the whole history: the library's own work, its model calls and the adapter's reads of what it holds)
    ingest_seconds: float = 0.0
    #: the embedder a memory library's embeddings went to through the run's gateway (its run name: ``fake``,
    #: ``openai:MODEL``; several joined by ``, ``), and the o200k_base tokens of the texts its stores asked it to
    #: embed, read from disk or not (what they cost, whoever paid it this time); "" and 0: none
    embedder: str = ""
    embedding_tokens: int = 0

    def reject(self, kind: str, cause: str, n: int = 1) -> None:
        """Count ``n`` answers of a ``kind`` of call the system could not use, for ``cause``."""
        self.rejected.setdefault(kind, Counter())[cause] += n

    def rejected_of(self, kind: str) -> int:
        """How many answers of ``kind`` were rejected, whatever the cause."""
        return sum(self.rejected.get(kind, Counter()).values())

    def __add__(self, other: SystemFigures) -> SystemFigures:
        out = SystemFigures(
            self.stores + other.stores, self.units + other.units, self.held + other.held,
            self.calls + other.calls, self.failed + other.failed, {},
            self.events + other.events, self.evicted + other.evicted, self.held_tokens + other.held_tokens,
            ", ".join(sorted({v for f in (self, other) for v in f.library.split(", ") if v})),
            self.ingest_seconds + other.ingest_seconds,
            ", ".join(sorted({v for f in (self, other) for v in f.embedder.split(", ") if v})),
            self.embedding_tokens + other.embedding_tokens,
        )
        for figures in (self, other):
            for kind, causes in figures.rejected.items():
                for cause, n in causes.items():
                    out.reject(kind, cause, n)
        return out

    def to_json(self) -> SystemFiguresJSON:
        """The figures as plain, sorted JSON values (a library's own only for a library)."""
        out: SystemFiguresJSON = {
            "stores": self.stores,
            "units": self.units,
            "held": self.held,
            "calls": dict(sorted(self.calls.items())),
            "failed": dict(sorted(self.failed.items())),
            "rejected": {k: dict(sorted(c.items())) for k, c in sorted(self.rejected.items())},
            "events": dict(sorted(self.events.items())),
            "evicted": self.evicted,
            "held_tokens": self.held_tokens,
        }
        if self.library:
            out["library"] = self.library
            out["ingest_seconds"] = round(self.ingest_seconds, 3)
        if self.embedder:
            out["embedder"] = self.embedder
            out["embedding_tokens"] = self.embedding_tokens
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SystemFigures:
        """Read :meth:`to_json`'s form back."""
        return cls(
            int(data["stores"]), int(data["units"]), int(data["held"]),
            Counter(data["calls"]), Counter(data["failed"]),
            {k: Counter(c) for k, c in data["rejected"].items()},
            Counter(data["events"]), int(data["evicted"]), int(data.get("held_tokens", 0)),
            str(data.get("library", "")), float(data.get("ingest_seconds", 0.0)),
            str(data.get("embedder", "")), int(data.get("embedding_tokens", 0)),
        )


class ReplyHooks:
    """How a writer of memories takes the model's replies to its requests, declared once.

    A memory system (:meth:`MemorySystem.requests`) and the writers it may
    hand its writing to (``memory.derived``'s ``Summarizer`` and
    ``Extractor``, each with its own ``request``) list model requests; the
    audit sends them through the run's model layer and gives the replies to
    :meth:`supply` before the system is fed, counting those :meth:`unusable`
    calls useless as the writer's rejected answers.
    """

    def supply(self, replies: Mapping[Hashable, str]) -> None:
        """The replies to the requests, by request (default: nothing to keep)."""

    def unusable(self, request: Hashable, reply: str) -> str | None:
        """Why the reply to one request gives nothing to hold (``None``: it is usable; default: every reply is).

        The system is still given such a reply and does with it what it does.
        """
        return None


class MemorySystem(ReplyHooks, Policy):
    """A memory system that holds memories with declared provenance (module docstring)."""

    derived: ClassVar[bool] = True
    #: how many of its stores (histories) a process may build at once, each by its own shallow copy of the
    #: system (``copy.copy``, made before :meth:`reset`) on a thread of its own: 1 (the default) builds one
    #: at a time. A library whose stores wait on its model calls allows more, and so keeps a model server
    #: busy; the audit takes at most the run's concurrency. A system that allows more keeps a store's state
    #: on the copy (set in :meth:`reset`) and shares only what is safe across threads.
    parallel_stores: ClassVar[int] = 1

    @abstractmethod
    def reset(self, budget: int, ctx: EvictionContext) -> None:
        """Start an empty system for one history under ``budget`` tokens."""

    @abstractmethod
    def add(self, unit: Unit) -> None:
        """Receive the next unit, in chronological order (evict here as needed)."""

    @abstractmethod
    def memories(self) -> Iterable[Memory]:
        """The memories held now, each citing the units it was derived from."""

    def finish(self) -> None:
        """Called once after the last unit arrived (a session-closing system closes the last one here)."""

    def requests(self, units: Sequence[Unit]) -> list[Hashable]:
        """The model requests (``models.base.ChatRequest``) the system needs to hold ``units`` (default: none).

        A system that writes its memories with a model lists them here: the
        audit sends every history's at once through the run's model layer
        (cached, batched, priced; the dry run counts them) and gives the
        replies to :meth:`supply` before it feeds the system.
        """
        return []

    def figures(self) -> SystemFigures | None:
        """The system's own account of the store it last built (after :meth:`finish`): the model calls it made
        itself by kind, those that failed, the answers it rejected by cause, its events (default: ``None``,
        it calls no model of its own). The audit counts the stores, units and memories held."""
        return None

    @staticmethod
    def tokens(memory: Memory) -> int:
        """A memory's size as the budget counts it: o200k_base tokens of its snippet."""
        return count_tokens([memory.snippet])[0]

    def retain(self, units: Sequence[Unit], sizes: Sizes, budget: int, ctx: EvictionContext) -> Mask:
        raise TypeError(f"memory system {self.name!r} holds memories, not units: read it with hold()")

    def hold(self, units: Sequence[Unit], sizes: Sizes, budget: int, ctx: EvictionContext) -> list[Memory]:
        """Feed the history in order and return what is held at its end, checked after every arrival."""
        return self.trace(units, sizes, budget, ctx).memories

    def trace(self, units: Sequence[Unit], sizes: Sizes, budget: int, ctx: EvictionContext) -> Held:
        """:meth:`hold`, and when each unit no memory cites at the end lost its last citing memory (one pass)."""
        self.reset(budget, ctx)
        held: list[Memory] = []
        cited_until: dict[int, int] = {}  # unit -> the last arrival after which a held memory cited it
        checked: dict[int, tuple[Memory, int]] = {}  # the memories checked so far, with their sizes (_checked)
        for pos, unit in enumerate(units):
            self.add(unit)
            held = self._checked(units, pos, budget, ctx, checked)
            for memory in held:
                for source in memory.sources:
                    cited_until[source] = pos
        self.finish()
        if units:
            held = self._checked(units, len(units) - 1, budget, ctx, checked, ended=True)
        cited = {s for memory in held for s in memory.sources}
        last = len(units) - 1
        lost: dict[int, int | None] = {}
        for pos in range(len(units)):
            if pos in cited:
                continue
            until = cited_until.get(pos)
            # never cited: its own arrival left nothing of it; cited to the last arrival: lost at the close
            lost[pos] = pos if until is None else None if until == last else until + 1
        return Held(held, lost)

    def _checked(
        self,
        units: Sequence[Unit],
        arrived: int,
        budget: int,
        ctx: EvictionContext,
        checked: dict[int, tuple[Memory, int]],
        *,
        ended: bool = False,
    ) -> list[Memory]:
        """What the system holds after unit ``arrived``, each memory checked, the whole within ``budget``.

        ``checked`` (one per history) keeps each memory object already checked, by identity, with
        its size. A memory is frozen: one held since an earlier arrival cites only units received
        before it, and is neither checked nor sized again (a store of hundreds of memories was
        re-checked at every arrival: 60% of fact-extract's time over a history).
        """
        when = "after the history ended" if ended else f"after unit {arrived} arrived"
        where = f"memory system {self.name!r} on {ctx.question_id} {when}"
        held = list(self.memories())
        new = [m for m in held if checked.get(id(m), (None,))[0] is not m]
        if new:
            for memory in new:
                _check_memory(memory, where, arrived)
            # a raw-turn memory's size is its unit's (the same count: memory_view reads it so)
            raw = [m.role != MEMORY_ROLE and m.is_raw(units) for m in new]
            counted = iter(memory_tokens([m for m, r in zip(new, raw) if not r]) if self.budgeted else ())
            for memory, r in zip(new, raw):
                checked[id(memory)] = (memory, units[memory.sources[0]].tokens if r else next(counted, 0))
        if self.budgeted:
            total = sum(checked[id(m)][1] for m in held)
            if total > budget:
                raise MemorySystemError(f"{where}: holds {total} tokens, over its budget of {budget}")
        return held


def _check_memory(memory: object, where: str, arrived: int) -> None:
    """One memory a system holds, as the adapter takes it: a :class:`Memory` of text, date and the units
    it cites, each already received. Each break of the rules is one line (the system's own values
    would otherwise fail deep in the audit, as a ``TypeError`` naming no system)."""
    if not isinstance(memory, Memory):
        raise MemorySystemError(f"{where}: holds a {type(memory).__name__}, not a Memory")
    for field_name in ("text", "date"):
        value = getattr(memory, field_name)
        if not isinstance(value, str):
            raise MemorySystemError(
                f"{where}: holds a Memory whose {field_name} is {_shown(value)}, not a str"
            )
    sources = memory.sources
    if not isinstance(sources, tuple | list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in sources):
        raise MemorySystemError(
            f"{where}: holds a memory whose sources are {_shown(sources)}, not a tuple of unit positions"
        )
    if not sources:
        raise MemorySystemError(f"{where}: holds a memory that cites no unit ({memory.text[:40]!r})")
    bad = next((s for s in sources if not 0 <= s <= arrived), None)
    if bad is not None:
        raise MemorySystemError(f"{where}: holds a memory citing unit {bad}, which it has not received")


def _shown(value: object) -> str:
    """A value a system gave, for a one-line message: its type and a short repr."""
    text = repr(value)
    return f"{type(value).__name__} {text[:40] + '...' if len(text) > 40 else text}"


class CapturedMemorySystem(MemorySystem):
    """A memory system that cannot say where its memories came from; the adapter captures it (module docstring)."""

    @abstractmethod
    def start(self, budget: int, ctx: EvictionContext) -> None:
        """Start an empty system for one history under ``budget`` tokens."""

    @abstractmethod
    def ingest(self, unit: Unit) -> None:
        """Receive the next unit, in chronological order."""

    @abstractmethod
    def held(self) -> Mapping[Hashable, tuple[str, str]]:
        """What the system holds now: its own id of each memory -> ``(text, date)``."""

    def close(self) -> None:
        """Called once after the last unit arrived (default: nothing). A memory changed here keeps its
        sources; one made here, from no arriving unit, is an error."""

    def reset(self, budget: int, ctx: EvictionContext) -> None:
        self._sources: dict[Hashable, tuple[int, ...]] = {}
        self._seen: dict[Hashable, tuple[str, str]] = {}
        self._where = f"memory system {self.name!r} on {ctx.question_id}"
        self.start(budget, ctx)

    def add(self, unit: Unit) -> None:
        self.ingest(unit)
        self._capture(unit.position)

    def finish(self) -> None:
        self.close()
        self._capture(None)

    def _capture(self, position: int | None) -> None:
        """Whatever was created or changed while ``position`` was ingested cites it (``None``: none arrived)."""
        when = "after the history ended" if position is None else f"after unit {position} arrived"
        held = self.held()
        if not isinstance(held, Mapping):
            raise MemorySystemError(
                f"{self._where} {when}: held() returned a {type(held).__name__}, not a mapping of its ids to (text, date)"
            )
        now: dict[Hashable, tuple[str, str]] = {}
        for key, value in held.items():
            if not (isinstance(value, tuple | list) and len(value) == 2 and all(isinstance(v, str) for v in value)):
                raise MemorySystemError(
                    f"{self._where} {when}: held() gives memory {key!r} as {_shown(value)}, not (text, date)"
                )
            now[key] = (value[0], value[1])
        sources: dict[Hashable, tuple[int, ...]] = {}
        for key, value in now.items():
            before = self._sources.get(key, ())
            if position is not None and self._seen.get(key) != value:
                sources[key] = tuple(sorted({*before, position}))
            elif before:
                sources[key] = before
            else:
                raise MemorySystemError(f"{self._where}: memory {key!r} appeared after the history ended, citing no unit")
        self._sources, self._seen = sources, now

    def memories(self) -> list[Memory]:
        return [Memory(text, date, self._sources[key]) for key, (text, date) in self._seen.items()]
