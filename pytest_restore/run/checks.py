"""The run's checks outside the grid: one protocol, one class each, kept in a registry.

A check runs over the run's parts at its moment (``when``: before the grid,
or after it over the gathered records), finds a typed result, which is the
check object itself: its JSON form (``summary.json``'s ``run.checks.NAME.result``),
how it reads back from that form, its section of ``report.md`` and its place
among the sections (``section``). :data:`CHECKS` holds the built-ins in the
order they run; the report orders their sections by ``section``. A new check
is one class here, listed in :data:`CHECKS`.

A check that must stop the run (a failed embedding call, a failed calibration
gate, a failed batch round) raises :class:`~pytest_restore.run.quality.RunStopped`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypedDict

from pytest_restore.audit.calibration import CalibrationResult
from pytest_restore.audit.judge_audit import JudgeAuditResult
from pytest_restore.memory.systems import SystemFigures, SystemFiguresJSON
from pytest_restore.record import Record
from pytest_restore.report.checks import (
    render_batch_md,
    render_calibration_md,
    render_embeddings_md,
    render_grid_md,
    render_judge_audit_md,
    render_memory_systems_md,
    render_real_calls_md,
)
from pytest_restore.report.inputs import CheckResult, RawCheck
from pytest_restore.run.batch import BatchRound, batch_rounds
from pytest_restore.run.calls import ModelCalls
from pytest_restore.run.embeddings import embed_ahead, embedding_check
from pytest_restore.run.grid import CellSpec
from pytest_restore.run.parts import CallDetail, RunParts
from pytest_restore.run.quality import Console, RunStopped, calibration_gate, judge_audit
from pytest_restore.run.report import grid_cells


@dataclass
class CheckRun:
    """What a check runs over: the run's parts, its model calls, the terminal; after the grid, its records."""

    parts: RunParts
    model_calls: ModelCalls
    console: Console
    #: the records gathered from the grid (after it)
    records: Sequence[Record] = ()
    #: why the grid did not run whole (``None``: it did), after it
    partial: str | None = None
    #: after it, each memory system's cell: ``{"cell", "policy", "figures"}`` by cell id (``ItemMessage.memory``)
    memory: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


class Check:
    """One check outside the grid (see the module docstring); subclasses set the class attributes."""

    #: the key ``summary.json`` files the result under
    name: ClassVar[str]
    #: its place among the report's check sections (lower first)
    section: ClassVar[int]
    #: when it runs: before the grid, or after it over the gathered records
    when: ClassVar[Literal["before_grid", "after_grid"]]

    @classmethod
    def run(cls, run: CheckRun) -> Check | None:
        """Run the check; its result, or ``None`` when this run does not ask for it."""
        raise NotImplementedError

    @classmethod
    def from_json(cls, result: Any) -> Check:
        """The result read back from its JSON form."""
        raise NotImplementedError

    def to_json(self) -> Any:
        """The result's figures as plain JSON values."""
        raise NotImplementedError

    def render_md(self) -> str:
        """The check's section of ``report.md``."""
        raise NotImplementedError


@dataclass(frozen=True)
class BatchRounds(Check):
    """``--restore-batch``: the grid's calls answered by Batch API rounds before it ran from the cache."""

    name: ClassVar[str] = "batch"
    section: ClassVar[int] = 10
    when: ClassVar[Literal["before_grid", "after_grid"]] = "before_grid"
    rounds: tuple[BatchRound, ...]

    @classmethod
    def run(cls, run: CheckRun) -> BatchRounds | None:
        if not run.parts.settings.batch:
            return None
        rounds: list[BatchRound] = []
        batch_rounds(run.parts, rounds)  # the grid then runs from the cache
        return cls(tuple(rounds))

    @classmethod
    def from_json(cls, result: Any) -> BatchRounds:
        return cls(tuple(result["rounds"]))

    def to_json(self) -> Any:
        return {"rounds": [dict(r) for r in self.rounds]}

    def render_md(self) -> str:
        return render_batch_md(self.to_json())


