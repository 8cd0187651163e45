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
- ``figure.png``/``figure.svg``: the findings' headline (the two-bin share with
  its intervals) over the bin shares (irreversible, recoverable, distorted,
  residual), per policy and budget;
- ``report.html``: the findings, the figure and the cells tables in one
  self-contained page, with every record's story (what each condition's
  reader saw, from the data file's texts) filterable and one click away;
- ``summary.json``: run settings, dataset, counts and exclusions with reasons,
  the records' schema version (``record_schema``) and the session's provenance.

The statistics pass (:func:`pytest_restore.stats.analysis.analyse`) runs once per
report, with the bootstrap settings of the run (``bootstrap``,
``bootstrap_seed``, ``equivalence_margin``, ``caliper`` in ``RunInfo.settings``).
Everything is a function of the records and what ``summary.json`` keeps
(the run section and the session's provenance), and, for ``report.html``'s
texts, the data file the run read; each file written once,
whole, so ``python -m pytest_restore report`` rebuilds the same files from
saved records, byte for byte. Output holds no machine-dependent values; the
only time in it is the provenance's session start.
"""

from __future__ import annotations

import csv
import io
import json
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_restore.record import Record
from pytest_restore.records_file import dumps as records_text
from pytest_restore.report.inputs import RunInfo, RunLog, fmt, sort_records
from pytest_restore.report.markdown import ReportMarkdown, render_markdown
from pytest_restore.report.model import ReportModel, build_model
from pytest_restore.stats.analysis import Analysis
from pytest_restore.stats.findings import Findings
from pytest_restore.stats.results import (
    CELL_COLUMNS,
    POLICY_GLOSS,
    CellStats,
    budget_label,
    cell_order,
)
from pytest_restore.stats.side_by_side import SIDE_COLUMNS, SideRow
from pytest_restore.timeline import phase

if TYPE_CHECKING:  # the loaders are imported where a file is read
    from pytest_restore.data.dataset import Dataset
    from pytest_restore.data.loaders import DatasetRegistry

#: ``report.html``'s data made elsewhere while the rest of the report is written (``run/page.py``: in a fresh
#: process, beside the statistics and the figure): called with the records in canonical order and the run's
#: info as the report starts, it returns what gives the packed data (:func:`page_text`) once it is made, or
#: ``None`` when it was not (the data is then made here, as without it).
PageMaker = Callable[[Sequence[Record], RunInfo], Callable[[], "str | None"]]


def _cell_value(value: Any) -> str:
    """One ``cells.csv`` value: figures to 4 decimals, counts as they are, undefined empty."""
    return fmt(value) if isinstance(value, float) or value is None else str(value)


def cell_rows(analysis: Analysis) -> list[dict[str, str]]:
    """The rows of ``cells.csv`` as formatted strings, every ranker's cells, in the one cell order.

    ``ranker`` names each row's ranker (the baseline's cells too, and a one-ranker run's).
    """
    cells = sorted([*analysis.cells, *analysis.ranker_cells], key=lambda c: cell_order(c.key))
    return [
        {k: _cell_value(v) for k, v in {**cell.as_row(), "ranker": cell.ranker or analysis.counts.ranker}.items()}
        for cell in cells
    ]


def render_cells_csv(analysis: Analysis, side: Sequence[SideRow] = ()) -> str:
    """``cells.csv`` as text; with ``side`` (a run with a memory library), each row with its cell's
    :data:`~pytest_restore.stats.side_by_side.SIDE_COLUMNS` after the others, formatted as its other figures are."""
    buf = io.StringIO()
    extra = {(row.policy, row.budget, row.reader): _side_values(row) for row in side}
    writer = csv.DictWriter(buf, fieldnames=CELL_COLUMNS + (SIDE_COLUMNS if extra else ()), lineterminator="\n")
    writer.writeheader()
    blank = dict.fromkeys(SIDE_COLUMNS, "")
    for row in cell_rows(analysis):
        if extra:
            row = {**row, **extra.get((row["policy"], int(row["budget"]), row["reader"]), blank)}
        writer.writerow(row)
    return buf.getvalue()


def _side_values(row: SideRow) -> dict[str, str]:
    """One row's :data:`~pytest_restore.stats.side_by_side.SIDE_COLUMNS`: figures to 4 decimals (USD to 6), the library as named."""
    values: dict[str, Any] = {column: getattr(row, column) for column in SIDE_COLUMNS}
    return {k: v if isinstance(v, str) else fmt(v, 6 if k == "memory_usd_per_question" else 4) for k, v in values.items()}


def render_records_jsonl(records: Iterable[Record], *, ordered: bool = False) -> str:
    """``records.jsonl`` as text, in canonical order (``ordered``: the records already are)."""
    return records_text(records if ordered else sort_records(records))


def render_hypotheses_json(findings: Findings) -> str:
    """``hypotheses.json`` as text: settings, per-family summary, every test, the H2 matching, the ablations."""
    return json.dumps(findings.hypotheses, indent=2, sort_keys=True) + "\n"


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
    html: Path
    #: the run log's (:class:`RunLog`) expectations the run could test and did not meet (each fails the session)
    failures: tuple[str, ...] = ()
    #: the run log's lines, one per family whose unmet expectations this run had no power to meet
    untestable: tuple[str, ...] = ()
    #: the terminal's table of regime (b) (:func:`terminal_lines`)
    table: tuple[str, ...] = ()
    #: what the table's rows do not say themselves, for the terminal and report.html: a memory system's
    #: budgets that never bound its stores (their rows repeat its loosest budget's; :func:`unbound_notes`)
    notes: tuple[str, ...] = ()
    #: the typed run log ``summary.json`` holds (``None``: a caller that made the files otherwise)
    log: RunLog | None = None


def write_report(
    records: Sequence[Record],
    info: RunInfo,
    out_dir: str | Path,
    *,
    data_file: str | Path | None = None,
    loaders: DatasetRegistry | None = None,
    prepared: str | Path | None = None,
    page: PageMaker | None = None,
) -> ReportFiles:
    """Write every report file into ``out_dir``; the statistics pass runs once.

    ``ReportFiles.failures`` lists the family expectations that failed (see
    :func:`~pytest_restore.stats.findings.session_failures`); the plugin fails the session on them.
    ``data_file`` is the data the run read (default: the one ``summary.json``
    names, :func:`pytest_restore.report.story.open_data`): ``report.html``
    takes its texts from it, read by the run's ``loaders`` (a session's
    include its conftest.py's); without it the page says why it has none.
    ``prepared`` is where the run keeps its prepared copy of that data, read
    in its place when it is there. ``page`` makes the page's data elsewhere
    meanwhile (:data:`PageMaker`); the files are the same either way.
    """
    out = Path(out_dir)
    with phase("report: sort records"):
        ordered = sort_records(Record.of(r) for r in records)
    with phase("report: report.html's data started elsewhere"):
        page_made = page(ordered, info) if page is not None else None
    out.mkdir(parents=True, exist_ok=True)
    with phase("report: model (statistics)"):
        model = build_model(ordered, info)
    analysis, log = model.analysis, model.log
    files = ReportFiles(
        out_dir=out,
        records=out / "records.jsonl",
        cells=out / "cells.csv",
        report=out / "report.md",
        summary=out / "summary.json",
        hypotheses=out / "hypotheses.json",
        figure_png=out / "figure.png",
        figure_svg=out / "figure.svg",
        html=out / "report.html",
        failures=log.failures,
        untestable=log.not_testable,
        table=tuple(terminal_lines(analysis)),
        notes=model.notes,
        log=log,
    )
    with phase("report: records.jsonl"):
        files.records.write_text(render_records_jsonl(ordered, ordered=True), encoding="utf-8")
    with phase("report: cells.csv, hypotheses.json, report.md, summary.json"):
        files.cells.write_text(render_cells_csv(analysis, model.side), encoding="utf-8")
        files.hypotheses.write_text(render_hypotheses_json(model.findings), encoding="utf-8")
        report_md = render_markdown(model)
        files.report.write_text(report_md.text, encoding="utf-8")
        files.summary.write_text(json.dumps(log.to_json(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    from pytest_restore.report.figure import (
        write_figure,  # matplotlib loads when a report is written
    )

    with phase("report: figure"):
        write_figure(model.findings, out, dataset=model.dataset, simulated=model.simulated_label)
    with phase("report: report.html"):
        _write_html(ordered, info, model, files, report_md, data_file, loaders, prepared, page_made)
    return files


def _write_html(
    records: Sequence[Record],
    info: RunInfo,
    model: ReportModel,
    files: ReportFiles,
    report_md: ReportMarkdown,
    data_file: str | Path | None,
    loaders: DatasetRegistry | None = None,
    prepared: str | Path | None = None,
    page_made: Callable[[], str | None] | None = None,
) -> None:
    """``report.html``, its texts from the run's data file (or a line saying why there are none);
    its data from ``page_made`` when that made it (:data:`PageMaker`)."""
    from pytest_restore.report.html import render_html

    with phase("report: report.html: waiting for its data"):
        packed = page_made() if page_made is not None else None
    if packed is None:
        with phase("report: report.html: its data made here"):
            packed = page_text(records, *page_dataset(info, data_file, loaders, prepared), model.versions)
    opening = report_md.text.split("## Findings", 1)[0].replace("# Restore-counterfactual audit", "", 1)
    page = render_html(
        records,
        (report_md.findings, report_md.cells_b, report_md.cells_a),
        versions=model.versions,
        figure_svg=files.figure_svg.read_text(encoding="utf-8"),
        dataset=None,
        opening=opening.splitlines(),
        notes=files.notes,
        packed=packed,
    )
    files.html.write_text(page, encoding="utf-8")


def page_dataset(
    info: RunInfo,
    data_file: str | Path | None,
    loaders: DatasetRegistry | None = None,
    prepared: str | Path | None = None,
) -> tuple[Dataset | None, str]:
    """The data ``report.html`` takes the units' texts from, and the page's note when it has none (why)."""
    from pytest_restore.report.story import StoryError, open_data

    try:
        return open_data(info, data_file, loaders, prepared), ""
    except StoryError as err:
        return None, f"The units' texts are not shown: {err}."


def page_text(ordered: Sequence[Record], dataset: Dataset | None, note: str, versions: Mapping[str, str]) -> str:
    """``report.html``'s data, packed: every record's story (records in canonical order) with the texts of
    ``dataset`` (:func:`page_dataset`, ``note`` when there are none) and the memory libraries' ``versions``."""
    from pytest_restore.report.html import pack, page_data

    return pack(page_data(ordered, dataset, note, versions))


def terminal_lines(analysis: Analysis) -> list[str]:
    """A short summary for the end of the pytest run: regime (b) per cell, in the analysis's order."""
    cells = [cell for cell in analysis.cells if cell.regime == "b"]
    width = max([16] + [len(cell.policy) + 2 for cell in cells])  # a long name (session-summary-model) keeps its row
    lines = [
        f"{'policy':<{width}}{'budget':>8}{'N':>7}{'err':>6}{'irr':>6}{'rec':>6}{'dis':>6}{'res':>6}{'two-bin':>9}{'acc':>7}"
    ]
    for cell in cells:
        lines.append(
            f"{cell.policy:<{width}}{budget_label(cell.budget):>8}{cell.N:>7}{cell.err:>6}{cell.irr:>6}{cell.rec:>6}"
            f"{cell.dis:>6}{cell.res:>6}{fmt(cell.two_bin_share, 2) or '-':>9}{fmt(cell.accuracy, 2) or '-':>7}"
        )
    return lines + legend_lines(cells)


#: The legend's width: it stays readable in a 100-column terminal.
LEGEND_WIDTH = 100


def legend_lines(cells: Sequence[CellStats]) -> list[str]:
    """What the terminal table's rows do not say themselves: what each built-in policy in it does
    (:data:`~pytest_restore.stats.results.POLICY_GLOSS`; a registered policy is its author's to know),
    and why a seeded policy's N is larger (it counts each question once per seed)."""
    policies = list(dict.fromkeys(cell.policy for cell in cells))
    glossed = [f"{policy} {POLICY_GLOSS[policy]}" for policy in policies if policy in POLICY_GLOSS]
    lines = textwrap.wrap("; ".join(glossed), LEGEND_WIDTH, initial_indent="policies: ", subsequent_indent="  ")
    seeded = {cell.policy: len(cell.seeds) for cell in cells if len(cell.seeds) > 1}
    if seeded:
        pooled = ", ".join(f"{policy} counts each once per seed ({k} seeds: about {k}x)" for policy, k in seeded.items())
        lines += textwrap.wrap(
            f"N: questions answerable from their gold alone; {pooled}",
            LEGEND_WIDTH,
            subsequent_indent="  ",
        )
    return lines
