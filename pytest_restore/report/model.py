"""The report model: everything the renderers show, made once per report from the records.

:func:`pytest_restore.report.writer.build_model` runs the statistics pass, makes the run log, the memory
libraries' side-by-side rows and what the records alone say (their judges,
rankers, fake models and one case per bin); ``report.md``, ``cells.csv``,
``hypotheses.json``, the terminal, the figure and ``report.html`` read this
one :class:`ReportModel` instead of going back to the records while they render.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_restore.record import Record
from pytest_restore.report.inputs import RunInfo, RunLog
from pytest_restore.report.side_by_side import SideRow
from pytest_restore.stats.analysis import Analysis


@dataclass(frozen=True)
class ReportModel:
    """One report's figures and facts, computed before anything is rendered."""

    #: the statistics pass (:func:`~pytest_restore.stats.analysis.analyse`), run once
    analysis: Analysis
    #: the run log ``summary.json`` holds (its run section is ``log.run``)
    log: RunLog
    #: a run with a memory library: its side-by-side rows (empty otherwise)
    side: tuple[SideRow, ...]
    #: the judges the records name, sorted (empty: none named)
    judges: tuple[str, ...]
    #: the rankers the records were read with, sorted
    rankers: tuple[str, ...]
    #: ``(role, name)`` of every fake model in the records, readers first
    fakes: tuple[tuple[str, str], ...]
    #: one regime-(b) record per reader, policy and bin (:func:`~pytest_restore.report.cases.bin_cases`)
    cases: tuple[Record, ...]
    #: the memory systems' budgets that never bound (:func:`~pytest_restore.report.checks.unbound_notes`)
    notes: tuple[str, ...]

    @property
    def info(self) -> RunInfo:
        """The run section of the log."""
        return self.log.run

    @property
    def simulated_label(self) -> str:
        """The fake models as the figure's title names them (``"reader fake, judge fake"``; "": none)."""
        return ", ".join(f"{role} {name}" for role, name in self.fakes)

    @property
    def fake_reader(self) -> bool:
        """Whether a fake reader took part."""
        return any(role == "reader" for role, _ in self.fakes)


def memory_cells(info: RunInfo) -> list[dict[str, Any]]:
    """The run's memory-systems check's cells as ``summary.json`` keeps them (empty: no memory system ran)."""
    found = info.checks.get("memory_systems")
    return list(found.to_json()["cells"]) if found is not None else []
