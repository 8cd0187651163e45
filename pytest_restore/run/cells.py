"""A grid cell run and checked: its records, the construct checks and the family expectations it decides.

A grid item (the plugin's ``RestoreCell``) runs its cell with :func:`run_cell`
and checks it with :func:`cell_failures`, which decides the cell's family
expectations as the session's analysis decides them (Holm and the power
rule included), so the items and the session's summary name the same cases.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pytest_restore.audit.checks import construct_checks
from pytest_restore.audit.run import Audit, CellRun
from pytest_restore.memory.systems import MemorySystemError
from pytest_restore.record import Record
from pytest_restore.report.checks import unused_calls
from pytest_restore.run.checks import SystemCell
from pytest_restore.run.grid import CellSpec
from pytest_restore.run.message import ItemMessage
from pytest_restore.run.parts import RunParts
from pytest_restore.run.plan import freeze_long_lived
from pytest_restore.stats.analysis import (
    Analysis,
    analyse,
    cell_verdicts,
    construct_failures,
)
from pytest_restore.stats.families import family_of
from pytest_restore.stats.results import HypothesisTest, StatsSettings

RecordsOf = Callable[[Sequence[tuple[str, int]]], list[Record]]


class CellFailed(Exception):
    """A cell that could not run, in one line naming why: a user's memory system broke the adapter's
    rules (the system, the question and the unit). The host fails the cell's item with the line alone."""


def run_cell(parts: RunParts, spec: CellSpec, audit: Audit) -> CellRun:
    """Run one grid cell in this process, under its reader's ``audit`` (each cell once per process)."""
    try:
        run = audit.run_cell(parts.plan.registries.policies[spec.policy], spec.budget, ranker=spec.ranker)
    except MemorySystemError as err:
        raise CellFailed(str(err)) from None
    # its records and what the audit keeps of it (the scores, the stores the checks read) live to the
    # process's end: the full collections of the cells after it need not walk them
    freeze_long_lived(f"cell {spec.id}")
    return run


def cell_message(parts: RunParts, process: str, spec: CellSpec, run: CellRun) -> ItemMessage:
    """A cell's message to the session: its records, the data's description, this process's model calls
    and, for a memory system, what it did building the cell's stores (read back by ``run/checks.MemorySystems``)."""
    memory: SystemCell | None = None
    if run.memory is not None:
        memory = SystemCell(
            cell=spec.id, policy=run.policy, budget=run.budget, reader=spec.reader,
            ranker=spec.ranker or "", figures=run.memory.to_json(),
        )
    return ItemMessage(process, tuple(run.records), parts.meta(), parts.usage(), parts.call_details(), memory=memory)


def cell_failures(parts: RunParts, spec: CellSpec, run: CellRun) -> list[str]:
    """One short line per failed check of a cell: the construct checks (PROTOCOL section 5), then, under
    ``--restore-family-checks fail``, the family expectations that concern this cell (its H1 and H3
    tests; for the control, its positive-control contrasts). An expectation this run had no power to
    meet is not a failure here: the session's summary lists it."""
    audit = parts.audit(spec.reader)
    failures = construct_checks(run, audit)
    if run.memory is not None:  # a memory system that used no answer of some kind of call built its stores from nothing
        failures += [f"memory system {run.policy!r} in {spec.id}: {line}" for line in unused_calls(run.memory.to_json())]
    if parts.settings.family_checks != "fail":
        # The session reports the expectations; the item's construct checks read counts, and the
        # analysis (a resample of every cell and its baselines', the figures) would be made for nothing.
        return failures + construct_failures(run.records, run.policy, run.budget, audit.reader.name)
    records, fetch = item_records(audit, run, spec, parts)
    analysis = item_analysis(records, parts)
    failures += analysis.construct_failures(run.policy, run.budget, audit.reader.name)
    failures += [
        family_of(t.family, parts.plan.families).describe(t)
        for t in verdicts(analysis, audit, spec, parts, fetch)
        if t.expectation_met is False and t.testable
    ]
    return failures


def item_records(audit: Audit, run: CellRun, spec: CellSpec, parts: RunParts) -> tuple[list[Record], RecordsOf]:
    """The records a grid item's checks read, and how to get other cells' records.

    The cell's own records; for the control, also the baselines' regime-(b)
    records at its budget (read from the worker that ran them where possible).
    """
    selected = [p.name for p in parts.plan.policies]
    roles = StatsSettings()  # the families' policy roles (baselines, control)
    shared = parts.shared_cells()
    registry = parts.plan.registries.policies

    def records_of(cells: Sequence[tuple[str, int]]) -> list[Record]:
        return [
            r
            for policy, budget in cells
            if policy in selected
            for r in shared.records(audit, registry[policy], budget, spec.ranker)
        ]

    records = list(run.records)
    if spec.policy == roles.control:
        others = [(b, spec.budget) for b in roles.baselines if b in selected]
        records += [r for r in records_of(others) if r.regime == "b"]
    return records, records_of


def item_analysis(records: Sequence[Record], parts: RunParts) -> Analysis:
    """The analysis of a grid item's records, with the session's bootstrap settings and families."""
    s = parts.settings
    return analyse(records, resamples=s.bootstrap, seed=s.bootstrap_seed, families=parts.plan.families)


def verdicts(
    analysis: Analysis, audit: Audit, spec: CellSpec, parts: RunParts, fetch: RecordsOf
) -> list[HypothesisTest]:
    """The family expectations of one grid cell, decided as the session's analysis decides them."""
    s = parts.settings
    selected = [p.name for p in parts.plan.policies]
    roles = StatsSettings()
    return cell_verdicts(
        analysis,
        spec.policy,
        spec.budget,
        budgets=s.budgets,
        family_sizes={f.name: f.size(roles, selected, s.budgets) for f in parts.plan.families},
        fetch=fetch,
        reader=audit.reader.name,
    )


def grid_records(parts: RunParts) -> list[Record]:
    """Every record of the session's grid, each cell reused when this run already has it."""
    records: list[Record] = []
    shared = parts.shared_cells()
    registry = parts.plan.registries.policies
    for spec in parts.plan.cells:
        audit = parts.audit(spec.reader)
        records += shared.records(audit, registry[spec.policy], spec.budget, spec.ranker)
    return records
