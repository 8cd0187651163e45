"""Memories with provenance: what a memory system holds when it keeps more than raw turns.

A memory system is fed a question's history one unit at a time, in
chronological order, as a :class:`~pytest_restore.memory.eviction.MemoryStore`
is. What it holds is a set of *memories*: each has its text, its date and its
*sources*, the positions of the units (turns) it was derived from. Its size is
the o200k_base token count of its rendered snippet (:attr:`Memory.snippet`),
and the budget bounds the tokens of the memories held at every moment.

A store of raw turns is the special case: one memory per kept unit, citing
that unit alone, with the unit's own text and role (:meth:`Memory.of`).
Every :class:`~pytest_restore.memory.eviction.Policy` is one through
:meth:`Policy.hold`, so the existing policies need no change.

The adapters that drive a derived system, with its provenance declared or
captured, are in :mod:`pytest_restore.memory.systems`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from pytest_restore.data.tokens import count_tokens
from pytest_restore.data.units import History, Unit, turn_header

#: The role a derived memory's snippet names (a raw turn keeps its own: ``user``, ``assistant``).
MEMORY_ROLE = "memory"


@dataclass(frozen=True)
class Memory:
    """One memory a system holds: its text, its date, and the units it was derived from."""

    text: str
    date: str
    #: positions (:attr:`Unit.position`) of the units it was derived from, ascending, at least one
    sources: tuple[int, ...]
    #: the role its snippet names: ``memory`` for a derived one, the unit's for a raw turn
    role: str = MEMORY_ROLE

    @cached_property
    def snippet(self) -> str:
        """What the reader sees: the date and role line, then the text (a raw turn's is its unit's snippet)."""
        return turn_header(self.date, self.role) + self.text

    @classmethod
    def of(cls, unit: Unit) -> Memory:
        """The raw-turn memory of ``unit``: its text and role, citing itself."""
        return cls(unit.content, unit.date, (unit.position,), unit.role)

    def is_raw(self, units: Sequence[Unit]) -> bool:
        """Whether this is a unit of ``units`` kept as it is (one source, the same text and role)."""
        if len(self.sources) != 1:
            return False
        unit = units[self.sources[0]]
        return unit.content == self.text and unit.role == self.role and unit.date == self.date


def memory_tokens(memories: Sequence[Memory]) -> list[int]:
    """The size of each memory: o200k_base tokens of its snippet (each distinct snippet counted once)."""
    return count_tokens([m.snippet for m in memories])


#: What each unit of a store's history cites: raw units themselves, derived memories their sources.
Sources = tuple[tuple[int, ...], ...]


def memory_view(history: History, memories: Sequence[Memory]) -> tuple[History, npt.NDArray[np.bool_], Sources]:
    """The history a store of ``memories`` is read through, which of its units are held, and what each cites.

    A raw-turn memory (:meth:`Memory.is_raw`) is its unit: the mask marks it.
    Every other memory becomes a unit after the history's own (role
    ``memory``, its snippet and token size), in the order of the units it
    cites last, then first (a stable sort), so that injection's chronological
    order places it after what it was derived from. The gold stays the
    history's: raw units at their positions.
    """
    units = history.units
    n = len(units)
    raw = [m for m in memories if m.is_raw(units)]
    derived = sorted((m for m in memories if not m.is_raw(units)), key=lambda m: (max(m.sources), min(m.sources)))
    sizes = memory_tokens(derived)
    added = tuple(
        Unit(n + i, units[max(m.sources)].session, -1, m.date, m.role, m.text, m.snippet, size)
        for i, (m, size) in enumerate(zip(derived, sizes))
    )
    view = History(
        history.question,
        history.granularity,
        units + added,
        np.concatenate([history.sizes, np.asarray(sizes, dtype=np.int64)]),
        history.gold,
    )
    mask = np.zeros(n + len(added), dtype=bool)
    mask[[m.sources[0] for m in raw]] = True
    mask[n:] = True
    sources: Sources = tuple((p,) for p in range(n)) + tuple(m.sources for m in derived)
    return view, mask, sources
