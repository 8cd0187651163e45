"""What the parts of an audit hand each other: a model call's :class:`Outcome` (or :class:`Failure`), the
conditions a cell :class:`Planned` and each store's :class:`GoldFate`, a memory system's store of one
history (:class:`StoreView`), and what a cell produced (:class:`CellRun`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from pytest_restore.audit.questions import Prepared
from pytest_restore.data.units import History
from pytest_restore.memory.eviction import Eviction, Mask, Policy
from pytest_restore.memory.memories import Sources
from pytest_restore.memory.systems import SystemFigures
from pytest_restore.record import Record


@dataclass(frozen=True)
class Failure:
    """A model call that failed after its retries, or gave no usable reply: which model, and what it said.

    Kept as fields until a record is made: the record's ``excluded`` reason
    (:meth:`reason`) and its ``error`` message (:attr:`error`) are both read
    off them, never parsed back out of a message.
    """

    model: str  #: "reader", "judge" or "scorer"
    message: str

    @property
    def error(self) -> str:
        """The record's ``error``: the model and its message."""
        return f"{self.model}: {self.message}"

    def reason(self, condition: str | None = None) -> str:
        """The record's ``excluded`` reason: ``api_error: [CONDITION ]MODEL``."""
        return "api_error: " + (f"{condition} " if condition else "") + self.model


@dataclass(frozen=True)
class Outcome:
    """One condition's answer and verdict."""

    answer: str | None
    correct: bool | None
    failure: Failure | None
    injected_tokens: int
    injected_units: int
    #: :func:`prompt_id` of the reader request (records count unique reader calls from it)
    prompt: str | None = None
    #: the injected units' positions, in the order the reader saw them
    injected: tuple[int, ...] = ()
    #: tokens (in, out) of the reader's call and of the judge's (``None``: the call failed or was not made)
    reader_tokens: tuple[int, int] | None = None
    judge_tokens: tuple[int, int] | None = None
    #: whether a model reported no usage and its tokens are estimated (``models.decoding.with_usage``)
    tokens_estimated: bool = False

    @property
    def error(self) -> str | None:
        """The failed call's message (``None``: the condition has a verdict)."""
        return self.failure.error if self.failure is not None else None


@dataclass(frozen=True)
class GoldFate:
    """What became of each gold unit (in ``History.gold``'s order) in one store: when it left, its rank."""

    #: the position of the unit whose arrival evicted it (a memory system's: after which no held memory
    #: cited it); ``None``: kept, or a memory system lost it when the history ended
    evicted_after: tuple[int | None, ...]
    #: its rank (1 = first) under the ranker over the store (held through memories citing it: the best of
    #: theirs); ``None``: evicted, or not ranked (no match)
    ranks: tuple[int | None, ...]


@dataclass
class Planned:
    """What :meth:`Audit.conditions` built for one cell under one ranker: the plan, the contexts, the stores."""

    ranker: str
    #: (question, seed, store) in order; a ``None`` store: the question's importance scoring failed
    plan: list[tuple[Prepared, int, Mask | None]] = field(default_factory=list)
    #: three per planned store: regime (a), regime (b), restored
    contexts: list[tuple[History, list[int]]] = field(default_factory=list)
    #: the store by (question, seed)
    stores: dict[tuple[str, int], Mask] = field(default_factory=dict)
    #: the policy's pass by (history, seed), which each store of a raw-unit policy came from
    evictions: dict[tuple[str, int], Eviction] = field(default_factory=dict)
    #: the ranker's whole order of each store by (question, seed)
    rankings: dict[tuple[str, int], list[int]] = field(default_factory=dict)


@dataclass
class CellRun:
    """What one policy x budget cell produced."""

    policy: str
    budget: int
    records: list[Record]
    stores: dict[tuple[str, int], Mask] = field(repr=False)
    #: a memory system's cell: what it did building the cell's stores (``None``: the policy is no memory system)
    memory: SystemFigures | None = None


class StoreView(NamedTuple):
    """A memory system's store of one history, fed once per process (:meth:`Audit.held`)."""

    policy: Policy
    #: the history extended by the derived memories
    view: History
    #: which of the view's units are held
    mask: Mask
    #: what each unit cites
    sources: Sources
    #: when each lost unit lost its last citing memory (``None``: not traced)
    lost: Mapping[int, int | None] | None
    #: what the system did building it
    figures: SystemFigures
    #: a memory library's store: the tokens (in, out) of the chat calls it made through the run's gateway, and
    #: whether some are estimated (``None``: no library's, its calls are not the gateway's)
    tokens: tuple[int, int, bool] | None = None
