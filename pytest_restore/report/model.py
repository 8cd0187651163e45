"""The report model: everything the renderers show, made once per report from the records.

:func:`build_model` runs the statistics pass and works out its findings
(:mod:`pytest_restore.stats.findings`), makes the run log, the memory libraries'
side-by-side rows and what the records alone say (their judges, rankers, fake
models and one case per bin); ``report.md``, ``cells.csv``, ``hypotheses.json``,
the terminal, the figure and ``report.html`` read this one :class:`ReportModel`
and format its fields, instead of going back to the records or the analysis while they render.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_restore.audit.memo import model_calls
from pytest_restore.models.fake import simulated_models
from pytest_restore.record import Record
from pytest_restore.report.checks import unbound_notes
from pytest_restore.report.inputs import RunInfo, RunLog, analyse_records, dataset_label, rankers_of
from pytest_restore.report.simulated import simulated_note
from pytest_restore.stats.analysis import Analysis
from pytest_restore.stats.cost import CostFigures, cost_figures
from pytest_restore.stats.findings import Findings, bin_cases, findings
from pytest_restore.stats.side_by_side import SideRow, side_by_side


@dataclass(frozen=True)
class ReportModel:
    """One report's figures and facts, computed before anything is rendered."""

    #: the statistics pass (:func:`~pytest_restore.stats.analysis.analyse`), run once, and what it finds
    findings: Findings
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
    #: one regime-(b) record per reader, policy and bin (:func:`~pytest_restore.stats.findings.bin_cases`)
    cases: tuple[Record, ...]
    #: the memory systems' budgets that never bound (:func:`~pytest_restore.report.checks.unbound_notes`)
    notes: tuple[str, ...]
    #: each memory library's policy -> its distribution and version (the memory-systems check's)
    versions: dict[str, str]
    #: the data the run read, in words (:func:`~pytest_restore.report.inputs.dataset_label`; "": not said)
    dataset: str

    @property
    def analysis(self) -> Analysis:
        """The statistics pass."""
        return self.findings.analysis

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


def library_versions(cells: Sequence[dict[str, Any]]) -> dict[str, str]:
    """Each memory library's policy -> its distribution and version, from the memory-systems check's cells."""
    return {str(c["policy"]): str(c["figures"]["library"]) for c in cells if c["figures"].get("library")}


def library_embeddings(cells: Sequence[dict[str, Any]]) -> dict[tuple[str, int, str], tuple[str, int]]:
    """By (policy, budget, reader): the embedder a memory library's stores embedded with through the run's gateway,
    and the tokens they embedded, from the memory-systems check's cells (empty when no library embedded)."""
    return {
        (str(c["policy"]), int(c.get("budget", 0)), str(c.get("reader", ""))): (
            str(c["figures"]["embedder"]), int(c["figures"].get("embedding_tokens", 0))
        )
        for c in cells
        if c["figures"].get("embedder")
    }


def cost_of(records: Sequence[Record], info: RunInfo) -> CostFigures | None:
    """The run's cost per answer at the prices its summary names (:mod:`pytest_restore.stats.cost`), a memory
    library's embeddings among its own calls'."""
    prices = info.settings.model_prices if info.settings is not None else None
    return cost_figures(records, prices or {}, library_embeddings(memory_cells(info)))


def run_log(
    records: Sequence[Record],
    info: RunInfo,
    found: Findings,
    fakes: Sequence[tuple[str, str]] | None = None,
) -> RunLog:
    """The run log (``summary.json``, :class:`~pytest_restore.report.inputs.RunLog`), made once per report:
    the run section, the analysis's counts and hypothesis summary, its findings' verdict lines, the model
    calls and cost from the records. ``fakes``: the records' fake models when the caller has them
    (:func:`~pytest_restore.models.fake.simulated_models`)."""
    analysis = found.analysis
    counts = analysis.counts
    return RunLog(
        run=info,
        counts=counts.totals(),
        record_exclusions=counts.exclusions(),
        model_calls=model_calls(records),
        hypotheses=found.summary,
        failures=found.failures,
        not_testable=found.untestable,
        simulated_note=simulated_note(simulated_models(records) if fakes is None else fakes, info.dataset.get("official")),
        cost=cost_of(records, info),
        importance_scores=tuple(analysis.importance),
        score_ties=tuple(analysis.ties),
    )


def build_model(ordered: Sequence[Record], info: RunInfo) -> ReportModel:
    """The report model of records already in canonical order (:func:`~pytest_restore.report.inputs.sort_records`)."""
    analysis = analyse_records(ordered, info)
    found = findings(analysis, info.idle_budgets)
    cases = tuple(bin_cases(ordered))
    fakes = tuple(simulated_models(ordered))
    log = run_log(ordered, info, found, fakes)
    cells = memory_cells(info)
    return ReportModel(
        findings=found,
        log=log,
        side=side_by_side(analysis, ordered, cells, log.cost),
        judges=tuple(sorted({r.judge for r in ordered if r.judge})),
        rankers=tuple(rankers_of(ordered)),
        fakes=fakes,
        cases=cases,
        notes=tuple(unbound_notes(cells)),
        versions=library_versions(cells),
        dataset=dataset_label(info),
    )
