"""What a user sees of one question: ``python benches/bench_inspect.py``.

Runs the audit grid (the embedded default, or ``--data``; ``--questions``
and ``--embedded-questions`` size it) into a report directory, or reads one
already written (``--report-dir`` with ``--no-run``), then prints:

- ``report.html``'s size, and how long it takes to open in headless Chromium:
  from the browser's start to the page's "ready" line in the browser's log
  (data unpacked, first rows and story drawn), less the same for an empty
  page (the median of ``--repeats`` runs each);
- for a question of each bin (irreversible, recoverable, residual; regime b,
  the first evicting policy that has one), the command that shows it and what
  it prints: ``python -m pytest_restore show QUESTION_ID --cell CELL``.

docs/INSPECT.md's examples and figures are this script's output.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BINS = ("irreversible", "recoverable", "residual")


def chromium() -> str | None:
    """The Chromium on PATH, if any."""
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


def open_page(browser: str, page: Path, profile: Path) -> float:
    """Seconds from starting headless Chromium on ``page`` to the page's "ready" line in the browser's log.

    The page logs that line when its script is done (data unpacked, first rows
    and story drawn); the log's time stamps are the wall clock's, whatever
    the headless browser's virtual time.
    """
    args = [browser, "--headless", "--disable-gpu", "--no-first-run", f"--user-data-dir={profile}",
            "--enable-logging=stderr", "--v=0", "--virtual-time-budget=120000", "--dump-dom", page.as_uri()]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        args.insert(2, "--no-sandbox")
    start = datetime.datetime.now()
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise SystemExit(f"bench: chromium exited {done.returncode}: {done.stderr[-1000:]}")
    found = re.search(r":(\d{4})/(\d{6}\.\d{6}):INFO:CONSOLE[^\n]*report\.html: ready", done.stderr)
    if found is None:
        raise SystemExit(f"bench: {page} never said it was ready:\n{done.stderr[-2000:]}")
    day, clock = found.groups()
    ready = datetime.datetime.strptime(f"{start.year}{day}{clock}", "%Y%m%d%H%M%S.%f")
    return (ready - start).total_seconds()


def load_time(page: Path, repeats: int) -> str:
    """The page's opening time in words (median of ``repeats``, less an empty page's), or why it was not measured."""
    browser = chromium()
    if browser is None:
        return "not measured: Chromium is not installed"
    if repeats < 1:
        return "not measured (--repeats 0)"
    with tempfile.TemporaryDirectory() as tmp:
        empty = Path(tmp) / "empty.html"
        empty.write_text('<!DOCTYPE html><html><body><script>console.info("report.html: ready");</script></body></html>\n')
        pages, bases = [], []
        for _ in range(repeats):
            pages.append(open_page(browser, page, Path(tmp) / "profile"))
            bases.append(open_page(browser, empty, Path(tmp) / "profile"))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"{statistics.median(pages) - statistics.median(bases):.2f} s from the browser's start to the page's "
        f"first screen, less an empty page's {statistics.median(bases):.2f} s (median of {repeats}; "
        f"{os.cpu_count()} cores, load average {load:.1f})"
    )


def run_grid(report: Path, args: argparse.Namespace) -> None:
    """The audit grid, serially with the fake models, into ``report``."""
    cmd = [sys.executable, "-m", "pytest", "benches/test_grid.py", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
           f"--restore-report-dir={report}"]
    if args.data:
        cmd.append(f"--restore-data={args.data}")
    if args.embedded_questions:
        cmd.append(f"--restore-embedded-questions={args.embedded_questions}")
    if args.questions:
        cmd.append(f"--restore-questions={args.questions}")
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if not (report / "report.html").exists():
        raise SystemExit(f"bench: the grid wrote no report ({done.returncode}):\n{done.stdout[-3000:]}")
    print(f"grid: {' '.join(cmd[3:])}: {time.perf_counter() - start:.0f} s, exit {done.returncode}")


def examples(report: Path) -> list[dict[str, Any]]:
    """A record of each bin the run holds: regime (b), the first evicting policy and loosest budget with one."""
    records = [json.loads(line) for line in (report / "records.jsonl").read_text(encoding="utf-8").splitlines()]
    out = []
    for name in BINS:
        found = next((r for r in records if r["bin"] == name and r["regime"] == "b" and r["policy"] != "no-evict"), None)
        found = found or next((r for r in records if r["bin"] == name), None)
        if found is not None:
            out.append(found)
    return out


def cell_of(record: dict[str, Any]) -> str:
    budget = record["budget"]
    label = f"{budget // 1000}k" if budget % 1000 == 0 and budget > 0 else str(budget)
    return f"{record['policy']}-{label}-{record['regime']}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report-dir", default=None, help="where the grid writes (default: a temporary directory)")
    parser.add_argument("--no-run", action="store_true", help="read --report-dir as it is, run nothing")
    parser.add_argument("--data", default=None, help="--restore-data for the grid (default: the embedded default)")
    parser.add_argument("--embedded-questions", type=int, default=None, help="--restore-embedded-questions")
    parser.add_argument("--questions", type=int, default=None, help="--restore-questions")
    parser.add_argument("--repeats", type=int, default=3, help="opening the page: median of this many (default 3; 0: not measured)")
    parser.add_argument("--width", type=int, default=110, help="show's line width (default 110)")
    parser.add_argument("--no-examples", action="store_true", help="the page's figures only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(args.report_dir) if args.report_dir else Path(tmp) / "report"
        if not args.no_run:
            run_grid(report, args)
        page = report / "report.html"
        records = len((report / "records.jsonl").read_text(encoding="utf-8").splitlines())
        print(f"report.html: {page.stat().st_size / 1e6:.1f} MB for {records} records")
        print(f"opening report.html: {load_time(page, args.repeats)}")
        if args.no_examples:
            return
        for record in examples(report):
            cmd = ["show", record["question_id"], "--cell", cell_of(record), "--width", str(args.width)]
            shown = ["python", "-m", "pytest_restore", *cmd] + (["--data", Path(args.data).name] if args.data else [])
            print(f"\n### {record['bin']}\n\n$ {' '.join(shown)}")
            extra = ["--report-dir", str(report)] + (["--data", args.data] if args.data else [])
            done = subprocess.run([sys.executable, "-m", "pytest_restore", *cmd, *extra],
                                  capture_output=True, text=True, check=False, cwd=ROOT)
            print(done.stdout if done.returncode == 0 else f"(exit {done.returncode}) {done.stderr}")


if __name__ == "__main__":
    main()
