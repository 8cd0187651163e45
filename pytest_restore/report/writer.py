"""The report: the one place that writes what a run found.

From the per-question records (and the run's settings) it writes, into the
report directory:

- ``records.jsonl``: every record, sorted, one JSON object per line;
- ``cells.csv``: one row per policy x budget x regime x reader, with the
  bootstrap intervals of the two-bin share, ``irr/N`` and accuracy;
- ``hypotheses.json``: every test of every hypothesis family (statistic,
  interval, raw and Holm-adjusted p, decision) and the H2 matching table;
- ``report.md``: the per-cell tables in the paper's Table 1 layout, for both
  regimes, the hypothesis families, the H2 pairs, the bins by question type,
  the restore-tightness ablations, one real case per bin and policy, the
  exclusions, the dataset's sha256 and the run's ranker;
- ``figure.png``/``figure.svg``: the three-bin shares per policy and budget;
- ``summary.json``: run settings, dataset, counts and exclusions with reasons.

The statistics pass (:func:`pytest_restore.stats.analysis.analyse`) runs once per
report, with the bootstrap settings of the run (``bootstrap``,
``bootstrap_seed``, ``equivalence_margin``, ``caliper`` in ``RunInfo.settings``).
Everything is a function of the records and ``summary.json``'s run section,
so ``python -m pytest_restore report`` rebuilds the same files from saved
records, byte for byte. Output holds no timestamps or machine-dependent values.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_restore.audit import ablations
from pytest_restore.audit.memo import model_calls
from pytest_restore.models.fake import simulated_note
from pytest_restore.record import BINS, Record, tally_cells
from pytest_restore.record import dumps as records_text
from pytest_restore.report.inputs import (
    RunInfo,
    ablation_rows,
    analyse_records,
    cells_in_order,
    cells_of,
    dataset_label,
    fmt,
    policy_order,
    record_exclusions,
    sort_records,
)
from pytest_restore.report.markdown import (
    render_report_md,
    session_failures,
    untestable_lines,
)
from pytest_restore.stats.analysis import Analysis
from pytest_restore.stats.results import (
    INTERVAL_COLUMNS,
    PROTOCOL_COLUMNS,
    CellStats,
    budget_label,
)

CELL_COLUMNS = PROTOCOL_COLUMNS


EXTRA_COLUMNS = ("irr_share", "rec_share", "res_share", "negative_restore_gain", "excluded")


#: Every column of ``cells.csv``: the figures of docs/PROTOCOL.md section 7, their intervals, the rest.
CSV_COLUMNS = CELL_COLUMNS + INTERVAL_COLUMNS + EXTRA_COLUMNS


def _bin_share(cell: CellStats, bin_: str) -> float | None:
    count = {"irreversible": cell.irr, "recoverable": cell.rec, "residual": cell.res}[bin_]
    return count / cell.err if cell.err else None


def cell_rows(records: Sequence[Record], analysis: Analysis | None = None) -> list[dict[str, str]]:
    """The rows of ``cells.csv`` as formatted strings, from the statistics pass's tally."""
    analysis = analysis if analysis is not None else analyse_records(records)
    rows = []
    for cell in cells_in_order(analysis):
        row = {
            "policy": cell.policy,
            "budget": str(cell.budget),
            "regime": cell.regime,
            "reader": cell.reader,
            "N": str(cell.N),
            "err": str(cell.err),
            "irr": str(cell.irr),
            "rec": str(cell.rec),
            "res": str(cell.res),
            "two_bin_share": fmt(cell.two_bin_share),
            "irr_rate": fmt(cell.irr_rate),
            "accuracy": fmt(cell.accuracy),
            "gold_evicted_rate": fmt(cell.gold_evicted_rate),
        }
        for column in INTERVAL_COLUMNS:
            row[column] = fmt(getattr(cell, column))
        row.update(
            {
                "irr_share": fmt(_bin_share(cell, "irreversible")),
                "rec_share": fmt(_bin_share(cell, "recoverable")),
                "res_share": fmt(_bin_share(cell, "residual")),
                "negative_restore_gain": str(cell.negative_restore_gain),
                "excluded": str(cell.excluded),
            }
        )
        rows.append(row)
    return rows


