"""Snapshot tests of the report's tables (syrupy, one readable file per snapshot).

Two kinds:

- **Rendering**, from fixed records built in ``test_report.fixed_records``: a
  change to how ``cells.csv`` or the markdown tables are written shows up here.
- **The regression gate**: the fake-model grid on the embedded default dataset,
  built in-process exactly as the plugin builds it by default (every built-in
  policy x 80k/30k/8k, random seeds 0/1/2). Any change to the audit that moves
  a number fails with a readable diff of ``cells.csv`` or ``report.md``'s tables.

To accept an intended change: ``pytest tests/test_snapshots.py --snapshot-update``
and commit ``tests/__snapshots__/``. Snapshots hold no timestamps, paths or
machine-dependent values (the run section of ``report.md`` is left out).
"""

from __future__ import annotations

from typing import Any

import pytest
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode
from test_report import fixed_records

from pytest_restore.audit.run import Audit, AuditConfig
from pytest_restore.data.dataset import load_dataset
from pytest_restore.memory.eviction import BUILTIN_POLICIES
from pytest_restore.models.fake import FakeJudge, FakeReader, FakeScorer
from pytest_restore.report.inputs import RunInfo, analyse_records
from pytest_restore.report.markdown import render_tables_md
from pytest_restore.report.writer import render_cells_csv
from pytest_restore.synthetic.embedded import embedded_dataset


class CsvSnapshot(SingleFileSnapshotExtension):
    _write_mode = WriteMode.TEXT
    file_extension = "csv"


class MarkdownSnapshot(SingleFileSnapshotExtension):
    _write_mode = WriteMode.TEXT
    file_extension = "md"


def test_rendering_from_fixed_records(snapshot: SnapshotAssertion) -> None:
    """``cells.csv`` and the markdown tables of a small fixed grid."""
    records = fixed_records()
    analysis = analyse_records(records, RunInfo(settings={"bootstrap": 2000}))
    assert render_cells_csv(records, analysis) == snapshot(
        name="cells", extension_class=CsvSnapshot
    )
    assert render_tables_md(records, analysis) == snapshot(
        name="report-tables", extension_class=MarkdownSnapshot
    )


@pytest.fixture(scope="session")
def embedded_grid_records(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Every record of the default fake-model grid on the embedded dataset (~35 s, once).

    The dataset is generated afresh (about 2 s) rather than taken from
    ``.pytest_cache``: a cached file from an older generator would hide a
    change to the generator from the gate.
    """
    dataset = load_dataset(embedded_dataset(tmp_path_factory.mktemp("embedded")))
    reader = FakeReader()
    audit = Audit(dataset, AuditConfig(), reader=reader, judge=FakeJudge(), scorer=FakeScorer())
    reader.learn(p.history for p in audit.questions)  # as RestoreSession.audit does
    records: list[dict[str, Any]] = []
    for policy_class in BUILTIN_POLICIES:
        for budget in AuditConfig().budgets:
            records += audit.run_cell(policy_class(), budget).records
    return records


@pytest.mark.slow
def test_regression_gate_embedded_default_grid(
    embedded_grid_records: list[dict[str, Any]], snapshot: SnapshotAssertion
) -> None:
    """REGRESSION GATE: the default audit's tables; a moved number fails with a diff.

    After an intended change to the audit (data generator, fake models,
    policies, injection, statistics), run
    ``pytest tests/test_snapshots.py --snapshot-update`` and commit the diff.
    """
    analysis = analyse_records(embedded_grid_records)
    assert render_cells_csv(embedded_grid_records, analysis) == snapshot(
        name="cells", extension_class=CsvSnapshot
    )
    assert render_tables_md(embedded_grid_records, analysis) == snapshot(
        name="report-tables", extension_class=MarkdownSnapshot
    )
