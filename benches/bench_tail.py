"""What the ``-n 2`` grid waits for, process by process: ``python benches/bench_tail.py --data FILE``.

Runs the default grid with the fake models under ``pytest -n 2`` (as
``benches/bench_grid.py``'s grids run) with ``PYTEST_RESTORE_TIMELINE`` set,
so every process of the run writes when each of its phases starts and ends
(:mod:`pytest_restore.timeline`): the data loaded, the controller's token
counts and word profiles made for the workers, each worker's histories
prepared, the workers' cells, the messages they send and their checks, the
controller's reading of each message, the checks after the grid, each part of the report, the wait for it, and the report's page
process (``run/page.py``). It prints the timeline (seconds from the start of
the pytest process, each phase's wall and its process's CPU seconds), the tail
(what the session did after the last cell ended), the process tree's CPU
seconds and the machine's load, since on a shared machine wall time means
little without them.

``--cache DIR`` is the run's pytest cache: a copy of a warm one (the prepared
data, ``d/restore/prepared``) times the warm grid, which is what the tail is
measured on; the directory's ``d/restore/cells`` is removed first either way.
``--runs N`` repeats the run and prints each. ``--keep DIR`` keeps the report.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

GRID_TEST = '''"""The audit grid, parametrized by the pytest-restore plugin (written by the bench)."""

from pytest_restore.plugin import RestoreCell


def test_cell(restore_cell: RestoreCell) -> None:
    restore_cell.audit()
    restore_cell.check()
'''


def run_once(data: Path, cache: Path, work: Path, report: Path, extra: Sequence[str]) -> dict[str, Any]:
    """One ``-n 2`` grid with the timeline on: its wall, its process tree's CPU, the phases."""
    test = work / "grid" / "test_grid.py"
    test.parent.mkdir(parents=True, exist_ok=True)
    test.write_text(GRID_TEST, encoding="utf-8")
    shutil.rmtree(cache / "d" / "restore" / "cells", ignore_errors=True)
    timeline = work / "timeline.jsonl"
    timeline.unlink(missing_ok=True)
    cmd = [
        sys.executable, "-m", "pytest", str(test), "-q", "-p", "no:randomly",
        # as this repository's pyproject does for its own runs (the grid runs under a rootdir of its own):
        # langsmith's pytest plugin, which the langmem extra installs, is no part of the audit; it costs each
        # pytest process of the grid (the controller and each worker) about 0.8 CPU s (an empty session: 1.2 -> 0.4)
        "-p", "no:langsmith_plugin", "-n", "2",
        "--rootdir", str(test.parent), "-o", f"cache_dir={cache}",
        "--restore-data", str(data), "--restore-report-dir", str(report),
        "--restore-family-checks", "report", *extra,
    ]
    env = {**os.environ, "PYTEST_RESTORE_TIMELINE": str(timeline)}
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.time()
    done = subprocess.run(cmd, cwd=test.parent, env=env, capture_output=True, text=True, check=False)
    wall = time.time() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"the grid failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    phases = [json.loads(line) for line in timeline.read_text(encoding="utf-8").splitlines()]
    return {"wall": wall, "cpu": cpu, "load": (load, os.getloadavg()[0]), "start": start, "phases": phases}


def show(run: dict[str, Any]) -> None:
    """The run's timeline, its tail and each process's CPU."""
    start = run["start"]
    phases = sorted(run["phases"], key=lambda p: (p["start"], p["end"]))
    controller = next((p["pid"] for p in phases if p["name"] == "session start"), None)
    for p in phases:  # the report's page process writes as "main" too: named apart
        if p["process"] == "main" and controller is not None and p["pid"] != controller:
            p["process"] = "page"
    print(f"wall {run['wall']:.1f} s, CPU {run['cpu']:.1f} s (process tree), load {run['load'][0]:.2f} -> {run['load'][1]:.2f}")
    print(f"  {'process':<8} {'thread':<22} {'start':>6} {'end':>6} {'wall':>6} {'CPU':>6}  phase")
    for p in phases:
        thread = p["thread"] if p["thread"] != "MainThread" else ""
        print(
            f"  {p['process']:<8} {thread[:22]:<22} {p['start'] - start:6.1f} {p['end'] - start:6.1f} "
            f"{p['end'] - p['start']:6.2f} {p['cpu']:6.2f}  {p['name']}"
        )
    cells_end = max((p["end"] for p in phases if p["name"].startswith(("cell ", "check "))), default=start)
    receives = [p for p in phases if p["name"].startswith("receive ")]
    print(f"  the last cell or check ended at {cells_end - start:.1f} s; the run ended at {run['wall']:.1f} s: "
          f"a tail of {run['wall'] - (cells_end - start):.1f} s")
    print(f"  the controller read {len(receives)} messages in {sum(p['end'] - p['start'] for p in receives):.1f} s "
          f"of wall, {sum(p['cpu'] for p in receives):.1f} CPU s")
    written = [p for p in phases if p["name"] == "report: written"]
    paged = [p for p in phases if p["process"] == "page"]
    if written:
        w = written[0]
        print(f"  the report: {w['end'] - w['start']:.1f} s of wall, {w['cpu']:.1f} CPU s of the controller"
              + (f", {sum(p['cpu'] for p in paged):.1f} CPU s of its page process" if paged else ""))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the grid ``--runs`` times and print each timeline."""
    parser = argparse.ArgumentParser(prog="python benches/bench_tail.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, type=Path, help="the data file (bench_grid.py's synthetic-S.json)")
    parser.add_argument("--cache", type=Path, default=None, help="the pytest cache to run on [a fresh one: cold]")
    parser.add_argument("--runs", type=int, default=1, help="runs, one after the other [1]")
    parser.add_argument("--keep", type=Path, default=None, help="where the report goes [a temporary directory]")
    parser.add_argument("--json", type=Path, default=None, help="also write every run's figures here")
    parser.add_argument("extra", nargs="*", help="more pytest options (after --)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="pytest-restore-bench-tail-"))
    cache = args.cache if args.cache is not None else work / "cache"
    report = args.keep if args.keep is not None else work / "report"
    runs = []
    for _ in range(args.runs):
        run = run_once(args.data.resolve(), cache.resolve(), work, report.resolve(), args.extra)
        show(run)
        runs.append(run)
    if args.json is not None:
        args.json.write_text(json.dumps(runs), encoding="utf-8")
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
