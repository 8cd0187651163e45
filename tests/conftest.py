"""Shared fixtures: the main job's report on the embedded default, built once per test run."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

# The plugin imports its session (and numpy) only once a run is an audit. pytester's in-process
# runs drop the modules first imported inside them, and numpy cannot be imported twice in one
# process: load it here, in the outer session, as the plugin did at load time before.
import pytest_restore.plugin.session  # noqa: F401
from pytest_restore.memory import kernels

ROOT = Path(__file__).resolve().parent.parent

# numba imports its typing registries on the first compiled call. Make that call here, before
# pytester's in-process runs snapshot sys.modules: a registry imported inside such a run is
# dropped when the snapshot is restored, and importing it again later fails with
# "cannot augment Function(...)".
kernels.fact_counts("warm up")


@pytest.fixture(scope="session")
def embedded_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report directory of ``pytest benches/ --restore-ablations`` on the embedded default, fake models.

    This is the README's main job (with the ablations), run for real in a subprocess. Under xdist
    every worker asks for it; the first one runs it under a file lock and the
    others reuse its report.
    """
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the directory all workers of this run share
    out = shared / "embedded-report"
    with open(shared / "embedded-report.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "cells.csv").exists():
            result = subprocess.run(
                [sys.executable, "-m", "pytest", "benches/", "-p", "no:xdist", "-q", "--restore-ablations",
                 "--restore-report-dir", str(out)],
                cwd=ROOT,
                capture_output=True,
                check=False,
                text=True,
            )
            if not (out / "cells.csv").exists():
                pytest.fail(f"the main job wrote no report:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
            (out / "pytest-output.txt").write_text(result.stdout + result.stderr)
            (out / "pytest-exit-code.txt").write_text(str(result.returncode))
    return out
