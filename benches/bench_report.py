"""The report's tail, phase by phase: ``python benches/bench_report.py REPORT_DIR [--data FILE] [--prepared DIR]``.

What a session waits for after its last cell is the report: the records read
into place, the statistics pass (tallies, the one shared resample matrix, the
families), each file rendered, the figure and the HTML page (which reads the
data file again for the units' texts). This rebuilds the report of a finished
run from its ``records.jsonl`` and ``summary.json`` into a temporary directory
and prints each phase's CPU and wall seconds, so a change to the tail is
measured where it lands. ``--data`` is the file the run read (default: the one
``summary.json`` names); ``--prepared`` the run's prepared copy of it
(``.pytest_cache/d/restore/prepared``), which the session's own report reads
in its place.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def main(argv: Sequence[str] | None = None) -> int:
    """Rebuild the report phase by phase and print the table."""
    parser = argparse.ArgumentParser(prog="python benches/bench_report.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("report_dir", help="a finished run's report directory (records.jsonl, summary.json)")
    parser.add_argument("--data", default=None, help="the data file the run read [the one summary.json names]")
    parser.add_argument("--prepared", default=None, help="the run's prepared copy of the data (a directory)")
    args = parser.parse_args(argv)
    rows: list[tuple[str, float, float]] = []

    def phase(name: str, fn: Callable[[], T]) -> T:
        cpu, wall = time.process_time(), time.perf_counter()
        out = fn()
        rows.append((name, time.process_time() - cpu, time.perf_counter() - wall))
        return out

    def imports() -> None:
        import pytest_restore.report.writer  # noqa: F401 - the statistics and renderers

    phase("imports (writer, statistics)", imports)
    from pytest_restore.record import Record
    from pytest_restore.report import writer
    from pytest_restore.report.inputs import (
        dataset_label,
        read_records,
        read_run_info,
        sort_records,
    )
    from pytest_restore.report.markdown import render_markdown
    from pytest_restore.report.model import build_model
    from pytest_restore.run.checks import read_check
    from pytest_restore.stats.families import default_families

    records_path = Path(args.report_dir) / "records.jsonl"
    records = phase("read and check records.jsonl", lambda: read_records(records_path))
    info = replace(read_run_info(records_path, read_check), families=tuple(default_families().values()))
    ordered = phase("sort records", lambda: sort_records(Record.of(r) for r in records))
    model = phase("report model (statistics, summary.json's counts, model calls, cost, cases)", lambda: build_model(ordered, info))
    analysis, log = model.analysis, model.log
    out = Path(tempfile.mkdtemp(prefix="pytest-restore-tail-"))
    files = writer.ReportFiles(
        out, out / "records.jsonl", out / "cells.csv", out / "report.md", out / "summary.json",
        out / "hypotheses.json", out / "figure.png", out / "figure.svg", out / "report.html",
    )
    phase("records.jsonl", lambda: files.records.write_text(writer.render_records_jsonl(ordered, ordered=True), encoding="utf-8"))
    phase("cells.csv, hypotheses.json", lambda: (writer.render_cells_csv(analysis), writer.render_hypotheses_json(model.findings)))
    report_md = phase("report.md", lambda: render_markdown(model))
    phase("summary.json", lambda: json.dumps(log.to_json(), indent=2, sort_keys=True))

    def figure() -> None:
        from pytest_restore.report.figure import write_figure

        write_figure(model.findings, out, dataset=dataset_label(info))

    phase("figure (matplotlib import, PNG, SVG)", figure)
    phase("report.html (the data's texts, the stories, the page)",
          lambda: writer._write_html(ordered, info, model, files, report_md, args.data, prepared=args.prepared))
    total_cpu, total_wall = sum(r[1] for r in rows), sum(r[2] for r in rows)
    width = max(len(r[0]) for r in rows)
    print(f"{len(ordered):,} records; CPU and wall seconds per phase")
    for name, cpu, wall in rows:
        print(f"  {name:<{width}}  {cpu:6.2f} CPU  {wall:6.2f} wall  ({cpu / total_cpu:4.0%} of the CPU)")
    print(f"  {'total':<{width}}  {total_cpu:6.2f} CPU  {total_wall:6.2f} wall")
    return 0


if __name__ == "__main__":
    sys.exit(main())
