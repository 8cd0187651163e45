"""Snapshot gating for users: pin the audit's cells table and the families' decisions.

A user's test asks for the ``restore_snapshot`` fixture and calls
``check()``: the run's ``cells.csv`` and a table of every hypothesis test's
decision are compared with syrupy snapshots stored beside the test
(``__snapshots__/``), and a change fails the test with syrupy's diff.
``pytest --snapshot-update`` accepts the change (commit the files).

The cells are those of the session's grid (the ``--restore-*`` options): in a
session that also runs the grid items they are reused, otherwise (or on an
xdist worker that did not run them and cannot read them from another worker)
they are run here. The figures are deterministic, so it makes no difference.
"""

from __future__ import annotations

import contextlib
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


class CellsSnapshot(SingleFileSnapshotExtension):
    """``cells.csv`` as one readable file."""

    _write_mode = WriteMode.TEXT
    file_extension = "csv"


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
    ) -> None:
        self._snapshot = snapshot
        self._families = tuple(families)
        self._color = color
        self._records = records
        self._settings = settings
        self._tables: tuple[str, str] | None = None

    def tables(self) -> tuple[str, str]:
        """``(cells.csv, decisions)`` of the run, computed once."""
        if self._tables is None:
            records = list(self._records())
            analysis = analyse_records(records, RunInfo(settings=self._settings, families=self._families))
            self._tables = (render_cells_csv(analysis), render_decisions_md(analysis))
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
            failed.append("accept the change with: pytest --snapshot-update (then commit __snapshots__/)")
            pytest.fail("\n".join(failed), pytrace=False)
