"""Snapshot tests of the report's tables (syrupy, one readable file per snapshot).

Two kinds:

- **Rendering**, from fixed records built in ``test_report.fixed_records``: a
  change to how ``cells.csv`` or the markdown tables are written shows up here.
- **The regression gate**: the fake-model grid on the embedded default dataset
  as the README's main job runs it (every built-in policy x 80k/30k/8k, random
  seeds 0/1/2; the ``embedded_report`` run, shared with the other tests that
  read it). Any change to the audit that moves a number fails with a readable
  diff of ``cells.csv`` or ``report.md``'s tables.

To accept an intended change: ``pytest tests/test_snapshots.py --snapshot-update``
and commit ``tests/__snapshots__/``. Snapshots hold no timestamps, paths or
machine-dependent values (the run section of ``report.md`` is left out).
"""

from __future__ import annotations

import pytest
from grid_helpers import bootstrap_settings
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode
from test_report import fixed_records

from pytest_restore.record import Record
from pytest_restore.report.inputs import RunInfo, analyse_records
from pytest_restore.report.markdown import render_tables_md
from pytest_restore.report.writer import render_cells_csv
from pytest_restore.stats.findings import findings


class CsvSnapshot(SingleFileSnapshotExtension):
    _write_mode = WriteMode.TEXT
    file_extension = "csv"


class MarkdownSnapshot(SingleFileSnapshotExtension):
    _write_mode = WriteMode.TEXT
    file_extension = "md"


def test_rendering_from_fixed_records(snapshot: SnapshotAssertion) -> None:
    """``cells.csv`` and the markdown tables of a small fixed grid."""
    records = fixed_records()
    analysis = analyse_records(records, RunInfo(settings=bootstrap_settings(2000)))
    assert render_cells_csv(analysis) == snapshot(
        name="cells", extension_class=CsvSnapshot
    )
    assert render_tables_md(findings(analysis)) == snapshot(
        name="report-tables", extension_class=MarkdownSnapshot
    )


@pytest.fixture(scope="session")
def embedded_grid_records(embedded_records: tuple[Record, ...]) -> list[Record]:
    """Every record of the default fake-model grid on the embedded dataset: the main job's.

    The main job reads the embedded dataset from the project's cache, under a
    name that carries a fingerprint of the generator's code: a changed
    generator is run afresh, never hidden by an older file. (Its ablations
    add fields to the records; the tables do not read them.)
    """
    return list(embedded_records)


@pytest.mark.slow
def test_regression_gate_embedded_default_grid(
    embedded_grid_records: list[Record], snapshot: SnapshotAssertion
) -> None:
    """REGRESSION GATE: the default audit's tables; a moved number fails with a diff.

    After an intended change to the audit (data generator, fake models,
    policies, injection, statistics), run
    ``pytest tests/test_snapshots.py --snapshot-update`` and commit the diff.
    """
    analysis = analyse_records(embedded_grid_records)
    assert render_cells_csv(analysis) == snapshot(
        name="cells", extension_class=CsvSnapshot
    )
    assert render_tables_md(findings(analysis)) == snapshot(
        name="report-tables", extension_class=MarkdownSnapshot
    )
