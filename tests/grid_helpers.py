"""What the tests that run the audit grid through pytester share."""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The small hand-checkable dataset (seven evidence questions and one abstention question).
TINY = ROOT / "fixtures" / "tiny.json"
#: The grid module, as users write it: the project's own ``benches/test_grid.py``.
GRID = (ROOT / "benches" / "test_grid.py").read_text(encoding="utf-8")


#: A conftest for child runs with real-model options: retry backoff in milliseconds, not seconds
#: (Retry-After is still honoured); put back when the run ends, for in-process runs.
FAST_RETRIES = """
from pytest_restore.models.openai_chat import OpenAIChatModel

_DEFAULTS = dict(OpenAIChatModel.__init__.__kwdefaults__)
OpenAIChatModel.__init__.__kwdefaults__.update(backoff_base=0.01, backoff_cap=0.05)


def pytest_unconfigure(config):
    # an in-process run must not leave the fast backoff to the tests that run after it
    OpenAIChatModel.__init__.__kwdefaults__.update(_DEFAULTS)
"""


def small_args(*, bootstrap: int = 500, family_checks: str | None = "report") -> list[str]:
    """Options for a quick grid on the tiny fixture.

    Seven questions have no statistical power, so by default the families'
    expectations are reported rather than failing the run.
    """
    # ``=``: pytest picks its rootdir before plugin options are known, and would take a
    # separate PATH argument for a test path (and the project's rootdir for this run's)
    args = [f"--restore-data={TINY}", "--restore-budgets", "600,300,100", "--restore-bootstrap", str(bootstrap)]
    if family_checks is not None:
        args += ["--restore-family-checks", family_checks]
    return args


def report_file(path: Path) -> bytes:
    """A report file's bytes, summary.json without its provenance (each run's own id and start time)."""
    if path.name != "summary.json":
        return path.read_bytes()
    summary = json.loads(path.read_text(encoding="utf-8"))
    summary.pop("provenance", None)
    return json.dumps(summary, indent=2, sort_keys=True).encode()


@dataclass(frozen=True)
class ChildRun:
    """What a child pytest left: its report directory, its exit code and its output."""

    report: Path
    ret: int
    output: str

    def assert_passed(self, passed: int) -> None:
        """Exit 0 (nothing failed or errored) with exactly ``passed`` tests passed."""
        assert self.ret == 0 and re.search(rf"\b{passed} passed\b", self.output), self.output[-3000:]


def assert_progress_before_first_result(lines: list[str]) -> None:
    """A ``restore: `` progress line comes before the first ``PASSED`` of a ``-v`` run's output."""
    first_result = next(i for i, line in enumerate(lines) if "PASSED" in line)
    progress = [i for i, line in enumerate(lines) if line.startswith("restore: ")]
    assert progress and progress[0] < first_result, "\n".join(lines)


def child_env() -> dict[str, str]:
    """The environment of a child grid run: no xdist worker identity, no OpenAI settings leak in."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PYTEST_XDIST"))}


def run_child(
    args: list[str], cwd: Path, report: Path, env: dict[str, str] | None = None, *, name_report_dir: bool = True
) -> ChildRun:
    """Run ``python -m pytest *args`` in ``cwd`` writing its report to ``report``; keep its output and exit code beside it.

    ``env`` adds to ``child_env()`` (an API key, say). ``name_report_dir=False``
    passes no ``--restore-report-dir`` (a run with no ``--restore-*`` option at
    all): the run writes ``cwd/restore-report``, which is then moved to ``report``.
    """
    named = ["--restore-report-dir", str(report)] if name_report_dir else []
    result = subprocess.run(
        [sys.executable, "-m", "pytest", *args, *named],
        cwd=cwd,
        env={**child_env(), **(env or {})},
        capture_output=True,
        check=False,
        text=True,
        timeout=600,
    )
    output = result.stdout + result.stderr
    if not name_report_dir and (cwd / "restore-report").is_dir():
        (cwd / "restore-report").rename(report)
    (report.parent / f"{report.name}-output.txt").write_text(output)
    (report.parent / f"{report.name}-exit-code.txt").write_text(str(result.returncode))
    return ChildRun(report, result.returncode, output)


def read_child(report: Path) -> ChildRun:
    """The ``ChildRun`` that ``run_child`` left beside the report directory ``report``."""
    return ChildRun(
        report,
        int((report.parent / f"{report.name}-exit-code.txt").read_text()),
        (report.parent / f"{report.name}-output.txt").read_text(),
    )


def shared_run(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]) -> Path:
    """The directory ``name`` of this test run, filled by ``build`` once for every xdist worker.

    The first caller builds it under a file lock; later callers (other
    workers) wait for the lock and reuse what it left. A failed build leaves
    no ``done`` mark, so each caller that needs it tries again and fails
    with its own message.
    """
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the directory all workers of this run share
    out = shared / name
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "done").exists():
            out.mkdir(exist_ok=True)
            build(out)
            (out / "done").write_text("")
    return out