def render_cells_csv(records: Sequence[Record], analysis: Analysis | None = None) -> str:
    """``cells.csv`` as text."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(cell_rows(records, analysis))
    return buf.getvalue()


def render_records_jsonl(records: Iterable[Mapping[str, Any]], *, ordered: bool = False) -> str:
    """``records.jsonl`` as text, in canonical order (``ordered``: the records already are)."""
    return records_text(records if ordered else sort_records(records))


def render_hypotheses_json(analysis: Analysis, records: Sequence[Record] | None = None) -> str:
    """``hypotheses.json`` as text: settings, per-family summary, every test, the H2 matching.

    With ``records``, also the restore-tightness ablations (key ``ablations``).
    """
    data = analysis.to_json()
    if records is not None:
        data["ablations"] = ablations.to_json(ablation_rows(records, analysis), ablations.by_cell(records))
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


@dataclass(frozen=True)
class ReportFiles:
    """Where the report was written, and the expectations it found unmet."""

    out_dir: Path
    records: Path
    cells: Path
    report: Path
    summary: Path
    hypotheses: Path
    figure_png: Path
    figure_svg: Path
    failures: tuple[str, ...] = ()
    #: one line per family whose unmet expectations this run had no power to meet
    untestable: tuple[str, ...] = ()


def summary_json(
    records: Sequence[Record],
    info: RunInfo,
    analysis: Analysis | None = None,
    calls: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """``summary.json``: the run section plus counts (and the hypothesis summary)."""
    bins = {b: sum(1 for r in records if r["bin"] == b) for b in BINS}
    out: dict[str, Any] = {
        "run": info.to_json(),
        "counts": {
            "records": len(records),
            "cells": len(cells_of(records)),
            "questions": len({r["question_id"] for r in records}),
            "excluded_records": sum(1 for r in records if r["excluded"] is not None),
            "bins": bins,
        },
        "record_exclusions": record_exclusions(records),
        "model_calls": dict(calls) if calls is not None else model_calls(records),
    }
    note = simulated_note(records, info.dataset.get("official"))
    out["simulated"] = note is not None
    if note:
        out["simulated_note"] = note
    if analysis is not None:
        out["hypotheses"] = analysis.summary()
        out["failures"] = session_failures(analysis)
        out["not_testable"] = untestable_lines(analysis)
    return out


def write_report(records: Sequence[Record], info: RunInfo, out_dir: str | Path) -> ReportFiles:
    """Write every report file into ``out_dir``; the statistics pass runs once.

    ``ReportFiles.failures`` lists the family expectations that failed (see
    :func:`session_failures`); the plugin fails the session on them.
    """
    out = Path(out_dir)
    ordered = sort_records(Record.of(r) for r in records)
    out.mkdir(parents=True, exist_ok=True)
    analysis = analyse_records(ordered, info)
    files = ReportFiles(
        out_dir=out,
        records=out / "records.jsonl",
        cells=out / "cells.csv",
        report=out / "report.md",
        summary=out / "summary.json",
        hypotheses=out / "hypotheses.json",
        figure_png=out / "figure.png",
        figure_svg=out / "figure.svg",
        failures=tuple(session_failures(analysis)),
        untestable=tuple(untestable_lines(analysis)),
    )
    files.records.write_text(render_records_jsonl(ordered, ordered=True), encoding="utf-8")
    files.cells.write_text(render_cells_csv(ordered, analysis), encoding="utf-8")
    files.hypotheses.write_text(render_hypotheses_json(analysis, ordered), encoding="utf-8")
    calls = model_calls(ordered)
    files.report.write_text(render_report_md(ordered, info, analysis, calls), encoding="utf-8")
    files.summary.write_text(
        json.dumps(summary_json(ordered, info, analysis, calls), indent=2, sort_keys=True) + "\n",
        encoding="utf-8",
    )
    from pytest_restore.report.figure import (
        write_figure,  # matplotlib loads when a report is written
    )

    write_figure(analysis.cells, out, dataset=dataset_label(info))
    return files


def terminal_lines(records: Sequence[Record]) -> list[str]:
    """A short summary for the end of the pytest run: regime (b) per cell."""
    lines = [
        f"{'policy':<16}{'budget':>8}{'N':>7}{'err':>6}{'irr':>6}{'rec':>6}{'res':>6}{'two-bin':>9}{'acc':>7}"
    ]
    cells = tally_cells(records)
    for (policy, budget, regime, reader) in sorted(cells, key=lambda k: (policy_order(k[0]), -k[1], k[3], k[2])):
        if regime != "b":
            continue
        fig = cells[(policy, budget, regime, reader)]
        lines.append(
            f"{policy:<16}{budget_label(budget):>8}{fig.N:>7}{fig.err:>6}{fig.irr:>6}{fig.rec:>6}{fig.res:>6}"
            f"{fmt(fig.two_bin_share, 2) or '-':>9}{fmt(fig.accuracy, 2) or '-':>7}"
        )
    return lines