@dataclass(frozen=True)
class Calibration(Check):
    """The calibration gate before the grid (docs/PROTOCOL.md section 9); a failed gate stops the run."""

    name: ClassVar[str] = "calibration"
    section: ClassVar[int] = 20
    when: ClassVar[Literal["before_grid", "after_grid"]] = "before_grid"
    result: CalibrationResult

    @classmethod
    def run(cls, run: CheckRun) -> Calibration | None:
        s = run.parts.settings
        if not (s.calibration == "on" or (s.calibration == "auto" and s.uses_real_models)):
            return None
        return cls(calibration_gate(run.parts, run.model_calls, run.console))

    @classmethod
    def from_json(cls, result: Any) -> Calibration:
        return cls(CalibrationResult.from_dict(result))

    def to_json(self) -> Any:
        return self.result.to_dict()

    def render_md(self) -> str:
        return render_calibration_md(self.result)


class EmbeddingFigures(TypedDict):
    """One embedder's figures: distinct texts, what this run sent, truncations, storage."""

    distinct_texts: int
    embedded_this_run: int
    truncated: int
    requests: int
    tokens: int
    dimensions: int
    store_bytes: int


@dataclass(frozen=True)
class Embeddings(Check):
    """Every text the dense and hybrid rankers read, embedded once before the grid; a failed call stops the run."""

    name: ClassVar[str] = "embeddings"
    section: ClassVar[int] = 30
    when: ClassVar[Literal["before_grid", "after_grid"]] = "before_grid"
    by_embedder: Mapping[str, EmbeddingFigures]

    @classmethod
    def run(cls, run: CheckRun) -> Embeddings | None:
        parts = run.parts
        sources = parts.ranker_vectors()
        if not sources:
            return None
        for vectors in sources:
            # every text the grid ranks, embedded once here: the workers only read the store
            failed = embed_ahead(vectors, parts.dataset(), parts.audit_config())
            if failed is not None:
                raise RunStopped(failed)
        return cls.from_json(embedding_check(sources, parts.dataset(), parts.audit_config()))

    @classmethod
    def from_json(cls, result: Any) -> Embeddings:
        return cls(dict(result))

    def to_json(self) -> Any:
        return {name: dict(figures) for name, figures in self.by_embedder.items()}

    def render_md(self) -> str:
        return render_embeddings_md(self.by_embedder)


@dataclass(frozen=True)
class GridCoverage(Check):
    """The grid's cells that ran (their records arrived) and those that did not, by item id."""

    name: ClassVar[str] = "grid"
    section: ClassVar[int] = 40
    when: ClassVar[Literal["before_grid", "after_grid"]] = "after_grid"
    ran: tuple[str, ...]
    not_run: tuple[str, ...]

    @classmethod
    def run(cls, run: CheckRun) -> GridCoverage:
        return cls.of(run.records, run.parts.plan.cells)

    @classmethod
    def of(cls, records: Sequence[Record], cells: Sequence[CellSpec]) -> GridCoverage:
        """The coverage of ``cells`` by ``records`` (``run/report.py``'s ``grid_cells``, rankers included)."""
        return cls.from_json(grid_cells(records, cells))

    @classmethod
    def from_json(cls, result: Any) -> GridCoverage:
        return cls(tuple(result["ran"]), tuple(result["not_run"]))

    def to_json(self) -> Any:
        return {"ran": list(self.ran), "not_run": list(self.not_run)}

    def render_md(self) -> str:
        return render_grid_md(self.to_json())


@dataclass(frozen=True)
class JudgeAudit(Check):
    """``--restore-audit-judge``: a second judge re-grades a stratified sample of the recorded answers."""

    name: ClassVar[str] = "judge_audit"
    section: ClassVar[int] = 50
    when: ClassVar[Literal["before_grid", "after_grid"]] = "after_grid"
    result: JudgeAuditResult

    @classmethod
    def run(cls, run: CheckRun) -> JudgeAudit | None:
        if not run.parts.settings.audit_judge or run.partial is not None or not run.records:
            return None
        return cls(judge_audit(run.parts, run.records, run.model_calls))

    @classmethod
    def from_json(cls, result: Any) -> JudgeAudit:
        return cls(JudgeAuditResult.from_dict(result))

    def to_json(self) -> Any:
        return self.result.to_dict()

    def render_md(self) -> str:
        return render_judge_audit_md(self.result)


