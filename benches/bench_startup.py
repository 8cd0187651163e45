"""What a newcomer waits for: ``python benches/bench_startup.py``.

Prints one table:

- **an unrelated pytest run**: a one-test file in a scratch directory. The
  issue's figure is a user's environment with the plugin installed against a
  plain one: two fresh virtual environments (built once under ``--venvs``,
  reused when already there), one with ``pip install <this repo>`` (no
  extras) and one with the same pytest alone. With ``--plain-env proxy``
  (offline, or no time to build them) this environment stands in for both:
  the plugin with xdist, against pytest with neither (syrupy's and anyio's
  plugins, which only the extras bring, off in both). Then this environment
  as it is (every plugin installed here loads), with ``-p no:restore``,
  without the plugins of the dependencies as well, and with no plugin
  autoloaded. Median of ``--repeats`` runs each, interleaved;
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


#: the pytest11 plugins of this package's extras (syrupy: [snapshot]; anyio, through openai: [openai])
EXTRAS_PLUGINS = ("-p", "no:syrupy", "-p", "no:anyio")
XDIST_PLUGINS = ("-p", "no:xdist", "-p", "no:xdist.looponfail")


def _outside_env() -> dict[str, str]:
    """This environment without PYTHONPATH: a source tree on it would lend its metadata (and its
    pytest11 entry point) to a fresh venv, to pip's resolver and to pytest alike."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def _venv_python(venv: Path) -> Path:
    return venv / ("Scripts" if os.name == "nt" else "bin") / "python"


def _build_venv(venv: Path, *requirements: str) -> Path:
    """A fresh virtual environment holding ``requirements`` (reused when a build already finished there)."""
    python = _venv_python(venv)
    done = venv / "restore-bench-built"
    if not done.exists():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *requirements], check=True, env=_outside_env())
        done.write_text(" ".join(requirements), encoding="utf-8")
    return python


def user_environments(where: Path) -> tuple[Path, Path]:
    """Pythons of two fresh environments: this package installed (no extras), and its pytest alone."""
    print(f"bench: building (or reusing) the user's and the plain environment under {where}", file=sys.stderr)
    installed = _build_venv(where / "installed", str(ROOT))
    version = subprocess.run([str(installed), "-c", "import pytest; print(pytest.__version__)"],
                             check=True, capture_output=True, text=True, env=_outside_env()).stdout.strip()
    plain = _build_venv(where / "plain", f"pytest=={version}")
    return installed, plain


def unrelated_run(repeats: int, venvs: Path | None) -> tuple[dict[str, float], str, str]:
    """Median wall time of a one-test pytest run, by environment; then the installed and the plain row's names.

    ``venvs`` ``None``: the proxy in this environment instead of two fresh ones.
    """
    scratch = Path(tempfile.mkdtemp(prefix="restore-unrelated-"))
    (scratch / "test_one.py").write_text("def test_one():\n    assert 1 + 1 == 2\n", encoding="utf-8")
    args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "test_one.py"]
    base = [sys.executable, *args]
    variants: dict[str, tuple[list[str], dict[str, str] | None]] = {}
    if venvs is not None:
        installed_python, plain_python = user_environments(venvs)
        clean = _outside_env()
        installed, plain = "fresh venv, pytest-restore installed (no extras)", "fresh venv, pytest alone (plain)"
        variants[installed] = ([str(installed_python), *args], clean)
        variants[plain] = ([str(plain_python), *args], clean)
    else:
        installed = "proxy: this env, restore and xdist only (no extras' plugins)"
        plain = "proxy: this env, none of restore, xdist, extras' plugins"
        variants[installed] = (base + list(EXTRAS_PLUGINS), None)
        variants[plain] = (base + ["-p", "no:restore", *EXTRAS_PLUGINS, *XDIST_PLUGINS], None)
    variants |= {
        "this env, as installed": (base, None),
        "this env, -p no:restore": (base + ["-p", "no:restore"], None),
        # what is left once neither this plugin nor those of its dependencies load
        "this env, -p no:restore, syrupy, anyio, xdist": (
            base + ["-p", "no:restore", *EXTRAS_PLUGINS, *XDIST_PLUGINS], None),
        "this env, no plugin autoloaded": (base, dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")),
    }
    out: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):  # interleaved, so a burst of load hits every variant alike
        for name, (cmd, env) in variants.items():
            out[name].append(_time(cmd, scratch, env))
    return {name: statistics.median(times) for name, times in out.items()}, installed, plain


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
    parser.add_argument("--plain-env", choices=("venv", "proxy"), default="venv",
                        help="the plain environment: two fresh venvs (needs the package registry), or "
                        "-p no:... in this one [venv]")
    parser.add_argument("--venvs", default="", help="where the fresh venvs are built, or reused if already "
                        "built (delete them after changing the package) [WORK_DIR/venvs]")
    parser.add_argument("--unrelated-only", action="store_true", help="only the unrelated one-test run")
    args = parser.parse_args(argv)
    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="restore-startup-"))
    rows: list[tuple[str, str, str]] = []

    venvs = None if args.plain_env == "proxy" else Path(args.venvs) if args.venvs else work / "venvs"
    unrelated, installed, plain = unrelated_run(args.repeats, venvs)
    for name, seconds in unrelated.items():
        rows.append((f"unrelated one-test run: {name}", f"{seconds:.2f} s", f"median of {args.repeats}"))
    over_plain = unrelated[installed] - unrelated[plain]
    rows.append(("unrelated run, plugin installed - plain environment", f"{over_plain:+.2f} s",
                 f"the bar is +0.10 s ({'met' if over_plain <= 0.1 else 'NOT met'}); {args.plain_env}"))
    this_env = unrelated["this env, as installed"] - unrelated["this env, -p no:restore"]
    rows.append(("this env: as installed - -p no:restore (the plugin alone)", f"{this_env:+.2f} s", ""))

    runs: dict[str, GridRun] = {}
    if args.unrelated_only:
        modes: tuple[tuple[str, list[str], bool], ...] = ()
    else:
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
