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
from collections.abc import Callable

import pytest
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode
from syrupy.terminal import disable_color


class CellsSnapshot(SingleFileSnapshotExtension):
    """The cells, one figure a line (``run/snapshot.py``'s ``cells_by_figure``), as one readable file."""

    _write_mode = WriteMode.TEXT
    file_extension = "txt"


class DecisionsSnapshot(SingleFileSnapshotExtension):
    """The families' decisions as one markdown file."""

    _write_mode = WriteMode.TEXT
    file_extension = "md"


class RestoreSnapshot:
    """What the ``restore_snapshot`` fixture gives a test."""

    def __init__(
        self,
        snapshot: SnapshotAssertion,
        tables: Callable[[], tuple[str, str]],
        *,
        color: bool = False,
        update: str = "pytest --snapshot-update",
    ) -> None:
        self._snapshot = snapshot
        self._update = update
        self._color = color
        self._make_tables = tables
        self._tables: tuple[str, str] | None = None

    def tables(self) -> tuple[str, str]:
        """``(cells one figure a line, decisions)`` of the run (``run/snapshot.py``), computed once."""
        if self._tables is None:
            self._tables = self._make_tables()
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