@dataclass(frozen=True)
class RealModelCalls(Check):
    """What the real models were sent, the concurrency they reached, their failed calls by cause and the
    replicas they set aside."""

    name: ClassVar[str] = "model_calls"
    section: ClassVar[int] = 60
    when: ClassVar[Literal["before_grid", "after_grid"]] = "after_grid"
    by_model: Mapping[str, CallDetail] = field(default_factory=dict)

    @classmethod
    def run(cls, run: CheckRun) -> RealModelCalls | None:
        details = run.model_calls.all_details()
        return cls.from_json(details) if details else None

    @classmethod
    def from_json(cls, result: Any) -> RealModelCalls:
        return cls(dict(result))

    def to_json(self) -> Any:
        return {name: dict(detail) for name, detail in self.by_model.items()}

    def render_md(self) -> str:
        return render_real_calls_md(self.by_model)


class SystemCell(TypedDict):
    """One memory system's cell: its id, the system, and what it did building the cell's stores."""

    cell: str
    policy: str
    budget: int
    reader: str
    #: the cell's ranker under ``--restore-rankers`` (empty: the run's one ranker)
    ranker: str
    figures: SystemFiguresJSON


@dataclass(frozen=True)
class MemorySystems(Check):
    """What each memory system's cells cost and dropped: stores, memories held, the system's own model calls,
    the calls that failed and the answers it rejected, by cause (``SystemFigures``), in the grid's order."""

    name: ClassVar[str] = "memory_systems"
    section: ClassVar[int] = 55
    when: ClassVar[Literal["before_grid", "after_grid"]] = "after_grid"
    cells: tuple[SystemCell, ...]

    @classmethod
    def run(cls, run: CheckRun) -> MemorySystems | None:
        if not run.memory:
            return None
        order = {c.id: i for i, c in enumerate(run.parts.plan.cells)}
        ids = sorted(run.memory, key=lambda cell: (order.get(cell, len(order)), cell))
        return cls.from_json({"cells": [run.memory[cell] for cell in ids]})

    @classmethod
    def from_json(cls, result: Any) -> MemorySystems:
        return cls(tuple(
            SystemCell(
                # budget, reader and ranker: absent from the first files this section was written to
                cell=str(c["cell"]), policy=str(c["policy"]), budget=int(c.get("budget", 0)),
                reader=str(c.get("reader", "")), ranker=str(c.get("ranker", "")),
                figures=SystemFigures.from_json(c["figures"]).to_json(),
            )
            for c in result["cells"]
        ))

    def to_json(self) -> Any:
        return {"cells": [dict(c) for c in self.cells]}

    def render_md(self) -> str:
        return render_memory_systems_md(self.cells)


#: The built-in checks, in the order they run (those before the grid: embeddings, then the gate, then the batch).
CHECKS: tuple[type[Check], ...] = (
    Embeddings, Calibration, BatchRounds, GridCoverage, JudgeAudit, MemorySystems, RealModelCalls,
)


def run_checks(when: Literal["before_grid", "after_grid"], run: CheckRun) -> dict[str, Check]:
    """Run the checks of one moment, in :data:`CHECKS`' order; their results by name (a stop raises ``RunStopped``)."""
    found: dict[str, Check] = {}
    for check in CHECKS:
        if check.when == when:
            result = check.run(run)
            if result is not None:
                found[check.name] = result
    return found


def read_check(name: str, entry: Mapping[str, Any]) -> CheckResult:
    """A check of ``summary.json`` read back into its typed result (a name no check has: kept as it is)."""
    for check in CHECKS:
        if check.name == name:
            return check.from_json(entry.get("result"))
    return RawCheck(name, entry)
