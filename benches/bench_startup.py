"""What a newcomer waits for: ``python benches/bench_startup.py``.

Prints one table:

- **an unrelated pytest run**: a one-test file in a scratch directory, with the
  plugin installed (every plugin of the environment loads), with ``-p
  no:restore``, and with plugin autoloading off (pytest alone: a plain
  environment). Median of ``--repeats`` runs each;
- **the embedded default grid** (``pytest benches/``, the README's main
  command) serially, with ``-n auto`` (given a ``--restore-*`` option, and as
  typed without one) and with ``-n 2``, each on an empty cache and then on
  the warm one, with the time from the start to the first ``restore:``
  progress line.

Every run is a fresh ``python -m pytest`` process in the project root, with
its own cache directory so runs do not share prepared data unless they are
meant to (the warm runs reuse their cold run's cache).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class GridRun:
    """One timed grid run."""

    seconds: float
    first_progress: float | None  # seconds from the start to the first "restore:" line
    returncode: int


def _time(cmd: Sequence[str], cwd: Path, env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, check=False, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"bench: {' '.join(cmd)} exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return seconds


def unrelated_run(repeats: int) -> dict[str, float]:
    """Median wall time of a one-test pytest run, by environment."""
    scratch = Path(tempfile.mkdtemp(prefix="restore-unrelated-"))
    (scratch / "test_one.py").write_text("def test_one():\n    assert 1 + 1 == 2\n", encoding="utf-8")
    base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_one.py"]
    plain_env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    variants: dict[str, tuple[list[str], dict[str, str] | None]] = {
        "plugin installed": (base, None),
        "-p no:restore": (base + ["-p", "no:restore"], None),
        # what is left once neither this plugin nor those of its dependencies load
        "-p no:restore, syrupy, anyio, xdist": (
            base + ["-p", "no:restore", "-p", "no:syrupy", "-p", "no:anyio", "-p", "no:xdist", "-p", "no:xdist.looponfail"],
            None,
        ),
        "plain (no plugins autoloaded)": (base, plain_env),
    }
    out: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):  # interleaved, so a burst of load hits every variant alike
        for name, (cmd, env) in variants.items():
            out[name].append(_time(cmd, scratch, env))
    return {name: statistics.median(times) for name, times in out.items()}


def grid_run(extra: Sequence[str], cache: Path, report: Path | None) -> GridRun:
    """The README's main command with ``extra`` arguments, timed, with its first progress line.

    With ``report`` ``None``, no ``--restore-*`` option at all (the README's command as typed):
    run in a scratch directory holding a copy of the grid module, where the report may land.
    """
    if report is None:
        cwd = Path(tempfile.mkdtemp(prefix="restore-readme-"))
        shutil.copy(ROOT / "benches" / "test_grid.py", cwd / "test_grid.py")
        cmd = [sys.executable, "-m", "pytest", "test_grid.py", "-q", "-o", f"cache_dir={cache}", *extra]
    else:
        cwd = ROOT
        cmd = [sys.executable, "-m", "pytest", "benches/", "-q", "-o", f"cache_dir={cache}",
               f"--restore-report-dir={report}", *extra]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    first: list[float] = []
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if not first and line.startswith("restore:"):
                first.append(time.perf_counter() - start)

    reader = threading.Thread(target=read)
    reader.start()
    code = proc.wait()
    reader.join()
    seconds = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"bench: {' '.join(cmd)} exited {code}:\n{''.join(lines)[-3000:]}")
    return GridRun(seconds, first[0] if first else None, code)


def main(argv: Sequence[str] | None = None) -> int:
    """Run every measurement and print the table."""
    parser = argparse.ArgumentParser(prog="python benches/bench_startup.py", description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="runs per variant of the unrelated test [7]")
    parser.add_argument("--work-dir", default="", help="where caches and reports go [a temporary directory]")
    args = parser.parse_args(argv)
    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="restore-startup-"))
    rows: list[tuple[str, str, str]] = []

    unrelated = unrelated_run(args.repeats)
    plain = unrelated["plain (no plugins autoloaded)"]
    for name, seconds in unrelated.items():
        note = f"+{seconds - plain:.2f} s over plain; median of {args.repeats}"
        rows.append((f"unrelated one-test run: {name}", f"{seconds:.2f} s", note))

    runs: dict[str, GridRun] = {}
    modes = (
        ("serial", ["-p", "no:xdist"], True),
        ("-n auto", ["-n", "auto"], True),  # a restore option is given: one process
        ("-n auto, no restore option", ["-n", "auto"], False),  # found at collection: one worker
        ("-n 2", ["-n", "2"], True),  # as asked: two workers
    )
    for mode, extra, with_option in modes:
        key = "".join(c for c in mode if c.isalnum())
        cache = work / f"cache-{key}"
        for state in ("cold", "warm"):
            run = grid_run(extra, cache, work / f"report-{key}-{state}" if with_option else None)
            runs[f"{mode} {state}"] = run
            first = f"{run.first_progress:.1f} s" if run.first_progress is not None else "none"
            rows.append((f"embedded default grid, {mode}, {state} cache", f"{run.seconds:.1f} s",
                         f"first progress line after {first}"))
    for mode, _extra, _with_option in modes[1:]:
        for state in ("cold", "warm"):
            ratio = runs[f"{mode} {state}"].seconds / runs[f"serial {state}"].seconds
            rows.append((f"{mode} / serial, {state}", f"{ratio:.2f}", "below 1: faster than serial"))

    width = max(len(r[0]) for r in rows)
    value = max(len(r[1]) for r in rows)
    print(f"bench_startup ({os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f})")
    for what, figure, note in rows:
        print(f"{what:<{width}}  {figure:>{value}}  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
