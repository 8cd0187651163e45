"""Reference memory systems that summarise and extract: ``session-summary`` and ``fact-extract``.

Both are :class:`~pytest_restore.memory.systems.MemorySystem`\\ s with their
provenance declared, and neither reads the question or its gold. Each takes
the part that writes its memories as a plug-in: the built-in one is a
deterministic offline model of a summariser or an extractor (what CI runs);
a model-backed one (:mod:`pytest_restore.audit.writers`) asks a language
model through the model layer.

``session-summary``
    The open session's turns are held as they are. When a session closes
    (the next unit is of another session, or the history ends) its turns are
    replaced by what its :class:`Summarizer` writes: one summary citing every
    turn it was made from. Under the budget the oldest summary goes first,
    then the open session's oldest turn. The built-in summariser
    (:class:`ExtractiveSummary`) keeps a fixed share (``keep``) of the
    session's sentences, the most salient ones, in their order; a sentence's
    salience is its fact density (numbers, names and first-person words per
    word: :func:`pytest_restore.memory.eviction.fact_density`), ties to the
    earlier sentence.

``fact-extract``
    Each turn becomes zero or more short facts (its :class:`Extractor`). A
    new fact that restates a held one (their content words overlap by at least
    ``restate``, Jaccard) replaces it, citing the turns of both (an update);
    otherwise it is added. Under the budget the oldest fact goes first. The
    built-in extractor (:class:`SentenceFacts`) takes a turn's sentences whose
    fact density reaches ``min_density``, the ``per_turn`` densest of them, each
    cut to its first ``max_words`` words, with markdown emphasis removed and
    the speaker's role in front (``user: ...``).

The knobs are compression ratios: a smaller ``keep`` or ``max_words`` holds
less of each turn, so more of the evidence a question needs can be lost
while a memory still cites it (the audit's distorted bin).
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from pytest_restore.data.units import Unit
from pytest_restore.data.words import words
from pytest_restore.memory.eviction import (
    BUILTIN_POLICIES,
    EvictionContext,
    Policy,
    PolicyRegistry,
    fact_density,
)
from pytest_restore.memory.memories import Memory
from pytest_restore.memory.systems import MemorySystem, ReplyHooks

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\s*\n\s*")
_EMPHASIS = re.compile(r"[*_`]+")


@lru_cache(maxsize=1 << 16)
def sentences(text: str) -> tuple[str, ...]:
    """A text's sentences: split after ``.``, ``!`` or ``?`` followed by a space, and at line breaks; empty ones dropped."""
    return tuple(s.strip() for s in _SENTENCE_END.split(text) if s.strip())


def key_sentence(text: str) -> str:
    """The text's most fact-dense sentence (:func:`fact_density`), ties to the earlier one; ``""`` for no sentence."""
    best, score = "", -1.0
    for sentence in sentences(text):
        density = fact_density(sentence)
        if density > score:
            best, score = sentence, density
    return best


# -- session-summary ---------------------------------------------------------------------


class Summarizer(ReplyHooks, ABC):
    """What a closed session becomes: the memories that replace its turns (each citing the turns it came from)."""

    @abstractmethod
    def summarize(self, turns: Sequence[Unit]) -> list[Memory]:
        """The memories written for one closed session's held turns (in order, at least one)."""

    def request(self, turns: Sequence[Unit]) -> Hashable | None:
        """The model request that writes this session's summary (``None``: written without a model)."""
        return None


@dataclass(frozen=True)
class ExtractiveSummary(Summarizer):
    """The offline summariser: the most salient ``keep`` share of the session's sentences, in their order."""

    #: the share of the session's sentences kept (at least one sentence)
    keep: float = 0.25

    def summarize(self, turns: Sequence[Unit]) -> list[Memory]:
        found = [s for turn in turns for s in sentences(turn.content)]
        count = max(1, math.ceil(self.keep * len(found))) if found else 0
        ranked = sorted(range(len(found)), key=lambda i: (-fact_density(found[i]), i))[:count]
        text = " ".join(found[i] for i in sorted(ranked))
        return [Memory(text, turns[-1].date, tuple(t.position for t in turns))]


class SessionSummary(MemorySystem):
    """``session-summary``: each closed session replaced by its summary; summaries evicted oldest first."""

    name = "session-summary"

    def __init__(self, summarizer: Summarizer | None = None) -> None:
        self.summarizer = summarizer or ExtractiveSummary()

    def reset(self, budget: int, ctx: EvictionContext) -> None:
        self.budget = budget
        self.summaries: list[tuple[Memory, int]] = []  # oldest first, with their sizes
        self.open: list[tuple[Unit, int, Memory]] = []  # held as they are: each its own size, one Memory each

    def add(self, unit: Unit) -> None:
        if self.open and self.open[-1][0].session != unit.session:
            self._close()
        self.open.append((unit, unit.tokens, Memory.of(unit)))
        self._fit()

    def finish(self) -> None:
        if self.open:
            self._close()

    def requests(self, units: Sequence[Unit]) -> list[Hashable]:
        sessions: list[list[Unit]] = []
        for unit in units:  # a session closes when a unit of another arrives, as add does it
            if not sessions or sessions[-1][-1].session != unit.session:
                sessions.append([])
            sessions[-1].append(unit)
        return [r for turns in sessions if (r := self.summarizer.request(turns)) is not None]

    def supply(self, replies: Mapping[Hashable, str]) -> None:
        self.summarizer.supply(replies)

    def unusable(self, request: Hashable, reply: str) -> str | None:
        return self.summarizer.unusable(request, reply)

    def _close(self) -> None:
        written = self.summarizer.summarize([u for u, _, _ in self.open])
        self.summaries.extend((m, self.tokens(m)) for m in written)
        self.open = []
        self._fit()

    def _fit(self) -> None:
        total = sum(size for _, size in self.summaries) + sum(size for _, size, _ in self.open)
        while total > self.budget and (self.summaries or self.open):
            size = (self.summaries.pop(0) if self.summaries else self.open.pop(0))[1]
            total -= size

    def memories(self) -> list[Memory]:
        return [m for m, _ in self.summaries] + [m for _, _, m in self.open]


