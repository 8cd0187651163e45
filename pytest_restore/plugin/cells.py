"""The grid's items: one cell (a policy at a budget, under a reader) per item.

:class:`CellSpec` names a cell, :class:`RestoreCell` is what an item gets from
the ``restore_cell`` fixture (it runs the cell, hands its records to the
session through the item's report and checks it), and :class:`SharedCells`
is where xdist workers leave their cells' records for each other, so that a
cell's check can read the cells it compares with instead of running them again.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, Protocol, cast

import pytest

from pytest_restore.audit.checks import construct_checks
from pytest_restore.audit.run import Audit, CellRun
from pytest_restore.exits import IO_ERROR
from pytest_restore.memory.eviction import Policy, PolicyRegistry
from pytest_restore.plugin.settings import RestoreSettings
from pytest_restore.record import Record, ranker_of
from pytest_restore.stats.analysis import Analysis, analyse, cell_verdicts
from pytest_restore.stats.families import Family, family_of
from pytest_restore.stats.results import HypothesisTest, StatsSettings, budget_label

#: The item properties beside the records: the data's description and the process's model usage.
META_PROPERTY = "restore_meta"
USAGE_PROPERTY = "restore_usage"
#: The item property that carries the exit status of a run an item stopped (74: a file could not be read or written).
EXIT_PROPERTY = "restore_exit"


@dataclass(frozen=True)
class CellSpec:
    """One grid item: a policy at a budget."""

    policy: str
    budget: int
    reader: str
    primary: bool = True
    #: the ranker the cell reads with (``None``: the run's one ranker)
    ranker: str | None = None
    #: how the item id names the ranker (``dense`` for ``dense:fake``; empty with one ranker)
    ranker_label: str = ""

    @property
    def id(self) -> str:
        """The item id in the report's words, e.g. ``fifo-80k`` (``fifo-80k-openai:gpt-5.4-mini`` for the
        robustness reader, ``fifo-80k-dense`` for a ranker of ``--restore-rankers``), so ``-k 8k``
        selects the 8k cells and not the 80k ones."""
        label = f"{self.policy}-{budget_label(self.budget)}"
        label += f"-{self.ranker_label}" if self.ranker_label else ""
        return label + ("" if self.primary else f"-{self.reader}")


def ranker_labels(rankers: Sequence[str]) -> dict[str, str]:
    """Each ranker's word in item ids: its family (``dense`` for ``dense:fake``) unless two share it, then its name."""
    families = [name.partition(":")[0] for name in rankers]
    return {name: family if families.count(family) == 1 else name for name, family in zip(rankers, families)}


def grid(settings: RestoreSettings, policies: Sequence[Policy]) -> list[CellSpec]:
    """The grid: every selected policy at every budget, under each ranker of ``--restore-rankers``.

    A cell's rankers are adjacent items, so xdist tends to hand them to one
    worker, which evicts the cell's stores once for all of them.
    """
    labels = ranker_labels(settings.rankers)
    return [
        CellSpec(p.name, b, reader, reader == settings.reader, ranker, labels.get(ranker or "", ""))
        for reader in settings.readers
        for p in policies
        for b in settings.budgets
        for ranker in (settings.rankers or (None,))
    ]



class CellSession(Protocol):
    """What a grid item asks of the process running it (``plugin/runner.py``'s ``CellRunner``)."""

    @property
    def settings(self) -> RestoreSettings: ...

    @property
    def registry(self) -> PolicyRegistry: ...

    @property
    def policies(self) -> tuple[Policy, ...]: ...

    @property
    def families(self) -> tuple[Family, ...]: ...

    def audit(self, reader: str | None = None) -> Audit: ...

    def fatal_error(self) -> str | None: ...

    def fatal_exit_code(self) -> int: ...

    def shared_cells(self) -> SharedCells: ...

    def ship(self, item: pytest.Item, audit: Audit, run: CellRun) -> None: ...

class RestoreCell:
    """What a grid item gets from the ``restore_cell`` fixture."""

    def __init__(self, session: CellSession, spec: CellSpec, item: pytest.Item) -> None:
        self.session = session
        self.spec = spec
        self.item = item
        self.run: CellRun | None = None

    def audit(self) -> CellRun:
        """Run the cell and attach its records to the item's report."""
        unreadable: str | None = None
        try:
            audit = self.session.audit(self.spec.reader)
        except pytest.UsageError as err:
            unreadable = str(err)  # the data, checked at the start, cannot be read any more (removed since)
        if unreadable is not None:
            self.stop(unreadable, IO_ERROR)
        policy = self.session.registry[self.spec.policy]
        self.run = audit.run_cell(policy, self.spec.budget, ranker=self.spec.ranker)
        fatal = self.session.fatal_error()
        if fatal is not None:
            # A wrong key or an unknown model fails every call alike: stop at the first.
            self.stop(fatal, self.session.fatal_exit_code())
        self.session.ship(self.item, audit, self.run)
        return self.run

    def stop(self, line: str, code: int) -> NoReturn:
        """Fail this item with ``line`` (no traceback) and stop the session, whose exit status becomes ``code``."""
        self.item.user_properties.append((EXIT_PROPERTY, code))
        self.item.session.shouldstop = line
        pytest.fail(line, pytrace=False)

    def check(self) -> None:
        """Fail the item, one short line per case, when one of the cell's checks fails.

        The construct checks (PROTOCOL section 5), then the family expectations
        that concern this cell (its H1 and H3 tests; for the control, its
        positive-control contrasts), decided as the session decides them (Holm
        and the power rule included), so the items and the session's summary
        name the same cases. An expectation this run had no power to meet does
        not fail the item; the session's summary lists it.
        """
        run = self.run if self.run is not None else self.audit()
        audit = self.session.audit(self.spec.reader)
        records, fetch = item_records(audit, run, self.spec, self.session)
        analysis = item_analysis(records, self.session)
        failures = construct_checks(run, audit)
        failures += analysis.construct_failures(run.policy, run.budget, audit.reader.name)
        if self.session.settings.family_checks == "fail":
            failures += [
                family_of(t.family, self.session.families).describe(t)
                for t in verdicts(analysis, audit, self.spec, self.session, fetch)
                if t.expectation_met is False and t.testable
            ]
        if failures:
            pytest.fail("\n".join(failures), pytrace=False)

