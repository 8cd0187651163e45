"""What a user's snapshot test pins: the grid's cells one figure a line, and the families' decisions.

The plugin's ``restore_snapshot`` fixture compares both with syrupy snapshots
(``plugin/snapshot.py``); they are made here from the session's grid records
and its bootstrap settings and families, through the one analysis.
"""

from __future__ import annotations

import csv
import io

from pytest_restore.report.markdown import render_decisions_md
from pytest_restore.report.writer import render_cells_csv
from pytest_restore.run.cells import grid_records
from pytest_restore.run.parts import RunParts
from pytest_restore.stats.analysis import analyse
from pytest_restore.stats.results import budget_label

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



def snapshot_tables(parts: RunParts) -> tuple[str, str]:
    """``(cells one figure a line, decisions)`` of the session's grid (its cells reused where this run has them)."""
    s = parts.settings
    analysis = analyse(
        grid_records(parts), resamples=s.bootstrap, seed=s.bootstrap_seed,
        equivalence_margin=s.equivalence_margin, families=parts.plan.families,
    )
    return cells_by_figure(render_cells_csv(analysis)), render_decisions_md(analysis)