# -- fact-extract ------------------------------------------------------------------------


class Extractor(ReplyHooks, ABC):
    """What one turn becomes: the texts of zero or more short facts."""

    @abstractmethod
    def extract(self, unit: Unit) -> list[str]:
        """The facts of one turn, in order."""

    def request(self, unit: Unit) -> Hashable | None:
        """The model request that writes this turn's facts (``None``: written without a model)."""
        return None


@dataclass(frozen=True)
class SentenceFacts(Extractor):
    """The offline extractor: the turn's densest sentences, cut short (module docstring)."""

    #: the fact density a sentence needs to be a fact
    min_density: float = 0.1
    #: at most this many facts per turn
    per_turn: int = 2
    #: a fact keeps the first this many words of its sentence
    max_words: int = 16

    def extract(self, unit: Unit) -> list[str]:
        found = sentences(unit.content)
        dense = [i for i in range(len(found)) if fact_density(found[i]) >= self.min_density]
        chosen = sorted(sorted(dense, key=lambda i: (-fact_density(found[i]), i))[: self.per_turn])
        return [f"{unit.role}: " + " ".join(_EMPHASIS.sub("", found[i]).split()[: self.max_words]) for i in chosen]


class FactExtract(MemorySystem):
    """``fact-extract``: each turn's facts added, a restating fact replacing the one it restates; oldest out first."""

    name = "fact-extract"

    def __init__(self, extractor: Extractor | None = None, restate: float = 0.5) -> None:
        self.extractor = extractor or SentenceFacts()
        #: the content-word overlap (Jaccard) from which a new fact restates a held one
        self.restate = restate

    def reset(self, budget: int, ctx: EvictionContext) -> None:
        self.budget = budget
        self.total = 0
        self.facts: dict[int, tuple[Memory, frozenset[str], int]] = {}  # by arrival order: oldest first
        self.index: dict[str, set[int]] = {}  # content word -> the held facts holding it
        self.next_id = 0

    def add(self, unit: Unit) -> None:
        for text in self.extractor.extract(unit):
            content = frozenset(words(text)) - {unit.role}
            sources: tuple[int, ...] = (unit.position,)
            old = self._restated(content)
            if old is not None:
                sources = tuple(sorted({*self.facts[old][0].sources, unit.position}))
                self._drop(old)
            memory = Memory(text, unit.date, sources)
            self.facts[self.next_id] = (memory, content, self.tokens(memory))
            for word in content:
                self.index.setdefault(word, set()).add(self.next_id)
            self.total += self.facts[self.next_id][2]
            self.next_id += 1
        while self.total > self.budget and self.facts:
            self._drop(next(iter(self.facts)))

    def _restated(self, content: frozenset[str]) -> int | None:
        """The held fact this one restates (the most overlapping, then the newest), or ``None``."""
        shared: dict[int, int] = {}
        for word in content:
            for held in self.index.get(word, ()):
                shared[held] = shared.get(held, 0) + 1
        best: tuple[float, int] | None = None
        for held, n in shared.items():
            jaccard = n / len(content | self.facts[held][1])
            if jaccard >= self.restate and (best is None or (jaccard, held) > best):
                best = (jaccard, held)
        return best[1] if best is not None else None

    def _drop(self, key: int) -> None:
        _, content, size = self.facts.pop(key)
        self.total -= size
        for word in content:
            self.index[word].discard(key)

    def memories(self) -> list[Memory]:
        return [m for m, _, _ in self.facts.values()]

    def requests(self, units: Sequence[Unit]) -> list[Hashable]:
        return [r for unit in units if (r := self.extractor.request(unit)) is not None]

    def supply(self, replies: Mapping[Hashable, str]) -> None:
        self.extractor.supply(replies)

    def unusable(self, request: Hashable, reply: str) -> str | None:
        return self.extractor.unusable(request, reply)


#: The built-in memory systems that hold derived memories (after ``BUILTIN_POLICIES`` in every registry).
BUILTIN_SYSTEMS: tuple[type[Policy], ...] = (SessionSummary, FactExtract)


def default_policies() -> PolicyRegistry:
    """Every built-in policy and memory system, plus those installed packages declare as entry points."""
    return PolicyRegistry.default((*BUILTIN_POLICIES, *BUILTIN_SYSTEMS))