class SharedCells:
    """Where a run's xdist workers leave their cells' records for each other: one JSON file per cell."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _cell_file(self, reader: str, policy: str, budget: int, ranker: str) -> Path:
        digest = hashlib.sha256(f"{reader}\x1f{policy}\x1f{ranker}".encode()).hexdigest()[:16]
        return self.root / f"{digest}-{budget}.json"

    def share(self, audit: Audit, run: CellRun, payload: str) -> None:
        """Leave a worker's cell records (``payload``, their JSON) where other workers can read them."""
        ranker = run.records[0].ranker if run.records else None
        path = self._cell_file(audit.reader.name, run.policy, run.budget, ranker or audit.ranker.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(payload, encoding="utf-8")
        os.replace(tmp, path)  # atomic: a reader sees the whole file or none

    def records(self, audit: Audit, policy: Policy, budget: int, ranker: str | None = None) -> list[Record]:
        """A whole-grid cell's records (under ``ranker``, the audit's first by default): from this process,
        from another worker, or run here.

        The control's check needs the baselines' records at its budget; under
        xdist another worker has usually run them already, and running them
        again (redundancy above all) would cost more than the check itself.
        """
        if not audit.has_cell(policy, budget, ranker):
            path = self._cell_file(audit.reader.name, policy.name, budget, ranker or audit.ranker.name)
            if path.exists():
                shared = json.loads(path.read_text(encoding="utf-8"))
                return [Record.from_json(r) for r in cast("list[dict[str, Any]]", shared)]
        return audit.run_cell(policy, budget, ranker=ranker).records


RecordsOf = Callable[[Sequence[tuple[str, int]]], list[Record]]


def item_records(audit: Audit, run: CellRun, spec: CellSpec, session: CellSession) -> tuple[list[Record], RecordsOf]:
    """The records a grid item's checks read, and how to get other cells' records.

    The cell's own records; for the control, also the baselines' regime-(b)
    records at its budget (read from the worker that ran them where possible).
    """
    selected = [p.name for p in session.policies]
    roles = StatsSettings()  # the families' policy roles (baselines, control)
    shared = session.shared_cells()

    def records_of(cells: Sequence[tuple[str, int]]) -> list[Record]:
        return [
            r
            for policy, budget in cells
            if policy in selected
            for r in shared.records(audit, session.registry[policy], budget, spec.ranker)
        ]

    records = list(run.records)
    if spec.policy == roles.control:
        others = [(b, spec.budget) for b in roles.baselines if b in selected]
        records += [r for r in records_of(others) if r.regime == "b"]
    return records, records_of


def item_analysis(records: Sequence[Record], session: CellSession) -> Analysis:
    """The analysis of a grid item's records, with the session's bootstrap settings and families."""
    s = session.settings
    return analyse(records, resamples=s.bootstrap, seed=s.bootstrap_seed, families=session.families)


def verdicts(
    analysis: Analysis, audit: Audit, spec: CellSpec, session: CellSession, fetch: RecordsOf
) -> list[HypothesisTest]:
    """The family expectations of one grid cell, decided as the session's analysis decides them."""
    s = session.settings
    selected = [p.name for p in session.policies]
    roles = StatsSettings()
    return cell_verdicts(
        analysis,
        spec.policy,
        spec.budget,
        budgets=s.budgets,
        family_sizes={f.name: f.size(roles, selected, s.budgets) for f in session.families},
        fetch=fetch,
        reader=audit.reader.name,
    )


def grid_cells(records: Sequence[Record], cells: Sequence[CellSpec]) -> dict[str, list[str]]:
    """The grid's cells that ran (records arrived) and those that did not, by item id (rankers included)."""
    ran = {(r.reader, r.policy, r.budget, ranker_of(r)) for r in records}
    any_ranker = {cell[:3] for cell in ran}
    out: dict[str, list[str]] = {"ran": [], "not_run": []}
    for cell in cells:
        # a record's reader is the model's name; a cell of --restore-rankers is its ranker's only
        where = (cell.reader, cell.policy, cell.budget)
        done = (*where, cell.ranker) in ran if cell.ranker is not None else where in any_ranker
        out["ran" if done else "not_run"].append(cell.id)
    return out


def part_of_grid(cells: Mapping[str, Sequence[str]]) -> str | None:
    """What a run of part of the grid (``-k``, ``--lf``, a deselection) ran, in words; ``None`` for the whole grid."""
    ran, not_run = cells["ran"], cells["not_run"]
    if not not_run:
        return None
    return f"part of the grid: {len(ran)} of {len(ran) + len(not_run)} cells ran ({', '.join(ran) or 'none'})"
