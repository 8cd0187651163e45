"""Snapshot gating for users: pin the audit's cells table and the families' decisions.

A user's test asks for the ``restore_snapshot`` fixture and calls
``check()``: the run's cells (``cells.csv`` laid out one figure a line,
keyed by cell: ``fifo-30k-b fake  two_bin_share: 0.42``, so a change diffs
per cell and per figure in a pull request) and a table of every hypothesis
test's decision are compared with syrupy snapshots stored beside the test
(``__snapshots__/``), and a change fails the test with syrupy's diff and the
user's own command with ``--snapshot-update`` to accept it (then commit the
files).

The cells are those of the session's grid (the ``--restore-*`` options): in a
session that also runs the grid items they are reused, otherwise (or on an
xdist worker that did not run them and cannot read them from another worker)
they are run here. The figures are deterministic, so it makes no difference.
"""

from __future__ import annotations

import contextlib
import csv
import io
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode
from syrupy.terminal import disable_color

from pytest_restore.record import Record
from pytest_restore.report.inputs import RunInfo, analyse_records
from pytest_restore.report.markdown import render_decisions_md
from pytest_restore.report.writer import render_cells_csv
from pytest_restore.stats.families import FAMILIES, Family
from pytest_restore.stats.results import budget_label


class CellsSnapshot(SingleFileSnapshotExtension):
    """The cells, one figure a line (:func:`cells_by_figure`), as one readable file."""

    _write_mode = WriteMode.TEXT
    file_extension = "txt"


#: The columns of ``cells.csv`` that name a cell (the rest are its figures).
CELL_KEY = ("policy", "budget", "regime", "reader", "ranker")


def cells_by_figure(cells_csv: str) -> str:
    """``cells.csv`` one figure a line, keyed by cell: ``fifo-30k-b fake  two_bin_share: 0.42``.

    A line-based differ pairs a 27-column row with whatever row follows it;
    one figure a line pairs each figure with itself, so a diff names the cell
    and the figure that moved. Cells keep the table's order; an empty figure
    (a share of 0/0) reads ``-``. A run of several rankers keys its cells by ranker too.
    """
    rows = list(csv.DictReader(io.StringIO(cells_csv)))
    several = len({row.get("ranker") for row in rows}) > 1  # the key names the ranker when rankers are compared
    lines = []
    for row in rows:
        key = f"{row['policy']}-{budget_label(int(row['budget']))}-{row['regime']} {row['reader']}"
        key += f" {row['ranker']}" if several else ""
        lines += [f"{key}  {name}: {value or '-'}" for name, value in row.items() if name not in CELL_KEY]
    return "\n".join(lines) + "\n"


class DecisionsSnapshot(SingleFileSnapshotExtension):
    """The families' decisions as one markdown file."""

    _write_mode = WriteMode.TEXT
    file_extension = "md"


class RestoreSnapshot:
    """What the ``restore_snapshot`` fixture gives a test."""

    def __init__(
        self,
        snapshot: SnapshotAssertion,
        records: Callable[[], Sequence[Record]],
        settings: dict[str, Any],
        *,
        color: bool = False,
        families: Sequence[Family] = FAMILIES,
        update: str = "pytest --snapshot-update",
    ) -> None:
        self._snapshot = snapshot
        self._update = update
        self._families = tuple(families)
        self._color = color
        self._records = records
        self._settings = settings
        self._tables: tuple[str, str] | None = None

    def tables(self) -> tuple[str, str]:
        """``(cells one figure a line, decisions)`` of the run, computed once."""
        if self._tables is None:
            records = list(self._records())
            analysis = analyse_records(records, RunInfo(settings=self._settings, families=self._families))
            self._tables = (cells_by_figure(render_cells_csv(analysis)), render_decisions_md(analysis))
        return self._tables

    def check(self) -> None:
        """Compare both tables with their snapshots; fail with syrupy's diff on a change."""
        cells, decisions = self.tables()
        failed = []
        for name, text, extension in (
            ("cells", cells, CellsSnapshot),
            ("decisions", decisions, DecisionsSnapshot),
        ):
            expected = self._snapshot(name=name, extension_class=extension)
            matched = expected == text  # syrupy records the assertion (and writes it under --snapshot-update)
            if not matched:
                failed.append(f"restore {name} table differs from its snapshot (- snapshot, + this run):")
                with contextlib.nullcontext() if self._color else disable_color():
                    failed += [str(line) for line in expected.get_assert_diff()]
        if failed:
            failed.append(f"accept the change with: {self._update} (then commit __snapshots__/)")
            pytest.fail("\n".join(failed), pytrace=False)
